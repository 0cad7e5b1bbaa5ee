"""The field experiment: a `VoxelGrid` fitted to a target field by points drawn in the box.

Modules: `config` (the `[target]` table), `targets` (the fields: procedural density,
analytic SDFs, a `.npy` volume), `experiment` (`FieldExperiment`: batch, loss, evaluation),
`pictures` (slices.png, curves.png), `view` (the slices in `grid-train view`).
"""

from ..schema import ExperimentSpec
from .config import KIND_KEYS, TargetConfig, memory, validate

SPEC = ExperimentSpec(
    name="field",
    summary="a VoxelGrid against `[target]`",
    sections={"target": TargetConfig},
    validate=validate,
    experiment="FieldExperiment",
    unit="points",
    files=("slices.png",),
    kinded={"target": KIND_KEYS},
    memory=memory,
    view="view",
)
