"""`Linear`: `nn.Linear` whose bias gradient is a matrix product, not a column sum.

The colour MLP runs on every coloured sample of a batch (hundreds of thousands of rows). The
gradient of a bias is the column sum of the output's gradient, [V, O] -> [O]; PyTorch's
reduction over the rows of a bfloat16 [V, 128] took 0.13 ms on an H100, twice a NeRF step
(0.26 ms of a 2.9 ms step, bench/NOTES.md, N1 kernels). The same sum as ones [1, V] @ grad
is one GEMM at memory speed.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class _LinearFunction(torch.autograd.Function):
    """y = x @ weight^T + bias, in the autocast dtype where autocast is on (as nn.Linear)."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
        device = x.device.type
        dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else x.dtype
        xc, wc, bc = x.to(dtype), weight.to(dtype), bias.to(dtype)
        ctx.save_for_backward(xc, wc)
        ctx.dtypes = (x.dtype, weight.dtype, bias.dtype)
        with torch.autocast(device, enabled=False):
            return torch.addmm(bc, xc, wc.t())

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor | None, Tensor, Tensor]:
        xc, wc = ctx.saved_tensors
        x_dtype, w_dtype, b_dtype = ctx.dtypes
        grad = grad.to(wc.dtype)
        grad_x = (grad @ wc).to(x_dtype) if ctx.needs_input_grad[0] else None
        grad_w = (grad.t() @ xc).to(w_dtype)
        grad_b = (grad.new_ones(1, grad.shape[0]) @ grad)[0].to(b_dtype)
        return grad_x, grad_w, grad_b


class Linear(nn.Linear):
    """`nn.Linear` with a bias (the same parameters, names and values) for inputs [V, in]:
    the same output and gradients, the bias's gradient computed as ones @ grad."""

    def __init__(self, in_features: int, out_features: int, device=None) -> None:
        super().__init__(in_features, out_features, bias=True, device=device)

    def forward(self, x: Tensor) -> Tensor:
        """x: [V, in_features] -> [V, out_features]."""
        if x.dim() != 2:
            raise ValueError(
                f"Linear: x: expected shape [V, {self.in_features}], got {list(x.shape)}"
            )
        return _LinearFunction.apply(x, self.weight, self.bias)
