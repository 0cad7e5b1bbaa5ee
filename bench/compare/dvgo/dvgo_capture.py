"""Any capture the project reads, rewritten in a layout DirectVoxGO reads, so that its benches
(bench_dvgo.py, dvgo_unbounded.py: `--capture PATH`) compare on a user's own data.

    python bench/compare/dvgo/dvgo_capture.py CAPTURE OUT [--layout blender|llff]
        [--holdout-every 8]

CAPTURE (`capture_layout`), read with the project's own readers:

- Blender (`transforms_train.json`, ...): `train.nerf.data.blender`;
- instant-ngp / nerfstudio (`transforms.json`): `train.nerf.data.ngp`;
- LLFF (`poses_bounds.npy` beside `images/`) and COLMAP (`sparse/0/` or `sparse/` holding
  cameras.bin or cameras.txt, beside `images/`): first turned into the instant-ngp layout in
  OUT/capture by `python -m train.nerf.capture.poses images --llff poses_bounds.npy` or
  `--model sparse/0` (oriented, centred and scaled; COLMAP's cameras undistorted by pycolmap,
  the `capture` extra), which is also what ours trains on.

The training and test views are those ours reads from the same folder (`load_views`: the
capture's own split lists, else every `holdout_every`-th image a test view).

OUT/blender (always): DirectVoxGO's Blender layout, for bounded objects (bench_dvgo.py) and
as the truth its renders are scored against: transforms_{train,val,test}.json (val: the
test views) and RGBA PNGs (an RGB image gets alpha 255; DirectVoxGO composites on white).
DirectVoxGO's Blender loader fixes near = 2 and far = 6 (cameras at radius 4, as NeRF's
synthetic scenes), so the world is scaled about the origin by `scale` such that the training
cameras' median distance to it is 4; images and intrinsics are unchanged.
OUT/llff (`--layout llff`): LLFF's layout for DirectVoxGO's unbounded and forward-facing
settings (bench/compare/dvgo/dvgo_llff.py's rows and order: its llffhold = 8 holds out
exactly the test views), in the capture's world; near and far per image from the frames'
`near` / `far` (what the LLFF import writes), else from COLMAP's sparse points in
`sparse/0` (the 0.1 and 99.9 percentiles of their depths in each view, as LLFF's own
script takes them), else refused.

DirectVoxGO's Blender and LLFF layouts hold one pinhole camera: one image size, one focal
length (fx = fy within 0.1%) and the principal point at the image centre (within half a
pixel); a capture otherwise, or with lens distortion, is refused with what to do (COLMAP
captures come undistorted, centred). OUT/dvgo_capture.json records the layout read, the
scale, the intrinsics and the views.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
from pathlib import Path

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the checkout: bench, grid, train

from bench.compare.dvgo.dvgo_llff import (  # noqa: E402
    HOLD,
    PERCENTILES,
    LlffError,
    llff_order,
    llff_rows,
)
from train.nerf.data.blender import DatasetError, Views  # noqa: E402
from train.nerf.data.ngp import load_views  # noqa: E402

LAYOUTS = ("blender", "ngp", "llff", "colmap")
TARGETS = ("blender", "llff")
RADIUS = 4.0  # DirectVoxGO's Blender near 2 and far 6 are for cameras this far out
FOCAL_TOLERANCE = 1e-3  # fx and fy: relative
CENTRE_TOLERANCE = 0.5  # principal point off the image centre: pixels


class CaptureError(ValueError):
    """--capture cannot be converted: one line naming --capture and what was expected."""

    def __init__(self, problem: str) -> None:
        super().__init__(f"--capture: {problem}")


def _colmap_model(path: Path) -> Path | None:
    """The COLMAP model folder of a capture (sparse/0 or sparse), or None."""
    for model in (path / "sparse" / "0", path / "sparse"):
        if any((model / f"cameras.{ext}").is_file() for ext in ("bin", "txt")):
            return model
    return None


def capture_layout(path: str | Path) -> str:
    """The layout of the capture in `path`: one of LAYOUTS; CaptureError when it is none."""
    path = Path(path)
    if not path.is_dir():
        raise CaptureError(f"{path}: no such folder")
    if (path / "transforms_train.json").is_file():
        return "blender"
    if (path / "transforms.json").is_file():
        return "ngp"
    has_images = (path / "images").is_dir()
    if (path / "poses_bounds.npy").is_file() and has_images:
        return "llff"
    if _colmap_model(path) is not None and has_images:
        return "colmap"
    raise CaptureError(
        f"{path}: no capture found; expected transforms_train.json (Blender), transforms.json "
        "(instant-ngp / nerfstudio), poses_bounds.npy beside images/ (LLFF) or sparse/0/ "
        "beside images/ (COLMAP)"
    )


def readable(capture: Path, work: Path) -> Path:
    """A folder the project's readers read (`load_views`): `capture` itself (Blender,
    instant-ngp), or LLFF's and COLMAP's poses turned into the instant-ngp layout in `work`
    by `train.nerf.capture.poses` (replaced)."""
    layout = capture_layout(capture)
    if layout in ("blender", "ngp"):
        return capture
    from train.nerf.capture import poses

    work.parent.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(work, ignore_errors=True)
    given = ["--llff", str(capture / "poses_bounds.npy")]
    if layout == "colmap":
        given = ["--model", str(_colmap_model(capture))]
    if poses.main([str(capture / "images"), "--out", str(work), *given]) != 0:
        raise CaptureError(f"{capture}: the {layout} poses could not be read (the error above)")
    return work


def pinhole(views: Views, name: str) -> tuple[float, float, float]:
    """(height, width, focal) of the one centred pinhole camera of `views`; CaptureError
    naming split `name` when DirectVoxGO's layouts cannot hold its cameras."""
    if views.distortion is not None:
        raise CaptureError(
            f"{name} views have lens distortion; DirectVoxGO's layouts hold pinhole cameras "
            "(undistort first: python -m train.nerf.capture.poses IMAGES --out DIR)"
        )
    if views.sizes is not None:
        raise CaptureError(f"{name} images differ in size; DirectVoxGO's layouts hold one size")
    h, w = views.height, views.width
    if views.intrinsics is None:
        return float(h), float(w), float(views.focal)
    k = views.intrinsics.double().numpy()  # [V, 4] fx, fy, cx, cy
    fx, fy, cx, cy = k.T
    if (np.abs(fy - fx) > FOCAL_TOLERANCE * fx).any() or (np.abs(fx - fx[0]) > 1e-9 * fx).any():
        raise CaptureError(
            f"{name} views: fl_x {fx[0]:g} and fl_y {fy[0]:g} (or the views' focal lengths) "
            "differ; DirectVoxGO's layouts hold one focal length"
        )
    off = max(np.abs(cx - w / 2).max(), np.abs(cy - h / 2).max())
    if off > CENTRE_TOLERANCE:
        raise CaptureError(
            f"{name} views: the principal point is {off:.2f} px off the image centre "
            f"({w / 2:g}, {h / 2:g}); DirectVoxGO's layouts centre it (crop the images about it)"
        )
    return float(h), float(w), float(fx[0])


def world_scale(c2w: np.ndarray) -> float:
    """The scale putting the cameras c2w [V, 4, 4] at a median distance RADIUS from the
    origin; 1 when they already are (within 1e-6)."""
    median = float(np.median(np.linalg.norm(c2w[:, :3, 3], axis=-1)))
    if median <= 0:
        raise CaptureError("every camera sits at the origin; no scale for DirectVoxGO's near/far")
    scale = RADIUS / median
    return 1.0 if abs(scale - 1.0) < 1e-6 else scale


def _rgba(source: Path, out: Path) -> None:
    """The image `source` as an 8-bit RGBA PNG `out` (the same values; alpha 255 for RGB)."""
    with Image.open(source) as image:
        image.convert("RGBA").save(out)


def write_blender(splits: dict[str, Views], hwf: tuple, folder: Path, scale: float) -> None:
    """`splits` (train, test) in DirectVoxGO's Blender layout in `folder` (replaced), the
    camera centres scaled by `scale`; val is the test views."""
    height, width, focal = hwf
    angle = 2.0 * math.atan(0.5 * width / focal)
    shutil.rmtree(folder, ignore_errors=True)
    for split in ("train", "test"):
        (folder / split).mkdir(parents=True)
        frames = []
        for k, source in enumerate(splits[split].names):
            _rgba(Path(source), folder / split / f"r_{k}.png")
            c2w = splits[split].c2w[k].double().numpy().copy()
            c2w[:3, 3] *= scale
            frames.append({"file_path": f"./{split}/r_{k}", "transform_matrix": c2w.tolist()})
        meta = {"camera_angle_x": angle, "frames": frames}
        text = json.dumps(meta, indent=1) + "\n"
        (folder / f"transforms_{split}.json").write_text(text)
        if split == "test":
            (folder / "transforms_val.json").write_text(text)


def frame_bounds(folder: Path, names: list[str]) -> np.ndarray | None:
    """[V, 2] near, far of the views `names` (image paths) from their frames' `near` and
    `far` in folder/transforms.json; None when a frame has none."""
    path = folder / "transforms.json"
    if not path.is_file():
        return None
    frames = json.loads(path.read_text()).get("frames", [])
    found = {
        (folder / f["file_path"]).resolve(): (f.get("near"), f.get("far"))
        for f in frames
        if isinstance(f, dict) and "file_path" in f
    }
    rows = [found.get(Path(n).resolve(), (None, None)) for n in names]
    if any(None in row for row in rows):
        return None
    return np.array(rows, dtype=np.float64)


def point_bounds(folder: Path, c2w: np.ndarray) -> np.ndarray | None:
    """[V, 2] near, far of cameras c2w [V, 4, 4] from COLMAP's sparse points in
    folder/sparse/0, moved into the transforms.json world (`applied_transform`,
    `applied_scale`, as train.nerf.capture.poses writes them): PERCENTILES of the points'
    depths along each optical axis. None when there is no model."""
    model = _colmap_model(folder)
    path = folder / "transforms.json"
    if model is None or not path.is_file():
        return None
    meta = json.loads(path.read_text())
    from train.nerf.capture import colmap

    xyz = colmap.points(colmap.read_model(model, key="--capture"))
    applied = np.asarray(meta.get("applied_transform", np.eye(4)[:3]), dtype=np.float64)
    xyz = float(meta.get("applied_scale", 1.0)) * (xyz @ applied[:3, :3].T + applied[:3, 3])
    rows = []
    for pose in c2w:
        depth = (xyz - pose[:3, 3]) @ -pose[:3, 2]  # along the optical axis (OpenGL: -z)
        depth = depth[depth > 0]
        if len(depth) == 0:
            raise CaptureError(f"{folder}: no sparse point in front of a camera; no bounds")
        rows.append(np.percentile(depth, PERCENTILES))
    return np.array(rows)


def write_llff(splits: dict[str, Views], hwf: tuple, folder: Path, source: Path) -> dict:
    """`splits` in LLFF's layout in `folder` (replaced): rows in llff_order, bounds from the
    frames or the sparse points of `source` (CaptureError without either)."""
    try:
        order = llff_order(len(splits["train"].c2w), len(splits["test"].c2w), HOLD)
    except LlffError as error:  # the capture's own split lists: not every 8th image
        raise CaptureError(f"{error} (DirectVoxGO's LLFF setting holds out every 8th)") from None
    bounds = {}
    for split, views in splits.items():
        c2w = views.c2w.double().numpy()
        found = frame_bounds(source, views.names)
        bounds[split] = found if found is not None else point_bounds(source, c2w)
        if bounds[split] is None:
            raise CaptureError(
                f"{source}: LLFF's layout needs near and far per image: frames with 'near' "
                "and 'far' in transforms.json (an LLFF import writes them) or a COLMAP model "
                "in sparse/0 beside it"
            )
    shutil.rmtree(folder, ignore_errors=True)
    (folder / "images").mkdir(parents=True)
    poses, rows = [], []
    for i, (split, k) in enumerate(order):
        image = Path(splits[split].names[k])
        with Image.open(image) as picture:
            picture.convert("RGB").save(folder / "images" / f"{i:04d}_{split}_{k:04d}.png")
        poses.append(splits[split].c2w[k].double().numpy())
        rows.append(bounds[split][k])
    array = llff_rows(np.stack(poses), hwf, np.stack(rows))
    np.save(folder / "poses_bounds.npy", array)
    return {"near_min": float(array[:, 15].min()), "far_max": float(array[:, 16].max())}


def convert(
    capture: str | Path, out: str | Path, target: str = "blender", holdout_every: int = 8
) -> dict:
    """Writes `capture` into `out` for DirectVoxGO (`target` "blender": out/blender;
    "llff": out/blender and out/llff); returns what out/dvgo_capture.json records, with
    "blender" (and "llff") the folders written and "data_path" the folder ours reads."""
    if target not in TARGETS:
        raise CaptureError(f"layout {target!r}: expected one of {', '.join(TARGETS)}")
    capture, out = Path(capture).resolve(), Path(out).resolve()
    layout = capture_layout(capture)
    source = readable(capture, out / "capture")
    try:
        splits = {s: load_views(source, s, holdout_every=holdout_every) for s in ("train", "test")}
    except DatasetError as error:
        raise CaptureError(str(error)) from None
    hwf = pinhole(splits["train"], "training")
    if pinhole(splits["test"], "test") != hwf:
        raise CaptureError("the test views' camera differs from the training views'")
    scale = world_scale(splits["train"].c2w.double().numpy())
    write_blender(splits, hwf, out / "blender", scale)
    info = {
        "capture": str(capture),
        "layout": layout,
        "data_path": str(source),
        "blender": str(out / "blender"),
        "scale": scale,
        "hwf": list(hwf),
        "train_views": len(splits["train"].c2w),
        "test_views": len(splits["test"].c2w),
        "holdout_every": holdout_every,
    }
    if target == "llff":
        info |= write_llff(splits, hwf, out / "llff", source)
        info["llff"] = str(out / "llff")
    (out / "dvgo_capture.json").write_text(json.dumps(info, indent=1) + "\n")
    return info


def capture_scene(args, base, work: Path, target: str = "blender") -> tuple[list[str], dict]:
    """--capture converted for DirectVoxGO into work/capture (`target` layout, and always
    the Blender layout its renders are scored against); the --set options that make ours
    read the capture, and the conversion's record. CaptureError for a bad capture or a
    config that reads it otherwise."""
    if base.data.downscale != 1:
        raise CaptureError(
            f"data.downscale = {base.data.downscale}: the conversion keeps full-size images; "
            "set data.downscale = 1 (or downscale the capture's images first)"
        )
    info = convert(args.capture, work / "capture", target, base.data.holdout_every)
    sets = [f"data.path={json.dumps(info['data_path'])}", "data.generate=false"]
    return sets, info


def capture_meta(meta: dict, info: dict) -> dict:
    """nerf_run_meta's record with the capture in place of a generated scene."""
    height, width = info["hwf"][:2]
    name = f"capture {Path(info['capture']).name} ({info['layout']}, {width:g}x{height:g})"
    meta |= {"scene": name, "train_views": info["train_views"], "capture": info}
    return meta | {"test_views": info["test_views"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("capture", type=Path, help="a capture folder in any layout read here")
    parser.add_argument("out", type=Path, help="the folder to write DirectVoxGO's layouts in")
    parser.add_argument("--layout", default="blender", help="blender (bounded) or llff")
    parser.add_argument("--holdout-every", type=int, default=8, help="as data.holdout_every")
    args = parser.parse_args(argv)
    try:
        info = convert(args.capture, args.out, args.layout, args.holdout_every)
    except (CaptureError, ValueError) as error:
        print(f"dvgo_capture: {error}", file=sys.stderr)
        return 2
    print(
        f"wrote {args.out}: {info['train_views']} training and {info['test_views']} test views "
        f"of {info['layout']} capture {info['capture']} (world scaled by {info['scale']:.4g} "
        "for the Blender layout)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
