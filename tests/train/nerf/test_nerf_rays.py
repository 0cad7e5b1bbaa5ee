"""train/nerf/data/rays.py: the training rays kept as view numbers, float32 directions and
float16 colours give back the rays and colours of `camera_rays` (views of one size and of
several sizes), the box-crossing rays are those of a plain slab test, and the bytes a ray
are what the module says."""

from __future__ import annotations

import math

import pytest
import torch

from train.nerf.data.blender import Views, camera_rays
from train.nerf.data.rays import TrainingRays


def _views(sizes: list[tuple[int, int]] | None = None, v: int = 3, h: int = 5, w: int = 7):
    gen = torch.Generator().manual_seed(0)
    c2w = torch.eye(4).repeat(v, 1, 1)
    angles = torch.rand(v, generator=gen) * 2 * math.pi
    c2w[:, 0, 0], c2w[:, 0, 2] = angles.cos(), angles.sin()
    c2w[:, 2, 0], c2w[:, 2, 2] = -angles.sin(), angles.cos()
    c2w[:, :3, 3] = torch.randn(v, 3, generator=gen) * 2  # a camera anywhere
    images = torch.rand(v, h, w, 3, generator=gen)
    table = None if sizes is None else torch.tensor(sizes)
    names = [f"f{i}.png" for i in range(v)]
    return Views(images, c2w, 6.0, h, w, names, sizes=table)


@pytest.mark.parametrize("sizes", [None, [(5, 7), (3, 7), (5, 4)]])
def test_take_gives_back_the_cameras_rays_and_colours(sizes):
    views = _views(sizes)
    rays = TrainingRays(views, torch.device("cpu"))
    origins, directions = camera_rays(views)  # [V, H, W, 3]
    mask = views.mask()
    keep = (lambda x: x.reshape(-1, 3)) if mask is None else (lambda x: x[mask])
    want_o, want_d, want_c = keep(origins), keep(directions), keep(views.images)
    assert len(rays) == want_o.shape[0] == (105 if sizes is None else 35 + 21 + 20)
    index = torch.randperm(len(rays), generator=torch.Generator().manual_seed(1))
    o, d, c = rays.take(index)
    assert torch.equal(o, want_o[index]) and torch.equal(d, want_d[index])
    assert c.dtype == torch.float32 and (c - want_c[index]).abs().max() <= 2.0**-12
    assert (c - want_c[index]).abs().max() > 0  # float16: rounded, not the same values
    views_of = torch.arange(3).view(-1, 1, 1, 1).expand(3, 5, 7, 3)  # each pixel's view
    assert torch.equal(rays.view_of(index).long(), keep(views_of)[:, 0][index])
    assert (rays.view is None) == (sizes is None)  # numbers stored only with a mask


def test_crossing_keeps_the_rays_that_cross_the_box():
    views = _views(h=9, w=11)
    rays = TrainingRays(views, torch.device("cpu"))
    box = [[-0.5, -0.7, -0.3], [0.6, 0.4, 0.5]]
    o, d, _ = rays.take(torch.arange(len(rays)))
    lo, hi = torch.tensor(box[0]), torch.tensor(box[1])
    with torch.no_grad():  # the slab test, written out
        t1, t2 = (lo - o) / d, (hi - o) / d
        near = torch.minimum(t1, t2).amax(-1).clamp(min=0)
        far = torch.maximum(t1, t2).amin(-1)
    want = (far > near).nonzero()[:, 0]
    got = rays.crossing(box, chunk=17)  # chunks that split views
    assert got.dtype == torch.int32 and 0 < got.numel() < len(rays)
    assert torch.equal(got.long(), want)


def test_bytes_a_ray():
    for sizes, per_ray in ((None, 18), ([(5, 7), (3, 7), (5, 4)], 22)):
        rays = TrainingRays(_views(sizes), torch.device("cpu"))
        tensors = [rays.directions, rays.colors] + ([rays.view] if sizes else [])
        stored = sum(t.numel() * t.element_size() for t in tensors)
        assert stored == per_ray * len(rays)
