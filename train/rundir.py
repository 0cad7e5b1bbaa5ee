"""The run directory: when a run may start in it, and what `--overwrite` deletes.

A directory *holds a run* when it has any of `RUN_MARKERS` (the files every run
writes at its start or at its checkpoints). A new run refuses such a directory
unless told to `--resume` it or to `--overwrite` it, so a second command never
silently replaces the first one's results. `--overwrite` deletes the files a run
writes (`RUN_FILES`, `RUN_DIRS`) and nothing else: the user's own files in the directory
stay.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from .errors import ConfigError, writing
from .experiments import specs
from .tensorboard import DIRECTORY as TENSORBOARD

#: Any of these makes a directory hold a run.
RUN_MARKERS = ("checkpoint.pt", "metrics.jsonl", "summary.json", "config.toml")
#: Every file a run writes: what `--overwrite` deletes. Each experiment's spec lists
#: its own (`ExperimentSpec.files`; tests check that a run writes nothing else).
RUN_FILES = (
    *(*RUN_MARKERS, "checkpoint.pt.tmp", "curves.png"),
    *(name for spec in specs().values() for name in spec.files),
)
#: The folders a run writes (`output.tensorboard`): `--overwrite` deletes them whole.
RUN_DIRS = (TENSORBOARD,)


def held_run_files(out: Path) -> list[str]:
    """The names in RUN_MARKERS that are files in `out` (empty: it holds no run)."""
    return [name for name in RUN_MARKERS if (out / name).is_file()]


def check_run_dir(out: Path, *, resume: bool, overwrite: bool) -> None:
    """Raise ConfigError (exit 2) unless a run may start in `out` as asked.

    - resume and overwrite together: refused (continue or replace, not both).
    - `out` exists but is not a directory: refused.
    - a new run (not resume) in a directory that holds a run: refused unless overwrite.
    Resuming needs a checkpoint; `resume_config` checks that.
    """
    if resume and overwrite:
        raise ConfigError(
            "--overwrite: not used with --resume (--resume continues the run in --out, "
            "--overwrite replaces it)"
        )
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out: {out} is not a directory")
    held = [] if resume else held_run_files(out)
    if held and not overwrite:
        raise ConfigError(
            f"--out: {out} already holds a run ({', '.join(held)}); continue it with "
            f"--resume, replace it with --overwrite, or choose another --out"
        )


def prepare_run_dir(out: Path, *, resume: bool, overwrite: bool) -> None:
    """`check_run_dir`, then create `out`; with overwrite, first delete the files in
    RUN_FILES and the folders in RUN_DIRS that it holds (and say so on stderr). Nothing
    else is touched. A file system that refuses raises OutputFileError naming `out`."""
    check_run_dir(out, resume=resume, overwrite=overwrite)
    with writing(out):  # a read-only or full file system: one line naming the directory
        if overwrite:
            deleted = [name for name in RUN_FILES if (out / name).is_file()]
            for name in deleted:
                (out / name).unlink()
            for name in RUN_DIRS:
                if (out / name).is_dir():
                    shutil.rmtree(out / name)
                    deleted.append(f"{name}/")
            if deleted:
                print(f"--overwrite: deleted {', '.join(deleted)} from {out}", file=sys.stderr)
        out.mkdir(parents=True, exist_ok=True)
        if not resume:
            (out / "summary.json").unlink(missing_ok=True)  # a new run has none yet
