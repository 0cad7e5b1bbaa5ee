"""Boxes and resolutions: the argument checks shared by the grid modules, and the world
positions of a grid's voxels."""

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
    """bounds [2, 3] -> [X, Y, Z, 3] world positions of the voxels of a grid of
    `resolution` over the box (align_corners=True), in the bounds' dtype and device."""
    axes = [
        torch.linspace(float(a), float(b), n, dtype=bounds.dtype, device=bounds.device)
        for a, b, n in zip(bounds[0].tolist(), bounds[1].tolist(), resolution, strict=True)
    ]
    return torch.stack(torch.meshgrid(*axes, indexing="ij"), dim=-1)


def check_inside(box: Tensor, current: Tensor) -> None:
    """ValueError unless `box` [2, 3] lies inside `current` [2, 3] (1e-6 of its size)."""
    slack = 1e-6 * (current[1] - current[0])
    if bool((box[0] < current[0] - slack).any() or (box[1] > current[1] + slack).any()):
        raise ValueError(
            f"bounds: expected a box inside the current one {current.tolist()}, got {box.tolist()}"
        )
