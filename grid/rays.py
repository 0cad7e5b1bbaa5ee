"""Rays against an axis-aligned box: the slab test and packed fixed-step samples.

Samples are *packed*: one flat list of `S` samples sorted by ray (front to back within a
ray), with `ray_indices [S]` naming each sample's ray, instead of a padded `[R, max]`
tensor, so rays that cross little of the box cost little. `grid.volrend` composites such
lists.

    t_near, t_far = grid.ray_aabb(origins, directions, lo, hi)          # [R], [R]
    samples = grid.march_rays(origins, directions, lo, hi, step, occupancy=occ)
    samples.ray_indices, samples.t, samples.points                       # [S], [S], [S, 3]

`march_rays_static` makes the same samples with native kernels into a buffer of a size the
caller fixes, so that nothing waits for the device (see its docstring).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch import Tensor

from . import _checks, ray_ops
from .occupancy import OccupancyGrid


class RaySamples(NamedTuple):
    """Packed samples, sorted by ray and front to back within a ray.

    Attributes:
        ray_indices: [S] int64, the ray of each sample (non-decreasing).
        t: [S] distance of each sample along its ray (in units of the direction's length).
        points: [S, 3] the sample positions, `origins[ray] + directions[ray] * t`.

    Examples:
        >>> import torch
        >>> import grid
        >>> origins, directions = torch.zeros(1, 3), torch.tensor([[0.0, 0.0, 1.0]])  # [R, 3]
        >>> samples = grid.march_rays(origins, directions, (-1, -1, -1), (1, 1, 1), step=0.25)
        >>> ray_indices, t, points = samples  # a named tuple
        >>> ray_indices.tolist(), samples.t.tolist(), samples.points.shape
        ([0, 0, 0, 0], [0.125, 0.375, 0.625, 0.875], torch.Size([4, 3]))
    """

    ray_indices: Tensor
    t: Tensor
    points: Tensor


def ray_aabb(
    origins: Tensor,
    directions: Tensor,
    lo: Tensor | Sequence[float],
    hi: Tensor | Sequence[float],
    near: float = 0.0,
) -> tuple[Tensor, Tensor]:
    """Where each ray enters and leaves the box `[lo, hi]` (the slab test).

    Args:
        origins: [R, 3] ray origins.
        directions: [R, 3] ray directions (any length; `t` is measured in their units),
            same dtype and device as `origins`. A zero component means the ray is parallel
            to that slab.
        lo, hi: [3] the box's min and max corners: tensors on the rays' device or
            sequences of three numbers, either converted to the rays' dtype.
        near: entry distances are clamped to at least this (no samples behind it).

    Returns:
        (t_near [R], t_far [R]) in the rays' dtype: the ray is inside the box for
        t_near < t < t_far. A ray that misses the box (or lies entirely before `near`)
        has t_far <= t_near; a ray with a non-finite origin or direction may give NaN.

    Examples:
        >>> import torch
        >>> import grid
        >>> origins = torch.tensor([[-3.0, 0.0, 0.0], [-3.0, 5.0, 0.0]])  # [R, 3]
        >>> directions = torch.tensor([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
        >>> t_near, t_far = grid.ray_aabb(origins, directions, (-1, -1, -1), (1, 1, 1))  # [R] each
        >>> t_near[0].item(), t_far[0].item()
        (2.0, 4.0)
        >>> (t_far > t_near).tolist()  # the second ray passes above the box
        [True, False]
    """
    _check_rays(origins, directions)
    lo = _corner("lo", lo, origins)
    hi = _corner("hi", hi, origins)
    return _ray_aabb(origins, directions, lo, hi, _checks.real("near", near))


def march_rays(
    origins: Tensor,
    directions: Tensor,
    lo: Tensor | Sequence[float],
    hi: Tensor | Sequence[float],
    step: float,
    near: float = 0.0,
    occupancy: OccupancyGrid | None = None,
    jitter: float | Tensor | None = None,
) -> RaySamples:
    """Fixed-step samples along each ray inside the box, packed and sorted by ray.

    Ray r gets `n_r = ceil((t_far - t_near) / step)` samples (0 for a miss), sample j at
    `t = t_near + (j + jitter_r) * step`, j = 0 .. n_r - 1: by default the centre of its
    step (jitter 0.5; so the last centre can lie up to half a step past t_far). With
    `occupancy`, samples whose nearest occupancy voxel is empty are dropped
    (`occupancy.query(points)`).

    Args:
        origins, directions, lo, hi, near: as in `ray_aabb`.
        step: the distance between consecutive samples (> 0), in the directions' units.
        occupancy: optional `OccupancyGrid` on the rays' device (its own box may differ
            from `[lo, hi]`; points are looked up in it).
        jitter: where in its step each sample sits, in [0, 1): a number, [R] per ray
            (e.g. `torch.rand(R)`: stratified sampling), or None (0.5, the centres), as in
            `march_rays_static`.

    Returns:
        `RaySamples(ray_indices [S] int64, t [S], points [S, 3])` in the rays' dtype.
        Rays with a non-finite origin or direction, or a zero direction, get no samples.
        (t counts in units of the direction's length: a tiny direction makes many.)

    S depends on the data, so the sample list is sized on the host: one read-back
    (repeat_interleave), plus one more for the occupancy mask. A fused kernel can
    produce the same list.

    Examples:
        >>> import torch
        >>> import grid
        >>> origins = torch.tensor([[-3.0, 0.0, 0.0], [0.0, -3.0, 0.0]])  # [R, 3]
        >>> directions = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
        >>> samples = grid.march_rays(origins, directions, (-1, -1, -1), (1, 1, 1), step=0.5)
        >>> samples.ray_indices.tolist()  # packed: [S], sorted by ray
        [0, 0, 0, 0, 1, 1, 1, 1]
        >>> samples.t[:4].tolist()  # the step centres from t_near = 2 to t_far = 4
        [2.25, 2.75, 3.25, 3.75]
        >>> occupancy = grid.OccupancyGrid(8)
        >>> occupancy.flags[:4] = False  # the voxels at x < 0 are empty
        >>> lo, hi = (-1, -1, -1), (1, 1, 1)
        >>> kept = grid.march_rays(origins, directions, lo, hi, 0.5, occupancy=occupancy)
        >>> kept.ray_indices.tolist(), kept.t[:2].tolist()
        ([0, 0, 1, 1, 1, 1], [3.25, 3.75])
    """
    _check_rays(origins, directions)
    lo = _corner("lo", lo, origins)
    hi = _corner("hi", hi, origins)
    near = _checks.real("near", near)
    step = _checks.real("step", step, positive=True)
    if occupancy is not None:
        _check_occupancy(occupancy, origins)
    if jitter is not None:
        jitter = _per_ray("jitter", jitter, origins, fraction=True)

    n_rays, device = origins.shape[0], origins.device
    t_near, t_far = _ray_aabb(origins, directions, lo, hi, near)
    counts = ((t_far - t_near) / step).ceil()
    # No samples where the count would be garbage or huge: NaN / inf spans (non-finite
    # rays) and all-zero directions (the 1e-10 stand-in spans ~1e10 at a single point).
    counts = counts.nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)
    counts = counts.masked_fill((directions == 0).all(-1), 0.0).clamp_min(0).long()  # [R]
    ray_indices = torch.repeat_interleave(torch.arange(n_rays, device=device), counts)  # [S]
    first = torch.cumsum(counts, 0) - counts  # [R] each ray's first sample
    j = torch.arange(ray_indices.shape[0], device=device) - first[ray_indices]  # [S]
    # (j + 0.5) in the rays' dtype: float32 rays give the bits VoxelNeRF.render gave.
    shift = 0.5 if jitter is None else jitter[ray_indices]  # [S]
    t = t_near[ray_indices] + (j.to(t_near.dtype) + shift) * step  # [S]
    points = origins[ray_indices] + directions[ray_indices] * t[:, None]  # [S, 3]
    if occupancy is not None:
        keep = occupancy.query(points)  # empty space never reaches the caller's fields
        ray_indices, t, points = ray_indices[keep], t[keep], points[keep]
    return RaySamples(ray_indices, t, points)


class PackedSamples(NamedTuple):
    """Packed samples in a buffer of fixed size (`capacity` slots), sorted by ray and front
    to back within a ray, as `march_rays_static` makes them.

    Attributes:
        ray_indices: [capacity] int64, each sample's ray; padding slots hold R (no ray).
        t: [capacity] distance along the ray; 0 in padding slots.
        points: [capacity, 3] sample positions; padding slots hold `2 lo - hi`, a point
            outside the box (a zero-padded grid reads nothing there and gets no gradient).
        offsets: [R + 1] int64: ray r's samples are `[offsets[r], offsets[r + 1])`;
            `offsets[R]` is the number of slots in use (the rest is padding). This is the
            segmentation `composite_rays` and `ray_weights` take.
        total: [] int64, the samples the rays asked for. More than `capacity` means the
            rays at the end of the batch lost `total - capacity` samples (their far
            parts); read it when logging, not every step (reading it waits for the device).

    Examples:
        >>> import torch
        >>> import grid
        >>> origins, directions = torch.zeros(2, 3), torch.eye(3)[1:]  # two rays from the centre
        >>> samples = grid.march_rays_static(
        ...     origins, directions, (-1, -1, -1), (1, 1, 1), 0.25, max_steps=8, capacity=6
        ... )
        >>> samples.offsets.tolist(), samples.total.item()  # 8 asked for, 6 slots: ray 1 lost 2
        ([0, 4, 6], 8)
    """

    ray_indices: Tensor
    t: Tensor
    points: Tensor
    offsets: Tensor
    total: Tensor


def march_rays_static(
    origins: Tensor,
    directions: Tensor,
    lo: Tensor | Sequence[float],
    hi: Tensor | Sequence[float],
    step: float | Tensor,
    *,
    max_steps: int,
    near: float = 0.0,
    jitter: float | Tensor | None = None,
    occupancy: OccupancyGrid | None = None,
    capacity: int | None = None,
) -> PackedSamples:
    """Fixed-step samples along each ray inside the box, skipping empty space, made by two
    native passes over the rays (count, then fill) into a buffer of `capacity` slots.

    Ray r gets `n_r = min(ceil((t_far - t_near) / step_r), max_steps)` step positions
    `t = t_near + (j + jitter_r) * step_r`, j = 0 .. n_r - 1, and keeps those whose nearest
    occupancy voxel is set. With `jitter` 0.5 (the default) and one step for all rays these
    are bitwise the samples of `march_rays`. Nothing is drawn at random inside: pass
    `jitter` (e.g. `torch.rand(R)`) for stratified sampling.

    With a `capacity`, the op never reads anything back to the host: the counts are scanned
    on the device, samples past the capacity are dropped (see `PackedSamples.total`) and the
    unused slots are padding. Size it from an earlier batch's `total` with some margin, and
    re-read `total` now and then (as `VoxelNeRF` does). `capacity=None` sizes the buffer
    exactly, which reads the total back (one synchronisation on CUDA).

    Args:
        origins, directions: [R, 3] float32 or float64 rays (directions of any length; t
            counts in their units).
        lo, hi: [3] the box: tensors on the rays' device, or sequences of three numbers
            (copied to the device on every call: pass tensors on CUDA).
        step: the distance between samples (> 0): a number, or [R] per ray in the rays'
            dtype. A ray whose step is not a positive finite number gets no samples.
        max_steps: the most step positions of one ray (a bound for the kernels' loops; with
            unit directions `ceil(box diagonal / step) + 1` loses nothing).
        near: no samples before this distance.
        jitter: where in its step each sample sits, in [0, 1): a number, [R] per ray, or
            None (0.5, the centres).
        occupancy: optional `OccupancyGrid` on the rays' device.
        capacity: the buffer's number of slots, or None (exact, reads one number back).

    Returns:
        `PackedSamples(ray_indices, t, points, offsets, total)`; not differentiable (the
        samples are constants for autograd).

    Examples:
        >>> import torch
        >>> import grid
        >>> origins = torch.tensor([[-3.0, 0.0, 0.0], [0.0, -3.0, 0.0], [0.0, 5.0, 0.0]])
        >>> directions = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 1.0, 0.0]])
        >>> samples = grid.march_rays_static(
        ...     origins, directions, (-1, -1, -1), (1, 1, 1), 0.5, max_steps=8, capacity=12
        ... )  # the third ray misses the box
        >>> samples.offsets.tolist(), samples.total.item()  # ray r: [offsets[r], offsets[r + 1])
        ([0, 4, 8, 8], 8)
        >>> samples.t[:4].tolist(), samples.ray_indices[8:].tolist()  # then padding (ray R = 3)
        ([2.25, 2.75, 3.25, 3.75], [3, 3, 3, 3])
    """
    _check_rays(origins, directions)
    lo = _corner("lo", lo, origins)
    hi = _corner("hi", hi, origins)
    near = _checks.real("near", near)
    max_steps = _checks.count("max_steps", max_steps)
    if capacity is not None:
        capacity = _checks.count("capacity", capacity)
    n_rays = origins.shape[0]
    step = _per_ray("step", step, origins, positive=True)
    if jitter is not None:
        jitter = _per_ray("jitter", jitter, origins, fraction=True)
    flags = flag_bounds = None
    if occupancy is not None:
        _check_occupancy(occupancy, origins)
        flags, flag_bounds = occupancy.flags, occupancy.bounds.to(origins.dtype)
    args = (origins, directions, lo, hi, near, step, jitter, flags, flag_bounds, max_steps)
    counts = ray_ops.MARCH_COUNT(*args)  # [R]
    offsets = torch.cat([counts.new_zeros(1), counts.cumsum(0)])  # [R + 1]
    total = offsets[n_rays]
    if capacity is None:
        capacity = int(total)  # reads the total back
    ray_indices, t, points = ray_ops.MARCH_FILL(*args, offsets, capacity)
    return PackedSamples(ray_indices, t, points, offsets.clamp_max(capacity), total)


def _per_ray(
    name: str, value: float | Tensor, origins: Tensor, positive: bool = False, fraction=False
) -> Tensor:
    """A number or an [R] tensor as an [R] tensor in the rays' dtype (a number: expanded
    without a copy). `fraction`: a number must lie in [0, 1) (a tensor is not read back)."""
    n_rays = origins.shape[0]
    if isinstance(value, Tensor):
        _checks.float_tensor(name, value, "[R]", 1)
        _checks.same_device(name, value, "origins", origins)
        if value.shape[0] != n_rays:
            raise ValueError(f"{name}: expected shape [{n_rays}], got {list(value.shape)}")
        return value.to(origins.dtype)
    value = _checks.real(name, value, positive=positive)
    if fraction and not 0 <= value < 1:
        raise ValueError(f"{name}: expected a number in [0, 1), got {value}")
    return origins.new_full((1,), value).expand(n_rays)


def _check_occupancy(occupancy: object, origins: Tensor) -> None:
    if not isinstance(occupancy, OccupancyGrid):
        raise TypeError(
            f"occupancy: expected an OccupancyGrid or None, got {type(occupancy).__name__}"
        )
    if occupancy.flags.device != origins.device:
        raise ValueError(
            f"occupancy: expected an OccupancyGrid on {origins.device} like origins, "
            f"got one on {occupancy.flags.device}"
        )


def _ray_aabb(
    origins: Tensor, directions: Tensor, lo: Tensor, hi: Tensor, near: float
) -> tuple[Tensor, Tensor]:
    # 1e-10 stands in for a zero component: 1 / 0 = inf would give 0 * inf = NaN for an
    # origin on a slab plane; a huge finite slope keeps the slab test's min / max valid.
    inv = 1.0 / torch.where(directions == 0, torch.full_like(directions, 1e-10), directions)
    t0, t1 = (lo - origins) * inv, (hi - origins) * inv  # [R, 3] each
    t_near = torch.minimum(t0, t1).amax(-1).clamp_min(near)
    t_far = torch.maximum(t0, t1).amin(-1)
    return t_near, t_far


def _check_rays(origins: Tensor, directions: Tensor) -> None:
    _checks.float_tensor("origins", origins, "[R, 3]", 2, 3)
    _checks.float_tensor("directions", directions, "[R, 3]", 2, 3)
    _checks.same_device("directions", directions, "origins", origins)
    _checks.same_length("directions", directions, "origins", origins)
    if directions.dtype != origins.dtype:
        raise TypeError(
            f"directions: expected dtype {origins.dtype} like origins, got {directions.dtype}"
        )


def _corner(name: str, value: Tensor | Sequence[float], origins: Tensor) -> Tensor:
    """A box corner as a [3] tensor on the rays' device."""
    if not isinstance(value, Tensor):
        try:
            value = torch.tensor([float(v) for v in value], dtype=origins.dtype)
        except (TypeError, ValueError):
            raise TypeError(
                f"{name}: expected a [3] tensor or three numbers, got {value!r}"
            ) from None
        value = value.to(origins.device)
    _checks.float_tensor(name, value, "[3]", 1, 3)
    _checks.same_device(name, value, "origins", origins)
    return value.to(origins.dtype)  # results in the rays' dtype, whatever the box's
