"""The multiresolution density of a `VoxelNeRF` (`nerf.density_encoding = "multires"`):
instant-ngp's density network, a small MLP over a `grid.MultiresGrid`.

    out = decoder(encoding(points))       # [..., 1 + G]
    sigma = softplus(out[..., 0] + shift)  # the same post-activation as the dense grid
    geometry = out[..., 1:]                # what the colour MLP reads (color_encoding multires)

`MultiresDensity` stands in for the density `VoxelGrid`: the same `forward` (channel 0 is
the raw density), `bounds`, `resolution`, `upsample`, `crop` and `add_`. Its table never
changes shape: the resolution a coarse-to-fine schedule sets is a *virtual* one (it sets the
sample step and the occupancy grid's cells, `values` evaluates the field at its vertices),
and `crop` moves only the box where rays are marched; the table keeps the box it was made
over, whose features are not resampled. It has no total variation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from grid import MultiresGrid, check_inside, lattice

from .grids import triple
from .linear import Linear
from .render import RgbFn, SigmaFn

#: Points per chunk when the whole lattice is evaluated (`values`): 2^18 points of 16 x 2
#: features and a hidden layer of 64 are about 100 MB of activations.
CHUNK = 1 << 18


class MultiresDensity(nn.Module):
    """Raw density and geometry features from an MLP over a multiresolution grid:
    world points `[..., 3]` -> `[..., 1 + geometry]`.

    Args:
        encoding: the `grid.MultiresGrid` (its box is the table's box for good).
        hidden: width of the MLP's one hidden layer (ReLU).
        geometry: features output besides the raw density (0: the raw density alone).
        resolution: the virtual resolution (X, Y, Z) (or an int): the occupancy grid's and
            the sample step's, as a dense grid's would be.
        device: where the MLP and the box live.

    Attributes:
        encoding: the `MultiresGrid`, table `[L, T, F]`.
        decoder: `Linear(L F, hidden)`, ReLU, `Linear(hidden, 1 + geometry)`; the last bias
            starts at zero, so an untrained field has raw density about 0 (alpha_init).
        bounds: buffer `[2, 3]` float32, the box rays are marched in (`crop` moves it).
        resolution: (X, Y, Z), saved in the state dict (`get_extra_state`).
    """

    bounds: Tensor

    def __init__(
        self,
        encoding: MultiresGrid,
        hidden: int,
        geometry: int,
        resolution: int | Sequence[int],
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(hidden, int) or hidden < 1:
            raise ValueError(f"hidden: expected an int >= 1, got {hidden!r}")
        if not isinstance(geometry, int) or geometry < 0:
            raise ValueError(f"geometry: expected an int >= 0, got {geometry!r}")
        self.encoding = encoding
        self.decoder = nn.Sequential(  # bias gradients as products (linear.py)
            Linear(encoding.get_out_dim(), hidden),
            nn.ReLU(inplace=True),
            Linear(hidden, 1 + geometry),
        ).to(device)
        nn.init.zeros_(self.decoder[-1].bias)
        box = encoding.bounds.detach().to(device=device, dtype=torch.float32).clone()
        self.register_buffer("bounds", box)
        self.resolution = triple(resolution)

    @property
    def geometry(self) -> int:
        """G, the geometry features after the raw density."""
        return self.decoder[-1].out_features - 1

    def extra_repr(self) -> str:
        return f"resolution={self.resolution} (virtual), geometry={self.geometry}"

    def get_extra_state(self) -> dict[str, Any]:
        # The virtual resolution travels with the weights, as a VoxelGrid's shape does.
        return {"resolution": list(self.resolution)}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        self.resolution = triple(state["resolution"])

    def forward(self, points: Tensor) -> Tensor:
        """points: [..., 3] world -> [..., 1 + geometry] float32 (channel 0: raw density)."""
        if points.dim() < 1 or points.shape[-1] != 3:
            raise ValueError(f"points: expected shape [..., 3], got {list(points.shape)}")
        features = self.encoding(points.reshape(-1, 3)).float()  # [S, L F]
        out = self.decoder(features)  # [S, 1 + G]
        return out.reshape(*points.shape[:-1], out.shape[-1])  # (-1 fails for S = 0)

    @torch.no_grad()
    def values(self, chunk: int = CHUNK) -> Tensor:
        """The raw density at the vertices of the virtual grid (`resolution` over
        `bounds`, corners on the faces, as a VoxelGrid's voxels and the occupancy grid's
        cells): [X, Y, Z] float32, evaluated `chunk` points at a time."""
        points = lattice(self.bounds, self.resolution).reshape(-1, 3)
        raw = [self(part)[:, 0] for part in points.split(chunk)]
        return torch.cat(raw).reshape(self.resolution)

    def upsample(self, resolution: int | Sequence[int], optimizer: Any = None) -> None:
        """The virtual resolution becomes `resolution`; the table and its optimiser state
        are left as they are (`optimizer` is accepted for VoxelGrid's signature)."""
        self.resolution = triple(resolution)

    @torch.no_grad()
    def crop(
        self, bounds: Sequence[Sequence[float]], resolution: int | Sequence[int], optimizer=None
    ) -> None:
        """Rays are marched in the sub-box `bounds` at the virtual `resolution` from now on;
        the table keeps its own box and features (`optimizer`: accepted, unused)."""
        box = torch.tensor(bounds, dtype=torch.float32, device=self.bounds.device)
        check_inside(box, self.bounds)
        self.bounds.copy_(box)
        self.resolution = triple(resolution)

    @torch.no_grad()
    def add_(self, value: float) -> None:
        """The raw density everywhere plus `value` (as `VoxelGrid.add_` on a density grid):
        added to the output bias of channel 0."""
        self.decoder[-1].bias[0] += value

    def total_variation(self) -> Tensor:
        """None here: a multires density is no grid of voxels (train.tv_weight must be 0)."""
        raise RuntimeError(
            "total_variation: a multires density has none (train.tv_weight = 0 with "
            "nerf.density_encoding = 'multires')"
        )


def shared_fields(
    density: MultiresDensity,
    activate: Callable[[Tensor], Tensor],
    shade: Callable[[Tensor, Tensor], Tensor],
    view_of: Callable[[Tensor, Tensor], Tensor],
    pad: int,
) -> tuple[SigmaFn, RgbFn]:
    """A render's `sigma_fn` and `rgb_fn` when the colour MLP reads the density's geometry
    features: sigma_fn keeps the features of its points [S, G], and rgb_fn takes its
    samples' rows of them (`index` [V]), so a render runs the table and the density MLP
    once, not again over the coloured samples.

    activate: raw density [S] -> density [S]; shade: (features [V, G], view inputs [V, E])
    -> rgb [V, 3]; view_of: (points [V, 3], rays [V]) -> view inputs [V, E]
    (`ViewInput.reader`); pad: the fused renderer's padding ray (the ray count R)."""
    geometry: list[Tensor] = []  # sigma_fn's geometry features [S, G]

    def sigma_fn(points: Tensor) -> Tensor:
        out = density(points)  # [S, 1 + G]
        geometry[:] = [out[:, 1:]]
        return activate(out[:, 0])

    def rgb_fn(points: Tensor, rays: Tensor, index: Tensor) -> tuple[Tensor, Tensor]:
        # The padding samples (ray R, weight 0, colour dropped) all name the last slot:
        # spread them over the rows, or the gather's backward (an accumulating index_put_)
        # adds thousands of zeros into one row, one after another.
        rows = torch.arange(index.shape[0], device=index.device) % max(geometry[0].shape[0], 1)
        features = geometry[0][torch.where(rays == pad, rows, index)]  # [V, G]
        return shade(features, view_of(points, rays)), features

    return sigma_fn, rgb_fn
