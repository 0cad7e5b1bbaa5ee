"""The NeRF experiment: a radiance field (`train.nerf.model.VoxelNeRF`) from posed images.

What it adds to the loop skeleton (`train.loop`):

* data: a Blender-format scene (`train.nerf.data.blender`), an instant-ngp / nerfstudio
  `transforms.json` (`train.nerf.data.ngp`) or a project scene (`data.scene`, generated into
  `data.path` on first use: `train.nerf.scene_path.ensure_scene`); every training pixel's
  ray precomputed;
* batch: `train.batch_size` rays drawn uniformly from all training pixels;
* loss: MSE of the rendered colour, plus `train.tv_weight` x total variation of the density
  and the losses of `train.nerf.model.losses` (DirectVoxGO's `nerf.sample_color_weight` and
  `nerf.entropy_weight`, `nerf.view_consistency_weight`);
* maintenance: learning-rate decay per parameter group, the occupancy grid refreshed every
  `nerf.occupancy_every` steps (from `nerf.occupancy_grow_until` on, it only shrinks), the
  density lowered by `nerf.shift_decay` at each upsample;
* evaluation: mean PSNR and SSIM over the test views (whole images);
* pictures: test_views.png, curves.png, turntable.gif (`train.nerf.pictures`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from grid import VoxelGrid

from ..config import Config
from ..distributed import SINGLE, World
from ..errors import InputFileError
from ..experiment import Experiment
from ..grid_schedule import fit_optimizer
from ..metrics import psnr, ssim
from ..multires_config import encoding_options
from ..schema import as_resolution
from ..step_graph import use_graphs
from .config import graph_problem
from .data.rays import TrainingRays
from .evaluation import background_errors, background_metrics, seconds_to
from .model.appearance import color_correct, make_appearance
from .model.capacity import capacity_key
from .model.fit_box import box_resolution, surface_box
from .model.image import render_image
from .model.losses import auxiliary_losses, priors_on
from .model.voxel_nerf import VoxelNeRF
from .optimizer import lr_factor, make_optimizer, set_levels
from .scene_path import ensure_scene_once

SSIM_WINDOW = 11  # the side of `train.metrics.ssim`'s window


def final_resolution(config: Config) -> tuple[int, int, int]:
    """The resolution after the last upsample (or the starting one)."""
    res = config.train.upsample_resolutions
    last = res[-1] if res else config.grid.resolution
    return as_resolution(last, "train.upsample_resolutions")


def make_model(
    config: Config,
    resolution: tuple[int, int, int],
    final: tuple[int, int, int],
    *,
    backend: str,
    device: torch.device,
) -> VoxelNeRF:
    """The VoxelNeRF of `config.nerf` at `resolution`, sampling every `nerf.step_ratio`
    voxels of the `final` grid, on `backend` ("native" or "grid_sample")."""
    keys = ("color_features", "hidden", "view_frequencies", "view_encoding", "step_ratio")
    keys += ("alpha_init", "density_activation")
    keys += ("occupancy_threshold", "weight_threshold", "mlp_dtype", "renderer")
    keys += ("contraction", "far", "outer_samples")
    keys += ("density_encoding", "color_encoding", "density_hidden", "geometry_features")
    keys += ("reflected_views",)
    options = {key: getattr(config.nerf, key) for key in keys}
    return VoxelNeRF(
        config.grid.bounds,
        resolution,
        final,
        backend=backend,
        device=device,
        multires=encoding_options(config.multires),
        **options,
    )


class NerfExperiment(Experiment):
    """Train a VoxelNeRF on the scene of `config.data` (see the module docstring)."""

    unit = "rays"
    eval_name = "test-view"
    train_metric = "train_mse"

    def __init__(
        self,
        config: Config,
        device: torch.device,
        gen: torch.Generator,
        resolution: tuple[int, int, int] | None,
        world: World = SINGLE,
    ) -> None:
        from .data.blender import DatasetError, camera_rays
        from .data.ngp import load_views

        c = self.config = config
        self.device, self.gen, self.world = device, gen, world
        self.rows = world.share(c.train.batch_size)  # this rank's rays of every batch
        self.batch_rows = self.rows.stop - self.rows.start
        d = c.data
        self.path = ensure_scene_once(c, device, world)
        self.background = torch.tensor(d.background, dtype=torch.float32, device=device)
        options = dict(
            downscale=d.downscale, background=tuple(d.background), holdout_every=d.holdout_every
        )
        try:
            train = load_views(self.path, "train", **options)
            test = load_views(self.path, "test", limit=d.test_views or None, **options)
        except DatasetError as error:
            raise InputFileError(error.path, error.problem, key="data.path") from None
        self.train_views, self.test_views = train, test
        self.rays = TrainingRays(train, device)  # views of different sizes: their own pixels
        self.rays_per_pixel = c.train.steps * c.train.batch_size / len(self.rays)
        self.appearance = make_appearance(c.nerf, train.images.shape[0], device)
        test_o, test_d = camera_rays(test)
        self.test_rays = (test_o.to(device), test_d.to(device))  # [T, H, W, 3] each
        self.test_images = torch.as_tensor(test.images).to(device)  # [T, H, W, 3]
        test_mask = test.mask()
        # background: pixels the images leave fully transparent (floaters show there)
        self.test_background = None if test.alphas is None else (test.alphas == 0).to(device)
        self.test_mask = None if test_mask is None else test_mask.to(device)  # [T, H, W]
        smallest = min(test.height, test.width) if test.sizes is None else int(test.sizes.min())
        self.has_ssim = smallest >= SSIM_WINDOW  # SSIM needs images of 11x11 at least
        self.label = f"nerf {c.grid.backend}"

        torch.manual_seed(c.seed)
        self.model = make_model(
            c,
            resolution or as_resolution(c.grid.resolution, "grid.resolution"),
            final_resolution(c),
            backend=c.grid.backend,
            device=device,
        )
        # steps as CUDA graph replays (train/step_graph.py): the fused renderer, Adam
        self.graphed = use_graphs(c, device) and graph_problem(c) is None
        self.optimizer = self.make_optimizer()
        self.occupied = 1.0
        self.priors = True  # DirectVoxGO's two losses on this step (nerf.priors_until)
        self.samples = 0  # samples that reached the density grid in the last step
        self.pool: Tensor | None = None  # `ray_pool`, for the box in pool_box
        self.pool_box: list[list[float]] | None = None
        self.renders: list[tuple[Tensor, Tensor]] = []  # last evaluation, for the pictures
        self.support_key: tuple | None = None  # the flags `support` was computed from
        self.support: Tensor | None = None  # `gradient_support`'s rows of the colour grid

    # ---- optimisation ---------------------------------------------------------------------

    def make_optimizer(self) -> torch.optim.Optimizer:
        return make_optimizer(self.config, self.model, self.appearance, self.graphed, self.device)

    def fit_optimizer(self) -> None:
        """After a checkpoint's optimiser state is loaded: the optimiser as `make_optimizer`
        makes it here (a captured run's checkpoint resumes op by op, and the other way round)."""
        fit_optimizer(self.optimizer, self.graphed)

    def learning_rate(self, step: int) -> float:
        """The density's learning rate (`nerf.lr_density`, or `multires.lr` for a multires
        density; the others follow the same decay)."""
        n = self.config.nerf
        start = self.config.multires.lr if n.density_encoding == "multires" else n.lr_density
        return start * lr_factor(self.config, step)

    def begin_step(self, step: int) -> None:
        factor = lr_factor(self.config, step)
        for group in self.optimizer.param_groups:
            if isinstance(group["lr"], Tensor):
                group["lr"].fill_(group["base_lr"] * factor)
            else:
                group["lr"] = group["base_lr"] * factor
        set_levels(self.config, self.model, step)  # coarse to fine (multires.level_every)
        n = self.config.nerf
        self.priors = priors_on(n, step)
        if step >= n.occupancy_start and (step - n.occupancy_start) % n.occupancy_every == 0:
            shrink_only = 0 < n.occupancy_grow_until <= step
            self.occupied = self.model.update_occupancy(shrink_only=shrink_only)

    def upsample(self, resolution: tuple[int, int, int]) -> None:
        """To the next stage of the schedule; with `nerf.fit_box`, the first one also moves
        the grids onto the box of the object's rays (`surface_box`), later ones keep it."""
        n, m = self.config.nerf, self.model
        reset = self.config.train.upsample_moments == "reset"
        optimizer = None if reset else self.optimizer
        box = m.bounds_list if self.box_fitted() else None
        if n.fit_box and box is None:
            box = self.agree_box(self.surface_box(n.fit_box_margin))
            if box is not None:
                m.fit_box(box, box_resolution(resolution, box), optimizer)
        elif box is not None:
            m.upsample(box_resolution(resolution, box), optimizer)
        if box is None:
            m.upsample(resolution, optimizer)
        if n.shift_decay:  # = the density shift lowered, and kept in checkpoints
            m.density.add_(-n.shift_decay)
        if reset:
            self.optimizer = self.make_optimizer()

    def surface_box(self, margin: float, rays: int = 65536) -> list[list[float]] | None:
        """`fit_box.surface_box` of `rays` random training rays."""
        index = torch.randint(len(self.rays), (rays,), generator=self.gen, device=self.device)
        return surface_box(self.model, *self.rays.take(index), self.background, margin)

    def agree_box(self, box: list[list[float]] | None) -> list[list[float]] | None:
        """The ranks' boxes averaged (None if any rank has none), so that rounding cannot
        give the ranks grids of different shapes; `box` itself on one process."""
        if self.world.size == 1:
            return box
        t = torch.zeros(7, dtype=torch.float64, device=self.device)
        if box is not None:
            t[:6] = torch.tensor(box, dtype=torch.float64).reshape(-1)
            t[6] = 1
        self.world.all_sum(t)
        if t[6] < self.world.size:
            return None
        return (t[:6] / self.world.size).reshape(2, 3).tolist()

    def ray_pool(self) -> Tensor | None:
        """With a fitted box, the training rays that cross it: the others have
        no samples and render the background whatever the grids hold, so a batch drawn from
        these alone teaches more (DirectVoxGO draws from the rays that cross its coarse
        mask). [K] int32; None: every ray."""
        box = self.model.bounds_list
        if not self.config.nerf.fit_box or self.pool_box == box:
            return self.pool
        self.pool, self.pool_box = None, box
        if not self.box_fitted():
            return None
        pool = self.rays.crossing(box)
        self.pool = pool if pool.shape[0] > 0 else None
        return self.pool

    def box_fitted(self) -> bool:
        """Whether the grids were moved onto a fitted box (saved: a resumed run knows)."""
        box = torch.tensor(self.model.bounds_list, dtype=torch.float32)
        return not torch.equal(box, torch.tensor(self.model.home_bounds, dtype=torch.float32))

    def loss(self) -> tuple[Tensor, Tensor]:
        """(loss, batch MSE): render `train.batch_size` random training rays."""
        c = self.config
        pool = self.ray_pool()
        count = len(self.rays) if pool is None else pool.shape[0]
        index = torch.randint(count, (c.train.batch_size,), generator=self.gen, device=self.device)
        index = index[self.rows]  # the whole batch is drawn on every rank, each renders its share
        if pool is not None:
            index = pool[index]
        origins, directions, target = self.rays.take(index)  # [R, 3] each
        jitter = None  # stratified: drawn for the whole batch on every rank, as the index
        if c.nerf.jitter:
            batch = c.train.batch_size
            jitter = torch.rand(batch, generator=self.gen, device=self.device)[self.rows]
        out = self.model.render(origins, directions, self.background, jitter=jitter)
        self.samples = out["samples"]
        rgb, penalty = out["rgb"], 0.0
        if self.appearance is not None:  # each image's own exposure and white balance
            views = self.rays.view_of(index)
            rgb, penalty = self.appearance.fit(rgb, views, c.nerf.appearance_weight)
        mse = (rgb - target).square().mean()
        aux = auxiliary_losses(c.nerf, self.model, out, directions, target, self.priors)
        loss = mse + penalty + aux
        if c.train.tv_weight:
            loss = loss + c.train.tv_weight * self.model.total_variation()
        return loss, mse

    def graph_key(self) -> tuple | None:
        """For a captured step (train/step_graph.py): None when this step's render measures
        its buffers (it reads counts back: op by op), else what the graph depends on beyond
        the parameters, i.e. the planned buffer sizes and the tensors it reads."""
        m = self.model
        sizes = m.capacity.peek(capacity_key(m, self.rays.dtype), self.batch_rows)
        if sizes is None:
            return None
        pool = self.ray_pool()
        occ = m.occupancy_grid
        pool_at = 0 if pool is None else pool.data_ptr()
        normals = m.views.normals
        normals = 0 if normals is None else normals.values.data_ptr()  # refreshed in place
        where = (occ.flags.data_ptr(), occ.bounds.data_ptr(), pool_at, normals)
        return (sizes, where, tuple(map(tuple, m.bounds_list)), self.priors)

    def gradient_support(self) -> dict[Tensor, Tensor] | None:
        """For `World.average_gradients` under torchrun: the rows of the colour grid that a
        step's samples can reach, or None (average it all). Samples lie only where the
        occupancy grid (the grids' resolution and box, the same on every rank) is set, and
        read the corners of their cell: the voxels within one of an occupied one. Computed
        once per change of the occupancy flags (one read-back)."""
        flags, color = self.model.occupancy_grid.flags, self.model.color
        limit = self.config.nerf.sparse_average  # packing pays below it (bench_multi.py A5)
        if self.world.size == 1 or not limit or not isinstance(color, VoxelGrid):
            return None
        if tuple(color.features.shape[:3]) != tuple(flags.shape):
            return None
        key = (flags.data_ptr(), tuple(flags.shape), flags._version)
        if self.support_key != key:
            near = F.max_pool3d(flags[None, None].float(), 3, stride=1, padding=1)[0, 0] > 0
            rows = near.flatten().nonzero().squeeze(1)  # [K] int64
            dense = rows.numel() > limit * near.numel()
            self.support_key, self.support = key, None if dense else rows
        return None if self.support is None else {color.features: self.support}

    def replayed(self) -> None:
        """A replay rendered once: count it as the skipped `render` would have."""
        self.model.capacity.count_render()

    def progress(self, value: float) -> dict[str, str]:
        """The batch MSE and its PSNR, for the progress bar."""
        return {"loss": f"{value:.2e}", "psnr": f"{psnr(value, 1.0):.1f}"}

    # ---- evaluation -----------------------------------------------------------------------

    @torch.no_grad()
    def evaluate(self, train_seconds: float) -> dict[str, Any]:
        """Mean over the test views of each image's MSE, PSNR and SSIM (colours in [0, 1];
        `train.metrics.ssim`, the NeRF literature's 11x11 Gaussian window).

        Under torchrun each rank renders a share of the views; the per-view MSEs and the
        renders kept for the pictures are summed over the ranks (each view is filled in
        by one rank, zeros elsewhere, so the sums are exact)."""
        world, keep = self.world, self.config.output.picture_views
        origins, directions = self.test_rays
        views, height, width = origins.shape[:3]
        mses = torch.zeros(views, dtype=torch.float64, device=self.device)
        ssims = torch.zeros(views, dtype=torch.float64, device=self.device)
        background = torch.zeros(views, 3, dtype=torch.float64, device=self.device)
        sizes = self.test_views.sizes
        kept = torch.zeros(min(keep, views), height, width, 4, device=self.device)  # rgb, depth
        for i in world.split(views):
            rgb, depth, acc = render_image(self.model, origins[i], directions[i], self.background)
            if self.appearance is not None:  # the test image's own exposure is not error
                mask = None if self.test_mask is None else self.test_mask[i]
                rgb = color_correct(rgb, self.test_images[i], mask)
            error = (rgb.clamp(0, 1) - self.test_images[i]).double().square()
            mses[i] = error.mean() if self.test_mask is None else error[self.test_mask[i]].mean()
            if self.has_ssim:
                h, w = (height, width) if sizes is None else sizes[i].tolist()
                ssims[i] = ssim(rgb.clamp(0, 1)[:h, :w], self.test_images[i, :h, :w])
            if self.test_background is not None:
                background[i] = background_errors(error, acc, self.test_background[i])
            if i < keep:
                # depth of the surface: expected depth over opacity, where mostly opaque
                kept[i, ..., :3] = rgb
                kept[i, ..., 3] = torch.where(acc > 0.5, depth / acc.clamp_min(1e-6), 0.0)
        samples = torch.tensor([float(self.samples)], dtype=torch.float64, device=self.device)
        if world.size > 1:
            for t in (mses, ssims, background, kept, samples):
                world.all_sum(t)
        self.renders = []
        for i, k in enumerate(kept):  # views of different sizes: their own pixels only
            h, w = (height, width) if sizes is None else sizes[i].tolist()
            self.renders.append((k[:h, :w, :3].cpu(), k[:h, :w, 3].cpu()))
        mses = mses.tolist()
        totals = background.sum(0).tolist()  # squared error, opacity, pixels
        return {
            **background_metrics(*totals),
            "mse": sum(mses) / len(mses),
            "psnr": sum(psnr(m, 1.0) for m in mses) / len(mses),
            "ssim": ssims.mean().item() if self.has_ssim else None,
            "view_psnr": [psnr(m, 1.0) for m in mses],
            "train_seconds": train_seconds,
            "occupied": self.occupied,
            "samples_per_ray": samples.item() / self.config.train.batch_size,
            "samples_dropped": self.dropped_samples(),
        }

    def dropped_samples(self) -> int:
        """Samples the fused renderer's planned buffers had no room for, since the start of
        this process (0 when every batch fit; reads one number back)."""
        dropped = self.model.capacity.dropped
        return 0 if dropped is None else int(dropped)

    def truth(self, i: int) -> Tensor:
        """Test view i's image on the CPU, [h, w, 3], without padding."""
        if self.test_views.sizes is None:
            return self.test_images[i].cpu()
        h, w = self.test_views.sizes[i].tolist()
        return self.test_images[i, :h, :w].cpu()

    def tensorboard_images(self) -> dict[str, Tensor]:
        """The pictured test views of the last evaluation, ground truth | render side by
        side: name -> [H, 2W, 3] in [0, 1] (`output.tensorboard`)."""
        return {
            f"test_view/{i}": torch.cat([self.truth(i), rgb.clamp(0, 1)], dim=1)
            for i, (rgb, _) in enumerate(self.renders)
        }

    def state_dict(self) -> dict[str, Any]:
        codes = {} if self.appearance is None else {"appearance": self.appearance.codes.detach()}
        return {"occupied": self.occupied, **codes}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.occupied = state.get("occupied", 1.0)
        if self.appearance is not None and "appearance" in state:
            with torch.no_grad():
                self.appearance.codes.copy_(state["appearance"])

    def summary(self, common: dict[str, Any]) -> dict[str, Any]:
        c, m = self.config, self.model
        quality = self.evaluate(common["train_seconds"])
        records = common.get("records", [])
        return {
            "psnr": quality["psnr"],
            "ssim": quality["ssim"],
            "mse": quality["mse"],
            "view_psnr": quality["view_psnr"],
            "background_mse": quality["background_mse"],
            "background_opacity": quality["background_opacity"],
            "steps": common["steps"],
            "seconds": common["seconds"],
            "train_seconds": common["train_seconds"],
            "rays_per_second": common["per_second"],
            "steps_per_second": common["steps"] / max(common["train_seconds"], 1e-9),
            "train_seconds_to_psnr": {
                str(level): seconds_to(records, level) for level in (24, 27, 30)
            },
            "device": common["device"],
            "backend": c.grid.backend,
            "resolution": list(m.resolution),
            "bounds": m.bounds_list,
            "ray_pool": 1.0 if self.pool is None else self.pool.shape[0] / len(self.rays),
            "parameters": sum(p.numel() for p in m.parameters()),
            "batch_size": c.train.batch_size,
            "rays_per_pixel": self.rays_per_pixel,  # train.steps x batch_size / training pixels
            "processes": common["processes"],
            "occupied": self.occupied,
            "image_size": [self.test_views.height, self.test_views.width],
            "train_views": int(self.train_views.c2w.shape[0]),
            "test_views": int(self.test_views.c2w.shape[0]),
            "scene": str(self.path),
            "torch": common["torch"],
            "grid_ops": common["grid_ops"],
        }

    def eval_line(self, quality: dict[str, Any]) -> str:
        line = f"{self.eval_name} mse {quality['mse']:.3e}  psnr {quality['psnr']:6.2f} dB"
        return line if quality["ssim"] is None else f"{line}  ssim {quality['ssim']:.4f}"

    def write_files(self, out: Path, summary: dict[str, Any]) -> None:
        pass  # pictures only

    def write_pictures(self, out: Path, records: list[dict], summary: dict[str, Any]) -> None:
        from .pictures import write_pictures

        write_pictures(out, self, records, summary)
