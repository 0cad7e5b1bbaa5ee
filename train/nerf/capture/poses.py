"""Camera poses from images: a folder of photos in, a scene in the instant-ngp / nerfstudio
layout (`train.nerf.data.ngp`) out, ready for `data.path`.

    python -m train.nerf.capture.poses IMAGES_DIR --out DATA_DIR [--matcher sequential]
    python -m train.nerf.capture.poses IMAGES_DIR --out DATA_DIR --model sparse/0     # COLMAP's
    python -m train.nerf.capture.poses IMAGES_DIR --out DATA_DIR --llff poses_bounds.npy   # LLFF's

From images (pycolmap, the `capture` extra): SIFT features, matching (every pair, or each
image with its next --overlap for video frames), COLMAP's incremental mapper, undistortion
to pinhole cameras. With --model, an existing COLMAP model (.bin or .txt) replaces the first
three; with --llff, LLFF's poses and focal lengths are used as they are (no pycolmap).
Then the poses are oriented, centred and scaled (`train.nerf.capture.orient`) and DATA_DIR gets
`transforms.json` (OpenGL camera-to-world, intrinsics fl_x, fl_y, cx, cy, w, h; the
similarity applied as `applied_transform` and `applied_scale`), `images/` and, from
COLMAP, the undistorted model `sparse/0/` (in COLMAP's world, before the similarity).

Everything is written into a temporary sibling of DATA_DIR and moved there at the end: a
refused or interrupted run leaves nothing. Errors: one line naming the file or option,
exit code 2.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np

from ...dependencies import install_hint, require
from ...errors import ConfigError, InputFileError, plural
from .orient import CENTRES, Orientation, View, llff_poses, orient

INSTALL_CAPTURE = install_hint("capture")
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".tif", ".tiff", ".bmp")
MIN_IMAGES = 3
PROG = "python -m train.nerf.capture.poses"


# ---- the images ---------------------------------------------------------------------------


def list_images(images_dir: Path) -> list[str]:
    """The image files of `images_dir` (by suffix, not its subfolders), sorted by name;
    InputFileError for a missing folder, too few images, an unreadable image or two images
    with the same bytes."""
    key = "IMAGES_DIR"
    if not images_dir.is_dir():
        raise InputFileError(images_dir, "no such folder (expected a folder of images)", key=key)
    names = sorted(
        p.name for p in images_dir.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES
    )
    if len(names) < MIN_IMAGES:
        raise InputFileError(
            images_dir,
            f"{plural(len(names), 'image')} ({', '.join(IMAGE_SUFFIXES)}); poses need at least "
            f"{MIN_IMAGES} overlapping views",
            key=key,
        )
    seen: dict[str, str] = {}
    for name in names:
        path = images_dir / name
        image_size(path)
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if digest in seen:
            raise InputFileError(
                path,
                f"the same bytes as {seen[digest]} (a duplicate image adds no view and "
                "breaks matching: remove one)",
                key=key,
            )
        seen[digest] = name
    return names


def image_size(path: Path) -> tuple[int, int]:
    """(width, height) of an image, decoding it whole; InputFileError if it cannot be read."""
    from PIL import Image  # Pillow comes with matplotlib (the `train` extra)

    try:
        with Image.open(path) as image:
            image.load()
            return image.size
    except Exception as error:  # PIL raises OSError, SyntaxError, ValueError, ...
        raise InputFileError(path, f"cannot read the image ({error})", key="IMAGES_DIR") from None


# ---- the poses ----------------------------------------------------------------------------


def colmap_views(args: argparse.Namespace, names: list[str], stage: Path) -> tuple[list, dict]:
    """Views (`train.nerf.capture.colmap.View`) and statistics from COLMAP: mapped here, or read
    from --model; the undistorted images and model go into `stage`."""
    require(
        "pycolmap",
        key="--model" if args.model else "IMAGES_DIR",
        needs="COLMAP poses (features, matching, mapping, undistortion)",
        install=INSTALL_CAPTURE,
    )
    from . import colmap

    colmap.quiet(args.verbose)
    colmap.check_camera_model(args.camera_model)
    work = stage / ".colmap"
    work.mkdir()
    if args.model:
        model = colmap.read_model(args.model, key="--model")
        missing = sorted(set(colmap.registered_names(model)) - set(names))
        if missing:
            raise InputFileError(
                args.images / missing[0],
                f"named in the COLMAP model {args.model} but not in IMAGES_DIR "
                f"({len(missing)} missing)",
                key="--model",
            )
        best = None
    else:
        options = colmap.SfmOptions(
            matcher=args.matcher,
            overlap=args.overlap,
            camera_model=args.camera_model,
            max_error=args.max_error,
            threads=args.threads,
            seed=args.seed,
        )
        groups: dict[tuple[int, int], list[str]] = {}
        for name in names:
            groups.setdefault(image_size(args.images / name), []).append(name)
        model, best = colmap.reconstruct(args.images, list(groups.values()), work, options)
        check_registered(model, names, best, args)
    stats = colmap.statistics(model)
    stats["images"] = len(names)
    model = colmap.undistort(model, args.images, work, stage)
    stats["points_xyz"] = colmap.points(model)
    shutil.rmtree(work)
    return colmap.views(model), stats


def check_registered(model, names: list[str], best: int, args: argparse.Namespace) -> None:
    """InputFileError naming IMAGES_DIR when COLMAP registered too few of the images."""
    if model is None:
        raise InputFileError(
            args.images,
            f"COLMAP found no pair of images to start from ({plural(len(names), 'image')}; "
            f"the best pair "
            f"has {best} verified matches, it needs 100): the images share no structure, or "
            "too little texture; photograph one scene with more overlap",
            key="IMAGES_DIR",
        )
    from . import colmap

    registered = set(colmap.registered_names(model))
    if len(registered) < args.min_registered * len(names):
        lost = [n for n in names if n not in registered]
        shown = ", ".join(lost[:5]) + (", ..." if len(lost) > 5 else "")
        raise InputFileError(
            args.images,
            f"COLMAP registered {len(registered)} of {plural(len(names), 'image')}, fewer than "
            f"--min-registered {args.min_registered:g}; not registered: {shown}",
            key="IMAGES_DIR",
        )


def llff_views(args: argparse.Namespace, names: list[str], stage: Path) -> tuple[list, dict]:
    """Views from LLFF's poses_bounds.npy: one row per image in name order, the focal length
    scaled from LLFF's image height to the file's; the images are copied into `stage`."""
    array = _read_llff(args.llff)
    if len(array) != len(names):
        raise InputFileError(
            args.llff,
            f"{plural(len(array), 'pose')} but IMAGES_DIR has {plural(len(names), 'image')} "
            "(one row per image, in file-name order)",
            key="--llff",
        )
    c2w, hwf, bounds = llff_poses(array)
    (stage / "images").mkdir()
    out = []
    for name, pose, (h, _, focal) in zip(names, c2w, hwf, strict=True):
        width, height = image_size(args.images / name)
        f = float(focal) * height / float(h)  # LLFF's images_4/ etc. are downscaled
        shutil.copy2(args.images / name, stage / "images" / name)
        out.append(View(name, pose, (f, f, 0.5 * width, 0.5 * height), (width, height)))
    return out, {"images": len(names), "registered": len(names), "bounds": bounds}


def _read_llff(path: Path) -> np.ndarray:
    from ...errors import read_input

    def read(file: Path) -> np.ndarray:
        array = np.load(file, allow_pickle=False)
        if array.ndim != 2 or array.shape[1] != 17 or not np.isfinite(array).all():
            raise ValueError(f"expected a finite [N, 17] array; got shape {list(array.shape)}")
        return array

    return read_input(path, read, "LLFF poses_bounds.npy", key="--llff")


# ---- transforms.json --------------------------------------------------------------------


def transforms(views: list, orientation: Orientation, stats: dict) -> dict:
    """The transforms.json of oriented views: intrinsics at the top level when every view
    shares them, else per frame; the similarity applied; what COLMAP reported."""
    keys = ("fl_x", "fl_y", "cx", "cy")
    cameras = [dict(zip(keys, v.intrinsics, strict=True), w=v.size[0], h=v.size[1]) for v in views]
    shared = all(c == cameras[0] for c in cameras)
    meta: dict = {"camera_model": "PINHOLE"}
    if shared:
        meta |= cameras[0]
    frames = []
    for k, (view, camera) in enumerate(zip(views, cameras, strict=True)):
        frame = {"file_path": f"images/{view.name}", "transform_matrix": view.c2w.tolist()}
        if not shared:
            frame |= camera
        if "bounds" in stats:  # LLFF's near and far, in the scaled world
            near, far = stats["bounds"][k] * orientation.scale
            frame |= {"near": float(near), "far": float(far)}
        frames.append(frame)
    meta["frames"] = frames
    meta["applied_transform"] = np.concatenate(
        [orientation.rotation, orientation.translation[:, None]], axis=1
    ).tolist()
    meta["applied_scale"] = orientation.scale
    meta["poses"] = {k: v for k, v in stats.items() if k not in ("bounds", "points_xyz")}
    return meta


def point_box(xyz: np.ndarray, orientation: Orientation) -> str:
    """Where 98% of the sparse points lie in the oriented world (1st to 99th percentile)."""
    if not len(xyz):
        return ""
    moved = orientation.scale * (xyz @ orientation.rotation.T + orientation.translation)
    lo, hi = np.percentile(moved, 1, axis=0), np.percentile(moved, 99, axis=0)
    box = f"[{', '.join(f'{v:.2f}' for v in lo)}] to [{', '.join(f'{v:.2f}' for v in hi)}]"
    return f"98% of the {len(xyz)} sparse points lie in {box} (a grid.bounds to start from)"


def write(args: argparse.Namespace) -> list[str]:
    """The whole command; returns the lines it reports."""
    start = time.perf_counter()
    names = list_images(args.images)
    out: Path = args.out
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(f"--out: {out} exists and is not empty; choose a new folder")
    where = out.resolve()  # `--out .` has no name of its own
    stage = where.with_name(f".{where.name}.tmp{os.getpid()}")
    shutil.rmtree(stage, ignore_errors=True)
    stage.mkdir(parents=True)
    try:
        if args.llff:
            views, stats = llff_views(args, names, stage)
        else:
            views, stats = colmap_views(args, names, stage)
        c2w, orientation = orient(np.stack([v.c2w for v in views]), centre=args.centre)
        for view, pose in zip(views, c2w, strict=True):
            view.c2w = pose
        stats["seconds"] = round(time.perf_counter() - start, 2)
        meta = transforms(views, orientation, stats)
        (stage / "transforms.json").write_text(json.dumps(meta, indent=2) + "\n")
        if out.exists():
            out.rmdir()  # empty, checked above
        stage.rename(out)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    return report(stats, orientation, out)


def report(stats: dict, orientation: Orientation, out: Path) -> list[str]:
    """What the command prints."""
    lines = [f"registered {stats['registered']} of {stats['images']} images"]
    if "reprojection_error" in stats:
        lines[0] += (
            f"; {stats['points']} points, mean reprojection error "
            f"{stats['reprojection_error']:.3f} px, mean track length "
            f"{stats['track_length']:.2f} images"
        )
    lines.append(orientation.describe())
    box = point_box(stats.get("points_xyz", np.zeros((0, 3))), orientation)
    if box:
        lines.append(box)
    lines.append(f"wrote {out / 'transforms.json'} and {out / 'images'}/ in {stats['seconds']} s")
    return lines


# ---- command line -------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Camera poses from a folder of images (COLMAP via pycolmap), from a COLMAP "
        "model or from LLFF's poses_bounds.npy, written as transforms.json (instant-ngp / "
        "nerfstudio layout) with the images, oriented (z up), centred and scaled.",
        epilog="Bad input (a missing, unreadable or duplicate image, too few images, images "
        "COLMAP cannot register, a model naming missing images) stops it with one line and "
        "exit code 2, writing nothing.",
    )
    parser.add_argument("images", type=Path, metavar="IMAGES_DIR", help="the folder of images")
    parser.add_argument("--out", type=Path, required=True, help="the new scene folder")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--model", type=Path, help="use this COLMAP model (e.g. sparse/0)")
    source.add_argument("--llff", type=Path, help="use LLFF's poses_bounds.npy")
    parser.add_argument(
        "--matcher",
        choices=("exhaustive", "sequential"),
        default="exhaustive",
        help="exhaustive: every pair (photos); sequential: each image with the next "
        "--overlap in name order (video frames)",
    )
    parser.add_argument("--overlap", type=int, default=10, help="sequential matching's window")
    parser.add_argument(
        "--camera-model",
        default="SIMPLE_RADIAL",
        help="COLMAP camera model of the photos (SIMPLE_RADIAL; OPENCV for wide lenses)",
    )
    parser.add_argument(
        "--max-error",
        type=float,
        metavar="PX",
        help="keep 3D points within PX pixels and register images within 2 PX (default: "
        "COLMAP's 4 and 12; 2 suits renders and sharp photos)",
    )
    parser.add_argument(
        "--centre", choices=CENTRES, default="focus", help="the point moved to the origin"
    )
    parser.add_argument(
        "--min-registered",
        type=float,
        default=0.5,
        help="refuse when COLMAP registers a smaller fraction of the images (default 0.5)",
    )
    parser.add_argument("--threads", type=int, default=-1, help="COLMAP's threads (-1: all)")
    parser.add_argument("--seed", type=int, default=0, help="COLMAP's random seed")
    parser.add_argument("--verbose", action="store_true", help="show COLMAP's log")
    return parser


def _check(args: argparse.Namespace) -> None:
    if not 0 < args.min_registered <= 1:
        raise ConfigError(f"--min-registered: a fraction in (0, 1]; got {args.min_registered}")
    if args.overlap < 1:
        raise ConfigError(f"--overlap: at least 1; got {args.overlap}")
    if args.max_error is not None and not args.max_error > 0:
        raise ConfigError(f"--max-error: a positive number of pixels; got {args.max_error}")
    if args.threads == 0 or args.threads < -1:
        raise ConfigError(f"--threads: -1 (every core) or at least 1; got {args.threads}")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        _check(args)
        lines = write(args)
    except ConfigError as error:
        print(f"{PROG}: {error.label}: {error}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
