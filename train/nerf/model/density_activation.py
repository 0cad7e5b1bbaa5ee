"""Raw density -> density (`nerf.density_activation`): DirectVoxGO's softplus(raw + shift), or
instant-ngp's exp(raw + shift) whose gradient's exponent is capped at 15 so that a large raw
density cannot blow up the step (torch-ngp's `trunc_exp`). The shift puts an untrained field
(raw 0) at `alpha_init` over one voxel of the final grid."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

#: The forward's cap on the exponent: exp(30) ~ 1e13 is opaque over any sample step, and
#: float32 stays finite (exp overflows past ~88).
FORWARD_CAP = 30.0
#: The backward's cap: the gradient is exp(min(x, 15)) * upstream.
GRADIENT_CAP = 15.0


class _TruncExp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:
        ctx.save_for_backward(x)
        return torch.exp(x.clamp(max=FORWARD_CAP))

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        (x,) = ctx.saved_tensors
        return grad * torch.exp(x.clamp(max=GRADIENT_CAP))


def trunc_exp(x: Tensor) -> Tensor:
    """x: [...] -> exp(min(x, 30)) [...], differentiable once with gradient exp(min(x, 15))."""
    return _TruncExp.apply(x)


def density_shift(activation: str, alpha_init: float) -> float:
    """The shift for which `activate(0)` over an interval of 1 gives alpha `alpha_init`:
    activate(shift) = -log(1 - alpha_init)."""
    if activation == "exp":
        return math.log(-math.log1p(-alpha_init))
    return math.log(1.0 / (1.0 - alpha_init) - 1.0)  # softplus(shift) = -log(1 - a)


def activate(raw: Tensor, shift: float, activation: str) -> Tensor:
    """Raw density [...] -> density [...]: softplus(raw + shift), or trunc_exp(raw + shift)
    with `activation` "exp"."""
    if activation == "exp":
        return trunc_exp(raw + shift)
    return F.softplus(raw + shift)


def raw_density(sigma: float, shift: float, activation: str) -> float:
    """The raw density whose density is `sigma` > 0 (`activate`'s inverse)."""
    if activation == "exp":
        return math.log(sigma) - shift
    return sigma + math.log(-math.expm1(-sigma)) - shift  # softplus^-1(sigma) - shift
