"""Experiment configuration: schema with defaults, TOML parsing, dotted overrides, validation.

A config is a TOML file with three top-level keys (`experiment`, `seed`, `device`) and the
tables `[target]`, `[points]`, `[data]`, `[nerf]`, `[grid]`, `[train]`, `[eval]`, `[output]`.
Every key has a default, so an empty file is a valid experiment. `experiment` picks what is
fitted: `field` (a VoxelGrid against a target field, table `[target]`), `sdf` (a signed
distance grid from an oriented point cloud, table `[points]`) or `nerf` (a radiance field
from posed images, tables `[data]` and `[nerf]`); a table the chosen experiment does not
read is an error naming it. `[target]` and `[points]` have a `kind`, and each kind reads
its own keys: setting another kind's key is an error naming it. `--set section.key=value`
overrides one key; the value is read as a TOML value (`64`, `1e-2`, `[32, 32, 64]`,
`true`) and, if that fails, as a bare string (`--set target.kind=torus`).

Every error is a `ConfigError` (defined in `errors.py`) whose message starts with the
dotted key; a file that cannot be used is an `InputFileError` naming the file too.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import tomllib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .errors import ConfigError, InputFileError, read_input


def _doc(text: str, default: Any) -> Any:
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata={"doc": text})
    return field(default=default, metadata={"doc": text})


# ---- schema -----------------------------------------------------------------------------
# The `doc` strings feed README.md's config reference (see `reference_table`).

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
POINTS_KINDS = ("torus", "sphere", "box", "file")
#: The keys of [points] that each kind reads (besides `kind`).
POINTS_KIND_KEYS: dict[str, tuple[str, ...]] = {
    "sphere": ("count", "seed", "radius", "center"),
    "torus": ("count", "seed", "major_radius", "minor_radius", "center"),
    "box": ("count", "seed", "half_size", "center"),
    "file": ("path",),
}
POINT_FILE_SUFFIXES = (".npy", ".xyz", ".ply")
INTERPOLATIONS = ("linear", "smoothstep")


@dataclass
class TargetConfig:
    kind: str = _doc(
        "The field to fit: `density` (procedural), `sphere`, `torus`, `box` "
        "(signed distances) or `npy` (a volume from a file).",
        "density",
    )
    blobs: int = _doc("density: number of Gaussian blobs making the envelope.", 16)
    frequency: float = _doc(
        "density: gyroid frequency, in periods across a width of 2 (finer: higher).", 5.0
    )
    thickness: float = _doc("density: membrane thickness, in gyroid units (finer: lower).", 0.4)
    detail: float = _doc(
        "density: share of the envelope carved into membranes, in [0, 1] (0: blobs only).",
        0.8,
    )
    seed: int = _doc("density: seed of the blob layout (independent of the training seed).", 0)
    radius: float = _doc("sphere: radius.", 0.6)
    center: list[float] = _doc("sphere, torus, box: centre of the shape.", [0.0, 0.0, 0.0])
    major_radius: float = _doc("torus: distance from the centre to the tube's axis.", 0.55)
    minor_radius: float = _doc("torus: radius of the tube (the torus lies in the xy-plane).", 0.2)
    half_size: list[float] = _doc("box: half extents along x, y, z.", [0.5, 0.35, 0.25])
    path: str = _doc(
        "npy: path of a 3-D `.npy` array (relative paths: from the current directory). "
        "It spans `grid.bounds`, its first and last samples on the box faces.",
        "",
    )
    axes: str = _doc(
        "npy: axis order of the array: `xyz` (shape [X, Y, Z], first index is x) or "
        "`zyx` (shape [D, H, W] as F.grid_sample, first index is z).",
        "xyz",
    )


@dataclass
class PointsConfig:
    kind: str = _doc(
        "sdf: where the oriented points come from: `torus`, `sphere`, `box` (drawn uniformly "
        "on that shape's surface, with exact normals; the shape's exact SDF is then known "
        "and evaluated against) or `file` (`points.path`).",
        "torus",
    )
    count: int = _doc("sdf, shapes: number of surface points drawn.", 100000)
    seed: int = _doc(
        "sdf, shapes: seed of the surface points (independent of the training seed).", 0
    )
    radius: float = _doc("sdf, sphere: radius.", 0.6)
    center: list[float] = _doc("sdf, sphere, torus, box: centre of the shape.", [0.0, 0.0, 0.0])
    major_radius: float = _doc("sdf, torus: distance from the centre to the tube's axis.", 0.55)
    minor_radius: float = _doc(
        "sdf, torus: radius of the tube, < major_radius (the torus lies in the xy-plane).", 0.2
    )
    half_size: list[float] = _doc("sdf, box: half extents along x, y, z.", [0.5, 0.35, 0.25])
    path: str = _doc(
        "sdf, file: an oriented point cloud, `.npy` ([N, 6] rows x, y, z, nx, ny, nz, or a "
        "structured array with those fields), `.xyz` (text, `x y z nx ny nz` per line) or "
        "`.ply` (ascii or binary_little_endian, vertex properties x, y, z, nx, ny, nz). Every "
        "point must lie inside grid.bounds; normals are normalised (relative paths: from the "
        "current directory).",
        "",
    )


@dataclass
class DataConfig:
    path: str = _doc(
        "nerf: directory of a Blender-format (NeRF-synthetic) scene: "
        "`transforms_{train,val,test}.json` and the images they name (relative paths: from "
        "the current directory).",
        "data/nerf_scene",
    )
    generate: bool = _doc(
        "nerf: `path` holds the project's procedural scene; generate it there when it is "
        "missing or its scene.json does not match `scene_*` (set false for your own scene).",
        True,
    )
    scene_size: int = _doc("nerf, generated scene: image width and height in pixels.", 64)
    scene_train_views: int = _doc("nerf, generated scene: number of training views.", 100)
    scene_test_views: int = _doc("nerf, generated scene: number of test views.", 8)
    scene_seed: int = _doc("nerf, generated scene: seed of the camera poses.", 0)
    downscale: int = _doc("nerf: divide image width and height by this integer on loading.", 1)
    background: list[float] = _doc(
        "nerf: RGB in [0, 1] behind the scene (images composited onto it, and rendered with it).",
        [1.0, 1.0, 1.0],
    )
    test_views: int = _doc("nerf: evaluate on the first this many test views (0: all).", 0)


@dataclass
class NerfConfig:
    color_features: int = _doc("nerf: channels of the colour feature grid.", 12)
    hidden: int = _doc("nerf: width of the colour MLP's two hidden layers.", 128)
    view_frequencies: int = _doc("nerf: positional-encoding frequencies of the view direction.", 4)
    step_ratio: float = _doc("nerf: sample spacing along rays, in voxels of the current grid.", 0.5)
    alpha_init: float = _doc("nerf: alpha of an untrained voxel (sets the density shift).", 0.01)
    occupancy_threshold: float = _doc(
        "nerf: empty-space skipping, voxels whose alpha (and neighbours') is below this are "
        "skipped.",
        1e-4,
    )
    occupancy_start: int = _doc("nerf: first step at which the occupancy grid is refreshed.", 100)
    occupancy_every: int = _doc("nerf: refresh the occupancy grid every this many steps.", 100)
    weight_threshold: float = _doc(
        "nerf: samples whose compositing weight is below this skip the colour grid and MLP.",
        1e-4,
    )
    lr_density: float = _doc("nerf: Adam learning rate of the density grid.", 0.1)
    lr_color: float = _doc("nerf: Adam learning rate of the colour grid.", 0.1)
    lr_mlp: float = _doc("nerf: Adam learning rate of the colour MLP.", 0.001)
    lr_decay: float = _doc(
        "nerf: every learning rate is multiplied by this at the last step (exponential).", 0.1
    )


@dataclass
class GridConfig:
    resolution: int | list[int] = _doc(
        "Voxels per axis at the start: an int or [X, Y, Z], each >= 2.", 96
    )
    bounds: list[list[float]] = _doc(
        "World box [[xmin, ymin, zmin], [xmax, ymax, zmax]]; points are drawn inside it.",
        [[-1.0, -1.0, -1.0], [1.0, 1.0, 1.0]],
    )
    init: str = _doc(
        "Feature init: `zeros`, `uniform`, `normal`, or (sdf) `points`: each voxel's distance "
        "to its nearest point, negative where that point's normal faces away.",
        "zeros",
    )
    init_scale: float = _doc("Half-width (uniform) or std (normal) of the init.", 1e-4)
    padding: str = _doc("What points outside the box read: `zeros` or `border`.", "zeros")
    interpolation: str = _doc(
        "field, sdf: between voxels, `linear` (trilinear) or `smoothstep` (each axis weighted "
        "by t^2 (3 - 2t): a C1 field, but its gradient along an axis vanishes on every voxel "
        "plane normal to it; measured on the sdf torus: 11.5 degrees of normal error against "
        "0.8 for linear). nerf: linear only.",
        "linear",
    )
    backend: str = _doc(
        "nerf: `native` (VoxelGrid, grid.sample) or `grid_sample` (the same model on "
        "channels-first grids sampled by F.grid_sample, as DirectVoxGO).",
        "native",
    )


@dataclass
class TrainConfig:
    steps: int = _doc("Optimisation steps.", 800)
    batch_size: int = _doc("Points (field), surface points (sdf) or rays (nerf) per step.", 65536)
    lr: float = _doc("field, sdf: Adam learning rate at step 0.", 0.05)
    lr_final: float = _doc("field, sdf: learning rate at the last step (exponential decay).", 0.001)
    betas: list[float] = _doc("Adam betas.", [0.9, 0.99])
    tv_weight: float = _doc(
        "Weight of `VoxelGrid.total_variation()` (nerf: of the density grid) added to the MSE.",
        0.0,
    )
    surface_fraction: float = _doc(
        "SDF targets: fraction of each batch drawn near the surface (rest uniform).", 0.0
    )
    surface_std: float = _doc("SDF targets: std of the offset of near-surface points.", 0.02)
    normal_weight: float = _doc(
        "sdf: weight of the normal term, the mean of |grad f - n|^2 over the surface points "
        "(the surface term, the mean of f^2 there, has weight 1).",
        0.01,
    )
    eikonal_weight: float = _doc(
        "sdf: weight of the eikonal term, the mean of (|grad f| - 1)^2 over uniform points "
        "in the box.",
        0.01,
    )
    eikonal_points: int = _doc(
        "sdf: uniform points in the box per step for the eikonal term (0: no eikonal term).",
        32768,
    )
    upsample_steps: list[int] = _doc(
        "Coarse to fine: steps at which the grid is upsampled (increasing).", []
    )
    upsample_resolutions: list[int | list[int]] = _doc(
        "Coarse to fine: the resolution reached at each of `upsample_steps`.", []
    )
    upsample_moments: str = _doc(
        "Adam state at an upsample: `resample` (resampled like the grid), `rescale` "
        "(resampled, then scaled by the cell-volume ratio) or `reset` (a fresh "
        "optimiser, as DirectVoxGO).",
        "resample",
    )


@dataclass
class EvalConfig:
    every: int = _doc(
        "Evaluate (held-out points, or nerf: test views) every this many steps and at the end.",
        100,
    )
    points: int = _doc(
        "field: number of fixed held-out points (uniform in the box); sdf: of held-out "
        "surface points (shapes), or of the input points evaluated (file).",
        262144,
    )
    seed: int = _doc(
        "field, sdf: seed of the held-out points (independent of the training seed).", 1234
    )
    band: float = _doc(
        "sdf, shapes: half-width of the band around the surface where |f - sdf| is measured, "
        "in voxels of the final grid.",
        2.0,
    )


@dataclass
class OutputConfig:
    checkpoint_every: int = _doc(
        "Write the checkpoint every this many steps (0: only at the end).", 1000
    )
    pictures: bool = _doc(
        "Write the pictures at the end (field: slices.png, curves.png; sdf: mesh.png, "
        "curves.png; nerf: test_views.png, curves.png, turntable.gif).",
        True,
    )
    slice_resolution: int = _doc("field: pixels per side of each picture slice.", 256)
    mesh: bool = _doc(
        "sdf: extract the zero level set by marching cubes at the end and at every "
        "evaluation (mesh.ply, mesh.png, the Chamfer distance); needs scikit-image.",
        True,
    )
    picture_views: int = _doc("nerf: test views shown in test_views.png.", 4)
    turntable_frames: int = _doc("nerf: frames of turntable.gif (0: no animation).", 36)
    progress: bool = _doc("Show the tqdm progress bar.", True)


EXPERIMENTS = ("field", "sdf", "nerf")
#: The tables each experiment reads; the others must not appear in its config.
EXPERIMENT_SECTIONS = {
    "field": ("target", "grid", "train", "eval", "output"),
    "sdf": ("points", "grid", "train", "eval", "output"),
    "nerf": ("data", "nerf", "grid", "train", "eval", "output"),
}
#: The tables whose keys belong to a `kind`: the keys each kind reads.
KINDED = {"target": KIND_KEYS, "points": POINTS_KIND_KEYS}


@dataclass
class Config:
    experiment: str = _doc(
        "What is fitted: `field` (a VoxelGrid against `[target]`), `sdf` (a signed distance "
        "grid from the oriented points of `[points]`) or `nerf` (a radiance field from the "
        "posed images of `[data]`, model in `[nerf]`).",
        "field",
    )
    seed: int = _doc("Seed of the grid init and the training points; runs are repeatable.", 0)
    device: str = _doc("`auto` (CUDA when available, else CPU), `cpu` or `cuda`.", "auto")
    target: TargetConfig = field(default_factory=TargetConfig)
    points: PointsConfig = field(default_factory=PointsConfig)
    data: DataConfig = field(default_factory=DataConfig)
    nerf: NerfConfig = field(default_factory=NerfConfig)
    grid: GridConfig = field(default_factory=GridConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    output: OutputConfig = field(default_factory=OutputConfig)


SECTIONS: dict[str, type] = {
    "target": TargetConfig,
    "points": PointsConfig,
    "data": DataConfig,
    "nerf": NerfConfig,
    "grid": GridConfig,
    "train": TrainConfig,
    "eval": EvalConfig,
    "output": OutputConfig,
}


# ---- types --------------------------------------------------------------------------------


def _describe(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(a) for a in typing.get_args(tp))
    if origin is list:
        return f"a list of ({_describe(typing.get_args(tp)[0])})"
    return {int: "an integer", float: "a number", str: "a string", bool: "true or false"}[tp]


def _coerce(value: Any, tp: Any) -> Any:
    """Return `value` as type `tp` (ints accepted for floats) or raise TypeError."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        for option in typing.get_args(tp):
            try:
                return _coerce(value, option)
            except TypeError:
                pass
        raise TypeError
    if origin is list:
        if not isinstance(value, list):
            raise TypeError
        (item,) = typing.get_args(tp)
        return [_coerce(v, item) for v in value]
    if tp is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if tp is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if tp in (str, bool) and isinstance(value, tp):
        return value
    raise TypeError


def _toml_type_name(value: Any) -> str:
    names = {bool: "boolean", int: "integer", float: "float", str: "string", list: "array"}
    return names.get(type(value), "table" if isinstance(value, dict) else type(value).__name__)


# ---- reading --------------------------------------------------------------------------------


def parse_override(text: str) -> tuple[list[str], Any]:
    """`section.key=value` -> (["section", "key"], value); the value read as TOML, else a string."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"--set: expected key=value (e.g. train.steps=500), got {text!r}")
    try:
        value = tomllib.loads(f"v = {raw.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw.strip()
    return key.split("."), value


def _unknown(key: str, known: list[str]) -> ConfigError:
    name = key.rsplit(".", 1)[-1]
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else f"; known keys: {', '.join(known)}"
    return ConfigError(f"{key}: unknown key{hint}")


def _build(section_cls: type, raw: dict, prefix: str) -> Any:
    hints = typing.get_type_hints(section_cls)
    known = [f.name for f in dataclasses.fields(section_cls)]
    values = {}
    for key, value in raw.items():
        dotted = f"{prefix}{key}"
        if key not in known:
            raise _unknown(dotted, known)
        if section_cls is Config and key in SECTIONS:
            if not isinstance(value, dict):
                raise ConfigError(f"{dotted}: expected a table, got {_toml_type_name(value)}")
            values[key] = _build(SECTIONS[key], value, f"{dotted}.")
            continue
        try:
            values[key] = _coerce(value, hints[key])
        except TypeError:
            raise ConfigError(
                f"{dotted}: expected {_describe(hints[key])}, got {value!r} "
                f"({_toml_type_name(value)})"
            ) from None
    return section_cls(**values)


def load_config(
    path: str | Path | None = None,
    overrides: list[str] | tuple[str, ...] = (),
    *,
    base: dict | None = None,
) -> Config:
    """Read a TOML file (or start from `base`, a dict as `to_dict` returns), apply
    `section.key=value` overrides, check types and values.

    Raises:
        ConfigError: naming the key, for an unreadable file, an unknown key, a wrong
            type or an impossible value.
    """
    raw: dict = {} if base is None else json.loads(json.dumps(base))
    if path is not None:
        raw = read_input(path, _read_toml, "TOML config", key="--config")
    # The keys written in each kinded table ([target], [points]): a kind must read them all.
    explicit = {t: set(raw[t]) if isinstance(raw.get(t), dict) else set() for t in KINDED}
    overridden: dict[str, set[str]] = {t: set() for t in KINDED}
    for text in overrides:
        keys, value = parse_override(text)
        node = raw
        for i, part in enumerate(keys[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"{'.'.join(keys[: i + 1])}: is not a table")
            node = child
        node[keys[-1]] = value
        table = keys[0]
        if table in KINDED and keys[1:] == ["kind"]:
            # Switching kinds on the command line drops the file's keys for the old kind.
            explicit[table] = {k for k in explicit[table] if k in overridden[table]}
        if table in KINDED and len(keys) == 2:
            overridden[table].add(keys[1])
            explicit[table].add(keys[1])
    config = _build(Config, raw, "")
    sections = {k for k, v in raw.items() if k in SECTIONS and isinstance(v, dict) and v}
    validate(config, explicit, sections)
    return config


def _read_toml(path: Path) -> dict:
    with open(path, "rb") as f:
        return tomllib.load(f)


# ---- values ---------------------------------------------------------------------------------


def as_resolution(value: int | list[int], key: str) -> tuple[int, int, int]:
    """An int or [X, Y, Z] -> (X, Y, Z), each >= 2."""
    size = [value] * 3 if isinstance(value, int) else list(value)
    if len(size) != 3 or not all(isinstance(v, int) for v in size):
        raise ConfigError(f"{key}: expected an integer or a list of 3 integers, got {value!r}")
    if min(size) < 2:
        raise ConfigError(f"{key}: expected every size >= 2, got {value!r}")
    return (size[0], size[1], size[2])


def _positive(value: float, key: str, *, zero: bool = False) -> None:
    ok = value >= 0 if zero else value > 0
    if not (ok and math.isfinite(value)):
        raise ConfigError(
            f"{key}: expected a {'non-negative' if zero else 'positive'} number, got {value!r}"
        )


def _choice(value: str, options: tuple[str, ...], key: str) -> None:
    if value not in options:
        raise ConfigError(f"{key}: expected one of {', '.join(options)}, got {value!r}")


def _triple(value: list[float], key: str) -> None:
    if len(value) != 3 or not all(math.isfinite(v) for v in value):
        raise ConfigError(f"{key}: expected 3 finite numbers [x, y, z], got {value!r}")


def _check_kind_keys(table: str, kind: str, explicit: set[str]) -> None:
    """ConfigError naming the first key of `[table]` that its `kind` does not read."""
    reads = KINDED[table][kind]
    unused = sorted(explicit - set(reads) - {"kind"})
    if unused:
        raise ConfigError(
            f"{table}.{unused[0]}: not used by {table}.kind = {kind!r} "
            f"(it reads: {', '.join(reads)})"
        )


def validate(
    config: Config,
    explicit: dict[str, set[str]] | None = None,
    sections: set[str] = frozenset(),
) -> None:
    """Check values (types are already right); raise ConfigError naming the key.

    `explicit`: the keys the file or the overrides wrote in each kinded table ([target],
    [points]); `sections`: the tables they wrote (those the experiment does not read are
    an error)."""
    explicit = explicit or {}
    c = config
    _choice(c.experiment, EXPERIMENTS, "experiment")
    for name in sorted(sections - set(EXPERIMENT_SECTIONS[c.experiment])):
        raise ConfigError(
            f"{name}: not read by experiment = {c.experiment!r} "
            f"(it reads: {', '.join(EXPERIMENT_SECTIONS[c.experiment])})"
        )
    _choice(c.device, ("auto", "cpu", "cuda"), "device")
    if c.device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device: 'cuda' requested but torch.cuda.is_available() is False")

    t = c.target
    _choice(t.kind, TARGET_KINDS, "target.kind")
    _check_kind_keys("target", t.kind, explicit.get("target", set()))
    if t.blobs < 1:
        raise ConfigError(f"target.blobs: expected an integer >= 1, got {t.blobs}")
    _positive(t.frequency, "target.frequency")
    _positive(t.thickness, "target.thickness")
    if not 0 <= t.detail <= 1:
        raise ConfigError(f"target.detail: expected a number in [0, 1], got {t.detail}")
    _positive(t.radius, "target.radius")
    _triple(t.center, "target.center")
    _positive(t.major_radius, "target.major_radius")
    _positive(t.minor_radius, "target.minor_radius")
    _triple(t.half_size, "target.half_size")
    for i, h in enumerate(t.half_size):
        _positive(h, f"target.half_size[{i}]")
    _choice(t.axes, ("xyz", "zyx"), "target.axes")
    if t.kind == "npy":
        t.path = str(_check_npy(t.path))
    _validate_points(c.points, explicit.get("points", set()))

    g = c.grid
    as_resolution(g.resolution, "grid.resolution")
    if len(g.bounds) != 2:
        raise ConfigError(
            f"grid.bounds: expected [[xmin, ymin, zmin], [xmax, ymax, zmax]], got {g.bounds!r}"
        )
    for corner in g.bounds:
        _triple(corner, "grid.bounds")
    for axis, lo, hi in zip("xyz", *g.bounds, strict=True):
        if not lo < hi:
            raise ConfigError(
                f"grid.bounds: expected min < max on every axis, got {axis}: {lo} >= {hi}"
            )
    _choice(g.init, ("zeros", "uniform", "normal", "points"), "grid.init")
    if g.init == "points" and c.experiment != "sdf":
        raise ConfigError("grid.init: 'points' is for the sdf experiment only")
    _positive(g.init_scale, "grid.init_scale", zero=True)
    _choice(g.padding, ("zeros", "border"), "grid.padding")
    _choice(g.backend, ("native", "grid_sample"), "grid.backend")
    if c.experiment != "nerf" and g.backend != "native":
        raise ConfigError(f"grid.backend: the {c.experiment} experiment uses 'native' only")
    _choice(g.interpolation, INTERPOLATIONS, "grid.interpolation")
    if c.experiment == "nerf" and g.interpolation == "smoothstep":
        raise ConfigError("grid.interpolation: the nerf experiment uses 'linear' only")
    if c.experiment == "nerf":
        _validate_nerf(c)

    r = c.train
    for key in ("steps", "batch_size"):
        if getattr(r, key) < 1:
            raise ConfigError(f"train.{key}: expected an integer >= 1, got {getattr(r, key)}")
    _positive(r.lr, "train.lr")
    _positive(r.lr_final, "train.lr_final")
    if len(r.betas) != 2 or not all(0 <= b < 1 for b in r.betas):
        raise ConfigError(f"train.betas: expected two numbers in [0, 1), got {r.betas!r}")
    _positive(r.tv_weight, "train.tv_weight", zero=True)
    if not 0 <= r.surface_fraction <= 1:
        raise ConfigError(
            f"train.surface_fraction: expected a number in [0, 1], got {r.surface_fraction}"
        )
    if r.surface_fraction > 0 and c.experiment == "sdf":
        raise ConfigError(
            "train.surface_fraction: not used by experiment = 'sdf' (its surface points are "
            "[points]; train.eikonal_points sets the uniform ones)"
        )
    if r.surface_fraction > 0 and t.kind not in SDF_KINDS:
        raise ConfigError(
            f"train.surface_fraction: near-surface sampling needs an SDF target "
            f"({', '.join(SDF_KINDS)}), but target.kind = {t.kind!r}"
        )
    _positive(r.surface_std, "train.surface_std", zero=True)
    _positive(r.normal_weight, "train.normal_weight", zero=True)
    _positive(r.eikonal_weight, "train.eikonal_weight", zero=True)
    if r.eikonal_points < 0:
        raise ConfigError(f"train.eikonal_points: expected an integer >= 0, got {r.eikonal_points}")
    if len(r.upsample_steps) != len(r.upsample_resolutions):
        raise ConfigError(
            f"train.upsample_resolutions: expected one resolution per entry of "
            f"train.upsample_steps ({len(r.upsample_steps)}), got {len(r.upsample_resolutions)}"
        )
    previous_step, previous = 0, as_resolution(g.resolution, "grid.resolution")
    for i, (step, res) in enumerate(zip(r.upsample_steps, r.upsample_resolutions, strict=True)):
        if not previous_step < step < r.steps:
            raise ConfigError(
                f"train.upsample_steps: expected increasing steps in (0, train.steps = "
                f"{r.steps}), got {r.upsample_steps!r}"
            )
        size = as_resolution(res, f"train.upsample_resolutions[{i}]")
        if any(n < p for n, p in zip(size, previous, strict=True)):
            raise ConfigError(
                f"train.upsample_resolutions[{i}]: expected no axis smaller than the "
                f"previous resolution {previous}, got {size}"
            )
        previous_step, previous = step, size
    _choice(r.upsample_moments, ("rescale", "resample", "reset"), "train.upsample_moments")

    e = c.eval
    for key in ("every", "points"):
        if getattr(e, key) < 1:
            raise ConfigError(f"eval.{key}: expected an integer >= 1, got {getattr(e, key)}")
    _positive(e.band, "eval.band")

    o = c.output
    if o.checkpoint_every < 0:
        raise ConfigError(
            f"output.checkpoint_every: expected an integer >= 0, got {o.checkpoint_every}"
        )
    if o.slice_resolution < 2:
        raise ConfigError(
            f"output.slice_resolution: expected an integer >= 2, got {o.slice_resolution}"
        )


def _validate_points(p: PointsConfig, explicit: set[str]) -> None:
    _choice(p.kind, POINTS_KINDS, "points.kind")
    _check_kind_keys("points", p.kind, explicit)
    if p.count < 1:
        raise ConfigError(f"points.count: expected an integer >= 1, got {p.count}")
    _positive(p.radius, "points.radius")
    _triple(p.center, "points.center")
    _positive(p.major_radius, "points.major_radius")
    _positive(p.minor_radius, "points.minor_radius")
    if p.kind == "torus" and not p.minor_radius < p.major_radius:
        raise ConfigError(
            f"points.minor_radius: expected less than points.major_radius = {p.major_radius} "
            f"(a ring torus), got {p.minor_radius}"
        )
    _triple(p.half_size, "points.half_size")
    for i, h in enumerate(p.half_size):
        _positive(h, f"points.half_size[{i}]")
    if p.kind == "file":
        if not p.path:
            raise ConfigError(
                "points.path: required when points.kind = 'file' (a .npy, .xyz or .ply file)"
            )
        file = Path(p.path).expanduser().resolve()
        if file.suffix.lower() not in POINT_FILE_SUFFIXES:
            raise InputFileError(
                file,
                f"unknown point-cloud format {file.suffix or '(no suffix)'!r}; expected one of "
                f"{', '.join(POINT_FILE_SUFFIXES)}",
                key="points.path",
            )
        p.path = str(file)  # absolute: a resumed run may start in another directory


def _validate_nerf(c: Config) -> None:
    d, n = c.data, c.nerf
    if not d.path:
        raise ConfigError("data.path: required (a Blender-format scene directory)")
    for key in ("scene_size", "scene_train_views", "scene_test_views", "downscale"):
        if getattr(d, key) < 1:
            raise ConfigError(f"data.{key}: expected an integer >= 1, got {getattr(d, key)}")
    if d.test_views < 0:
        raise ConfigError(f"data.test_views: expected an integer >= 0, got {d.test_views}")
    if len(d.background) != 3 or not all(0 <= v <= 1 for v in d.background):
        raise ConfigError(f"data.background: expected 3 numbers in [0, 1], got {d.background!r}")
    for key in ("color_features", "hidden", "occupancy_every"):
        if getattr(n, key) < 1:
            raise ConfigError(f"nerf.{key}: expected an integer >= 1, got {getattr(n, key)}")
    for key in ("view_frequencies", "occupancy_start"):
        if getattr(n, key) < 0:
            raise ConfigError(f"nerf.{key}: expected an integer >= 0, got {getattr(n, key)}")
    for key in ("step_ratio", "lr_density", "lr_color", "lr_mlp", "lr_decay"):
        _positive(getattr(n, key), f"nerf.{key}")
    for key in ("alpha_init", "occupancy_threshold", "weight_threshold"):
        value = getattr(n, key)
        if not 0 <= value < 1:
            raise ConfigError(f"nerf.{key}: expected a number in [0, 1), got {value}")
    if n.alpha_init == 0:
        raise ConfigError("nerf.alpha_init: expected a number in (0, 1), got 0.0")
    if c.train.upsample_moments == "rescale":
        raise ConfigError(
            "train.upsample_moments: the nerf experiment supports 'resample' and 'reset'"
        )
    if c.output.picture_views < 1:
        raise ConfigError(
            f"output.picture_views: expected an integer >= 1, got {c.output.picture_views}"
        )
    if c.output.turntable_frames < 0:
        raise ConfigError(
            f"output.turntable_frames: expected an integer >= 0, got {c.output.turntable_frames}"
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


# ---- writing --------------------------------------------------------------------------------


def to_dict(config: Config) -> dict:
    """The resolved config as plain data: only the tables its experiment reads, and
    [target] and [points] only with the keys their kind reads."""
    data = dataclasses.asdict(config)
    for name in SECTIONS:
        if name not in EXPERIMENT_SECTIONS[config.experiment]:
            del data[name]
    for table, kinds in KINDED.items():
        if table in data:
            keep = {"kind", *kinds[data[table]["kind"]]}
            data[table] = {k: v for k, v in data[table].items() if k in keep}
    return data


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {value!r} as TOML")


def to_toml(config: Config) -> str:
    """The resolved config as TOML that `load_config` reads back to an equal config."""
    data = to_dict(config)
    lines = [f"{k} = {_toml_value(v)}" for k, v in data.items() if not isinstance(v, dict)]
    for section, values in data.items():
        if isinstance(values, dict):
            lines += ["", f"[{section}]"]
            lines += [f"{k} = {_toml_value(v)}" for k, v in values.items()]
    return "\n".join(lines) + "\n"


def reference_table() -> str:
    """Markdown table of every key (type, default, meaning), for README.md."""
    rows = ["| key | type | default | meaning |", "| --- | --- | --- | --- |"]

    def add(cls: type, prefix: str) -> None:
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if f.name in SECTIONS and cls is Config:
                continue
            default = f.default_factory() if f.default is dataclasses.MISSING else f.default
            tp = str(hints[f.name]).replace("typing.", "").replace("<class '", "")
            tp = tp.replace("'>", "").replace(" | ", " or ")
            rows.append(
                f"| `{prefix}{f.name}` | {tp} | `{_toml_value(default)}` | {f.metadata['doc']} |"
            )

    add(Config, "")
    for name, cls in SECTIONS.items():
        add(cls, f"{name}.")
    return "\n".join(rows)
