"""Noisy scans: how far the points scatter off their surface, and moving them back onto it.

A scanner's points scatter along the surface normal. The fit averages that scatter only
over the points of a voxel; at fine grids a voxel holds few points and the zero level set
follows the noise (rough normals). Projecting each point onto the least-squares plane of
its k nearest neighbours first averages over k + 1 points instead; a plane alone would move a clean
curved surface inwards by its neighbourhoods' sagitta (r^2 / (2 R) for a neighbourhood of
radius r on a radius R), so each point goes onto a quadric fitted over that plane
(`project_to_surfaces`): Gaussian scatter of standard deviation s drops to about
s * sqrt(6 / (k + 1)), and a clean surface moves by its third-order terms only. The plane
fit's residual (`local_planes`' spread) is the scatter itself on a noisy scan and a small
fraction of it on a clean one.
"""

from __future__ import annotations

import torch
from torch import Tensor


def local_planes(points: Tensor, index: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Each point's neighbourhood plane: (centroid [N, 3], unit normal [N, 3], spread [N]).

    points: [N, 3]; index: [N, k], each point's k nearest others. The neighbourhood is the
    point and its neighbours; the spread is the RMS distance of the neighbourhood from its
    plane (the root of the least eigenvalue of its covariance)."""
    _, centroid, frame, spread = _frames(points, index)
    return centroid.to(points), frame[:, 2].to(points), spread.to(points)


def project_to_surfaces(points: Tensor, index: Tensor) -> tuple[Tensor, Tensor]:
    """points [N, 3] moved onto a quadratic height field fitted (least squares) to their
    neighbourhoods over the neighbourhood planes of `local_planes` (`index` [N, k], k >= 6),
    and the planes' spread [N] measured before the move.

    In each plane's frame (u, v, height h) the fit is h = a + b u + c v + d u^2 + e uv +
    f v^2 and the point goes to its (u, v) at the fitted height: unlike a plane, the
    quadric follows the surface's curvature, so a clean curved surface barely moves."""
    centred, centroid, frame, spread = _frames(points, index)
    local = centred @ frame.transpose(1, 2)  # [N, k + 1, 3] (u, v, h)
    design = _quadric_terms(local[..., 0], local[..., 1])  # [N, k + 1, 6]
    gram = design.transpose(1, 2) @ design
    gram = gram + 1e-12 * gram.diagonal(dim1=1, dim2=2).sum(-1)[:, None, None] * torch.eye(6)
    coef = torch.linalg.solve(gram, design.transpose(1, 2) @ local[..., 2:])  # [N, 6, 1]
    at = local[:, 0]  # the point itself, first in its group
    height = (_quadric_terms(at[:, 0:1], at[:, 1:2]) @ coef)[:, 0, 0]
    moved = torch.stack([at[:, 0], at[:, 1], height], dim=1)[:, None] @ frame
    return (moved[:, 0] + centroid).to(points), spread.to(points)


def _frames(points: Tensor, index: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The neighbourhoods (point first) centred [N, k + 1, 3], their centroids [N, 3], their
    principal frames [N, 3, 3] (rows: the two in-plane axes, then the normal) and spreads
    [N]; float64 on the CPU (cuSOLVER's batched eigh fails on 1e5 3x3 matrices, and the
    CPU does them in milliseconds)."""
    points, index = points.double().cpu(), index.cpu()
    group = torch.cat([points[:, None], points[index]], dim=1)
    centroid = group.mean(dim=1)
    centred = group - centroid[:, None]
    values, vectors = torch.linalg.eigh(centred.transpose(1, 2) @ centred / group.shape[1])
    frame = vectors.flip(2).transpose(1, 2)  # eigenvalues ascending: the normal is last
    return centred, centroid, frame, values[:, 0].clamp(min=0).sqrt()


def _quadric_terms(u: Tensor, v: Tensor) -> Tensor:
    """[N, M] u, v -> [N, M, 6] the terms 1, u, v, u^2, uv, v^2."""
    return torch.stack([torch.ones_like(u), u, v, u * u, u * v, v * v], dim=-1)
