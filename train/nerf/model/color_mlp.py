"""The colour MLP of a `VoxelNeRF`: its input (the colour features and the encoded view
direction), its two hidden layers and its raw output (before the sigmoid)."""

from __future__ import annotations

import torch
from torch import nn

from .linear import Linear


def color_mlp(
    features: int, view_dim: int, hidden: int, device: torch.device | str | None
) -> nn.Sequential:
    """The colour MLP: [features, the view direction's encoding of `view_dim` values] -> 3
    raw colours (before the sigmoid), two hidden ReLU layers of `hidden`, output bias zero."""
    mlp = nn.Sequential(  # bias gradients as products (train/nerf/model/linear.py)
        Linear(features + view_dim, hidden),
        nn.ReLU(inplace=True),
        Linear(hidden, hidden),
        nn.ReLU(inplace=True),
        Linear(hidden, 3),
    ).to(device)
    nn.init.zeros_(mlp[-1].bias)
    return mlp
