"""A finished run's results, written by rank 0: the experiment's files, the final checkpoint,
summary.json (strict JSON: `metrics.json_text`) and the pictures; then the phases line.

summary.json's "phases" say where the command's seconds went, from Python's start: they add
up to "total". "phase_parts" breaks some of them down (the imports within "start_up", the
experiment's inputs and model within "setup", the CUDA graph captures within "train", the
evaluations and the checkpoints within "evaluations_and_checkpoints").
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .errors import writing
from .experiment import Experiment
from .metrics import MetricsLog, json_text


def write_results(
    out: Path,
    exp: Experiment,
    summary: dict[str, Any],
    phases: dict[str, float],
    parts: dict[str, dict[str, float]],
    log: MetricsLog,
    checkpoint: Callable[[], None] | None,
) -> None:
    """The files first (sdf: mesh.ply, what a user waits for), then `checkpoint` (None: one
    is written already), then the summary: a summary or a picture that cannot be written
    leaves this step's checkpoint to resume from. Adds their times to `phases`."""
    from . import STARTED

    start = time.perf_counter()
    exp.write_files(out, summary)
    phases["files"] = time.perf_counter() - start
    if checkpoint is not None:
        start = time.perf_counter()
        checkpoint()
        phases["checkpoint"] = time.perf_counter() - start
    write_summary(out, summary, phases, parts)
    if exp.config.output.pictures:
        start = time.perf_counter()
        exp.write_pictures(out, log.read(), summary)
        phases["pictures"] = time.perf_counter() - start
    phases["total"] = time.perf_counter() - STARTED
    write_summary(out, summary, phases, parts)  # again, with the files' and pictures' times
    print(phase_line(phases, parts), file=sys.stderr)


def write_summary(
    out: Path,
    summary: dict[str, Any],
    phases: dict[str, float],
    parts: dict[str, dict[str, float]],
) -> None:
    path = out / "summary.json"
    with writing(path, remove=path):
        whole = {**summary, "phases": phases, "phase_parts": parts}
        path.write_text(json_text(whole, indent=2) + "\n")


def phase_line(phases: dict[str, float], parts: dict[str, dict[str, float]]) -> str:
    """`phases: start_up 4.1 s (import_torch 3.2 s, import_grid 0.3 s), setup 0.8 s, ...`"""
    items = []
    for name, seconds in phases.items():
        inner = ", ".join(f"{k} {v:.1f} s" for k, v in parts.get(name, {}).items())
        items.append(f"{name} {seconds:.1f} s" + (f" ({inner})" if inner else ""))
    return "phases: " + ", ".join(items)


def grid_ops() -> str:
    """Where grid's ops come from ("installed", a build folder, ...): summary.json's "grid_ops"."""
    import grid

    return str(grid.build_info()["source"])
