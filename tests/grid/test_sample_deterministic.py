"""The CUDA feature gradient of grid.sample under torch.use_deterministic_algorithms(True):
bitwise repeatable, equal in value to the reference and the atomic path."""

import pytest
import torch

import grid
from grid import reference
from tests._helpers import assert_close, needs_cuda, random_points, ray_points

pytestmark = needs_cuda

MODES = [(a, p) for a in (True, False) for p in ("zeros", "border")]


class deterministic:
    def __enter__(self):
        self.old = torch.are_deterministic_algorithms_enabled()
        torch.use_deterministic_algorithms(True)

    def __exit__(self, *exc):
        torch.use_deterministic_algorithms(self.old)


def grads(features, points, grad, **kwargs):
    f = features.detach().requires_grad_()
    p = points.detach().requires_grad_()
    return torch.autograd.grad(grid.sample(f, p, **kwargs), (f, p), grad)


def test_many_points_per_voxel_bitwise_repeatable():
    # 2^20 points in a 4^3 grid: tens of thousands of contributions per voxel, where the
    # atomic path's rounding changes from run to run.
    torch.manual_seed(0)
    features = torch.randn(4, 4, 4, 4, device="cuda")
    points = random_points((2**20,), "cuda", spread=1.1)
    grad = torch.randn(2**20, 4, device="cuda")
    with deterministic():
        first = grads(features, points, grad)
        second = grads(features, points, grad)
    for a, b in zip(first, second, strict=True):
        assert torch.equal(a, b)
    f64 = features.double().requires_grad_()
    want = torch.autograd.grad(reference.sample(f64, points.double()), f64, grad.double())[0]
    assert_close(first[0], want, rtol=1e-4, atol=1e-3)  # sums of ~2e5 float32 terms
    # The atomic path's float32 sums round in a run-dependent order: one H100 run differed by
    # 1.3e-3 (relative 5.6e-4) from the deterministic sum; a wrong corner or weight is O(1).
    atomic = grads(features, points, grad)
    assert_close(first[0], atomic[0], rtol=1e-3, atol=1e-2)
    assert torch.equal(first[1], atomic[1])  # the point gradient has no atomics either way


@pytest.mark.parametrize("align_corners,padding", MODES)
@pytest.mark.parametrize("shape", [(5, 7, 6, 1), (4, 1, 9, 3), (8, 6, 7, 16), (3, 5, 2, 33)])
def test_matches_reference_float64(shape, align_corners, padding):
    torch.manual_seed(hash((shape, align_corners, padding)) % 2**31)
    features = torch.randn(shape, device="cuda", dtype=torch.float64)
    points = random_points((3001,), "cuda", torch.float64)
    grad = torch.randn(3001, shape[3], device="cuda", dtype=torch.float64)
    kwargs = {"align_corners": align_corners, "padding": padding}
    with deterministic():
        got = grads(features, points, grad, **kwargs)
        again = grads(features, points, grad, **kwargs)
    f = features.clone().requires_grad_()
    p = points.clone().requires_grad_()
    want = torch.autograd.grad(reference.sample(f, p, align_corners, padding), (f, p), grad)
    for g, a, w in zip(got, again, want, strict=True):
        assert torch.equal(g, a)
        assert_close(g, w, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize(
    "dtype,point_dtype",
    [
        (torch.float32, torch.float32),
        (torch.float16, torch.float32),
        (torch.bfloat16, torch.float32),
        (torch.float16, torch.float16),
        (torch.bfloat16, torch.bfloat16),
    ],
)
def test_every_dtype_repeatable_and_close(dtype, point_dtype):
    torch.manual_seed(1)
    features = torch.randn(9, 8, 7, 16, device="cuda").to(dtype)
    points = random_points((200_000,), "cuda", point_dtype, spread=1.05)
    grad = torch.randn(200_000, 16, device="cuda").to(dtype)
    with deterministic():
        first = grads(features, points, grad)
        second = grads(features, points, grad)
    for a, b in zip(first, second, strict=True):
        assert a.dtype == b.dtype and torch.equal(a, b)
    # float32 accumulation, one rounding to the dtype at the end
    f64 = features.double().requires_grad_()
    want = torch.autograd.grad(reference.sample(f64, points.double()), f64, grad.double())[0]
    tol = {torch.float32: 1e-5, torch.float16: 1e-3, torch.bfloat16: 1e-2}[dtype]
    scale = want.abs().max()
    assert ((first[0].double() - want).abs().max() / scale) < tol


def test_features_only_points_only_and_empty():
    torch.manual_seed(2)
    features = torch.randn(6, 5, 4, 8, device="cuda")
    points = random_points((5000,), "cuda")
    grad = torch.randn(5000, 8, device="cuda")
    atomic = grads(features, points, grad)
    with deterministic():
        f = features.clone().requires_grad_()
        (gf,) = torch.autograd.grad(grid.sample(f, points), f, grad)
        p = points.clone().requires_grad_()
        (gp,) = torch.autograd.grad(grid.sample(features, p), p, grad)
        empty = torch.empty(0, 3, device="cuda")
        f = features.clone().requires_grad_()
        (g0,) = torch.autograd.grad(grid.sample(f, empty), f, torch.empty(0, 8, device="cuda"))
    assert_close(gf, atomic[0])
    assert torch.equal(gp, atomic[1])
    assert torch.equal(g0, torch.zeros_like(features))


def test_points_outside_and_non_finite():
    # Points that touch no voxel (far, NaN) sort to the end and contribute nothing.
    torch.manual_seed(3)
    features = torch.randn(5, 6, 7, 4, device="cuda")
    points = random_points((4000,), "cuda", spread=3.0)
    points[::7] = float("nan")
    points[1::11, 0] = float("inf")
    grad = torch.randn(4000, 4, device="cuda")
    with deterministic():
        got = grads(features, points, grad)[0]
    assert_close(got, grads(features, points, grad)[0])


@pytest.mark.parametrize("f", [1, 2, 3, 4, 16])
@pytest.mark.parametrize("align_corners,padding", MODES)
def test_rays_repeatable_and_close(f, align_corners, padding):
    # Ray-ordered points (consecutive samples share cells, some lie outside the grid); z sizes
    # of 19 (the column walk's chunks of 8 end in a partial one) and 1.
    kwargs = {"align_corners": align_corners, "padding": padding}
    for shape in ((7, 6, 19), (5, 8, 1)):
        torch.manual_seed(f)
        features = torch.randn(*shape, f, device="cuda")
        points = ray_points(11, 150, seed=f, device="cuda")
        grad = torch.randn(points.shape[0], f, device="cuda")
        with deterministic():
            first = grads(features, points, grad, **kwargs)
            second = grads(features, points, grad, **kwargs)
        for a, b in zip(first, second, strict=True):
            assert torch.equal(a, b)
        f64 = features.double().requires_grad_()
        want = torch.autograd.grad(
            reference.sample(f64, points.double(), align_corners, padding), f64, grad.double()
        )[0]
        scale = float(want.abs().max())
        assert_close(first[0], want, rtol=1e-4, atol=1e-5 * scale)
        atomic = grads(features, points, grad, **kwargs)
        assert_close(first[0], atomic[0], rtol=1e-4, atol=1e-5 * scale)
        assert torch.equal(first[1], atomic[1])  # the point gradient has no atomics either way
