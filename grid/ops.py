"""The public operators: typed wrappers over `torch.ops.grid`, with fake and autograd rules."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from . import _backend

_backend.load()

PADDING_MODES = ("zeros", "border")
INTERPOLATIONS = ("linear", "smoothstep")
_FLOAT = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _entry_point(op: torch._ops.OpOverload):
    """The C++ callable behind `op`. `OpOverload.__call__` only forwards to it, and the
    packet `torch.ops.grid.sample` also resolves the overload on every call: together
    about 0.5 us of a 2.5 us call on tiny inputs. torch.compile traces the OpOverload."""
    return getattr(op, "_op", op)


_SAMPLE = torch.ops.grid.sample.default
_SAMPLE_ENTRY = _entry_point(_SAMPLE)
_TRILINEAR = torch.ops.grid.trilinear.default
_TRILINEAR_ENTRY = _entry_point(_TRILINEAR)
_MASKED_ADAM = torch.ops.grid.masked_adam_.default
_MASKED_ADAM_TENSOR = torch.ops.grid.masked_adam_.tensor


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
    if torch.compiler.is_compiling():
        return _TRILINEAR(corners, local)
    return _TRILINEAR_ENTRY(corners, local)


def sample(
    features: Tensor,
    points: Tensor,
    *,
    align_corners: bool = True,
    padding: str = "zeros",
    interpolation: str = "linear",
    bounds: Sequence[float] | Sequence[Sequence[float]] | Tensor | None = None,
) -> Tensor:
    """Trilinearly sample a channels-last feature grid at normalised (or world) points.

    With interpolation="linear", exactly `F.grid_sample(features.permute(3, 2, 1, 0)[None],
    points.reshape(1, 1, 1, -1, 3), mode="bilinear", padding_mode=padding,
    align_corners=align_corners)` reshaped to `[..., F]`, computed without building any
    per-corner tensor. Gradients of gradients (double backward) are supported.

    Args:
        features: [X, Y, Z, F]; fastest with the F values of a voxel contiguous.
        points: [..., 3] as (x, y, z) in [-1, 1]; x indexes X. Any batch shape. With
            `bounds`, world coordinates instead.
        align_corners: as in `F.grid_sample`.
        padding: "zeros" (points outside read zeros; NaN counts as outside) or
            "border" (coordinates clamp to the grid; NaN clamps to the low border).
        interpolation: "linear" (trilinear: C0, the gradient jumps at cell faces) or
            "smoothstep" (the same eight corners, each axis weighted by
            s(t) = t^2 (3 - 2t) instead of t: C1, gradients continuous across cells).
        bounds: None, or a world box `((xmin, ymin, zmin), (xmax, ymax, zmax))` (or those
            6 numbers flat, or a [2, 3] tensor, read once on the host) mapped onto [-1, 1]
            inside the kernels: the result equals `sample(features, (points - min) *
            (2 / (max - min)) - 1)` with the map computed as one fused multiply-add
            `points * scale + shift` in the points' precision (as `VoxelGrid.normalize`),
            and the gradient with respect to `points` is in world units. The box itself
            is a constant (no gradient).

    Returns:
        [..., F] in the dtype of `features`. Twice differentiable with respect to
        `features` and `points`.
    """
    if bounds is not None:
        bounds = box_list(bounds)
    if torch.compiler.is_compiling():
        return _SAMPLE(features, points, align_corners, padding, interpolation, bounds)
    return _SAMPLE_ENTRY(features, points, align_corners, padding, interpolation, bounds)


def box_list(bounds: Sequence[float] | Sequence[Sequence[float]] | Tensor) -> list[float]:
    """`sample`'s `bounds` as the op takes them: [xmin, ymin, zmin, xmax, ymax, zmax]
    (a tensor is read once on the host: a synchronisation for a CUDA tensor). The op
    checks the count and the values."""
    if isinstance(bounds, Tensor):
        return bounds.detach().reshape(-1).tolist()
    try:
        if all(isinstance(v, int | float) for v in bounds):
            return [float(v) for v in bounds]
        return [float(v) for corner in bounds for v in corner]
    except (TypeError, ValueError):
        raise TypeError(
            f"bounds: expected ((xmin, ymin, zmin), (xmax, ymax, zmax)), 6 numbers or a [2, 3] "
            f"tensor, got {bounds!r}"
        ) from None


def total_variation(features: Tensor) -> Tensor:
    """Smoothness penalty of a grid: the mean over the three axes of the mean squared
    difference between neighbouring voxels along that axis (and over the F channels).

    One native pass over the grid (and one for the gradient); equals
    `mean over a in (x, y, z) of (diff(features, dim=a) ** 2).mean()` computed in float32
    (float64 for float64 features).

    Args:
        features: [X, Y, Z, F] with X, Y, Z >= 2.

    Returns:
        [] float32 (float64 for float64 features). Differentiable with respect to
        `features` (the gradient comes back in the dtype of `features`).
    """
    return torch.ops.grid.total_variation(features)


def total_variation_add_grad_(
    grad: Tensor, features: Tensor, weight: float, *, compute_value: bool = False
) -> Tensor | None:
    """`grad += weight * d total_variation(features) / d features`, in place, with no graph.

    The regulariser's gradient in one pass (read `features`, read and write `grad`) instead
    of a loss term and its backward. `features` is read as a constant.

    Args:
        grad: [X, Y, Z, F], contiguous, dtype and device of `features`; updated in place.
        features: [X, Y, Z, F] with X, Y, Z >= 2.
        weight: the regulariser's weight.
        compute_value: also return `total_variation(features)` (unweighted), computed in
            the same pass.

    Returns:
        The value as a [] tensor if `compute_value`, else None.
    """
    value = torch.ops.grid.total_variation_add_grad_(
        grad, features.detach(), float(weight), compute_value
    )
    return value if compute_value else None


def masked_adam_(
    param: Tensor,
    exp_avg: Tensor,
    exp_avg_sq: Tensor,
    grad: Tensor,
    *,
    lr: float | Tensor,
    beta1: float,
    beta2: float,
    eps: float,
    weight_decay: float = 0.0,
    decoupled_weight_decay: bool = False,
    step: int | Tensor,
) -> None:
    """One Adam step on the elements whose gradient is non-zero, in place, in one pass.

    Each element with `grad != 0` gets exactly the update torch.optim.Adam (non-amsgrad)
    computes from its own `exp_avg` and `exp_avg_sq`, with the bias corrections of the
    global step number `step`; every element whose gradient is zero (+0 or -0) keeps its
    param, exp_avg and exp_avg_sq. With every gradient non-zero this is Adam's step. The
    arithmetic is in float32 (float64 for float64 tensors), rounded once to the tensors'
    dtype, as torch's fused Adam. See `grid.MaskedAdam` for the optimizer.

    Args:
        param, exp_avg, exp_avg_sq: [...] updated in place; a dense tensor (any strides
            without gaps or overlaps) and its two moments laid out like it.
        grad: [...] like param (dtype, device, shape, strides).
        lr: learning rate (>= 0): a number, or a one-value float32 / float64 tensor on
            param's device (see below).
        beta1, beta2: in [0, 1). eps: > 0.
        weight_decay: >= 0; L2 (added to the gradient, torch.optim.Adam's default), or with
            `decoupled_weight_decay` the parameter shrunk by `1 - lr * weight_decay` first
            (AdamW); either only where the gradient is non-zero.
        step: the step being taken, counted from 1 (Adam's `state["step"]` after its
            increment): a number, or a one-value float32 / float64 tensor on param's device.

    With `lr` or `step` a tensor (the op `grid::masked_adam_.tensor`; a number beside it is
    made a tensor) the kernel reads them where it runs: on a GPU nothing goes back to the
    host, so the call can be captured in a CUDA graph and replayed as the tensors change
    (`grid.MaskedAdam(capturable=True)`). Their values are then not checked on a GPU (that
    would synchronise): lr < 0 or step < 1 gives a wrong or non-finite update.
    """
    if isinstance(lr, Tensor) or isinstance(step, Tensor):
        lr, step = (
            x
            if isinstance(x, Tensor)
            else torch.full((), x, dtype=torch.float64, device=param.device)
            for x in (lr, step)
        )
        _MASKED_ADAM_TENSOR(
            param, exp_avg, exp_avg_sq, grad, lr, float(beta1), float(beta2), float(eps),
            float(weight_decay), bool(decoupled_weight_decay), step,
        )  # fmt: skip
        return
    _MASKED_ADAM(
        param, exp_avg, exp_avg_sq, grad, float(lr), float(beta1), float(beta2), float(eps),
        float(weight_decay), bool(decoupled_weight_decay), int(step),
    )  # fmt: skip


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
