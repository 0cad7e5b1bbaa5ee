"""Reflected view directions (`nerf.reflected_views`, after Ref-NeRF's reparameterisation):
besides the view direction, the colour MLP reads each sample's view direction mirrored about
the density's normal there, and the cosine between them. A chrome surface's colour is then
one function of the reflected direction (its environment) shared by every point, rather
than a different function of the view at each point. The view itself stays an input: the
normals of a voxel grid are coarse, and with the reflected direction alone (Ref-NeRF's
choice) the CPU-size chrome cow ended 1.9 dB lower (bench/notes/nerf.md).

The normals are the raw density grid's central differences after a 3^3 box average
(`density_gradient`, refreshed at the occupancy grid's cadence), sampled trilinearly and
normalised softly: where the density is flat (empty space, deep inside) the normal fades to
zero and the reflected direction to the view itself. They carry no gradient: the colour
loss does not reshape the geometry through them, and the step needs no double backward.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import grid

#: Soft normalisation of the raw density's gradient (raw units per voxel): a gradient much
#: smaller than this gives a short normal, which fades the reflection out.
FLAT = 0.1


class NormalField(nn.Module):
    """The raw density's gradient on a grid over the density's box, `values` [X, Y, Z, 3] in
    raw units per voxel (not saved: `refresh` recomputes it from the density)."""

    def __init__(self, backend: str, device: torch.device | str | None = None) -> None:
        super().__init__()
        self.backend = backend
        self.register_buffer("values", torch.zeros(2, 2, 2, 3, device=device), persistent=False)
        self.register_buffer("bounds", torch.zeros(2, 3, device=device), persistent=False)

    @torch.no_grad()
    def refresh(self, raw: Tensor, bounds: Tensor) -> None:
        """raw: [X, Y, Z] raw density at the vertices of `bounds` [2, 3] (align_corners).
        In place when the shape is unchanged, so a captured step reads the new values."""
        if raw.dtype != torch.float64:  # half-precision grids: the normals in float32
            raw = raw.float()
        gradient = density_gradient(raw)  # [X, Y, Z, 3]
        if gradient.shape != self.values.shape or gradient.dtype != self.values.dtype:
            self.values = gradient.contiguous()
        else:
            self.values.copy_(gradient)
        self.bounds.copy_(bounds.to(self.bounds))

    def forward(self, points: Tensor) -> Tensor:
        """points: [V, 3] world -> [V, 3] outward unit normals, shorter where the density
        is flat (zero outside the box)."""
        g = self.sample(points.detach().to(self.values.dtype)).to(points.dtype)  # [V, 3]
        length = (g.square().sum(-1, keepdim=True) + FLAT**2).sqrt()
        return -g / length

    def sample(self, points: Tensor) -> Tensor:
        """points: [V, 3] world -> [V, 3] trilinear gradient, as the density's backend.
        The box is mapped here, on the device: `grid.sample`'s `bounds` are read on the
        host, which a captured step can neither do nor see change (`nerf.fit_box`)."""
        lo, hi = self.bounds
        p = (points - lo) * (2 / (hi - lo)) - 1  # [V, 3] in [-1, 1]
        if self.backend == "native":
            return grid.sample(self.values, p)
        out = F.grid_sample(
            self.values.permute(3, 2, 1, 0)[None], p.reshape(1, 1, 1, -1, 3), align_corners=True
        )
        return out.reshape(3, -1).t()


def density_gradient(raw: Tensor) -> Tensor:
    """raw: [X, Y, Z] -> [X, Y, Z, 3], its central differences (raw units per voxel) after a
    3 x 3 x 3 box average: a voxel grid's surface is a voxel or two thick, and the averaged
    normals turned the CPU-size chrome cow's +0.37 dB into +0.60 (bench/notes/nerf.md)."""
    smooth = F.avg_pool3d(raw[None, None], 3, stride=1, padding=1, count_include_pad=False)
    return torch.stack(torch.gradient(smooth[0, 0]), dim=-1)


def reflect(directions: Tensor, normals: Tensor) -> tuple[Tensor, Tensor]:
    """directions: [V, 3] unit (into the scene), normals: [V, 3] of length <= 1 -> (the
    directions mirrored about the normals [V, 3], unit where nonzero; cos [V, 1], the
    cosine between the normal and the way back to the eye, 0 where the normal is zero)."""
    dot = (directions * normals).sum(-1, keepdim=True)  # [V, 1]
    reflected = directions - 2 * dot * normals
    return F.normalize(reflected, dim=-1), -dot
