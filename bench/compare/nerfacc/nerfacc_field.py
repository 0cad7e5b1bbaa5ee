"""The radiance field of bench/compare/nerfacc/bench_nerfacc.py: a dense-grid field in the shape
nerfacc's occupancy-grid example expects (`query_density(x)` for the estimator, `forward(x, d)` for
rendering), on two backends with the same parameters and the same maths.

* density: a 1-channel grid, post-activation as DirectVoxGO and `train.nerf.model.VoxelNeRF`:
  `sigma = softplus(raw + shift) / voxel` (per world unit: nerfacc's intervals are world
  distances; `shift` makes an untrained voxel's alpha over one voxel `alpha_init`);
* colour: a `features`-channel grid and VoxelNeRF's MLP (two hidden layers of `hidden`) on the
  features and the positionally encoded view direction, `rgb = sigmoid(mlp(...))`.

Backends: "ours" keeps each grid as a `grid.VoxelGrid` (`[X, Y, Z, C]`, channels last, our
kernels); "grid_sample" as DirectVoxGO's DenseGrid, a channels-first `[1, C, X, Y, Z]`
Parameter read by `F.grid_sample` with the points flipped to (z, y, x), align_corners=True.
Both start from zeros and `make_field` seeds the MLP, so one seed gives one model on either.

No nerfacc here: the field is plain PyTorch and `grid`, so its parity test needs neither
nerfacc nor a GPU.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import grid
from train.nerf.model.color_mlp import color_mlp
from train.nerf.model.encoding import positional_encoding, view_dim  # VoxelNeRF's default

BACKENDS = ("ours", "grid_sample")


class GridSampleGrid(nn.Module):
    """DirectVoxGO's DenseGrid: `[1, C, X, Y, Z]` read by `F.grid_sample`.

    `forward`: [N, 3] world points -> [N, C] (trilinear, align_corners=True, zeros outside).
    """

    def __init__(self, resolution: int, channels: int, bounds, device=None) -> None:
        super().__init__()
        size = (resolution,) * 3
        self.volume = nn.Parameter(torch.zeros(1, channels, *size, device=device))
        box = torch.tensor(bounds, dtype=torch.float32, device=device)
        self.register_buffer("lo", box[0])
        self.register_buffer("hi", box[1])

    def forward(self, xyz: Tensor) -> Tensor:
        # grid_sample's first coordinate indexes the last axis (Z here): flip to (z, y, x)
        ind = ((xyz - self.lo) / (self.hi - self.lo)).flip(-1) * 2 - 1
        out = F.grid_sample(self.volume, ind.reshape(1, 1, 1, -1, 3), align_corners=True)
        return out.reshape(self.volume.shape[1], -1).t()  # [C, N] -> [N, C]

    def channels_last(self, tensor: Tensor | None = None) -> Tensor:
        """The volume (or a tensor shaped like it, e.g. its `.grad`) as `[X, Y, Z, C]`, a view."""
        return (self.volume if tensor is None else tensor)[0].permute(1, 2, 3, 0)


def make_grid(backend: str, resolution: int, channels: int, bounds, device) -> nn.Module:
    """A zero-initialised grid of `channels` over `bounds` on `backend`."""
    if backend == "ours":
        return grid.VoxelGrid(resolution, channels, bounds, init="zeros", device=device)
    if backend == "grid_sample":
        return GridSampleGrid(resolution, channels, bounds, device=device)
    raise ValueError(f"backend: expected one of {', '.join(BACKENDS)}, got {backend!r}")


def grid_values(module: nn.Module, grad: bool = False) -> Tensor:
    """A grid's parameter (or its gradient, with `grad`) as `[X, Y, Z, C]` (a view)."""
    if isinstance(module, grid.VoxelGrid):
        return module.features.grad if grad else module.features
    return module.channels_last(module.volume.grad if grad else None)


class DenseRadianceField(nn.Module):
    """A dense-grid radiance field over the box `bounds` ((lo xyz), (hi xyz)).

    `query_density(x)`: [N, 3] -> [N, 1] density per world unit (nerfacc's occ_eval_fn and
    sigma_fn read it); `forward(x, d)`: [N, 3], [N, 3] unit directions -> rgb [N, 3] in
    (0, 1), density [N, 1].
    """

    def __init__(
        self,
        backend: str,
        bounds: Sequence[Sequence[float]],
        resolution: int,
        *,
        features: int = 12,
        hidden: int = 128,
        view_frequencies: int = 4,
        alpha_init: float = 1e-2,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        self.backend = backend
        self.density = make_grid(backend, resolution, 1, bounds, device)
        self.color = make_grid(backend, resolution, features, bounds, device)
        self.view_frequencies = view_frequencies
        view = view_dim("frequencies", view_frequencies)
        self.mlp = color_mlp(features, view, hidden, device)  # VoxelNeRF's
        self.shift = math.log(1.0 / (1.0 - alpha_init) - 1.0)
        lo, hi = bounds
        spacings = [(b - a) / (resolution - 1) for a, b in zip(lo, hi, strict=True)]
        self.voxel = math.prod(spacings) ** (1 / 3)

    def query_density(self, x: Tensor) -> Tensor:
        """x: [N, 3] world -> [N, 1] density per world unit."""
        return F.softplus(self.density(x) + self.shift) / self.voxel

    def forward(self, x: Tensor, directions: Tensor) -> tuple[Tensor, Tensor]:
        """x, directions: [N, 3] -> rgb [N, 3], density [N, 1]."""
        views = positional_encoding(directions, self.view_frequencies)
        rgb = torch.sigmoid(self.mlp(torch.cat([self.color(x), views], -1)))
        return rgb, self.query_density(x)

    def param_groups(self, lr_grid: float, lr_mlp: float) -> list[dict]:
        """Adam groups as DirectVoxGO's (and our NeRF's): the grids fast, the MLP slow."""
        grids = [*self.density.parameters(), *self.color.parameters()]
        return [
            {"params": grids, "lr": lr_grid},
            {"params": list(self.mlp.parameters()), "lr": lr_mlp},
        ]


def make_field(
    backend: str, bounds, resolution: int, seed: int, device, **options
) -> DenseRadianceField:
    """The field on `backend`, its MLP drawn from `seed` (the grids start at zero), so both
    backends start from the same parameters."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return DenseRadianceField(backend, bounds, resolution, device=device, **options)


@torch.no_grad()
def copy_field(source: DenseRadianceField, target: DenseRadianceField) -> None:
    """`target`'s parameters set to `source`'s (backends may differ): grids through their
    `[X, Y, Z, C]` views, the MLP as it is."""
    for name in ("density", "color"):
        grid_values(getattr(target, name)).copy_(grid_values(getattr(source, name)))
    target.mlp.load_state_dict(source.mlp.state_dict())
