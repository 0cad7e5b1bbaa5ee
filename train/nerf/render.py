"""`VoxelNeRF`'s fused renderer: the native ray marcher (`grid.march_rays_static`) and
compositor (`grid.composite_rays`), with buffers sized so that a training step on CUDA never
waits for the GPU.

Two counts of a batch are only known on the device: the samples that reach the density grid
(set by the occupancy grid) and those worth colouring (weight above the threshold). Reading
them every step would stall the step on the GPU, so `SampleCapacity` measures them in an
"exact" render now and then and sizes the buffers of the renders in between from that.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

import grid


class SampleCapacity:
    """Buffer sizes of the fused render, planned from measured counts.

    An exact render (`sizes` returned None) reads both counts back and records them per ray;
    the next `every` renders of the same state use `margin` times that, rounded up to
    `granule` slots, and read nothing back. The state is the occupancy grid's flags (a
    refresh or an upsample changes them), the weight threshold and the rays' dtype: any
    change makes the next render exact. A new plan that is at most the current one and at
    least `keep` times it keeps the current sizes, so that a training step captured as a
    CUDA graph (whose buffers have fixed sizes) is replayed rather than captured again after
    every measurement. Samples that do not fit (the far ends of the last rays of a batch, or
    the last samples to colour) are dropped and counted on the device in `dropped`, which a
    caller reads when it logs.

    On the CPU, reading a count costs nothing, so `mode="auto"` renders exactly there.
    """

    margin = 1.05
    every = 64
    granule = 1024
    keep = 0.8

    def __init__(self) -> None:
        self.key: tuple | None = None
        self.per_ray: tuple[float, float] = (0.0, 0.0)  # samples, coloured samples
        self.planned: tuple[int, int, int] | None = None  # rays, sample slots, colour slots
        self.renders = 0
        self.dropped: Tensor | None = None  # [] int64 on the device, added to in place

    def sizes(self, key: tuple, n_rays: int) -> tuple[int, int] | None:
        """(sample slots, colour slots) for a render of `n_rays` rays, or None: exact.
        Counts the render (`every`)."""
        plan = self.peek(key, n_rays)
        if plan is not None:
            self.count_render()
        return plan

    def count_render(self) -> None:
        """One planned render more (a CUDA graph's replay renders without calling `sizes`)."""
        self.renders += 1

    def peek(self, key: tuple, n_rays: int) -> tuple[int, int] | None:
        """What `sizes` would return (the plan it keeps), without counting a render."""
        if key != self.key or self.renders >= self.every:
            return None
        want = tuple(self._slots(per * n_rays) for per in self.per_ray)
        if self.planned is not None and self.planned[0] == n_rays:
            old = self.planned[1:]
            if all(self.keep * o <= w <= o for w, o in zip(want, old, strict=True)):
                return old
        self.planned = (n_rays, *want)
        return want

    def measured(
        self, key: tuple, samples: int, coloured: int, n_rays: int, device: torch.device
    ) -> None:
        self.key, self.renders = key, 0
        self.per_ray = (samples / max(n_rays, 1), coloured / max(n_rays, 1))
        if self.dropped is None:  # made here, never inside a captured step (which would
            self.dropped = torch.zeros((), dtype=torch.int64, device=device)  # re-zero it)

    def count_dropped(self, lost: Tensor) -> None:
        self.dropped.add_(lost)

    def _slots(self, count: float) -> int:
        g = self.granule
        return max(g, math.ceil(count * self.margin / g) * g)


def compact(mask: Tensor, size: int) -> tuple[Tensor, Tensor]:
    """The positions of the True entries of `mask` [N], in order, in a [size] int64 tensor,
    read nothing back: slots past the count hold N; True entries past `size` are dropped.
    Returns (positions [size], the count of True entries [] int64)."""
    n = mask.shape[0]
    position = torch.cumsum(mask, 0) - 1  # [N] the slot of each True entry
    slot = torch.where(mask & (position < size), position, size)  # the rest: a spare slot
    out = torch.full((size + 1,), n, dtype=torch.int64, device=mask.device)
    out.scatter_(0, slot, torch.arange(n, device=mask.device))
    count = position[-1] + 1 if n else position.new_zeros(())
    return out[:size], count


def capacity_key(model, dtype: torch.dtype) -> tuple:
    """The state a `SampleCapacity` plan holds for: the occupancy flags (the tensor and its
    version: an upsample replaces it, a refresh updates it), the weight threshold, the rays'
    dtype."""
    flags = model.occupancy_grid.flags
    return (flags.data_ptr(), flags._version, model.weight_threshold, dtype)


def render_fused(
    model,
    origins: Tensor,
    directions: Tensor,
    background: Tensor,
    near: float,
    exact: bool,
    jitter: Tensor | None = None,
) -> dict[str, Tensor | int]:
    """`VoxelNeRF.render` with the native ops (see the model's docstring); `exact` reads the
    sample counts back and sizes every buffer exactly (renders of test views); `jitter`
    [R] or None as in `VoxelNeRF.render`."""
    n_rays = origins.shape[0]
    occ, capacity = model.occupancy_grid, model.capacity
    lo, hi = occ.bounds  # [3] each, on the device
    key = capacity_key(model, origins.dtype)
    sizes = None if exact else capacity.sizes(key, n_rays)
    samples = grid.march_rays_static(
        origins,
        directions,
        lo,
        hi,
        model.step_size(),
        max_steps=model.max_steps(),
        near=near,
        jitter=jitter,
        occupancy=occ,
        capacity=None if sizes is None else sizes[0],
    )
    slots = samples.t.shape[0]
    raw = model.density(samples.points)[..., 0]  # [slots]
    tau = F.softplus(raw + model.shift) * model.interval()  # [slots] optical thickness
    weights = grid.ray_weights(tau.detach(), samples.offsets)  # [slots]
    visible = weights > model.weight_threshold
    if sizes is None:
        chosen = visible.nonzero()[:, 0]  # [V] reads the count back
        if not exact:
            capacity.measured(key, slots, chosen.shape[0], n_rays, origins.device)
        count = slots
    else:
        chosen, coloured = compact(visible, sizes[1])  # [colour slots], padding: slots
        capacity.count_dropped(
            (samples.total - slots).clamp_min(0) + (coloured - sizes[1]).clamp_min(0)
        )
        count = samples.offsets[n_rays]
    views = positional_encoding(directions, model.view_frequencies)  # [R, E]
    views = torch.cat([views, views.new_zeros(1, views.shape[1])])  # row R: padding samples
    read = chosen.clamp_max(max(slots - 1, 0))  # padding slots of `chosen` read the last sample
    features = model.color(samples.points[read])  # [V, F]
    rgb_chosen = model.shade(features, views[samples.ray_indices[read]])  # [V, 3]
    colors = rgb_chosen.new_zeros(slots + 1, 3).index_put_((chosen,), rgb_chosen)[:slots]
    rgb, depth, acc = grid.composite_rays(tau, colors, samples.t, samples.offsets, background)
    weights = torch.cat([weights, weights.new_zeros(1)])  # slot `slots`: padding, weight 0
    return render_outputs(
        rgb, depth, acc, count, features, rgb_chosen, weights[chosen], samples.ray_indices[read]
    )


def render_outputs(
    rgb: Tensor,
    depth: Tensor,
    acc: Tensor,
    samples: Tensor | int,
    sample_features: Tensor,
    sample_rgb: Tensor,
    sample_weight: Tensor,
    sample_ray: Tensor,
) -> dict[str, Tensor | int]:
    """What every render returns: rgb [R, 3], depth [R], acc [R], the samples marched, and
    for the losses (train/nerf/losses.py) the coloured samples' colour-grid features [V, F],
    rgb [V, 3], weights [V] and rays [V]."""
    return {
        "rgb": rgb,
        "depth": depth,
        "acc": acc,
        "samples": samples,
        "sample_features": sample_features,
        "sample_rgb": sample_rgb,
        "sample_weight": sample_weight,
        "sample_ray": sample_ray,
    }


def positional_encoding(x: Tensor, frequencies: int) -> Tensor:
    """x: [..., C] -> [..., C * (1 + 2 * frequencies)]: x, sin(2^k x), cos(2^k x)."""
    scales = 2.0 ** torch.arange(frequencies, device=x.device, dtype=x.dtype)
    xb = (x[..., None] * scales).flatten(-2)  # [..., C * frequencies]
    return torch.cat([x, xb.sin(), xb.cos()], dim=-1)
