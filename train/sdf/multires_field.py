"""The sdf experiment's multiresolution field (`sdf.encoding = "multires"`).

    f(x) = base(x) + decoder(encoding(x))

`base` is a coarse one-channel `VoxelGrid` at `grid.resolution` (32^3: 33k floats, 0.2% of
a 256^3 grid), set by `grid.init` as the dense fit's start is (`points`: the distance to the
nearest point, signed; train/sdf/experiment.py `points_init`), so the field starts with the
right sign everywhere and the coarse shape in place. `encoding` is a `grid.MultiresGrid`
([multires]: L levels, dense below the table size, hashed above) and `decoder` a small MLP
(L * F -> HIDDEN -> 1) whose last layer starts at zero: f starts as the base grid exactly,
and the table and the decoder learn what the coarse grid misses. The activation is
Softplus(beta = 100), smooth, so the eikonal and normal terms' second derivatives flow
through the decoder into the table (the table's own double backward is the op's).

The field has no voxels of its own: its mesh is marching cubes on f sampled at
`resolution` (`bake`), the lattice of the dense fit's final grid.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from grid.multires_grid import MultiresGrid
from grid.optim import Adam
from grid.voxel_grid import VoxelGrid

from ..multires_config import growth_factor

#: Width of the decoder's hidden layer.
HIDDEN = 64
#: Softplus sharpness: close to a ReLU, but with the second derivative the eikonal term needs.
BETA = 100.0
#: Lattice points evaluated at once by `bake`.
BAKE_CHUNK = 1 << 18


class MultiresSdf(nn.Module):
    """f: world points `[..., 3]` -> `[..., 1]` (module docstring).

    Args:
        base: the coarse grid (one channel), trained with the rest.
        encoding: the multiresolution grid over the same box.
        resolution: the lattice `bake` samples f on (the mesh's), (X, Y, Z).

    Attributes:
        resolution: as given; what checkpoints record as the run's resolution.
        bounds: the box `[2, 3]` (the base grid's).
    """

    def __init__(self, base: VoxelGrid, encoding: MultiresGrid, resolution: Sequence[int]) -> None:
        super().__init__()
        if base.features.shape[-1] != 1:
            raise ValueError(f"base: expected a grid of 1 channel, got {base.features.shape[-1]}")
        if len(resolution) != 3 or min(resolution) < 2:
            raise ValueError(f"resolution: expected 3 sizes >= 2, got {list(resolution)}")
        self.base = base
        self.encoding = encoding
        width = encoding.get_out_dim()
        device = encoding.table.device
        self.decoder = nn.Sequential(
            nn.Linear(width, HIDDEN, device=device),
            nn.Softplus(beta=BETA),
            nn.Linear(HIDDEN, 1, device=device),
        )
        with torch.no_grad():  # f starts as the base grid
            self.decoder[2].weight.zero_()
            self.decoder[2].bias.zero_()
        self.resolution = tuple(int(n) for n in resolution)

    @property
    def bounds(self) -> Tensor:
        return self.base.bounds

    def forward(self, xyz: Tensor) -> Tensor:
        """xyz: [..., 3] world points -> f [..., 1], twice differentiable."""
        features = self.encoding(xyz).float()  # [..., L * F]
        return self.base(xyz) + self.decoder(features)

    def parameter_groups(self) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
        """(the base grid's parameters, the table's and the decoder's): trained at
        `train.lr` and `multires.lr`."""
        return list(self.base.parameters()), [
            *self.encoding.parameters(),
            *self.decoder.parameters(),
        ]

    @torch.no_grad()
    def bake(self, chunk: int = BAKE_CHUNK) -> VoxelGrid:
        """f sampled at the nodes of a `resolution` lattice over the box (no graph), as a
        one-channel linear VoxelGrid with border padding, for marching cubes."""
        lo, hi = self.bounds.tolist()
        device = self.bounds.device
        grid = VoxelGrid(
            self.resolution, 1, [lo, hi], init="zeros", padding="border", device=device
        )
        X, Y, Z = self.resolution
        xs, ys, zs = (
            torch.linspace(a, b, n, device=device)
            for a, b, n in zip(lo, hi, self.resolution, strict=True)
        )
        values = grid.features.data.view(X, Y * Z)
        yz = torch.stack(torch.meshgrid(ys, zs, indexing="ij"), dim=-1).reshape(-1, 2)
        rows = max(1, chunk // (Y * Z))  # whole x-slices at a time
        for start in range(0, X, rows):
            x = xs[start : start + rows]  # [r]
            points = torch.cat(
                [x[:, None, None].expand(-1, Y * Z, 1), yz[None].expand(len(x), -1, -1)], dim=-1
            )  # [r, Y * Z, 3]
            values[start : start + len(x)] = self(points)[..., 0].float()
        return grid


def multires_field(config: Any, base: VoxelGrid, resolution: Sequence[int]) -> MultiresSdf:
    """The field of `config`'s [multires] table over `base` (its box and device), meshed
    on a `resolution` lattice."""
    m = config.multires
    encoding = MultiresGrid(
        m.levels,
        m.features,
        1 << m.log2_table_size,
        m.base_resolution,
        growth_factor(m),
        base.bounds.tolist(),
        device=base.features.device,
    )
    return MultiresSdf(base, encoding, resolution)


def multires_optimizer(
    model: MultiresSdf, rates: Sequence[float], config: Any, graphed: bool = False
) -> torch.optim.Adam:
    """Fused Adam over two groups, the base grid at rates[0] and the table and decoder at
    rates[1] (betas `train.betas`, eps 1e-15, instant-ngp's: the table's rows that few points
    touch have tiny second moments). `graphed` (steps captured as CUDA graphs): capturable,
    each group's learning rate a device tensor that `set_group_rates` fills in place."""
    if len(rates) != 2:
        raise ValueError(f"rates: expected 2 learning rates, got {list(rates)}")
    betas = tuple(config.train.betas)
    device = model.bounds.device
    groups = [
        {"params": params, "lr": torch.tensor(rate, dtype=torch.float32, device=device)}
        if graphed
        else {"params": params, "lr": rate}
        for params, rate in zip(model.parameter_groups(), rates, strict=True)
    ]
    return Adam(groups, betas=betas, eps=1e-15, capturable=graphed, fused=True)


def set_group_rates(optimizer: torch.optim.Optimizer, rates: Sequence[float]) -> None:
    """Group i's learning rate = rates[i]: a float assigned, a device tensor filled in place
    (no host synchronisation; a captured step reads the tensor)."""
    if len(rates) != len(optimizer.param_groups):
        raise ValueError(
            f"rates: expected {len(optimizer.param_groups)} learning rates, got {list(rates)}"
        )
    for group, rate in zip(optimizer.param_groups, rates, strict=True):
        if isinstance(group["lr"], Tensor):
            group["lr"].fill_(rate)
        else:
            group["lr"] = rate
