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
INSTALL_SDF = "pip install '.[sdf]'"


def require(
    module: str,
    *,
    key: str,
    needs: str,
    install: str,
    turn_off: str = "",
    package: str = "",
) -> None:
    """Import `module` or raise MissingDependencyError naming the key that needs it.

    Args:
        module: the importable name, e.g. "matplotlib".
        key: the config key that turns the feature on, e.g. "output.pictures".
        needs: what the feature is, e.g. "pictures (slices.png, curves.png)".
        install: the command that installs it.
        turn_off: the option that turns the feature off instead, if there is one.
        package: the name it is installed by, when not the module's (e.g. scikit-image).
    """
    try:
        importlib.import_module(module)
    except ImportError as error:
        name = f"{package} ({module})" if package else module
        raise MissingDependencyError(
            f"{key}: {needs} need {name}, which cannot be imported ({error}); "
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
    if config.experiment == "sdf":
        if config.output.mesh:
            require(
                "skimage",
                package="scikit-image",
                key="output.mesh",
                needs="the mesh (marching cubes: mesh.ply, mesh.png) and the Chamfer distances",
                install=INSTALL_SDF,
                turn_off="--set output.mesh=false",
            )
        p = config.points
        if p.kind == "file" and p.path.lower().endswith(".ply"):
            require(
                "plyfile",
                key="points.path",
                needs=".ply point clouds (use .npy or .xyz without it)",
                install=INSTALL_SDF,
            )
    if config.output.pictures:
        require(
            "matplotlib",
            key="output.pictures",
            needs="pictures (slices.png, mesh.png or test_views.png; curves.png)",
            install=INSTALL_TRAIN,
            turn_off="--set output.pictures=false",
        )
