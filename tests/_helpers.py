"""Shared helpers of the op tests."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

DEVICES = ["cpu", pytest.param("cuda", marks=needs_cuda)]


def grid_sample(features: torch.Tensor, points: torch.Tensor, align_corners: bool, padding: str):
    """F.grid_sample on a channels-last grid, written as in the operator contract."""
    out = F.grid_sample(
        features.permute(3, 2, 1, 0)[None],
        points.reshape(1, 1, 1, -1, 3),
        mode="bilinear",
        padding_mode=padding,
        align_corners=align_corners,
    )
    return out.reshape(features.shape[3], -1).T.reshape(*points.shape[:-1], features.shape[3])


def random_points(shape, device, dtype=torch.float32, spread=1.3, generator=None) -> torch.Tensor:
    """Uniform points in [-spread, spread]^3: inside and outside the grid."""
    return (torch.rand(*shape, 3, device=device, dtype=dtype, generator=generator) * 2 - 1) * spread


def ray_points(n_rays: int, n_samples: int, seed: int, device) -> torch.Tensor:
    """[n_rays * n_samples, 3], ray by ray (as a NeRF batch): each ray starts outside the grid
    (radius 1.6), crosses it through a random point of [-0.9, 0.9]^3 and leaves it again; its
    samples are evenly spaced along it, so consecutive points share cell corners."""
    gen = torch.Generator().manual_seed(seed)
    direction = torch.randn(n_rays, 3, generator=gen)
    origin = direction / direction.norm(dim=1, keepdim=True) * 1.6
    aim = (torch.rand(n_rays, 3, generator=gen) * 2 - 1) * 0.9
    t = torch.linspace(0, 2, n_samples)
    points = origin[:, None] + t[None, :, None] * (aim - origin)[:, None]
    return points.reshape(-1, 3).to(device)


def assert_close(actual: torch.Tensor, expected: torch.Tensor, rtol=1e-5, atol=1e-5) -> None:
    torch.testing.assert_close(actual, expected.to(actual.dtype), rtol=rtol, atol=atol)


class Record(TorchDispatchMode):
    """Records the name of every op dispatched inside `with Record() as rec:` in `rec.ops`."""

    def __init__(self):
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))
