"""grid.volrend: compositing and accumulation of packed samples against the per-ray loops of
grid.reference; empty inputs, gradcheck, torch.compile, input errors."""

from __future__ import annotations

import pytest
import torch

import grid
from grid import reference
from tests._helpers import DEVICES

DTYPES = [torch.float32, torch.float64]
TOLERANCE = {torch.float32: {"rtol": 1e-5, "atol": 1e-6}, torch.float64: {"rtol": 1e-10, "atol": 0}}


def packed(n_rays: int = 40, dtype=torch.float64, seed: int = 0, most: int = 12):
    """A packed list: ray_indices [S] sorted, with empty rays (the first and last among
    them), alpha [S] in [0, 1), colours [S, 3], t [S]."""
    gen = torch.Generator().manual_seed(seed)
    counts = torch.randint(0, most + 1, (n_rays,), generator=gen)
    counts[0] = counts[-1] = counts[n_rays // 2] = 0
    ray_indices = torch.repeat_interleave(torch.arange(n_rays), counts)
    s = ray_indices.shape[0]
    alpha = torch.rand(s, generator=gen, dtype=dtype)
    colors = torch.rand(s, 3, generator=gen, dtype=dtype)
    t = torch.rand(s, generator=gen, dtype=dtype).cumsum(0)
    return ray_indices, alpha, colors, t


@pytest.mark.parametrize("dtype", DTYPES)
def test_composite_weights_match_the_per_ray_loop(dtype):
    ray_indices, alpha, _, _ = packed(200, dtype)
    weights = grid.composite_weights(alpha, ray_indices, 200)
    assert weights.dtype == dtype and weights.shape == alpha.shape
    want = reference.composite_weights(alpha, ray_indices, 200)
    torch.testing.assert_close(weights, want, **TOLERANCE[dtype])
    assert torch.equal(grid.composite_weights(alpha, ray_indices.int(), 200), weights)
    # per ray the weights sum to the opacity 1 - prod(1 - alpha)
    sums = grid.accumulate_along_rays(weights.double(), None, ray_indices, 200)
    alpha64 = alpha.double()
    opacity = torch.stack([(1 - alpha64[ray_indices == r]).prod() for r in range(200)])
    torch.testing.assert_close(sums, 1 - opacity, **TOLERANCE[dtype])


def test_composite_weights_of_opaque_and_empty_samples():
    alpha = torch.tensor([0.0, 1.0, 0.5, 0.25], dtype=torch.float64)
    weights = grid.composite_weights(alpha, torch.zeros(4, dtype=torch.long), 1)
    torch.testing.assert_close(weights, torch.tensor([0.0, 1.0, 0.5e-6, 0.125e-6]).double())


@pytest.mark.parametrize("dtype", DTYPES)
def test_accumulate_matches_the_per_ray_loop(dtype):
    ray_indices, alpha, colors, t = packed(60, dtype, seed=1)
    weights = grid.composite_weights(alpha, ray_indices, 60)
    for values, shape in [(colors, (60, 3)), (t, (60,)), (None, (60,))]:
        got = grid.accumulate_along_rays(weights, values, ray_indices, 60)
        assert got.shape == shape and got.dtype == dtype
        want = reference.accumulate_along_rays(weights, values, ray_indices, 60)
        torch.testing.assert_close(got, want, **TOLERANCE[dtype])
    # any order, and int32 indices
    order = torch.randperm(ray_indices.shape[0], generator=torch.Generator().manual_seed(2))
    want_rgb = reference.accumulate_along_rays(weights, colors, ray_indices, 60)
    shuffled = grid.accumulate_along_rays(weights[order], colors[order], ray_indices[order], 60)
    torch.testing.assert_close(shuffled, want_rgb, **TOLERANCE[dtype])
    got = grid.accumulate_along_rays(weights, colors, ray_indices.int(), 60)
    torch.testing.assert_close(got, want_rgb, **TOLERANCE[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_composite_is_the_three_accumulations_with_background(dtype):
    ray_indices, alpha, colors, t = packed(50, dtype, seed=3)
    weights = grid.composite_weights(alpha, ray_indices, 50)
    background = torch.tensor([0.2, 0.5, 1.0], dtype=dtype)
    rgb, depth, acc = grid.composite(weights, ray_indices, 50, colors, t, background)
    want_acc = reference.accumulate_along_rays(weights, None, ray_indices, 50)
    want_rgb = reference.accumulate_along_rays(weights, colors, ray_indices, 50)
    want_rgb = want_rgb + (1 - want_acc)[:, None] * background
    torch.testing.assert_close(acc, want_acc, **TOLERANCE[dtype])
    torch.testing.assert_close(rgb, want_rgb, **TOLERANCE[dtype])
    torch.testing.assert_close(depth, reference.accumulate_along_rays(weights, t, ray_indices, 50))
    assert torch.equal(rgb[0], background)  # a ray without samples shows the background
    # no background: black; a background per ray
    black, _, _ = grid.composite(weights, ray_indices, 50, colors, t)
    torch.testing.assert_close(black, want_rgb - (1 - want_acc)[:, None] * background)
    per_ray = background.expand(50, 3).clone()
    assert torch.equal(grid.composite(weights, ray_indices, 50, colors, t, per_ray)[0], rgb)
    # the samples in any order
    order = torch.randperm(ray_indices.shape[0], generator=torch.Generator().manual_seed(9))
    shuffled = grid.composite(weights[order], ray_indices[order], 50, colors[order], t[order])
    for x, y in zip(shuffled, (black, depth, acc), strict=True):
        torch.testing.assert_close(x, y, **TOLERANCE[dtype])


def test_visible_samples_only_need_colours():
    """Colours of the left-out samples do not matter: the same as passing zeros there."""
    ray_indices, alpha, colors, t = packed(50, seed=4)
    weights = grid.composite_weights(alpha, ray_indices, 50)
    visible = weights > 0.05
    assert 0 < visible.sum() < visible.numel()
    background = torch.ones(3, dtype=torch.float64)
    rgb, depth, acc = grid.composite(
        weights, ray_indices, 50, colors[visible], t, background, visible=visible
    )
    zeroed = torch.where(visible[:, None], colors, 0.0)
    want = grid.composite(weights, ray_indices, 50, zeroed, t, background)
    torch.testing.assert_close(rgb, want[0], rtol=1e-12, atol=1e-12)
    assert torch.equal(depth, want[1]) and torch.equal(acc, want[2])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("n_rays", [0, 5])
def test_empty_inputs(device, n_rays):
    none = torch.zeros(0, dtype=torch.long, device=device)
    alpha = torch.zeros(0, device=device)
    weights = grid.composite_weights(alpha, none, n_rays)
    assert weights.shape == (0,) and weights.dtype == torch.float32
    assert grid.accumulate_along_rays(weights, None, none, n_rays).shape == (n_rays,)
    colors = torch.zeros(0, 3, device=device)
    assert torch.equal(
        grid.accumulate_along_rays(weights, colors, none, n_rays),
        torch.zeros(n_rays, 3, device=device),
    )
    background = torch.tensor([0.1, 0.2, 0.3], device=device)
    rgb, depth, acc = grid.composite(weights, none, n_rays, colors, alpha, background)
    assert torch.equal(rgb, background.expand(n_rays, 3))
    assert torch.equal(depth, torch.zeros(n_rays, device=device)) and torch.equal(depth, acc)


def test_gradcheck():
    ray_indices, alpha, colors, t = packed(12, seed=5, most=5)
    alpha.requires_grad_()
    assert torch.autograd.gradcheck(lambda a: grid.composite_weights(a, ray_indices, 12), (alpha,))
    weights = grid.composite_weights(alpha.detach(), ray_indices, 12).requires_grad_()
    colors.requires_grad_()
    t.requires_grad_()
    for values in (colors, t, None):
        inputs = (weights,) if values is None else (weights, values)
        assert torch.autograd.gradcheck(
            lambda w, v=None: grid.accumulate_along_rays(w, v, ray_indices, 12), inputs
        )
    background = torch.rand(3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda a, c, t, b: grid.composite(
            grid.composite_weights(a, ray_indices, 12), ray_indices, 12, c, t, b
        ),
        (alpha, colors, t, background),
    )


def test_torch_compile_fullgraph_matches_eager():
    """Everything compiles whole, the `visible` mask (a data-dependent size) included."""
    torch._dynamo.reset()
    ray_indices, alpha, colors, t = packed(30, torch.float32, seed=6)
    background = torch.tensor([1.0, 0.5, 0.0])

    def render(alpha, colors, t):
        weights = grid.composite_weights(alpha, ray_indices, 30)
        visible = weights > 0.05
        out = grid.composite(
            weights, ray_indices, 30, colors[visible], t, background, visible=visible
        )
        return (weights, grid.accumulate_along_rays(weights, colors, ray_indices, 30), *out)

    alpha.requires_grad_()
    got = torch.compile(render, fullgraph=True)(alpha, colors, t)
    want = render(alpha, colors, t)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b)
    grad_got = torch.autograd.grad(got[2].sum(), alpha)[0]
    grad_want = torch.autograd.grad(want[2].sum(), alpha)[0]
    torch.testing.assert_close(grad_got, grad_want)


def bad_calls():
    ray_indices, alpha, c, t = packed(10, torch.float32, seed=7)
    w, r, n = alpha, ray_indices, 10
    top = int(r.max())
    cw, acc, comp = grid.composite_weights, grid.accumulate_along_rays, grid.composite
    unsorted = r.flip(0)
    shape_sc = r"values: expected shape \[S\] or \[S, C\]"
    return [
        (lambda: cw(w[:, None], r, n), ValueError, r"alpha: expected shape \[S\]"),
        (lambda: cw(w.long(), r, n), TypeError, "alpha: expected a floating-point tensor"),
        (lambda: cw(w, r[:, None], n), ValueError, r"ray_indices: expected shape \[S\] \(1-D\)"),
        (lambda: cw(w, r.float(), n), TypeError, "ray_indices: expected an int64"),
        (lambda: cw(w, r[1:], n), ValueError, f"ray_indices: expected {w.shape[0]} rows"),
        (
            lambda: cw(w, r, top),
            ValueError,
            rf"n_rays: expected at least max\(ray_indices\) \+ 1 = {top + 1}, got {top}",
        ),
        (lambda: cw(w, r - 100, n), ValueError, "ray_indices: expected ray indices >= 0"),
        (lambda: cw(w, unsorted, n), ValueError, "ray_indices: expected non-decreasing"),
        (lambda: cw(w, r, -1), ValueError, "n_rays: expected an int >= 0"),
        (lambda: cw(w, r, 10.0), TypeError, "n_rays: expected an int >= 0"),
        (lambda: cw(w, r.to("meta"), n), ValueError, "ray_indices: expected a tensor on cpu"),
        (lambda: acc(w, c[:, None], r, n), ValueError, shape_sc),
        (lambda: acc(w, c[1:], r, n), ValueError, f"values: expected {w.shape[0]} rows"),
        (lambda: acc(w, c.to("meta"), r, n), ValueError, "values: expected a tensor on cpu"),
        (lambda: acc(w, None, r, 3), ValueError, "n_rays: expected at least"),
        (lambda: acc(w[None], None, r, n), ValueError, r"weights: expected shape \[S\]"),
        (lambda: comp(w, r, n, c, t[1:]), ValueError, "t: expected"),
        (lambda: comp(w, r, n, c[:, :1, None], t), ValueError, r"colors: expected shape \[S, C\]"),
        (lambda: comp(w, r, n, c[1:], t), ValueError, f"colors: expected {w.shape[0]} rows"),
        (lambda: comp(w, r, n, c, t, torch.ones(4)), ValueError, r"background: .* \[3\]"),
        (lambda: comp(w, r, n, c, t, torch.ones(2, 3)), ValueError, r"background: .* \[10, 3\]"),
        (lambda: comp(w, r, n, c, t, visible=w > 0.5), ValueError, "colors: expected .* visible"),
        (
            lambda: comp(w, r, n, c, t, visible=w),
            TypeError,
            r"visible: expected a bool tensor \[S\] or None, got torch.float32",
        ),
        (lambda: comp(w, r, 3, c, t), ValueError, "n_rays: expected at least"),
        (lambda: comp(w, r, n, c.to("meta"), t), ValueError, "colors: expected a tensor on cpu"),
    ]


@pytest.mark.parametrize("index", range(len(bad_calls())))
def test_bad_inputs_name_the_argument(index):
    call, error, message = bad_calls()[index]
    with pytest.raises(error, match=message):
        call()


def test_exported_from_package():
    for name in ("composite_weights", "accumulate_along_rays", "composite"):
        assert name in grid.__all__
