"""One backend's training run of bench/compare/nerfacc/bench_nerfacc.py: the field, nerfacc's
estimator and the optimiser from a seed, and the training step, for our dense-grid field (its
two backends, DirectVoxGO's learning rates and decay) and for the instant-ngp anchor
(bench/compare/nerfacc/ngp_field.py, trained by nerfacc's example's recipe: `ngp_rate`, the
2^10 loss scale, the adaptive batch); and `render_rays`, nerfacc's render of one batch.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from bench.compare.nerfacc.nerfacc_field import make_field
from bench.compare.nerfacc.ngp_field import NgpRadianceField, ReferenceHashEncoding

#: nerfacc's example scales its loss by 2^10 (a gradient scaler it never unscales)
NGP_LOSS_SCALE = 2.0**10


class BenchError(RuntimeError):
    """A problem the benchmark reports in one line."""


def render_rays(model, estimator, kit, rays_o, rays_d, background, step_size: float, train: bool):
    """nerfacc's render_image_with_occgrid for one batch: rays [R, 3] -> rgb [R, 3],
    opacity [R, 1], depth [R, 1], and the number of samples."""

    def points(t_starts, t_ends, ray_indices):
        return rays_o[ray_indices] + rays_d[ray_indices] * ((t_starts + t_ends) / 2)[:, None]

    def sigma_fn(t_starts, t_ends, ray_indices):
        return model.query_density(points(t_starts, t_ends, ray_indices))[:, 0]

    def rgb_sigma_fn(t_starts, t_ends, ray_indices):
        rgb, sigma = model(points(t_starts, t_ends, ray_indices), rays_d[ray_indices])
        return rgb, sigma[:, 0]

    ray_indices, t_starts, t_ends = estimator.sampling(
        rays_o, rays_d, sigma_fn=sigma_fn, render_step_size=step_size, stratified=train
    )
    rgb, opacity, depth, _ = kit["rendering"](
        t_starts,
        t_ends,
        ray_indices,
        n_rays=rays_o.shape[0],
        rgb_sigma_fn=rgb_sigma_fn,
        render_bkgd=background,
    )
    return rgb, opacity, depth, t_starts.shape[0]


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def learning_rate_decay(optimizer, bases: list[float], fraction: float) -> None:
    """DirectVoxGO's decay: each group's rate times 0.1 ** (fraction of the run done)."""
    for group, base in zip(optimizer.param_groups, bases, strict=True):
        group["lr"] = base * 0.1**fraction


def ngp_rate(step: int, steps: int) -> float:
    """nerfacc's example's schedule as a factor of 1e-2: linear warm-up from 0.01 over 100
    steps, times 0.33 at each of 1/2, 3/4 and 9/10 of the run."""
    warm = 0.01 + 0.99 * min(step, 100) / 100
    passed = sum(step >= m for m in (steps // 2, steps * 3 // 4, steps * 9 // 10))
    return warm * 0.33**passed


def ngp_encoder(args, device: torch.device) -> tuple[torch.nn.Module, str]:
    """torch-ngp's GridEncoder from --ngp on CUDA; grid.reference's stand-in on the CPU."""
    if device.type == "cpu":
        encoder = ReferenceHashEncoding(args.ngp_max_resolution, args.ngp_log2_table, device)
        return encoder, "grid.reference stand-in for torch-ngp's encoder (CPU)"
    if args.ngp is None:
        raise BenchError("--backends ngp on CUDA needs --ngp DIR, torch-ngp's gridencoder folder")
    from bench.ops.multires import build_ngp

    if args.ngp_log2_table != 19:
        raise BenchError("--ngp-log2-table: torch-ngp's encoder is built with 2^19 rows")
    return build_ngp(Path(args.ngp), device, args.ngp_max_resolution), f"torch-ngp ({args.ngp})"


class Run:
    """One backend's field, estimator and optimiser (from --seed), and its training step."""

    def __init__(self, backend: str, scene: dict, kit: dict, args, device: torch.device):
        torch.manual_seed(args.seed)  # the rays drawn, the stratified offsets, the cells
        self.backend, self.scene, self.kit, self.args, self.device = (
            backend,
            scene,
            kit,
            args,
            device,
        )
        bounds = scene["config"].grid.bounds
        aabb = [*bounds[0], *bounds[1]]
        self.rays_per_step = args.batch
        if backend == "ngp":
            encoder, self.encoder_label = ngp_encoder(args, device)
            self.model = NgpRadianceField(aabb, encoder, device)
            groups = self.model.param_groups(args.ngp_weight_decay)
            self.optimizer = torch.optim.Adam(groups, lr=1e-2, eps=1e-15)
            self.step_size, self.occ_thre = args.ngp_step, args.ngp_occ_thre
            self.rays_per_step = 1024  # the example's first batch, then adapted
        else:
            options = {"features": args.features, "hidden": args.hidden}
            self.model = make_field(backend, bounds, args.resolution, args.seed, device, **options)
            self.optimizer = torch.optim.Adam(self.model.param_groups(args.lr_grid, args.lr_mlp))
            self.step_size = args.step_ratio * self.model.voxel  # world units, as the example's
            self.occ_thre = args.occ_thre
        self.estimator = kit["estimator"](roi_aabb=aabb, resolution=args.occ_resolution)
        self.estimator.to(device)
        self.bases = [group["lr"] for group in self.optimizer.param_groups]
        self.generator = torch.Generator(device).manual_seed(args.seed)
        self.model.train()
        self.estimator.train()

    def occ_eval_fn(self, x: Tensor) -> Tensor:
        """The example's occupancy: density times the render step (about alpha)."""
        return self.model.query_density(x) * self.step_size

    def step(self, step: int) -> tuple[Tensor | None, int, int]:
        """One training step: the loss (None where no ray had a sample), the samples and
        the rays."""
        args, (origins, directions, colors) = self.args, self.scene["rays"]
        self.estimator.update_every_n_steps(step, self.occ_eval_fn, occ_thre=self.occ_thre)
        count = self.rays_per_step
        pick = torch.randint(
            origins.shape[0], (count,), device=self.device, generator=self.generator
        )
        rays = (origins[pick], directions[pick], self.scene["background"])
        rgb, _, _, n = render_rays(
            self.model, self.estimator, self.kit, *rays, self.step_size, True
        )
        if n == 0:  # the example skips such a step too
            return None, 0, count
        if self.backend == "ngp":
            for group in self.optimizer.param_groups:
                group["lr"] = 1e-2 * ngp_rate(step, args.steps)
            loss = F.smooth_l1_loss(rgb, colors[pick])
            # the example's adaptive batch: about --ngp-samples samples a step
            grown = int(count * args.ngp_samples / n)
            self.rays_per_step = max(1, min(grown, origins.shape[0]))
        else:
            loss = F.mse_loss(rgb, colors[pick])
        self.optimizer.zero_grad(set_to_none=True)
        # the example scales its loss by 2^10 (a GradScaler it never unscales: Adam does not
        # care, but the weight decay weighs 2^10 times less); the same here
        (loss * (NGP_LOSS_SCALE if self.backend == "ngp" else 1.0)).backward()
        self.optimizer.step()
        if self.backend != "ngp":
            learning_rate_decay(self.optimizer, self.bases, (step + 1) / args.steps)
        return loss, n, count
