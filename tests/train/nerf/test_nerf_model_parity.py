"""PARITY WITH THE NERF MODEL AS IT WAS BEFORE ITS RENDERING MOVED INTO THE LIBRARY (bitwise).

`VoxelNeRF` (train/nerf/model/) now renders with `grid.march_rays`, `grid.OccupancyGrid`,
`grid.composite_weights` and `grid.composite`. The functions below are the model's own code
from before that move, kept verbatim as the reference: the library and the model must give
the same bits (samples, renders, gradients), so trained results do not change.

That holds for `renderer="torch"` (the plain-PyTorch renderer, which the grid_sample baseline
uses), pinned here. The fused renderer (native ops, the default on the native backend) gives
the same samples but composites in another order of rounding:
tests/train/nerf/test_nerf_fused.py checks it against this old render in float64.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

import grid
from train.nerf.model.encoding import positional_encoding
from train.nerf.model.voxel_nerf import VoxelNeRF

# ---- the model's code before the move (reference) ------------------------------------


def ray_box(origins: Tensor, directions: Tensor, lo: Tensor, hi: Tensor, near: float):
    """Slab test. origins, directions: [R, 3]; lo, hi: [3] -> t_near, t_far: [R]
    (t_far <= t_near for a ray that misses the box)."""
    inv = 1.0 / torch.where(directions == 0, torch.full_like(directions, 1e-10), directions)
    t0, t1 = (lo - origins) * inv, (hi - origins) * inv
    t_near = torch.minimum(t0, t1).amax(-1).clamp_min(near)
    t_far = torch.maximum(t0, t1).amin(-1)
    return t_near, t_far


def composite_weights(alpha: Tensor, ray_id: Tensor, n_rays: int) -> Tensor:
    """Front-to-back compositing weights of packed samples.

    alpha: [S] in [0, 1); ray_id: [S] non-decreasing. Returns w [S] with
    `w_i = alpha_i * prod_{j < i, same ray} (1 - alpha_j)`.

    The exclusive product is a segmented cumulative sum of log(1 - alpha), taken over the
    whole packed list in float64 (the running total grows with the number of rays, float32
    would lose the per-ray differences) and rebased at the first sample of each ray.
    """
    if alpha.shape[0] == 0:
        return alpha
    log_t = torch.log1p(-alpha.clamp(max=1 - 1e-6)).double()  # [S]
    inclusive = torch.cumsum(log_t, 0)
    exclusive = inclusive - log_t
    counts = torch.bincount(ray_id, minlength=n_rays)
    first = torch.cumsum(counts, 0) - counts  # [R] index of each ray's first sample
    base = exclusive[first.clamp_max(exclusive.shape[0] - 1)]  # [R]
    transmittance = torch.exp(exclusive - base[ray_id]).to(alpha.dtype)
    return alpha * transmittance


def old_occupied(m: VoxelNeRF, points: torch.Tensor) -> torch.Tensor:
    lo, hi = torch.tensor(m.bounds_list, device=points.device)
    size = torch.tensor(m.resolution, device=points.device)
    index = ((points - lo) / (hi - lo) * (size - 1)).round().long()
    index = torch.minimum(index.clamp_min(0), size - 1)
    x, y, z = index.unbind(-1)
    return m.occupancy[x, y, z]


@torch.no_grad()
def old_update_occupancy(m: VoxelNeRF) -> tuple[float, torch.Tensor]:
    raw = m.density_values()  # [X, Y, Z]
    alpha = -torch.expm1(-F.softplus(raw + m.shift) * m.interval())
    dilated = F.max_pool3d(alpha[None, None], 3, stride=1, padding=1)[0, 0]
    occupancy = dilated >= m.occupancy_threshold
    return occupancy.float().mean().item(), occupancy


def old_upsampled_occupancy(occupancy: torch.Tensor, size) -> torch.Tensor:
    occ = occupancy.float()[None, None]
    occ = F.max_pool3d(occ, 3, stride=1, padding=1)
    return F.interpolate(occ, size=size, mode="nearest")[0, 0] > 0


def old_render(m: VoxelNeRF, origins, directions, background, near: float = 0.0):
    n_rays = origins.shape[0]
    device = origins.device
    lo, hi = torch.tensor(m.bounds_list, device=device)
    step = m.step_size()
    t_near, t_far = ray_box(origins, directions, lo, hi, near)
    counts = ((t_far - t_near) / step).ceil().clamp_min(0).long()
    ray_id = torch.repeat_interleave(torch.arange(n_rays, device=device), counts)
    first = torch.cumsum(counts, 0) - counts
    j = torch.arange(ray_id.shape[0], device=device) - first[ray_id]
    t = t_near[ray_id] + (j + 0.5) * step
    points = origins[ray_id] + directions[ray_id] * t[:, None]
    keep = old_occupied(m, points)
    ray_id, t, points = ray_id[keep], t[keep], points[keep]
    alpha = m.alpha(points, m.interval())
    weights = composite_weights(alpha, ray_id, n_rays)
    visible = weights > m.weight_threshold
    ray_v, weights_v = ray_id[visible], weights[visible]
    views = positional_encoding(directions, m.views.frequencies)
    rgb_samples = m.rgb(points[visible], views[ray_v])
    acc = torch.zeros(n_rays, device=device).index_add(0, ray_id, weights)
    rgb = torch.zeros(n_rays, 3, device=device).index_add(
        0, ray_v, weights_v[:, None] * rgb_samples
    )
    rgb = rgb + (1.0 - acc)[:, None] * background
    depth = torch.zeros(n_rays, device=device).index_add(0, ray_id, weights * t)
    return {"rgb": rgb, "depth": depth, "acc": acc, "samples": ray_id.shape[0]}


# ---- tests ---------------------------------------------------------------------------------

BOUNDS = ((-1.5, -1.5, -1.5), (1.5, 1.5, 1.5))


def rays(n: int, seed: int = 2, dtype=torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """Unit rays from a sphere of radius 4 towards the middle of the box, plus some from
    inside it and some with zero direction components."""
    gen = torch.Generator().manual_seed(seed)
    origins = F.normalize(torch.randn(n, 3, generator=gen), dim=-1) * 4
    target = torch.rand(n, 3, generator=gen) - 0.5
    directions = F.normalize(target - origins, dim=-1)
    origins[: n // 8] = torch.rand(n // 8, 3, generator=gen) * 2 - 1
    directions[::9, 1] = 0.0
    directions[1] = torch.tensor([0.0, 0.0, -1.0])
    return origins.to(dtype), directions.to(dtype)


def model(**kwargs) -> VoxelNeRF:
    """A random model on the native backend with a partly empty density grid."""
    torch.manual_seed(0)
    kwargs.setdefault("renderer", "torch")
    m = VoxelNeRF(BOUNDS, (10, 9, 8), 16, hidden=16, **kwargs)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        m.density.features.copy_(torch.randn(10, 9, 8, 1, generator=gen) * 4)
        m.density.features[:4] = -30.0  # empty half-space: x < 0
        m.color.features.copy_(torch.randn(10, 9, 8, 12, generator=gen))
    return m


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("near", [0.0, 3.0])
def test_ray_aabb_is_ray_box(dtype, near):
    origins, directions = rays(300, dtype=dtype)
    lo, hi = torch.tensor(BOUNDS)  # float32, as the model builds them
    want = ray_box(origins, directions, lo, hi, near)
    got = grid.ray_aabb(origins, directions, lo, hi, near)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_composite_weights_is_the_old_function(dtype):
    gen = torch.Generator().manual_seed(3)
    for n_rays in (0, 1, 7, 300):
        counts = torch.randint(0, 20, (n_rays,), generator=gen)
        if n_rays > 2:
            counts[0] = counts[-1] = 0
        ray_id = torch.repeat_interleave(torch.arange(n_rays), counts)
        alpha = torch.rand(ray_id.shape[0], generator=gen, dtype=dtype)
        alpha[::13] = 1.0  # the clamp
        got = grid.composite_weights(alpha, ray_id, n_rays)
        assert torch.equal(got, composite_weights(alpha, ray_id, n_rays))


def test_occupancy_update_query_and_upsample_are_the_old_ones():
    m = model(occupancy_threshold=1e-3)
    want_fraction, want = old_update_occupancy(m)
    fraction = m.update_occupancy()
    assert fraction == want_fraction and 0.2 < fraction < 0.9
    assert torch.equal(m.occupancy, want)
    # occupied: points inside and outside the box, some on voxel centres and half-way
    gen = torch.Generator().manual_seed(4)
    points = torch.rand(20000, 3, generator=gen) * 3.6 - 1.8
    lo, hi = torch.tensor(BOUNDS)
    spacing = (hi - lo) / (torch.tensor(m.resolution) - 1)
    points[:500] = lo + torch.randint(0, 9, (500, 3), generator=gen) * spacing / 2
    assert torch.equal(m.occupied(points), old_occupied(m, points))
    # upsample: dilate, then nearest
    before = m.occupancy.clone()
    m.upsample((20, 17, 16))
    assert torch.equal(m.occupancy, old_upsampled_occupancy(before, (20, 17, 16)))
    assert torch.equal(m.occupied(points), old_occupied(m, points))


def test_old_checkpoints_load():
    """A state dict with the flags under the old buffer name "occupancy" loads."""
    m = model(occupancy_threshold=1e-3)
    m.update_occupancy()
    state = m.state_dict()
    state["occupancy"] = state.pop("occupancy_grid.flags")
    other = VoxelNeRF(BOUNDS, (10, 9, 8), 16, hidden=16)
    other.load_state_dict(state)
    assert torch.equal(other.occupancy, m.occupancy) and not other.occupancy.all()


def test_render_samples_are_the_old_samples():
    """The points the render sends to the density grid, in order."""
    m = model(occupancy_threshold=1e-3)
    m.update_occupancy()
    origins, directions = rays(256)
    seen = []
    density = m.density.forward
    m.density.forward = lambda points: seen.append(points) or density(points)  # record
    new = m.render(origins, directions, torch.ones(3))
    old = old_render(m, origins, directions, torch.ones(3))
    del m.density.forward
    assert new["samples"] == old["samples"] > 1000
    assert torch.equal(seen[0], seen[1])
    lo, hi = torch.tensor(m.bounds_list)
    unskipped = grid.march_rays(origins, directions, lo, hi, m.step_size())
    assert unskipped.t.shape[0] > new["samples"]  # the occupancy grid skipped some


@pytest.mark.parametrize("backend", ["native", "grid_sample"])
@pytest.mark.parametrize("near", [0.0, 3.5])
def test_render_is_bitwise_the_old_render(backend, near):
    m = model(occupancy_threshold=1e-3, backend="native")
    if backend == "grid_sample":  # the same fields on the other backend
        other = VoxelNeRF(BOUNDS, (10, 9, 8), 16, hidden=16, backend=backend)
        with torch.no_grad():
            for name in ("density", "color"):
                f = getattr(m, name).features
                getattr(other, name).features.copy_(f.permute(3, 2, 1, 0)[None])
            other.mlp.load_state_dict(m.mlp.state_dict())
        m = other
    m.update_occupancy()
    origins, directions = rays(200, seed=5)
    background = torch.tensor([0.2, 0.5, 1.0])

    want = old_render(m, origins, directions, background, near=near)
    loss = want["rgb"].square().sum() + want["depth"].sum()
    want_grads = torch.autograd.grad(loss, list(m.parameters()))
    got = m.render(origins, directions, background, near=near)
    loss = got["rgb"].square().sum() + got["depth"].sum()
    got_grads = torch.autograd.grad(loss, list(m.parameters()))

    assert got["samples"] == want["samples"] > 0
    for key in ("rgb", "depth", "acc"):
        assert torch.equal(got[key], want[key]), key
    for a, b in zip(got_grads, want_grads, strict=True):
        assert torch.equal(a, b)
