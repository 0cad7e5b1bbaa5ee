"""The CPU kernels on several threads (csrc/cpu/corner_scatter.h splits the grid's x slabs into
bands, one per thread): the feature gradients of the backward and double backward are bitwise
those of one thread, for any thread count, and equal the reference."""

from __future__ import annotations

import pytest
import torch

import grid
from grid import reference
from tests._helpers import random_points

THREADS = [1, 2, 3, 5]  # more threads than cores is allowed: bands still split


class threads:
    def __init__(self, n: int):
        self.n = n

    def __enter__(self):
        self.old = torch.get_num_threads()
        torch.set_num_threads(self.n)

    def __exit__(self, *exc):
        torch.set_num_threads(self.old)


def clustered_points(n: int, gen: torch.Generator) -> torch.Tensor:
    """Half the points in a thin slab around x = 0.3 (unbalanced bands), a quarter spread
    past the grid (padding), a quarter on cell faces (x on a voxel boundary)."""
    points = (torch.rand(n, 3, generator=gen) * 2 - 1) * 1.3
    half = n // 2
    points[:half, 0] = 0.3 + torch.randn(half, generator=gen) * 0.01
    quarter = n // 4
    faces = torch.randint(0, 9, (quarter,), generator=gen).float() / 4 - 1
    points[half : half + quarter, 0] = faces
    return points


def feature_grads(features, points, grad_out, **kwargs):
    f = features.detach().requires_grad_()
    p = points.detach().requires_grad_()
    out = grid.sample(f, p, **kwargs)
    return torch.autograd.grad(out, (f, p), grad_out)


@pytest.mark.parametrize("align_corners", [True, False])
@pytest.mark.parametrize("padding", ["zeros", "border"])
def test_backward_bitwise_equal_on_any_thread_count(align_corners, padding):
    gen = torch.Generator().manual_seed(1)
    features = torch.randn(9, 6, 5, 4, generator=gen)
    points = clustered_points(70_000, gen)  # > 2 * 16384: the bands are used
    grad_out = torch.randn(points.shape[0], 4, generator=gen)
    kwargs = dict(align_corners=align_corners, padding=padding)
    results = []
    for n in THREADS:
        with threads(n):
            results.append(feature_grads(features, points, grad_out, **kwargs))
    for got in results[1:]:
        assert torch.equal(got[0], results[0][0]) and torch.equal(got[1], results[0][1])
    f = features.double().requires_grad_()
    (want,) = torch.autograd.grad(
        reference.sample(f, points.double(), **kwargs), f, grad_out.double()
    )
    torch.testing.assert_close(results[0][0].double(), want, rtol=1e-4, atol=1e-3)


def test_world_bounds_and_large_grid_bitwise_equal_on_any_thread_count():
    gen = torch.Generator().manual_seed(2)
    features = torch.randn(40, 7, 6, 3, generator=gen, dtype=torch.float64)
    box = [[-2.0, -1.0, -1.0], [2.0, 1.0, 1.0]]
    points = random_points((50_000,), "cpu", torch.float64, spread=2.2, generator=gen)
    grad_out = torch.randn(50_000, 3, generator=gen, dtype=torch.float64)
    results = []
    for n in THREADS:
        with threads(n):
            results.append(feature_grads(features, points, grad_out, bounds=box)[0])
    for got in results[1:]:
        assert torch.equal(got, results[0])


def test_double_backward_bitwise_equal_on_any_thread_count():
    """The eikonal pattern: d |d sample / d points|^2 / d features scatters in the double
    backward."""
    gen = torch.Generator().manual_seed(3)
    features = torch.randn(12, 10, 8, 1, generator=gen)
    points = clustered_points(40_000, gen)
    results = []
    for n in THREADS:
        with threads(n):
            f = features.clone().requires_grad_()
            p = points.clone().requires_grad_()
            (g,) = torch.autograd.grad(grid.sample(f, p).sum(), p, create_graph=True)
            (gf,) = torch.autograd.grad(g.square().sum(), f)
            results.append(gf)
    assert results[0].abs().sum() > 0
    for got in results[1:]:
        assert torch.equal(got, results[0])
