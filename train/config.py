"""Experiment configuration: schema with defaults, TOML parsing, dotted overrides, validation.

A config is a TOML file: `experiment`, `seed`, `device`, the tables every experiment reads
(`[grid]`, `[train]`, `[eval]`, `[output]`, defined here) and those of the chosen one (from
its package via `train.experiments`: `[target]`, `[points]`, `[data]`, `[nerf]`). Every key
has a default (an empty file is a valid experiment); a table the chosen experiment does not
read is an error naming it. A kinded table (`[target]`, `[points]`) has a `kind`, and each
kind reads its own keys: another kind's key is an error naming it. `--set section.key=value`
overrides one key: a TOML value (`64`, `[32, 32, 64]`), else a bare string (`torus`).
Every error is a `ConfigError` (`errors.py`) whose message starts with the dotted key; a
file that cannot be used is an `InputFileError` naming the file too.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import sys
import tomllib
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import experiments
from .errors import ConfigError, read_input
from .schema import (
    as_resolution,
    at_least,
    choice,
    doc,
    positive,
    reference_rows,
    toml_value,
    triple,
)
from .short_runs import fit_schedule
from .toml_types import coerce, describe_type, toml_type_name

# ---- schema -----------------------------------------------------------------------------
# The `doc` strings feed docs/config.md's reference table (see `reference_table`).

INTERPOLATIONS = ("linear", "smoothstep")


@dataclass
class GridConfig:
    resolution: int | list[int] = doc(
        "Voxels per axis at the start: an int or [X, Y, Z], each >= 2.", 96
    )
    bounds: list[list[float]] = doc(
        "World box [[xmin, ymin, zmin], [xmax, ymax, zmax]]; points are drawn inside it.",
        [[-1.0, -1.0, -1.0], [1.0, 1.0, 1.0]],
    )
    init: str = doc(
        "Feature init: `zeros`, `uniform`, `normal`, or (sdf) `points`: each voxel's distance "
        "to its nearest point, negative where that point's normal faces away.",
        "zeros",
    )
    init_scale: float = doc("Half-width (uniform) or std (normal) of the init.", 1e-4)
    padding: str = doc("What points outside the box read: `zeros` or `border`.", "zeros")
    interpolation: str = doc(
        "field, sdf: between voxels, `linear` (trilinear) or `smoothstep` (each axis weighted "
        "by t^2 (3 - 2t): a C1 field, but its gradient along an axis vanishes on every voxel "
        "plane normal to it; measured on the sdf torus: 11.5 degrees of normal error against "
        "0.8 for linear). nerf: linear only.",
        "linear",
    )
    backend: str = doc(
        "nerf: `native` (VoxelGrid, grid.sample) or `grid_sample` (the same model on "
        "channels-first grids sampled by F.grid_sample, as DirectVoxGO).",
        "native",
    )


@dataclass
class TrainConfig:
    STEP_KEYS = ("upsample_steps",)  # counted in steps: `fit_schedule` scales them
    steps: int = doc("Optimisation steps.", 800)
    batch_size: int = doc("Points (field), surface points (sdf) or rays (nerf) per step.", 65536)
    lr: float = doc("field, sdf: Adam learning rate at step 0.", 0.05)
    lr_final: float = doc("field, sdf: learning rate at the last step (exponential decay).", 0.001)
    betas: list[float] = doc("Adam betas.", [0.9, 0.99])
    tv_weight: float = doc(
        "Weight of `VoxelGrid.total_variation()` (nerf: of the density grid) added to the MSE.",
        0.0,
    )
    surface_fraction: float = doc(
        "SDF targets: fraction of each batch drawn near the surface (rest uniform).", 0.0
    )
    surface_std: float = doc("SDF targets: std of the offset of near-surface points.", 0.02)
    normal_weight: float = doc(
        "sdf: weight of the normal term, the mean of |grad f - n|^2 over the surface points "
        "(the surface term, the mean of f^2 there, has weight 1).",
        0.01,
    )
    eikonal_weight: float = doc(
        "sdf: weight of the eikonal term, the mean of (|grad f| - 1)^2 over uniform points "
        "in the box.",
        0.01,
    )
    eikonal_points: int = doc(
        "sdf: uniform points in the box per step for the eikonal term (0: no eikonal term).",
        32768,
    )
    upsample_steps: list[int] = doc(
        "Coarse to fine: steps at which the grid is upsampled (increasing).", []
    )
    upsample_resolutions: list[int | list[int]] = doc(
        "Coarse to fine: the resolution reached at each of `upsample_steps`.", []
    )
    upsample_moments: str = doc(
        "Adam state at an upsample: `resample` (resampled like the grid), `rescale` "
        "(resampled, then scaled by the cell-volume ratio) or `reset` (a fresh "
        "optimiser, as DirectVoxGO).",
        "resample",
    )
    scaling: str = doc(
        "torchrun: `strong` (`batch_size` is the global batch, split into equal shares) or "
        "`weak` (each process its own `batch_size` and sdf `eikonal_points`)",
        "strong",
    )
    cuda_graph: str = doc(
        "`auto` (steps captured as CUDA graphs on a CUDA device: one launch per step, "
        "re-captured at each upsample; nerf: with the fused renderer, the steps "
        "that measure the render's buffer sizes op by op), `on` (the same, an error off CUDA "
        "or for a nerf config that cannot) or `off` (op by op).",
        "auto",
    )


@dataclass
class EvalConfig:
    STEP_KEYS = ("every",)
    every: int = doc(
        "Evaluate (held-out points, or nerf: test views) every this many steps and at the end.",
        100,
    )
    points: int = doc(
        "field: number of fixed held-out points (uniform in the box); sdf: of held-out "
        "surface points (shapes), or of the input points evaluated (file).",
        262144,
    )
    seed: int = doc(
        "field, sdf: seed of the held-out points (independent of the training seed).", 1234
    )
    band: float = doc(
        "sdf, shapes: half-width of the band around the surface where |f - sdf| is measured, "
        "in voxels of the final grid.",
        2.0,
    )
    chamfer: bool = doc(
        "sdf, with output.mesh: score the mesh by its Chamfer distance (exact distances to "
        "the triangles, on the CPU: seconds at 512^3); false: the mesh alone, sooner.",
        True,
    )
    seconds: list[float] = doc(
        "Also evaluate at the first step whose training time (`train_seconds`: steps only) "
        "reaches each of these seconds, for comparisons at equal time; one process only.",
        [],
    )


@dataclass
class OutputConfig:
    STEP_KEYS = ("checkpoint_every",)
    checkpoint_every: int = doc(
        "Write the checkpoint every this many steps (0: only at the end).", 1000
    )
    checkpoint_minutes: float = doc(
        "Also write the checkpoint once this many minutes have passed since the last one "
        "(0: off), so a killed run loses at most that much. SIGINT and SIGTERM always "
        "write one.",
        10.0,
    )
    pictures: bool = doc(
        "Write the pictures at the end (field: slices.png, curves.png; sdf: mesh.png, "
        "curves.png; nerf: test_views.png, curves.png, turntable.gif).",
        True,
    )
    slice_resolution: int = doc("field: pixels per side of each picture slice.", 256)
    mesh: bool = doc(
        "sdf: extract the zero level set by marching cubes at the end and at every "
        "evaluation (mesh.ply, mesh.png, the Chamfer distance); needs scipy (the sdf extra).",
        True,
    )
    picture_views: int = doc("nerf: test views shown in test_views.png.", 4)
    turntable_frames: int = doc("nerf: frames of turntable.gif (0: no animation).", 36)
    progress: bool = doc("Show the tqdm progress bar.", True)
    tensorboard: bool = doc(
        "Also write metrics.jsonl's numbers (nerf: and the pictured test views) at each "
        "evaluation as TensorBoard event files in `tensorboard/` of the run directory; "
        "needs the tensorboard package.",
        False,
    )


#: The tables every experiment reads, after its own.
SHARED_SECTIONS: dict[str, type] = {
    "grid": GridConfig,
    "train": TrainConfig,
    "eval": EvalConfig,
    "output": OutputConfig,
}
SPECS = experiments.specs()
EXPERIMENTS = tuple(SPECS)
#: Every table: each experiment's own (in registry order), then the shared ones.
SECTIONS: dict[str, type] = {
    **{name: cls for spec in SPECS.values() for name, cls in spec.sections.items()},
    **SHARED_SECTIONS,
}
#: The tables each experiment reads; the others must not appear in its config.
EXPERIMENT_SECTIONS = {name: (*spec.sections, *SHARED_SECTIONS) for name, spec in SPECS.items()}
#: The tables whose keys belong to a `kind`: the keys each kind reads.
KINDED = {table: kinds for spec in SPECS.values() for table, kinds in spec.kinded.items()}
_KINDS = [f"`{name}` ({spec.summary})" for name, spec in SPECS.items()]
_EXPERIMENT_DOC = "What is fitted: " + ", ".join(_KINDS[:-1]) + " or " + _KINDS[-1] + "."
_TOP_LEVEL = [
    ("experiment", str, doc(_EXPERIMENT_DOC, experiments.DEFAULT)),
    ("seed", int, doc("Seed of the grid init and the training points; runs are repeatable.", 0)),
    ("device", str, doc("`auto` (CUDA when available, else CPU), `cpu` or `cuda`.", "auto")),
]
#: The whole config: the top-level keys, then one attribute per table of `SECTIONS`.
Config = dataclasses.make_dataclass(
    "Config",
    _TOP_LEVEL + [(name, cls, field(default_factory=cls)) for name, cls in SECTIONS.items()],
)
Config.__module__ = __name__


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
                raise ConfigError(f"{dotted}: expected a table, got {toml_type_name(value)}")
            values[key] = _build(SECTIONS[key], value, f"{dotted}.")
            continue
        try:
            values[key] = coerce(value, hints[key])
        except TypeError:
            raise ConfigError(
                f"{dotted}: expected {describe_type(hints[key])}, got {value!r} "
                f"({toml_type_name(value)})"
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
    train = raw.get("train")
    planned = train.get("steps") if isinstance(train, dict) else None  # before the overrides
    # The keys written in each kinded table ([target], [points]): a kind must read them all.
    explicit = {t: set(raw[t]) if isinstance(raw.get(t), dict) else set() for t in KINDED}
    # ... and in the other tables (nerf: whether the file that sets data.path says generate)
    written = {t: set(v) for t, v in raw.items() if isinstance(v, dict) and t not in KINDED}
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
        elif table not in KINDED and len(keys) >= 2:
            written.setdefault(table, set()).add(keys[1])
    config = _build(Config, raw, "")
    set_keys = {".".join(parse_override(text)[0]) for text in overrides}
    planned = planned if isinstance(planned, int) else TrainConfig.steps
    reads = EXPERIMENT_SECTIONS.get(config.experiment, ())  # an unknown one: `validate` says so
    tables = {name: SECTIONS[name] for name in reads}
    scaled = fit_schedule(config, planned, set_keys, tables)
    if scaled and os.environ.get("RANK", "0") == "0":  # under torchrun: once
        print(scaled, file=sys.stderr)
    sections = {k for k, v in raw.items() if k in SECTIONS and isinstance(v, dict) and v}
    # the overrides' dotted keys under "--set": what the command line chose, not the file
    validate(config, {**written, **explicit, "--set": set_keys}, sections)
    return config


def _read_toml(path: Path) -> dict:
    with open(path, "rb") as f:
        return tomllib.load(f)


# ---- values ---------------------------------------------------------------------------------


def validate(
    config: Config,
    explicit: dict[str, set[str]] | None = None,
    sections: set[str] = frozenset(),
) -> None:
    """Check values (types are already right); raise ConfigError naming the key.

    `explicit`: the keys the file or the overrides wrote in each kinded table;
    `sections`: the tables they wrote (those the experiment does not read are an error).
    The shared tables are checked here, the experiment's own by its spec."""
    explicit = explicit or {}
    c = config
    choice(c.experiment, EXPERIMENTS, "experiment")
    reads = EXPERIMENT_SECTIONS[c.experiment]
    for name in sorted(sections - set(reads)):
        raise ConfigError(
            f"{name}: not read by experiment = {c.experiment!r} (it reads: {', '.join(reads)})"
        )
    choice(c.device, ("auto", "cpu", "cuda"), "device")
    if c.device == "cuda" and not _cuda_available():
        raise ConfigError("device: 'cuda' requested but torch.cuda.is_available() is False")
    _validate_grid(c.grid)
    _validate_train(c.train, c.grid)
    e = c.eval
    for key in ("every", "points"):
        at_least(getattr(e, key), 1, f"eval.{key}")
    positive(e.band, "eval.band")
    for seconds in e.seconds:
        positive(seconds, "eval.seconds")
    o = c.output
    at_least(o.checkpoint_every, 0, "output.checkpoint_every")
    positive(o.checkpoint_minutes, "output.checkpoint_minutes", zero=True)
    at_least(o.slice_resolution, 2, "output.slice_resolution")
    SPECS[c.experiment].validate(c, explicit)


def _cuda_available() -> bool:
    # torch only here: `grid-train keys` and the other config readers that run before any
    # training answer without importing it (1 s on 2 cores)
    import torch

    return torch.cuda.is_available()


def _validate_grid(g: GridConfig) -> None:
    as_resolution(g.resolution, "grid.resolution")
    if len(g.bounds) != 2:
        raise ConfigError(
            f"grid.bounds: expected [[xmin, ymin, zmin], [xmax, ymax, zmax]], got {g.bounds!r}"
        )
    for corner in g.bounds:
        triple(corner, "grid.bounds")
    for axis, lo, hi in zip("xyz", *g.bounds, strict=True):
        if not lo < hi:
            raise ConfigError(
                f"grid.bounds: expected min < max on every axis, got {axis}: {lo} >= {hi}"
            )
    choice(g.init, ("zeros", "uniform", "normal", "points"), "grid.init")
    positive(g.init_scale, "grid.init_scale", zero=True)
    choice(g.padding, ("zeros", "border"), "grid.padding")
    choice(g.backend, ("native", "grid_sample"), "grid.backend")
    choice(g.interpolation, INTERPOLATIONS, "grid.interpolation")


def _validate_train(r: TrainConfig, g: GridConfig) -> None:
    for key in ("steps", "batch_size"):
        at_least(getattr(r, key), 1, f"train.{key}")
    positive(r.lr, "train.lr")
    positive(r.lr_final, "train.lr_final")
    if len(r.betas) != 2 or not all(0 <= b < 1 for b in r.betas):
        raise ConfigError(f"train.betas: expected two numbers in [0, 1), got {r.betas!r}")
    positive(r.tv_weight, "train.tv_weight", zero=True)
    if not 0 <= r.surface_fraction <= 1:
        raise ConfigError(
            f"train.surface_fraction: expected a number in [0, 1], got {r.surface_fraction}"
        )
    positive(r.surface_std, "train.surface_std", zero=True)
    positive(r.normal_weight, "train.normal_weight", zero=True)
    positive(r.eikonal_weight, "train.eikonal_weight", zero=True)
    at_least(r.eikonal_points, 0, "train.eikonal_points")
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
    choice(r.upsample_moments, ("rescale", "resample", "reset"), "train.upsample_moments")
    choice(r.cuda_graph, ("auto", "on", "off"), "train.cuda_graph")
    choice(r.scaling, ("strong", "weak"), "train.scaling")


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


def to_toml(config: Config) -> str:
    """The resolved config as TOML that `load_config` reads back to an equal config."""
    data = to_dict(config)
    lines = [f"{k} = {toml_value(v)}" for k, v in data.items() if not isinstance(v, dict)]
    for section, values in data.items():
        if isinstance(values, dict):
            lines += ["", f"[{section}]"]
            lines += [f"{k} = {toml_value(v)}" for k, v in values.items()]
    return "\n".join(lines) + "\n"


def reference_table() -> str:
    """Markdown table of every key (type, default, meaning), for docs/config.md."""
    rows = ["| key | type | default | meaning |", "| --- | --- | --- | --- |"]
    rows += reference_rows(Config, "", skip=SECTIONS)
    for name, cls in SECTIONS.items():
        rows += reference_rows(cls, f"{name}.")
    return "\n".join(rows)
