"""Command line: `grid-train view RUN [--port N] [--host H] [--device D] [--max-size PX]`.

Serves the run directory RUN in the browser (see `train.viewer.server`) until Ctrl-C.
A bad option, a missing run or checkpoint, or viser missing stop the command with one line
and exit code 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import ConfigError

DEFAULT_PORT = 8080


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Show a run in the browser (viser): a radiance field rendered for the "
        "browser's camera (small frames while it moves, the full frame when it stops), a "
        "signed distance's mesh and slices, a field's slices; the held-out PSNR against "
        "steps. A run that is training is followed: each newer checkpoint is loaded.",
        epilog="A missing run directory or checkpoint, a bad option or a missing viser stop "
        "the command with one line and exit code 2.",
    )
    parser.add_argument(
        "run", type=Path, metavar="RUN", help="the run directory (grid-train's --out)"
    )
    parser.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help=f"port to serve on (default {DEFAULT_PORT}; the next free one if taken)",
    )
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to serve on (default 127.0.0.1: this machine only; 0.0.0.0: every interface)",
    )
    parser.add_argument(
        "--device", default="auto", help="where to render: auto (CUDA when there is one), cpu, cuda"
    )
    parser.add_argument(
        "--max-size",
        type=int,
        default=1024,
        metavar="PX",
        help="the longer side of a full frame at most, in pixels (default 1024; the browser "
        "stretches it over its canvas)",
    )
    parser.add_argument(
        "--fps",
        type=float,
        default=20.0,
        help="frames per second previews aim at while the camera moves (default 20)",
    )
    parser.add_argument(
        "--seconds",
        type=float,
        metavar="S",
        help="stop after S seconds (default: run until Ctrl-C)",
    )
    parser.add_argument("--follow", action="store_true", help=argparse.SUPPRESS)  # --view
    parser.add_argument("--parent", type=int, help=argparse.SUPPRESS)  # --view: its process
    return parser


def check_options(args: argparse.Namespace) -> None:
    """ConfigError naming the option for a value out of range."""
    if not 0 <= args.port <= 65535:
        raise ConfigError(f"--port: expected a port number in [0, 65535], got {args.port}")
    if args.max_size < 16:
        raise ConfigError(f"--max-size: expected pixels >= 16, got {args.max_size}")
    if not args.fps > 0:
        raise ConfigError(f"--fps: expected a number > 0, got {args.fps}")
    if args.seconds is not None and not args.seconds > 0:
        raise ConfigError(f"--seconds: expected a number > 0, got {args.seconds}")


def main(argv: list[str] | None = None, prog: str = "grid-train view") -> int:
    args = _parser(prog).parse_args(argv)
    try:
        check_options(args)  # before the imports of torch: a bad option answers at once
        from ..loop import device_option
        from .server import Viewer, ViewOptions

        options = ViewOptions(
            device=device_option(args.device),
            max_size=args.max_size,
            fps=args.fps,
            training=args.follow,
        )
        viewer = Viewer(args.run, options, host=args.host, port=args.port, wait=args.follow)
    except ConfigError as error:
        print(f"{prog}: {error.label}: {error}", file=sys.stderr)
        return 2
    print(f"viewing {args.run} at {viewer.url} (Ctrl-C to stop)", file=sys.stderr, flush=True)
    try:
        viewer.serve(args.seconds, parent=args.parent)
    except KeyboardInterrupt:
        pass
    finally:
        viewer.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
