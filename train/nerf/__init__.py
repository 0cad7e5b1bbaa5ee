"""The nerf experiment: a radiance field trained from posed images.

What lives where (each subpackage's own docstring says more):

* here, the experiment: `config` (the `[nerf]` table and a whole config's checks; it also
  reads `[multires]`, `train.multires_config`), `data_config` (the `[data]` table), `memory`
  (what a run allocates, checked before it starts), `choices` (the names their options
  choose from, shared with the model), `optimizer` (parameter groups, Adam, decay),
  `scene_path` (the capture at `data.path`, generated there when asked), `experiment`
  (`NerfExperiment`, the loop's hooks), `evaluation` (floaters, time to a PSNR), `pictures`
  (test_views.png, curves.png, turntable.gif), `export` (the density's level set as a mesh,
  for `python -m train.export`), `view` (any camera's render: `grid-train view` and
  `grid-train render`);
* `model/`: `VoxelNeRF`, its renderers (which take the functions the model hands them),
  losses, per-image appearance, the fitted box;
* `data/`: the Blender and instant-ngp / nerfstudio readers, cameras, the training rays;
* `scenes/`: the project's procedural and scanned scenes (`python -m
  train.nerf.scenes.generate`);
* `capture/`: poses from photos (`python -m train.nerf.capture.poses`), their orientation,
  a box from the cameras (`python -m train.nerf.capture.bounds`).

Floors, lowest first (a module imports only from floors below its own): `data`, `choices`,
`evaluation` -> `scenes` (and `train.mesh`), `capture` -> `data_config` -> `config`, `memory` ->
`scene_path`, `model` (which reads `config` for annotations only) -> `optimizer`,
`pictures` -> `experiment` -> `export` -> `view`.
Shared code of `train` imports this package only through the registry
(`train.experiments`), by the names in `SPEC`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..dependencies import INSTALL_TRAIN, require
from ..multires_config import MultiresConfig
from ..schema import ExperimentSpec
from .config import NerfConfig, validate
from .data_config import DataConfig
from .memory import memory

if TYPE_CHECKING:
    from ..config import Config

__all__ = ["SPEC", "dependencies"]


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
    sections={"data": DataConfig, "nerf": NerfConfig, "multires": MultiresConfig},
    validate=validate,
    experiment="NerfExperiment",
    unit="rays",
    files=("test_views.png", "turntable.gif"),
    dependencies=dependencies,
    memory=memory,
    export="export",
    view="view",
)
