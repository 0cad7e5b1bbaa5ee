"""`nerf.fit_box`: the box around the object that the grids move onto at the first upsample,
its resolution, and the training rays that cross it."""

from __future__ import annotations

import torch
from torch import Tensor

from .grids import mean_spacing
from .voxel_nerf import VoxelNeRF


@torch.no_grad()
def surface_box(
    model: VoxelNeRF,
    origins: Tensor,
    directions: Tensor,
    colors: Tensor,
    background: Tensor,
    margin: float,
) -> list[list[float]] | None:
    """The box around the points where training rays (origins, directions [K, 3], their
    pixels' colours [K, 3]) of the object end: rays whose pixel is not the background
    colour (by more than 0.02 on a channel), with opacity > 0.5; the 0.01% extremes on each
    side of each axis trimmed (floaters). Rays of background pixels are left out: far from
    the object, where every view sees only the background, the grid may hold fog of the
    background's colour, and they end there. Widened by `margin` voxels and kept inside the
    grid's box; None when fewer than 100 rays end."""
    m = model
    keep = (colors - background).abs().amax(-1) > 0.02
    ends = []
    for o, d in zip(origins[keep].split(8192), directions[keep].split(8192), strict=True):
        out = m.render(o, d, background, exact=True)
        acc, depth = out["acc"], out["depth"]
        hit = acc > 0.5
        ends.append(o[hit] + d[hit] * (depth[hit] / acc[hit])[:, None])
    points = torch.cat(ends).double()  # [K', 3]
    if points.shape[0] < 100:
        return None
    lo, hi = torch.tensor(m.bounds_list, dtype=torch.float64, device=points.device)
    spacing = (hi - lo) / (torch.tensor(m.resolution, device=points.device) - 1)
    first = torch.quantile(points, 1e-4, dim=0) - margin * spacing
    last = torch.quantile(points, 1 - 1e-4, dim=0) + margin * spacing
    first, last = first.maximum(lo), last.minimum(hi)
    return None if bool((last <= first).any()) else [first.tolist(), last.tolist()]


def box_resolution(
    resolution: tuple[int, int, int], box: list[list[float]]
) -> tuple[int, int, int]:
    """The voxels per axis over `box` for a schedule's `resolution`: as many cells, cubic
    (`nerf.fit_box`)."""
    side = mean_spacing(box, resolution)  # the cells' volume over the box, as a cube's side
    x, y, z = (max(2, round((hi - lo) / side) + 1) for lo, hi in zip(*box, strict=True))
    return (x, y, z)
