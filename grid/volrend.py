"""Front-to-back compositing of packed samples (see `grid.rays` for how they are made).

A packed list holds the S samples of R rays sorted by ray, front to back within a ray;
`ray_indices [S]` names each sample's ray. A sample's weight is its alpha times the
transmittance in front of it; colour, depth and opacity are weighted sums per ray.

    weights = grid.composite_weights(alpha, ray_indices, n_rays)            # [S]
    rgb, depth, acc = grid.composite(weights, ray_indices, n_rays, colors, t, background)

`composite_rays` and `ray_weights` do the same in native kernels (one thread per ray, an
analytic backward), on rays segmented by offsets (`grid.march_rays_static`'s) and
parametrised by each sample's optical thickness `tau` (alpha = 1 - exp(-tau)):

    rgb, depth, acc = grid.composite_rays(tau, colors, t, offsets, background)
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import _checks, ray_ops

# log(1 - alpha) is taken with alpha clamped to this, so an opaque sample (alpha = 1)
# leaves a transmittance of 1e-6 rather than log(0) = -inf (which would make NaN).
_MAX_ALPHA = 1 - 1e-6


def composite_weights(
    alpha: Tensor, ray_indices: Tensor, n_rays: int, *, check_indices: bool = True
) -> Tensor:
    """Front-to-back compositing weights of packed samples.

    `w_i = alpha_i * prod_{j < i, same ray} (1 - alpha_j)`, with each alpha_j clamped to
    at most 1 - 1e-6 inside the product (an opaque sample lets 1e-6 through).

    The exclusive product is a segmented cumulative sum of log(1 - alpha), taken over the
    whole packed list in float64 (the running total grows with S; float32 would lose the
    per-ray differences) and rebased at the first sample of each ray.

    Args:
        alpha: [S] floating, each in [0, 1].
        ray_indices: [S] int64 (or int32) on alpha's device, non-decreasing (sorted by
            ray, front to back within a ray).
        n_rays: R, the number of rays (> every index).

    Returns:
        weights [S] in alpha's dtype; differentiable with respect to alpha. Per ray they
        sum to the opacity 1 - prod(1 - alpha).

    The index checks read three numbers back from the device (a host synchronisation
    on CUDA; skipped under torch.compile); the computation itself needs none.
    `check_indices=False` skips them, for indices the caller built sorted and in range
    (`march_rays`' output): unsorted indices then give wrong weights, silently.

    Examples:
        >>> import torch
        >>> import grid
        >>> alpha = torch.tensor([0.5, 0.5, 0.5, 1.0])  # [S]
        >>> ray_indices = torch.tensor([0, 0, 0, 1])  # three samples on ray 0, one on ray 1
        >>> grid.composite_weights(alpha, ray_indices, n_rays=2).tolist()
        [0.5, 0.25, 0.125, 1.0]
    """
    _check_samples("alpha", alpha, ray_indices, n_rays)
    if check_indices:
        _checks.ray_index_values(ray_indices, n_rays, "ray_indices", sorted_=True)
    return _composite_weights(alpha, ray_indices)


def accumulate_along_rays(
    weights: Tensor, values: Tensor | None, ray_indices: Tensor, n_rays: int
) -> Tensor:
    """Weighted sums per ray: `out[r] = sum over samples i of ray r of weights_i * values_i`.

    Args:
        weights: [S] floating.
        values: [S, C] (e.g. colours), [S] (e.g. distances t: expected depth), or None
            (the weights alone: opacity).
        ray_indices: [S] int64 (or int32) on the weights' device, each in [0, n_rays)
            (any order).
        n_rays: R, the number of rays.

    Returns:
        [R, C] for values [S, C]; [R] for values [S] or None. Rays without samples get 0.
        The dtype is that of `weights * values`. Differentiable with respect to weights
        and values.

    The index check reads two numbers back from the device (a host synchronisation on
    CUDA; skipped under torch.compile).

    Examples:
        >>> import torch
        >>> import grid
        >>> weights, t = torch.tensor([0.5, 0.25, 1.0]), torch.tensor([1.0, 2.0, 3.0])  # [S]
        >>> ray_indices = torch.tensor([0, 0, 1])
        >>> grid.accumulate_along_rays(weights, t, ray_indices, 2).tolist()  # depth, [R]
        [1.0, 3.0]
        >>> grid.accumulate_along_rays(weights, None, ray_indices, 2).tolist()  # opacity, [R]
        [0.75, 1.0]
        >>> grid.accumulate_along_rays(weights, torch.ones(3, 3), ray_indices, 2).shape  # [R, C]
        torch.Size([2, 3])
    """
    _check_samples("weights", weights, ray_indices, n_rays)
    if values is not None:
        _check_values("values", values, weights)
    _checks.ray_index_values(ray_indices, n_rays, "ray_indices", sorted_=False)
    return _accumulate(weights, values, ray_indices, n_rays)


def composite(
    weights: Tensor,
    ray_indices: Tensor,
    n_rays: int,
    colors: Tensor,
    t: Tensor,
    background: Tensor | None = None,
    *,
    visible: Tensor | None = None,
    check_indices: bool = True,
) -> tuple[Tensor, Tensor, Tensor]:
    """Colour, expected depth and opacity of each ray from its samples' weights.

    `acc = sum w`, `depth = sum w * t`, `rgb = sum w * colour + (1 - acc) * background`.

    Args:
        weights: [S] compositing weights (`composite_weights`).
        ray_indices: [S] int64 (or int32), each in [0, n_rays) (any order).
        n_rays: R.
        colors: [S, C] the samples' colours, or [V, C] with `visible`.
        t: [S] the samples' distances along their rays.
        background: [C] or [R, C], the colour behind the scene; None adds nothing
            (black).
        visible: optional [S] bool, the samples `colors` holds colours for (V of them, in
            order): the others add no colour but still count in acc and depth, so a
            caller can skip the colour network where the weight is negligible.

    Returns:
        (rgb [R, C], depth [R], acc [R]). Depth is the expected distance, not divided by
        acc (0 for a ray without samples). Differentiable with respect to weights, colors,
        t and background.

    The index check reads two numbers back from the device (a host synchronisation on
    CUDA); `check_indices=False` skips it, for indices known to be in range.

    Examples:
        >>> import torch
        >>> import grid
        >>> weights, t = torch.tensor([0.5, 0.25, 1.0]), torch.tensor([1.0, 2.0, 3.0])  # [S]
        >>> ray_indices = torch.tensor([0, 0, 1])
        >>> colors = torch.eye(3)  # [S, C]: red, green, blue
        >>> rgb, depth, acc = grid.composite(
        ...     weights, ray_indices, 2, colors, t, background=torch.ones(3)
        ... )
        >>> rgb.tolist()  # ray 0 lets a quarter of the white background through
        [[0.75, 0.5, 0.25], [0.0, 0.0, 1.0]]
        >>> depth.tolist(), acc.tolist()
        ([1.0, 3.0], [0.75, 1.0])
    """
    _check_samples("weights", weights, ray_indices, n_rays)
    _check_values("t", t, weights, dim=1)
    if visible is not None:
        if not isinstance(visible, Tensor) or visible.dtype != torch.bool:
            got = visible.dtype if isinstance(visible, Tensor) else type(visible).__name__
            raise TypeError(f"visible: expected a bool tensor [S] or None, got {got}")
        if visible.shape != weights.shape:
            raise ValueError(
                f"visible: expected shape {list(weights.shape)} like weights, "
                f"got {list(visible.shape)}"
            )
        _checks.same_device("visible", visible, "weights", weights)
    _checks.float_tensor("colors", colors, "[S, C]", 2)
    _checks.same_device("colors", colors, "weights", weights)
    if visible is None:
        _checks.same_length("colors", colors, "weights", weights)
    if background is not None:
        _checks.float_tensor("background", background, "[C] or [R, C]", (1, 2))
        _checks.same_device("background", background, "weights", weights)
        expected = [colors.shape[1]] if background.dim() == 1 else [n_rays, colors.shape[1]]
        if list(background.shape) != expected:
            raise ValueError(f"background: expected shape {expected}, got {list(background.shape)}")
    if check_indices:
        _checks.ray_index_values(ray_indices, n_rays, "ray_indices", sorted_=False)

    # The order of the ops on `weights` fixes the order in which autograd sums their
    # gradients: the colour's subset first, then acc, then depth (as VoxelNeRF did).
    weights_c, rays_c = weights, ray_indices
    if visible is not None:
        rays_c, weights_c = ray_indices[visible], weights[visible]
        if colors.shape[0] != rays_c.shape[0]:
            raise ValueError(
                f"colors: expected {_checks.plural(rays_c.shape[0], 'row')} (one per visible "
                f"sample), got shape {list(colors.shape)}"
            )
    acc = _accumulate(weights, None, ray_indices, n_rays)
    rgb = _accumulate(weights_c, colors, rays_c, n_rays)
    if background is not None:
        rgb = rgb + (1.0 - acc)[:, None] * background
    depth = _accumulate(weights, t, ray_indices, n_rays)
    return rgb, depth, acc


def composite_rays(
    tau: Tensor,
    colors: Tensor,
    t: Tensor,
    offsets: Tensor,
    background: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Colour, expected depth and opacity of each ray, composited front to back in one
    native pass per ray, with an analytic backward.

    Ray r owns the samples `[offsets[r], offsets[r + 1])`, front to back. Sample i has
    opacity `alpha_i = 1 - exp(-tau_i)` and weight `w_i = alpha_i T_i`, with
    `T_i = exp(-sum of tau over the ray's earlier samples)`; then `acc = sum w`,
    `depth = sum w t`, `rgb = sum w colour + (1 - acc) background`.

    Args:
        tau: [S] float32 or float64, each sample's optical thickness (density times the
            length of its step, >= 0). A density on a grid with a step `delta` gives
            `tau = sigma * delta`; an opacity gives `tau = -log1p(-alpha)`.
        colors: [S, C] the samples' colours (or any features), like tau.
        t: [S] the samples' distances along their rays, like tau.
        offsets: [R + 1] int64 on tau's device, non-decreasing (not checked: values outside
            [0, S] are clamped, so nothing is read out of bounds). Samples outside every
            ray are ignored (e.g. `march_rays_static`'s padding) and get zero gradients.
        background: [C] or [R, C] like tau, the colour behind the scene; None: black.

    Returns:
        (rgb [R, C], depth [R], acc [R]) in tau's dtype. Depth is not divided by acc.
        Differentiable with respect to tau, colors, t and background (not twice).

    Examples:
        >>> import torch
        >>> import grid
        >>> tau = torch.full((3,), 2.0, dtype=torch.float64).log().requires_grad_()  # alpha 0.5
        >>> colors, t = torch.eye(3, dtype=torch.float64), torch.tensor([1.0, 2.0, 3.0]).double()
        >>> offsets = torch.tensor([0, 2, 3])  # ray 0: samples 0 and 1; ray 1: sample 2
        >>> rgb, depth, acc = grid.composite_rays(tau, colors, t, offsets)  # [R, C], [R], [R]
        >>> rgb.tolist(), depth.tolist(), acc.tolist()
        ([[0.5, 0.25, 0.0], [0.0, 0.0, 0.5]], [1.0, 1.5], [0.75, 0.5])
        >>> acc.sum().backward()
        >>> tau.grad.tolist()  # d acc / d tau: the transmittance left behind the ray
        [0.25, 0.25, 0.5]
    """
    _check_packed("tau", tau, offsets)
    _checks.float_tensor("colors", colors, "[S, C]", 2)
    _checks.float_tensor("t", t, "[S]", 1)
    _check_like_tau("colors", colors, tau)
    _check_like_tau("t", t, tau)
    if t.shape != tau.shape:
        raise ValueError(f"t: expected shape {list(tau.shape)} like tau, got {list(t.shape)}")
    if colors.shape[0] != tau.shape[0] or colors.shape[1] < 1:
        raise ValueError(
            f"colors: expected shape [{tau.shape[0]}, C] with C >= 1, got {list(colors.shape)}"
        )
    if background is not None:
        _checks.float_tensor("background", background, "[C] or [R, C]", (1, 2))
        _check_like_tau("background", background, tau)
        n_rays, c = offsets.shape[0] - 1, colors.shape[1]
        expected = [c] if background.dim() == 1 else [n_rays, c]
        if list(background.shape) != expected:
            raise ValueError(f"background: expected shape {expected}, got {list(background.shape)}")
    return ray_ops.COMPOSITE(tau, colors, t, offsets, background)


def ray_weights(tau: Tensor, offsets: Tensor) -> Tensor:
    """The compositing weights `w_i = (1 - exp(-tau_i)) T_i` of `composite_rays`, for
    decisions such as which samples are worth colouring.

    Args:
        tau: [S] float32 or float64 optical thickness of each sample.
        offsets: [R + 1] int64, as in `composite_rays`.

    Returns:
        [S] in tau's dtype; 0 for samples outside every ray. Not differentiable: the result
        is a constant for autograd (`composite_rays` carries the gradients).

    Examples:
        >>> import torch
        >>> import grid
        >>> tau = torch.full((3,), 2.0).log()  # [S]: alpha = 1 - exp(-tau) = 0.5
        >>> offsets = torch.tensor([0, 2, 3])  # [R + 1]: ray 0 holds samples 0, 1; ray 1 sample 2
        >>> [round(w, 6) for w in grid.ray_weights(tau, offsets).tolist()]
        [0.5, 0.25, 0.5]
    """
    _check_packed("tau", tau, offsets)
    return ray_ops.WEIGHTS(tau, offsets)


# ---- the computations, without checks ----------------------------------------------


def _composite_weights(alpha: Tensor, ray_indices: Tensor) -> Tensor:
    log_t = torch.log1p(-alpha.clamp(max=_MAX_ALPHA)).double()  # [S] log(1 - alpha)
    inclusive = torch.cumsum(log_t, 0)
    exclusive = inclusive - log_t  # sum over all earlier samples of the packed list
    # Each sample's ray's first sample: the first position of its index in the sorted list.
    idx = ray_indices.contiguous()
    first = torch.searchsorted(idx, idx)  # [S]
    transmittance = torch.exp(exclusive - exclusive[first]).to(alpha.dtype)
    return alpha * transmittance


def _accumulate(weights: Tensor, values: Tensor | None, ray_indices: Tensor, n_rays: int):
    if values is None:
        contributions = weights  # [S]
    elif values.dim() == 1:
        contributions = weights * values  # [S]
    else:
        contributions = weights[:, None] * values  # [S, C]
    out = contributions.new_zeros((n_rays, *contributions.shape[1:]))
    return out.index_add(0, ray_indices, contributions)


# ---- checks -------------------------------------------------------------------------


def _check_samples(name: str, samples: Tensor, ray_indices: Tensor, n_rays: int) -> None:
    """samples [S] floating; ray_indices [S] int on the same device; n_rays an int >= 0."""
    _checks.float_tensor(name, samples, "[S]", 1)
    _checks.index_tensor("ray_indices", ray_indices)
    _checks.same_device("ray_indices", ray_indices, name, samples)
    _checks.same_length("ray_indices", ray_indices, name, samples)
    _checks.count("n_rays", n_rays)


def _check_packed(name: str, tau: Tensor, offsets: Tensor) -> None:
    """tau [S] float32 / float64; offsets [R + 1] int64 on its device."""
    _checks.float_tensor(name, tau, "[S]", 1)
    if tau.dtype not in (torch.float32, torch.float64):
        raise TypeError(f"{name}: expected a float32 or float64 tensor [S], got {tau.dtype}")
    if not isinstance(offsets, Tensor) or offsets.dtype != torch.int64:
        got = offsets.dtype if isinstance(offsets, Tensor) else type(offsets).__name__
        raise TypeError(f"offsets: expected an int64 tensor [R + 1], got {got}")
    if offsets.dim() != 1 or offsets.shape[0] < 1:
        raise ValueError(f"offsets: expected shape [R + 1], got {list(offsets.shape)}")
    _checks.same_device("offsets", offsets, name, tau)


def _check_like_tau(name: str, value: Tensor, tau: Tensor) -> None:
    _checks.same_device(name, value, "tau", tau)
    if value.dtype != tau.dtype:
        raise TypeError(f"{name}: expected dtype {tau.dtype} like tau, got {value.dtype}")


def _check_values(name: str, values: Tensor, weights: Tensor, dim: int | None = None) -> None:
    """values [S] or [S, C] (only [S] with dim=1), floating, on the weights' device."""
    shape = "[S]" if dim == 1 else "[S] or [S, C]"
    _checks.float_tensor(name, values, shape, 1 if dim == 1 else (1, 2))
    _checks.same_device(name, values, "weights", weights)
    _checks.same_length(name, values, "weights", weights)
