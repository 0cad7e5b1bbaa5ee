"""Posed images in the NeRF-synthetic ("Blender") layout, and the rays through their pixels.

A scene directory holds `transforms_{train,val,test}.json` and the PNGs they name:

    {"camera_angle_x": 0.6911,                      # horizontal field of view, radians
     "frames": [{"file_path": "./train/r_0",         # relative to the json; ".png" optional
                 "transform_matrix": [[...4 numbers...], ... 4 rows]}, ...]}

`transform_matrix` is camera-to-world with OpenGL camera axes: the camera looks down
its -z axis, +y is up in the image, +x to the right. RGBA images are composited onto a
background colour (the original scenes are trained on white). Intrinsics are those of
the original scenes: square pixels, principal point at the image centre.

PNG decoding uses Pillow, which is installed with matplotlib (the `train` extra).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

SPLITS = ("train", "val", "test")


class DatasetError(ValueError):
    """A scene file that cannot be used; the message is `<path>: <problem>`."""

    def __init__(self, path: str | Path, problem: str) -> None:
        self.path, self.problem = Path(path), problem
        super().__init__(f"{path}: {problem}")


@dataclass
class Views:
    """The posed images of one split.

    images: [V, H, W, 3] float32 in [0, 1], composited onto the background
    c2w:    [V, 4, 4] float32 camera-to-world, OpenGL axes (looks down -z, y up)
    focal:  focal length in pixels at this resolution, 0.5 * W / tan(0.5 * camera_angle_x)
    names:  the frames' image files, in order (for messages and pictures)
    intrinsics: None (the Blender cameras: `focal` on both axes, principal point at the
            image centre), or [V, 4] float64 per view (fx, fy, cx, cy) in pixels at this
            resolution (`train.nerf.data.cameras`; `focal` then only informs)
    distortion: None, or [V, 5] float64 OpenCV (k1, k2, p1, p2, k3) per view
    sizes:  None (every view is height x width), or [V, 2] int64 (h, w) per view: view v's
            pixels are images[v, :h, :w], the rest is zero padding up to height x width,
            the largest (see `mask`)
    alphas: None, or [V, H, W] float32 in [0, 1]: the images' own opacity (Blender scenes;
            0 on the background), downscaled like the images
    """

    images: Tensor
    c2w: Tensor
    focal: float
    height: int
    width: int
    names: list[str]
    intrinsics: Tensor | None = None
    distortion: Tensor | None = None
    sizes: Tensor | None = None
    alphas: Tensor | None = None

    def __len__(self) -> int:
        return self.images.shape[0]

    def mask(self) -> Tensor | None:
        """[V, H, W] bool, True on each view's own pixels (not padding); None: all are."""
        if self.sizes is None:
            return None
        rows = torch.arange(self.height)[None, :, None] < self.sizes[:, 0, None, None]
        cols = torch.arange(self.width)[None, None, :] < self.sizes[:, 1, None, None]
        return rows & cols

    def to(self, device: torch.device | str) -> Views:
        return Views(
            self.images.to(device),
            self.c2w.to(device),
            self.focal,
            self.height,
            self.width,
            list(self.names),
            None if self.intrinsics is None else self.intrinsics.to(device),
            None if self.distortion is None else self.distortion.to(device),
            self.sizes,
            None if self.alphas is None else self.alphas.to(device),
        )


def load_blender(
    path: str | Path,
    split: str,
    *,
    downscale: int = 1,
    background: tuple[float, float, float] = (1.0, 1.0, 1.0),
    limit: int | None = None,
) -> Views:
    """Reads `path/transforms_{split}.json` and its images into `Views` (on the CPU).

    downscale:  integer factor; each output pixel is the mean of a `downscale`^2 block of
                composited pixels (image sizes must divide), the focal length shrinks with it.
    background: RGB in [0, 1] under the images' alpha (RGB images have no alpha).
    limit:      keep `limit` frames spread evenly over the split (frame i * n // limit),
                e.g. a few test views from a 200-view turntable; None keeps all.
    Raises DatasetError naming the file for any problem with the files, ValueError for
    a bad argument.
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}; got {split!r}")
    if isinstance(downscale, bool) or not isinstance(downscale, int) or downscale < 1:
        raise ValueError(f"downscale must be a positive integer; got {downscale!r}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(f"limit must be a positive integer or None; got {limit!r}")
    bg = background_rgb(background)

    json_path = Path(path) / f"transforms_{split}.json"
    meta = read_json(json_path)
    angle = _camera_angle(meta, json_path)
    frames = frame_list(meta, json_path)
    if limit is not None and limit < len(frames):
        frames = [frames[i * len(frames) // limit] for i in range(limit)]

    images, alphas, poses, names = [], [], [], []
    size = None  # (H, W) of the first image, at full resolution
    for i, frame in frames:
        image_path = _image_path(json_path, i, frame)
        rgba = read_png(image_path)  # [H, W, 4]
        if size is None:
            size = rgba.shape[:2]
        elif rgba.shape[:2] != size:
            raise DatasetError(
                image_path,
                f"image is {rgba.shape[1]}x{rgba.shape[0]} (WxH) but "
                f"{names[0]} is {size[1]}x{size[0]}; all images of a split must share one size",
            )
        images.append(downscale_image(composite_rgba(rgba, bg), downscale, image_path))
        alphas.append(downscale_image(rgba[..., 3:], downscale, image_path)[..., 0])
        poses.append(frame_matrix(frame, json_path, i))
        names.append(str(image_path))

    height, width = images[0].shape[:2]
    focal = 0.5 * size[1] / math.tan(0.5 * angle) / downscale
    return Views(
        images=torch.from_numpy(np.stack(images)),
        c2w=torch.from_numpy(np.stack(poses)),
        focal=focal,
        height=height,
        width=width,
        names=names,
        alphas=torch.from_numpy(np.stack(alphas)),
    )


def camera_rays(views: Views, index: int | slice | Tensor | None = None) -> tuple[Tensor, Tensor]:
    """World-space rays through the pixel centres of the selected views.

    index: one view (int) -> [H, W, 3] each; a slice or index tensor -> [K, H, W, 3];
           None -> every view, [V, H, W, 3].
    Returns (origins, directions) on the device of `views.c2w`, float32; directions have
    unit length; origins are the camera positions. Pixel (row i, column j) has camera-space
    direction ((j + 0.5 - W / 2) / focal, -(i + 0.5 - H / 2) / focal, -1); with per-view
    `intrinsics` and `distortion`, `train.nerf.data.cameras.pixel_directions`'s.
    """
    c2w = views.c2w if index is None else views.c2w[index]  # [..., 4, 4]
    device = c2w.device
    if views.intrinsics is not None:  # per view: [..., H, W, 3]
        from .cameras import pixel_directions

        intrinsics, distortion = views.intrinsics, views.distortion
        if index is not None:
            intrinsics = intrinsics[index]
            distortion = None if distortion is None else distortion[index]
        camera = pixel_directions(intrinsics.to(device), distortion, views.height, views.width)
        return _rays(c2w, camera)
    j = torch.arange(views.width, device=device, dtype=torch.float32) + 0.5
    i = torch.arange(views.height, device=device, dtype=torch.float32) + 0.5
    x = ((j - 0.5 * views.width) / views.focal)[None, :].expand(views.height, -1)
    y = (-(i - 0.5 * views.height) / views.focal)[:, None].expand(-1, views.width)
    camera = torch.stack([x, y, -torch.ones_like(x)], dim=-1)  # [H, W, 3]
    return _rays(c2w, camera)


def _rays(c2w: Tensor, camera: Tensor) -> tuple[Tensor, Tensor]:
    """c2w [..., 4, 4], camera-space directions [H, W, 3] or [..., H, W, 3] -> world
    (origins, unit directions), [..., H, W, 3] each."""
    rotation = c2w[..., None, None, :3, :3]  # [..., 1, 1, 3, 3]
    directions = (rotation @ camera[..., None])[..., 0]  # [..., H, W, 3]
    directions = directions / directions.norm(dim=-1, keepdim=True)
    origins = c2w[..., None, None, :3, 3].expand_as(directions)
    return origins, directions


# ---- reading the json ----------------------------------------------------------------------


def read_json(json_path: Path) -> dict:
    """The JSON object in `json_path` (a transforms file of either layout); a missing,
    unreadable or malformed file is a `DatasetError` naming it."""
    if not json_path.is_file():
        where = json_path.parent
        hint = "" if where.is_dir() else f" (directory {where} does not exist)"
        raise DatasetError(json_path, f"file not found{hint}")
    try:
        meta = json.loads(json_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise DatasetError(
            json_path, f"malformed JSON at line {error.lineno} column {error.colno}: {error.msg}"
        ) from None
    except (OSError, UnicodeDecodeError) as error:
        raise DatasetError(json_path, f"cannot read: {error}") from None
    if not isinstance(meta, dict):
        raise DatasetError(json_path, "expected a JSON object at the top level")
    return meta


def _camera_angle(meta: dict, json_path: Path) -> float:
    if "camera_angle_x" not in meta:
        raise DatasetError(json_path, "missing key 'camera_angle_x'")
    angle = meta["camera_angle_x"]
    if isinstance(angle, bool) or not isinstance(angle, int | float) or not 0 < angle < math.pi:
        raise DatasetError(
            json_path, f"camera_angle_x must be a number of radians in (0, pi); got {angle!r}"
        )
    return float(angle)


def frame_list(meta: dict, json_path: Path) -> list[tuple[int, dict]]:
    """[(index in the json, frame)] after checking each frame has both keys."""
    if "frames" not in meta:
        raise DatasetError(json_path, "missing key 'frames'")
    frames = meta["frames"]
    if not isinstance(frames, list) or not frames:
        raise DatasetError(json_path, "'frames' must be a non-empty list")
    for i, frame in enumerate(frames):
        if not isinstance(frame, dict):
            raise DatasetError(json_path, f"frames[{i}] must be an object")
        for key in ("file_path", "transform_matrix"):
            if key not in frame:
                raise DatasetError(json_path, f"frames[{i}] is missing key '{key}'")
        if not isinstance(frame["file_path"], str) or not frame["file_path"]:
            raise DatasetError(json_path, f"frames[{i}].file_path must be a non-empty string")
    return list(enumerate(frames))


def frame_matrix(frame: dict, json_path: Path, i: int) -> np.ndarray:
    """frames[i].transform_matrix as a [4, 4] float32 array, affine (last row 0 0 0 1)."""
    what = f"frames[{i}].transform_matrix"
    try:
        matrix = np.asarray(frame["transform_matrix"], dtype=np.float64)
    except (TypeError, ValueError):
        raise DatasetError(json_path, f"{what} must be a 4x4 matrix of numbers") from None
    if matrix.shape != (4, 4):
        raise DatasetError(
            json_path, f"{what} must be a 4x4 matrix of numbers; got shape {matrix.shape}"
        )
    if not np.isfinite(matrix).all():
        raise DatasetError(json_path, f"{what} has non-finite entries")
    if np.abs(matrix[3] - [0, 0, 0, 1]).max() > 1e-4:
        raise DatasetError(
            json_path, f"{what} must have last row [0, 0, 0, 1]; got {matrix[3].tolist()}"
        )
    return matrix.astype(np.float32)


def _image_path(json_path: Path, i: int, frame: dict) -> Path:
    """The image of frames[i]: file_path relative to the json, as given or with '.png' added.

    It must lie inside the scene directory once `..` and symbolic links are followed
    (an absolute file_path does not): a scene must not make the reader open other files.
    """
    root = json_path.parent.resolve()
    given = json_path.parent / frame["file_path"]
    candidates = [given] if given.suffix.lower() == ".png" else [given, Path(f"{given}.png")]
    for candidate in candidates:
        target = candidate.resolve()
        if not target.is_relative_to(root):
            raise DatasetError(
                json_path,
                f"frames[{i}].file_path {frame['file_path']!r} leads to {target}, outside "
                f"the scene directory {root}; images must lie inside it",
            )
        if candidate.is_file():
            return candidate
    tried = " or ".join(str(c) for c in candidates)
    raise DatasetError(json_path, f"frames[{i}] image not found: {tried}")


# ---- images --------------------------------------------------------------------------------


def read_png(image_path: Path) -> np.ndarray:
    """[H, W, 4] float32 RGBA in [0, 1] (alpha 1 for images without alpha)."""
    try:
        from PIL import Image  # Pillow is a dependency of matplotlib (the `train` extra)
    except ImportError:
        from ...dependencies import install_hint

        raise DatasetError(
            image_path,
            "reading images needs Pillow, which comes with matplotlib: "
            f"pip install matplotlib (or {install_hint('train')})",
        ) from None
    try:
        with Image.open(image_path) as image:
            image.load()
            if image.mode in ("I;16", "I;16B", "I;16L", "I"):  # 16-bit grey
                grey = np.asarray(image, dtype=np.float32) / 65535.0
                return np.stack([grey, grey, grey, np.ones_like(grey)], axis=-1)
            rgba = np.asarray(image.convert("RGBA"), dtype=np.float32) / 255.0
    except (OSError, ValueError, SyntaxError) as error:  # PIL's errors for corrupt files
        raise DatasetError(image_path, f"cannot read the image: {error}") from None
    return rgba


def background_rgb(background: tuple[float, float, float]) -> np.ndarray:
    """`background` checked as an RGB colour in [0, 1] -> [3] float32 (ValueError if not)."""
    try:
        bg = np.asarray(background, dtype=np.float32)
    except (TypeError, ValueError):
        bg = None
    if bg is None or bg.shape != (3,) or not ((bg >= 0) & (bg <= 1)).all():
        raise ValueError(f"background must be 3 numbers in [0, 1] (RGB); got {background!r}")
    return bg


def composite_rgba(rgba: np.ndarray, bg: np.ndarray) -> np.ndarray:
    """[H, W, 4] straight (not premultiplied) RGBA over `bg` -> [H, W, 3]."""
    alpha = rgba[..., 3:]
    return rgba[..., :3] * alpha + bg * (1.0 - alpha)


def downscale_image(rgb: np.ndarray, factor: int, image_path: Path) -> np.ndarray:
    """Area average over factor x factor blocks: [H, W, C] -> [H / factor, W / factor, C]."""
    if factor == 1:
        return np.ascontiguousarray(rgb, dtype=np.float32)
    height, width = rgb.shape[:2]
    if height % factor or width % factor:
        raise DatasetError(
            image_path, f"downscale {factor} does not divide the image size {width}x{height} (WxH)"
        )
    blocks = rgb.reshape(height // factor, factor, width // factor, factor, rgb.shape[-1])
    return blocks.mean(axis=(1, 3), dtype=np.float64).astype(np.float32)
