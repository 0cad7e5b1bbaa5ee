"""The positional encoding of the view direction that the colour MLP reads."""

from __future__ import annotations

import torch
from torch import Tensor


def positional_encoding(x: Tensor, frequencies: int) -> Tensor:
    """x: [..., C] -> [..., C * (1 + 2 * frequencies)]: x, sin(2^k x), cos(2^k x)."""
    scales = 2.0 ** torch.arange(frequencies, device=x.device, dtype=x.dtype)
    xb = (x[..., None] * scales).flatten(-2)  # [..., C * frequencies]
    return torch.cat([x, xb.sin(), xb.cos()], dim=-1)
