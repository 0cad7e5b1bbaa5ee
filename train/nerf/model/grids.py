"""The grids of a `VoxelNeRF`: the library's `VoxelGrid` ("native"), or `ChannelsFirstGrid`
("grid_sample"), DirectVoxGO's layout sampled by `F.grid_sample`, the baseline the native
backend is compared with step for step."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from grid import VoxelGrid, check_inside, lattice, replace_data

from ..choices import BACKENDS


class ChannelsFirstGrid(nn.Module):
    """A `VoxelGrid` look-alike whose parameter is `[1, F, Z, Y, X]`, sampled by
    `F.grid_sample` (bilinear, align_corners=True, zero padding): DirectVoxGO's DenseGrid.

    Same init, `forward` ([..., 3] world points -> [..., F]), `total_variation` and
    `upsample(resolution, optimizer)` as `VoxelGrid`.
    """

    def __init__(
        self,
        resolution: tuple[int, int, int],
        features: int,
        bounds: Sequence[Sequence[float]],
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        x, y, z = resolution
        self.features = nn.Parameter(torch.zeros(1, features, z, y, x, device=device))
        self.register_buffer("bounds", torch.tensor(bounds, dtype=torch.float32, device=device))

    @property
    def resolution(self) -> tuple[int, int, int]:
        _, _, z, y, x = self.features.shape
        return (x, y, z)

    def normalize(self, xyz: Tensor) -> Tensor:
        lo, hi = self.bounds[0], self.bounds[1]
        return (xyz - lo) * (2.0 / (hi - lo)) - 1.0

    def forward(self, xyz: Tensor) -> Tensor:
        """xyz: [..., 3] world points -> [..., F]."""
        shape = xyz.shape[:-1]
        coords = self.normalize(xyz).reshape(1, 1, 1, -1, 3)
        out = F.grid_sample(self.features, coords, mode="bilinear", align_corners=True)
        return out.reshape(self.features.shape[1], -1).t().reshape(*shape, -1)  # [..., F]

    def total_variation(self) -> Tensor:
        f = self.features
        dz = (f[:, :, 1:] - f[:, :, :-1]).square().mean()
        dy = (f[:, :, :, 1:] - f[:, :, :, :-1]).square().mean()
        dx = (f[..., 1:] - f[..., :-1]).square().mean()
        return (dx + dy + dz) / 3

    @torch.no_grad()
    def upsample(self, resolution: tuple[int, int, int], optimizer=None) -> None:
        """Trilinear resample to `resolution` (X, Y, Z); Adam moments resampled likewise."""
        x, y, z = resolution

        def resize(t: Tensor) -> Tensor:
            out = F.interpolate(t, size=(z, y, x), mode="trilinear", align_corners=True)
            return out.contiguous()

        self._resize(resize, optimizer)

    @torch.no_grad()
    def add_(self, value: float) -> None:
        """`VoxelGrid.add_`: `value` added to every voxel's features in place."""
        self.features.add_(value)

    @torch.no_grad()
    def crop(self, bounds: Sequence[Sequence[float]], resolution, optimizer=None) -> None:
        """`VoxelGrid.crop`: resample onto a sub-box, with F.grid_sample."""
        box = torch.tensor(bounds, dtype=torch.float32, device=self.bounds.device)
        check_inside(box, self.bounds)
        points = self.normalize(lattice(box, triple(resolution)))  # [X', Y', Z', 3]
        coords = points.permute(2, 1, 0, 3)[None]  # [1, Z', Y', X', 3]

        def resize(t: Tensor) -> Tensor:
            out = F.grid_sample(t, coords, align_corners=True, padding_mode="border")
            return out.contiguous()  # [1, F, Z', Y', X']

        self._resize(resize, optimizer)
        self.bounds.copy_(box)

    def _resize(self, resize, optimizer) -> None:
        """The features and the optimiser's moments through `resize`, in place (the
        Parameter object stays)."""
        _resize_moments(optimizer, self.features, resize)
        replace_data(self.features, resize(self.features.data))


def make_grid(
    backend: str,
    resolution: tuple[int, int, int],
    features: int,
    bounds: Sequence[Sequence[float]],
    device: torch.device | str | None,
) -> nn.Module:
    """A zero-initialised grid of `features` channels on the given backend."""
    if backend == "native":
        return VoxelGrid(resolution, features, bounds, init="zeros", device=device)
    if backend == "grid_sample":
        return ChannelsFirstGrid(resolution, features, bounds, device=device)
    raise ValueError(f"backend: expected one of {', '.join(BACKENDS)}, got {backend!r}")


def triple(value: int | Sequence[int]) -> tuple[int, int, int]:
    """An int or (X, Y, Z) -> (X, Y, Z) of ints."""
    if isinstance(value, int):
        return (value, value, value)
    x, y, z = value
    return (int(x), int(y), int(z))


def _resize_moments(optimizer, param: Tensor, resize) -> None:
    """The optimiser's state tensors shaped like `param` through `resize` (second moments,
    names ending in `_sq`, kept non-negative)."""
    state = {} if optimizer is None else optimizer.state.get(param, {})
    for key, value in state.items():
        if isinstance(value, Tensor) and value.shape == param.shape:
            state[key] = resize(value).clamp_(min=0) if key.endswith("_sq") else resize(value)


def mean_spacing(bounds: Sequence[Sequence[float]], resolution: Sequence[int]) -> float:
    """Geometric mean of the voxel spacings of a `resolution` grid (corners on the faces)
    over the box `bounds`, in plain floats: called every step, where CPU tensors cost tens
    of microseconds of host time."""
    lo, hi = bounds
    spacings = [(b - a) / (n - 1) for a, b, n in zip(lo, hi, resolution, strict=True)]
    return math.prod(spacings) ** (1 / 3)
