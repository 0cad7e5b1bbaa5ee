"""Boxes and resolutions: the world positions of a grid's voxels (`lattice`), whether one
box lies inside another (`check_inside`), and the argument checks the grid modules share
(`_resolution`, `_bounds`: private)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor


def _resolution(value: int | Sequence[int], name: str = "resolution") -> tuple[int, int, int]:
    """An int or a sequence of three ints, each >= 2 -> (X, Y, Z)."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = (value, value, value)
    if (
        not isinstance(value, Sequence)
        or len(value) != 3
        or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    ):
        raise ValueError(
            f"{name}: expected an int or a sequence of 3 ints (X, Y, Z), got {value!r}"
        )
    if min(value) < 2:
        raise ValueError(
            f"{name}: expected every size >= 2 (voxels sit on the box corners, so an axis "
            f"needs two), got {tuple(value)}"
        )
    return (value[0], value[1], value[2])


def _bounds(value) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """((xmin, ymin, zmin), (xmax, ymax, zmax)) of finite numbers with min < max."""
    try:
        lo, hi = (tuple(float(v) for v in corner) for corner in value)
        ok = len(lo) == 3 and len(hi) == 3
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(
            f"bounds: expected ((xmin, ymin, zmin), (xmax, ymax, zmax)), got {value!r}"
        )
    if not all(math.isfinite(v) for v in lo + hi):
        raise ValueError(f"bounds: expected finite numbers, got {value!r}")
    bad = [axis for axis, a, b in zip("xyz", lo, hi, strict=True) if not a < b]
    if bad:
        raise ValueError(
            f"bounds: expected min < max on every axis, got min={lo}, max={hi} "
            f"(axis {', '.join(bad)})"
        )
    return lo, hi


def lattice(bounds: Tensor, resolution: tuple[int, int, int]) -> Tensor:
    """The world positions of the voxels of a grid of `resolution` (X, Y, Z) over the box
    `bounds` [2, 3] (rows: min corner, max corner), voxels on the box's corners
    (align_corners=True, as `VoxelGrid` places them): [X, Y, Z, 3], in the bounds' dtype
    and device. `VoxelGrid.crop` reads the old grid at these points of the new box.

    Examples:
        >>> import torch, grid
        >>> box = torch.tensor([[0.0, 0.0, 0.0], [1.0, 2.0, 4.0]])
        >>> points = grid.lattice(box, (2, 3, 5))
        >>> points.shape
        torch.Size([2, 3, 5, 3])
        >>> points[1, 2, 4].tolist()
        [1.0, 2.0, 4.0]
    """
    axes = [
        torch.linspace(float(a), float(b), n, dtype=bounds.dtype, device=bounds.device)
        for a, b, n in zip(bounds[0].tolist(), bounds[1].tolist(), resolution, strict=True)
    ]
    return torch.stack(torch.meshgrid(*axes, indexing="ij"), dim=-1)


def check_inside(box: Tensor, current: Tensor) -> None:
    """Raise ValueError (naming `bounds`) unless the box `box` [2, 3] lies inside the box
    `current` [2, 3] (rows: min corner, max corner), up to 1e-6 of `current`'s size on
    each axis: the check of `VoxelGrid.crop` and `OccupancyGrid.crop`.

    Examples:
        >>> import torch, grid
        >>> unit = torch.tensor([[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
        >>> grid.check_inside(unit / 2, unit)  # inside: returns None
        >>> try:
        ...     grid.check_inside(unit * 2, unit)
        ... except ValueError as error:
        ...     print(str(error).split(" [")[0])
        bounds: expected a box inside the current one
    """
    slack = 1e-6 * (current[1] - current[0])
    if bool((box[0] < current[0] - slack).any() or (box[1] > current[1] + slack).any()):
        raise ValueError(
            f"bounds: expected a box inside the current one {current.tolist()}, got {box.tolist()}"
        )
