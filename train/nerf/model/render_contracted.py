"""The renderer of an unbounded `VoxelNeRF`: a contraction (`grid.contract`) maps the whole
world into the cube [-2, 2]^3 the grids cover, with the inner region (`grid.bounds`) at full
resolution. Like the renderers of `render`, it takes the model's `sigma_fn` and `rgb_fn` and
plain values, and reads no model.

Samples come from `grid.sample_contracted` (plain PyTorch ops: the native marcher steps
evenly in world space, these steps grow with the distance), already contracted and filtered
by the occupancy grid (which lives in the contracted space too). Each sample's optical
thickness is its density times the length of its segment in the contracted space, in voxels
of the final grid: the density is a field over the contracted grid, and a step in the inner
region has the same `interval` as in a bounded model. There is no background colour: rays
end at `far` (contracted radius about 2), and whatever lies beyond everything (the sky) is
learned as content there. With the fused renderer the weights and the compositing are the
native `grid.ray_weights` and `grid.composite_rays`; with the torch one, `grid.composite_weights`
and `grid.composite`.
"""

from __future__ import annotations

import torch
from torch import Tensor

import grid

from .render import RgbFn, SigmaFn, check_samples, render_outputs


def render_contracted(
    origins: Tensor,
    directions: Tensor,
    *,
    sigma_fn: SigmaFn,
    rgb_fn: RgbFn,
    inner_bounds: list[list[float]],
    kind: str,
    step: float,
    far: float,
    outer_samples: int,
    occupancy: grid.OccupancyGrid,
    voxel: float,
    weight_threshold: float,
    fused: bool,
    near: float = 0.0,
    max_samples: int | None = None,
) -> dict[str, Tensor | int]:
    """Render rays (origins, directions [R, 3]) through the contraction `kind` of the inner
    box `inner_bounds`: samples every `step` (world units) inside it, then `outer_samples`
    out to `far` (`grid.sample_contracted`, where `occupancy`, over the contracted space, is
    set). A sample's optical thickness is sigma times its segment's length in the contracted
    space over `voxel` (the final grid's voxel). Samples whose weight is at most
    `weight_threshold` are not coloured; `fused`: the native `grid.ray_weights` and
    `grid.composite_rays`, else `grid.composite_weights` and `grid.composite`. More than
    `max_samples` samples raise `render.TooManySamples`. Returns `render.render_outputs`."""
    n_rays = origins.shape[0]
    lo, hi = inner_bounds
    samples = grid.sample_contracted(
        origins,
        directions,
        lo,
        hi,
        step=step,
        far=far,
        outer_samples=outer_samples,
        near=near,
        kind=kind,
        occupancy=occupancy,
    )
    ray_id, offsets = samples.ray_indices, samples.offsets
    check_samples(ray_id.shape[0], max_samples)
    tau = sigma_fn(samples.points) * (samples.intervals / voxel)  # [S]
    if fused:
        weights = grid.ray_weights(tau.detach(), offsets)  # [S]
    else:
        alpha = -torch.expm1(-tau)
        weights = grid.composite_weights(alpha, ray_id, n_rays, check_indices=False)
    visible = weights > weight_threshold
    chosen = visible.nonzero()[:, 0]  # [V] the coloured samples
    chosen_ray = ray_id[chosen]
    chosen_points = samples.points[chosen]  # [V, 3]
    colors, features = rgb_fn(chosen_points, chosen_ray, chosen)  # [V, 3], [V, F]
    if fused:
        full = colors.new_zeros(tau.shape[0], 3).index_put((chosen,), colors)  # [S, 3]
        rgb, depth, acc = grid.composite_rays(tau, full, samples.t, offsets)
    else:
        rgb, depth, acc = grid.composite(
            weights, ray_id, n_rays, colors, samples.t, visible=visible, check_indices=False
        )
    sampled = (features, colors, weights[chosen].detach(), chosen_ray, chosen_points)
    return render_outputs(rgb, depth, acc, ray_id.shape[0], *sampled)
