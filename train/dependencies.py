"""Optional packages, checked at start-up for the features a config turns on.

A run that needs a missing package must say so before it trains, not die at the
end: `check_dependencies` runs before any work (in the command line and in `run`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from .errors import MissingDependencyError

if TYPE_CHECKING:
    from .config import Config


def install_hint(extra: str) -> str:
    """How to install an extra: the distribution is densegrid; in a checkout the same extra
    installs from '.', built against the installed torch (--no-build-isolation: the build
    needs it, and must not fetch another)."""
    return (
        f"pip install 'densegrid[{extra}]' (from a checkout: pip install --no-build-isolation "
        f"-e '.[{extra}]')"
    )


INSTALL_TRAIN = install_hint("train")
INSTALL_SDF = install_hint("sdf")
INSTALL_VIEW = install_hint("view")
INSTALL_VIDEO = install_hint("video")
INSTALL_TENSORBOARD = install_hint("tensorboard")


def require(
    module: str,
    *,
    key: str,
    needs: str,
    install: str,
    turn_off: str = "",
    package: str = "",
    singular: bool = False,
) -> None:
    """Import `module` or raise MissingDependencyError naming the key that needs it.

    Args:
        module: the importable name, e.g. "matplotlib".
        key: the config key that turns the feature on, e.g. "output.pictures".
        needs: what the feature is, e.g. "pictures (slices.png, curves.png)": the subject
            of "need" ("needs" with `singular`, e.g. "the viewer").
        install: the command that installs it.
        turn_off: the option that turns the feature off instead, if there is one.
        package: the name it is installed by, when not the module's (e.g. imageio-ffmpeg).
    """
    try:
        importlib.import_module(module)
    except ImportError as error:
        name = f"{package} ({module})" if package else module
        raise MissingDependencyError(
            f"{key}: {needs} {'needs' if singular else 'need'} {name}, which cannot be "
            f"imported ({error}); "
            f"install it with {install}"
            + (f", or turn them off with {turn_off}" if turn_off else "")
        ) from None


def check_dependencies(config: Config) -> None:
    """Raise MissingDependencyError if a feature the config turns on lacks its package:
    the experiment's own first (its spec's `dependencies`), then the pictures', then
    TensorBoard's."""
    from .experiments import specs  # the experiments import `require` from here

    own = specs()[config.experiment].dependencies
    if own is not None:
        own(config)
    if config.output.pictures:
        require(
            "matplotlib",
            key="output.pictures",
            needs="pictures (slices.png, mesh.png or test_views.png; curves.png)",
            install=INSTALL_TRAIN,
            turn_off="--set output.pictures=false",
        )
    if config.output.tensorboard:
        require(
            "tensorboard",
            key="output.tensorboard",
            needs="TensorBoard event files",
            install=INSTALL_TENSORBOARD,
            turn_off="--set output.tensorboard=false",
        )
