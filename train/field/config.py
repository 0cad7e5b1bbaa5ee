"""The field experiment's table `[target]`: what field is fitted, and its checks."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..errors import ConfigError, InputFileError, plural, read_input
from ..schema import Need, check_kind_keys, choice, doc, grid_need, positive, triple

if TYPE_CHECKING:
    from ..config import Config

TARGET_KINDS = ("density", "sphere", "torus", "box", "npy")
SDF_KINDS = ("sphere", "torus", "box")
#: The keys of [target] that each kind reads (besides `kind`).
KIND_KEYS: dict[str, tuple[str, ...]] = {
    "density": ("blobs", "frequency", "thickness", "detail", "seed"),
    "sphere": ("radius", "center"),
    "torus": ("major_radius", "minor_radius", "center"),
    "box": ("half_size", "center"),
    "npy": ("path", "axes"),
}


@dataclass
class TargetConfig:
    kind: str = doc(
        "The field to fit: `density` (procedural), `sphere`, `torus`, `box` "
        "(signed distances) or `npy` (a volume from a file).",
        "density",
    )
    blobs: int = doc("density: number of Gaussian blobs making the envelope.", 16)
    frequency: float = doc(
        "density: gyroid frequency, in periods across a width of 2 (finer: higher).", 5.0
    )
    thickness: float = doc("density: membrane thickness, in gyroid units (finer: lower).", 0.4)
    detail: float = doc(
        "density: share of the envelope carved into membranes, in [0, 1] (0: blobs only).",
        0.8,
    )
    seed: int = doc("density: seed of the blob layout (independent of the training seed).", 0)
    radius: float = doc("sphere: radius.", 0.6)
    center: list[float] = doc("sphere, torus, box: centre of the shape.", [0.0, 0.0, 0.0])
    major_radius: float = doc("torus: distance from the centre to the tube's axis.", 0.55)
    minor_radius: float = doc("torus: radius of the tube (the torus lies in the xy-plane).", 0.2)
    half_size: list[float] = doc("box: half extents along x, y, z.", [0.5, 0.35, 0.25])
    path: str = doc(
        "npy: path of a 3-D `.npy` array (relative paths: from the current directory). "
        "It spans `grid.bounds`, its first and last samples on the box faces.",
        "",
    )
    axes: str = doc(
        "npy: axis order of the array: `xyz` (shape [X, Y, Z], first index is x) or "
        "`zyx` (shape [D, H, W] as F.grid_sample, first index is z).",
        "xyz",
    )


def validate(c: Config, explicit: dict[str, set[str]]) -> None:
    """Check [target] and the field experiment's use of the shared tables."""
    t = c.target
    choice(t.kind, TARGET_KINDS, "target.kind")
    check_kind_keys("target", t.kind, explicit.get("target", set()), KIND_KEYS)
    if t.blobs < 1:
        raise ConfigError(f"target.blobs: expected an integer >= 1, got {t.blobs}")
    positive(t.frequency, "target.frequency")
    positive(t.thickness, "target.thickness")
    if not 0 <= t.detail <= 1:
        raise ConfigError(f"target.detail: expected a number in [0, 1], got {t.detail}")
    positive(t.radius, "target.radius")
    triple(t.center, "target.center")
    positive(t.major_radius, "target.major_radius")
    positive(t.minor_radius, "target.minor_radius")
    triple(t.half_size, "target.half_size")
    for i, h in enumerate(t.half_size):
        positive(h, f"target.half_size[{i}]")
    choice(t.axes, ("xyz", "zyx"), "target.axes")
    if t.kind == "npy":
        t.path = str(_check_npy(t.path))
    if c.grid.init == "points":
        raise ConfigError("grid.init: 'points' is for the sdf experiment only")
    if c.grid.backend != "native":
        raise ConfigError("grid.backend: the field experiment uses 'native' only")
    if c.train.surface_fraction > 0 and t.kind not in SDF_KINDS:
        raise ConfigError(
            f"train.surface_fraction: near-surface sampling needs an SDF target "
            f"({', '.join(SDF_KINDS)}), but target.kind = {t.kind!r}"
        )


def _check_npy(path: str) -> Path:
    """The resolved path of a readable 3-D numeric `.npy` array (only its header is read)."""
    if not path:
        raise ConfigError("target.path: required when target.kind = 'npy' (a .npy file)")
    file = Path(path).expanduser().resolve()
    array = read_input(
        file,
        lambda f: np.load(f, mmap_mode="r", allow_pickle=False),
        ".npy array",
        key="target.path",
    )
    if array.ndim != 3 or min(array.shape) < 2:
        raise InputFileError(
            file,
            f"expected a 3-D array with every size >= 2, got shape {array.shape}",
            key="target.path",
        )
    if not (np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.integer)):
        raise InputFileError(
            file, f"expected a numeric array, got dtype {array.dtype}", key="target.path"
        )
    return file


#: Bytes a step certainly allocates per training point: the point (12), its target
#: value, the grid's value and the residual (4 each), and their gradients (8).
POINT_BYTES = 32
#: Bytes per held-out point: the point (12) and its target value (4).
EVAL_POINT_BYTES = 16


def memory(c: Config) -> list[Need]:
    """What a field run allocates (see `train.memory`): the grid, the batch, the
    held-out points."""
    b, e = c.train.batch_size, c.eval.points
    return [
        grid_need(c, 1),
        Need("train.batch_size", f"{plural(b, 'point')} per step", b * POINT_BYTES),
        Need("eval.points", plural(e, "held-out point"), e * EVAL_POINT_BYTES),
    ]
