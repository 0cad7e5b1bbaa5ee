"""DirectVoxGO's fine-stage auxiliary losses of a NeRF render (`VoxelNeRF.render`)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .config import NerfConfig


def auxiliary_losses(n: NerfConfig, out: dict[str, Any], target: Tensor) -> Tensor | float:
    """The weighted sum of the losses `n` (`[nerf]`) turns on, for a render `out` of rays
    whose pixels have colours `target` [R, 3] (0.0 when none is on)."""
    loss = 0.0
    if n.sample_color_weight:
        loss = loss + n.sample_color_weight * sample_color_loss(out, target)
    if n.entropy_weight:
        loss = loss + n.entropy_weight * transmittance_entropy(out["acc"])
    return loss


def sample_color_loss(out: dict[str, Any], target: Tensor) -> Tensor:
    """Per-sample colour loss of a render (`VoxelNeRF.render`) against its pixels' colours
    `target` [R, 3]: sum of weight x squared colour error over the coloured samples, per ray."""
    padded = torch.cat([target, target.new_zeros(1, 3)])  # row R: the padding samples' ray
    error = (out["sample_rgb"] - padded[out["sample_ray"]]).square().sum(-1)  # [V]
    return (out["sample_weight"] * error).sum() / target.shape[0]


def transmittance_entropy(acc: Tensor) -> Tensor:
    """Mean binary entropy of the transmittance left at each ray's end, 1 - acc [R]."""
    p = (1 - acc).clamp(1e-6, 1 - 1e-6)
    return (torch.special.entr(p) + torch.special.entr(1 - p)).mean()  # entr(x) = -x log x
