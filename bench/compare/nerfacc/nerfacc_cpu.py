"""NOT nerfacc: a pure-PyTorch CPU stand-in for the two nerfacc calls
bench/compare/nerfacc/bench_nerfacc.py makes, for its CPU test only.

nerfacc 0.5's ray traversal (`traverse_grids`), its packed scans and `pack_info` run on CUDA
tensors only, so `OccGridEstimator.sampling` and `nerfacc.rendering` cannot run on the CPU.
These stand-ins take the same arguments and return the same shapes, so the benchmark's loop,
evaluation and table run end to end on a CPU at a tiny size. They are simpler than nerfacc's
kernels (samples at fixed steps from where each ray enters the box, no cone angle, one
level) and never used on CUDA: there the benchmark runs nerfacc or refuses to run.
The occupancy update (`update_every_n_steps`) is nerfacc's own: it is plain PyTorch.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from nerfacc import OccGridEstimator
from nerfacc.grid import _ray_aabb_intersect  # nerfacc's own pure-PyTorch ray-box test
from torch import Tensor

LABEL = "CPU stand-in (pure PyTorch, not nerfacc)"


class CpuStandInEstimator(OccGridEstimator):
    """`OccGridEstimator` whose `sampling` is pure PyTorch (one level, no cone angle)."""

    @torch.no_grad()
    def sampling(
        self,
        rays_o: Tensor,
        rays_d: Tensor,
        sigma_fn: Callable | None = None,
        near_plane: float = 0.0,
        far_plane: float = 1e10,
        render_step_size: float = 1e-3,
        early_stop_eps: float = 1e-4,
        alpha_thre: float = 0.0,
        stratified: bool = False,
        **unused,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """rays [R, 3] -> ray_indices [S], t_starts [S], t_ends [S], sorted by ray."""
        starts, ends, keep = self._steps(rays_o, rays_d, near_plane, far_plane, render_step_size)
        if stratified:
            shift = torch.rand_like(starts[:, :1]) * render_step_size
            starts, ends = starts + shift, ends + shift
        mid = (starts + ends) / 2
        keep &= self._occupied(rays_o[:, None] + rays_d[:, None] * mid[..., None])
        ray_indices = keep.nonzero()[:, 0]  # row-major: sorted by ray, as nerfacc's
        t_starts, t_ends = starts[keep], ends[keep]
        if sigma_fn is not None and t_starts.numel() and (early_stop_eps > 0 or alpha_thre > 0):
            alpha_thre = min(alpha_thre, self.occs.mean().item())
            sigmas = sigma_fn(t_starts, t_ends, ray_indices)
            trans, alphas = transmittance(t_starts, t_ends, sigmas, ray_indices, len(rays_o))
            visible = trans >= early_stop_eps
            if alpha_thre > 0:
                visible &= alphas >= alpha_thre
            ray_indices, t_starts, t_ends = ray_indices[visible], t_starts[visible], t_ends[visible]
        return ray_indices, t_starts, t_ends

    def _steps(self, rays_o, rays_d, near, far, step) -> tuple[Tensor, Tensor, Tensor]:
        """Fixed steps from each ray's entry into the box: starts, ends [R, K], inside [R, K]."""
        t0, t1, hit = (v[:, 0] for v in _ray_aabb_intersect(rays_o, rays_d, self.aabbs[:1]))
        t0, t1 = t0.clamp(min=near), t1.clamp(max=far)
        hit &= t1 > t0
        length = torch.where(hit, t1 - t0, 0.0)
        count = math.ceil(length.max().item() / step) if hit.any() else 0
        starts = torch.where(hit, t0, 0.0)[:, None] + step * torch.arange(count, device=t0.device)
        ends = starts + step
        return starts, ends, hit[:, None] & (ends <= t1[:, None])

    def _occupied(self, points: Tensor) -> Tensor:
        """points [..., 3] -> [...] bool: their cell of `binaries` (cell-centred, as the
        occupancy update's cells)."""
        lo, hi = self.aabbs[0, :3], self.aabbs[0, 3:]
        cell = ((points - lo) / (hi - lo) * self.resolution).floor().long()
        inside = ((cell >= 0) & (cell < self.resolution)).all(-1)
        cell = torch.minimum(cell.clamp(min=0), self.resolution.long() - 1)
        return inside & self.binaries[0, cell[..., 0], cell[..., 1], cell[..., 2]]


def transmittance(
    t_starts: Tensor, t_ends: Tensor, sigmas: Tensor, ray_indices: Tensor, n_rays: int
) -> tuple[Tensor, Tensor]:
    """[S] each, sorted by ray -> transmittance before each sample [S], alpha [S]
    (nerfacc's `render_transmittance_from_density`)."""
    sigmas_dt = sigmas * (t_ends - t_starts)
    before = sigmas_dt.cumsum(0) - sigmas_dt  # exclusive sum over all samples
    counts = torch.bincount(ray_indices, minlength=n_rays)
    first = (counts.cumsum(0) - counts).clamp(max=max(len(before) - 1, 0))
    before = before - before[first][ray_indices]  # ... restarted at each ray's first sample
    return torch.exp(-before), 1.0 - torch.exp(-sigmas_dt)


def rendering(
    t_starts: Tensor,
    t_ends: Tensor,
    ray_indices: Tensor,
    n_rays: int,
    rgb_sigma_fn: Callable,
    render_bkgd: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor, dict]:
    """`nerfacc.rendering` with `rgb_sigma_fn`: colours [R, 3], opacities [R, 1],
    depths [R, 1], extras."""
    rgbs, sigmas = rgb_sigma_fn(t_starts, t_ends, ray_indices)
    trans, alphas = transmittance(t_starts, t_ends, sigmas, ray_indices, n_rays)
    weights = trans * alphas

    def along_rays(values: Tensor) -> Tensor:  # [S, D] -> [R, D]
        out = torch.zeros(n_rays, values.shape[-1], dtype=values.dtype, device=values.device)
        return out.index_add(0, ray_indices, values)

    colors = along_rays(weights[:, None] * rgbs)
    opacities = along_rays(weights[:, None])
    depths = along_rays(weights[:, None] * (t_starts + t_ends)[:, None] / 2)
    depths = depths / opacities.clamp_min(torch.finfo(rgbs.dtype).eps)
    if render_bkgd is not None:
        colors = colors + render_bkgd * (1.0 - opacities)
    return colors, opacities, depths, {"weights": weights, "alphas": alphas, "trans": trans}
