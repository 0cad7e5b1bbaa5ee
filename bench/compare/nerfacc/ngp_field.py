"""instant-ngp's radiance field as nerfacc's `examples/radiance_fields/ngp.py` builds it, with the
hash encoding from torch-ngp's `gridencoder` in place of tiny-cuda-nn: an anchor built from other
projects' public parts, to run beside ours on our scenes (issue 61: is +1 dB over DirectVoxGO there
to be had on them?). Never imported by the library.

* positions: the box mapped to [-1, 1]^3 (points not strictly inside get zero density);
* encoding: 16 levels x 2 features, 2^19 rows a level, 16 to `max_resolution` cells over the box
  (the example's per-level scale 1.4473 reaches 4096), instant-ngp's hash;
* density MLP: one hidden layer of 64 (ReLU) -> 1 + 15 geometry features; density
  `trunc_exp(raw - 1)` (exp forward, its gradient's input clamped at 15, as the example's);
* colour MLP: the view direction in real spherical harmonics of 4 bands (16 values) and the 15
  features -> two hidden layers of 64 (ReLU) -> rgb, sigmoid.
* MLPs as tiny-cuda-nn's fully fused ones: no biases, Xavier-uniform weights.

The encoding: `encoder` is torch-ngp's `GridEncoder` (CUDA; `bench.ops.multires.build_ngp`
builds it from its source), or, for the CPU test, `ReferenceHashEncoding`: `grid.reference`'s
pure-PyTorch specification of the same hash (labelled a stand-in in the output).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from grid import reference, spherical_harmonics  # tiny-cuda-nn's degree 4

LEVELS, FEATURES, LOG2_T, BASE = 16, 2, 19, 16
GEOMETRY = 15


class _TruncExp(torch.autograd.Function):
    """exp, its gradient computed with the input clamped at 15 (the example's trunc_exp)."""

    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:
        ctx.save_for_backward(x)
        return torch.exp(x)

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        (x,) = ctx.saved_tensors
        return grad * torch.exp(x.clamp(max=15))


def resolutions(max_resolution: int) -> list[int]:
    """The levels' cells a side, 16 to `max_resolution` geometrically (the example's scale)."""
    growth = math.exp((math.log(max_resolution) - math.log(BASE)) / (LEVELS - 1))
    return [math.floor(BASE * growth**level) for level in range(LEVELS)]


class ReferenceHashEncoding(nn.Module):
    """The CPU stand-in for torch-ngp's encoder: `grid.reference.multires` on a table of the
    same shape. forward: [N, 3] in [-1, 1] -> [N, LEVELS * FEATURES]."""

    def __init__(self, max_resolution: int, log2_table: int = LOG2_T, device=None) -> None:
        super().__init__()
        self.resolutions = resolutions(max_resolution)
        shape = (LEVELS, 2**log2_table, FEATURES)
        self.embeddings = nn.Parameter(torch.empty(shape, device=device).uniform_(-1e-4, 1e-4))

    def forward(self, x: Tensor) -> Tensor:
        return reference.multires(self.embeddings, x, self.resolutions)


def mlp(sizes: list[int]) -> nn.Sequential:
    """Linear layers of `sizes` without biases (tiny-cuda-nn's fully fused MLP), ReLU between
    them, none after the last; Xavier-uniform weights."""
    layers: list[nn.Module] = []
    for a, b in zip(sizes[:-1], sizes[1:], strict=True):
        linear = nn.Linear(a, b, bias=False)
        nn.init.xavier_uniform_(linear.weight)
        layers += [linear, nn.ReLU()]
    return nn.Sequential(*layers[:-1])


class NgpRadianceField(nn.Module):
    """instant-ngp's field over the box `aabb` ([x0, y0, z0, x1, y1, z1]).

    `query_density(x)`: [N, 3] world -> [N, 1]; `forward(x, d)`: [N, 3], [N, 3] unit
    directions -> rgb [N, 3], density [N, 1] (nerfacc's example's interface)."""

    def __init__(self, aabb, encoder: nn.Module, device=None) -> None:
        super().__init__()
        box = torch.tensor(aabb, dtype=torch.float32, device=device)
        self.register_buffer("lo", box[:3])
        self.register_buffer("hi", box[3:])
        self.encoder = encoder
        self.base = mlp([LEVELS * FEATURES, 64, 1 + GEOMETRY]).to(device)
        self.head = mlp([16 + GEOMETRY, 64, 64, 3]).to(device)

    def _geometry(self, x: Tensor) -> tuple[Tensor, Tensor]:
        unit = (x - self.lo) / (self.hi - self.lo) * 2 - 1  # the box -> [-1, 1]^3
        inside = (unit.abs() < 1).all(dim=-1, keepdim=True)
        out = self.base(self.encoder(unit).float())
        density = _TruncExp.apply(out[:, :1] - 1) * inside
        return density, out[:, 1:]

    def query_density(self, x: Tensor) -> Tensor:
        return self._geometry(x)[0]

    def forward(self, x: Tensor, directions: Tensor) -> tuple[Tensor, Tensor]:
        density, features = self._geometry(x)
        rgb = torch.sigmoid(self.head(torch.cat([spherical_harmonics(directions), features], -1)))
        return rgb, density

    def param_groups(self, weight_decay: float) -> list[dict]:
        """The example's one Adam group: everything at the same rate and weight decay."""
        return [{"params": list(self.parameters()), "weight_decay": weight_decay}]
