"""grid.sample against the reference and F.grid_sample: values, gradients, layouts, dtypes."""

import pytest
import torch

import grid
from grid import reference
from tests._helpers import DEVICES, assert_close, grid_sample, needs_cuda, random_points

# (X, Y, Z, F): non-cubic, an axis of size 1, F of 1, 3, 16, 33 and 256.
SHAPES = [(5, 7, 6, 1), (4, 1, 9, 3), (8, 6, 7, 16), (3, 5, 2, 33), (4, 3, 5, 256)]
MODES = [(a, p) for a in (True, False) for p in ("zeros", "border")]
TOL = {torch.float64: 1e-10, torch.float32: 1e-5}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("align_corners,padding", MODES)
def test_forward_and_gradients(device, dtype, shape, align_corners, padding):
    torch.manual_seed(hash((shape, align_corners, padding)) % 2**31)
    features = torch.randn(shape, device=device, dtype=dtype, requires_grad=True)
    points = random_points((301,), device, dtype).requires_grad_()
    out = grid.sample(features, points, align_corners=align_corners, padding=padding)
    ref = reference.sample(features, points, align_corners, padding)
    gs = grid_sample(features, points, align_corners, padding)
    tol = TOL[dtype]
    assert out.shape == (301, shape[3]) and out.dtype == dtype
    assert_close(out, ref, rtol=tol, atol=tol)
    assert_close(out, gs, rtol=tol, atol=tol)

    grad = torch.randn_like(out)
    got = torch.autograd.grad(out, (features, points), grad)
    want = torch.autograd.grad(ref, (features, points), grad)
    want_gs = torch.autograd.grad(gs, (features, points), grad)
    for g, w, wg in zip(got, want, want_gs, strict=True):
        assert_close(g, w, rtol=tol * 10, atol=tol * 10)
        assert_close(g, wg, rtol=tol * 10, atol=tol * 10)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("batch", [(), (0,), (1,), (7, 11), (2, 3, 4)], ids=str)
def test_batch_shapes(device, batch):
    features = torch.randn(4, 5, 6, 3, device=device, requires_grad=True)
    points = random_points(batch, device).requires_grad_()
    out = grid.sample(features, points)
    assert out.shape == (*batch, 3)
    assert_close(out, reference.sample(features, points))
    out.sum().backward()
    assert features.grad.shape == features.shape and points.grad.shape == points.shape
    if points.numel() == 0:
        assert features.grad.abs().sum() == 0


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("which", ["needs_features", "needs_points"])
def test_only_needed_gradient(device, which):
    features = torch.randn(4, 5, 6, 8, device=device, requires_grad=which == "needs_features")
    points = random_points((50,), device).requires_grad_(which == "needs_points")
    ref_f = features.detach().requires_grad_(features.requires_grad)
    ref_p = points.detach().requires_grad_(points.requires_grad)
    grad = torch.randn(50, 8, device=device)
    (got,) = torch.autograd.grad(
        grid.sample(features, points), [features if features.requires_grad else points], grad
    )
    (want,) = torch.autograd.grad(
        reference.sample(ref_f, ref_p), [ref_f if ref_f.requires_grad else ref_p], grad
    )
    assert_close(got, want)


@pytest.mark.parametrize("device", DEVICES)
def test_non_contiguous_inputs(device):
    torch.manual_seed(1)
    # [F, Z, Y, X] permuted to [X, Y, Z, F]: channels not contiguous (copied by the op).
    permuted = torch.randn(8, 5, 6, 7, device=device).permute(3, 2, 1, 0)
    # A channel slice of a wider grid: F contiguous, other strides arbitrary (read in place).
    sliced = torch.randn(7, 6, 5, 12, device=device)[..., 2:10]
    # An every-other-voxel view.
    strided = torch.randn(14, 6, 10, 8, device=device)[::2, :, ::2]
    points = random_points((40,), device).transpose(0, 1).contiguous().transpose(0, 1)
    assert not points.is_contiguous()
    for features in (permuted, sliced, strided):
        assert not features.is_contiguous()
        f = features.clone().requires_grad_()
        p = points.clone().requires_grad_()
        fv = features.detach().requires_grad_()
        pv = points.detach().requires_grad_()
        out = grid.sample(fv, pv)
        assert_close(out, reference.sample(f, p))
        grad = torch.randn_like(out)
        for g, w in zip(
            torch.autograd.grad(out, (fv, pv), grad),
            torch.autograd.grad(reference.sample(f, p), (f, p), grad),
            strict=True,
        ):
            assert_close(g, w)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("align_corners", [True, False])
def test_non_finite_and_far_points(device, align_corners):
    features = torch.randn(4, 5, 6, 3, device=device, requires_grad=True)
    bad = [float("nan"), float("inf"), -float("inf"), 1e30, -1e30, 1e10]
    points = torch.tensor(
        [[b, 0.1, -0.2] for b in bad] + [[0.3, b, 0.5] for b in bad],
        device=device,
        requires_grad=True,
    )
    zeros = grid.sample(features, points, align_corners=align_corners, padding="zeros")
    assert torch.equal(zeros, torch.zeros_like(zeros))
    border = grid.sample(features, points, align_corners=align_corners, padding="border")
    ref = reference.sample(features, points, align_corners, "border")
    assert torch.isfinite(border).all()
    assert_close(border, ref)
    # Far positive coordinates read the last voxel along that axis, far negative and NaN the first.
    clamped = points.detach().nan_to_num(nan=-2.0).clamp(-1, 1)
    assert_close(
        border, grid.sample(features, clamped, align_corners=align_corners, padding="border")
    )
    for pad in ("zeros", "border"):
        out = grid.sample(features, points, align_corners=align_corners, padding=pad)
        gf, gp = torch.autograd.grad(out, (features, points), torch.randn_like(out))
        assert torch.isfinite(gf).all()
        # The clamped / far coordinate carries no gradient.
        assert torch.equal(gp[:6, 0], torch.zeros(6, device=device))
        assert torch.equal(gp[6:, 1], torch.zeros(6, device=device))


@pytest.mark.parametrize("device", DEVICES)
def test_half_precision_features(device):
    torch.manual_seed(2)
    features32 = torch.randn(9, 7, 8, 16, device=device)
    points = random_points((500,), device)
    want = reference.sample(features32.double(), points.double())
    for dtype in (torch.float16, torch.bfloat16):
        features = features32.to(dtype).requires_grad_()
        ref_features = features.detach().double().requires_grad_()
        tol = 1e-2 if dtype == torch.float16 else 5e-2
        for pts in (points, points.to(dtype)):
            out = grid.sample(features, pts)
            assert out.dtype == dtype
            assert_close(
                out.double(), reference.sample(features.double(), pts.double()), rtol=tol, atol=tol
            )
        out = grid.sample(features, points)
        assert_close(out.double(), want, rtol=tol, atol=tol)
        grad = torch.randn_like(out)
        (got,) = torch.autograd.grad(out, features, grad)
        (exp,) = torch.autograd.grad(
            reference.sample(ref_features, points.double()), ref_features, grad.double()
        )
        assert got.dtype == dtype
        assert_close(got.double(), exp, rtol=tol, atol=tol * 4)


@pytest.mark.parametrize("device", DEVICES)
def test_gradcheck(device):
    torch.manual_seed(3)
    for align_corners, padding in MODES:
        features = torch.randn(3, 4, 2, 5, device=device, dtype=torch.float64, requires_grad=True)
        # Keep points away from cell boundaries, where the gradient is discontinuous.
        points = random_points((12,), device, torch.float64, spread=1.2)
        points = points.requires_grad_()
        torch.autograd.gradcheck(
            lambda f, p, a=align_corners, m=padding: grid.sample(f, p, align_corners=a, padding=m),
            (features, points),
        )


def test_cpu_backward_is_deterministic():
    torch.manual_seed(4)
    features = torch.randn(16, 9, 12, 8, requires_grad=True)
    points = random_points((20000,), "cpu", spread=1.05)
    grad = torch.randn(20000, 8)
    results = []
    threads = torch.get_num_threads()
    try:
        for n in (threads, 1, threads, 3):
            torch.set_num_threads(n)
            (g,) = torch.autograd.grad(grid.sample(features, points), features, grad)
            results.append(g)
    finally:
        torch.set_num_threads(threads)
    for g in results[1:]:
        assert torch.equal(g, results[0])


@needs_cuda
def test_cuda_matches_cpu():
    torch.manual_seed(5)
    features = torch.randn(17, 9, 13, 32, dtype=torch.float64)
    points = random_points((4000,), "cpu", torch.float64)
    grad = torch.randn(4000, 32, dtype=torch.float64)
    outs = []
    for device in ("cpu", "cuda"):
        f = features.to(device).requires_grad_()
        p = points.to(device).requires_grad_()
        out = grid.sample(f, p, align_corners=False, padding="border")
        outs.append([out, *torch.autograd.grad(out, (f, p), grad.to(device))])
    for a, b in zip(*outs, strict=True):
        assert_close(b.cpu(), a, rtol=1e-10, atol=1e-10)


@needs_cuda
def test_large_grid_64bit_offsets():
    """X*Y*Z*F > 2^31: offsets past the int32 range must land on the right voxel."""
    if torch.cuda.get_device_properties(0).total_memory < 40 * 2**30:
        pytest.skip("needs 40 GiB of GPU memory")
    X, Y, Z, F = 1024, 1024, 1040, 2  # 2.18e9 elements
    features = torch.empty(X, Y, Z, F, device="cuda", dtype=torch.bfloat16)
    features[-2:] = torch.randn(2, Y, Z, F, device="cuda", dtype=torch.bfloat16)
    features[:-2] = 0
    far = torch.tensor([[1.0, 0.9, 0.95], [0.999, 1.0, 1.0]], device="cuda")
    out = grid.sample(features, far)
    small = features[-2:].float()  # the same values, addressed from a small tensor
    local = far.clone()
    local[:, 0] = (far[:, 0] + 1) / 2 * (X - 1) - (X - 2)  # index within the last two slices
    local[:, 0] = local[:, 0] * 2 - 1
    want = reference.sample(small, local)
    assert_close(out.float(), want, rtol=1e-2, atol=1e-2)
    features.requires_grad_()
    (g,) = torch.autograd.grad(
        grid.sample(features, far), features, torch.ones(2, F, device="cuda")
    )
    assert g[-2:].float().sum().item() == pytest.approx(2 * F, rel=1e-2)
    assert g[:-2].abs().sum().item() == 0


@needs_cuda
@pytest.mark.parametrize("f", [1, 2, 3, 4])
@pytest.mark.parametrize("layout", ["contiguous", "channel_slice", "odd_numel"])
@pytest.mark.parametrize("align_corners,padding", MODES)
def test_small_f_kernels(f, layout, align_corners, padding):
    # float32 grids of 1-4 channels take their own CUDA paths: one thread per point (F = 3
    # forward, strided F = 2 and 4), 8-byte vectors (F = 2), z-pair float4 atomics (F = 1
    # backward, element count a multiple of 4) or scalar atomics (odd element count); a
    # channel slice reads a strided grid.
    torch.manual_seed(f)
    if layout == "channel_slice":
        features = torch.randn(6, 5, 7, f + 3, device="cuda")[..., 1 : f + 1]
    elif layout == "odd_numel":
        features = torch.randn(3, 3, 3, f, device="cuda")  # 27 f elements: no float4 path
    else:
        features = torch.randn(6, 5, 8, f, device="cuda")
    features.requires_grad_()
    points = random_points((20000,), "cuda").requires_grad_()
    out = grid.sample(features, points, align_corners=align_corners, padding=padding)
    f64 = features.detach().double().requires_grad_()
    p64 = points.detach().double().requires_grad_()
    ref = reference.sample(f64, p64, align_corners, padding)
    assert_close(out, ref)
    grad = torch.randn_like(out)
    for wanted in ([features, points], [features], [points]):
        got = torch.autograd.grad(out, wanted, grad, retain_graph=True)
        ref_in = [f64 if t is features else p64 for t in wanted]
        want = torch.autograd.grad(ref, ref_in, grad.double(), retain_graph=True)
        for g, w in zip(got, want, strict=True):
            assert_close(g, w, rtol=1e-4, atol=1e-4)
