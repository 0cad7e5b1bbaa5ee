"""The vocabulary every config table is written in, and what an experiment declares.

An experiment package (`train/<name>/__init__.py`) defines `SPEC`, an `ExperimentSpec`:
its own tables (dataclasses whose fields carry a `doc` string and a default), the check
of their values, the class that trains it and what its batch counts. `train.config`
assembles the whole schema from the registered specs (`train.experiments`); this module
knows no experiment by name and imports nothing of theirs.
"""

from __future__ import annotations

import dataclasses
import json
import math
import typing
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from .errors import ConfigError


def doc(text: str, default: Any) -> Any:
    """A dataclass field with a default and the `doc` string docs/config.md's table shows."""
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata={"doc": text})
    return field(default=default, metadata={"doc": text})


class Need(NamedTuple):
    """Memory a run allocates: `bytes` for `what`, set by the config key `key` (what a
    user lowers to need less)."""

    key: str
    what: str
    bytes: int


@dataclass(frozen=True)
class ExperimentSpec:
    """What the shared machinery needs to know of one experiment.

    name: the value of the config key `experiment`.
    summary: what it fits, for the `experiment` key's documentation.
    sections: its own tables, name -> dataclass (e.g. {"target": TargetConfig}); the
        shared tables (grid, train, eval, output) are read by every experiment.
    validate: `validate(config, explicit)` checks its tables and its use of the shared
        ones, raising ConfigError naming the key; `explicit` maps each table to the keys
        the file and the overrides wrote in it, and "--set" to the dotted keys the
        overrides alone set.
    experiment: the class in `train/<name>/experiment.py` that trains it (see
        `train.experiment.Experiment`), imported on first use.
    unit: what `train.batch_size` counts ("points", "rays").
    kinded: tables with a `kind` key -> the keys each kind reads (besides `kind`).
    files: the files its runs write besides the shared ones (config.toml, metrics.jsonl,
        summary.json, checkpoint.pt, curves.png): what `--overwrite` deletes.
    dependencies: `dependencies(config)` raises MissingDependencyError for an optional
        package the config needs (see `train.dependencies.require`).
    memory: `memory(config)` lists what a run of `config` allocates, each a `Need`
        naming the key that sets it; `train.memory` refuses a config whose sum exceeds
        the device's free memory before anything is allocated.
    export: the module of its package that `python -m train.export` runs on its run
        directories ("" when there is nothing to export): `add_arguments(group)` adds its
        options, `export(out, config, checkpoint, args) -> str` writes the files and says
        what it wrote (see `train.export`).
    view: the module of its package that `grid-train view` shows its runs with ("": the
        viewer shows the curves alone): `open_view(server, out, config, checkpoint,
        options)` puts the run into a viser server and returns an object with
        `update(config, checkpoint)` (newer weights) and `close()` (see `train.viewer`).
        Its `render_camera` (a radiance field's) is what `grid-train render` renders.
    """

    name: str
    summary: str
    sections: dict[str, type]
    validate: Callable[[Any, dict[str, set[str]]], None]
    experiment: str
    unit: str
    files: tuple[str, ...] = ()
    kinded: dict[str, dict[str, tuple[str, ...]]] = field(default_factory=dict)
    dependencies: Callable[[Any], None] | None = None
    memory: Callable[[Any], list[Need]] | None = None
    export: str = ""
    view: str = ""


# ---- memory: what the `memory` functions of the specs share -------------------------------

#: A trained grid is held four times: its values, its gradient and Adam's two moments.
ADAM_COPIES = 4


def largest_grid(config: Any) -> tuple[str, tuple[int, int, int]]:
    """(the key that sets it, the resolution) of the largest grid of a run: the last of
    `train.upsample_resolutions`, or `grid.resolution` without upsampling."""
    steps = config.train.upsample_resolutions
    if steps:
        key = "train.upsample_resolutions"
        return key, as_resolution(steps[-1], f"{key}[{len(steps) - 1}]")
    return "grid.resolution", as_resolution(config.grid.resolution, "grid.resolution")


def grid_need(config: Any, features: int, what: str = "grid") -> Need:
    """The largest grid of `features` float32 channels, with its gradient and Adam's
    moments, named by the key that sets its resolution."""
    key, (x, y, z) = largest_grid(config)
    return Need(
        key,
        f"the {x}x{y}x{z} {what} of {features} channel{'s' if features > 1 else ''} "
        "with its gradient and 2 Adam moments",
        x * y * z * features * 4 * ADAM_COPIES,
    )


# ---- value checks: each raises ConfigError naming the key ---------------------------------


def as_resolution(value: int | list[int], key: str) -> tuple[int, int, int]:
    """An int or [X, Y, Z] -> (X, Y, Z), each >= 2."""
    size = [value] * 3 if isinstance(value, int) else list(value)
    if len(size) != 3 or not all(isinstance(v, int) for v in size):
        raise ConfigError(f"{key}: expected an integer or a list of 3 integers, got {value!r}")
    if min(size) < 2:
        raise ConfigError(f"{key}: expected every size >= 2, got {value!r}")
    return (size[0], size[1], size[2])


def positive(value: float, key: str, *, zero: bool = False) -> None:
    ok = value >= 0 if zero else value > 0
    if not (ok and math.isfinite(value)):
        raise ConfigError(
            f"{key}: expected a {'non-negative' if zero else 'positive'} number, got {value!r}"
        )


def at_least(value: int, minimum: int, key: str) -> None:
    if value < minimum:
        raise ConfigError(f"{key}: expected an integer >= {minimum}, got {value}")


def choice(value: str, options: tuple[str, ...], key: str) -> None:
    if value not in options:
        raise ConfigError(f"{key}: expected one of {', '.join(options)}, got {value!r}")


def triple(value: list[float], key: str) -> None:
    if len(value) != 3 or not all(math.isfinite(v) for v in value):
        raise ConfigError(f"{key}: expected 3 finite numbers [x, y, z], got {value!r}")


def check_kind_keys(
    table: str, kind: str, explicit: set[str], kinds: dict[str, tuple[str, ...]]
) -> None:
    """ConfigError naming the first key of `[table]` that its `kind` does not read."""
    reads = kinds[kind]
    unused = sorted(explicit - set(reads) - {"kind"})
    if unused:
        raise ConfigError(
            f"{table}.{unused[0]}: not used by {table}.kind = {kind!r} "
            f"(it reads: {', '.join(reads)})"
        )


def toml_value(value: Any) -> str:
    """`value` written as TOML (a config's file, the reference table's defaults)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {value!r} as TOML")


class KeyDoc(NamedTuple):
    """One config key as docs/config.md's table and `grid-train keys` show it."""

    key: str  # dotted, e.g. "train.steps"
    type: str  # e.g. "int or list[int]"
    default: str  # written as TOML, e.g. "[32, 32, 64]"
    doc: str


def key_docs(cls: type, prefix: str, skip: Collection[str] = ()) -> list[KeyDoc]:
    """One `KeyDoc` per field of the config section `cls`, in field order."""
    hints = typing.get_type_hints(cls)
    keys = []
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        default = f.default_factory() if f.default is dataclasses.MISSING else f.default
        tp = str(hints[f.name]).replace("typing.", "").replace("<class '", "")
        tp = tp.replace("'>", "").replace(" | ", " or ")
        keys.append(KeyDoc(f"{prefix}{f.name}", tp, toml_value(default), f.metadata["doc"]))
    return keys


def reference_rows(cls: type, prefix: str, skip: Collection[str] = ()) -> list[str]:
    """One markdown row per field of the config section `cls` (type, default, `doc`)."""
    return [
        f"| `{k.key}` | {k.type} | `{k.default}` | {k.doc} |" for k in key_docs(cls, prefix, skip)
    ]
