"""A generated outdoor scene (Blender layout) rewritten in LLFF's layout, for DirectVoxGO's
LLFF loader (its v2 unbounded configs read LLFF captures: `lib/load_llff.py`).

    python bench/compare/dvgo/dvgo_llff.py SCENE_DIR LLFF_DIR [--hold 8]

LLFF_DIR gets `images/` (RGB PNGs, named so that sorting them gives the rows' order),
`poses_bounds.npy` [N, 17] and `llff_views.json` (which view of which split each row is,
the bounds and how they were chosen).

Rows: LLFF's 3x5 matrix per image, row-major: the camera-to-world rotation's columns in
LLFF's camera axes (down, right, backwards) = (-y, x, z) of the OpenGL camera, the camera
centre, then (height, width, focal in pixels); then near and far.

Order: DirectVoxGO's `llffhold = 8` makes every image with index % 8 == 0 a test image and
trains on the others, so the rows interleave the splits: index 8k is test view k, the seven
after it the next training views. That holds out exactly the test views when
ceil((train + test) / 8) == test, i.e. 7 (test - 1) <= train <= 7 test (175 training views
for 25 test views).

Bounds: what LLFF's own pose script records, the 0.1 and 99.9 percentiles of the depth (along
the optical axis) of the scene points an image sees, taken here from the scene's exact
geometry instead of a sparse SfM cloud: rays through a grid of pixel centres (every
`stride`-th pixel) ray-cast against the scene (`train.nerf.scenes.outdoor`: the object, the ground
out to its edge at radius 100, the buildings; sky pixels hit nothing and, like the sky in
an SfM cloud, give no depth). DirectVoxGO's loader rescales them with the poses; its
unbounded path uses only their minimum (near_clip = 0.9 x the smallest near: the inner
box is the box of the training cameras' frustums cut at that depth, and no density is
learnt nearer to a camera), the far values only print.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import torch
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the checkout: bench, grid, train

from train.nerf.data.blender import Views, camera_rays, load_blender  # noqa: E402
from train.nerf.scenes import outdoor  # noqa: E402

HOLD = 8  # DirectVoxGO's llffhold in its unbounded configs
PERCENTILES = (0.1, 99.9)  # LLFF's imgs2poses: np.percentile(depths, .1) and (.., 99.9)
DEPTH_SAMPLES = 64  # pixel rows and columns ray-cast per view for its bounds
OUTDOOR_SCENES = ("unbounded", "forward")  # both are train.nerf.scenes.outdoor's world


class LlffError(ValueError):
    """The scene cannot be written in LLFF's layout as asked; one line."""


def llff_order(n_train: int, n_test: int, hold: int = HOLD) -> list[tuple[str, int]]:
    """The (split, view index) of each LLFF row: row i is test view i // hold when
    i % hold == 0, else the next training view. LlffError unless `hold` then holds out
    exactly the test views."""
    n = n_train + n_test
    if n_test < 1 or -(-n // hold) != n_test:
        lo, hi = (hold - 1) * (n_test - 1), (hold - 1) * n_test
        raise LlffError(
            f"{n_train} training and {n_test} test views: llffhold = {hold} would hold out "
            f"{-(-n // hold)} of the {n} images; with {n_test} test views take {lo} to {hi} "
            f"training views"
        )
    train = iter(range(n_train))
    return [("test", i // hold) if i % hold == 0 else ("train", next(train)) for i in range(n)]


def llff_rows(c2w: np.ndarray, hwf: tuple[float, float, float], bounds: np.ndarray) -> np.ndarray:
    """c2w: [N, 4, 4] OpenGL camera-to-world (x right, y up, z backwards); hwf: (height,
    width, focal) in pixels; bounds: [N, 2] near, far -> [N, 17] LLFF rows."""
    c2w = np.asarray(c2w, dtype=np.float64)
    m = np.zeros((len(c2w), 3, 5))
    m[:, :, 0] = -c2w[:, :3, 1]  # down
    m[:, :, 1] = c2w[:, :3, 0]  # right
    m[:, :, 2] = c2w[:, :3, 2]  # backwards
    m[:, :, 3] = c2w[:, :3, 3]  # camera centre
    m[:, :, 4] = hwf
    return np.concatenate([m.reshape(len(c2w), 15), np.asarray(bounds, np.float64)], axis=1)


def view_bounds(
    views: Views, samples: int = DEPTH_SAMPLES, world: outdoor.World = outdoor.DEFAULT
) -> np.ndarray:
    """views of the outdoor world (`world`: a variant's) -> [V, 2] (near, far): PERCENTILES
    of the depths along each view's optical axis of the surfaces seen through `samples` x
    `samples` pixels."""
    stride = max(1, min(views.height, views.width) // samples)
    rows = []
    for v in range(len(views.c2w)):
        o, d = camera_rays(views, v)  # [H, W, 3] each, unit directions
        o = o[::stride, ::stride].reshape(-1, 3).float()
        d = d[::stride, ::stride].reshape(-1, 3).float()
        # the first surface along each ray (inf for the sky); the outdoor world's own ray
        # cast, the one its images are rendered with
        t = outdoor._nearest(o, d, world=world)[0]
        forward = -views.c2w[v, :3, 2].float()
        depth = (t * (d @ forward))[torch.isfinite(t)]
        if len(depth) == 0:
            raise LlffError(f"{views.names[v]}: no surface in view (sky only): no bounds")
        rows.append(np.percentile(depth.numpy(), PERCENTILES))
    return np.array(rows)


def write_llff(scene: Path, folder: Path, hold: int = HOLD) -> dict:
    """Writes `scene` (a generated outdoor scene, Blender layout, opaque images) into
    `folder` (replaced) in LLFF's layout; returns what llff_views.json records."""
    meta = json.loads((scene / "scene.json").read_text())
    if meta.get("scene") not in OUTDOOR_SCENES:
        raise LlffError(
            f"{scene}: bounds need the outdoor world's geometry, not {meta.get('scene')}"
        )
    splits = {name: load_blender(scene, name) for name in ("train", "test")}
    order = llff_order(len(splits["train"].c2w), len(splits["test"].c2w), hold)
    first = splits["train"]
    for name, views in splits.items():
        if views.alphas is not None and float(views.alphas.min()) < 1:
            raise LlffError(f"{scene}: {name} images are not opaque (LLFF images have no alpha)")
        if (views.height, views.width, views.focal) != (first.height, first.width, first.focal):
            raise LlffError(f"{scene}: the splits' cameras differ (LLFF: one camera)")
    world = outdoor.world(int(meta.get("variant", 0)))  # the scene's own (scene.json)
    bounds = {name: view_bounds(views, world=world) for name, views in splits.items()}
    shutil.rmtree(folder, ignore_errors=True)
    (folder / "images").mkdir(parents=True)
    rows, sources = [], []
    for i, (split, k) in enumerate(order):
        source = Path(splits[split].names[k])
        with Image.open(source) as image:  # the same 8-bit values, alpha (all 255) dropped
            image.convert("RGB").save(folder / "images" / f"{i:04d}_{split}_{source.stem}.png")
        rows.append((splits[split].c2w[k].double().numpy(), bounds[split][k]))
        sources.append({"row": i, "split": split, "view": k, "file": source.name})
    hwf = (first.height, first.width, first.focal)
    array = llff_rows(np.stack([r[0] for r in rows]), hwf, np.stack([r[1] for r in rows]))
    np.save(folder / "poses_bounds.npy", array)
    info = {
        "scene": str(scene),
        "hold": hold,
        "train_views": len(splits["train"].c2w),
        "test_views": len(splits["test"].c2w),
        "hwf": list(hwf),
        "bounds": "per image: the 0.1 and 99.9 percentiles of the depth along the optical "
        f"axis of the surfaces seen through {DEPTH_SAMPLES}x{DEPTH_SAMPLES} pixels (sky excluded)",
        "near_min": float(array[:, 15].min()),
        "near_median": float(np.median(array[:, 15])),
        "far_max": float(array[:, 16].max()),
        "rows": sources,
    }
    (folder / "llff_views.json").write_text(json.dumps(info, indent=1))
    return info


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scene", type=Path, help="a generated unbounded scene (Blender layout)")
    parser.add_argument("out", type=Path, help="the LLFF folder to write (replaced)")
    parser.add_argument("--hold", type=int, default=HOLD, help="DirectVoxGO's llffhold")
    args = parser.parse_args(argv)
    try:
        info = write_llff(args.scene, args.out, args.hold)
    except LlffError as error:
        print(f"dvgo_llff: {error}", file=sys.stderr)
        return 2
    print(
        f"wrote {args.out}: {len(info['rows'])} images ({info['train_views']} train, "
        f"{info['test_views']} test: rows 0, {args.hold}, ...), near >= {info['near_min']:.3f}, "
        f"far <= {info['far_max']:.1f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
