"""Command line: `python -m train` / `grid-train`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .config import ConfigError, load_config


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m train",
        description="Fit a VoxelGrid to a target field and write a run directory "
        "(config.toml, metrics.jsonl, summary.json, checkpoint.pt, slices.png, curves.png).",
    )
    parser.add_argument("--config", type=Path, help="experiment TOML file (default: built-ins)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one key, e.g. --set grid.resolution=64 --set train.steps=500",
    )
    parser.add_argument("--out", type=Path, help="run directory (default: runs/<config name>)")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in --out from its checkpoint (its config, plus any --set)",
    )
    parser.add_argument(
        "--stop-at",
        type=int,
        metavar="STEP",
        help="stop after this step, leaving a checkpoint to --resume from",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, validate the config (exit 2 on error, no traceback), run."""
    args = _parser().parse_args(argv)
    try:
        if args.resume:
            if args.out is None:
                raise ConfigError("--resume: needs --out DIR, the run directory to continue")
            if args.config is not None:
                raise ConfigError(
                    "--config: not used with --resume (the checkpoint holds the config; "
                    "change keys with --set)"
                )
            from .loop import resume_config  # imports grid (may compile on first use)

            config = resume_config(args.out, args.set)
        else:
            config = load_config(args.config, args.set)
    except ConfigError as error:
        print(f"grid-train: config error: {error}", file=sys.stderr)
        return 2
    out = args.out or Path("runs") / (args.config.stem if args.config else "default")

    from .loop import run

    summary = run(config, out, resume=args.resume, stop_at=args.stop_at)
    if summary is not None:
        print(json.dumps(summary, indent=2))
        print(f"wrote {out}/", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
