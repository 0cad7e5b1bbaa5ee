"""grid.rays: the slab test and packed samples against the per-ray loops of grid.reference;
layout, empty inputs, non-finite rays, torch.compile and input errors."""

from __future__ import annotations

import math

import pytest
import torch

import grid
from grid import reference
from tests._helpers import DEVICES

LO = (-1.0, -1.5, -0.5)
HI = (1.0, 1.0, 2.0)
DTYPES = [torch.float32, torch.float64]


def random_rays(n: int, dtype=torch.float32, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Rays of every kind: from outside towards the box (most hit it), from inside it,
    random (many miss), with zero direction components, including an origin exactly on a
    slab plane with the direction parallel to that slab; ray 0's direction is all zeros
    (inside the box: no samples)."""
    gen = torch.Generator().manual_seed(seed)
    lo, hi = torch.tensor(LO, dtype=torch.float64), torch.tensor(HI, dtype=torch.float64)
    centre = (lo + hi) / 2
    origins = centre + torch.randn(n, 3, generator=gen, dtype=torch.float64) * 3
    targets = lo + (hi - lo) * torch.rand(n, 3, generator=gen, dtype=torch.float64)
    directions = targets - origins
    k = n // 4
    origins[:k] = lo + (hi - lo) * torch.rand(k, 3, generator=gen, dtype=torch.float64)
    directions[k : 2 * k] = torch.randn(k, 3, generator=gen, dtype=torch.float64)
    directions[::5, 0] = 0.0
    directions[::7, 2] = 0.0
    directions[::11, 1] = -0.0
    origins[3, 0], directions[3] = lo[0], torch.tensor([0.0, 0.3, 0.4], dtype=torch.float64)
    origins[4], directions[4] = lo, torch.tensor([0.5, 0.0, 0.0], dtype=torch.float64)
    return origins.to(dtype), directions.to(dtype)


def box(dtype=torch.float32, device="cpu") -> tuple[torch.Tensor, torch.Tensor]:
    return torch.tensor(LO, dtype=dtype, device=device), torch.tensor(
        HI, dtype=dtype, device=device
    )


# ---- ray_aabb ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("near", [0.0, 0.7])
def test_ray_aabb_matches_the_per_ray_reference_bitwise(dtype, near):
    origins, directions = random_rays(200, dtype)
    lo, hi = box(dtype)
    t_near, t_far = grid.ray_aabb(origins, directions, lo, hi, near)
    ref_near, ref_far = reference.ray_aabb(origins, directions, lo, hi, near)
    assert t_near.dtype == t_far.dtype == dtype and t_near.shape == (200,)
    assert torch.equal(t_near, ref_near) and torch.equal(t_far, ref_far)
    hits = t_far > t_near
    assert 0.3 < hits.float().mean() < 0.95  # the test really has hits and misses
    assert (t_near >= near).all()


def test_ray_aabb_known_values():
    origins = torch.tensor([[0.0, 0.0, 4.0], [0.0, 3.0, 4.0], [0.0, 0.0, 0.0], [-1.0, 0.0, 0.0]])
    directions = torch.tensor(
        [[0.0, 0.0, -1.0], [0.0, 0.0, -1.0], [0.0, 0.0, 2.0], [0.0, 1.0, 0.0]]
    )
    t_near, t_far = grid.ray_aabb(origins, directions, LO, HI)
    assert t_near[0].item() == pytest.approx(2.0) and t_far[0].item() == pytest.approx(4.5)
    assert t_far[1] <= t_near[1]  # misses: above the box
    assert t_near[2] == 0 and t_far[2].item() == pytest.approx(1.0)  # starts inside
    # on the x = xmin plane, parallel to it: inside, from 0 to where y leaves the box
    assert t_near[3] == 0 and t_far[3].item() == pytest.approx(1.0)


def test_ray_aabb_takes_sequences_or_tensors_alike():
    origins, directions = random_rays(50, torch.float64)
    a = grid.ray_aabb(origins, directions, LO, HI, 0.5)
    b = grid.ray_aabb(origins, directions, *box(torch.float64), near=0.5)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    c = grid.ray_aabb(origins.float(), directions.float(), *box(torch.float64))
    assert c[0].dtype == c[1].dtype == torch.float32  # the rays' dtype


# ---- march_rays -------------------------------------------------------------------------


def occupancy(resolution=(6, 5, 7), seed=3, fill=0.6) -> grid.OccupancyGrid:
    occ = grid.OccupancyGrid(resolution, (LO, HI))
    gen = torch.Generator().manual_seed(seed)
    occ.flags.copy_(torch.rand(resolution, generator=gen) < fill)
    return occ


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("with_occupancy", [False, True])
def test_march_rays_matches_the_per_ray_reference_bitwise(dtype, with_occupancy):
    origins, directions = random_rays(120, dtype, seed=1)
    lo, hi = box(dtype)
    occ = occupancy() if with_occupancy else None
    got = grid.march_rays(origins, directions, lo, hi, 0.13, near=0.2, occupancy=occ)
    flags = None if occ is None else occ.flags
    flag_bounds = None if occ is None else occ.bounds
    want = reference.march_rays(origins, directions, lo, hi, 0.13, 0.2, flags, flag_bounds)
    assert got.ray_indices.dtype == torch.int64
    assert got.t.dtype == got.points.dtype == dtype
    assert got.t.shape[0] > 100
    for name, a, b in zip(("ray_indices", "t", "points"), got, want, strict=True):
        assert torch.equal(a, b), name


def test_march_rays_layout():
    origins, directions = random_rays(80, torch.float64, seed=2)
    step = 0.1
    ray_indices, t, points = grid.march_rays(origins, directions, LO, HI, step)
    t_near, t_far = grid.ray_aabb(origins, directions, LO, HI)
    counts = torch.bincount(ray_indices, minlength=80)
    want = ((t_far - t_near) / step).ceil().clamp_min(0).long()
    assert counts[0] == 0 and want[0] > 1e9  # ray 0: zero direction, inside the box
    assert torch.equal(counts[1:], want[1:])
    assert (ray_indices[1:] >= ray_indices[:-1]).all()  # sorted by ray
    for r in counts.nonzero().flatten().tolist()[:10]:
        tr = t[ray_indices == r]
        assert tr[0].item() == pytest.approx(t_near[r].item() + step / 2)
        torch.testing.assert_close(tr.diff(), torch.full_like(tr[1:], step))
        assert tr[-1] < t_far[r] + step / 2
    torch.testing.assert_close(
        points, origins[ray_indices] + directions[ray_indices] * t[:, None], rtol=0, atol=0
    )


@pytest.mark.parametrize("device", DEVICES)
def test_march_rays_empty_inputs(device):
    lo, hi = box(device=device)
    nothing = torch.zeros(0, 3, device=device)
    for origins, directions, occ in [
        (nothing, nothing, None),  # zero rays
        (torch.tensor([[0.0, 5.0, 0.0]]), torch.tensor([[1.0, 0.0, 0.0]]), None),  # miss
        (torch.zeros(4, 3), torch.ones(4, 3), occupancy(fill=0.0)),  # all empty space
    ]:
        origins, directions = origins.to(device), directions.to(device)
        occ = None if occ is None else occ.to(device)
        out = grid.march_rays(origins, directions, lo, hi, 0.1, occupancy=occ)
        assert out.ray_indices.shape == (0,) and out.ray_indices.dtype == torch.int64
        assert out.t.shape == (0,) and out.points.shape == (0, 3)
        t_near, t_far = grid.ray_aabb(origins, directions, lo, hi)
        assert t_near.shape == t_far.shape == (origins.shape[0],)


def test_rays_with_non_finite_components_or_zero_directions_get_no_samples():
    nan, inf = math.nan, math.inf
    origins = torch.tensor(
        [[nan, 0.0, 0.0], [inf, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    )
    directions = torch.tensor(
        [[1.0, 0.0, 0.0], [-1.0, 0.0, 0.0], [nan, 1.0, 0.0], [inf, 0.0, 0.0], [1.0, 0.0, 0.0]]
    )
    origins, directions = (
        torch.cat([origins, torch.zeros(1, 3)]),
        torch.cat([directions, -torch.zeros(1, 3)]),
    )
    ray_indices, t, _ = grid.march_rays(origins, directions, LO, HI, 0.25)
    assert ray_indices.unique().tolist() == [4]  # only the finite, moving ray
    assert t.isfinite().all()


# ---- torch.compile ------------------------------------------------------------------------


def test_torch_compile_fullgraph_matches_eager():
    """Both compile whole: the sample count S is data-dependent, which torch.compile
    carries as an unbacked size through repeat_interleave and the occupancy mask."""
    torch._dynamo.reset()
    origins, directions = random_rays(64, seed=4)
    lo, hi = box()
    occ = occupancy()

    def both(origins, directions):
        t_near, t_far = grid.ray_aabb(origins, directions, lo, hi, 0.1)
        samples = grid.march_rays(origins, directions, lo, hi, 0.2, 0.1, occ)
        return t_near, t_far, *samples

    compiled = torch.compile(both, fullgraph=True)
    got, want = compiled(origins, directions), both(origins, directions)
    for a, b in zip(got, want, strict=True):
        assert a.dtype == b.dtype
        torch.testing.assert_close(a, b)
    assert got[2].shape[0] > 0


# ---- bad inputs -----------------------------------------------------------------------------


def bad_calls():
    o, d = random_rays(8)
    lo, hi = box()
    march = grid.march_rays
    return [
        (lambda: grid.ray_aabb(o[:, :2], d, lo, hi), ValueError, "origins: expected shape [R, 3]"),
        (lambda: grid.ray_aabb(o, d[:3], lo, hi), ValueError, "directions: expected 8 rows"),
        (lambda: grid.ray_aabb(o, d[None], lo, hi), ValueError, "directions: expected shape"),
        (lambda: grid.ray_aabb(o.long(), d, lo, hi), TypeError, "origins: expected a floating"),
        (lambda: grid.ray_aabb(o, d.double(), lo, hi), TypeError, "directions: expected dtype"),
        (lambda: grid.ray_aabb(o.tolist(), d, lo, hi), TypeError, "origins: expected a tensor"),
        (lambda: grid.ray_aabb(o, d, lo[:2], hi), ValueError, "lo: expected shape [3]"),
        (lambda: grid.ray_aabb(o, d, lo, "box"), TypeError, "hi: expected a [3] tensor"),
        (lambda: grid.ray_aabb(o, d, lo, hi, near=math.nan), ValueError, "near: expected"),
        (lambda: grid.ray_aabb(o, d, lo, hi, near="0"), TypeError, "near: expected a number"),
        (lambda: march(o, d, lo, hi, 0.0), ValueError, "step: expected a finite number > 0"),
        (lambda: march(o, d, lo, hi, -0.1), ValueError, "step: expected a finite number > 0"),
        (lambda: march(o, d, lo, hi, math.inf), ValueError, "step: expected a finite number"),
        (lambda: march(o, d, lo, hi, None), TypeError, "step: expected a number"),
        (lambda: march(o, d, lo, hi, 0.1, occupancy=lo), TypeError, "occupancy: expected"),
    ]


@pytest.mark.parametrize("index", range(len(bad_calls())))
def test_bad_inputs_name_the_argument(index):
    call, error, message = bad_calls()[index]
    with pytest.raises(error, match=message.replace("[", r"\[").replace("]", r"\]")):
        call()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_mismatched_devices_are_refused():
    o, d = random_rays(8)
    lo, hi = box()
    with pytest.raises(ValueError, match="directions: expected a tensor on cpu"):
        grid.ray_aabb(o, d.cuda(), lo, hi)
    with pytest.raises(ValueError, match="lo: expected a tensor on cuda"):
        grid.ray_aabb(o.cuda(), d.cuda(), lo, hi.cuda())
    with pytest.raises(ValueError, match="occupancy: expected an OccupancyGrid on cuda"):
        grid.march_rays(o.cuda(), d.cuda(), LO, HI, 0.1, occupancy=occupancy())


def test_mismatched_devices_are_refused_on_meta():
    """The same device checks without a GPU: the meta device stands in for another one."""
    o, d = random_rays(8)
    lo, hi = box()
    with pytest.raises(ValueError, match="directions: expected a tensor on cpu like origins"):
        grid.ray_aabb(o, d.to("meta"), lo, hi)
    with pytest.raises(ValueError, match="hi: expected a tensor on cpu like origins"):
        grid.ray_aabb(o, d, lo, hi.to("meta"))
    with pytest.raises(ValueError, match="occupancy: expected an OccupancyGrid on meta"):
        grid.march_rays(o.to("meta"), d.to("meta"), LO, HI, 0.1, occupancy=occupancy())
