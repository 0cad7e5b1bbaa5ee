"""What the CUDA backward's run sums (csrc/cuda/corner_runs.cuh) save, counted on the CPU: grid
gradient atomics per point with and without them, on S1's and S5's rays and S2's uniform points,
in the warp layouts of the kernels, and how many pull steps a warp takes. (CPU only; the full
sizes take about a minute.)

A kernel holds `32 / lanes` consecutive points per warp (lanes: threads per point). Without the
run sums every inside corner of every point is one atomic per vector of channels; with them, a
voxel that consecutive points of the warp share is added once per run. The small-F kernel
(F = 1) adds each z-pair of corners with the aligned float4s covering it.

    python bench/probes/run_counts.py [--quick]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: bench, grid, train
from bench.ops.workloads import FULL, QUICK, generator, make_points, seed_of  # noqa: E402
from grid import reference  # noqa: E402

OFFSETS = torch.tensor(reference.CORNER_OFFSETS)  # [8, 3]


def corners(points: torch.Tensor, r: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Cells (align_corners=True) -> [N, 3] low corners, [N, 8] voxel ids (-1 outside)."""
    low = ((points.reshape(-1, 3).double() + 1) / 2 * (r - 1)).floor().long()
    c = low[:, None, :] + OFFSETS[None]
    inside = ((c >= 0) & (c < r)).all(-1)
    voxel = (c[..., 0] * r + c[..., 1]) * r + c[..., 2]
    return low, torch.where(inside, voxel, torch.full_like(voxel, -1))


def heads(voxel: torch.Tensor, per_warp: int) -> torch.Tensor:
    """[N, 8] run heads: inside corners the previous point of the warp does not have."""
    n = voxel.shape[0] // per_warp * per_warp
    v = voxel[:n].view(-1, per_warp, 8)
    prev = torch.full_like(v, -2)
    prev[:, 1:] = v[:, :-1]
    shared = (v[..., :, None] == prev[..., None, :]).any(-1)
    return ((v >= 0) & ~shared).view(n, 8)


def pull_steps(voxel: torch.Tensor) -> torch.Tensor:
    """Per warp of 32 points: the longest run after its head (the steps the pull loop takes)."""
    n = voxel.shape[0] // 32 * 32
    v = voxel[:n].view(-1, 32, 8)
    run = torch.zeros_like(v)
    for lane in range(30, -1, -1):
        same = (v[:, lane, :, None] == v[:, lane + 1, None, :]) & (v[:, lane, :, None] >= 0)
        nxt = torch.gather(run[:, lane + 1], 1, same.float().argmax(-1))
        run[:, lane] = torch.where(same.any(-1), nxt + 1, torch.zeros_like(nxt))
    return run.view(run.shape[0], -1).amax(1)


def float4_pairs(low: torch.Tensor, r: int, write: torch.Tensor) -> float:
    """Small-F kernel, F = 1: aligned float4 atomics per point over its four z-pairs."""
    total = 0
    for j in range(4):
        pair = ((low[:, 0] + (j >> 1)) * r + low[:, 1] + (j & 1)) * r + low[:, 2]
        in0, in1 = write[:, 2 * j], write[:, 2 * j + 1]
        a, b = pair + (~in0).long(), pair + 1 + in1.long()
        total += int(torch.where(in0 | in1, (b + 3) // 4 - a // 4, 0).sum())
    return total / low.shape[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the benchmark's quick sizes")
    args = parser.parse_args()
    sizes, cpu = (QUICK if args.quick else FULL), torch.device("cpu")
    # (points per warp, vectors per corner) of the general kernel's layouts (float32 unless said)
    layouts = {"2": (16, 1), "3": (4, 3), "4": (16, 1), "16": (4, 4), "16 bf16": (8, 2)}
    layouts["32"] = (2, 8)
    for name in ("S5", "S1", "S2"):
        size = sizes[name]
        r = size["r"]
        points = make_points(size, cpu, generator(cpu, seed_of(name)))
        low, voxel = corners(points, r)
        inside = int((voxel >= 0).sum()) / low.shape[0]
        w32 = heads(voxel, 32)
        n = w32.shape[0]
        print(f"{name}: R={r}, {low.shape[0]} points; inside corners per point {inside:.2f}")
        steps = pull_steps(voxel).float()
        print(f"  warp of 32: run heads per point {int(w32.sum()) / n:.2f}; pull steps per warp "
              f"mean {steps.mean():.2f}, p90 {steps.quantile(0.9):.0f}")  # fmt: skip
        plain, runs = float4_pairs(low[:n], r, voxel[:n] >= 0), float4_pairs(low[:n], r, w32)
        print(f"  F=1 small-F float4 atomics per point: {plain:.2f} -> {runs:.2f}")
        for f, (per_warp, vectors) in layouts.items():
            h = heads(voxel, per_warp)
            after = int(h.sum()) * vectors / h.shape[0]
            print(f"  F={f} ({per_warp} points per warp): atomics per point "
                  f"{inside * vectors:.2f} -> {after:.2f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
