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

INSTALL_TRAIN = "pip install '.[train]'"


def require(module: str, *, key: str, needs: str, install: str, turn_off: str = "") -> None:
    """Import `module` or raise MissingDependencyError naming the key that needs it.

    Args:
        module: the importable name, e.g. "matplotlib".
        key: the config key that turns the feature on, e.g. "output.pictures".
        needs: what the feature is, e.g. "pictures (slices.png, curves.png)".
        install: the command that installs it.
        turn_off: the option that turns the feature off instead, if there is one.
    """
    try:
        importlib.import_module(module)
    except ImportError as error:
        raise MissingDependencyError(
            f"{key}: {needs} need {module}, which cannot be imported ({error}); "
            f"install it with {install}"
            + (f", or turn them off with {turn_off}" if turn_off else "")
        ) from None


def check_dependencies(config: Config) -> None:
    """Raise MissingDependencyError if a feature the config turns on lacks its package."""
    if config.experiment == "nerf":
        require(
            "PIL",
            key="experiment",
            needs="radiance fields (their PNG images)",
            install=INSTALL_TRAIN,
        )
    if config.output.pictures:
        require(
            "matplotlib",
            key="output.pictures",
            needs="pictures (slices.png or test_views.png, curves.png)",
            install=INSTALL_TRAIN,
            turn_off="--set output.pictures=false",
        )
