"""Where a capture's cameras look: a `grid.bounds` to start from, for your own scene.

    python -m train.nerf.capture.bounds data/my_capture [--ratio 0.375]

Reads the poses of a scene in either layout (every split; images are not opened), finds
the point nearest to all the cameras' optical axes (least squares) and the cameras' mean
distance to it, and suggests the cube centred there whose half-side is `ratio` times that
distance: 0.375 is the NeRF-synthetic proportion (cameras 4 from the centre, objects
within 1.5). It suits object captures, cameras around the object; for other captures read
the printed camera extent. For a transforms.json with instant-ngp's `scale`, `offset` or
`aabb_scale`, the world boxes they stand for are printed too (`train.nerf.data.ngp.ngp_box`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from ...errors import plural
from .orient import look_at

# The scene readers import torch: imported where they are used, so that --help and a bad
# option answer without it (0.2 s instead of 1.5 s on 2 cores).

NERF_SYNTHETIC_RATIO = 1.5 / 4.0


def read_poses(path: str | Path) -> np.ndarray:
    """[N, 4, 4] camera-to-world matrices of every frame of the scene in `path`."""
    from ..data.blender import SPLITS, frame_list, frame_matrix, read_json
    from ..data.ngp import TRANSFORMS, layout

    root = Path(path)
    if layout(root) == "ngp":
        files = [root / TRANSFORMS]
    else:
        files = [root / f"transforms_{s}.json" for s in SPLITS]
        files = [f for f in files if f.is_file()] or [root / "transforms_train.json"]
    poses = []
    for json_path in files:
        meta = read_json(json_path)
        poses += [frame_matrix(frame, json_path, i) for i, frame in frame_list(meta, json_path)]
    return np.stack(poses).astype(np.float64)


def suggest_bounds(c2w: np.ndarray, ratio: float = NERF_SYNTHETIC_RATIO) -> list[list[float]]:
    """The cube around `look_at`'s point, half-side `ratio` x the mean camera distance."""
    centre, distance = look_at(c2w)
    half = ratio * distance.mean()
    return [(centre - half).tolist(), (centre + half).tolist()]


def _number(value: float) -> str:
    return f"{round(value, 3) + 0.0:g}"  # + 0.0: no "-0"


def _box(box: list[list[float]]) -> str:
    return "[" + ", ".join("[" + ", ".join(map(_number, c)) + "]" for c in box) + "]"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m train.nerf.capture.bounds",
        description="Suggest grid.bounds for a scene from where its cameras look.",
    )
    parser.add_argument("path", type=Path, help="the scene directory (data.path)")
    parser.add_argument(
        "--ratio",
        type=float,
        default=NERF_SYNTHETIC_RATIO,
        help="half-side of the box over the mean camera distance (default 0.375)",
    )
    args = parser.parse_args(argv)
    from ..data.blender import DatasetError, read_json
    from ..data.ngp import TRANSFORMS, layout, ngp_box

    try:
        c2w = read_poses(args.path)
    except DatasetError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    centre, distance = look_at(c2w)
    origins = c2w[:, :3, 3]
    print(f"{plural(len(c2w), 'camera')} ({layout(args.path)} layout)")
    print(f"camera positions span {_box([origins.min(0).tolist(), origins.max(0).tolist()])}")
    print(
        f"the cameras look at ({', '.join(map(_number, centre))}), from "
        f"{_number(distance.mean())} on average ({_number(distance.min())} to "
        f"{_number(distance.max())})"
    )
    print(f"suggested: --set 'grid.bounds={_box(suggest_bounds(c2w, args.ratio))}'")
    if layout(args.path) == "ngp":
        meta = read_json(args.path / TRANSFORMS)
        if any(key in meta for key in ("scale", "offset", "aabb_scale")):
            unit, aabb = ngp_box(meta)
            print(f"instant-ngp's unit cube: {_box(unit)}; its aabb_scale box: {_box(aabb)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
