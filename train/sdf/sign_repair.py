"""Pockets of the wrong sign: voxels a refined grid holds inside (or outside) the surface
that the points say are on the other side, found and turned at each upsample.

A coarse grid cannot hold a gap narrower than its voxel: the points init (or the fit)
fills the space between two legs, an ear and the head, and the finer grid inherits the
filled pocket. No point lies in it, so no term of the loss opens it again: it stays,
bounded by sheets of zero level set the points do not support (a local minimum of the
eikonal term), and the mesh gets webs between the parts (the cow at 256^3 on 2 CPU cores:
Chamfer 1.07-1.97x the exact-SDF limit over three seeds, every wrong voxel of the worst
one in such a pocket).

At each upsample, the voxels within WALL_REACH of such a sheet (a change of sign with no
point within WALL_CLEARANCE voxels: grid ops), farther than FAR_VOXELS (of the new grid)
from every point and within BAND_VOXELS of the zero level set are judged: first by the
side of their nearest points (the mean of (x - p) . n over SIDE_NEIGHBOURS of a subset of
the points, cheap but wrong near concave creases), then, where that disagrees with the
grid's sign, by the generalized winding number of all the points (train/sdf/winding.py),
which is sure away from the points but costs a product with every point. A voxel changes
sign only where both say so; it takes its distance to the nearest point, as in the points
init.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .neighbours import dilate, nearest_points
from .winding import nearest_side, winding_numbers

#: only voxels farther than this many voxels from every point are judged: nearer ones
#: are the fit's to place
FAR_VOXELS = 1.5
#: and only those with |f| below this many voxels (deeper ones keep their sign)
BAND_VOXELS = 8.0
#: only voxels within this many voxels (per axis) of an unsupported wall are judged
WALL_REACH = 4
#: a wall is unsupported where no point lies within this many voxels (per axis)
WALL_CLEARANCE = 2
#: the side test's neighbours among the subset
SIDE_NEIGHBOURS = 8
#: winding numbers below this are outside, above 1 - this inside; between, no change
SURE = 0.25


@torch.no_grad()
def repair_signs(
    values: Tensor,
    bounds: Tensor,
    points: Tensor,
    normals: Tensor,
    areas: Tensor,
    subset: Tensor,
) -> int:
    """Turn the sign of the voxels of values [X, Y, Z] (a grid over bounds [2, 3], voxels
    on the box's corners; changed in place) that lie in pockets of the wrong sign (module
    docstring); returns how many. points, normals: [N, 3] the unit-normal cloud; areas:
    [N] its points' areas (`winding.point_areas`); subset: [S] indices of the points the
    side test uses."""
    lo, hi = bounds[0], bounds[1]
    spacing = (hi - lo) / (torch.tensor(values.shape, device=values.device) - 1)  # [3]
    h = spacing.max().item()
    walls = unsupported_walls(values, points, lo, spacing)
    judged = dilate(walls, WALL_REACH) & (values.abs() < BAND_VOXELS * h)
    cells = judged.nonzero()  # [C, 3]
    x = lo + cells.to(lo.dtype) * spacing  # [C, 3]
    k = min(SIDE_NEIGHBOURS, len(subset))
    distance, side = nearest_side(x, points[subset], normals[subset], k)  # [C, k], [C]
    value = values[cells[:, 0], cells[:, 1], cells[:, 2]]
    # the subset's nearest distance is at least the cloud's: none with d > FAR is missed
    suspect = ((distance[:, 0] > FAR_VOXELS * h) & ((side < 0) != (value < 0))).nonzero()[:, 0]
    if suspect.numel() == 0:
        return 0
    x, inside = x[suspect], side[suspect] < 0
    distance = nearest_points(x, points, 1)[0][:, 0]  # [Q]
    w = winding_numbers(x, points, normals, areas)  # [Q]
    turn = (distance > FAR_VOXELS * h) & torch.where(inside, w > 1 - SURE, w < SURE)
    at = cells[suspect[turn]]
    distance = distance[turn].to(values.dtype)
    values[at[:, 0], at[:, 1], at[:, 2]] = torch.where(inside[turn], -distance, distance)
    return int(turn.sum())


def unsupported_walls(values: Tensor, points: Tensor, lo: Tensor, spacing: Tensor) -> Tensor:
    """[X, Y, Z] bool: the voxels of values [X, Y, Z] beside a change of sign (the zero
    level set crosses an edge to a 6-neighbour) with no point of points [N, 3] within
    WALL_CLEARANCE voxels (per axis) of them: a pocket's walls. A pocket of the wrong sign
    is walled by such sheets where it does not touch the points, so only voxels near them
    need judging: grid ops, not a nearest-point search per voxel of the band."""
    shape = torch.tensor(values.shape, device=values.device)
    index = ((points - lo) / spacing).round().long().clamp(min=0).minimum(shape - 1)
    occupied = torch.zeros(values.shape, dtype=torch.bool, device=values.device)
    occupied[index[:, 0], index[:, 1], index[:, 2]] = True
    inside = values < 0
    walls = torch.zeros_like(inside)
    for axis in range(3):
        n = values.shape[axis]
        step = inside.narrow(axis, 0, n - 1) ^ inside.narrow(axis, 1, n - 1)
        walls.narrow(axis, 0, n - 1).logical_or_(step)
        walls.narrow(axis, 1, n - 1).logical_or_(step)
    return walls & ~dilate(occupied, WALL_CLEARANCE)
