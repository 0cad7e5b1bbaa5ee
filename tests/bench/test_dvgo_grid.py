"""bench/compare/dvgo/dvgo_grid.py on the CPU: DirectVoxGO's DenseGrid interface on grid.sample
computes what DirectVoxGO's own (F.grid_sample on a channels-first volume, points flipped) computes,
keeps its parameter's shape, and its optimiser's elementwise kernels see aligned views."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # bench/ is a package of the checkout

from bench.compare.dvgo import dvgo_grid  # noqa: E402

BOX = ([-1.5, -0.5, 0.0], [1.0, 1.5, 2.0])


def dvgo_forward(volume: torch.Tensor, xyz: torch.Tensor, lo, hi) -> torch.Tensor:
    """DirectVoxGO's DenseGrid.forward (lib/grid.py), restated."""
    lo, hi = torch.tensor(lo), torch.tensor(hi)
    shape, channels = xyz.shape[:-1], volume.shape[1]
    ind = ((xyz.reshape(1, 1, 1, -1, 3) - lo) / (hi - lo)).flip((-1,)) * 2 - 1
    out = F.grid_sample(volume, ind, mode="bilinear", align_corners=True)
    out = out.reshape(channels, -1).T.reshape(*shape, channels)
    return out.squeeze(-1) if channels == 1 else out


def random_grid(channels: int, size=(9, 7, 11), seed=0) -> dvgo_grid.VoxelDenseGrid:
    module = dvgo_grid.VoxelDenseGrid(channels, torch.tensor(size), *BOX)
    with torch.no_grad():
        g = torch.Generator().manual_seed(seed)
        module.grid.copy_(torch.randn(module.grid.shape, generator=g))
    return module


def world_points(n: int, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    lo, hi = torch.tensor(BOX[0]), torch.tensor(BOX[1])
    return lo - 0.1 + torch.rand(n, 5, 3, generator=g) * (hi - lo + 0.2)  # some outside


@pytest.mark.parametrize("channels", [1, 12])
def test_forward_and_gradient_equal_dvgo_dense_grid(channels):
    module = random_grid(channels)
    assert module.grid.shape == (1, channels, 9, 7, 11)
    assert module.grid.is_contiguous(memory_format=torch.channels_last_3d)
    xyz = world_points(200)
    ours = module(xyz)
    reference_volume = module.grid.detach().contiguous().requires_grad_()
    theirs = dvgo_forward(reference_volume, xyz, *BOX)
    assert ours.shape == theirs.shape == ((200, 5) if channels == 1 else (200, 5, channels))
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)
    weights = torch.randn(theirs.shape, generator=torch.Generator().manual_seed(2))
    (ours * weights).sum().backward()
    (theirs * weights).sum().backward()
    torch.testing.assert_close(module.grid.grad, reference_volume.grad, rtol=1e-5, atol=1e-5)
    # the gradient is laid out like the parameter (what DirectVoxGO's kernels then walk)
    assert module.grid.grad.is_contiguous(memory_format=torch.channels_last_3d)


def test_scale_volume_grid_is_dvgo_interpolate_and_stays_channels_last():
    module = random_grid(3)
    before = module.grid.detach().contiguous()
    module.scale_volume_grid(torch.tensor([17, 13, 21]))
    expected = F.interpolate(before, size=(17, 13, 21), mode="trilinear", align_corners=True)
    torch.testing.assert_close(module.grid.detach(), expected)
    assert module.grid.is_contiguous(memory_format=torch.channels_last_3d)
    assert isinstance(module.grid, torch.nn.Parameter)


def test_state_dict_round_trip_and_box_follows_loaded_buffers():
    module = random_grid(2)
    other = dvgo_grid.VoxelDenseGrid(2, torch.tensor([9, 7, 11]), [0, 0, 0], [1, 1, 1])
    other.load_state_dict(module.state_dict())
    xyz = world_points(50)
    torch.testing.assert_close(other(xyz), module(xyz))
    assert other.grid.is_contiguous(memory_format=torch.channels_last_3d)


def test_masked_indexing_and_isub_write_the_parameter():
    module = random_grid(1)
    mask = torch.zeros(1, 1, 9, 7, 11, dtype=torch.bool)
    mask[0, 0, 2, 3, 4] = True
    with torch.no_grad():
        module.grid[mask] = -100  # dvgo.py's maskout_near_cam_vox
    assert module.grid[0, 0, 2, 3, 4] == -100
    module -= 1.0
    assert module.grid[0, 0, 2, 3, 4] == -101


def test_total_variation_gradient_is_dvgo_unclamped_gradient():
    torch.manual_seed(0)
    size, channels = (40, 40, 40), 2
    module = dvgo_grid.VoxelDenseGrid(channels, torch.tensor(size), *BOX)
    with torch.no_grad():
        module.grid.copy_(torch.randn(module.grid.shape) * 0.01)  # |differences| < 1: no clamp
    w = 0.3
    module.total_variation_add_grad(w, w, w, True)
    v = module.grid.detach().contiguous()
    expected = torch.zeros_like(v)
    for axis in (2, 3, 4):  # DirectVoxGO's kernel: w / 6 * (v - n) for each neighbour n
        d = torch.diff(v, dim=axis)
        pad = [0, 0] * (4 - axis)
        expected += w / 6 * (F.pad(-d, [*pad, 0, 1]) + F.pad(d, [*pad, 1, 0]))
    # ours scales by the count of differences per axis, (X - 1) Y Z C, taken as X Y Z C
    torch.testing.assert_close(module.grid.grad, expected, rtol=1 / 39 + 1e-3, atol=1e-9)
    with pytest.raises(ValueError, match="equal weights"):
        module.total_variation_add_grad(1.0, 2.0, 1.0, True)


def test_memory_order_views_line_up_for_elementwise_kernels():
    def fake_update(p, g, m, v, step, beta1, beta2, lr, eps, rate=None):
        for t in (p, g, m, v):
            assert t.is_contiguous()  # as DirectVoxGO's CHECK_INPUT
        flat = g.reshape(-1) * (1 if rate is None else rate.reshape(-1))
        p.view(-1).sub_(lr * flat)

    kernels = SimpleNamespace(
        adam_upd=fake_update,
        masked_adam_upd=fake_update,
        adam_upd_with_perlr=lambda p, g, m, v, rate, *a: fake_update(p, g, m, v, *a, rate=rate),
    )

    class Base(torch.optim.Optimizer):  # DirectVoxGO's MaskedAdam's constructor
        def __init__(self, params):
            super().__init__(params, dict(lr=0.5, betas=(0.9, 0.99), eps=1e-8))
            self.per_lr = None

    density, k0 = random_grid(1), random_grid(12)
    params = [density.grid, k0.grid]
    before = [p.detach().clone() for p in params]
    groups = [
        {"params": [p], "skip_zero_grad": skip}
        for p, skip in zip(params, (False, True), strict=True)
    ]
    optimizer = dvgo_grid.memory_order_adam(Base, kernels)(groups)
    optimizer.per_lr = torch.rand(density.grid.shape).contiguous(
        memory_format=torch.channels_last_3d
    )
    for p in params:
        p.grad = torch.randn(p.shape).contiguous(memory_format=torch.channels_last_3d)
    optimizer.step()
    torch.testing.assert_close(density.grid, before[0] - 0.5 * density.grid.grad * optimizer.per_lr)
    torch.testing.assert_close(k0.grid, before[1] - 0.5 * k0.grid.grad)
    assert optimizer.state[k0.grid]["step"] == 1
    assert optimizer.state[k0.grid]["exp_avg"].stride() == k0.grid.stride()


def test_memory_order_refuses_overlapping_tensors():
    with pytest.raises(ValueError, match="gaps or overlaps"):
        dvgo_grid.memory_order(torch.zeros(3, 1).expand(3, 4))
