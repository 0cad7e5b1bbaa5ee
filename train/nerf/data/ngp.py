"""Posed images in the instant-ngp / nerfstudio layout: one `transforms.json`.

What COLMAP-based tools write (instant-ngp's `scripts/colmap2nerf.py`, nerfstudio's
`ns-process-data`): a folder with `transforms.json` and the images it names:

    {"fl_x": 1100.5, "fl_y": 1101.2, "cx": 640.3, "cy": 359.1, "w": 1280, "h": 720,
     "camera_model": "OPENCV", "k1": -0.05, "k2": 0.01, "p1": 0.0002, "p2": -0.0001,
     "frames": [{"file_path": "images/frame_00001.jpg", "transform_matrix": [[...], ...]}],
     "train_filenames": ["images/frame_00002.jpg", ...], "test_filenames": [...]}

* Layout: `data.path` is read in this layout when it holds `transforms.json` and no
  `transforms_train.json` (`layout`); otherwise as a Blender scene (`train.nerf.data.blender`).
* Intrinsics, in pixels: `fl_x`, `fl_y`, `cx`, `cy`, `w`, `h`, at the top level or per
  frame (a frame's own keys win). `camera_angle_x` stands in for `fl_x`
  (`fl_x = w / 2 / tan(camera_angle_x / 2)`), `camera_angle_y` for `fl_y`; without
  either, `fl_y = fl_x`. `cx`, `cy` default to the image centre, `w`, `h` to the image's
  size; when given, the image must have that size. Images of different sizes (frames with
  their own `w`, `h`) are padded to the largest (`Views.sizes`, `Views.mask`).
* Distortion: OpenCV's `k1`, `k2`, `p1`, `p2` (and `k3`) on `camera_model` `OPENCV`,
  `PINHOLE` or none (instant-ngp writes no model): the rays are undistorted
  (`train.nerf.data.cameras`). Fisheye models and `k4`..`k6` are refused.
* Poses: `transform_matrix`, camera-to-world with OpenGL camera axes (as Blender), used as
  written: the world of `grid.bounds` is the file's. instant-ngp's `scale` and `offset`
  (which place its unit cube) are accepted at their defaults (0.33, [0.5, 0.5, 0.5]) and
  refused otherwise, with the equivalent `grid.bounds` in the message; `aabb_scale` is read
  for `ngp_box` and changes nothing.
* Images: `file_path` with its extension (PNG, JPEG, anything Pillow reads), relative to
  the json's folder, and inside it. RGBA is composited onto the background like Blender;
  RGB (JPEG) is used as is, so the background only fills the empty space the model renders.
* Splits: nerfstudio's `train_filenames` and `test_filenames` (else `val_filenames`) when
  present; otherwise, with frames sorted by `file_path`, every `holdout_every`-th frame
  (0, k, 2k, ...) is a test view and the rest train. Within a split, frames are in
  `file_path` order.
* Errors: `DatasetError` naming the file, then the key (`frames[3].fl_x`, `test_filenames`).
  Keys this reader does not list (depth and mask paths, `sharpen`, `applied_transform`,
  ...) are ignored.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .blender import (
    SPLITS,
    DatasetError,
    Views,
    background_rgb,
    composite_rgba,
    downscale_image,
    frame_list,
    frame_matrix,
    load_blender,
    read_json,
    read_png,
)

TRANSFORMS = "transforms.json"
#: instant-ngp's defaults: its unit cube is the world box (p * scale + offset in [0, 1]).
DEFAULT_SCALE = 0.33
DEFAULT_OFFSET = (0.5, 0.5, 0.5)
DISTORTION = ("k1", "k2", "p1", "p2", "k3")
UNSUPPORTED_DISTORTION = ("k4", "k5", "k6")
CAMERA_MODELS = ("OPENCV", "PINHOLE", "SIMPLE_PINHOLE")


def layout(path: str | Path) -> str:
    """The layout of the scene in `path`: "ngp" when it holds transforms.json and no
    transforms_train.json, else "blender"."""
    root = Path(path)
    if (root / TRANSFORMS).is_file() and not (root / "transforms_train.json").is_file():
        return "ngp"
    return "blender"


def load_views(
    path: str | Path,
    split: str,
    *,
    downscale: int = 1,
    background: tuple[float, float, float] = (1.0, 1.0, 1.0),
    limit: int | None = None,
    holdout_every: int = 8,
) -> Views:
    """One split of the scene in `path`, in whichever layout it is (see `layout`)."""
    options = dict(downscale=downscale, background=background, limit=limit)
    if layout(path) == "ngp":
        return load_ngp(path, split, holdout_every=holdout_every, **options)
    return load_blender(path, split, **options)


@dataclass
class Frame:
    """One frame of transforms.json, checked: its image, pose, intrinsics, distortion."""

    index: int  # position in the json's frames
    name: str  # file_path, normalised (no "./"), to match the split lists
    image: Path
    c2w: np.ndarray  # [4, 4] float32
    camera: dict[str, object]  # fl_x, fl_y, cx, cy, w, h, camera_angle_x, ... (None: absent)
    distortion: tuple[float, ...]  # k1, k2, p1, p2, k3
    keys: dict[str, str]  # camera key -> where it was read ("fl_x" or "frames[3].fl_x")


def load_ngp(
    path: str | Path,
    split: str,
    *,
    downscale: int = 1,
    background: tuple[float, float, float] = (1.0, 1.0, 1.0),
    limit: int | None = None,
    holdout_every: int = 8,
) -> Views:
    """Reads `split` of `path/transforms.json` and its images into `Views` (on the CPU).

    Arguments as `load_blender`'s, plus `holdout_every` (>= 2): without split lists, every
    this-many-th frame in `file_path` order is a test (and val) view. The views carry
    per-view `intrinsics` [V, 4] (fx, fy, cx, cy at the downscaled size), when any is
    non-zero `distortion` [V, 5], and when the images differ in size `sizes` [V, 2] (the
    images padded to the largest). Raises DatasetError naming the file and the key,
    ValueError for a bad argument.
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}; got {split!r}")
    if isinstance(downscale, bool) or not isinstance(downscale, int) or downscale < 1:
        raise ValueError(f"downscale must be a positive integer; got {downscale!r}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(f"limit must be a positive integer or None; got {limit!r}")
    if isinstance(holdout_every, bool) or not isinstance(holdout_every, int) or holdout_every < 2:
        raise ValueError(f"holdout_every must be an integer >= 2; got {holdout_every!r}")
    bg = background_rgb(background)

    json_path = Path(path) / TRANSFORMS
    meta = read_json(json_path)
    _check_world(meta, json_path)
    frames = sorted(
        (_frame(meta, i, frame, json_path) for i, frame in frame_list(meta, json_path)),
        key=lambda f: f.name,
    )
    chosen = select(meta, frames, split, holdout_every, json_path)
    if limit is not None and limit < len(chosen):
        chosen = [chosen[i * len(chosen) // limit] for i in range(limit)]

    images, intrinsics = [], []
    for frame in chosen:
        rgba = read_png(frame.image)  # [H, W, 4], any format Pillow reads
        height, width = rgba.shape[:2]
        k = _intrinsics(frame, width, height, json_path)
        images.append(downscale_image(composite_rgba(rgba, bg), downscale, frame.image))
        intrinsics.append([v / downscale for v in k])
    distortion = np.array([f.distortion for f in chosen], dtype=np.float64)
    sizes = np.array([image.shape[:2] for image in images], dtype=np.int64)  # [V, 2] (h, w)
    height, width = sizes.max(axis=0)
    padded = np.zeros((len(images), height, width, 3), dtype=np.float32)
    for v, image in enumerate(images):
        padded[v, : image.shape[0], : image.shape[1]] = image
    same = (sizes == sizes[0]).all()
    return Views(
        images=torch.from_numpy(padded),
        c2w=torch.from_numpy(np.stack([f.c2w for f in chosen])),
        focal=intrinsics[0][0],
        height=int(height),
        width=int(width),
        names=[str(f.image) for f in chosen],
        intrinsics=torch.tensor(intrinsics, dtype=torch.float64),
        distortion=torch.from_numpy(distortion) if distortion.any() else None,
        sizes=None if same else torch.from_numpy(sizes),
    )


def ngp_box(meta: dict) -> tuple[list[list[float]], list[list[float]]]:
    """World boxes of instant-ngp's unit cube and of its `aabb_scale` box (each
    [[xmin, ymin, zmin], [xmax, ymax, zmax]]), from the json's `scale`, `offset` and
    `aabb_scale` (instant-ngp's defaults where absent: 0.33, [0.5] * 3, 1).

    instant-ngp maps a world point p (this file's axes) to (p * scale + offset), then
    cycles the axes; its scene is the unit cube [0, 1]^3 there, and it marches rays in the
    cube of side `aabb_scale` around the same centre.
    """
    scale = float(meta.get("scale", DEFAULT_SCALE))
    offset = np.asarray(meta.get("offset", DEFAULT_OFFSET), dtype=np.float64) * np.ones(3)
    aabb = float(meta.get("aabb_scale", 1))
    centre = (0.5 - offset) / scale
    half = 0.5 / abs(scale)
    unit = [(centre - half).tolist(), (centre + half).tolist()]
    return unit, [(centre - aabb * half).tolist(), (centre + aabb * half).tolist()]


# ---- checks ------------------------------------------------------------------------------


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _check_world(meta: dict, json_path: Path) -> None:
    """scale / offset at instant-ngp's defaults, aabb_scale a positive number."""
    scale, offset = meta.get("scale", DEFAULT_SCALE), meta.get("offset", list(DEFAULT_OFFSET))
    if not _number(scale) or scale == 0:
        raise DatasetError(json_path, f"scale must be a non-zero number; got {scale!r}")
    if isinstance(offset, int | float) and not isinstance(offset, bool):
        offset = [offset] * 3  # instant-ngp accepts one number for all axes
    if not (isinstance(offset, list) and len(offset) == 3 and all(map(_number, offset))):
        raise DatasetError(json_path, f"offset must be 3 numbers; got {offset!r}")
    aabb = meta.get("aabb_scale", 1)
    if not _number(aabb) or aabb <= 0:
        raise DatasetError(json_path, f"aabb_scale must be a positive number; got {aabb!r}")
    off_scale = abs(scale - DEFAULT_SCALE) > 1e-9
    if off_scale or any(abs(o - d) > 1e-9 for o, d in zip(offset, DEFAULT_OFFSET, strict=True)):
        key = "scale" if off_scale else "offset"
        unit, _ = ngp_box({"scale": scale, "offset": offset})
        box = [[round(v, 4) for v in corner] for corner in unit]
        raise DatasetError(
            json_path,
            f"{key} = {meta[key]!r}: instant-ngp's scale and offset other than "
            f"{DEFAULT_SCALE} and {list(DEFAULT_OFFSET)} are not applied (the poses are used "
            f"as written); its unit cube is then the world box {box}: remove 'scale' and "
            f"'offset' from the file and set grid.bounds = {box}",
        )


def _frame(meta: dict, i: int, frame: dict, json_path: Path) -> Frame:
    """frames[i] checked: image path inside the folder, pose, camera keys, distortion."""
    root = json_path.parent
    given = frame["file_path"]
    name = os.path.normpath(given)
    if os.path.isabs(given) or name == ".." or name.startswith(".." + os.sep):
        raise DatasetError(
            json_path,
            f"frames[{i}].file_path {given!r} is outside {root} (the images must be in the "
            f"folder of {TRANSFORMS} or below it)",
        )
    image = root / name
    if not image.is_file() and not image.suffix and Path(f"{image}.png").is_file():
        image = Path(f"{image}.png")  # as in the Blender layout, ".png" may be left out
    if not image.is_file():
        raise DatasetError(json_path, f"frames[{i}].file_path: image not found: {image}")
    camera: dict[str, float | None] = {}
    keys: dict[str, str] = {}
    # A frame's own keys win; fl_x / camera_angle_x (and _y) come from one place together.
    groups = [("fl_x", "camera_angle_x"), ("fl_y", "camera_angle_y"), ("cx",), ("cy",)]
    groups += [("w",), ("h",), *((k,) for k in DISTORTION + UNSUPPORTED_DISTORTION)]
    groups += [("camera_model",), ("is_fisheye",)]
    for group in groups:
        source, where = (frame, f"frames[{i}].") if any(k in frame for k in group) else (meta, "")
        for key in group:
            camera[key] = source.get(key)
            keys[key] = where + key
    for key, value in camera.items():
        if key in ("camera_model", "is_fisheye") or value is None:
            continue
        if not _number(value):
            raise DatasetError(json_path, f"{keys[key]} must be a number; got {value!r}")
    for key in ("fl_x", "fl_y", "w", "h"):
        if camera[key] is not None and camera[key] <= 0:
            raise DatasetError(json_path, f"{keys[key]} must be positive; got {camera[key]!r}")
    for key in ("w", "h"):
        if camera[key] is not None and camera[key] != int(camera[key]):
            raise DatasetError(json_path, f"{keys[key]} must be a whole number of pixels")
    for key in ("camera_angle_x", "camera_angle_y"):
        if camera[key] is not None and not 0 < camera[key] < math.pi:
            raise DatasetError(
                json_path, f"{keys[key]} must be radians in (0, pi); got {camera[key]!r}"
            )
    if camera["fl_x"] is None and camera["camera_angle_x"] is None:
        raise DatasetError(
            json_path,
            f"missing key 'fl_x' (or 'camera_angle_x'): frames[{i}] has no focal length, "
            "neither at the top level nor in the frame",
        )
    model = camera["camera_model"]
    if model is not None and model not in CAMERA_MODELS:
        raise DatasetError(
            json_path,
            f"{keys['camera_model']} {model!r} is not supported (supported: "
            f"{', '.join(CAMERA_MODELS)}, with OpenCV distortion k1, k2, p1, p2, k3); "
            "undistort the images first, e.g. with COLMAP's image_undistorter",
        )
    if camera["is_fisheye"]:
        raise DatasetError(json_path, f"{keys['is_fisheye']}: fisheye cameras are not supported")
    for key in UNSUPPORTED_DISTORTION:
        if camera[key]:
            raise DatasetError(
                json_path,
                f"{keys[key]} = {camera[key]!r}: only OpenCV's k1, k2, p1, p2 and k3 are "
                "supported (k4..k6 must be 0 or absent)",
            )
    return Frame(
        index=i,
        name=name,
        image=image,
        c2w=frame_matrix(frame, json_path, i),
        camera=camera,
        distortion=tuple(float(camera[k] or 0.0) for k in DISTORTION),
        keys=keys,
    )


def _intrinsics(frame: Frame, width: int, height: int, json_path: Path) -> list[float]:
    """(fx, fy, cx, cy) of a frame whose image is width x height, after checking the
    image against `w` and `h`."""
    c = frame.camera
    for key, size in (("w", width), ("h", height)):
        if c[key] is not None and int(c[key]) != size:
            raise DatasetError(
                frame.image,
                f"image is {width}x{height} (WxH) but {json_path.name} says "
                f"{frame.keys[key]} = {int(c[key])}",
            )
    fx = c["fl_x"] if c["fl_x"] is not None else 0.5 * width / math.tan(0.5 * c["camera_angle_x"])
    if c["fl_y"] is not None:
        fy = c["fl_y"]
    elif c["camera_angle_y"] is not None:
        fy = 0.5 * height / math.tan(0.5 * c["camera_angle_y"])
    else:
        fy = fx
    cx = c["cx"] if c["cx"] is not None else 0.5 * width
    cy = c["cy"] if c["cy"] is not None else 0.5 * height
    return [float(fx), float(fy), float(cx), float(cy)]


# ---- splits ------------------------------------------------------------------------------


def select(
    meta: dict, frames: list[Frame], split: str, holdout_every: int, json_path: Path
) -> list[Frame]:
    """The frames of `split`: nerfstudio's `<split>_filenames` when the file has any split
    list (test falls back to `val_filenames` and val to `test_filenames`), else the holdout.
    """
    lists = [f"{s}_filenames" for s in SPLITS]
    if not any(key in meta for key in lists):
        if len(frames) < 2:
            raise DatasetError(
                json_path, "'frames' must hold at least 2 frames (one to train, one to test)"
            )
        test = split != "train"
        return [f for k, f in enumerate(frames) if (k % holdout_every == 0) == test]
    order = {"train": ["train"], "test": ["test", "val"], "val": ["val", "test"]}[split]
    key = next((f"{s}_filenames" for s in order if f"{s}_filenames" in meta), None)
    if key is None:
        raise DatasetError(
            json_path,
            f"missing key '{order[0]}_filenames' (the file has split lists, "
            f"{', '.join(k for k in lists if k in meta)}, but none for {split})",
        )
    names = meta[key]
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise DatasetError(json_path, f"{key} must be a non-empty list of file paths")
    by_name = {f.name: f for f in frames}
    for k, given in enumerate(names):
        if os.path.normpath(given) not in by_name:
            raise DatasetError(json_path, f"{key}[{k}] {given!r} is not the file_path of any frame")
    wanted = {os.path.normpath(n) for n in names}
    return [f for f in frames if f.name in wanted]
