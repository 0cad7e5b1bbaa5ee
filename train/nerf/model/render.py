"""The renderers of a bounded `VoxelNeRF`: rays marched through the box, samples weighted and
composited front to back. Like nerfacc's `rendering(..., rgb_sigma_fn=...)`, a renderer
reads no model: the model hands it two functions of the samples and plain values.

* `sigma_fn(points [S, 3]) -> [S]`: the density at the samples (the optical thickness of a
  sample is `sigma * interval`, `interval` its step in voxels of the final grid);
* `rgb_fn(points [V, 3], rays [V], index [V]) -> (rgb [V, 3], features [V, F])`: the colour
  of the samples worth colouring, seen along their rays (indices into the batch;
  `render_fused` also passes padding samples with ray R, whose colour it drops), and the
  colour-grid features they read (returned for the losses). `index` says which of
  `sigma_fn`'s points each one is, so that a model can reuse what its density pass computed
  there (a multires density's geometry features).

`render_torch` is plain PyTorch over packed samples (`grid.march_rays`,
`grid.composite_weights`, `grid.composite`; the sample counts are read back every step).
`render_fused` is the native marcher and compositor (`grid.march_rays_static`,
`grid.ray_weights`, `grid.composite_rays`) with buffers of planned size (`SampleCapacity`),
so a CUDA step never waits for the GPU. Both give the same renders up to float rounding
(the fused weights are a float32 product, the torch ones a float64 sum of logarithms).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

import grid

from .capacity import SampleCapacity, compact

#: points [S, 3] -> density [S].
SigmaFn = Callable[[Tensor], Tensor]

#: points [V, 3], their rays [V], their rows of sigma_fn's points [V] -> (rgb [V, 3],
#: colour-grid features [V, F]).
RgbFn = Callable[[Tensor, Tensor, Tensor], tuple[Tensor, Tensor]]


class TooManySamples(Exception):
    """The rays of a render with `max_samples` marched more samples than that: raised after
    the march, before the fields run on them (whose activations are most of a render's
    memory); `image.render_image` retries with fewer rays."""

    def __init__(self, samples: int, limit: int) -> None:
        super().__init__(f"{samples} samples marched, at most {limit} asked")
        self.samples = samples


def check_samples(samples: int, max_samples: int | None) -> None:
    """TooManySamples when `samples` (a render's, counted exactly) exceed `max_samples`."""
    if max_samples is not None and samples > max_samples:
        raise TooManySamples(samples, max_samples)


def render_torch(
    origins: Tensor,
    directions: Tensor,
    background: Tensor,
    *,
    sigma_fn: SigmaFn,
    rgb_fn: RgbFn,
    occupancy: grid.OccupancyGrid,
    step: float,
    interval: float,
    weight_threshold: float,
    near: float = 0.0,
    jitter: Tensor | None = None,
    max_samples: int | None = None,
) -> dict[str, Tensor | int]:
    """Render rays (origins, directions [R, 3], background [3]) with plain PyTorch ops.

    Samples every `step` (world units) from `near` inside the occupancy grid's box, where
    its flags are set (`jitter` [R] in [0, 1) or None: where in its step each ray's samples
    sit); alpha = 1 - exp(-sigma * `interval`); samples whose compositing weight is at most
    `weight_threshold` are not coloured; more than `max_samples` samples raise
    `TooManySamples`. Returns `render_outputs`."""
    n_rays = origins.shape[0]
    lo, hi = occupancy.bounds
    # Packed samples, sorted by ray; empty space never reaches the grids.
    ray_id, t, points = grid.march_rays(origins, directions, lo, hi, step, near, occupancy, jitter)
    check_samples(ray_id.shape[0], max_samples)
    alpha = -torch.expm1(-sigma_fn(points) * interval)  # [S]
    weights = grid.composite_weights(alpha, ray_id, n_rays, check_indices=False)  # [S]
    visible = weights > weight_threshold
    chosen = visible.nonzero()[:, 0]  # [S''] the coloured samples: one read-back
    chosen_ray = ray_id[chosen]
    chosen_points = points[chosen]  # [S'', 3]
    colors, features = rgb_fn(chosen_points, chosen_ray, chosen)  # [S'', 3], [S'', F]
    rgb, depth, acc = grid.composite(
        weights, ray_id, n_rays, colors, t, background, visible=visible, check_indices=False
    )
    sampled = (features, colors, weights[chosen].detach(), chosen_ray, chosen_points)
    return render_outputs(rgb, depth, acc, ray_id.shape[0], *sampled)


def render_fused(
    origins: Tensor,
    directions: Tensor,
    background: Tensor,
    *,
    sigma_fn: SigmaFn,
    rgb_fn: RgbFn,
    occupancy: grid.OccupancyGrid,
    step: float,
    max_steps: int,
    interval: float,
    weight_threshold: float,
    capacity: SampleCapacity,
    capacity_key: tuple,
    near: float = 0.0,
    exact: bool = True,
    jitter: Tensor | None = None,
    max_samples: int | None = None,
) -> dict[str, Tensor | int]:
    """`render_torch` with the native ops: at most `max_steps` steps a ray; `exact` reads the
    sample counts back and sizes every buffer exactly (renders of test views; more than
    `max_samples` raise `TooManySamples`), else the buffers are those `capacity` plans for
    the state `capacity_key` (the samples that do not fit are dropped and counted in
    `capacity.dropped`). Returns `render_outputs`."""
    n_rays = origins.shape[0]
    lo, hi = occupancy.bounds  # [3] each, on the device
    sizes = None if exact else capacity.sizes(capacity_key, n_rays)
    samples = grid.march_rays_static(
        origins,
        directions,
        lo,
        hi,
        step,
        max_steps=max_steps,
        near=near,
        jitter=jitter,
        occupancy=occupancy,
        capacity=None if sizes is None else sizes[0],
    )
    slots = samples.t.shape[0]
    if sizes is None:
        check_samples(slots, max_samples)
    tau = sigma_fn(samples.points) * interval  # [slots] optical thickness
    weights = grid.ray_weights(tau.detach(), samples.offsets)  # [slots]
    visible = weights > weight_threshold
    if sizes is None:
        chosen = visible.nonzero()[:, 0]  # [V] reads the count back
        if not exact:
            capacity.measured(capacity_key, slots, chosen.shape[0], n_rays, origins.device)
        count = slots
    else:
        chosen, coloured = compact(visible, sizes[1])  # [colour slots], padding: slots
        capacity.observe(samples.total, coloured, (slots, sizes[1]))
        count = samples.offsets[n_rays]
    read = chosen.clamp_max(max(slots - 1, 0))  # padding slots of `chosen` read the last sample
    ray = samples.ray_indices[read]  # [V] in [0, R]: R for the padding samples
    points = samples.points[read]  # [V, 3]
    rgb_chosen, features = rgb_fn(points, ray, read)  # [V, 3], [V, F]
    colors = rgb_chosen.new_zeros(slots + 1, 3).index_put_((chosen,), rgb_chosen)[:slots]
    rgb, depth, acc = grid.composite_rays(tau, colors, samples.t, samples.offsets, background)
    weights = torch.cat([weights, weights.new_zeros(1)])  # slot `slots`: padding, weight 0
    sampled = (features, rgb_chosen, weights[chosen], ray, points)
    return render_outputs(rgb, depth, acc, count, *sampled)


def render_outputs(
    rgb: Tensor,
    depth: Tensor,
    acc: Tensor,
    samples: Tensor | int,
    sample_features: Tensor,
    sample_rgb: Tensor,
    sample_weight: Tensor,
    sample_ray: Tensor,
    sample_points: Tensor,
) -> dict[str, Tensor | int]:
    """What every render returns: rgb [R, 3], depth [R], acc [R], the samples marched, and
    for the losses (train/nerf/model/losses.py) the coloured samples' colour-grid features [V, F],
    rgb [V, 3], weights [V], rays [V] and points [V, 3]."""
    return {
        "rgb": rgb,
        "depth": depth,
        "acc": acc,
        "samples": samples,
        "sample_features": sample_features,
        "sample_rgb": sample_rgb,
        "sample_weight": sample_weight,
        "sample_ray": sample_ray,
        "sample_points": sample_points,
    }
