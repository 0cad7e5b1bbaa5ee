"""Double backward of sample and trilinear: gradgradcheck, agreement with autograd through
the reference, the masks autograd asks for, an eikonal step under torch.compile, and the
errors (third order, deterministic mode)."""

from __future__ import annotations

import pytest
import torch

import grid
from grid import reference
from tests._helpers import DEVICES, needs_cuda, random_points

MODES = [
    (align_corners, padding, interpolation)
    for align_corners in (True, False)
    for padding in ("zeros", "border")
    for interpolation in ("linear", "smoothstep")
]


def _grid_and_points(device, dtype=torch.float64, n=9, spread=1.2, seed=0):
    gen = torch.Generator(device=device).manual_seed(seed)
    features = torch.randn(4, 5, 3, 2, device=device, dtype=dtype, generator=gen)
    points = random_points((n,), device, dtype, spread=spread, generator=gen)
    return features.requires_grad_(), points.requires_grad_()


def _near_faces(device, sizes=(4, 5, 3), align_corners=True, offset=1e-3):
    """Points 1e-3 voxels on either side of interior cell faces (and of the grid's edge)."""
    rows = []
    for face, side in ((1, -1), (1, 1), (2, -1), (2, 1), (0, 1)):
        index = [face + side * offset + 0.3 * a for a in range(3)]
        index[1] = face + side * offset
        coords = []
        for a, i in enumerate(index):
            size = sizes[a]
            coords.append(2 * i / (size - 1) - 1 if align_corners else (2 * i + 1) / size - 1)
        rows.append(coords)
    return torch.tensor(rows, dtype=torch.float64, device=device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", MODES, ids=lambda m: f"{m[0]}-{m[1]}-{m[2]}")
def test_gradgradcheck_sample(device, mode):
    align_corners, padding, interpolation = mode
    features, points = _grid_and_points(device)
    faces = _near_faces(device, align_corners=align_corners).requires_grad_()

    def f(v, p):
        return grid.sample(
            v, p, align_corners=align_corners, padding=padding, interpolation=interpolation
        )

    for p in (points, faces):
        assert torch.autograd.gradgradcheck(f, (features, p))


@pytest.mark.parametrize("device", DEVICES)
def test_gradgradcheck_trilinear(device):
    gen = torch.Generator(device=device).manual_seed(1)
    corners = torch.randn(6, 8, 3, device=device, dtype=torch.float64, generator=gen)
    local = torch.rand(6, 3, device=device, dtype=torch.float64, generator=gen) * 2.4 - 1.2
    corners.requires_grad_()
    local.requires_grad_()
    assert torch.autograd.gradgradcheck(grid.trilinear, (corners, local))
    assert torch.autograd.gradgradcheck(lambda c: grid.trilinear(c, local.detach()), (corners,))
    assert torch.autograd.gradgradcheck(lambda x: grid.trilinear(corners.detach(), x), (local,))


def _eikonal_grads(sample_fn, features, points, weights):
    """d/d(features, points) of sum(weights * |grad_x f|^2) + sum(f^2): an eikonal-like loss
    that needs every second-order term (features-points and points-points)."""
    out = sample_fn(features, points)
    (gp,) = torch.autograd.grad(out.sum(), points, create_graph=True)
    loss = (weights * gp.square().sum(-1)).sum() + out.square().sum()
    return torch.autograd.grad(loss, (features, points))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    ("dtype", "tol"),
    [(torch.float64, 1e-10), (torch.float32, 2e-4), (torch.float16, 2e-2), (torch.bfloat16, 1e-1)],
)
@pytest.mark.parametrize("interpolation", ["linear", "smoothstep"])
def test_second_order_matches_reference(device, dtype, tol, interpolation):
    """Native double backward against autograd through the reference, in every dtype the
    forward takes (half precision grids with float32 points)."""
    gen = torch.Generator(device=device).manual_seed(2)
    features = torch.randn(6, 5, 7, 3, device=device, generator=gen).to(dtype)
    point_dtype = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    points = random_points((300,), device, point_dtype, spread=1.1, generator=gen)
    weights = torch.rand(300, device=device, generator=gen).to(point_dtype)

    def native(v, p):
        return grid.sample(v, p, padding="zeros", interpolation=interpolation)

    def ref(v, p):
        return reference.sample(v, p, True, "zeros", interpolation)

    got = _eikonal_grads(native, features.requires_grad_(), points.requires_grad_(), weights)
    want = _eikonal_grads(
        ref,
        features.detach().double().requires_grad_(),
        points.detach().double().requires_grad_(),
        weights.double(),
    )
    for g, w in zip(got, want, strict=True):
        scale = w.abs().max().item()
        assert scale > 0
        torch.testing.assert_close(g.double(), w, rtol=tol, atol=tol * scale)


@pytest.mark.parametrize("device", DEVICES)
def test_first_order_masks(device):
    """create_graph on only the point gradient or only the feature gradient: each second
    derivative still matches the reference (autograd passes no gradient for unused outputs)."""
    features, points = _grid_and_points(device, n=20, seed=3)
    for wrt in ("points", "features"):
        results = []
        for fn in (
            lambda v, p: grid.sample(v, p, padding="border", interpolation="smoothstep"),
            lambda v, p: reference.sample(v, p, True, "border", "smoothstep"),
        ):
            out = fn(features, points)
            target = points if wrt == "points" else features
            (g,) = torch.autograd.grad(out.square().sum(), target, create_graph=True)
            results.append(torch.autograd.grad(g.square().sum(), (features, points)))
        for a, b in zip(*results, strict=True):
            torch.testing.assert_close(a, b)


@pytest.mark.parametrize("device", DEVICES)
def test_grad_out_requiring_grad(device):
    """An MLP after the grid makes grad_out depend on parameters: its gradient flows too."""
    features, points = _grid_and_points(device, n=12, seed=4)
    scale = torch.randn(2, device=device, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradgradcheck(
        lambda v, p, s: (grid.sample(v, p, interpolation="smoothstep") * s).tanh(),
        (features, points, scale),
    )


@pytest.mark.parametrize("device", DEVICES)
def test_double_backward_opcheck(device):
    features, points = _grid_and_points(device, n=7, seed=5)
    v, p = features.detach(), points.detach()
    g = torch.randn(7, 2, device=device, dtype=torch.float64)
    ggv, ggp = torch.randn_like(v), torch.randn_like(p)
    ops = torch.ops.grid
    for ac, padding, interp in MODES[::3]:
        for gg in ((ggv, ggp), (None, ggp), (ggv, None)):
            for mask in ([True, True, True], [False, True, False], [True, False, True]):
                torch.library.opcheck(
                    ops.sample_double_backward, (*gg, g, v, p, ac, padding, interp, mask)
                )
    corners = torch.randn(7, 8, 2, device=device, dtype=torch.float64)
    local = p.clamp(-1, 1)
    ggc = torch.randn_like(corners)
    for gg in ((ggc, ggp), (None, ggp), (ggc, None)):
        torch.library.opcheck(
            ops.trilinear_double_backward, (*gg, g, corners, local, [True, True, True])
        )


@pytest.mark.parametrize("device", DEVICES)
def test_double_backward_bad_input(device):
    features, points = _grid_and_points(device, n=7)
    v, p = features.detach(), points.detach()
    g = torch.randn(7, 2, device=device, dtype=torch.float64)
    op = torch.ops.grid.sample_double_backward
    with pytest.raises(RuntimeError, match=r"grad_grad_points: expected shape \[7, 3\]"):
        op(
            None,
            torch.zeros(6, 3, device=device, dtype=torch.float64),
            g,
            v,
            p,
            True,
            "zeros",
            "linear",
            [True, True, True],
        )
    with pytest.raises(RuntimeError, match="grad_grad_features: expected dtype"):
        op(v.float(), None, g, v, p, True, "zeros", "linear", [True, True, True])
    with pytest.raises(RuntimeError, match=r"grad_out: expected shape \[7, 2\]"):
        op(None, None, g[:6], v, p, True, "zeros", "linear", [True, True, True])


@pytest.mark.parametrize("device", DEVICES)
def test_third_order_raises(device):
    features, points = _grid_and_points(device, n=5)
    (gp,) = torch.autograd.grad(grid.sample(features, points).sum(), points, create_graph=True)
    (gv,) = torch.autograd.grad(gp.square().sum(), features, create_graph=True)
    with pytest.raises(RuntimeError, match="sample_double_backward"):
        gv.sum().backward()


@needs_cuda
def test_cuda_double_backward_refuses_deterministic_mode():
    features, points = _grid_and_points("cuda", dtype=torch.float32, n=5)
    (gp,) = torch.autograd.grad(grid.sample(features, points).sum(), points, create_graph=True)
    torch.use_deterministic_algorithms(True)
    try:
        with pytest.raises(RuntimeError, match="grid.sample double backward"):
            gp.square().sum().backward()
    finally:
        torch.use_deterministic_algorithms(False)


@pytest.mark.parametrize("device", DEVICES)
def test_eikonal_step_under_torch_compile(device):
    """A whole eikonal training step traced with fullgraph=True matches eager."""
    if not hasattr(torch._dynamo.config, "trace_autograd_ops"):
        pytest.skip("this PyTorch cannot trace torch.autograd.grad inside torch.compile")
    torch._dynamo.reset()

    def step(features, points):
        f = grid.sample(features, points, padding="border", interpolation="smoothstep")
        (g,) = torch.autograd.grad(f.sum(), points, create_graph=True)
        return ((g.norm(dim=-1) - 1) ** 2).mean() + f.abs().mean()

    gen = torch.Generator(device=device).manual_seed(6)
    features = torch.randn(8, 8, 8, 1, device=device, generator=gen).requires_grad_()
    points = random_points((256,), device, generator=gen).requires_grad_()
    with torch._dynamo.config.patch(trace_autograd_ops=True):
        compiled = torch.compile(step, fullgraph=True)
        loss = compiled(features, points)
        (got,) = torch.autograd.grad(loss, features)
    (want,) = torch.autograd.grad(step(features, points), features)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
