"""The nerf experiment: a radiance field trained from posed images.

Modules: `config` (the `[data]` and `[nerf]` tables), `blender` (the Blender-format reader,
camera rays), `scene` (the shipped procedural scene and its generator), `model`
(`VoxelNeRF`, the worked example built on the library's rendering parts), `experiment`
(`NerfExperiment`), `pictures` (test_views.png, curves.png, turntable.gif), `ngp` (the
instant-ngp / nerfstudio `transforms.json` reader), `cameras` (per-view intrinsics, lens
distortion), `to_ngp` (a Blender scene rewritten as transforms.json), `export` (the
density's level set as a mesh, for `python -m train.export`), `view` (any camera's render:
`grid-train view` and `grid-train render`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..dependencies import INSTALL_TRAIN, require
from ..schema import ExperimentSpec
from .config import DataConfig, NerfConfig, memory, validate

if TYPE_CHECKING:
    from ..config import Config


def dependencies(config: Config) -> None:
    require(
        "PIL",
        key="experiment",
        needs="radiance fields (their PNG images)",
        install=INSTALL_TRAIN,
    )


SPEC = ExperimentSpec(
    name="nerf",
    summary="a radiance field from the posed images of `[data]`, model in `[nerf]`",
    sections={"data": DataConfig, "nerf": NerfConfig},
    validate=validate,
    experiment="NerfExperiment",
    unit="rays",
    files=("test_views.png", "turntable.gif"),
    dependencies=dependencies,
    memory=memory,
    export="export",
    view="view",
)
