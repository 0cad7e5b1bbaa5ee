"""grid.channels_last / grid.channels_first: F.grid_sample's channels-first volumes and the
library's channels-last grids as views of one tensor."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import grid


def random_volume(channels=5, size=(6, 8, 7), seed=0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(1, channels, *size, generator=g)


@pytest.mark.parametrize("channels_last_memory", [True, False])
def test_sampling_a_volume_equals_grid_sample_with_flipped_points(channels_last_memory):
    volume = random_volume()
    if channels_last_memory:
        volume = volume.contiguous(memory_format=torch.channels_last_3d)
    volume.requires_grad_()
    g = torch.Generator().manual_seed(1)
    points = torch.rand(300, 3, generator=g) * 2.4 - 1.2
    ours = grid.sample(grid.channels_last(volume), points)
    theirs = F.grid_sample(
        volume, points.flip(-1).reshape(1, 1, 1, -1, 3), mode="bilinear", align_corners=True
    )
    theirs = theirs.reshape(volume.shape[1], -1).T
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)
    (grad_ours,) = torch.autograd.grad(ours.square().sum(), volume)
    (grad_theirs,) = torch.autograd.grad(theirs.square().sum(), volume)
    torch.testing.assert_close(grad_ours, grad_theirs, rtol=1e-5, atol=1e-5)


def test_views_share_memory_and_invert_each_other():
    volume = random_volume().contiguous(memory_format=torch.channels_last_3d)
    features = grid.channels_last(volume)
    assert features.shape == (6, 8, 7, 5) and features.is_contiguous()
    assert features.data_ptr() == volume.data_ptr()
    assert grid.channels_last(volume[0]).shape == (6, 8, 7, 5)
    back = grid.channels_first(features)
    assert back.shape == volume.shape and torch.equal(back, volume)
    assert back.data_ptr() == volume.data_ptr()
    layer = grid.VoxelGrid(4, 3)
    assert grid.channels_first(layer.features).is_contiguous(memory_format=torch.channels_last_3d)


@pytest.mark.parametrize(
    "bad, message",
    [
        (torch.zeros(2, 3, 4, 4, 4), "a batch of 2 volumes"),
        (torch.zeros(3, 4, 4), r"expected \[1, C, X, Y, Z\] or \[C, X, Y, Z\]"),
        ([1.0], "volume: expected a tensor"),
    ],
)
def test_channels_last_refuses_other_shapes(bad, message):
    with pytest.raises((ValueError, TypeError), match=message):
        grid.channels_last(bad)


def test_channels_first_refuses_other_shapes():
    with pytest.raises(ValueError, match=r"features: expected \[X, Y, Z, C\]"):
        grid.channels_first(torch.zeros(1, 3, 4, 4, 4))
    with pytest.raises(TypeError, match="features: expected a tensor"):
        grid.channels_first(None)
