"""Pure-PyTorch reference implementations: the executable specification.

Every native kernel is tested against these. They favour being obviously right
over being fast: `sample` builds the `[N, 8, F]` corner tensor that the native
kernel never materialises.
"""

from __future__ import annotations

import torch
from torch import Tensor

# Corner k sits at offset (dx, dy, dz) = ((k >> 2) & 1, (k >> 1) & 1, k & 1).
CORNER_OFFSETS = [((k >> 2) & 1, (k >> 1) & 1, k & 1) for k in range(8)]


def _corner_weights(frac: Tensor) -> Tensor:
    """frac: [N, 3] position in the cell in [0, 1] -> [N, 8] trilinear weights."""
    w = []
    for dx, dy, dz in CORNER_OFFSETS:
        wx = frac[:, 0] if dx else 1 - frac[:, 0]
        wy = frac[:, 1] if dy else 1 - frac[:, 1]
        wz = frac[:, 2] if dz else 1 - frac[:, 2]
        w.append(wx * wy * wz)
    return torch.stack(w, dim=1)


def trilinear(corners: Tensor, local: Tensor) -> Tensor:
    """corners: [N, 8, F], local: [N, 3] in [-1, 1] -> [N, F].

    `local = -1` is the `d = 0` face of the cell and `+1` the `d = 1` face.
    """
    weights = _corner_weights((local + 1) / 2)  # [N, 8]
    return (weights.unsqueeze(-1).to(corners.dtype) * corners).sum(dim=1)


def _unnormalize(coord: Tensor, size: int, align_corners: bool) -> Tensor:
    """Normalised [-1, 1] coordinate -> continuous voxel index (F.grid_sample's rule)."""
    if align_corners:
        return (coord + 1) / 2 * (size - 1)
    return ((coord + 1) * size - 1) / 2


def smoothstep(t: Tensor) -> Tensor:
    """s(t) = t^2 (3 - 2t): 0 and 1 at the ends with zero slope there, so a blend by s is C1."""
    return t * t * (3 - 2 * t)


def sample(
    features: Tensor,
    points: Tensor,
    align_corners: bool = True,
    padding: str = "zeros",
    interpolation: str = "linear",
) -> Tensor:
    """features: [X, Y, Z, F], points: [..., 3] -> [..., F].

    With interpolation="linear", the semantics of `F.grid_sample(mode="bilinear")` on
    `features.permute(3, 2, 1, 0)[None]`, written as an explicit gather. With
    "smoothstep", the same eight corners weighted by `smoothstep(t)` instead of the
    position `t` in the cell along each axis. Differentiable twice through autograd.

    Non-finite and far coordinates: with `padding="zeros"` a point outside the
    sampled region (or with a NaN coordinate) gives zeros and no gradient; with
    `padding="border"` coordinates are clamped to the grid, NaN clamping to the
    low border (index 0), and clamped axes get no gradient.
    """
    if padding not in ("zeros", "border"):
        raise ValueError(f"padding: expected 'zeros' or 'border', got {padding!r}")
    if interpolation not in ("linear", "smoothstep"):
        raise ValueError(f"interpolation: expected 'linear' or 'smoothstep', got {interpolation!r}")
    sizes = features.shape[:3]
    batch = points.shape[:-1]
    pts = points.reshape(-1, 3)
    acc = torch.float64 if torch.float64 in (features.dtype, points.dtype) else torch.float32
    pts = pts.to(acc)

    index = torch.stack(
        [_unnormalize(pts[:, a], sizes[a], align_corners) for a in range(3)], dim=1
    )  # [N, 3]
    if padding == "border":
        upper = torch.tensor([s - 1 for s in sizes], dtype=acc, device=pts.device)
        # nan_to_num sends NaN to the low border; clamp(min, max) keeps the gradient
        # only strictly inside, like F.grid_sample's clip_coordinates.
        index = torch.where(index.isnan(), torch.zeros_like(index), index)
        inside = (index > 0) & (index < upper)
        index = torch.where(inside, index, index.detach().clamp(min=0).minimum(upper))
        keep = torch.ones(pts.shape[0], dtype=torch.bool, device=pts.device)
    else:
        upper = torch.tensor(sizes, dtype=acc, device=pts.device)
        keep = ((index >= -1) & (index <= upper)).all(dim=1)  # NaN compares False
        index = torch.where(keep[:, None], index, torch.zeros_like(index))

    base = index.detach().floor()
    frac = index - base
    if interpolation == "smoothstep":
        frac = smoothstep(frac)
    base = base.long()
    weights = _corner_weights(frac) * keep[:, None]  # [N, 8]

    values = []
    for k, (dx, dy, dz) in enumerate(CORNER_OFFSETS):
        ix, iy, iz = base[:, 0] + dx, base[:, 1] + dy, base[:, 2] + dz
        valid = (
            (ix >= 0) & (ix < sizes[0]) & (iy >= 0) & (iy < sizes[1]) & (iz >= 0) & (iz < sizes[2])
        )
        gathered = features[
            ix.clamp(0, sizes[0] - 1), iy.clamp(0, sizes[1] - 1), iz.clamp(0, sizes[2] - 1)
        ]  # [N, F]
        values.append(torch.where(valid[:, None], gathered, torch.zeros_like(gathered)))
        weights[:, k] = weights[:, k] * valid
    corners = torch.stack(values, dim=1)  # [N, 8, F]
    out = (weights.unsqueeze(-1) * corners.to(acc)).sum(dim=1)
    return out.to(features.dtype).reshape(*batch, features.shape[3])


def total_variation(features: Tensor) -> Tensor:
    """features: [X, Y, Z, F] -> []: the mean over the three axes of the mean squared
    difference between neighbouring voxels along that axis, in float32 (float64 for
    float64 features)."""
    f = features.to(torch.float64 if features.dtype == torch.float64 else torch.float32)
    dx = (f[1:] - f[:-1]).square().mean()
    dy = (f[:, 1:] - f[:, :-1]).square().mean()
    dz = (f[:, :, 1:] - f[:, :, :-1]).square().mean()
    return (dx + dy + dz) / 3
