"""Would a sparse level beat a hashed one? The rows each level of a multires table needs if
it stored only the lattice vertices near the surface (an occupied-block level), against the
table size T a hashed level has (issue 61: "a sparse level, if measurement says so").

    python bench/probes/sparse_level_rows.py MESH.off [MESH.off ...] [--levels 16]
        [--base 16] [--finest 512] [--log2-table 19] [--band 0.017]

Each mesh is placed as the NeRF scenes place it (train/nerf/scenes/scan.py: upright, its
largest side 1.6, in the box [-1.5, 1.5]^3 the multires table covers) and sampled by area
(points no farther apart than a quarter of the finest cell). A level of R cells per axis
needs the vertices of every cell within `band` (world units; default one cell of the
176^3 occupancy grid, where a NeRF's samples fall) of a surface sample. Printed per level:
R, the vertices a dense level has ((R + 1)^3), those a sparse level needs, and that over T.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from train.mesh.scoring import face_normals, sample_mesh
from train.nerf.scenes.scan_mesh import place, read_mesh

BOX = 3.0  # the table's box side: [-1.5, 1.5]^3


def needed_vertices(points: np.ndarray, resolution: int, band: float) -> int:
    """Lattice vertices of the cells of a resolution^3 grid over the box within `band` of
    a point (the band as whole cells on each side, at least the cell holding the point)."""
    cell = BOX / resolution
    index = np.floor((points + BOX / 2) / cell).astype(np.int64).clip(0, resolution - 1)
    side = resolution + 2  # cell keys with a margin of one on each side

    def key(ijk: np.ndarray, n: int) -> np.ndarray:
        return (ijk[..., 0] * n + ijk[..., 1]) * n + ijk[..., 2]

    cells = np.unique(key(index + 1, side))  # 1-D keys: np.unique(axis=0) is much slower
    reach = max(0, math.ceil(band / cell - 1e-9))
    steps = np.arange(-reach, reach + 1)
    offsets = key(np.stack(np.meshgrid(steps, steps, steps, indexing="ij"), -1), side)
    cells = np.unique((cells[:, None] + offsets.reshape(1, -1)).reshape(-1))
    ijk = np.stack([cells // side**2, cells // side % side, cells % side], -1) - 1
    ijk = ijk[((ijk >= 0) & (ijk < resolution)).all(axis=1)]
    corners = np.stack(np.meshgrid([0, 1], [0, 1], [0, 1], indexing="ij"), -1).reshape(8, 3)
    return int(np.unique(key(ijk[:, None] + corners, resolution + 1)).size)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("meshes", nargs="+", type=Path)
    parser.add_argument("--levels", type=int, default=16)
    parser.add_argument("--base", type=int, default=16)
    parser.add_argument("--finest", type=int, default=512)
    parser.add_argument("--log2-table", type=int, default=19)
    parser.add_argument("--band", type=float, default=BOX / 176)
    args = parser.parse_args()
    growth = (args.finest / args.base) ** (1 / (args.levels - 1))
    resolutions = [int(math.floor(args.base * growth**i)) for i in range(args.levels)]
    table = 2**args.log2_table
    for path in args.meshes:
        mesh = place(read_mesh(path), "+z", 1.6, None)
        area = float(face_normals(mesh.vertices, mesh.faces)[1].sum())
        spacing = BOX / args.finest / 4  # mean spacing of the samples
        count = int(min(2e7, 2 * area / spacing**2))
        points, _, _ = sample_mesh(mesh, count, seed=0)
        print(f"{path.name}: area {area:.2f}, {count} samples")
        print("| level | R | dense rows (R+1)^3 | sparse rows | sparse / T |")
        print("| ---: | ---: | ---: | ---: | ---: |")
        for level, r in enumerate(resolutions):
            need = needed_vertices(points, r, args.band)
            print(f"| {level} | {r} | {(r + 1) ** 3} | {need} | {need / table:.2f} |")


if __name__ == "__main__":
    main()
