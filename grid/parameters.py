"""Parameters given new data in place: what lets `VoxelGrid.upsample`, `crop` and loading
change a grid's resolution while every optimiser and hook keeps the same Parameter."""

from __future__ import annotations

import torch
from torch import Tensor, nn


def replace_data(param: nn.Parameter, data: Tensor) -> None:
    """Give the parameter `param` the tensor `data` (any shape and dtype) in place, keeping
    the Parameter object, so that every optimiser and hook that holds it keeps the live
    one; its gradient is dropped (`param.grad = None`). What `VoxelGrid.upsample` and
    `crop` do to their features; use it for a module of your own that resizes a parameter.

    Examples:
        >>> import torch, grid
        >>> p = torch.nn.Parameter(torch.zeros(2, 3))
        >>> grid.replace_data(p, torch.ones(4, 5))
        >>> p.shape, p.grad
        (torch.Size([4, 5]), None)
    """
    # Autograd caches the parameter's gradient accumulator, with the old shape, for
    # as long as any graph that used it is alive (e.g. last step's `loss`); a plain
    # `.data` swap keeps it and the next backward fails on the shape. set_data drops
    # the cached accumulator when the dtype changes, so pass through another dtype.
    other = torch.float64 if param.dtype != torch.float64 else torch.float32
    param.data = torch.empty(0, dtype=other, device=param.device)
    param.data = data
    param.grad = None
