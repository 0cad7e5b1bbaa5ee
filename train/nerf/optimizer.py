"""The nerf experiment's optimiser: its parameter groups (grids and tables, MLPs, appearance
codes), Adam or DirectVoxGO's masked Adam, the learning rates' decay, and the multires
tables' levels switched on coarse to fine (`multires.level_every`)."""

from __future__ import annotations

import torch
from torch import nn

from grid import Adam, MaskedAdam, MultiresGrid

from ..config import Config
from ..multires_config import NGP_BETAS, NGP_EPS, active_levels
from .model.multires_fields import MultiresDensity
from .model.voxel_nerf import VoxelNeRF


def param_groups(
    config: Config, model: VoxelNeRF, appearance: nn.Module | None
) -> tuple[list[dict], list[bool]]:
    """The parameter groups, in order: the density (grid, or multires table and its MLP), the
    colour (grid, or multires table; none when the colour reads the density's geometry
    features), the colour MLP, the appearance codes; and for each whether it is a grid or
    table (`nerf.optimizer = "masked_adam"` masks those). The multires groups take
    instant-ngp's Adam (`multires.lr`, betas (0.9, 0.99), eps 1e-15); the MLPs
    `nerf.mlp_weight_decay`."""
    n, m, lr = config.nerf, model, config.multires.lr

    def group(params: list, rate: float, **options) -> dict:
        return {"params": params, "lr": rate, "base_lr": rate, **options}

    ngp = {"betas": NGP_BETAS, "eps": NGP_EPS}
    decay = {"weight_decay": n.mlp_weight_decay}
    groups, grids = [], []
    if isinstance(m.density, MultiresDensity):
        groups += [group([m.density.encoding.table], lr, **ngp)]
        groups += [group(list(m.density.decoder.parameters()), lr, **ngp, **decay)]
        grids += [True, False]
    else:
        groups += [group([m.density.features], n.lr_density)]
        grids += [True]
    if isinstance(m.color, MultiresGrid):
        groups += [group([m.color.table], lr, **ngp)]
        grids += [True]
    elif m.color is not None:
        groups += [group([m.color.features], n.lr_color)]
        grids += [True]
    groups += [group(list(m.mlp.parameters()), n.lr_mlp, **decay)]
    grids += [False]
    if appearance is not None:
        groups += [appearance.group(n.lr_appearance)]
        grids += [False]
    return groups, grids


def make_optimizer(
    config: Config,
    model: VoxelNeRF,
    appearance: nn.Module | None,
    graphed: bool,
    device: torch.device,
) -> torch.optim.Optimizer:
    """`nerf.optimizer` over `param_groups`; `graphed` (steps captured as CUDA graphs):
    capturable, each group's learning rate a device tensor that `begin_step` fills in place."""
    groups, grids = param_groups(config, model, appearance)
    betas = tuple(config.train.betas)
    if graphed:
        for group in groups:
            group["lr"] = torch.tensor(group["lr"], dtype=torch.float32, device=device)
    if config.nerf.optimizer == "masked_adam":  # the grids masked, MLPs and codes dense as Adam
        for group, is_grid in zip(groups, grids, strict=True):
            if not is_grid:
                group["skip_zero_grad"] = False
        return MaskedAdam(groups, betas=betas, capturable=graphed)
    # fused on the CPU too: one threaded pass per parameter (grid_schedule.make_optimizer)
    return Adam(groups, betas=betas, fused=True, capturable=graphed)


def lr_factor(config: Config, step: int) -> float:
    """Every learning rate's factor at `step`: `nerf.lr_decay` reached at the last step, or
    at `nerf.lr_decay_steps` if that is earlier (exponential)."""
    n, last = config.nerf, max(1, config.train.steps - 1)
    return n.lr_decay ** (step / min(last, n.lr_decay_steps or last))


def set_levels(config: Config, model: VoxelNeRF, step: int) -> None:
    """The model's multires tables (the density's, the colour's) with the levels
    `multires.level_every` switches on by `step` (all of them by default)."""
    count = active_levels(config.multires, step)
    tables = [model.density.encoding] if isinstance(model.density, MultiresDensity) else []
    tables += [model.color] if isinstance(model.color, MultiresGrid) else []
    for table in tables:
        if table.active_levels != count:
            table.set_active_levels(count)
