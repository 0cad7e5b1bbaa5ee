"""What the sdf experiment adds to its loss and its start besides the point terms.

* `laplacian_energy`: the smoothness term `sdf.smooth_weight` x mean over the box of
  (Laplacian of f)^2, from two passes of the native total-variation op (its gradient is
  a discrete Laplacian: applied twice, the gradient of the Laplacian energy).
* `band_points`: eikonal points near the surface points (`sdf.band_fraction`).
* `winding_numbers`: the generalised winding number of an oriented point cloud
  (Barill et al. 2018, "Fast winding numbers for soups and clouds"), by brute force over
  a subset of the points: 1 inside a closed surface, 0 outside, about 1/2 on it and
  smooth across holes; the start's sign far from the points (`sdf.init_sign`).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from grid.ops import total_variation_add_grad_


class _LaplacianEnergy(torch.autograd.Function):
    """w x mean((L f)^2) / h^4 for a [X, Y, Z, F] grid f, L the 7-point Laplacian of the
    voxels off the grid's boundary (zero on it), h the voxel side: value and gradient in
    forward."""

    @staticmethod
    def forward(ctx, features: Tensor, weight: float, voxel: float) -> Tensor:
        f = features.detach().contiguous()
        n = f.numel()
        pairs = sum(n - n // s for s in f.shape[:3]) / 3  # neighbour pairs per axis, mean
        # total_variation's gradient is -(2 / (3 pairs)) L f
        first = torch.zeros_like(f)
        total_variation_add_grad_(first, f, 1.0)
        lf = first * (-1.5 * pairs)
        for axis in range(3):  # the boundary voxels' one-sided rows are not a Laplacian
            lf.narrow(axis, 0, 1).zero_()
            lf.narrow(axis, lf.shape[axis] - 1, 1).zero_()
        gradient = torch.zeros_like(f)  # (2 w / (n h^4)) L (L f)
        total_variation_add_grad_(gradient, lf, -3.0 * weight * pairs / (n * voxel**4))
        ctx.save_for_backward(gradient)
        return lf.square().mean() * (weight / voxel**4)

    @staticmethod
    def backward(ctx, grad_out: Tensor) -> tuple[Tensor, None, None]:
        (gradient,) = ctx.saved_tensors
        return grad_out * gradient, None, None


def laplacian_energy(features: Tensor, weight: float, voxel: float) -> Tensor:
    """`weight` x the mean over the box of (Laplacian of f)^2 for the grid `features`
    [X, Y, Z, F] of (cubic) voxels of side `voxel`, differentiable w.r.t. `features`.

    In world units: the discrete Laplacian is divided by voxel^2, so a field has the same
    energy at every resolution. Zero for any field linear in x, y, z. The voxels on the
    grid's boundary have no Laplacian (no neighbour beyond) and count as zero."""
    return _LaplacianEnergy.apply(features, weight, voxel)


def band_points(points: Tensor, n: int, std: float, gen: torch.Generator) -> Tensor:
    """[n, 3] points near the surface: random points of `points` [N, 3] moved by an
    isotropic Gaussian offset of standard deviation `std` (drawn with `gen`)."""
    pick = torch.randint(points.shape[0], (n,), generator=gen, device=gen.device)
    offset = torch.randn(n, 3, generator=gen, device=gen.device) * std
    return points[pick.to(points.device)] + offset.to(points.device)


def point_areas(points: Tensor, neighbours: int = 8) -> Tensor:
    """[N] the surface area each point stands for: pi r^2 / neighbours, r the distance to
    its neighbours-th nearest point (so a sparse region's points weigh more)."""
    from .neighbours import knn

    _, distance = knn(points, neighbours)
    return math.pi * distance[:, -1].square() / neighbours


def winding_numbers(
    queries: Tensor,
    points: Tensor,
    normals: Tensor,
    areas: Tensor,
    chunk: int = 1024,
) -> Tensor:
    """[Q] generalised winding numbers at queries [Q, 3] of the oriented points
    [N, 3] with unit normals [N, 3] standing for the areas [N]:
    sum_i a_i (p_i - x) . n_i / (4 pi |p_i - x|^3). Brute force in chunks of queries
    (O(Q N): pass a subset of the points, its areas scaled up)."""
    out = torch.empty(queries.shape[0], device=queries.device)
    weighted = normals * (areas / (4 * math.pi))[:, None]  # [N, 3]
    for start in range(0, queries.shape[0], chunk):
        x = queries[start : start + chunk]
        d = points[None] - x[:, None]  # [C, N, 3]
        r = d.norm(dim=2).clamp_min(1e-6)
        out[start : start + chunk] = ((d * weighted[None]).sum(dim=2) / r**3).sum(dim=1)
    return out
