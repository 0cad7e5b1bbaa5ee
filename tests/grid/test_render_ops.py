"""The native rendering ops: grid.march_rays_static (bitwise against the per-ray reference and
grid.march_rays), grid.composite_rays and grid.ray_weights (against the float64 references,
gradcheck), opcheck, torch.compile, no host synchronisation on CUDA, input errors."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

import grid
from grid import reference
from tests._helpers import DEVICES, needs_cuda
from tests.grid.test_rays import HI, LO, random_rays

DTYPES = [torch.float32, torch.float64]


def occupancy(device="cpu", seed: int = 1) -> grid.OccupancyGrid:
    """A random occupancy grid over a box a little larger than the marching box."""
    occ = grid.OccupancyGrid((7, 6, 8), ((-1.2, -1.6, -0.7), (1.1, 1.2, 2.1)), device=device)
    gen = torch.Generator().manual_seed(seed)
    occ.flags.copy_(torch.rand(7, 6, 8, generator=gen) < 0.5)
    return occ


def march_inputs(n: int, dtype, device, seed: int = 0):
    origins, directions = random_rays(n, dtype, seed)
    gen = torch.Generator().manual_seed(seed + 10)
    step = (0.05 + 0.2 * torch.rand(n, generator=gen, dtype=dtype)).to(device)
    jitter = torch.rand(n, generator=gen, dtype=dtype).to(device)
    lo, hi = torch.tensor(LO, dtype=dtype), torch.tensor(HI, dtype=dtype)
    return origins.to(device), directions.to(device), lo.to(device), hi.to(device), step, jitter


def reference_samples(origins, directions, lo, hi, step, jitter, near, max_steps, occ):
    flags = occ.flags.cpu() if occ is not None else None
    bounds = occ.bounds.cpu().to(origins.dtype) if occ is not None else None
    cpu = [x.cpu() for x in (origins, directions, lo, hi, step, jitter)]
    return reference.march_rays_static(*cpu, near, max_steps, flags, bounds)


# ---- march_rays_static ----------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("with_occupancy", [False, True])
def test_march_matches_the_per_ray_reference_bitwise(device, dtype, with_occupancy):
    o, d, lo, hi, step, jitter = march_inputs(120, dtype, device)
    step[7] = 0.0  # no samples for a zero, negative or NaN step
    step[8] = -0.1
    step[9] = float("nan")
    occ = occupancy(device) if with_occupancy else None
    got = grid.march_rays_static(
        o, d, lo, hi, step, max_steps=14, near=0.3, jitter=jitter, occupancy=occ
    )
    rays, t, points, counts = reference_samples(o, d, lo, hi, step, jitter, 0.3, 14, occ)
    assert rays.shape[0] > 100 and counts[7:10].tolist() == [0, 0, 0]
    if occ is None:
        assert (counts == 14).any()  # some rays are cut at max_steps
    assert got.t.dtype == got.points.dtype == dtype and got.ray_indices.dtype == torch.int64
    assert torch.equal(got.ray_indices.cpu(), rays)
    assert torch.equal(got.t.cpu(), t) and torch.equal(got.points.cpu(), points)
    want_offsets = torch.cat([torch.zeros(1, dtype=torch.int64), counts.cumsum(0)])
    assert torch.equal(got.offsets.cpu(), want_offsets)
    assert int(got.total) == rays.shape[0]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_march_rays_with_jitter_is_the_static_march(device, dtype):
    """Stratified samples (one random shift per ray): grid.march_rays places them where
    the native marcher does, and they move off the centres."""
    o, d, lo, hi, _, jitter = march_inputs(200, dtype, device, seed=4)
    occ = occupancy(device)
    got = grid.march_rays(o, d, lo, hi, 0.07, 0.2, occ, jitter=jitter)
    want = grid.march_rays_static(
        o, d, lo, hi, 0.07, max_steps=1000, near=0.2, occupancy=occ, jitter=jitter
    )
    assert torch.equal(got.ray_indices, want.ray_indices)
    torch.testing.assert_close(got.t, want.t)
    torch.testing.assert_close(got.points, want.points)
    centred = grid.march_rays(o, d, lo, hi, 0.07, 0.2, None)
    shifted = grid.march_rays(o, d, lo, hi, 0.07, 0.2, None, jitter=jitter)
    assert torch.equal(centred.ray_indices, shifted.ray_indices)  # the same counts
    moved = (shifted.t - centred.t) / 0.07  # [S] jitter_r - 0.5
    torch.testing.assert_close(moved, (jitter - 0.5)[shifted.ray_indices], atol=1e-4, rtol=0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_march_with_centred_steps_is_march_rays(device, dtype):
    """jitter 0.5 and one step for every ray: bitwise the samples of grid.march_rays."""
    o, d, lo, hi, _, _ = march_inputs(200, dtype, device, seed=3)
    occ = occupancy(device)
    got = grid.march_rays_static(o, d, lo, hi, 0.07, max_steps=1000, near=0.2, occupancy=occ)
    want = grid.march_rays(o.cpu(), d.cpu(), lo.cpu(), hi.cpu(), 0.07, 0.2, occupancy("cpu"))
    assert torch.equal(got.ray_indices.cpu(), want.ray_indices)
    assert torch.equal(got.t.cpu(), want.t) and torch.equal(got.points.cpu(), want.points)


@pytest.mark.parametrize("device", DEVICES)
def test_march_capacity_pads_and_drops(device):
    o, d, lo, hi, step, jitter = march_inputs(60, torch.float32, device, seed=5)
    exact = grid.march_rays_static(o, d, lo, hi, step, max_steps=64, jitter=jitter)
    total = int(exact.total)
    assert exact.t.shape[0] == total > 100
    # more room than needed: the samples, then padding (ray R, t 0, a point outside the box)
    big = grid.march_rays_static(
        o, d, lo, hi, step, max_steps=64, jitter=jitter, capacity=total + 9
    )
    assert torch.equal(big.ray_indices[:total], exact.ray_indices)
    assert torch.equal(big.points[:total], exact.points)
    assert (big.ray_indices[total:] == 60).all() and (big.t[total:] == 0).all()
    assert torch.equal(big.points[total:], (2 * lo - hi).expand(9, 3))
    assert torch.equal(big.offsets, exact.offsets) and int(big.total) == total
    # less room: the first samples, the offsets clipped, the total still what was asked for
    small = grid.march_rays_static(o, d, lo, hi, step, max_steps=64, jitter=jitter, capacity=77)
    assert torch.equal(small.ray_indices, exact.ray_indices[:77])
    assert torch.equal(small.t, exact.t[:77])
    assert torch.equal(small.offsets, exact.offsets.clamp_max(77)) and int(small.total) == total
    empty = grid.march_rays_static(o, d, lo, hi, step, max_steps=64, capacity=0)
    assert empty.t.shape == (0,) and empty.points.shape == (0, 3)


@pytest.mark.parametrize("device", DEVICES)
def test_march_fill_stays_inside_each_rays_range(device):
    # offsets that are not the scan of this march's counts: every ray writes inside its own
    # range only (no race between rays on CUDA), cut short or padded; nothing is left unset
    ops = torch.ops.grid
    o, d, lo, hi, step, jitter = march_inputs(12, torch.float64, device)
    counts = ops.march_rays_count(o, d, lo, hi, 0.0, step, jitter, None, None, 30)
    assert counts.max() > 3
    ranges = torch.full_like(counts, 3)  # every ray gets 3 slots
    offsets = torch.cat([counts.new_zeros(1), ranges.cumsum(0)])
    rays, t, points = ops.march_rays_fill(
        o, d, lo, hi, 0.0, step, jitter, None, None, 30, offsets, 36
    )
    exact = torch.cat([counts.new_zeros(1), counts.cumsum(0)])
    rays_e, t_e, _ = ops.march_rays_fill(
        o, d, lo, hi, 0.0, step, jitter, None, None, 30, exact, int(exact[-1])
    )
    for r in range(12):
        kept = min(int(counts[r]), 3)
        got = slice(3 * r, 3 * r + kept)
        want = slice(int(exact[r]), int(exact[r]) + kept)
        assert (rays[got] == r).all() and torch.equal(t[got], t_e[want])
        pad = slice(3 * r + kept, 3 * r + 3)
        assert (rays[pad] == 12).all() and (t[pad] == 0).all()
        assert torch.equal(points[pad], (2 * lo - hi).expand(3 - kept, 3))


def test_march_samples_are_constants_for_autograd():
    o, d, lo, hi, step, jitter = march_inputs(10, torch.float64, "cpu")
    o.requires_grad_()
    out = grid.march_rays_static(o, d, lo, hi, step, max_steps=50, jitter=jitter)
    assert not out.points.requires_grad and not out.t.requires_grad


# ---- composite_rays and ray_weights ---------------------------------------------------------


def packed(n_rays: int, channels: int, dtype, device, seed: int = 0, pad: int = 5):
    """Random packed samples: rays of 0 to 11 samples (some opaque), then `pad` padding
    samples outside every ray."""
    gen = torch.Generator().manual_seed(seed)
    counts = torch.randint(0, 12, (n_rays,), generator=gen)
    if n_rays > 3:
        counts[0] = counts[3] = 0
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), counts.cumsum(0)])
    s = int(offsets[-1]) + pad
    tau = torch.rand(s, generator=gen, dtype=dtype) * 2
    tau[::7] = 20.0  # nearly opaque
    tau[::11] = 0.0
    colors = torch.rand(s, channels, generator=gen, dtype=dtype)
    t = torch.rand(s, generator=gen, dtype=dtype) * 3
    return [x.to(device) for x in (tau, colors, t, offsets)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("channels", [1, 3, 6])
@pytest.mark.parametrize("background", ["none", "shared", "per_ray"])
def test_composite_matches_the_reference(device, dtype, channels, background):
    tau, colors, t, offsets = packed(40, channels, dtype, device)
    bg = {
        "none": None,
        "shared": torch.rand(channels, dtype=dtype, device=device),
        "per_ray": torch.rand(40, channels, dtype=dtype, device=device),
    }[background]
    inputs = [x.detach().requires_grad_() for x in (tau, colors, t)]
    if bg is not None:
        bg.requires_grad_()
    got = grid.composite_rays(*inputs, offsets, bg)
    cpu = [x.detach().cpu().double().requires_grad_() for x in (tau, colors, t)]
    bg_cpu = None if bg is None else bg.detach().cpu().double().requires_grad_()
    want = reference.composite_rays(*cpu, offsets.cpu(), bg_cpu)
    # float32: a thickness gradient is a difference of sums over the ray (its suffix as the
    # total minus the prefix), off by a few float32 roundings of the total
    tol = dict(rtol=1e-5, atol=2e-6) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-12)
    for a, b in zip(got, want, strict=True):
        assert a.dtype == dtype
        torch.testing.assert_close(a.cpu().double(), b.detach(), **tol)
    gen = torch.Generator().manual_seed(9)
    grads = [torch.randn(x.shape, generator=gen, dtype=torch.float64) for x in want]
    leaves = inputs + ([bg] if bg is not None else [])
    leaves_cpu = cpu + ([bg_cpu] if bg is not None else [])
    got_g = torch.autograd.grad(got, leaves, [g.to(device, dtype) for g in grads])
    want_g = torch.autograd.grad(want, leaves_cpu, grads)
    for a, b in zip(got_g, want_g, strict=True):
        torch.testing.assert_close(a.cpu().double(), b, **tol)
    # padding samples (outside every ray) get no gradient
    assert (got_g[0][-5:] == 0).all() and (got_g[1][-5:] == 0).all()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_long_rays_match_the_reference(device, dtype):
    """Rays longer than a CUDA warp's 32 lanes (one chunk of samples at a time, the
    transmittance carried from chunk to chunk), of exactly 32 and 64 samples among them,
    thin enough that light reaches their ends."""
    gen = torch.Generator().manual_seed(5)
    counts = torch.randint(0, 151, (30,), generator=gen)
    counts[1], counts[2] = 32, 64
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), counts.cumsum(0)]).to(device)
    s = int(offsets[-1]) + 5  # and 5 padding samples

    def draw(*shape: int) -> Tensor:
        return torch.rand(shape, generator=gen, dtype=dtype).to(device)

    tau = (draw(s) * 0.05).requires_grad_()
    colors, t = draw(s, 3).requires_grad_(), draw(s).requires_grad_()
    bg = draw(3)
    got = grid.composite_rays(tau, colors, t, offsets, bg)
    cpu = [x.detach().cpu().double().requires_grad_() for x in (tau, colors, t)]
    want = reference.composite_rays(*cpu, offsets.cpu(), bg.cpu().double())
    tol = dict(rtol=1e-5, atol=2e-6) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-12)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a.cpu().double(), b.detach(), **tol)
    assert 0.9 < want[2].max() < 0.99  # long rays, and light reaches the end of each
    grads = [torch.randn(x.shape, generator=gen, dtype=torch.float64) for x in want]
    got_g = torch.autograd.grad(got, (tau, colors, t), [g.to(device, dtype) for g in grads])
    want_g = torch.autograd.grad(want, cpu, grads)
    for a, b in zip(got_g, want_g, strict=True):
        torch.testing.assert_close(a.cpu().double(), b, **tol)
    weights = grid.ray_weights(tau.detach(), offsets)
    n = int(offsets[-1])
    torch.testing.assert_close(
        weights.cpu().double(), reference.ray_weights(cpu[0].detach(), offsets.cpu()), **tol
    )
    assert (weights[n:] == 0).all()


@pytest.mark.parametrize("device", DEVICES)
def test_composite_gradcheck(device):
    tau, colors, t, offsets = packed(9, 3, torch.float64, device, seed=2)
    tau = tau.clamp_max(3)  # finite differences need no saturated samples
    bg = torch.rand(3, dtype=torch.float64, device=device, requires_grad=True)
    args = [x.requires_grad_() for x in (tau, colors, t)]

    def fn(tau, colors, t, bg):
        return grid.composite_rays(tau, colors, t, offsets, bg)

    assert torch.autograd.gradcheck(fn, (*args, bg))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_ray_weights_match_the_reference_and_composite_weights(device, dtype):
    tau, _, _, offsets = packed(50, 1, dtype, device, seed=4)
    got = grid.ray_weights(tau, offsets)
    tol = dict(rtol=1e-5, atol=1e-7) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(got.cpu(), reference.ray_weights(tau.cpu(), offsets.cpu()), **tol)
    assert (got[-5:] == 0).all()
    # the same weights as the log-space packed version, from alpha = 1 - exp(-tau)
    n = int(offsets[-1])
    ray_ids = torch.repeat_interleave(torch.arange(50, device=device), offsets.diff())
    want = grid.composite_weights(-torch.expm1(-tau[:n]), ray_ids, 50)
    torch.testing.assert_close(got[:n], want, rtol=1e-4, atol=2e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    ops = torch.ops.grid
    o, d, lo, hi, step, jitter = march_inputs(12, torch.float64, device)
    occ = occupancy(device)
    bounds = occ.bounds.to(torch.float64)
    counts = ops.march_rays_count(o, d, lo, hi, 0.1, step, jitter, occ.flags, bounds, 30)
    offsets = torch.cat([counts.new_zeros(1), counts.cumsum(0)])
    o_grad = o.clone().requires_grad_()  # the march is checked as non-differentiable
    for args in (
        (o_grad, d, lo, hi, 0.1, step, jitter, occ.flags, bounds, 30),
        (o, d, lo, hi, 0.0, step, None, None, None, 30),
    ):
        torch.library.opcheck(ops.march_rays_count, args)
        torch.library.opcheck(ops.march_rays_fill, (*args, offsets, 25))
    tau, colors, t, offs = packed(6, 3, torch.float64, device)
    tau, colors, t = (x.requires_grad_() for x in (tau, colors, t))
    bg = torch.rand(3, dtype=torch.float64, device=device, requires_grad=True)
    torch.library.opcheck(ops.composite_rays, (tau, colors, t, offs, bg))
    torch.library.opcheck(ops.composite_rays, (tau, colors, t, offs, None))
    torch.library.opcheck(ops.ray_weights, (tau, offs))
    g = [torch.rand(6, 3, dtype=torch.float64, device=device)] + [
        torch.rand(6, dtype=torch.float64, device=device) for _ in range(2)
    ]
    td, cd, tt = tau.detach(), colors.detach(), t.detach()
    for mask in ([True, True, True], [True, False, False], [False, True, True]):
        torch.library.opcheck(
            ops.composite_rays_backward, (*g, td, cd, tt, offs, bg.detach(), mask)
        )


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph(device):
    torch._dynamo.reset()
    o, d, lo, hi, step, jitter = march_inputs(32, torch.float32, device, seed=6)
    occ = occupancy(device)
    colors_of = torch.nn.Linear(3, 3).to(device)

    def render(o, d, step, jitter):
        s = grid.march_rays_static(
            o, d, lo, hi, step, max_steps=40, jitter=jitter, occupancy=occ, capacity=500
        )
        tau = s.points.norm(dim=-1) * 0.3
        w = grid.ray_weights(tau, s.offsets)
        rgb, depth, acc = grid.composite_rays(
            tau, torch.sigmoid(colors_of(s.points)), s.t, s.offsets, torch.ones(3, device=device)
        )
        return rgb.square().sum() + depth.sum() + acc.sum() + w.sum()

    want = render(o, d, step, jitter)
    got = torch.compile(render, fullgraph=True)(o, d, step, jitter)
    torch.testing.assert_close(got, want)
    g_want = torch.autograd.grad(want, colors_of.weight)
    g_got = torch.autograd.grad(got, colors_of.weight)
    torch.testing.assert_close(g_got, g_want)


@needs_cuda
def test_cuda_ops_never_wait_for_the_device():
    o, d, lo, hi, step, jitter = march_inputs(64, torch.float32, "cuda")
    occ = occupancy("cuda")
    colors = torch.rand(3, device="cuda", requires_grad=True)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        s = grid.march_rays_static(
            o, d, lo, hi, step, max_steps=40, jitter=jitter, occupancy=occ, capacity=800
        )
        tau = s.points.norm(dim=-1) * 0.3
        w = grid.ray_weights(tau, s.offsets)
        rgb, depth, acc = grid.composite_rays(
            tau, colors.expand(800, 3), s.t, s.offsets, torch.ones(3, device="cuda")
        )
        (rgb.sum() + depth.sum() + acc.sum() + w.sum()).backward()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert colors.grad.isfinite().all() and int(s.total) > 0


# ---- bad inputs -----------------------------------------------------------------------------


def test_bad_inputs_name_the_argument():
    o, d, lo, hi, step, jitter = march_inputs(8, torch.float32, "cpu")
    march = grid.march_rays_static
    cases = [
        (lambda: march(o, d, lo, hi, step, max_steps=-1), ValueError, "max_steps"),
        (lambda: march(o, d, lo, hi, step, max_steps=5, capacity=-2), ValueError, "capacity"),
        (lambda: march(o, d, lo, hi, step[:3], max_steps=5), ValueError, "step"),
        (lambda: march(o, d, lo, hi, 0.1, max_steps=5, jitter=jitter[:2]), ValueError, "jitter"),
        (lambda: march(o, d, lo, hi, 0.1, max_steps=5, jitter=1.0), ValueError, "jitter"),
        (lambda: grid.march_rays(o, d, lo, hi, 0.1, jitter=-0.1), ValueError, "jitter"),
        (lambda: grid.march_rays(o, d, lo, hi, 0.1, jitter=jitter[:2]), ValueError, "jitter"),
        (lambda: march(o, d, lo, hi, -0.1, max_steps=5), ValueError, "step"),
        (lambda: march(o, d, lo, hi, 0.1, max_steps=5, occupancy=3), TypeError, "occupancy"),
    ]
    tau, colors, t, offsets = packed(4, 3, torch.float32, "cpu")
    comp = grid.composite_rays
    cases += [
        (lambda: comp(tau.double(), colors, t, offsets), TypeError, "colors"),
        (lambda: comp(tau, colors[:-1], t, offsets), ValueError, "colors"),
        (lambda: comp(tau, colors, t[:-1], offsets), ValueError, "t"),
        (lambda: comp(tau, colors, t, offsets.int()), TypeError, "offsets"),
        (lambda: comp(tau, colors, t, offsets, torch.ones(2)), ValueError, "background"),
        (lambda: comp(tau.half(), colors, t, offsets), TypeError, "tau"),
        (lambda: grid.ray_weights(tau, offsets[None]), ValueError, "offsets"),
    ]
    for call, error, name in cases:
        with pytest.raises(error, match=name):
            call()


@pytest.mark.parametrize("device", DEVICES)
def test_composite_backward_checks_its_incoming_gradients(device):
    """The native backward (called directly, as a custom autograd would) names a gradient of
    the wrong shape or dtype, on both backends."""
    tau, colors, t, offsets = packed(4, 3, torch.float32, device)
    n_rays, channels = offsets.shape[0] - 1, colors.shape[1]
    good = {
        "grad_rgb": torch.rand(n_rays, channels, device=device),
        "grad_depth": torch.rand(n_rays, device=device),
        "grad_acc": torch.rand(n_rays, device=device),
    }
    backward = torch.ops.grid.composite_rays_backward
    grads = backward(*good.values(), tau, colors, t, offsets, None, [True, True, True])
    assert grads[0].shape == tau.shape and grads[1].shape == colors.shape
    for name, value in good.items():
        for bad in (value[:-1], value.double()):
            args = {**good, name: bad}
            with pytest.raises(RuntimeError, match=name):
                backward(*args.values(), tau, colors, t, offsets, None, [True, True, True])
