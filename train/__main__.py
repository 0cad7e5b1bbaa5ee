"""Command line: `python -m train` / `grid-train`."""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

# Only what parsing the arguments needs: `--help` and a bad option answer without
# importing torch (0.05 s instead of 1.2 s on 2 cores); the rest is imported in `main`.
from .errors import ConfigError, plural

if TYPE_CHECKING:
    from .config import Config
    from .distributed import World


def _parser() -> argparse.ArgumentParser:
    # `grid-train` (the installed script), or `python -m train` / `python -m grid_train`
    run_as_module = Path(sys.argv[0]).name == "__main__.py"
    prog = f"python -m {__package__}" if run_as_module else "grid-train"
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Train an experiment (a VoxelGrid fitted to a target field, or a "
        "radiance field from posed images) and write a run directory (config.toml, "
        "metrics.jsonl, summary.json, checkpoint.pt, pictures).",
        epilog="Errors in the config, the files it reads, the run directory, a missing "
        "optional package or a run too large for the memory stop the command before any "
        "work, with one line and exit code 2; so do a run file that cannot be written and "
        "running out of memory during training (the last checkpoint is kept). SIGINT "
        "(Ctrl-C) and SIGTERM finish the current step, write the checkpoint and exit with "
        "130 and 143; a second signal exits at once. More commands (each has its own --help): "
        "'grid-train view RUN' shows a run in the browser, 'grid-train render RUN --path "
        "orbit --out video.mp4' renders a radiance field along a camera path, 'grid-train "
        "keys [PREFIX]' lists the config keys with their type, default and help.",
    )
    parser.add_argument(
        "--config",
        type=Path,
        help="experiment TOML file, or the name of a shipped one (default.toml, ...) from "
        "any directory (default: built-ins)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one key, e.g. --set grid.resolution=64 --set train.steps=500",
    )
    parser.add_argument(
        "--out",
        type=Path,
        help="run directory (default: runs/<config name>); a new run refuses one that "
        "already holds a run",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in --out from its checkpoint (its config, plus any --set)",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the run in --out: delete the files a run writes there "
        "(config.toml, metrics.jsonl, summary.json, checkpoint.pt, pictures, tensorboard/), "
        "keep the rest",
    )
    parser.add_argument(
        "--stop-at",
        type=int,
        metavar="STEP",
        help="stop after this step, leaving a checkpoint to --resume from",
    )
    parser.add_argument(
        "--view",
        type=int,
        nargs="?",
        const=VIEW_PORT,
        metavar="PORT",
        help=f"watch the run train in the browser: serve 'grid-train view' on PORT (default "
        f"{VIEW_PORT}) while it trains; without intermediate checkpoints "
        "(output.checkpoint_every = 0) one is written at every evaluation",
    )
    # The commands besides training in the usage line too, below the training one.
    usage = parser.format_usage().removeprefix("usage: ").rstrip()
    parser.usage = f"{usage}\n       {prog} {{{','.join(COMMANDS)}}} ..."
    return parser


#: The port `--view` serves on without a value.
VIEW_PORT = 8080
#: The commands besides training: `grid-train NAME ...` -> module (its `main(argv, prog)`).
COMMANDS = {"view": "viewer.command", "render": "render_video", "keys": "config_keys"}


def _command(name: str, argv: list[str]) -> int:
    """`grid-train view ...` / `grid-train render ...` / `grid-train keys ...`."""
    import importlib

    module = importlib.import_module(f".{COMMANDS[name]}", __package__)
    prog = f"{_parser().prog} {name}"
    return module.main(argv, prog=prog)


def _with_view_checkpoints(config: Config) -> Config:
    """`--view` shows the latest checkpoint: a run that writes none until the end writes
    one at every evaluation."""
    from .config import load_config, to_dict

    if config.output.checkpoint_every:
        return config
    every = config.eval.every
    print(
        f"--view: writing the checkpoint every {plural(every, 'step')} (eval.every)",
        file=sys.stderr,
    )
    return load_config(base=to_dict(config), overrides=[f"output.checkpoint_every={every}"])


def _start_viewer(out: Path, port: int, device: str) -> subprocess.Popen:
    """`grid-train view RUN` as a child process following the run (its own process: its
    renders do not hold the training's Python thread); it ends with this process."""
    command = [sys.executable, "-m", __package__, "view", str(out), "--follow"]
    command += ["--port", str(port), "--device", device, "--parent", str(os.getpid())]
    return subprocess.Popen(command, stdin=subprocess.DEVNULL)


def _stop_viewer(viewer: subprocess.Popen | None) -> None:
    if viewer is None:
        return
    viewer.terminate()
    try:
        viewer.wait(timeout=10)
    except subprocess.TimeoutExpired:
        viewer.kill()


def _check_resume_args(args: argparse.Namespace) -> None:
    if args.out is None:
        raise ConfigError("--resume: needs --out DIR, the run directory to continue")
    if args.config is not None:
        raise ConfigError(
            "--config: not used with --resume (the checkpoint holds the config; "
            "change keys with --set)"
        )


def main(argv: list[str] | None = None) -> int:
    """Parse arguments and run. Every ConfigError (a bad key or option, an unusable
    file, a run directory that holds a run, a missing optional package, a run too large
    for the memory) prints one line and returns 2, before any training; so do a run file
    that cannot be written (`OutputFileError`) and running out of memory during training
    (`OutOfMemory`). A signal that stops the run (`Interrupted`) prints one line and
    returns 130 (SIGINT) or 143 (SIGTERM).

    Under torchrun (WORLD_SIZE in the environment) every rank runs this; they join the
    process group first, agree on any error (rank 0 prints it, every rank returns 2),
    and rank 0 alone writes and prints (see train/distributed.py). An error of one rank
    alone (out of memory) is printed by that rank, which leaves without waiting for the
    others (torchrun stops them).

    Called as the command (`argv` None), it leaves the objects it made to the process's
    exit: Python's last collections walked torch's and the run's millions of objects for
    0.7-1.2 s on 2 cores after the summary was printed, and 0.1-0.3 s with them frozen
    (`gc.freeze`; nothing is left unwritten: the run's files are closed by then)."""
    try:
        return _main(argv)
    finally:
        if argv is None:
            gc.freeze()


def _main(argv: list[str] | None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if args and args[0] in COMMANDS:
        return _command(args[0], args[1:])
    rank = 0
    if "WORLD_SIZE" in os.environ:  # torchrun; imports torch, which --help does not need
        from . import distributed

        try:
            rank = distributed.from_env().rank
        except ConfigError as error:
            print(f"grid-train: {error.label}: {error}", file=sys.stderr)
            return 2
    if rank == 0:
        args = _parser().parse_args(argv)
    else:  # every rank fails alike on bad arguments; rank 0 says why
        with contextlib.redirect_stderr(io.StringIO()):
            args = _parser().parse_args(argv)
    if argv is None:  # the command: CUDA's start overlaps torch's import
        from . import cuda_warmup

        cuda_warmup.start(args)
    from . import distributed

    world = distributed.start()
    in_step = False
    try:
        code, in_step = _run(args, world)  # in_step: every rank got here together
        return code
    except KeyboardInterrupt:  # Ctrl-C before training, while run() has no handler yet
        print(
            "grid-train: interrupted (SIGINT) outside training: no step was lost", file=sys.stderr
        )
        return 128 + signal.SIGINT
    finally:
        distributed.stop(barrier=in_step)


def _check_view(port: int) -> None:
    """ConfigError naming --view for a bad port or a missing viser, before any training."""
    from .dependencies import INSTALL_VIEW, require

    if not 0 <= port <= 65535:
        raise ConfigError(f"--view: expected a port number in [0, 65535], got {port}")
    require("viser", key="--view", needs="the viewer", install=INSTALL_VIEW, singular=True)


def _run(args: argparse.Namespace, world: World) -> tuple[int, bool]:
    """(exit code, whether every rank ends here together)."""
    from . import distributed
    from .config import load_config
    from .dependencies import check_dependencies
    from .interrupt import Interrupted
    from .rundir import check_run_dir
    from .shipped_configs import resolve as resolve_config

    try:
        error = None
        try:
            if args.resume:
                _check_resume_args(args)
            out = args.out or Path("runs") / (args.config.stem if args.config else "default")
            if args.resume:
                from .checkpoint import resume_config

                check_run_dir(out, resume=True, overwrite=args.overwrite)
                config = resume_config(out, args.set)
            else:  # the config's own errors first: fixing --out would only show them next
                config = load_config(args.config and resolve_config(args.config), args.set)
                check_run_dir(out, resume=False, overwrite=args.overwrite)
                from .devices import gpu_config_note

                note = gpu_config_note(args.config, config.device)
                if note is not None and world.is_main:
                    print(f"grid-train: note: {note}", file=sys.stderr, flush=True)
            check_dependencies(config)
            if args.view is not None:
                _check_view(args.view)
                config = _with_view_checkpoints(config)
        except ConfigError as caught:
            error = caught
        world.agree(error)

        from .loop import run

        viewer = None
        if args.view is not None and world.is_main:
            viewer = _start_viewer(out, args.view, config.device)
        try:
            summary = run(
                config, out, resume=args.resume, overwrite=args.overwrite, stop_at=args.stop_at
            )
        finally:
            _stop_viewer(viewer)
    except ConfigError as error:
        agreed = world.size == 1 or distributed.is_agreed(error)
        if world.is_main or not agreed:  # an error of this rank alone: it says so
            print(f"grid-train: {error.label}: {error}", file=sys.stderr)
        return 2, agreed
    except Interrupted as stop:  # every rank stops at the same step
        if world.is_main:
            print(stop, file=sys.stderr)
        return stop.exit_code, True
    if summary is not None and world.is_main:
        print(json.dumps(summary, indent=2))
        print(f"wrote {out}/", file=sys.stderr)
    return 0, True


if __name__ == "__main__":
    sys.exit(main())
