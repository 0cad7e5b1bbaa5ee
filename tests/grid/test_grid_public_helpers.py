"""grid.lattice, grid.check_inside, grid.replace_data and VoxelGrid.add_: the helpers the
library made public for code outside it (train's ChannelsFirstGrid, the nerf experiment)."""

import pytest
import torch

import grid


def test_lattice_puts_voxels_on_the_box_corners_and_spaces_them_evenly():
    box = torch.tensor([[-1.0, 0.0, 2.0], [1.0, 3.0, 4.0]], dtype=torch.float64)
    points = grid.lattice(box, (3, 4, 5))
    assert points.shape == (3, 4, 5, 3) and points.dtype == torch.float64
    assert points[0, 0, 0].tolist() == [-1.0, 0.0, 2.0]
    assert points[-1, -1, -1].tolist() == [1.0, 3.0, 4.0]
    assert torch.allclose(points[1, 2, 3], torch.tensor([0.0, 2.0, 3.5], dtype=torch.float64))


def test_a_voxel_grid_reads_its_own_voxels_at_the_lattice():
    g = grid.VoxelGrid((4, 5, 6), 2, [[-1, -2, 0], [1, 2, 3]], init="normal")
    points = grid.lattice(g.bounds, g.resolution)  # [X, Y, Z, 3]
    with torch.no_grad():
        assert torch.allclose(g(points), g.features, atol=1e-5)


def test_check_inside_accepts_a_box_within_rounding_and_names_bounds_otherwise():
    unit = torch.tensor([[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    grid.check_inside(unit, unit)
    grid.check_inside(unit + 1e-8, unit)  # within 1e-6 of the size
    with pytest.raises(ValueError, match="bounds: expected a box inside"):
        grid.check_inside(unit + 0.1, unit)


def test_replace_data_keeps_the_parameter_and_lets_backward_run_at_the_new_shape():
    p = torch.nn.Parameter(torch.ones(2, 3))
    loss = (p * 2).sum()
    loss.backward()  # a graph over the old shape is still alive
    grid.replace_data(p, torch.zeros(4, 5))
    assert p.shape == (4, 5) and p.grad is None
    (p * 3).sum().backward()
    assert p.grad.shape == (4, 5) and bool((p.grad == 3).all())


def test_add_shifts_every_voxel_in_place_and_outside_autograd():
    g = grid.VoxelGrid(3, 2, [[0, 0, 0], [1, 1, 1]], init="normal")
    before, param = g.features.detach().clone(), g.features
    g.add_(-0.25)
    assert g.features is param and not g.features.grad_fn
    assert torch.equal(g.features.detach(), before.add(-0.25))
    g.add_(torch.tensor([1.0, 2.0]))  # one value per feature channel
    assert torch.equal(g.features.detach(), before.add(-0.25).add(torch.tensor([1.0, 2.0])))
    with pytest.raises(ValueError, match=r"value: expected a number or a \[2\] tensor"):
        g.add_(torch.zeros(3))


def test_the_helpers_are_exported():
    for name in ("lattice", "check_inside", "replace_data"):
        assert name in grid.__all__
