"""grid.sample with `bounds`: world points mapped onto the grid inside the kernels."""

import pytest
import torch

import grid
from grid import reference
from tests._helpers import DEVICES, assert_close, needs_cuda

BOXES = [
    ((-1.5, -1.5, -1.0), (1.5, 1.5, 1.0)),
    ((0.3, -0.7, 2.0), (1.1, 0.4, 5.3)),
    ((-1.0, -1.0, -1.0), (1.0, 1.0, 1.0)),
]
MODES = [
    (True, "zeros", "linear"),
    (False, "border", "linear"),
    (True, "border", "smoothstep"),
    (False, "zeros", "smoothstep"),
]


def world_points(n, bounds, device, dtype=torch.float32, spread=1.3, generator=None):
    """[n, 3] points in the box `bounds` widened `spread` times around its centre."""
    lo, hi = torch.tensor(bounds, dtype=dtype, device=device)
    u = torch.rand(n, 3, device=device, dtype=dtype, generator=generator) * 2 - 1
    return (lo + hi) / 2 + u * spread * (hi - lo) / 2


def normalised(points, bounds):
    """What VoxelGrid.normalize computes: one fused multiply-add in the points' dtype."""
    box = torch.tensor(bounds, dtype=points.dtype, device=points.device)
    scale = 2.0 / (box[1] - box[0])
    return torch.addcmul(-box[0] * scale - 1.0, points, scale)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("bounds", BOXES, ids=str)
@pytest.mark.parametrize("align_corners,padding,interpolation", MODES)
def test_against_the_reference(device, dtype, bounds, align_corners, padding, interpolation):
    gen = torch.Generator(device=device).manual_seed(0)
    f = torch.randn(5, 7, 4, 3, device=device, dtype=dtype, generator=gen).requires_grad_()
    p = world_points(300, bounds, device, dtype, generator=gen).requires_grad_()
    g = torch.randn(300, 3, device=device, dtype=dtype, generator=gen)
    kw = dict(align_corners=align_corners, padding=padding, interpolation=interpolation)
    out = grid.sample(f, p, bounds=bounds, **kw)
    ref = reference.sample(f, p, align_corners, padding, interpolation, bounds=bounds)
    tol = 1e-5 if dtype == torch.float32 else 1e-10
    assert_close(out, ref, rtol=tol, atol=tol)
    grads = torch.autograd.grad(out, [f, p], g)
    ref_grads = torch.autograd.grad(ref, [f, p], g)
    for a, b in zip(grads, ref_grads, strict=True):
        assert_close(a, b, rtol=tol * 10, atol=tol * 10)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("interpolation", ["linear", "smoothstep"])
def test_equals_sampling_the_normalised_points(device, interpolation):
    """The op maps the box exactly as VoxelGrid.normalize (addcmul) does: on the CPU bitwise,
    values and grid gradient; on CUDA the old addcmul rounded twice (multiply, then add), the
    kernel once, so the points may move by an ulp."""
    gen = torch.Generator(device=device).manual_seed(1)
    for bounds in BOXES:
        f = torch.randn(33, 17, 25, 4, device=device, generator=gen).requires_grad_()
        p = world_points(20000, bounds, device, generator=gen)
        out = grid.sample(f, p, bounds=bounds, interpolation=interpolation)
        old = grid.sample(f, normalised(p, bounds), interpolation=interpolation)
        grad = torch.autograd.grad(out.sum(), f)[0]
        grad_old = torch.autograd.grad(old.sum(), f)[0]
        if device == "cpu":
            assert torch.equal(out, old) and torch.equal(grad, grad_old)
        else:
            assert_close(out, old, rtol=1e-5, atol=1e-5)
            assert_close(grad, grad_old, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("align_corners,padding,interpolation", MODES)
def test_gradcheck_and_gradgradcheck(device, align_corners, padding, interpolation):
    """float64, the point gradient in world units (scaled by 2 / (max - min) per axis), and
    its second order (the double backward: point-point terms scaled twice)."""
    bounds = BOXES[1]
    gen = torch.Generator(device=device).manual_seed(2)
    f = torch.randn(4, 3, 5, 2, device=device, dtype=torch.float64, generator=gen)
    p = world_points(9, bounds, device, torch.float64, spread=1.1, generator=gen)
    f.requires_grad_(), p.requires_grad_()

    def fn(a, b):
        return grid.sample(
            a,
            b,
            align_corners=align_corners,
            padding=padding,
            interpolation=interpolation,
            bounds=bounds,
        )

    assert torch.autograd.gradcheck(fn, (f, p))
    assert torch.autograd.gradgradcheck(fn, (f, p))


@pytest.mark.parametrize("device", DEVICES)
def test_eikonal_gradient_in_world_units(device):
    """A linear field f = a . x stored in the grid reads back grad f = a at world points."""
    bounds = ((0.5, -2.0, 1.0), (2.5, 2.0, 1.5))
    lo, hi = torch.tensor(bounds, dtype=torch.float64)
    axes = [
        torch.linspace(float(a), float(b), n, dtype=torch.float64)
        for a, b, n in zip(lo, hi, (6, 9, 4), strict=True)
    ]
    nodes = torch.stack(torch.meshgrid(*axes, indexing="ij"), dim=-1)
    slope = torch.tensor([0.7, -1.3, 2.1], dtype=torch.float64)
    features = (nodes @ slope)[..., None].to(device)
    p = world_points(50, bounds, device, torch.float64, spread=0.9).requires_grad_()
    value = grid.sample(features, p, bounds=bounds)[..., 0]
    assert_close(value, p.detach() @ slope.to(device), rtol=1e-12, atol=1e-12)
    (g,) = torch.autograd.grad(value.sum(), p)
    assert_close(g, slope.to(device).expand_as(g), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    gen = torch.Generator(device=device).manual_seed(3)
    bounds = list(BOXES[1][0]) + list(BOXES[1][1])
    f = torch.randn(4, 3, 5, 6, device=device, dtype=torch.float64, generator=gen)
    p = world_points(7, BOXES[1], device, torch.float64, generator=gen)
    g = torch.randn(7, 6, device=device, dtype=torch.float64, generator=gen)
    ops = torch.ops.grid
    f.requires_grad_(), p.requires_grad_()
    torch.library.opcheck(ops.sample, (f, p, True, "zeros", "smoothstep", bounds))
    fd, pd = f.detach(), p.detach()
    torch.library.opcheck(
        ops.sample_backward, (g, fd, pd, False, "border", "linear", [True, True], bounds)
    )
    ggp = torch.randn_like(pd)
    torch.library.opcheck(
        ops.sample_double_backward,
        (None, ggp, g, fd, pd, True, "zeros", "smoothstep", [True, True, True], bounds),
    )


def test_box_forms_agree():
    f = torch.randn(3, 4, 5, 2)
    box = BOXES[1]
    p = world_points(40, box, "cpu")
    nested = grid.sample(f, p, bounds=box)
    flat = grid.sample(f, p, bounds=[*box[0], *box[1]])
    tensor = grid.sample(f, p, bounds=torch.tensor(box))
    assert torch.equal(nested, flat) and torch.equal(nested, tensor)


@pytest.mark.parametrize(
    "bounds,message",
    [
        ([0, 0, 0, 1, 1], "bounds: expected 6 numbers"),
        (
            ((0, 0, 0), (1, 0, 1)),
            "bounds: expected min < max on every axis, got min 0 and max 0 on axis y",
        ),
        (((0, 0, 0), (1, float("inf"), 1)), "bounds: expected finite numbers"),
        ("box", "bounds: expected"),
    ],
)
def test_bad_bounds_name_the_argument(bounds, message):
    f = torch.randn(3, 3, 3, 1)
    p = torch.rand(4, 3)
    with pytest.raises((RuntimeError, TypeError), match=message):
        grid.sample(f, p, bounds=bounds)


def test_a_box_too_thin_for_float32_is_refused_only_for_float32_points():
    f = torch.randn(3, 3, 3, 1, dtype=torch.float64)
    box = ((0.0, 1.0, 0.0), (1.0, 1.0 + 1e-12, 1.0))
    grid.sample(f, torch.rand(4, 3, dtype=torch.float64), bounds=box)  # float64: fine
    with pytest.raises(RuntimeError, match=r"bounds: .* \(as float32, the points' dtype\)"):
        grid.sample(f.float(), torch.rand(4, 3), bounds=box)


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph(device):
    torch._dynamo.reset()
    box = BOXES[0]

    def model(features, points):
        return grid.sample(features, points, bounds=box).square().mean()

    f = torch.randn(5, 4, 6, 3, device=device, requires_grad=True)
    p = world_points(64, box, device)
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    a = torch.autograd.grad(compiled(f, p), f)[0]
    b = torch.autograd.grad(model(f, p), f)[0]
    if device == "cpu":
        assert torch.equal(a, b)
    else:  # the CUDA backward adds with atomics: its sums' order, so their rounding, varies
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-8)


@needs_cuda
@pytest.mark.parametrize("f", [1, 2, 3, 16])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_kernels_match_cpu(f, dtype):
    """Every CUDA kernel family with a box (small F, vector widths, half grids), values,
    both gradients and the double backward, against the CPU kernels."""
    box = BOXES[1]
    gen = torch.Generator().manual_seed(f)
    feats = torch.randn(9, 6, 7, f, generator=gen).to(dtype)
    p = world_points(3000, box, "cpu", generator=gen)
    g = torch.randn(3000, f, generator=gen).to(dtype)
    results = []
    for device in ("cpu", "cuda"):
        v = feats.to(device).requires_grad_()
        x = p.to(device).requires_grad_()
        out = grid.sample(v, x, bounds=box, interpolation="smoothstep")
        gv, gx = torch.autograd.grad(out, [v, x], g.to(device), create_graph=True)
        second = torch.autograd.grad(gx.square().sum(), [v, x]) if dtype == torch.float32 else ()
        results.append([t.detach().float().cpu() for t in (out, gv, gx, *second)])
    tol = 1e-4 if dtype == torch.float32 else 1e-1
    for a, b in zip(*results, strict=True):
        # absolute error relative to the tensor's largest entry: the double backward's
        # entries reach 2e4 (grid) and 2e6 (points), and their float32 sums cancel, so
        # both devices land ~1e-6 of that from the float64 result, CUDA as near as the CPU
        assert_close(a, b, rtol=tol, atol=tol * max(1.0, b.abs().max().item()))


@needs_cuda
def test_cuda_deterministic_backward_with_a_box():
    box = BOXES[0]
    gen = torch.Generator(device="cuda").manual_seed(5)
    feats = torch.randn(16, 16, 16, 4, device="cuda", generator=gen).requires_grad_()
    p = world_points(50000, box, "cuda", generator=gen)
    atomic = torch.autograd.grad(grid.sample(feats, p, bounds=box).sum(), feats)[0]
    torch.use_deterministic_algorithms(True)
    try:
        runs = [
            torch.autograd.grad(grid.sample(feats, p, bounds=box).sum(), feats)[0] for _ in range(2)
        ]
    finally:
        torch.use_deterministic_algorithms(False)
    assert torch.equal(runs[0], runs[1])
    assert_close(runs[0], atomic, rtol=1e-4, atol=1e-4)
