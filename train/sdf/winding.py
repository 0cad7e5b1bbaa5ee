"""The generalized winding number of oriented points: the sign of space far from a scan.

    w(x) = sum_i a_i n_i . (p_i - x) / (4 pi |p_i - x|^3)

(Barill et al. 2018, "Fast winding numbers for soups and clouds", the dipoles' sum without
their tree): ~1 inside a closed sampled surface, ~0 outside, and a smooth blend across a
hole or an unscanned side, where the 0.5 level closes the surface as screened Poisson's
indicator does. a_i: the surface area each point stands for, pi r_i^2 / K with r_i the
distance to its K-th nearest neighbour (density-adaptive). Brute force over a subset of
the points, so it is meant for voxels far from the points, where it is smooth; near them
the local normals decide (train/sdf/experiment.py's `points_init`).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .neighbours import nearest_points

#: neighbours whose distance sizes a point's area
AREA_NEIGHBOURS = 8
#: Query-point pairs per chunk of `winding_numbers`: on the CPU, [Q, P] buffers of 2 MB that
#: stay in the cache (1.24 -> 0.66 s on one core for configs/sdf_scan.toml's 32^3 init
#: against 2048 points; 16 MB ones went to memory), on a GPU fewer, larger launches.
CPU_BLOCK, GPU_BLOCK = 1 << 19, 1 << 22


def point_areas(points: Tensor) -> Tensor:
    """[N] the area each of points [N, 3] stands for: pi r^2 / K, r the distance to its
    K-th nearest other point (K = AREA_NEIGHBOURS, or N - 1 when fewer)."""
    n = points.shape[0]
    k = min(AREA_NEIGHBOURS, n - 1)
    if k < 1:
        raise ValueError(f"point_areas: {n} point(s), need at least 2")
    distance, _ = nearest_points(points, points, k + 1)  # [N, k + 1]: itself first, at 0
    return math.pi * distance[:, -1].to(points.dtype).square() / k


def winding_numbers(
    x: Tensor, points: Tensor, normals: Tensor, areas: Tensor, block: int | None = None
) -> Tensor:
    """[C] w at each of x [C, 3] of points [P, 3] with unit normals [P, 3] and areas [P],
    in chunks of about `block` query-point pairs (two matrix products each: no [C, P, 3]
    tensor; default CPU_BLOCK or GPU_BLOCK, the values do not depend on it); a query at a
    point itself gets nothing from that point. Distances by the expansion
    |p|^2 + |x|^2 - 2 x.p: meant for queries not within rounding of a point."""
    dipoles = normals * areas[:, None] / (4 * math.pi)  # [P, 3]
    offset = (points * dipoles).sum(1)  # [P]: p_i . m_i
    squares = points.square().sum(1)  # [P]
    out = torch.empty(x.shape[0], dtype=x.dtype, device=x.device)
    block = block or (CPU_BLOCK if x.device.type == "cpu" else GPU_BLOCK)
    rows = max(1, block // max(points.shape[0], 1))
    # The plain expressions' operations in the same order, in place where they made a new
    # [Q, P] tensor: bitwise the same values in half the time (0.58 -> 0.30 s of one core
    # for 32^3 queries and 2048 points, the points init of configs/sdf_scan.toml).
    for start in range(0, x.shape[0], rows):
        q = x[start : start + rows]  # [Q, 3]
        dot = (q @ dipoles.T).neg_().add_(offset)  # [Q, P]: m_i . (p_i - q)
        r2 = squares[None] + q.square().sum(1, keepdim=True)  # [Q, P]: |p|^2 + |q|^2 ...
        r2.sub_(2 * q @ points.T).clamp_min_(0)  # ... - 2 q.p
        r3 = r2.sqrt().mul_(r2)
        out[start : start + len(q)] = dot.div_(r3).masked_fill_(~(r3 > 0), 0.0).sum(1)
    return out


def nearest_side(x: Tensor, points: Tensor, normals: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """(distances [C, k] to the k nearest of points [P, 3], nearest first; side [C]: the
    mean of (x - p) . n over them, negative behind the surface) at each of x [C, 3]. The
    local counterpart of the winding number: cheap, right near a smooth surface, wrong near
    concave creases (a far query's nearest points can lie on a face it is behind)."""
    distance, nearest = nearest_points(x, points, k)  # [C, k]
    side = ((x[:, None] - points[nearest]) * normals[nearest]).sum(dim=2).mean(dim=1)
    return distance, side
