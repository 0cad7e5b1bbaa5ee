"""The NeRF model (train/nerf_model.py): compositing, backends, empty-space skipping."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from grid import composite_weights
from grid import ray_aabb as ray_box
from train.nerf.model.encoding import positional_encoding
from train.nerf.model.image import render_image
from train.nerf.model.voxel_nerf import VoxelNeRF

BOUNDS = ((-1.5, -1.5, -1.5), (1.5, 1.5, 1.5))


def padded_weights(alpha: torch.Tensor, ray_id: torch.Tensor, n_rays: int) -> torch.Tensor:
    """Reference: a Python loop over each ray's samples."""
    out = torch.empty_like(alpha)
    for r in range(n_rays):
        transmittance = 1.0
        for i in (ray_id == r).nonzero().flatten().tolist():
            out[i] = alpha[i] * transmittance
            transmittance = transmittance * (1 - alpha[i])
    return out


def test_composite_weights_match_a_loop_and_have_gradients():
    gen = torch.Generator().manual_seed(0)
    counts = torch.tensor([3, 0, 7, 1, 0, 12])
    ray_id = torch.repeat_interleave(torch.arange(6), counts)
    alpha = torch.rand(ray_id.shape[0], generator=gen, dtype=torch.float64).requires_grad_()
    weights = composite_weights(alpha, ray_id, 6)
    torch.testing.assert_close(weights, padded_weights(alpha.detach(), ray_id, 6))
    # Per ray the weights sum to 1 - prod(1 - alpha).
    sums = torch.zeros(6, dtype=torch.float64).index_add(0, ray_id, weights.detach())
    opaque = torch.stack([1 - (1 - alpha.detach()[ray_id == r]).prod() for r in range(6)])
    torch.testing.assert_close(sums, opaque)
    assert torch.autograd.gradcheck(lambda a: composite_weights(a, ray_id, 6), (alpha,))
    assert composite_weights(torch.zeros(0), torch.zeros(0, dtype=torch.long), 3).shape == (0,)


def test_ray_box_and_positional_encoding():
    origins = torch.tensor([[0.0, 0.0, 4.0], [0.0, 3.0, 4.0]])
    directions = torch.tensor([[0.0, 0.0, -1.0], [0.0, 0.0, -1.0]])
    lo, hi = torch.tensor(BOUNDS)
    t_near, t_far = ray_box(origins, directions, lo, hi, 0.0)
    assert t_near[0].item() == pytest.approx(2.5) and t_far[0].item() == pytest.approx(5.5)
    assert t_far[1] <= t_near[1]  # misses
    x = torch.randn(5, 3)
    pe = positional_encoding(x, 2)
    assert pe.shape == (5, 15)
    torch.testing.assert_close(pe[:, :3], x)
    torch.testing.assert_close(pe[:, 3:9:2], torch.sin(x))  # channel-major: x0, 2 x0, x1, ...
    torch.testing.assert_close(pe[:, 10:15:2], torch.cos(2 * x))


def models(**kwargs) -> tuple[VoxelNeRF, VoxelNeRF]:
    """The same random model on both backends (grids copied, MLP from the same seed)."""
    out = []
    for backend in ("native", "grid_sample"):
        torch.manual_seed(0)
        out.append(VoxelNeRF(BOUNDS, (10, 9, 8), 16, hidden=16, backend=backend, **kwargs))
    native, channels_first = out
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        native.density.features.copy_(torch.randn(10, 9, 8, 1, generator=gen) * 4)
        native.color.features.copy_(torch.randn(10, 9, 8, 12, generator=gen))
        for name in ("density", "color"):
            f = getattr(native, name).features
            getattr(channels_first, name).features.copy_(f.permute(3, 2, 1, 0)[None])
    return native, channels_first


def rays(n: int, seed: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    origins = F.normalize(torch.randn(n, 3, generator=gen), dim=-1) * 4
    target = torch.rand(n, 3, generator=gen) - 0.5
    return origins, F.normalize(target - origins, dim=-1)


def test_backends_render_the_same_and_have_the_same_gradients():
    native, channels_first = models()
    origins, directions = rays(64)
    background = torch.tensor([1.0, 0.5, 0.0])
    a = native.render(origins, directions, background)
    b = channels_first.render(origins, directions, background)
    assert a["samples"] == b["samples"] > 0
    torch.testing.assert_close(a["rgb"], b["rgb"])
    torch.testing.assert_close(a["depth"], b["depth"])
    (a["rgb"].square().sum() + native.total_variation()).backward()
    (b["rgb"].square().sum() + channels_first.total_variation()).backward()
    grad_native = native.density.features.grad[..., 0]
    grad_cf = channels_first.density.features.grad[0, 0].permute(2, 1, 0)
    assert grad_native.abs().max() > 0
    torch.testing.assert_close(grad_native, grad_cf)
    torch.testing.assert_close(native.mlp[0].weight.grad, channels_first.mlp[0].weight.grad)


def test_rays_that_miss_the_box_see_the_background_and_cost_nothing():
    native, _ = models()
    origins = torch.tensor([[0.0, 4.0, 4.0]])
    directions = torch.tensor([[0.0, 0.0, -1.0]])
    background = torch.tensor([0.2, 0.3, 0.4])
    out = native.render(origins, directions, background)
    assert out["samples"] == 0
    torch.testing.assert_close(out["rgb"][0], background)


def test_empty_space_skipping_is_conservative_and_upsample_keeps_it():
    native, _ = models(occupancy_threshold=1e-3, weight_threshold=0.0)
    with torch.no_grad():  # empty half-space x < 0
        density = native.density.features
        density[:5] = -30.0
    origins, directions = rays(128)
    background = torch.ones(3)
    full = native.render(origins, directions, background)
    occupied = native.update_occupancy()
    assert 0.3 < occupied < 0.9
    skipped = native.render(origins, directions, background)
    assert skipped["samples"] < full["samples"]
    # What was skipped had alpha below the threshold: colours move by far less than 1e-2.
    assert (skipped["rgb"] - full["rgb"]).abs().max() < 1e-2
    before = native.occupancy.clone()
    native.upsample(20)
    assert native.occupancy.shape == (20, 20, 20)
    assert native.occupancy.float().mean() >= before.float().mean()


def test_upsample_carries_the_optimiser_on_both_backends():
    for model in models():
        opt = torch.optim.Adam(model.parameters(), lr=0.1)
        origins, directions = rays(32)
        model.render(origins, directions, torch.ones(3))["rgb"].sum().backward()
        opt.step()
        model.upsample(16, opt)
        assert model.resolution == (16, 16, 16)
        state = opt.state[model.density.features]
        assert state["exp_avg"].shape == model.density.features.shape
        opt.zero_grad()
        model.render(origins, directions, torch.ones(3))["rgb"].sum().backward()
        opt.step()  # shapes agree after the upsample


@pytest.mark.parametrize("backend", ["native", "grid_sample"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_resized_grids_train_on_after_a_backward(backend, dtype):
    """Upsample and crop after a backward whose graph is still alive: the next backward
    gets gradients of the new shape (autograd's cached accumulator is dropped for float64
    grids too)."""
    from train.nerf.model.grids import make_grid

    g = make_grid(backend, (5, 6, 7), 2, [[-1, -1, -1], [1, 1, 1]], "cpu").to(dtype)
    with torch.no_grad():
        g.features.uniform_(-1, 1, generator=torch.Generator().manual_seed(1))
    points = torch.rand(50, 3, generator=torch.Generator().manual_seed(0), dtype=dtype) * 2 - 1
    loss = g(points).square().sum()
    loss.backward(retain_graph=True)
    for resize in (lambda: g.upsample((8, 9, 10)), lambda: g.crop([[-0.5] * 3, [0.5] * 3], 6)):
        resize()
        g(points).square().sum().backward()
        assert g.features.grad.shape == g.features.shape
        assert g.features.grad.abs().max() > 0


def test_image_chunks_follow_the_samples_a_ray_within_their_bounds():
    from train.nerf.model.image import MAX_CHUNK, MIN_CHUNK, image_chunk

    assert image_chunk(8192, 8192 * 200, 8192, 1 << 21) == (1 << 21) // 200  # the rate's
    assert image_chunk(MAX_CHUNK, 0, MAX_CHUNK, 1 << 30) == MAX_CHUNK  # never more
    assert image_chunk(8192, 0, 8192, 1 << 21) == 16384  # empty rows: at most twice
    assert image_chunk(4096, 4096 * 4000, 4096, 1 << 21) == MIN_CHUNK  # never fewer
    assert image_chunk(100, 100 * 500, 4096, 1 << 21) == 4194  # a last, short chunk's rate


@pytest.mark.parametrize("renderer", ["fused", "torch"])
def test_a_chunk_that_marches_too_many_samples_is_retried_with_fewer_rays(renderer, monkeypatch):
    """A first chunk of the whole image at a budget of 1000 samples: it marches several
    times twice that, is stopped after the march (the fields never run on it) and retried
    smaller; no rendered chunk above MIN_CHUNK exceeds twice the budget, and the pixels are
    the one-chunk render's."""
    import train.nerf.model.image as image
    from train.nerf.model.render import TooManySamples

    monkeypatch.setattr(image, "MIN_CHUNK", 16)
    torch.manual_seed(0)
    m = VoxelNeRF(BOUNDS, (10, 9, 8), 16, hidden=16, renderer=renderer)
    with torch.no_grad():
        m.density.features.normal_(0, 4)
    m.update_occupancy()
    origins, directions = rays(48 * 40)
    origins, directions = origins.reshape(48, 40, 3), directions.reshape(48, 40, 3)
    background = torch.tensor([0.2, 0.5, 1.0])
    m.image_rays = 48 * 40
    whole = render_image(m, origins, directions, background, samples=1 << 30)
    calls, render = [], m.render

    def counted(o, d, *args, **kwargs):
        try:
            out = render(o, d, *args, **kwargs)
        except TooManySamples as error:
            calls.append((o.shape[0], error.samples, "retried"))
            raise
        calls.append((o.shape[0], int(out["samples"]), "rendered"))
        return out

    m.render = counted
    m.image_rays = 48 * 40
    small = render_image(m, origins, directions, background, samples=1000)
    assert calls[0][0] == 48 * 40 and calls[0][2] == "retried" and calls[0][1] > 2000
    rendered = [(r, s) for r, s, what in calls if what == "rendered"]
    assert sum(r for r, _ in rendered) == 48 * 40
    assert all(s <= 2000 for r, s in rendered if r > 16), rendered
    for a, b in zip(small, whole, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("renderer", ["fused", "torch"])
def test_an_image_in_chunks_of_any_size_is_the_image_in_one(renderer, monkeypatch):
    """The chunks grow and shrink with the samples a ray (a budget of 3000 samples over 48
    x 40 rays through a partly empty box), and the pixels do not depend on them."""
    import train.nerf.model.image as image

    monkeypatch.setattr(image, "MIN_CHUNK", 16)
    torch.manual_seed(0)
    m = VoxelNeRF(BOUNDS, (10, 9, 8), 16, hidden=16, renderer=renderer)
    m.image_rays = 64  # the first chunk
    with torch.no_grad():
        m.density.features.normal_(0, 4)
    m.update_occupancy()
    origins, directions = rays(48 * 40)
    origins, directions = origins.reshape(48, 40, 3), directions.reshape(48, 40, 3)
    sizes = []
    render = m.render

    def counted(o, d, *args, **kwargs):
        sizes.append(o.shape[0])
        return render(o, d, *args, **kwargs)

    m.render = counted
    background = torch.tensor([0.2, 0.5, 1.0])
    small = render_image(m, origins, directions, background, samples=3000)
    chunks, sizes[:] = list(sizes), []
    assert m.image_rays > 2 * 64  # the next image starts at this one's rate
    m.image_rays = 1 << 13
    whole = render_image(m, origins, directions, background)
    assert sizes == [48 * 40] and len(chunks) > 3 and len(set(chunks)) > 2
    assert sum(chunks) == 48 * 40 and small[0].abs().sum() > 0
    for a, b in zip(small, whole, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
