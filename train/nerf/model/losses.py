"""Auxiliary losses of a NeRF render (`VoxelNeRF.render`): DirectVoxGO's fine-stage ones and
a view-consistency penalty."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ..config import NerfConfig


def auxiliary_losses(
    n: NerfConfig,
    model,
    out: dict[str, Any],
    directions: Tensor,
    target: Tensor,
    priors: bool = True,
) -> Tensor | float:
    """The weighted sum of the losses `n` (`[nerf]`) turns on, for a render `out` by `model`
    of rays along `directions` [R, 3] whose pixels have colours `target` [R, 3] (0.0 when
    none is on). priors: whether DirectVoxGO's two (sample colour, entropy) are on at this
    step (`priors_on`)."""
    loss = 0.0
    if n.view_consistency_weight:
        penalty = view_consistency_loss(model, out, directions, n.view_consistency_stride)
        loss = loss + n.view_consistency_weight * penalty
    if priors and n.sample_color_weight:
        loss = loss + n.sample_color_weight * sample_color_loss(out, target)
    if priors and n.entropy_weight:
        loss = loss + n.entropy_weight * transmittance_entropy(out["acc"])
    return loss


def priors_on(n: NerfConfig, step: int) -> bool:
    """Whether `step` is before `n.priors_until` (always when it is 0)."""
    return not 0 < n.priors_until <= step


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


def view_consistency_loss(
    model, out: dict[str, Any], directions: Tensor, stride: int = 1
) -> Tensor:
    """How much the coloured samples' colours depend on the view: each sample's colour
    against the colour MLP's on its same features along the batch's previous ray
    (`directions` rolled by one: another random direction, and no random numbers, so a
    captured step replays it), weight x squared difference summed per ray. Colour that one
    training view wants and the others do not pays it; view effects all the views agree on
    outweigh it. With `stride` k only every k-th coloured sample of the list (sorted by ray,
    so each ray's samples are thinned evenly) pays it, k times over: an estimate of the whole
    loss for 1/k of the second MLP pass (a strided view: static shapes, so it captures)."""
    rolled = directions.roll(1, 0)  # [R, 3]
    other = model.encode_views(rolled)  # [R, E]
    other = torch.cat([other, other.new_zeros(1, other.shape[1])])  # row R: padding samples
    rolled = torch.cat([rolled, rolled.new_zeros(1, 3)])  # [R + 1, 3]
    ray = out["sample_ray"][::stride]  # [V / k]
    views = model.views(out["sample_points"][::stride], rolled[ray], other[ray])  # [V / k, W]
    rgb = model.shade(out["sample_features"][::stride], views)  # [V / k, 3]
    error = (out["sample_rgb"][::stride] - rgb).square().sum(-1)  # [V / k]
    return stride * (out["sample_weight"][::stride] * error).sum() / directions.shape[0]
