"""The shape rules of the native operators: their fake (meta) kernels, what torch.compile and
`torch.library.opcheck` trace, and the dtype and device checks they share with the wrappers
of grid/ops.py and grid/multires_ops.py."""

from __future__ import annotations

import torch
from torch import Tensor

_FLOAT = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
PADDING_MODES = ("zeros", "border")
INTERPOLATIONS = ("linear", "smoothstep")


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
def _sample_fake(
    features: Tensor,
    points: Tensor,
    align_corners: bool,
    padding: str,
    interpolation: str = "linear",
    bounds: list[float] | None = None,
) -> Tensor:
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
    torch._check(
        interpolation in INTERPOLATIONS,
        lambda: f"interpolation: expected 'linear' or 'smoothstep', got {interpolation!r}",
    )
    torch._check(
        bounds is None or len(bounds) == 6,
        lambda: f"bounds: expected 6 numbers (xmin, ymin, zmin, xmax, ymax, zmax), got {bounds}",
    )
    return features.new_empty((*points.shape[:-1], features.shape[3]))


@torch.library.register_fake("grid::sample_backward")
def _sample_backward_fake(
    grad_out: Tensor,
    features: Tensor,
    points: Tensor,
    align_corners: bool,
    padding: str,
    interpolation: str,
    output_mask: list[bool],
    bounds: list[float] | None = None,
) -> tuple[Tensor, Tensor]:
    grad_features = features.new_empty(features.shape if output_mask[0] else (0,))
    grad_points = points.new_empty(points.shape if output_mask[1] else (0,))
    return grad_features, grad_points


@torch.library.register_fake("grid::sample_double_backward")
def _sample_double_backward_fake(
    grad_grad_features: Tensor | None,
    grad_grad_points: Tensor | None,
    grad_out: Tensor,
    features: Tensor,
    points: Tensor,
    align_corners: bool,
    padding: str,
    interpolation: str,
    output_mask: list[bool],
    bounds: list[float] | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    return _masked_like(output_mask, grad_out, features, points)


@torch.library.register_fake("grid::trilinear_double_backward")
def _trilinear_double_backward_fake(
    grad_grad_corners: Tensor | None,
    grad_grad_local: Tensor | None,
    grad_out: Tensor,
    corners: Tensor,
    local: Tensor,
    output_mask: list[bool],
) -> tuple[Tensor, Tensor, Tensor]:
    return _masked_like(output_mask, grad_out, corners, local)


def _masked_like(mask: list[bool], *likes: Tensor) -> tuple[Tensor, ...]:
    """A backward op's outputs: shaped like `likes`, or empty [0] where not asked for."""
    return tuple(t.new_empty(t.shape if m else (0,)) for m, t in zip(mask, likes, strict=True))


@torch.library.register_fake("grid::total_variation")
def _total_variation_fake(features: Tensor) -> Tensor:
    _check_total_variation_features(features)
    return features.new_empty((), dtype=_total_variation_dtype(features))


@torch.library.register_fake("grid::total_variation_backward")
def _total_variation_backward_fake(grad_out: Tensor, features: Tensor) -> Tensor:
    return torch.empty_like(features, memory_format=torch.contiguous_format)


@torch.library.register_fake("grid::total_variation_add_grad_")
def _total_variation_add_grad_fake(
    grad: Tensor, features: Tensor, weight: float, compute_value: bool
) -> Tensor:
    _check_total_variation_features(features)
    return features.new_empty(() if compute_value else (0,), dtype=_total_variation_dtype(features))


@torch.library.register_fake("grid::masked_adam_")
def _masked_adam_fake(
    param: Tensor,
    exp_avg: Tensor,
    exp_avg_sq: Tensor,
    grad: Tensor,
    lr: float,
    beta1: float,
    beta2: float,
    eps: float,
    weight_decay: float,
    decoupled_weight_decay: bool,
    step: int,
) -> None:
    _check_masked_adam_tensors(
        param, (("exp_avg", exp_avg), ("exp_avg_sq", exp_avg_sq), ("grad", grad))
    )
    return None


@torch.library.register_fake("grid::masked_adam_.tensor")
def _masked_adam_tensor_fake(
    param: Tensor,
    exp_avg: Tensor,
    exp_avg_sq: Tensor,
    grad: Tensor,
    lr: Tensor,
    beta1: float,
    beta2: float,
    eps: float,
    weight_decay: float,
    decoupled_weight_decay: bool,
    step: Tensor,
) -> None:
    _check_masked_adam_tensors(
        param, (("exp_avg", exp_avg), ("exp_avg_sq", exp_avg_sq), ("grad", grad))
    )
    for name, t in (("lr", lr), ("step", step)):
        torch._check(
            t.numel() == 1
            and t.dtype in (torch.float32, torch.float64)
            and t.device == param.device,
            lambda t=t, name=name: (
                f"{name}: expected one float32 or float64 value on {param.device} like param, "
                f"got shape {list(t.shape)}, {t.dtype} on {t.device}"
            ),
        )
    return None


def _check_masked_adam_tensors(param: Tensor, others: tuple[tuple[str, Tensor], ...]) -> None:
    _check_float("param", param)
    for name, t in others:
        torch._check(
            t.dtype == param.dtype and t.device == param.device,
            lambda t=t, name=name: (
                f"{name}: expected {param.dtype} on {param.device} like param, "
                f"got {t.dtype} on {t.device}"
            ),
        )
        torch._check(
            t.shape == param.shape,
            lambda t=t, name=name: (
                f"{name}: expected shape {list(param.shape)} like param, got {list(t.shape)}"
            ),
        )


def _total_variation_dtype(features: Tensor) -> torch.dtype:
    return torch.float64 if features.dtype == torch.float64 else torch.float32


def _check_total_variation_features(features: Tensor) -> None:
    _check_float("features", features)
    torch._check(
        features.dim() == 4,
        lambda: f"features: expected shape [X, Y, Z, F], got {list(features.shape)}",
    )
    torch._check(
        min(features.shape[:3]) >= 2 and features.shape[3] >= 1,
        lambda: (
            "features: expected X, Y, Z >= 2 and F >= 1 in [X, Y, Z, F], "
            f"got {list(features.shape)}"
        ),
    )


# Autograd of every op, double backward included, is registered in C++ (csrc/autograd.cpp),
# so a call runs no Python beyond the wrappers above.
