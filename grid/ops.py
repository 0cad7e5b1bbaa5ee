"""The public operators: typed wrappers over `torch.ops.grid`, with fake and autograd rules."""

from __future__ import annotations

import torch
from torch import Tensor

from . import _backend

_backend.load()

PADDING_MODES = ("zeros", "border")
_FLOAT = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def trilinear(corners: Tensor, local: Tensor) -> Tensor:
    """Blend the eight corner features of each point's cell.

    Args:
        corners: [N, 8, F] features at the cell corners; corner k sits at offset
            (dx, dy, dz) = ((k >> 2) & 1, (k >> 1) & 1, k & 1).
        local: [N, 3] position in the cell, -1 = the d = 0 face, +1 = the d = 1 face
            (not clamped: values outside [-1, 1] extrapolate).

    Returns:
        [N, F] in the dtype of `corners`. Differentiable with respect to both inputs.
    """
    return torch.ops.grid.trilinear(corners, local)


def sample(
    features: Tensor, points: Tensor, *, align_corners: bool = True, padding: str = "zeros"
) -> Tensor:
    """Trilinearly sample a channels-last feature grid at normalised points.

    Exactly `F.grid_sample(features.permute(3, 2, 1, 0)[None], points.reshape(1, 1, 1, -1, 3),
    mode="bilinear", padding_mode=padding, align_corners=align_corners)` reshaped to
    `[..., F]`, computed without building any per-corner tensor.

    Args:
        features: [X, Y, Z, F]; fastest with the F values of a voxel contiguous.
        points: [..., 3] as (x, y, z) in [-1, 1]; x indexes X. Any batch shape.
        align_corners: as in `F.grid_sample`.
        padding: "zeros" (points outside read zeros; NaN counts as outside) or
            "border" (coordinates clamp to the grid; NaN clamps to the low border).

    Returns:
        [..., F] in the dtype of `features`. Differentiable with respect to
        `features` and `points`.
    """
    return torch.ops.grid.sample(features, points, align_corners, padding)


# ---- shape rules (also what torch.compile traces) ----------------------------------


def _check_float(name: str, t: Tensor) -> None:
    torch._check(
        t.dtype in _FLOAT,
        lambda: (
            f"{name}: expected a floating-point tensor "
            f"(float16, bfloat16, float32 or float64), got {t.dtype}"
        ),
    )


def _check_pair(name_a: str, a: Tensor, name_b: str, b: Tensor) -> None:
    _check_float(name_a, a)
    _check_float(name_b, b)
    torch._check(
        a.device == b.device,
        lambda: f"{name_b}: expected a tensor on {a.device} like {name_a}, got {b.device}",
    )
    torch._check(
        b.dtype == a.dtype or (b.dtype == torch.float32 and a.dtype in _FLOAT[:2]),
        lambda: (
            f"{name_b}: expected dtype {a.dtype} like {name_a} (or float32 with half "
            f"precision {name_a}), got {b.dtype}"
        ),
    )


@torch.library.register_fake("grid::trilinear")
def _trilinear_fake(corners: Tensor, local: Tensor) -> Tensor:
    _check_pair("corners", corners, "local", local)
    torch._check(
        corners.dim() == 3 and corners.shape[1] == 8,
        lambda: f"corners: expected shape [N, 8, F], got {list(corners.shape)}",
    )
    torch._check(
        local.dim() == 2 and local.shape[1] == 3 and local.shape[0] == corners.shape[0],
        lambda: (
            f"local: expected shape [N, 3] with N = {corners.shape[0]}, got {list(local.shape)}"
        ),
    )
    return corners.new_empty((corners.shape[0], corners.shape[2]))


@torch.library.register_fake("grid::trilinear_backward")
def _trilinear_backward_fake(
    grad_out: Tensor, corners: Tensor, local: Tensor, output_mask: list[bool]
) -> tuple[Tensor, Tensor]:
    grad_corners = corners.new_empty(corners.shape if output_mask[0] else (0,))
    grad_local = local.new_empty(local.shape if output_mask[1] else (0,))
    return grad_corners, grad_local


@torch.library.register_fake("grid::sample")
def _sample_fake(features: Tensor, points: Tensor, align_corners: bool, padding: str) -> Tensor:
    _check_pair("features", features, "points", points)
    torch._check(
        features.dim() == 4,
        lambda: f"features: expected shape [X, Y, Z, F], got {list(features.shape)}",
    )
    torch._check(
        points.dim() >= 1 and points.shape[-1] == 3,
        lambda: f"points: expected shape [..., 3], got {list(points.shape)}",
    )
    torch._check(
        padding in PADDING_MODES,
        lambda: f"padding: expected 'zeros' or 'border', got {padding!r}",
    )
    return features.new_empty((*points.shape[:-1], features.shape[3]))


@torch.library.register_fake("grid::sample_backward")
def _sample_backward_fake(
    grad_out: Tensor,
    features: Tensor,
    points: Tensor,
    align_corners: bool,
    padding: str,
    output_mask: list[bool],
) -> tuple[Tensor, Tensor]:
    grad_features = features.new_empty(features.shape if output_mask[0] else (0,))
    grad_points = points.new_empty(points.shape if output_mask[1] else (0,))
    return grad_features, grad_points


# ---- autograd --------------------------------------------------------------------


def _trilinear_setup(ctx, inputs, output) -> None:
    corners, local = inputs
    ctx.save_for_backward(corners, local)


def _trilinear_backward(ctx, grad_out: Tensor):
    corners, local = ctx.saved_tensors
    mask = [ctx.needs_input_grad[0], ctx.needs_input_grad[1]]
    grad_corners, grad_local = torch.ops.grid.trilinear_backward(grad_out, corners, local, mask)
    return (grad_corners if mask[0] else None, grad_local if mask[1] else None)


def _sample_setup(ctx, inputs, output) -> None:
    features, points, align_corners, padding = inputs
    ctx.save_for_backward(features, points)
    ctx.align_corners = align_corners
    ctx.padding = padding


def _sample_backward(ctx, grad_out: Tensor):
    features, points = ctx.saved_tensors
    mask = [ctx.needs_input_grad[0], ctx.needs_input_grad[1]]
    grad_features, grad_points = torch.ops.grid.sample_backward(
        grad_out, features, points, ctx.align_corners, ctx.padding, mask
    )
    return (grad_features if mask[0] else None, grad_points if mask[1] else None, None, None)


torch.library.register_autograd(
    "grid::trilinear", _trilinear_backward, setup_context=_trilinear_setup
)
torch.library.register_autograd("grid::sample", _sample_backward, setup_context=_sample_setup)


def _no_double_backward(name: str):
    def backward(ctx, *grads):
        raise NotImplementedError(
            f"grid.{name}: gradients of gradients (double backward, e.g. an eikonal loss "
            "through create_graph=True) are not implemented yet"
        )

    return backward


# Without these, autograd would silently treat the backward ops as constants.
torch.library.register_autograd("grid::trilinear_backward", _no_double_backward("trilinear"))
torch.library.register_autograd("grid::sample_backward", _no_double_backward("sample"))
