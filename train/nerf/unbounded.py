"""`VoxelNeRF`'s renderer for unbounded scenes: a contraction (`grid.contract`) maps the whole
world into the cube [-2, 2]^3 the grids cover, with the inner region (`grid.bounds`) at full
resolution.

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

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor

import grid

from .render import positional_encoding, render_outputs

if TYPE_CHECKING:
    from .model import VoxelNeRF


def render_contracted(
    model: VoxelNeRF, origins: Tensor, directions: Tensor, near: float
) -> dict[str, Tensor | int]:
    """`VoxelNeRF.render` with a contraction (see the module docstring); same outputs."""
    n_rays = origins.shape[0]
    lo, hi = model.inner_bounds
    samples = grid.sample_contracted(
        origins,
        directions,
        lo,
        hi,
        step=model.step_size(),
        far=model.far,
        outer_samples=model.outer_count(),
        near=near,
        kind=model.contraction,
        occupancy=model.occupancy_grid,
    )
    ray_id, offsets = samples.ray_indices, samples.offsets
    raw = model.density(samples.points)[..., 0]  # [S]
    tau = F.softplus(raw + model.shift) * (samples.intervals / model.final_voxel)  # [S]
    views = positional_encoding(directions, model.view_frequencies)  # [R, E]
    if model.renderer == "fused":
        weights = grid.ray_weights(tau.detach(), offsets)  # [S]
    else:
        alpha = -torch.expm1(-tau)
        weights = grid.composite_weights(alpha, ray_id, n_rays, check_indices=False)
    visible = weights > model.weight_threshold
    chosen = visible.nonzero()[:, 0]  # [V] the coloured samples
    chosen_ray = ray_id[chosen]
    features = model.color(samples.points[chosen])  # [V, F]
    colors = model.shade(features, views[chosen_ray])  # [V, 3]
    if model.renderer == "fused":
        full = colors.new_zeros(tau.shape[0], 3).index_put((chosen,), colors)  # [S, 3]
        rgb, depth, acc = grid.composite_rays(tau, full, samples.t, offsets)
    else:
        rgb, depth, acc = grid.composite(
            weights, ray_id, n_rays, colors, samples.t, visible=visible, check_indices=False
        )
    sampled = (features, colors, weights[chosen].detach(), chosen_ray)
    return render_outputs(rgb, depth, acc, ray_id.shape[0], *sampled)
