"""Learning rate and coarse-to-fine upsampling of one `VoxelGrid` trained by Adam.

Shared by the experiments that train a single grid against points drawn in its box:
`GridSchedule` provides the `learning_rate`, `begin_step`
and `upsample` methods of `train.loop.Experiment` from the `[train]` table.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from grid.voxel_grid import VoxelGrid

if TYPE_CHECKING:
    from .config import Config


def uniform_points(n: int, lo: Tensor, hi: Tensor, gen: torch.Generator) -> Tensor:
    """[n, 3] points uniform in the box [lo, hi] (lo, hi: [3]) on the generator's device."""
    return lo + (hi - lo) * torch.rand(n, 3, generator=gen, device=gen.device)


def learning_rate(config: Config, step: int) -> float:
    """Exponential decay from train.lr at step 0 to train.lr_final at the last step."""
    t = config.train
    return t.lr * (t.lr_final / t.lr) ** (step / max(1, t.steps - 1))


def make_optimizer(model: VoxelGrid, config: Config) -> torch.optim.Adam:
    return torch.optim.Adam(
        model.parameters(), lr=config.train.lr, betas=tuple(config.train.betas), eps=1e-15
    )


class GridSchedule:
    """The learning-rate schedule and coarse-to-fine upsampling of one VoxelGrid (`model`)
    trained by Adam (`optimizer`) under `config`: shared by the single-grid experiments."""

    config: Config
    model: VoxelGrid
    optimizer: torch.optim.Adam

    def learning_rate(self, step: int) -> float:
        return learning_rate(self.config, step)

    def begin_step(self, step: int) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = learning_rate(self.config, step)

    def upsample(self, resolution: tuple[int, int, int]) -> None:
        c = self.config
        if c.train.upsample_moments == "reset":
            self.model.upsample(resolution)
            self.optimizer = make_optimizer(self.model, c)
        else:
            rescale = c.train.upsample_moments == "rescale"
            self.model.upsample(resolution, self.optimizer, rescale_moments=rescale)
