"""The public operators: typed wrappers over `torch.ops.grid` (their fake kernels and
shape checks: grid/shape_rules.py)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from . import _backend

_backend.load()

from . import shape_rules  # noqa: E402, F401  (registers the fake kernels)


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

    Examples:
        >>> import torch
        >>> import grid
        >>> corners = torch.arange(8.0).reshape(1, 8, 1).repeat(3, 1, 1)  # [3, 8, 1]: corner k = k
        >>> local = torch.tensor([[-1.0, -1.0, -1.0], [0.0, 0.0, 0.0], [1.0, -1.0, 1.0]])  # [3, 3]
        >>> grid.trilinear(corners, local).tolist()  # corner 0, the centre (the mean), corner 5
        [[0.0], [3.5], [5.0]]
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

    Examples:
        >>> import torch
        >>> import grid
        >>> features = torch.arange(8.0).reshape(2, 2, 2, 1)  # [X, Y, Z, F]: 4x + 2y + z
        >>> points = torch.tensor([[-1.0, -1.0, -1.0], [0.0, 0.0, 0.0], [1.0, -1.0, -1.0]])
        >>> grid.sample(features, points).tolist()  # [3, 3] -> [3, 1]
        [[0.0], [3.5], [4.0]]
        >>> grid.sample(features, torch.full((5, 7, 3), 0.5), bounds=((0, 0, 0), (1, 1, 1))).shape
        torch.Size([5, 7, 1])
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

    Examples:
        >>> import torch
        >>> import grid
        >>> grid.total_variation(torch.ones(4, 4, 4, 2)).item()  # constant: no variation
        0.0
        >>> ramp = torch.arange(4.0).reshape(4, 1, 1, 1).expand(4, 4, 4, 2)  # +1 a step along x
        >>> round(grid.total_variation(ramp).item(), 4)  # (1 + 0 + 0) / 3 axes
        0.3333
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

    Examples:
        >>> import torch
        >>> import grid
        >>> features = torch.linspace(-1, 1, 8**3 * 2).reshape(8, 8, 8, 2).requires_grad_()
        >>> (0.5 * grid.total_variation(features)).backward()  # the loss-term way
        >>> grad = torch.zeros(8, 8, 8, 2)
        >>> value = grid.total_variation_add_grad_(grad, features, 0.5, compute_value=True)
        >>> torch.allclose(grad, features.grad), torch.equal(value, grid.total_variation(features))
        (True, True)
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

    Examples:
        >>> import torch
        >>> import grid
        >>> param, exp_avg, exp_avg_sq = torch.ones(4), torch.zeros(4), torch.zeros(4)
        >>> grad = torch.tensor([0.0, 1.0, 0.0, -2.0])  # two elements touched this step
        >>> grid.masked_adam_(
        ...     param, exp_avg, exp_avg_sq, grad, lr=0.1, beta1=0.9, beta2=0.999, eps=1e-8, step=1
        ... )
        >>> [round(p, 4) for p in param.tolist()]  # Adam's first step: lr against the sign
        [1.0, 0.9, 1.0, 1.1]
        >>> exp_avg.tolist()[::2], exp_avg_sq.tolist()[::2]  # the untouched moments stay zero
        ([0.0, 0.0], [0.0, 0.0])
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
