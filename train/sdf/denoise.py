"""Noisy scans: how far the points scatter off their surface, and moving them back onto it.

A scanner's points scatter along the surface normal. The fit averages that scatter only
over the points of a voxel; at fine grids a voxel holds few points and the zero level set
follows the noise (rough normals). Projecting each point onto the least-squares plane of
its k nearest neighbours first averages over k + 1 points instead: Gaussian scatter of
standard deviation s drops to about s * sqrt(3 / (k + 1)), while a clean curved surface's
points move inwards by the sagitta of their neighbourhood (about r^2 / (2 R) for a
neighbourhood of radius r on a radius R). The plane fit's residual (`local_spread`) tells
the two apart: it is the scatter itself on a noisy scan and a small fraction of it on a
clean one.
"""

from __future__ import annotations

import torch
from torch import Tensor


def local_planes(points: Tensor, index: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Each point's neighbourhood plane: (centroid [N, 3], unit normal [N, 3], spread [N]).

    points: [N, 3]; index: [N, k], each point's k nearest others. The neighbourhood is the
    point and its neighbours; the spread is the RMS distance of the neighbourhood from its
    plane (the root of the least eigenvalue of its covariance)."""
    group = torch.cat([points[:, None], points[index]], dim=1)  # [N, k + 1, 3]
    centroid = group.mean(dim=1)
    centred = group - centroid[:, None]
    covariance = centred.transpose(1, 2) @ centred / group.shape[1]  # [N, 3, 3]
    # on the CPU: cuSOLVER's batched eigh fails on 1e5 3x3 matrices (train/sdf/normals.py)
    values, vectors = torch.linalg.eigh(covariance.double().cpu())
    normal = vectors[:, :, 0].to(points)
    spread = values[:, 0].clamp(min=0).sqrt().to(points)
    return centroid, normal, spread


def project_to_planes(points: Tensor, index: Tensor) -> tuple[Tensor, Tensor]:
    """points [N, 3] moved onto their neighbourhood planes (`local_planes` with `index`
    [N, k]), and the spread [N] measured before the move."""
    centroid, normal, spread = local_planes(points, index)
    offset = ((points - centroid) * normal).sum(dim=1, keepdim=True)
    return points - offset * normal, spread
