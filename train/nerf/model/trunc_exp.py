"""instant-ngp's density activation: exp(x), whose gradient's exponent is capped at 15 so that a
large raw density cannot blow up the step (torch-ngp's `trunc_exp`)."""

from __future__ import annotations

import torch
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
