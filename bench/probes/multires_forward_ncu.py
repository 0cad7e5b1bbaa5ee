"""Why is our multires forward slower than torch-ngp's? One forward of each, to be profiled
by Nsight Compute (bench/notes/ops.md, R1 v3: 0.535 against 0.355 ms at 2^19 points on an
H200, while the backward is 2x faster).

    ncu --kernel-name regex:"multires_forward_kernel|kernel_grid" --launch-skip 2 \
        --launch-count 2 --section SpeedOfLight --section MemoryWorkloadAnalysis \
        --section Occupancy --section WarpStateStats \
        python bench/probes/multires_forward_ncu.py --ngp DIR

The configuration of bench/ops/multires.py (L = 16, F = 2, T = 2^19, 16 -> 2048 cells,
float32), 2^19 uniform points; each forward runs twice as warm-up, then twice to profile.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import grid  # noqa: E402
from bench.ops.multires import FEATURES, LOG2_T, L, build_ngp, hashed_resolutions  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ngp", type=Path, required=True, help="torch-ngp's gridencoder folder")
    parser.add_argument("--points", type=int, default=2**19)
    args = parser.parse_args()
    device = torch.device("cuda")
    gen = torch.Generator(device=device).manual_seed(0)
    table = torch.rand(L, 2**LOG2_T, FEATURES, device=device, generator=gen) * 2 - 1
    points = torch.rand(args.points, 3, device=device, generator=gen) * 2 - 1
    ngp = build_ngp(args.ngp, device)
    res = hashed_resolutions()
    with torch.no_grad():
        for _ in range(4):
            grid.multires(table, points, res)
            ngp(points)
    torch.cuda.synchronize()
    print("done")


if __name__ == "__main__":
    main()
