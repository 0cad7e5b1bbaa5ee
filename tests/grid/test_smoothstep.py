"""Smoothstep interpolation: agreement with the reference, the C1 property, and the API."""

from __future__ import annotations

import pytest
import torch

import grid
from grid import reference
from tests._helpers import DEVICES, needs_cuda, random_points


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    ("dtype", "tol"),
    [(torch.float64, 1e-12), (torch.float32, 1e-5), (torch.float16, 1e-2), (torch.bfloat16, 5e-2)],
)
@pytest.mark.parametrize("padding", ["zeros", "border"])
@pytest.mark.parametrize("align_corners", [True, False])
@pytest.mark.parametrize("channels", [1, 3, 8, 12])
def test_matches_reference(device, dtype, tol, padding, align_corners, channels):
    gen = torch.Generator(device=device).manual_seed(channels)
    features = torch.randn(7, 4, 9, channels, device=device, generator=gen).to(dtype)
    point_dtype = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    points = random_points((2, 150), device, point_dtype, spread=1.2, generator=gen)
    grad_out = torch.randn(2, 150, channels, device=device, generator=gen).to(dtype)
    kwargs = dict(align_corners=align_corners, padding=padding, interpolation="smoothstep")

    f, p = features.clone().requires_grad_(), points.clone().requires_grad_()
    out = grid.sample(f, p, **kwargs)
    out.backward(grad_out)
    fr = features.double().requires_grad_()
    pr = points.double().requires_grad_()
    want = reference.sample(fr, pr, align_corners, padding, "smoothstep")
    want.backward(grad_out.double())
    torch.testing.assert_close(out.double(), want, rtol=tol, atol=tol)
    torch.testing.assert_close(p.grad.double(), pr.grad, rtol=tol, atol=tol * 10)
    grad_tol = 1e-1 if dtype == torch.bfloat16 else tol  # atomics accumulate in bf16
    torch.testing.assert_close(f.grad.double(), fr.grad, rtol=grad_tol, atol=grad_tol)


def test_weights_are_the_smoothstep_of_the_position():
    """At position t along x in one cell, the value is f0 + s(t) (f1 - f0), s = t^2 (3 - 2t)."""
    features = torch.zeros(2, 2, 2, 1, dtype=torch.float64)
    features[1] = 1.0  # the x = 1 face
    t = torch.linspace(0, 1, 11, dtype=torch.float64)
    points = torch.stack([2 * t - 1, torch.zeros_like(t), torch.zeros_like(t)], dim=1)
    out = grid.sample(features, points, interpolation="smoothstep")[:, 0]
    torch.testing.assert_close(out, t * t * (3 - 2 * t))
    linear = grid.sample(features, points)[:, 0]
    torch.testing.assert_close(linear, t)


def _gradient_at(features, point, interpolation):
    point = point.clone().requires_grad_()
    out = grid.sample(features, point, interpolation=interpolation).sum()
    (g,) = torch.autograd.grad(out, point)
    return g


@pytest.mark.parametrize("device", DEVICES)
def test_gradient_is_continuous_across_cell_faces(device):
    """The gradient just left and just right of a face agrees for smoothstep (C1) and
    jumps for linear (C0), on a random grid."""
    gen = torch.Generator(device=device).manual_seed(0)
    features = torch.randn(6, 6, 6, 1, device=device, dtype=torch.float64, generator=gen)
    face = 2 * 3 / 5 - 1  # voxel index 3 along x (align_corners=True)
    yz = torch.tensor([0.13, -0.41], device=device, dtype=torch.float64)
    eps = 1e-7
    jumps = {}
    for interpolation in ("linear", "smoothstep"):
        left = _gradient_at(
            features,
            torch.cat([torch.tensor([face - eps], device=device, dtype=torch.float64), yz])[None],
            interpolation,
        )
        right = _gradient_at(
            features,
            torch.cat([torch.tensor([face + eps], device=device, dtype=torch.float64), yz])[None],
            interpolation,
        )
        jumps[interpolation] = (left - right).abs().max().item()
    assert jumps["smoothstep"] < 1e-4
    assert jumps["linear"] > 1e-2


def test_voxel_grid_interpolation():
    g = grid.VoxelGrid(5, 2, interpolation="smoothstep", init="normal", init_scale=1.0)
    xyz = torch.rand(20, 3) * 2 - 1
    want = grid.sample(g.features, xyz, interpolation="smoothstep")
    torch.testing.assert_close(g(xyz), want)
    assert "interpolation='smoothstep'" in repr(g)
    assert grid.VoxelGrid(5, 2).interpolation == "linear"
    with pytest.raises(ValueError, match="interpolation: expected one of 'linear', 'smoothstep'"):
        grid.VoxelGrid(5, 2, interpolation="cubic")


@pytest.mark.parametrize("device", DEVICES)
def test_bad_interpolation(device):
    features = torch.randn(2, 2, 2, 1, device=device)
    points = torch.zeros(1, 3, device=device)
    with pytest.raises(
        RuntimeError, match="interpolation: expected 'linear' or 'smoothstep', got 'cubic'"
    ):
        grid.sample(features, points, interpolation="cubic")
    with pytest.raises(ValueError, match="interpolation: expected 'linear' or 'smoothstep'"):
        reference.sample(features, points, True, "zeros", "cubic")


@needs_cuda
@pytest.mark.parametrize("channels", [1, 16])
def test_deterministic_backward(channels):
    """The atomic-free backward (deterministic mode) blends with the same smoothstep weights."""
    gen = torch.Generator(device="cuda").manual_seed(channels)
    features = torch.randn(9, 8, 7, channels, device="cuda", generator=gen)
    points = random_points((4000,), "cuda", spread=1.1, generator=gen)
    grad_out = torch.randn(4000, channels, device="cuda", generator=gen)
    grads = []
    for deterministic in (False, True):
        torch.use_deterministic_algorithms(deterministic)
        try:
            f = features.clone().requires_grad_()
            grid.sample(f, points, interpolation="smoothstep").backward(grad_out)
        finally:
            torch.use_deterministic_algorithms(False)
        grads.append(f.grad)
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-4, atol=1e-4)


def test_smoothstep_gradient_swings_within_cells():
    """Smoothstep has no linear precision: on an SDF stored exactly at the voxels, the
    gradient's length swings within each cell (0 on the voxel planes, 1.5x midway) and the
    normals tilt, where linear weights keep |grad f| = 1 and the normals right."""
    r, major, minor = 48, 0.55, 0.2
    axis = torch.linspace(-1, 1, r, dtype=torch.float64)
    xyz = torch.stack(torch.meshgrid(axis, axis, axis, indexing="ij"), dim=-1)

    def torus(p):
        ring = torch.stack([p[..., :2].norm(dim=-1) - major, p[..., 2]], dim=-1)
        return ring.norm(dim=-1) - minor

    features = torus(xyz)[..., None]
    gen = torch.Generator().manual_seed(0)
    theta, phi = torch.rand(2, 4000, dtype=torch.float64, generator=gen) * 2 * torch.pi
    ring = torch.stack([theta.cos(), theta.sin(), torch.zeros_like(theta)], dim=-1)
    normal = torch.stack([phi.cos() * theta.cos(), phi.cos() * theta.sin(), phi.sin()], dim=-1)
    surface = major * ring + minor * normal
    stats = {}
    for interpolation in ("linear", "smoothstep"):
        g = _gradient_at(features, surface, interpolation)
        cos = torch.nn.functional.cosine_similarity(g, normal, dim=-1).clamp(-1, 1)
        stats[interpolation] = (g.norm(dim=-1).std().item(), cos.acos().rad2deg().mean().item())
    assert stats["linear"][0] < 0.05 and stats["linear"][1] < 3
    assert stats["smoothstep"][0] > 0.2 and stats["smoothstep"][1] > 8
