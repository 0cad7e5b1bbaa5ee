"""P1: camera poses from images (`python -m train.nerf.capture.poses`, COLMAP through pycolmap) on
views the project renders, against the true cameras.

    python bench/training/bench_poses.py [--scene realistic|textured|unbounded] [--size 400]
        [--views 100] [--cache DIR] [--device cpu|cuda] [--json PATH]
        [--matcher exhaustive|sequential]
        [--camera-model SIMPLE_RADIAL] [--max-error PX]
        [--train CONFIG [--set KEY=VALUE ...] [--work DIR]]

The realistic scene (`train.nerf.scenes.realistic`, what
`train.nerf.scenes.generate --scene realistic` renders) at 400x400 from 100 cameras of its
training spiral (radius 4, elevations -20 to 75 degrees,
`train.nerf.scenes.generate.camera_poses`), composited onto white as a photo would be; or the
quick textured scene of the tests (`train.nerf.scenes.textured`); or the unbounded scene
(`train.nerf.scenes.outdoor`: an object on ground to the horizon, buildings, a sky; its training
orbit, radius 2.6 to 4 and height 0.3 to 2, opaque images). Rendering the realistic
views takes minutes (about 10 s a view on one busy CPU core; far less on a GPU with --device
cuda): they are cached in --cache (default bench/results/poses_<scene>_<size>_<views>/), one
PNG a view, so an interrupted render continues.

Prints one table row and writes JSON (--json, default bench/results/poses.json): registered
%, median / mean / max rotation error (degrees) and camera-centre error (% of the scene's
size: the box's side, 3, for the bounded scenes; the camera orbit's outer diameter, 8, for
the unbounded one) after the similarity that best aligns the estimated centres with the true
ones (Umeyama), COLMAP's mean reprojection error (px) and track length, and the seconds of
the pose command (rendering not included).

`--train CONFIG` then trains CONFIG twice on the registered views (`python -m train`, with
`data.path` set and `data.generate = false`; `--set` goes to both): on the command's scene
(estimated poses and intrinsics) and on the same photos with their true poses and the
renderer's pinhole, oriented, centred and scaled by the same `train.nerf.capture.orient` as the
command does. Both hold out the same test views (every `data.holdout_every`-th in name
order), so their test PSNRs differ by what the pose error costs. `--work DIR` keeps the
photos, both scenes and both runs (default: a temporary folder).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from train.nerf.capture.orient import orient, pose_errors  # noqa: E402

SCENE_SIZES = {"realistic": 3.0, "textured": 3.0, "unbounded": 8.0}  # see the docstring


def render(scene: str, size: int, views: int, cache: Path, device: str) -> np.ndarray:
    """Renders (or finds in `cache`) the views; returns their c2w [V, 4, 4] (OpenGL)."""
    from PIL import Image

    cache.mkdir(parents=True, exist_ok=True)
    if scene == "textured":
        from train.nerf.scenes import textured

        c2w = textured.capture_poses(views)
    elif scene == "unbounded":
        from train.nerf.scenes import outdoor

        c2w = outdoor.camera_poses(views, 1, 1, seed=0)["train"]
    else:
        from train.nerf.scenes.generate import camera_poses

        c2w = camera_poses(views, 1, 1, seed=0)["train"]
    np.save(cache / "c2w.npy", c2w.numpy())
    for k in range(views):
        file = cache / f"r_{k:03d}.png"
        if file.exists():
            continue
        start = time.perf_counter()
        if scene == "textured":
            from train.nerf.scenes import textured

            rgb = textured.render_views(c2w[k : k + 1], size)[0]
            rgba = torch.cat([rgb, torch.ones_like(rgb[..., :1])], dim=-1)
        else:
            from train.nerf.scenes.generate import render_views

            rgba = render_views(c2w[k : k + 1], size, device=device, scene=scene)[0]
        pixels = (rgba.numpy() * 255 + 0.5).clip(0, 255).astype(np.uint8)
        Image.fromarray(pixels).save(file)
        print(f"rendered view {k + 1}/{views} in {time.perf_counter() - start:.1f} s", flush=True)
    return c2w.numpy()


def photos(cache: Path, views: int, out: Path) -> None:
    """The cached RGBA renders composited onto white, as RGB PNGs in `out`."""
    from PIL import Image

    out.mkdir(parents=True)
    for k in range(views):
        with Image.open(cache / f"r_{k:03d}.png") as image:
            rgba = np.asarray(image.convert("RGBA"), dtype=np.float32) / 255
        rgb = rgba[..., :3] * rgba[..., 3:] + (1 - rgba[..., 3:])
        Image.fromarray((rgb * 255 + 0.5).astype(np.uint8)).save(out / f"view_{k:03d}.png")


def measure(
    truth: np.ndarray,
    views: int,
    cache: Path,
    matcher: str,
    options: list[str],
    size: float,
    work: Path,
) -> dict:
    """Runs the pose command on the cached views (photos in work/photos, its scene in
    work/scene) and scores it against `truth`."""
    from train.nerf.capture.poses import main

    images, out = work / "photos", work / "scene"
    photos(cache, views, images)
    log = io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stdout(log):
        command = [str(images), "--out", str(out), "--matcher", matcher]
        code = main([*command, *options])
    seconds = time.perf_counter() - start
    if code != 0:
        raise SystemExit(f"the pose command failed (exit {code}); see above")
    meta = json.loads((out / "transforms.json").read_text())
    frames = meta["frames"]
    index = [view_index(f) for f in frames]
    estimated = np.array([f["transform_matrix"] for f in frames])
    errors = pose_errors(estimated, truth[index], size)
    return {
        "registered": len(frames),
        "views": views,
        "registered_percent": 100.0 * len(frames) / views,
        **{
            f"{k}_deg" if k.startswith("rotation") else f"{k}_percent": v for k, v in errors.items()
        },
        "reprojection_error_px": meta["poses"]["reprojection_error"],
        "track_length": meta["poses"]["track_length"],
        "points": meta["poses"]["points"],
        "seconds": seconds,
        "report": log.getvalue().strip().splitlines(),
    }


def view_index(frame: dict) -> int:
    """The view number of a frame's file (`.../view_012.png` -> 12)."""
    return int(frame["file_path"].rsplit("_", 1)[1].split(".")[0])


def true_scene(truth: np.ndarray, scene: str, size: int, work: Path) -> Path:
    """work/scene_true: the registered views' photos with their true poses (oriented as the
    pose command orients its own) and the renderer's pinhole intrinsics."""
    from train.nerf.data.cameras import CAMERA_ANGLE_X
    from train.nerf.scenes.generate import scene_module

    estimated = json.loads((work / "scene" / "transforms.json").read_text())
    index = [view_index(f) for f in estimated["frames"]]
    c2w, _ = orient(truth[index])
    # the renderer's own lookup (generate.render_views); the tests' textured scene uses the default
    module = None if scene == "textured" else scene_module(scene)
    angle = getattr(module, "CAMERA_ANGLE_X", CAMERA_ANGLE_X)
    focal = 0.5 * size / math.tan(0.5 * angle)
    frames = [
        {"file_path": f"images/view_{k:03d}.png", "transform_matrix": pose.tolist()}
        for k, pose in zip(index, c2w, strict=True)
    ]
    meta = {"camera_model": "PINHOLE", "fl_x": focal, "fl_y": focal, "cx": size / 2}
    meta |= {"cy": size / 2, "w": size, "h": size, "frames": frames}
    out = work / "scene_true"
    (out / "images").mkdir(parents=True, exist_ok=True)
    for k in index:
        shutil.copy(work / "photos" / f"view_{k:03d}.png", out / "images")
    (out / "transforms.json").write_text(json.dumps(meta, indent=2) + "\n")
    return out


def train_both(config: Path, sets: list[str], work: Path, true: Path) -> dict:
    """Test PSNR, SSIM and training seconds of CONFIG on the estimated and the true poses."""
    result = {}
    for name, scene in (("estimated", work / "scene"), ("true", true)):
        run = work / f"run_{name}"
        command = [sys.executable, "-m", "train", "--config", str(config), "--out", str(run)]
        command += ["--overwrite", "--set", f"data.path={scene}", "--set", "data.generate=false"]
        command += ["--set", "output.progress=false", "--set", "output.pictures=false"]
        for item in sets:
            command += ["--set", item]
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
        summary = json.loads((run / "summary.json").read_text())
        result[name] = {k: summary[k] for k in ("psnr", "ssim", "train_seconds", "test_views")}
    result["psnr_difference"] = result["true"]["psnr"] - result["estimated"]["psnr"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scene", choices=tuple(SCENE_SIZES), default="realistic")
    parser.add_argument("--size", type=int, default=400)
    parser.add_argument("--views", type=int, default=100)
    parser.add_argument("--cache", type=Path)
    parser.add_argument("--device", default="cpu", help="where the realistic scene renders")
    parser.add_argument("--matcher", choices=("exhaustive", "sequential"), default="exhaustive")
    parser.add_argument("--camera-model", default="SIMPLE_RADIAL", help="COLMAP's, as the command")
    parser.add_argument("--max-error", type=float, help="the command's --max-error")
    parser.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "poses.json")
    parser.add_argument("--train", type=Path, metavar="CONFIG", help="train on both poses")
    parser.add_argument("--set", action="append", default=[], help="KEY=VALUE for --train")
    parser.add_argument("--work", type=Path, help="keep photos, scenes and runs here")
    args = parser.parse_args()
    if args.work and args.work.exists():
        parser.error(f"--work: {args.work} exists; give a new folder")
    name = f"poses_{args.scene}_{args.size}_{args.views}"
    cache = args.cache or ROOT / "bench" / "results" / name
    truth = render(args.scene, args.size, args.views, cache, args.device)
    options = ["--camera-model", args.camera_model]
    options += ["--max-error", str(args.max_error)] if args.max_error else []
    # one COLMAP thread with --train: its multithreaded mapper is not repeatable, and the
    # undistorted image size (395 or 396 px from 400) must suit the --set data.downscale
    options += ["--threads", "1"] if args.train else []
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        result = measure(
            truth, args.views, cache, args.matcher, options, SCENE_SIZES[args.scene], work
        )
        if args.train:
            true = true_scene(truth, args.scene, args.size, work)
            result["training"] = train_both(args.train, args.set, work, true)
    result |= {"scene": args.scene, "size": args.size, "matcher": args.matcher}
    result |= {"camera_model": args.camera_model, "max_error": args.max_error}
    result |= {"machine": platform.node(), "cpu_threads": torch.get_num_threads()}
    columns = ["scene", "size", "registered", "rotation median / mean / max"]
    columns += ["centre median / max", "reprojection", "track", "seconds"]
    print("| " + " | ".join(columns) + " |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    print(
        f"| {args.scene} | {args.size}x{args.size} | {result['registered']}/{args.views} "
        f"({result['registered_percent']:.0f}%) | {result['rotation_median_deg']:.3f} / "
        f"{result['rotation_mean_deg']:.3f} / {result['rotation_max_deg']:.3f} deg | "
        f"{result['centre_median_percent']:.3f} / {result['centre_max_percent']:.3f} % | "
        f"{result['reprojection_error_px']:.3f} px | {result['track_length']:.2f} | "
        f"{result['seconds']:.1f} |"
    )
    if "training" in result:
        t = result["training"]
        print(
            f"{args.train} on the estimated poses: {t['estimated']['psnr']:.3f} dB "
            f"(SSIM {t['estimated']['ssim']:.4f}, {t['estimated']['train_seconds']:.1f} s); "
            f"on the true ones: {t['true']['psnr']:.3f} dB (SSIM {t['true']['ssim']:.4f}); "
            f"difference {t['psnr_difference']:.3f} dB over {t['true']['test_views']} test views"
        )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
