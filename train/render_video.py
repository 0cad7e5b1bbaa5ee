"""Command line: `grid-train render RUN --path orbit|spiral|FILE --out video.mp4`.

Renders a trained radiance field along a camera path, frame by frame with the experiment's
own render of a camera (`render_camera` of its `ExperimentSpec.view` module: the offline
render, so a frame is exactly what rendering that camera gives), into a video (imageio with
its ffmpeg, the `[video]` extra) and/or PNG frames (`--frames DIR`, Pillow).

Paths (`train.camera_path`): `orbit` (one turn about the world's up axis from the run's
first test camera, as turntable.gif), `spiral` (two turns, the elevation going from 15
degrees above that camera's to 15 below), or a nerfstudio camera_path.json. Errors print
one line and exit with code 2, as `grid-train` does.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from .camera_path import SHAPES, CameraPath, read_camera_path, shape_path, write_camera_path
from .dependencies import INSTALL_VIDEO, require
from .errors import ConfigError, plural, writing
from .experiments import FORMAT_1_KIND, REGISTRY, specs

if TYPE_CHECKING:  # numpy and torch are imported where used: `--help` needs neither
    import numpy as np
    import torch

DEFAULT_SECONDS = 4.0
DEFAULT_FPS = 24.0


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Render a trained radiance field along a camera path into a video "
        "and/or PNG frames; every frame is the run's own render of that camera.",
        epilog="A missing run or checkpoint, a run that is no radiance field, a bad path "
        "file or option, or a missing video writer stop the command with one line and exit "
        "code 2.",
    )
    parser.add_argument(
        "run", type=Path, metavar="RUN", help="the run directory (grid-train's --out)"
    )
    parser.add_argument(
        "--path",
        required=True,
        metavar="orbit|spiral|FILE",
        help="orbit: one turn about the up axis from the run's first test camera; spiral: two "
        "turns from 15 degrees above it to 15 below; FILE: a nerfstudio camera_path.json",
    )
    parser.add_argument(
        "--out", type=Path, help="the video to write (.mp4; needs the [video] extra)"
    )
    parser.add_argument(
        "--frames",
        type=Path,
        metavar="DIR",
        help="also (or instead) write each frame as DIR/frame_00000.png",
    )
    parser.add_argument(
        "--lossless",
        action="store_true",
        help="encode the video losslessly (H.264 in RGB, libx264rgb at crf 0): decoded frames "
        "are the renders, bit for bit; fewer players open it",
    )
    parser.add_argument(
        "--seconds",
        type=float,
        help=f"orbit and spiral: the video's length (default {DEFAULT_SECONDS:g})",
    )
    parser.add_argument(
        "--fps",
        type=float,
        help=f"frames per second (default {DEFAULT_FPS:g}; a path file's own rate: its "
        "frames over its 'seconds')",
    )
    parser.add_argument(
        "--width",
        type=int,
        help="frame width in pixels (default: the run's test views', or the path file's)",
    )
    parser.add_argument("--height", type=int, help="frame height in pixels (default: likewise)")
    parser.add_argument(
        "--save-path",
        type=Path,
        metavar="FILE",
        help="also write the cameras rendered as a camera_path.json (to edit, or to render again)",
    )
    parser.add_argument(
        "--device", default="auto", help="where to render: auto (CUDA when there is one), cpu, cuda"
    )
    return parser


def main(argv: list[str] | None = None, prog: str = "grid-train render") -> int:
    args = _parser(prog).parse_args(argv)
    try:
        message = render(args)
    except ConfigError as error:
        print(f"{prog}: {error.label}: {error}", file=sys.stderr)
        return 2
    print(message)
    return 0


def check_options(args: argparse.Namespace) -> None:
    """ConfigError naming the option for a bad value, before any work."""
    if args.out is None and args.frames is None:
        raise ConfigError("--out: expected a video file to write (or --frames DIR, or both)")
    if args.lossless and args.out is None:
        raise ConfigError("--lossless: encodes the video of --out, which is not given")
    for name in ("seconds", "fps"):
        value = getattr(args, name)
        if value is not None and not value > 0:
            raise ConfigError(f"--{name}: expected a number > 0, got {value}")
    for name in ("width", "height"):
        value = getattr(args, name)
        if value is not None and not 1 <= value <= 16384:
            raise ConfigError(f"--{name}: expected pixels in [1, 16384], got {value}")
    if args.path not in SHAPES and not Path(args.path).exists():
        raise ConfigError(
            f"--path: expected {', '.join(SHAPES)} or a camera_path.json file, got "
            f"{args.path!r} (no such file)"
        )
    if args.seconds is not None and args.path not in SHAPES:
        raise ConfigError("--seconds: only for orbit and spiral (a path file has its own)")


def check_video_packages(args: argparse.Namespace) -> None:
    """MissingDependencyError naming --out when a video is asked for without its packages:
    after every option and the run are checked, so a bad value is named first."""
    if args.out is not None:
        require("imageio", key="--out", needs="videos", install=INSTALL_VIDEO)
        require(
            "imageio_ffmpeg",
            key="--out",
            needs="videos",
            install=INSTALL_VIDEO,
            package="imageio-ffmpeg",
        )


def render(args: argparse.Namespace) -> str:
    """Render the path (see the module docstring); returns the one-line report. Raises
    ConfigError (or a subclass) naming the option or the file."""
    check_options(args)  # before the imports of torch: a bad option answers at once
    from .checkpoint import CHECKPOINT, load_checkpoint
    from .config import load_config
    from .loop import device_option

    device = device_option(args.device)
    run = args.run
    if not run.is_dir():
        raise ConfigError(f"RUN: {run} is not a directory (a run directory: grid-train's --out)")
    if not (run / CHECKPOINT).is_file():
        raise ConfigError(f"RUN: no {CHECKPOINT} in {run} (train it first: grid-train --out RUN)")
    check_video_packages(args)
    checkpoint = load_checkpoint(run)
    module = camera_module(checkpoint.get("kind", FORMAT_1_KIND), run)
    config = load_config(base=checkpoint["config"])
    cameras = camera_path(args, module.home(config))
    model, background = module.load(run, config, checkpoint, device)
    if args.save_path is not None:
        write_camera_path(args.save_path, cameras)
    frames = render_frames(module, model, background, cameras, args)
    wrote = [str(p) for p in (args.out, args.frames) if p is not None]
    return (
        f"wrote {' and '.join(wrote)}: {plural(frames, 'frame')} of "
        f"{cameras.width}x{cameras.height} at {cameras.fps:g} fps, step {checkpoint['step']} "
        "of the run"
    )


def view_module(kind: str) -> ModuleType | None:
    """The `view` module of experiment `kind`, if it has one."""
    name = specs()[kind].view
    return importlib.import_module(f".{REGISTRY[kind]}.{name}", __package__) if name else None


def camera_module(kind: str, run: Path) -> ModuleType:
    """The view module of experiment `kind` if it renders cameras, else ConfigError."""
    module = view_module(kind)
    if module is None or not hasattr(module, "render_camera"):
        rendering = [k for k in specs() if hasattr(view_module(k), "render_camera")]
        raise ConfigError(
            f"RUN: {run} holds a {kind!r} run; camera paths render radiance fields "
            f"({', '.join(rendering)} runs)"
        )
    return module


def camera_path(args: argparse.Namespace, home: Any) -> CameraPath:
    """The cameras to render: the shape around the run's first test camera, or the file's;
    --width / --height / --fps replace theirs (one of width and height alone keeps the
    aspect)."""
    if args.path in SHAPES:
        fps = args.fps or DEFAULT_FPS
        count = max(1, round((args.seconds or DEFAULT_SECONDS) * fps))
        size = (home.width, home.height)
        cameras = shape_path(args.path, home.c2w[0], home.up, count, home.fov, size, fps)
    else:
        cameras = read_camera_path(args.path)
        cameras.fps = args.fps or cameras.fps
    width, height = cameras.width, cameras.height
    if args.width and not args.height:
        height = max(1, round(height * args.width / width))
    if args.height and not args.width:
        width = max(1, round(width * args.height / height))
    cameras.width, cameras.height = args.width or width, args.height or height
    return cameras


def render_frames(
    module: ModuleType, model: Any, background: torch.Tensor, cameras: CameraPath, args
) -> int:
    """Render every camera; write the video and/or the PNGs. Returns the frame count."""
    from PIL import Image

    from .progress_bar import progress_bar

    if args.frames is not None:
        with writing(args.frames, key="--frames"):
            args.frames.mkdir(parents=True, exist_ok=True)
    writer = open_video(args.out, cameras.fps, args.lossless) if args.out is not None else None
    bar = progress_bar(len(cameras), 0, "render", show=True, unit="frame")
    try:
        for i in range(len(cameras)):
            rgb = module.render_camera(
                model,
                background,
                cameras.c2w[i],
                float(cameras.fov[i]),
                cameras.width,
                cameras.height,
            )
            image = module.to_bytes(rgb)
            if args.frames is not None:
                path = args.frames / f"frame_{i:05d}.png"
                with writing(path, remove=path, key="--frames"):
                    Image.fromarray(image).save(path)
            if writer is not None:
                with writing(args.out, key="--out"):
                    writer.append_data(image if args.lossless else even(image))
            bar.update(1)
    finally:
        bar.close()
        if writer is not None:
            with writing(args.out, key="--out"):
                writer.close()
    return len(cameras)


def open_video(path: Path, fps: float, lossless: bool):
    """An imageio writer of H.264 video: yuv420p (plays everywhere), or lossless RGB."""
    import imageio.v2 as imageio

    path.parent.mkdir(parents=True, exist_ok=True)
    options: dict[str, Any] = dict(fps=fps, macro_block_size=1)
    if lossless:
        options.update(codec="libx264rgb", pixelformat="rgb24", output_params=["-crf", "0"])
    else:
        options.update(codec="libx264", pixelformat="yuv420p", quality=8)
    with writing(path, key="--out"):
        return imageio.get_writer(path, **options)


def even(image: np.ndarray) -> np.ndarray:
    """[H, W, 3] with its last row and column repeated where H or W is odd: yuv420p video
    needs even sizes."""
    import numpy as np

    h, w = image.shape[:2]
    return np.pad(image, ((0, h % 2), (0, w % 2), (0, 0)), mode="edge")


if __name__ == "__main__":
    sys.exit(main())
