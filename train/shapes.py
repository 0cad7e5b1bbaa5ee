"""Analytic shapes and the scalar-field interface shared by the experiments.

A `Target` maps world points `[..., 3]` to scalar values `[...]` (float32, on the points'
device). `Sphere`, `Torus` and `Box` are exact signed distances (negative inside): the
field experiment fits them, the sdf experiment measures against them.
"""

from __future__ import annotations

import torch
from torch import Tensor


class Target:
    """A scalar field over world space."""

    name: str = "target"
    is_sdf: bool = False

    def __call__(self, xyz: Tensor) -> Tensor:
        """xyz: [..., 3] world points -> [...] values."""
        raise NotImplementedError

    def to(self, device: torch.device) -> Target:
        return self

    def surface_points(
        self, n: int, std: float, lo: Tensor, hi: Tensor, gen, rows: slice | None = None
    ) -> Tensor:
        """[n, 3] points near the zero level set (SDFs only), inside the box [lo, hi].

        Uniform points are projected onto the surface along the SDF gradient
        (`p - d(p) * grad d(p)`, exact for a true distance function), then moved by a
        Gaussian offset of standard deviation `std`. `rows` keeps only those of the n
        points (the random numbers of all n are drawn, so `gen` advances the same).
        """
        rows = rows or slice(0, n)
        u = torch.rand(n, 3, generator=gen, device=lo.device)[rows]
        p = (lo + (hi - lo) * u).requires_grad_()
        with torch.enable_grad():
            d = self(p)
            (grad,) = torch.autograd.grad(d.sum(), p)
        grad = grad / grad.norm(dim=-1, keepdim=True).clamp_min(1e-12)
        surface = torch.nan_to_num(p.detach() - d.detach()[:, None] * grad)  # NaN: a kink
        noise = torch.randn(n, 1, generator=gen, device=lo.device)[rows] * std
        return torch.minimum(torch.maximum(surface + noise * grad, lo), hi)


class Sphere(Target):
    name, is_sdf = "sphere", True

    def __init__(self, radius: float, center: list[float]) -> None:
        self.radius, self.center = radius, torch.tensor(center)

    def to(self, device: torch.device) -> Sphere:
        self.center = self.center.to(device)
        return self

    def __call__(self, xyz: Tensor) -> Tensor:
        return (xyz.float() - self.center).norm(dim=-1) - self.radius


class Torus(Target):
    """A torus in the xy-plane (axis z) around `center`."""

    name, is_sdf = "torus", True

    def __init__(self, major_radius: float, minor_radius: float, center: list[float]) -> None:
        self.major, self.minor, self.center = major_radius, minor_radius, torch.tensor(center)

    def to(self, device: torch.device) -> Torus:
        self.center = self.center.to(device)
        return self

    def __call__(self, xyz: Tensor) -> Tensor:
        p = xyz.float() - self.center
        ring = p[..., :2].norm(dim=-1) - self.major
        return torch.stack([ring, p[..., 2]], dim=-1).norm(dim=-1) - self.minor


class Box(Target):
    """An axis-aligned box with half extents `half_size` around `center` (exact SDF)."""

    name, is_sdf = "box", True

    def __init__(self, half_size: list[float], center: list[float]) -> None:
        self.half, self.center = torch.tensor(half_size), torch.tensor(center)

    def to(self, device: torch.device) -> Box:
        self.half, self.center = self.half.to(device), self.center.to(device)
        return self

    def __call__(self, xyz: Tensor) -> Tensor:
        q = (xyz.float() - self.center).abs() - self.half
        outside = q.clamp_min(0).norm(dim=-1)
        inside = q.max(dim=-1).values.clamp_max(0)
        return outside + inside
