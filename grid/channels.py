"""Between `F.grid_sample`'s channels-first volumes and this library's channels-last grids.

A model written for `F.grid_sample` keeps a `[1, C, X, Y, Z]` volume and flips its points to
(z, y, x), because grid_sample's first coordinate indexes the last axis. `grid.sample` reads
`[X, Y, Z, C]` with points as (x, y, z). The two are one tensor seen two ways: a
`[1, C, X, Y, Z]` tensor stored in `torch.channels_last_3d` memory *is* a contiguous
`[X, Y, Z, C]` grid. So a port keeps its parameter, its shape, its optimiser and its
indexing, stores the volume channels last, and samples `channels_last(volume)` with its
points unflipped (docs/porting.md walks through DirectVoxGO's grid).
"""

from __future__ import annotations

from torch import Tensor


def channels_last(volume: Tensor) -> Tensor:
    """A channels-first volume as the `[X, Y, Z, C]` grid `grid.sample` reads, without a copy.

    Args:
        volume: [1, C, X, Y, Z] or [C, X, Y, Z], as `F.grid_sample` takes it (any strides).

    Returns:
        [X, Y, Z, C], a view of `volume` (gradients flow back to it). Contiguous, and so
        sampled without a copy, when `volume` is stored channels last
        (`volume.contiguous(memory_format=torch.channels_last_3d)` for [1, C, X, Y, Z]);
        from a channels-first (contiguous) volume `grid.sample` copies it at every call.

    Examples:
        >>> import torch
        >>> import grid
        >>> volume = torch.zeros(1, 8, 16, 12, 20)  # [1, C, X, Y, Z], as F.grid_sample takes it
        >>> volume = volume.contiguous(memory_format=torch.channels_last_3d)
        >>> features = grid.channels_last(volume)  # [X, Y, Z, C]
        >>> features.shape, features.is_contiguous(), features.data_ptr() == volume.data_ptr()
        (torch.Size([16, 12, 20, 8]), True, True)
    """
    if not isinstance(volume, Tensor):
        raise TypeError(f"volume: expected a tensor, got {type(volume).__name__}")
    if volume.dim() == 5:
        if volume.shape[0] != 1:
            raise ValueError(
                f"volume: expected [1, C, X, Y, Z] or [C, X, Y, Z], got a batch of "
                f"{volume.shape[0]} volumes (shape {tuple(volume.shape)})"
            )
        volume = volume.squeeze(0)  # a view in the backward too (select's copies)
    if volume.dim() != 4:
        raise ValueError(
            f"volume: expected [1, C, X, Y, Z] or [C, X, Y, Z], got shape {tuple(volume.shape)}"
        )
    return volume.permute(1, 2, 3, 0)


def channels_first(features: Tensor) -> Tensor:
    """A channels-last grid as the `[1, C, X, Y, Z]` volume `F.grid_sample`, `F.interpolate`
    and `conv3d` take, without a copy.

    Args:
        features: [X, Y, Z, C] (a `VoxelGrid`'s `features`, for one).

    Returns:
        [1, C, X, Y, Z], a view of `features` (gradients flow back to it); in
        `torch.channels_last_3d` memory when `features` is contiguous. Sample it with
        `F.grid_sample` at points flipped to (z, y, x); `channels_last` undoes it.

    Examples:
        >>> import torch
        >>> import grid
        >>> features = torch.zeros(16, 12, 20, 8)  # [X, Y, Z, C], a VoxelGrid's layout
        >>> volume = grid.channels_first(features)  # [1, C, X, Y, Z], a view
        >>> volume.shape, volume.is_contiguous(memory_format=torch.channels_last_3d)
        (torch.Size([1, 8, 16, 12, 20]), True)
        >>> grid.channels_last(volume).equal(features)  # and back
        True
    """
    if not isinstance(features, Tensor):
        raise TypeError(f"features: expected a tensor, got {type(features).__name__}")
    if features.dim() != 4:
        raise ValueError(f"features: expected [X, Y, Z, C], got shape {tuple(features.shape)}")
    return features.permute(3, 0, 1, 2).unsqueeze(0)
