"""The field experiment: a `VoxelGrid` fitted to a target field by points drawn in the box.

What it adds to the loop skeleton (`train.loop`): the batch (uniform points, plus a
near-surface share for SDFs), the loss (MSE against the target, optional total variation),
the evaluation (MSE and PSNR on fixed held-out points) and the pictures (slices, curves).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from grid.voxel_grid import VoxelGrid

from ..distributed import SINGLE, World
from ..experiment import Experiment
from ..grid_schedule import GridSchedule, make_optimizer, uniform_points
from ..metrics import psnr
from ..schema import as_resolution
from ..step_graph import use_graphs
from .targets import Target, make_target

if TYPE_CHECKING:
    from ..config import Config

EVAL_CHUNK = 1 << 18


def draw_batch(
    config: Config,
    target: Target,
    lo: Tensor,
    hi: Tensor,
    gen: torch.Generator,
    rows: slice | None = None,
) -> Tensor:
    """[batch_size, 3] training points: uniform, plus a near-surface share for SDFs.

    rows: keep only these rows of the batch (a rank's share under torchrun); the random
    numbers of the whole batch are drawn all the same, so `gen` advances identically on
    every rank, and only the kept near-surface points are projected onto the surface.
    """
    n = config.train.batch_size
    near = round(n * config.train.surface_fraction)
    rows = rows or slice(0, n)
    points = uniform_points(n - near, lo, hi, gen)[rows]
    if near:
        keep = slice(max(rows.start - (n - near), 0), max(rows.stop - (n - near), 0))
        surface = target.surface_points(near, config.train.surface_std, lo, hi, gen, keep)
        points = torch.cat([points, surface])
    return points


@torch.no_grad()
def squared_error(model: VoxelGrid, points: Tensor, values: Tensor) -> float:
    """Sum of squared errors over the points (points: [N, 3], values: [N]), in float64."""
    total = 0.0
    for start in range(0, points.shape[0], EVAL_CHUNK):
        pred = model(points[start : start + EVAL_CHUNK])[..., 0].float()
        total += (pred - values[start : start + EVAL_CHUNK]).double().square().sum().item()
    return total


def evaluate(model: VoxelGrid, points: Tensor, values: Tensor, world: World = SINGLE) -> float:
    """Mean squared error over the held-out points (points: [N, 3], values: [N]); under
    torchrun each rank takes a share of the points and the sums are added up."""
    n = points.shape[0]
    if world.size == 1:
        return squared_error(model, points, values) / n
    mine = world.split(n)
    total = squared_error(model, points[mine.start : mine.stop], values[mine.start : mine.stop])
    return world.all_sum(torch.tensor(total, dtype=torch.float64, device=points.device)).item() / n


class FieldExperiment(GridSchedule, Experiment):
    """Fit a one-channel VoxelGrid to `config.target` (see the module docstring)."""

    unit = "points"
    eval_name = "held-out"
    train_metric = "train_mse"

    def __init__(
        self,
        config: Config,
        device: torch.device,
        gen: torch.Generator,
        resolution: tuple[int, int, int] | None,
        world: World = SINGLE,
    ) -> None:
        c = self.config = config
        self.gen, self.world = gen, world
        # this rank's rows of every batch (all of them in a single process)
        self.rows = world.share(c.train.batch_size)
        self.lo, self.hi = torch.tensor(c.grid.bounds, device=device).unbind(0)
        self.target = make_target(c.target, c.grid.bounds).to(device)
        self.label = c.target.kind
        # Fixed held-out points, independent of the training seed.
        eval_gen = torch.Generator().manual_seed(c.eval.seed)
        points = uniform_points(c.eval.points, self.lo.cpu(), self.hi.cpu(), eval_gen)
        self.eval_points = points.to(device)
        with torch.no_grad():
            self.eval_values = torch.cat(
                [self.target(p) for p in self.eval_points.split(EVAL_CHUNK)]
            )
        self.value_range = (self.eval_values.max() - self.eval_values.min()).item() or 1.0
        torch.manual_seed(c.seed)
        self.model = VoxelGrid(
            resolution or as_resolution(c.grid.resolution, "grid.resolution"),
            1,
            c.grid.bounds,
            init=c.grid.init,
            init_scale=c.grid.init_scale,
            padding=c.grid.padding,
            interpolation=c.grid.interpolation,
            device=device,
        )
        self.graphed = use_graphs(c, device)  # steps as CUDA graph replays (train/step_graph.py)
        self.optimizer = make_optimizer(self.model, c, self.graphed)

    def loss(self) -> tuple[Tensor, Tensor]:
        """(loss to minimise, MSE of the batch) for one step."""
        c = self.config
        points = draw_batch(c, self.target, self.lo, self.hi, self.gen, self.rows)  # [B/N, 3]
        with torch.no_grad():
            values = self.target(points)  # [B]
        mse = (self.model(points)[..., 0] - values).square().mean()
        loss = mse + c.train.tv_weight * self.model.total_variation() if c.train.tv_weight else mse
        return loss, mse

    def progress(self, value: float) -> dict[str, str]:
        """The batch MSE and its PSNR, for the progress bar."""
        return {"loss": f"{value:.2e}", "psnr": f"{psnr(value, self.value_range):.1f}"}

    def evaluate(self, train_seconds: float) -> dict[str, Any]:
        held_out = evaluate(self.model, self.eval_points, self.eval_values, self.world)
        return {"mse": held_out, "psnr": psnr(held_out, self.value_range)}

    def summary(self, common: dict[str, Any]) -> dict[str, Any]:
        c = self.config
        quality = self.evaluate(common["train_seconds"])
        return {
            "psnr": quality["psnr"],
            "mse": quality["mse"],
            "steps": common["steps"],
            "seconds": common["seconds"],
            "train_seconds": common["train_seconds"],
            "points_per_second": common["per_second"],
            "device": common["device"],
            "target": c.target.kind,
            "resolution": list(self.model.resolution),
            "parameters": self.model.features.numel(),
            "batch_size": c.train.batch_size,
            "processes": common["processes"],
            "value_range": self.value_range,
            "held_out_points": c.eval.points,
            "torch": common["torch"],
            "grid_ops": common["grid_ops"],
        }

    def eval_line(self, quality: dict[str, Any]) -> str:
        return f"{self.eval_name} mse {quality['mse']:.3e}  psnr {quality['psnr']:6.2f} dB"

    def write_pictures(self, out: Path, records: list[dict], summary: dict[str, Any]) -> None:
        from .pictures import write_pictures

        write_pictures(out, self.config, self.model, self.target, records, summary)
