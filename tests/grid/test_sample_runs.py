"""The CUDA backward's warp-aggregated scatter (csrc/cuda/corner_runs.cuh): the grid gradient of
consecutive points that share a voxel is summed inside the warp before one atomic per run.
Ray-ordered points (long runs), random points (none to sum), and the edges: points outside the
grid with zeros and border padding, points on the grid's faces and on cell planes, N not a
multiple of 32, N < 32, empty."""

import pytest
import torch

import grid
from grid import reference
from tests._helpers import assert_close, needs_cuda, random_points, ray_points

pytestmark = needs_cuda

MODES = [(a, p) for a in (True, False) for p in ("zeros", "border")]
# F = 1: the one-thread-per-point kernel; 2: float2 rows; 3: scalar rows (4 points per warp);
# 4 and 16: float4 rows (16 and 4 points per warp); 32: 2 points per warp; 68: 17 float4
# vectors, a whole warp per point walking its vectors twice (nothing to sum across points).
FEATURES = [1, 2, 3, 4, 16, 32, 68]


def grads(sample, features, points, grad, wanted, **mode):
    f = features.detach().requires_grad_()
    p = points.detach().requires_grad_()
    inputs = {"both": (f, p), "features": (f,)}[wanted]
    return torch.autograd.grad(sample(f, p, **mode), inputs, grad)


def check(features, points, wanted="both", align_corners=True, padding="zeros"):
    """grid.sample's gradients (all of them, or the grid's only) against grid.reference.sample
    in float64, within float32 rounding of sums: 1e-5 of the gradient's largest value."""
    torch.manual_seed(points.shape[0])
    grad = torch.randn(points.shape[0], features.shape[-1], device="cuda")
    mode = {"align_corners": align_corners, "padding": padding}
    got = grads(grid.sample, features, points, grad, wanted, **mode)
    want = grads(
        reference.sample, features.double(), points.double(), grad.double(), wanted, **mode
    )
    for g, w in zip(got, want, strict=True):
        scale = float(w.abs().max()) if w.numel() else 1.0
        assert_close(g, w, rtol=1e-4, atol=1e-5 * max(1.0, scale))


@pytest.mark.parametrize("f", FEATURES)
@pytest.mark.parametrize("align_corners,padding", MODES)
def test_rays_match_reference(f, align_corners, padding):
    # 0.1 voxel between samples in the coarse grid (runs of ~10 points per voxel), ~0.8 in the
    # fine one (as S5); 13 x 97 points: the last warp is partly empty.
    torch.manual_seed(f)
    for shape, samples in (((9, 7, 8), 97), ((33, 30, 31), 97)):
        features = torch.randn(*shape, f, device="cuda")
        points = ray_points(13, samples, seed=f, device="cuda")
        for wanted in ("both", "features"):
            check(features, points, wanted, align_corners, padding)


@pytest.mark.parametrize("f", FEATURES)
def test_random_order_matches_reference(f):
    # Uniform points in and around the grid: neighbours rarely share a voxel.
    torch.manual_seed(f)
    features = torch.randn(10, 9, 11, f, device="cuda")
    points = random_points((20011,), "cuda")
    for align_corners, padding in MODES:
        check(features, points, "both", align_corners, padding)


@pytest.mark.parametrize("f", FEATURES)
@pytest.mark.parametrize("n", [0, 1, 5, 31, 32, 33, 95, 1000])
def test_long_runs_and_partial_warps(f, n):
    # The same point 70 times (a run longer than a warp), a ray, the same point again: cut to n
    # points, so runs end at the warp's and the batch's last lane.
    torch.manual_seed(n)
    features = torch.randn(6, 5, 7, f, device="cuda")
    ray = ray_points(1, 60, seed=n, device="cuda")
    p0 = ray[30:31].expand(70, 3)
    p1 = ray[45:46].expand(40, 3)
    points = torch.cat([p0, ray, p1, ray.flip(0)])[:n].contiguous()
    check(features, points)
    check(features, points, "features")


@pytest.mark.parametrize("f", FEATURES)
@pytest.mark.parametrize("align_corners,padding", MODES)
def test_faces_and_cell_planes(f, align_corners, padding):
    # Points on the voxel planes and the faces (+-1), walked in order along z, then along a
    # diagonal past the grid: every cell of a column and the corners outside the grid. The
    # grid gradient is continuous there; the point gradient is not (which side of a plane a
    # point falls on can differ between float32 and float64), so only the first is compared.
    torch.manual_seed(f)
    shape = (5, 4, 6)
    features = torch.randn(*shape, f, device="cuda")
    steps = [torch.linspace(-1, 1, 2 * s - 1) for s in shape]  # planes and mid-cells
    x, y = steps[0][[0, 3, -1]], steps[1][[0, 2, -1]]
    columns = [torch.stack([a.expand_as(steps[2]), b.expand_as(steps[2]), steps[2]], 1)
               for a in x for b in y]  # fmt: skip
    diagonal = torch.linspace(-1.2, 1.2, 61)[:, None].expand(61, 3)
    points = torch.cat([*columns, diagonal]).cuda().contiguous()
    check(features, points, "features", align_corners, padding)


def test_odd_element_count_scalar_atomics():
    # A one-channel grid of 27 elements: the small-F kernel's scalar-atomic path, on rays.
    torch.manual_seed(0)
    features = torch.randn(3, 3, 3, 1, device="cuda")
    check(features, ray_points(7, 90, seed=1, device="cuda"))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("f", [3, 16])
def test_half_precision_rays(dtype, f):
    # Runs summed in float32, then one atomic in the dtype per run: F = 3 rows are one value wide
    # (scalar half atomics), F = 16 rows two vectors of eight (16-byte vector atomics).
    torch.manual_seed(f)
    features = torch.randn(9, 7, 8, f, device="cuda").to(dtype)
    points = ray_points(5, 80, seed=2, device="cuda")
    grad = torch.randn(points.shape[0], f, device="cuda").to(dtype)
    (got,) = grads(grid.sample, features, points, grad, "features")
    (want,) = grads(reference.sample, features.double(), points.double(), grad.double(), "features")
    # Each atomic rounds to the dtype (bf16: 8 bits; the benchmark's S4 check allows 1e-1 for
    # up to 256 adds, bench/ops/ops_sample.py); a wrong corner or weight is O(1).
    tol = {torch.float16: 2e-2, torch.bfloat16: 1e-1}[dtype]
    assert (got.double() - want).abs().max() / want.abs().max() < tol
