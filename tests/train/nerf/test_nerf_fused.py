"""VoxelNeRF's fused renderer (train/nerf/model/render.py) against the plain-PyTorch
renderer, which tests/train/nerf/test_nerf_model_parity.py pins to the model's old code: the
same samples, and in float64 the same renders and gradients up to rounding; planned buffers
(padding, dropped samples); no host synchronisation in a CUDA training step."""

from __future__ import annotations

import pytest
import torch

from tests._helpers import needs_cuda
from tests.train.nerf.test_nerf_model_parity import BOUNDS, model, rays
from train.nerf.model.capacity import compact
from train.nerf.model.voxel_nerf import VoxelNeRF


def pair(dtype=torch.float64, device="cpu", **kwargs) -> tuple[VoxelNeRF, VoxelNeRF]:
    """The same random model (partly empty, occupancy refreshed) with either renderer."""
    torch_model = model(occupancy_threshold=1e-3, renderer="torch", **kwargs)
    fused = model(occupancy_threshold=1e-3, renderer="fused", **kwargs)
    fused.load_state_dict(torch_model.state_dict())
    for m in (torch_model, fused):
        m.to(device=device, dtype=dtype)
        m.update_occupancy()
    return torch_model, fused


def grads(m: VoxelNeRF, out: dict) -> list[torch.Tensor]:
    loss = out["rgb"].square().sum() + out["depth"].sum() + out["acc"].square().sum()
    return list(torch.autograd.grad(loss, list(m.parameters())))


@pytest.mark.parametrize("near", [0.0, 3.5])
def test_fused_render_equals_the_old_render_in_float64(near):
    old, fused = pair()
    origins, directions = (x.double() for x in rays(300, seed=5))
    background = torch.tensor([0.2, 0.5, 1.0], dtype=torch.float64)
    want = old.render(origins, directions, background, near=near)
    got = fused.render(origins, directions, background, near=near)
    assert got["samples"] == want["samples"] > 1000  # the very same samples
    for key in ("rgb", "depth", "acc"):
        torch.testing.assert_close(got[key], want[key], rtol=1e-10, atol=1e-12)
    for a, b in zip(grads(fused, got), grads(old, want), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)
    assert any(
        g.abs().max() > 0 for g in grads(fused, fused.render(origins, directions, background))
    )


def test_jittered_renders_agree_and_move_the_samples():
    """Stratified training samples: both renderers put them at the same depths (same
    renders and gradients in float64), and they are not the centred samples."""
    old, fused = pair()
    origins, directions = (x.double() for x in rays(300, seed=8))
    background = torch.tensor([0.2, 0.5, 1.0], dtype=torch.float64)
    jitter = torch.rand(300, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    want = old.render(origins, directions, background, jitter=jitter)
    got = fused.render(origins, directions, background, jitter=jitter)
    assert got["samples"] == want["samples"] > 1000
    for key in ("rgb", "depth", "acc"):
        torch.testing.assert_close(got[key], want[key], rtol=1e-10, atol=1e-12)
    for a, b in zip(grads(fused, got), grads(old, want), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)
    centred = fused.render(origins, directions, background)
    assert (centred["depth"] - got["depth"]).abs().max() > 1e-3
    with pytest.raises(ValueError, match="jitter"):
        fused.render(origins, directions, background, jitter=jitter[:5])


def test_fused_render_is_close_in_float32():
    old, fused = pair(torch.float32)
    origins, directions = rays(300, seed=6)
    background = torch.ones(3)
    want = old.render(origins, directions, background)
    got = fused.render(origins, directions, background)
    assert got["samples"] == want["samples"]
    for key in ("rgb", "depth", "acc"):
        torch.testing.assert_close(got[key], want[key], rtol=1e-5, atol=1e-5)


def test_planned_buffers_give_the_exact_render_and_count_what_they_drop():
    _, fused = pair(torch.float32)
    fused.sizing = "planned"
    origins, directions = rays(256, seed=7)
    background = torch.ones(3)
    exact = fused.render(origins, directions, background, exact=True)
    first = fused.render(origins, directions, background)  # measures: exact, an int
    assert first["samples"] == exact["samples"] and fused.capacity.key is not None
    planned = fused.render(origins, directions, background)  # padded buffers, a tensor
    assert isinstance(planned["samples"], torch.Tensor)
    assert int(planned["samples"]) == exact["samples"] and int(fused.capacity.dropped) == 0
    for key in ("rgb", "depth", "acc"):
        torch.testing.assert_close(planned[key], exact[key], rtol=1e-6, atol=1e-6)
    # a refresh of the occupancy grid makes the next render measure again
    fused.update_occupancy()
    assert isinstance(fused.render(origins, directions, background)["samples"], int)
    # buffers too small: the last rays lose samples, counted on the device
    fused.capacity.granule = 1
    fused.capacity.per_ray = (2.0, 1.0)
    small = fused.render(origins, directions, background)
    assert int(small["samples"]) < exact["samples"] and int(fused.capacity.dropped) > 0
    assert all(small[key].isfinite().all() for key in ("rgb", "depth", "acc"))


def test_compact():
    mask = torch.tensor([False, True, True, False, True, False, True])
    positions, count = compact(mask, 5)
    assert positions.tolist() == [1, 2, 4, 6, 7] and int(count) == 4
    positions, count = compact(mask, 2)
    assert positions.tolist() == [1, 2] and int(count) == 4
    positions, count = compact(torch.zeros(0, dtype=torch.bool), 3)
    assert positions.tolist() == [0, 0, 0] and int(count) == 0


def test_renderer_is_checked():
    with pytest.raises(ValueError, match="renderer"):
        VoxelNeRF(BOUNDS, 8, 8, renderer="fast")


@needs_cuda
def test_a_cuda_training_step_never_waits_for_the_gpu():
    _, fused = pair(torch.float32, "cuda")
    opt = torch.optim.Adam(fused.parameters(), lr=1e-3)
    origins, directions = (x.cuda() for x in rays(512, seed=8))
    background, target = torch.ones(3, device="cuda"), torch.rand(512, 3, device="cuda")

    def step():
        out = fused.render(origins, directions, background)
        loss = (out["rgb"] - target).square().mean() + 1e-5 * fused.total_variation()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        return out

    first = step()  # measures the buffers: reads the counts back
    assert isinstance(first["samples"], int) and first["samples"] > 0
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            out = step()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert int(out["samples"]) == first["samples"] and int(fused.capacity.dropped) == 0
    assert fused.density.features.grad.abs().max() > 0
