"""The encodings of the view direction that the colour MLP reads: positional (sines and
cosines at octaves) or real spherical harmonics (instant-ngp's)."""

from __future__ import annotations

import torch
from torch import Tensor

from grid import spherical_harmonics

#: The degree of instant-ngp's view encoding (`grid.spherical_harmonics`: 16 functions).
SH_DEGREE = 4


def positional_encoding(x: Tensor, frequencies: int) -> Tensor:
    """x: [..., C] -> [..., C * (1 + 2 * frequencies)]: x, sin(2^k x), cos(2^k x)."""
    scales = 2.0 ** torch.arange(frequencies, device=x.device, dtype=x.dtype)
    xb = (x[..., None] * scales).flatten(-2)  # [..., C * frequencies]
    return torch.cat([x, xb.sin(), xb.cos()], dim=-1)


def view_dim(kind: str, frequencies: int) -> int:
    """Width of `encode_views`' output for a view encoding `kind` ("frequencies" or "sh")."""
    return SH_DEGREE**2 if kind == "sh" else 3 * (1 + 2 * frequencies)


def encode_views(directions: Tensor, kind: str, frequencies: int) -> Tensor:
    """directions: [..., 3] unit -> [..., view_dim(kind, frequencies)]."""
    if kind == "sh":
        return spherical_harmonics(directions, SH_DEGREE)
    return positional_encoding(directions, frequencies)
