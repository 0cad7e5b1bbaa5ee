"""Rewrites a Blender-layout scene in the instant-ngp / nerfstudio layout (`train.nerf.data.ngp`).

    python -m train.nerf.data.to_ngp --scene data/nerf_scene --out data/nerf_scene_ngp \
        [--format jpg]

The result is what a capture pipeline would give for the same cameras: one
`transforms.json` with explicit intrinsics (`fl_x`, `fl_y`, `cx`, `cy`, `w`, `h`,
`camera_model` OPENCV with zero distortion), nerfstudio's `train_filenames`,
`val_filenames` and `test_filenames`, and RGB images without alpha (composited onto
`background`, 8 bits per channel) under `images/`. Training on either gives the same
field (tests/train/nerf/test_ngp.py compares the PSNRs).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

# The readers import torch: imported where they are used, so that --help and a bad option
# answer without it (0.2 s instead of 1.5 s on 2 cores).

FORMATS = {"png": ".png", "jpg": ".jpg"}


def write_ngp(
    scene: str | Path,
    out_dir: str | Path,
    *,
    image_format: str = "png",
    background: tuple[float, float, float] = (1.0, 1.0, 1.0),
    quality: int = 95,
) -> Path:
    """Writes `out_dir/transforms.json` and `out_dir/images/{split}_{k:04d}.{png,jpg}` from
    the Blender scene in `scene` (every split it has; `train` required). Returns `out_dir`.

    image_format: "png" (lossless) or "jpg" (JPEG at `quality`).
    Raises DatasetError for a bad scene, ValueError for a bad argument.
    """
    from PIL import Image  # Pillow is a dependency of matplotlib (the `train` extra)

    from .blender import SPLITS, DatasetError, load_blender
    from .ngp import TRANSFORMS

    if image_format not in FORMATS:
        raise ValueError(f"image_format must be one of {', '.join(FORMATS)}; got {image_format!r}")
    scene, out = Path(scene), Path(out_dir)
    (out / "images").mkdir(parents=True, exist_ok=True)
    meta: dict = {"camera_model": "OPENCV"}
    frames: list[dict] = []
    for split in SPLITS:
        if split != "train" and not (scene / f"transforms_{split}.json").is_file():
            continue
        views = load_blender(scene, split, background=background)
        if "w" not in meta:
            meta |= {"fl_x": views.focal, "fl_y": views.focal}
            meta |= {"cx": 0.5 * views.width, "cy": 0.5 * views.height}
            meta |= {"w": views.width, "h": views.height}
            meta |= {"k1": 0.0, "k2": 0.0, "p1": 0.0, "p2": 0.0}
        elif (views.width, views.height, views.focal) != (meta["w"], meta["h"], meta["fl_x"]):
            raise DatasetError(
                scene / f"transforms_{split}.json",
                "the splits have different image sizes or focal lengths",
            )
        names = []
        for k in range(len(views)):
            name = f"images/{split}_{k:04d}{FORMATS[image_format]}"
            pixels = (views.images[k].numpy() * 255.0 + 0.5).clip(0, 255).astype(np.uint8)
            options = {"quality": quality} if image_format == "jpg" else {}
            Image.fromarray(pixels).save(out / name, **options)
            frames.append({"file_path": name, "transform_matrix": views.c2w[k].tolist()})
            names.append(name)
        meta[f"{split}_filenames"] = names
    meta["frames"] = frames
    (out / TRANSFORMS).write_text(json.dumps(meta, indent=2) + "\n")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m train.nerf.data.to_ngp",
        description="Rewrite a Blender-layout scene as instant-ngp / nerfstudio transforms.json.",
    )
    parser.add_argument("--scene", required=True, help="the Blender-layout scene directory")
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument("--format", default="png", choices=tuple(FORMATS), help="image format")
    parser.add_argument(
        "--background",
        type=float,
        nargs=3,
        default=[1.0, 1.0, 1.0],
        metavar=("R", "G", "B"),
        help="RGB in [0, 1] under the images' alpha (default white)",
    )
    args = parser.parse_args(argv)
    from .blender import DatasetError
    from .ngp import TRANSFORMS

    try:
        out = write_ngp(args.scene, args.out, image_format=args.format, background=args.background)
    except (DatasetError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"wrote {out / TRANSFORMS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
