"""Shape rules (fake kernels, what torch.compile traces) of the rendering ops: the fixed-step
ray marcher (`grid::march_rays_count`, `grid::march_rays_fill`) and the compositing of packed
samples (`grid::composite_rays`, its backward, `grid::ray_weights`). Their public wrappers are
`grid.march_rays_static` (grid/rays.py), `grid.composite_rays` and `grid.ray_weights`
(grid/volrend.py); autograd is registered in C++ (csrc/autograd.cpp)."""

from __future__ import annotations

import torch
from torch import Tensor

from . import _backend

_backend.load()

MARCH_COUNT = torch.ops.grid.march_rays_count.default
MARCH_FILL = torch.ops.grid.march_rays_fill.default
COMPOSITE = torch.ops.grid.composite_rays.default
COMPOSITE_BACKWARD = torch.ops.grid.composite_rays_backward.default
WEIGHTS = torch.ops.grid.ray_weights.default

_RAY_DTYPES = (torch.float32, torch.float64)


def _check_rays(origins: Tensor, directions: Tensor) -> None:
    torch._check(
        origins.dtype in _RAY_DTYPES,
        lambda: f"origins: expected a float32 or float64 tensor, got {origins.dtype}",
    )
    torch._check(
        origins.dim() == 2 and origins.shape[1] == 3,
        lambda: f"origins: expected shape [R, 3], got {list(origins.shape)}",
    )
    torch._check(
        directions.shape == origins.shape,
        lambda: f"directions: expected shape {list(origins.shape)}, got {list(directions.shape)}",
    )


@torch.library.register_fake("grid::march_rays_count")
def _march_rays_count_fake(
    origins, directions, lo, hi, near, step, jitter, occupancy, occupancy_bounds, max_steps
) -> Tensor:
    _check_rays(origins, directions)
    return origins.new_empty((origins.shape[0],), dtype=torch.int64)


@torch.library.register_fake("grid::march_rays_fill")
def _march_rays_fill_fake(
    origins,
    directions,
    lo,
    hi,
    near,
    step,
    jitter,
    occupancy,
    occupancy_bounds,
    max_steps,
    offsets,
    capacity,
) -> tuple[Tensor, Tensor, Tensor]:
    _check_rays(origins, directions)
    torch._check(capacity >= 0, lambda: f"capacity: expected an int >= 0, got {capacity}")
    return (
        offsets.new_empty((capacity,)),
        origins.new_empty((capacity,)),
        origins.new_empty((capacity, 3)),
    )


def _check_composite(tau: Tensor, colors: Tensor, offsets: Tensor) -> None:
    torch._check(
        tau.dtype in _RAY_DTYPES,
        lambda: f"tau: expected a float32 or float64 tensor, got {tau.dtype}",
    )
    torch._check(
        colors.dim() == 2 and colors.shape[0] == tau.shape[0],
        lambda: f"colors: expected shape [S, C] with S = {tau.shape[0]}, got {list(colors.shape)}",
    )
    torch._check(
        offsets.dim() == 1 and offsets.dtype == torch.int64,
        lambda: (
            f"offsets: expected an int64 tensor [R + 1], got {offsets.dtype} {list(offsets.shape)}"
        ),
    )


@torch.library.register_fake("grid::composite_rays")
def _composite_rays_fake(
    tau: Tensor, colors: Tensor, t: Tensor, offsets: Tensor, background: Tensor | None
) -> tuple[Tensor, Tensor, Tensor]:
    _check_composite(tau, colors, offsets)
    n_rays = offsets.shape[0] - 1
    return (
        tau.new_empty((n_rays, colors.shape[1])),
        tau.new_empty((n_rays,)),
        tau.new_empty((n_rays,)),
    )


@torch.library.register_fake("grid::composite_rays_backward")
def _composite_rays_backward_fake(
    grad_rgb, grad_depth, grad_acc, tau, colors, t, offsets, background, output_mask
) -> tuple[Tensor, Tensor, Tensor]:
    return tuple(
        x.new_empty(x.shape if wanted else (0,))
        for wanted, x in zip(output_mask, (tau, colors, t), strict=True)
    )


@torch.library.register_fake("grid::ray_weights")
def _ray_weights_fake(tau: Tensor, offsets: Tensor) -> Tensor:
    torch._check(
        tau.dtype in _RAY_DTYPES,
        lambda: f"tau: expected a float32 or float64 tensor, got {tau.dtype}",
    )
    return torch.empty_like(tau)
