"""Learning rate and coarse-to-fine upsampling of one `VoxelGrid` trained by Adam.

Shared by the experiments that train a single grid against points drawn in its box:
`GridSchedule` provides the `learning_rate`, `begin_step`, `upsample` and `fit_optimizer`
hooks of `train.experiment.Experiment` from the `[train]` table.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from grid.optim import Adam, MaskedAdam
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


def make_optimizer(model: VoxelGrid, config: Config, graphed: bool = False) -> torch.optim.Adam:
    """Adam over the grid (`grid.Adam`: torch's, without its import of torch._dynamo), the
    fused kernel (one threaded pass over the grid, also on the CPU: 4.4 -> 0.73 ms a step
    for a 128^3 grid on 2 cores, where the per-tensor Adam makes several). `graphed`
    (steps captured as CUDA graphs, train/step_graph.py): with `capturable=True`, its
    learning rate a device tensor that `set_learning_rate` updates in place (a float would
    be frozen into the graph)."""
    params, betas = model.parameters(), tuple(config.train.betas)
    if not graphed:
        return Adam(params, lr=config.train.lr, betas=betas, eps=1e-15, fused=True)
    device = model.features.device
    lr = torch.tensor(config.train.lr, dtype=torch.float32, device=device)
    return Adam(params, lr=lr, betas=betas, eps=1e-15, capturable=True, fused=True)


def set_learning_rate(optimizer: torch.optim.Optimizer, value: float) -> None:
    """Every group's learning rate = value: a float assigned, a tensor filled in place."""
    for group in optimizer.param_groups:
        if isinstance(group["lr"], Tensor):
            group["lr"].fill_(value)
        else:
            group["lr"] = value


def fit_optimizer(optimizer: torch.optim.Optimizer, graphed: bool) -> None:
    """Give a loaded Adam or MaskedAdam the flags, learning-rate type and step counters of
    the optimiser `make_optimizer(..., graphed)` builds (`load_state_dict` takes them from
    the saved groups): a checkpoint resumes in either mode, on either device."""
    masked = isinstance(optimizer, MaskedAdam)
    for group in optimizer.param_groups:
        device = group["params"][0].device
        lr = float(group["lr"])
        group["lr"] = torch.tensor(lr, dtype=torch.float32, device=device) if graphed else lr
        group["capturable"] = graphed
        if masked:  # its step() moves the step counts to where its mode keeps them
            continue
        group["fused"], group["foreach"] = True, None
        for p in group["params"]:
            state = optimizer.state.get(p, {})
            if isinstance(state.get("step"), Tensor):  # fused: float32, on the device
                state["step"] = state["step"].to(dtype=torch.float32, device=device)


class GridSchedule:
    """The learning-rate schedule and coarse-to-fine upsampling of one VoxelGrid (`model`)
    trained by Adam (`optimizer`) under `config`: shared by the single-grid experiments."""

    config: Config
    model: VoxelGrid
    optimizer: torch.optim.Adam

    graphed: bool  # steps captured as CUDA graphs (`Experiment.graphed`)

    def learning_rate(self, step: int) -> float:
        return learning_rate(self.config, step)

    def fit_optimizer(self) -> None:
        """After a checkpoint's optimiser state is loaded: Adam as this step mode makes it."""
        fit_optimizer(self.optimizer, self.graphed)

    def begin_step(self, step: int) -> None:
        set_learning_rate(self.optimizer, self.step_learning_rate(step))

    def step_learning_rate(self, step: int) -> float:
        """The learning rate the optimiser uses at `step`."""
        return learning_rate(self.config, step)

    def upsample(self, resolution: tuple[int, int, int]) -> None:
        c = self.config
        if c.train.upsample_moments == "reset":
            self.model.upsample(resolution)
            self.optimizer = make_optimizer(self.model, c, self.graphed)
        else:
            rescale = c.train.upsample_moments == "rescale"
            self.model.upsample(resolution, self.optimizer, rescale_moments=rescale)
