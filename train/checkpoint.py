"""checkpoint.pt: writing it atomically, reading it back, resuming from it.

The layout (`CHECKPOINT_FORMAT`): the model, the optimiser, the experiment's own state,
the RNG states and the loop's counters, plus the config it was written with, so
`--resume` continues exactly where the run stopped.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from . import experiments
from .config import Config, load_config
from .errors import ConfigError, InputFileError, read_input, writing

CHECKPOINT = "checkpoint.pt"
#: Layout of checkpoint.pt. 2: stores "format" and "kind" (the experiment); 1: the same
#: keys without them (written before they existed; read as a field checkpoint).
CHECKPOINT_FORMAT = 2
#: Keys every readable checkpoint holds (besides "format" and "kind").
CHECKPOINT_KEYS = (
    *("step", "config", "resolution", "model", "optimizer", "generator", "torch_rng"),
    *("seconds", "train_seconds", "loss_sum", "loss_count"),
)


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    """Write `state` to a temporary file next to `path`, then rename it over `path`:
    a crash leaves either the old checkpoint or the new one, never half of one.

    A failed write (a full disk) raises OutputFileError naming `path` and the cause,
    after deleting the temporary file; the old checkpoint stays as it was.
    """
    tmp = path.with_name(path.name + ".tmp")
    with writing(path, remove=tmp):
        with open(tmp, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)


def load_checkpoint(out_dir: Path, kind: str | None = None) -> dict[str, Any]:
    """The checkpoint of a run directory (tensors on the CPU).

    Raises InputFileError naming the file when it is damaged (truncated, corrupt),
    not a grid-train checkpoint, of an experiment other than `kind` (any, if None),
    or of a format this version does not read.
    """
    path = out_dir / CHECKPOINT
    state = read_input(
        path,
        lambda f: torch.load(f, map_location="cpu", weights_only=True),
        "checkpoint",
        invalid="damaged (truncated or corrupt) or not a checkpoint",
        hint="it cannot be resumed; start the run again with --overwrite",
    )
    if not isinstance(state, dict) or not all(k in state for k in CHECKPOINT_KEYS):
        missing = [k for k in CHECKPOINT_KEYS if not isinstance(state, dict) or k not in state]
        raise InputFileError(
            path, f"not a grid-train checkpoint (it lacks {', '.join(map(repr, missing))})"
        )
    version = state.get("format", 1)
    if version not in range(1, CHECKPOINT_FORMAT + 1):
        raise InputFileError(
            path,
            f"checkpoint format {version!r}, but this version of grid-train reads formats "
            f"1 to {CHECKPOINT_FORMAT} (written by a newer grid-train?)",
        )
    found = state.get("kind", experiments.FORMAT_1_KIND)
    if kind is not None and found != kind:
        raise InputFileError(
            path, f"a checkpoint of a {found!r} experiment, but this run is a {kind!r} one"
        )
    return state


def resume_config(out_dir: Path, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """The config a run directory's checkpoint was written with, plus `--set` overrides.

    Raises ConfigError (key `--resume`) when there is no checkpoint, InputFileError
    when it cannot be used (see `load_checkpoint`).
    """
    if not (out_dir / CHECKPOINT).is_file():
        raise ConfigError(f"--resume: no {CHECKPOINT} in {out_dir}")
    return load_config(base=load_checkpoint(out_dir)["config"], overrides=overrides)


def load_state(out: Path, checkpoint: dict[str, Any], exp: Any, gen: torch.Generator) -> None:
    """Load a checkpoint's model, optimiser, experiment and RNG states (InputFileError
    naming the file when they do not fit this run)."""
    try:
        exp.model.load_state_dict(checkpoint["model"])
        exp.optimizer.load_state_dict(checkpoint["optimizer"])
        exp.load_state_dict(checkpoint.get("experiment", {}))
        gen.set_state(checkpoint["generator"])
        torch.set_rng_state(checkpoint["torch_rng"])
    except (RuntimeError, ValueError, TypeError, KeyError) as error:
        problem = " ".join(str(error).split())  # one line
        raise InputFileError(out / CHECKPOINT, f"does not fit this run ({problem})") from None
