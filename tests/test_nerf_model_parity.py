"""PARITY WITH THE TRAINING SCRIPT'S NERF MODEL (bitwise).

The rendering pieces of `grid` (ray_aabb, march_rays, OccupancyGrid, composite_weights,
composite) were lifted out of `train/nerf_model.py`. These tests run the model's own code
next to the library's and require identical bits, so that once `VoxelNeRF` calls the
library its results do not change. `library_render` below is how `VoxelNeRF.render`
should read after the move.

When the training files move, only the import below changes (`train.nerf_model` ->
`train.nerf.model`); once the model calls the library, these tests can compare against
saved outputs instead, or go.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import grid
from train.nerf_model import VoxelNeRF, composite_weights, positional_encoding, ray_box

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
    m = VoxelNeRF(BOUNDS, (10, 9, 8), 16, hidden=16, **kwargs)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        m.density.features.copy_(torch.randn(10, 9, 8, 1, generator=gen) * 4)
        m.density.features[:4] = -30.0  # empty half-space: x < 0
        m.color.features.copy_(torch.randn(10, 9, 8, 12, generator=gen))
    return m


def occupancy_of(m: VoxelNeRF) -> grid.OccupancyGrid:
    """The model's occupancy buffer as an OccupancyGrid over the model's box."""
    occ = grid.OccupancyGrid(m.resolution, m.bounds_list)
    occ.load_flags(m.occupancy)
    return occ


def library_render(m: VoxelNeRF, occupancy: grid.OccupancyGrid, origins, directions, background):
    """VoxelNeRF.render written with the library."""
    n_rays = origins.shape[0]
    lo, hi = torch.tensor(m.bounds_list, device=origins.device)
    ray_id, t, points = grid.march_rays(
        origins, directions, lo, hi, m.step_size(), occupancy=occupancy
    )
    alpha = m.alpha(points, m.interval())
    weights = grid.composite_weights(alpha, ray_id, n_rays)
    visible = weights > m.weight_threshold
    views = positional_encoding(directions, m.view_frequencies)  # [R, E]
    colors = m.rgb(points[visible], views[ray_id[visible]])
    rgb, depth, acc = grid.composite(
        weights, ray_id, n_rays, colors, t, background, visible=visible
    )
    return {"rgb": rgb, "depth": depth, "acc": acc, "samples": ray_id.shape[0]}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("near", [0.0, 3.0])
def test_ray_aabb_is_ray_box(dtype, near):
    origins, directions = rays(300, dtype=dtype)
    lo, hi = torch.tensor(BOUNDS)  # float32, as the model builds them
    want = ray_box(origins, directions, lo, hi, near)
    got = grid.ray_aabb(origins, directions, lo, hi, near)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_composite_weights_is_the_model_function(dtype):
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


def test_occupancy_update_query_and_upsample_are_the_model_ones():
    m = model(occupancy_threshold=1e-3)
    occ = occupancy_of(m)
    # update_occupancy: the same alpha grid, the same threshold
    with torch.no_grad():
        raw = m.density_values()
        alpha = -torch.expm1(-F.softplus(raw + m.shift) * m.interval())
    fraction = occ.update(alpha, m.occupancy_threshold)
    assert fraction == m.update_occupancy()
    assert 0.2 < fraction < 0.9
    assert torch.equal(occ.flags, m.occupancy)
    # occupied: points inside and outside the box, some on voxel centres and half-way
    gen = torch.Generator().manual_seed(4)
    points = torch.rand(20000, 3, generator=gen) * 3.6 - 1.8
    lo, hi = torch.tensor(BOUNDS)
    spacing = (hi - lo) / (torch.tensor(m.resolution) - 1)
    points[:500] = lo + torch.randint(0, 9, (500, 3), generator=gen) * spacing / 2
    assert torch.equal(occ.query(points), m.occupied(points))
    # upsample: dilate, then nearest
    m.upsample((20, 17, 16))
    occ.upsample((20, 17, 16))
    assert torch.equal(occ.flags, m.occupancy)
    assert torch.equal(occ.query(points), m.occupied(points))


def test_render_samples_are_the_model_samples():
    """The points the model's render sends to the density grid, in order, and their rays."""
    m = model(occupancy_threshold=1e-3)
    m.update_occupancy()
    origins, directions = rays(256)
    seen = []
    density = m.density.forward
    m.density.forward = lambda points: seen.append(points) or density(points)  # record
    out = m.render(origins, directions, torch.ones(3))
    del m.density.forward
    lo, hi = torch.tensor(m.bounds_list)
    samples = grid.march_rays(origins, directions, lo, hi, m.step_size(), occupancy=occupancy_of(m))
    assert out["samples"] == samples.ray_indices.shape[0] > 1000
    assert torch.equal(seen[0], samples.points)
    unskipped = grid.march_rays(origins, directions, lo, hi, m.step_size())
    assert unskipped.t.shape[0] > samples.t.shape[0]  # the occupancy grid skipped some


@pytest.mark.parametrize("backend", ["native", "grid_sample"])
@pytest.mark.parametrize("near", [0.0, 3.5])
def test_render_with_the_library_is_bitwise_identical(backend, near):
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
    origins = origins + directions * near  # start further along; the model's near is 0
    background = torch.tensor([0.2, 0.5, 1.0])

    want = m.render(origins, directions, background)
    loss = want["rgb"].square().sum() + want["depth"].sum()
    want_grads = torch.autograd.grad(loss, list(m.parameters()))
    got = library_render(m, occupancy_of(m), origins, directions, background)
    loss = got["rgb"].square().sum() + got["depth"].sum()
    got_grads = torch.autograd.grad(loss, list(m.parameters()))

    assert got["samples"] == want["samples"] > 0
    for key in ("rgb", "depth", "acc"):
        assert torch.equal(got[key], want[key]), key
    for a, b in zip(got_grads, want_grads, strict=True):
        assert torch.equal(a, b)
