"""The multiresolution grid operator (grid.multires) and its module (grid.MultiresGrid): the
kernels against the reference on random inputs (dense and hashed levels), gradients and
gradients of gradients, opcheck, torch.compile, half precision, bad inputs."""

from __future__ import annotations

import re

import pytest
import torch
from torch.testing import assert_close

import grid
from grid import reference
from tests._helpers import DEVICES, grid_sample, needs_cuda, random_points

# With T = 512: levels 1, 3 and 7 are dense ((R + 1)^3 = 8, 64, 512 <= T), 30 and 200 hashed.
T = 512
RESOLUTIONS = [1, 3, 7, 30, 200]


def _inputs(device, dtype=torch.float64, point_dtype=None, shape=(37,), F=3, seed=0):
    gen = torch.Generator(device=device).manual_seed(seed)
    table = torch.randn(len(RESOLUTIONS), T, F, device=device, dtype=torch.float64, generator=gen)
    points = random_points(shape, device, torch.float64, spread=1.1, generator=gen)
    return table.to(dtype), points.to(point_dtype or dtype)


def _edge_points(device, dtype):
    """Points on the box's faces and corners, and outside it (clamped)."""
    rows = [[1, 1, 1], [-1, -1, -1], [1, -1, 0.3], [1.5, -2, 0.2], [-1e30, 1e30, 0]]
    return torch.tensor(rows, device=device, dtype=dtype)


# ---- the specification -----------------------------------------------------------------


def test_dense_level_is_grid_sample():
    """A dense level is F.grid_sample (align_corners=True) on its (R + 1)^3 vertices."""
    R, F = 6, 4
    table = torch.randn(1, (R + 1) ** 3, F, dtype=torch.float64)
    points = torch.cat(
        [
            random_points((50,), "cpu", torch.float64, spread=1.0),
            _edge_points("cpu", torch.float64)[:3],
        ]
    )
    vertices = table[0].reshape(R + 1, R + 1, R + 1, F).permute(2, 1, 0, 3)  # [x, y, z, F]
    want = grid_sample(vertices, points, True, "border")
    assert_close(reference.multires(table, points, [R]), want)
    assert_close(grid.multires(table, points, [R]), want)


def test_hash_is_instant_ngps():
    """The hashed row of a vertex, from the primes written out by hand (uint32 arithmetic)."""
    R, size = 100, 2**19
    corner = torch.tensor([[3, 5, 7], [100, 99, 98]])
    want = [
        ((x * 1) ^ (y * 2654435761 % 2**32) ^ (z * 805459861 % 2**32)) % size
        for x, y, z in corner.tolist()
    ]
    assert reference.multires_index(corner, R, size).tolist() == want
    assert not reference.multires_level_is_dense(R, size)
    assert reference.multires_level_is_dense(79, size)  # 80^3 = 512000 <= 2^19


# ---- forward and backward against the reference -------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("shape", [(37,), (2, 5), (), (0,)], ids=str)
def test_forward_matches_reference(device, dtype, shape):
    table, points = _inputs(device, dtype, shape=shape)
    got = grid.multires(table, points, RESOLUTIONS)
    assert got.shape == (*shape, len(RESOLUTIONS) * 3) and got.dtype == dtype
    assert_close(got, reference.multires(table, points, RESOLUTIONS))
    if points.numel():
        assert got.abs().min() > 0  # every level read non-zero rows


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_backward_matches_reference(device, dtype):
    table, points = _inputs(device, dtype)
    points = torch.cat([points, _edge_points(device, dtype)])
    grad_out = torch.randn(points.shape[0], len(RESOLUTIONS) * 3, device=device, dtype=dtype)
    grads = []
    for fn in (grid.multires, reference.multires):
        t, p = table.clone().requires_grad_(), points.clone().requires_grad_()
        (fn(t, p, RESOLUTIONS) * grad_out).sum().backward()
        grads.append((t.grad, p.grad))
    (gt, gp), (wt, wp) = grads
    assert_close(gt, wt)
    # float32: sums over levels and corners in another order, the gradients are O(R)
    tol = {} if dtype == torch.float64 else {"rtol": 1e-5, "atol": 1e-6 * wp.abs().max().item()}
    assert_close(gp, wp, **tol)
    # exactly the coordinates outside the box are clamped and get no gradient
    assert torch.equal(gp == 0, points.abs() > 1)


@pytest.mark.parametrize("device", DEVICES)
def test_gradcheck_and_gradgradcheck(device):
    table, points = _inputs(device, shape=(6,), F=2, seed=1)
    points = (points * 0.8).requires_grad_()  # inside the box, away from the clamp
    table.requires_grad_()

    def f(t, p):
        return grid.multires(t, p, RESOLUTIONS)

    # CUDA adds the table gradient with atomics: sums in any order, equal to ~1e-16
    tol = 1e-12 if device == "cuda" else 0.0
    assert torch.autograd.gradcheck(f, (table, points), nondet_tol=tol)
    assert torch.autograd.gradgradcheck(f, (table, points), nondet_tol=tol)


@pytest.mark.parametrize("device", DEVICES)
def test_double_backward_matches_reference(device):
    """An eikonal-style loss: gradients through the point gradient, against autograd through
    the reference."""
    table, points = _inputs(device, shape=(40,), seed=2)
    results = []
    for fn in (grid.multires, reference.multires):
        t, p = table.clone().requires_grad_(), points.clone().requires_grad_()
        out = fn(t, p, RESOLUTIONS)
        weights = torch.linspace(-1, 1, out.shape[-1], device=device, dtype=out.dtype)
        (gp,) = torch.autograd.grad((out * weights).sum(), p, create_graph=True)
        loss = ((gp.norm(dim=-1) - 1) ** 2).sum() + (out**2).sum()
        results.append(torch.autograd.grad(loss, (t, p)))
    for got, want in zip(*results, strict=True):
        assert got.abs().max() > 0
        assert_close(got, want)


@pytest.mark.parametrize("device", DEVICES)
def test_cpu_backward_is_deterministic(device):
    table, points = _inputs(device, torch.float32, shape=(5000,), seed=3)
    grads = []
    for _ in range(2):
        t = table.clone().requires_grad_()
        grid.multires(t, points, RESOLUTIONS).square().sum().backward()
        grads.append(t.grad)
    if device == "cpu":
        assert torch.equal(grads[0], grads[1])
    else:  # atomics add in any order: equal to float32 rounding of the largest rows (~1e3)
        torch.testing.assert_close(
            grads[0], grads[1], rtol=1e-5, atol=1e-6 * grads[0].abs().max().item()
        )


def test_half_table_cpu():
    """float16 / bfloat16 tables with float32 points: float32 sums, as the reference."""
    for dtype in (torch.float16, torch.bfloat16):
        table, points = _inputs("cpu", torch.float32)
        table = table.to(dtype)
        assert_close(
            grid.multires(table, points, RESOLUTIONS),
            reference.multires(table, points, RESOLUTIONS),
        )


# ---- contract: opcheck, torch.compile ------------------------------------------------


@pytest.mark.parametrize("op", ["multires", "multires_backward", "multires_double_backward"])
def test_native_kernels_registered(op):
    assert torch._C._dispatch_has_kernel_for_dispatch_key(f"grid::{op}", "CPU")
    if torch.cuda.is_available():
        assert torch._C._dispatch_has_kernel_for_dispatch_key(f"grid::{op}", "CUDA"), (
            "torch has CUDA but grid was built without the CUDA kernels"
        )


@pytest.mark.parametrize("op", ["multires", "multires_backward"])
def test_autograd_is_registered_in_cpp(op):
    """The Autograd kernel of the op and of its backward op (which holds the double-backward
    rule) is the C++ one from csrc/autograd.cpp, not a Python rule."""
    dump = torch._C._dispatch_dump(f"grid::{op}")
    line = [x for x in dump.splitlines() if x.startswith("Autograd[alias]:")]
    assert len(line) == 1, dump
    assert re.search(r"autograd\.cpp:\d+ ", line[0]), line[0]


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    table, points = _inputs(device, shape=(7,), F=2)
    ops = torch.ops.grid
    t, p = table.clone().requires_grad_(), points.clone().requires_grad_()
    g = torch.randn(7, len(RESOLUTIONS) * 2, device=device, dtype=torch.float64)
    torch.library.opcheck(ops.multires, (t, p, RESOLUTIONS))
    for mask in ([True, True], [False, True], [True, False]):
        torch.library.opcheck(ops.multires_backward, (g, table, points, RESOLUTIONS, mask))
    ggt, ggp = torch.randn_like(table), torch.randn_like(points)
    for mask in ([True, True, True], [False, True, False]):
        torch.library.opcheck(
            ops.multires_double_backward, (ggt, ggp, g, table, points, RESOLUTIONS, mask)
        )
    torch.library.opcheck(
        ops.multires_double_backward, (None, ggp, g, table, points, RESOLUTIONS, [True] * 3)
    )


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph(device):
    torch._dynamo.reset()
    enc = grid.MultiresGrid(
        levels=4, features=2, table_size=T, base_resolution=3, growth_factor=3.0, device=device
    )
    torch.nn.init.normal_(enc.table)

    def model(points):
        return enc(points).square().mean()

    points = random_points((3, 10), device).requires_grad_()
    compiled = torch.compile(model, fullgraph=True)
    got, want = compiled(points), model(points)
    assert_close(got, want)
    for a, b in zip(
        torch.autograd.grad(got, (enc.table, points)),
        torch.autograd.grad(want, (enc.table, points)),
        strict=True,
    ):
        assert_close(a, b)


# ---- CUDA: half precision and deterministic mode -----------------------------------


@needs_cuda
@pytest.mark.parametrize(
    "dtype, F", [(torch.float32, 2), (torch.float16, 4), (torch.bfloat16, 4), (torch.float32, 1)]
)
@pytest.mark.parametrize("layout", ["even", "odd_rows", "unaligned"])
def test_forward_row_pairs_cuda(dtype, F, layout):
    """The forward where rows are 8 bytes (F = 2 float32, F = 4 half) reads x-corner pairs of
    rows with one 16-byte load (csrc/cuda/multires_forward.cu); with an odd T or a table
    that is not 16-byte aligned it reads row by row. Every case against the reference, dense
    and hashed levels, points inside and outside the box."""
    gen = torch.Generator(device="cuda").manual_seed(6)
    rows = SHARED_T + (1 if layout == "odd_rows" else 0)
    L = len(SHARED_RESOLUTIONS)
    storage = torch.randn(L * rows * F + F, device="cuda", generator=gen).to(dtype)
    start = F if layout == "unaligned" else 0  # one row in: 8-byte but not 16-byte aligned
    table = storage[start : start + L * rows * F].view(L, rows, F)
    assert table.is_contiguous()
    assert (table.data_ptr() % 16 == 0) == (layout != "unaligned")
    points = random_points((50_000,), "cuda", torch.float32, spread=1.1, generator=gen)
    got = grid.multires(table, points, SHARED_RESOLUTIONS)
    want = reference.multires(table.float(), points, SHARED_RESOLUTIONS)
    tol = {} if dtype == torch.float32 else {"rtol": 1e-2, "atol": 1e-2}
    assert_close(got.float(), want, **tol)


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_table_cuda(dtype):
    table, points = _inputs("cuda", torch.float32, shape=(3000,))
    table = table.to(dtype)
    grad_out = torch.randn(3000, len(RESOLUTIONS) * 3, device="cuda", dtype=dtype)
    grads = []
    for fn in (grid.multires, reference.multires):
        t, p = table.clone().requires_grad_(), points.clone().requires_grad_()
        out = fn(t, p, RESOLUTIONS)
        (out * grad_out).float().sum().backward()
        grads.append((out, t.grad, p.grad))
    # the table gradient is added point by point in the table's dtype (bfloat16: 8 bits), in the
    # atomics' order on the GPU and the reference's on the CPU: a row whose contributions cancel
    # keeps a few units in the last place of its larger terms (seen: 0.035 on a row of 0.56)
    tol = {"rtol": 2e-2, "atol": 2e-2 if dtype == torch.float16 else 5e-2}
    for got, want in zip(*grads, strict=True):
        assert_close(got.float(), want.float(), **tol)


@needs_cuda
def test_deterministic_mode_cuda():
    """Under torch.use_deterministic_algorithms the table gradient is bitwise repeatable."""
    table, points = _inputs("cuda", torch.float32, shape=(20000,), seed=4)
    grads = []
    try:
        torch.use_deterministic_algorithms(True)
        for _ in range(2):
            t = table.clone().requires_grad_()
            grid.multires(t, points, RESOLUTIONS).square().sum().backward()
            grads.append(t.grad)
    finally:
        torch.use_deterministic_algorithms(False)
    assert torch.equal(grads[0], grads[1])
    t = table.clone().requires_grad_()
    reference.multires(t, points, RESOLUTIONS).square().sum().backward()
    assert_close(grads[0], t.grad)


# With T = 2^16 and F features, a level's float32 table-gradient rows fit the backward's
# shared-memory budget (100 KB a block) where (R + 1)^3 F 4 B <= 102400: for F = 1 levels
# 16, 22 and 28 do and 29 (27000 rows) does not; for F = 2 level 22 (97 KB) does and 23 not;
# for F = 3 and 8 the coarse ones only. Level 39 is dense above every budget, 200 hashed.
SHARED_T = 2**16
SHARED_RESOLUTIONS = [1, 16, 22, 23, 28, 29, 39, 200]


@needs_cuda
@pytest.mark.parametrize("F", [1, 2, 3, 8])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("spread", [1.0, 0.02], ids=["uniform", "concentrated"])
def test_backward_shared_levels_cuda(F, dtype, spread):
    """The table gradient where coarse levels are summed per block in shared memory and the
    others with global atomics, levels just below and above that threshold: against the
    reference in float32. "concentrated": every point in a box of 1 % of the grid, so each
    coarse row gets thousands of contributions (200000 points on a few rows)."""
    gen = torch.Generator(device="cuda").manual_seed(5)
    L, N = len(SHARED_RESOLUTIONS), 200_000
    table = torch.randn(L, SHARED_T, F, device="cuda", generator=gen).to(dtype)
    points = random_points((N,), "cuda", torch.float32, spread=spread, generator=gen) + 0.1
    grad_out = torch.randn(N, L * F, device="cuda", generator=gen).to(dtype)
    t = table.clone().requires_grad_()
    grid.multires(t, points, SHARED_RESOLUTIONS).backward(grad_out)
    # the reference in float32 (half tables would sum its rows in half precision)
    w = table.float().requires_grad_()
    reference.multires(w, points, SHARED_RESOLUTIONS).backward(grad_out.float())
    want = w.grad.to(dtype).float()  # ours is summed in float32 and rounded once, as this
    got = t.grad.float()
    assert t.grad.dtype == dtype
    # float32: rows of up to 2e5 terms (~1e2) summed in another order, errors ~1e-7 x terms;
    # half: one rounding of the sum more (bfloat16: 2^-8 relative)
    rtol = 1e-4 if dtype == torch.float32 else 1e-2
    for level in range(L):
        scale = want[level].abs().max().item()
        assert scale > 0, level
        assert_close(got[level], want[level], rtol=rtol, atol=1e-4 * scale)
    if dtype == torch.float32:  # the rows no point touches stay exactly zero
        assert torch.equal(got == 0, want == 0)


# ---- bad input -------------------------------------------------------------------------

BAD = [
    (
        lambda d: (torch.randn(T, 2, device=d), torch.zeros(2, 3, device=d), [1]),
        "table: expected shape",
    ),
    (
        lambda d: (torch.randn(1, 0, 2, device=d), torch.zeros(2, 3, device=d), [1]),
        "table: expected every axis",
    ),
    (
        lambda d: (torch.randn(33, 8, 1, device=d), torch.zeros(2, 3, device=d), [1] * 33),
        "at most 32 levels",
    ),
    (
        lambda d: (torch.randn(2, 8, 2, device=d), torch.zeros(2, 3, device=d), [1]),
        "resolutions: expected 2",
    ),
    (
        lambda d: (torch.randn(1, 8, 2, device=d), torch.zeros(2, 3, device=d), [0]),
        "resolutions: expected cells",
    ),
    (
        lambda d: (torch.randn(1, 8, 2, device=d), torch.zeros(2, 3, device=d), [2**24 + 1]),
        "resolutions: expected cells",
    ),
    (
        lambda d: (torch.randn(1, 8, 2, device=d), torch.zeros(2, 2, device=d), [1]),
        r"points: expected shape \[\.\.\., 3\]",
    ),
    (
        lambda d: (torch.randn(1, 8, 2, device=d).long(), torch.zeros(2, 3, device=d), [1]),
        "table: expected a floating-point",
    ),
    (
        lambda d: (torch.randn(1, 8, 2, device=d), torch.zeros(2, 3, device=d).double(), [1]),
        "points: expected dtype",
    ),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("make, message", BAD)
def test_bad_input(device, make, message):
    table, points, resolutions = make(device)
    with pytest.raises(RuntimeError, match=message):
        grid.multires(table, points, resolutions)


def test_non_finite_points_raise_on_cpu():
    table = torch.randn(1, 8, 2)
    for bad in (float("nan"), float("inf")):
        with pytest.raises(RuntimeError, match="points: expected finite coordinates"):
            grid.multires(table, torch.tensor([[0.0, bad, 0.0]]), [1])


@needs_cuda
def test_devices_must_match():
    with pytest.raises(RuntimeError, match="points: expected a tensor on the same device"):
        grid.multires(torch.randn(1, 8, 2, device="cuda"), torch.zeros(2, 3), [1])


# ---- the module ------------------------------------------------------------------------


def test_module_shapes_and_levels():
    enc = grid.MultiresGrid(
        levels=16, features=2, table_size=2**14, base_resolution=16, growth_factor=1.5
    )
    assert enc.resolutions == [int(16 * 1.5**level) for level in range(16)]
    assert enc.get_out_dim() == 32 and enc.table.shape == (16, 2**14, 2)
    assert enc.dense_levels == 2  # 25^3 = 15625 <= 2^14 < 37^3
    assert enc.table.abs().max() <= 1e-4 and enc.table.abs().max() > 0
    text = repr(enc)
    assert "levels=16" in text and "table_size=16384" in text and "2 dense" in text
    assert enc(torch.rand(2, 7, 3)).shape == (2, 7, 32)


def test_module_bounds_map_onto_the_grid():
    bounds = ((0.0, -2.0, 1.0), (4.0, 2.0, 2.0))
    enc = grid.MultiresGrid(
        levels=3,
        features=2,
        table_size=T,
        base_resolution=2,
        growth_factor=4,
        bounds=bounds,
        dtype=torch.float64,
    )
    torch.nn.init.normal_(enc.table)
    lo, hi = torch.tensor(bounds, dtype=torch.float64)
    xyz = lo + torch.rand(30, 3, dtype=torch.float64) * (hi - lo)
    want = reference.multires(enc.table, (xyz - lo) / (hi - lo) * 2 - 1, enc.resolutions)
    assert_close(enc(xyz), want)


def test_module_masked_adam_updates_only_touched_rows():
    enc = grid.MultiresGrid(
        levels=2, features=2, table_size=4096, base_resolution=4, growth_factor=8
    )
    before = enc.table.detach().clone()
    opt = grid.MaskedAdam(enc.parameters(), lr=1e-2)
    enc(torch.rand(5, 3) * 0.2).square().sum().backward()
    touched = enc.table.grad.ne(0).any(dim=-1)  # [L, T]
    assert 0 < touched.sum() <= 2 * 5 * 8
    opt.step()
    changed = enc.table.detach().ne(before).any(dim=-1)
    assert torch.equal(changed, touched)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"levels": 0}, "levels: expected an int >= 1"),
        ({"levels": 33}, r"levels: expected an int in \[1, 32\]"),
        ({"features": 0}, "features: expected an int >= 1"),
        ({"table_size": 2**31}, "table_size: expected an int in"),
        ({"growth_factor": 0.5}, "growth_factor: expected a number >= 1"),
        ({"growth_factor": 10.0}, "growth_factor: the finest level"),
        ({"bounds": ((0, 0, 0), (1, 0, 1))}, "bounds: expected min < max"),
        ({"dtype": torch.int32}, "dtype: expected a floating-point"),
    ],
)
def test_module_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        grid.MultiresGrid(**kwargs)


def test_module_rejects_bad_points():
    with pytest.raises(ValueError, match=r"xyz: expected shape \[\.\.\., 3\]"):
        grid.MultiresGrid(levels=1, table_size=8, base_resolution=1)(torch.zeros(4, 2))


def test_set_active_levels_zeroes_the_finer_levels_and_their_gradients():
    """MultiresGrid.set_active_levels(k): levels >= k give 0 and get no gradient; the k
    coarsest give what they gave with all levels on; bad counts name the argument."""
    torch.manual_seed(0)
    enc = grid.MultiresGrid(
        levels=5, features=3, table_size=2**9, base_resolution=3, growth_factor=1.7
    )
    enc.table.data.uniform_(-1, 1)
    points = torch.rand(64, 3) * 2 - 1
    full = enc(points)
    enc.set_active_levels(2)
    part = enc(points)
    torch.testing.assert_close(part[:, :6], full[:, :6], rtol=0, atol=0)
    assert part[:, 6:].abs().sum() == 0 and full[:, 6:].abs().sum() > 0
    (part * torch.randn_like(part)).sum().backward()
    assert enc.table.grad[:2].abs().sum() > 0 and enc.table.grad[2:].abs().sum() == 0
    enc.set_active_levels(5)
    torch.testing.assert_close(enc(points), full, rtol=0, atol=0)
    for bad in (0, 6, 2.0, True):
        with pytest.raises(ValueError, match=r"^count: expected an integer in \[1, 5\]"):
            enc.set_active_levels(bad)
