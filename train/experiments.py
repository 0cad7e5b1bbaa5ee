"""The registry of experiments: the value of the config key `experiment` -> its package.

Each package `train/<package>/` holds one experiment whole: its tables (`config.py`), data,
model, evaluation and pictures, and `SPEC` (a `train.schema.ExperimentSpec`) in its
`__init__.py`. Adding an experiment is writing such a package and one line here; nothing
else in `train/` names an experiment.
"""

from __future__ import annotations

import importlib
from functools import cache

from .schema import ExperimentSpec

REGISTRY: dict[str, str] = {
    "field": "field",  # a VoxelGrid fitted to a target field
    "sdf": "sdf",  # a signed distance grid from an oriented point cloud
    "nerf": "nerf",  # a radiance field from posed images
}
#: The experiment a config without `experiment` runs.
DEFAULT = "field"
#: The experiment of a format-1 checkpoint (written before checkpoints named theirs).
FORMAT_1_KIND = "field"


@cache
def specs() -> dict[str, ExperimentSpec]:
    """name -> spec, in registry order (imports each package's light `__init__`)."""
    found = {}
    for name, package in REGISTRY.items():
        spec = importlib.import_module(f".{package}", __package__).SPEC
        if spec.name != name:
            raise RuntimeError(f"train/{package}: SPEC.name is {spec.name!r}, registered {name!r}")
        found[name] = spec
    return found


def experiment_class(name: str) -> type:
    """The class that trains experiment `name` (imports its package's experiment.py)."""
    module = importlib.import_module(f".{REGISTRY[name]}.experiment", __package__)
    return getattr(module, specs()[name].experiment)
