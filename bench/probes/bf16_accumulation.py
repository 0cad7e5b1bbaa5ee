"""How far a bf16 grid gradient accumulated add by add lands from the exact sum, on S4.

The CUDA backward (like F.grid_sample's) adds every point's contribution to a bf16 gradient
with an atomic, so each add rounds to 8 bits, in an order that changes from run to run. This
replays that on the CPU for an S4 workload (rays, R = 128, F = 16, bf16 grad_out; the same
sizes and distributions, drawn on the CPU): each voxel takes its contributions one at a
time in a random order, rounding to bf16 after every add, and the relative max error
against the float64 sum is printed for a few orders. The benchmark's bf16 tolerance for
grad_features rests on this.

    python bench/probes/bf16_accumulation.py [--trials 4]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: bench, grid, train
from bench.ops.workloads import FULL, generator, ray_points  # noqa: E402
from grid import reference  # noqa: E402


def contributions(r: int, points: torch.Tensor, grad: torch.Tensor):
    """(voxel index [M], weight * grad_out [M, F]) of every in-range corner of every point."""
    index = (points + 1) / 2 * (r - 1)  # align_corners=True
    low = index.floor()
    weights = reference._corner_weights(index - low)  # [N, 8]
    low = low.long()
    voxels, values = [], []
    for k, offset in enumerate(reference.CORNER_OFFSETS):
        corner = low + torch.tensor(offset)
        ok = ((corner >= 0) & (corner < r)).all(1)
        voxels.append(((corner[:, 0] * r + corner[:, 1]) * r + corner[:, 2])[ok])
        values.append(weights[ok, k, None] * grad[ok])
    return torch.cat(voxels), torch.cat(values)


def sequential_bf16(voxels: torch.Tensor, values: torch.Tensor, n: int) -> torch.Tensor:
    """Sum per voxel in the given order, rounding to bf16 after every add: round j adds
    every voxel's j-th contribution."""
    order = torch.argsort(voxels, stable=True)
    voxels, values = voxels[order], values[order]
    counts = torch.bincount(voxels, minlength=n)
    first = torch.cumsum(counts, 0) - counts
    rank = torch.arange(voxels.numel()) - first[voxels]
    acc = torch.zeros(n, values.shape[1])
    for j in range(int(counts.max())):
        take = rank == j
        v = voxels[take]
        acc[v] = (acc[v] + values[take]).bfloat16().float()
    return acc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=4)
    args = parser.parse_args()
    size = FULL["S4"]
    r, f = size["r"], size["f"]
    gen = generator(torch.device("cpu"), 0)
    torch.randn(r, r, r, f, generator=gen)  # the features, drawn first as in the benchmark
    points = ray_points(*size["rays"], torch.device("cpu"), gen).reshape(-1, 3)
    grad = torch.randn(points.shape[0], f, generator=gen).bfloat16().float()
    voxels, values = contributions(r, points, grad)
    exact = torch.zeros(r**3, f, dtype=torch.float64).index_add_(0, voxels, values.double())
    counts = torch.bincount(voxels, minlength=r**3)
    mean = counts[counts > 0].float().mean()
    print(f"adds per touched voxel: mean {mean:.1f}, max {counts.max()}")
    for trial in range(args.trials):
        order = torch.randperm(voxels.numel(), generator=torch.Generator().manual_seed(trial))
        acc = sequential_bf16(voxels[order], values[order], r**3)
        err = (acc.double() - exact).abs().max() / exact.abs().max()
        print(f"order {trial}: relative max error {err:.4f}")


if __name__ == "__main__":
    main()
