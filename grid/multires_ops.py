"""The multiresolution grid operator: the typed wrapper over `torch.ops.grid.multires`, with its
fake (shape) rules. Autograd, double backward included, is registered in C++
(csrc/autograd.cpp)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from .ops import _entry_point
from .shape_rules import _check_pair, _masked_like

_MULTIRES = torch.ops.grid.multires.default
_MULTIRES_ENTRY = _entry_point(_MULTIRES)


def multires(table: Tensor, points: Tensor, resolutions: Sequence[int]) -> Tensor:
    """Encode points with a multiresolution feature grid: every level in one fused kernel.

    Level l is a grid of R = `resolutions[l]` cells per axis ((R + 1)^3 vertices) whose
    vertex features are rows of `table[l]`: stored densely (vertex (x, y, z) is row
    x + y (R + 1) + z (R + 1)^2) where (R + 1)^3 <= T, else hashed into the T rows with
    instant-ngp's spatial hash (x * 1 ^ y * 2654435761 ^ z * 805459861, uint32) mod T. A
    point p sits at (p + 1) / 2 * R (p = -1 and 1 are the first and last vertices) and is
    blended trilinearly from its cell's eight vertices. The specification is
    `grid.reference.multires`.

    Args:
        table: [L, T, F] features, 1 <= L <= 32, T < 2^31; float16 / bfloat16 storage is
            accumulated in float32.
        points: [..., 3] as (x, y, z) in [-1, 1]; coordinates outside are clamped to it
            (no gradient there, as torch.clamp). Non-finite coordinates raise on the CPU;
            on a GPU they read as clamped (NaN as -1) instead of synchronising to check.
        resolutions: L cells-per-axis counts in [1, 2^24], e.g. floor(base * b^l).

    Returns:
        [..., L * F] in the dtype of `table`, level l in columns l F .. l F + F - 1. Twice
        differentiable with respect to `table` and `points`.

    Examples:
        >>> import torch
        >>> import grid
        >>> table = torch.empty(16, 2**14, 2).uniform_(-1e-4, 1e-4)
        >>> res = [int(16 * 1.38**l) for l in range(16)]
        >>> grid.multires(table, torch.rand(1024, 3) * 2 - 1, res).shape
        torch.Size([1024, 32])
    """
    resolutions = [int(r) for r in resolutions]
    if torch.compiler.is_compiling():
        return _MULTIRES(table, points, resolutions)
    return _MULTIRES_ENTRY(table, points, resolutions)


@torch.library.register_fake("grid::multires")
def _multires_fake(table: Tensor, points: Tensor, resolutions: list[int]) -> Tensor:
    _check_pair("table", table, "points", points)
    torch._check(
        table.dim() == 3,
        lambda: f"table: expected shape [L, T, F], got {list(table.shape)}",
    )
    torch._check(
        points.dim() >= 1 and points.shape[-1] == 3,
        lambda: f"points: expected shape [..., 3], got {list(points.shape)}",
    )
    torch._check(
        len(resolutions) == table.shape[0],
        lambda: (
            f"resolutions: expected {table.shape[0]} values (one per level of table "
            f"[L, T, F]), got {len(resolutions)}"
        ),
    )
    return table.new_empty((*points.shape[:-1], table.shape[0] * table.shape[2]))


@torch.library.register_fake("grid::multires_backward")
def _multires_backward_fake(
    grad_out: Tensor,
    table: Tensor,
    points: Tensor,
    resolutions: list[int],
    output_mask: list[bool],
) -> tuple[Tensor, Tensor]:
    return _masked_like(output_mask, table, points)


@torch.library.register_fake("grid::multires_double_backward")
def _multires_double_backward_fake(
    grad_grad_table: Tensor | None,
    grad_grad_points: Tensor | None,
    grad_out: Tensor,
    table: Tensor,
    points: Tensor,
    resolutions: list[int],
    output_mask: list[bool],
) -> tuple[Tensor, Tensor, Tensor]:
    return _masked_like(output_mask, grad_out, table, points)
