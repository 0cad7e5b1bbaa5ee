"""grid.OccupancyGrid: queries against the per-point reference and the nearest voxel centre,
update, conservative upsample, state and loading, casts, torch.compile, input errors."""

from __future__ import annotations

import math

import pytest
import torch

import grid
from grid import reference
from tests._helpers import DEVICES

BOUNDS = ((-1.0, -1.5, -0.5), (1.0, 1.0, 2.0))
LO, HI = torch.tensor(BOUNDS, dtype=torch.float64)


def random_grid(resolution=(6, 5, 7), fill=0.5, seed=0, device="cpu") -> grid.OccupancyGrid:
    occ = grid.OccupancyGrid(resolution, BOUNDS, device=device)
    gen = torch.Generator().manual_seed(seed)
    occ.flags.copy_(torch.rand(resolution, generator=gen) < fill)
    return occ


def random_points(n: int, seed: int = 1, dtype=torch.float32, spread: float = 1.2):
    """Points in the box grown by 20% each side (some outside it)."""
    gen = torch.Generator().manual_seed(seed)
    u = (torch.rand(n, 3, generator=gen, dtype=torch.float64) - 0.5) * spread + 0.5
    return (LO + (HI - LO) * u).to(dtype)


def test_starts_all_occupied_and_describes_itself():
    occ = grid.OccupancyGrid((4, 5, 6), BOUNDS)
    assert occ.resolution == (4, 5, 6)
    assert occ.flags.dtype == torch.bool and occ.flags.all()
    assert occ.bounds.dtype == torch.float32
    assert occ.query(random_points(100)).all()
    assert list(occ.state_dict()) == ["flags"]  # the box is configuration, not state
    assert repr(occ) == "OccupancyGrid(resolution=(4, 5, 6), bounds=((-1, -1.5, -0.5), (1, 1, 2)))"
    assert grid.OccupancyGrid(3).resolution == (3, 3, 3)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_query_matches_the_per_point_reference_bitwise(dtype):
    occ = random_grid()
    points = random_points(2000, dtype=dtype)
    got = occ.query(points)
    assert got.dtype == torch.bool and got.shape == (2000,)
    assert torch.equal(got, reference.occupancy_query(occ.flags, occ.bounds, points))


def test_query_reads_the_nearest_voxel_centre():
    """An independent definition: the voxel centre at the smallest distance per axis
    (outside the box: the boundary voxel). Points within 1e-4 voxels of a tie are left out."""
    occ = random_grid((7, 4, 9))
    points = random_points(5000, seed=2, dtype=torch.float64)
    size = torch.tensor(occ.resolution)
    centres = [LO[a] + (HI[a] - LO[a]) * torch.arange(size[a]) / (size[a] - 1) for a in range(3)]
    nearest = torch.stack(
        [(points[:, a, None] - centres[a]).abs().argmin(-1) for a in range(3)], -1
    )
    continuous = (points - LO) / (HI - LO) * (size - 1)
    tie = ((continuous - continuous.floor() - 0.5).abs() < 1e-4).any(-1)
    want = occ.flags[nearest[:, 0], nearest[:, 1], nearest[:, 2]]
    got = occ.query(points)
    assert tie.sum() < 10
    assert torch.equal(got[~tie], want[~tie])


def test_query_takes_any_batch_shape():
    occ = random_grid()
    points = random_points(24).reshape(2, 3, 4, 3)
    assert torch.equal(occ.query(points), occ.query(points.reshape(-1, 3)).reshape(2, 3, 4))
    assert occ.query(torch.zeros(0, 3)).shape == (0,)
    assert occ.query(torch.zeros(3)).shape == ()


def test_update_marks_every_voxel_with_an_opaque_neighbour():
    gen = torch.Generator().manual_seed(3)
    occ = grid.OccupancyGrid((6, 5, 7), BOUNDS)
    alpha = torch.rand(6, 5, 7, generator=gen) ** 8  # mostly tiny
    fraction = occ.update(alpha, 0.8)
    want = torch.zeros(6, 5, 7, dtype=torch.bool)
    for x in range(6):
        for y in range(5):
            for z in range(7):
                block = alpha[max(x - 1, 0) : x + 2, max(y - 1, 0) : y + 2, max(z - 1, 0) : z + 2]
                want[x, y, z] = bool((block >= 0.8).any())
    assert torch.equal(occ.flags, want)
    assert fraction == pytest.approx(want.float().mean().item())
    assert 0.1 < fraction < 0.9
    assert occ.update(torch.zeros(6, 5, 7), 0.0) == 1.0  # >= threshold: all occupied
    assert occ.update(torch.zeros(6, 5, 7, dtype=torch.float64), 1e-3) == 0.0


def test_a_shrink_only_update_never_adds_a_voxel():
    gen = torch.Generator().manual_seed(4)
    occ = grid.OccupancyGrid((6, 5, 7), BOUNDS)
    first = torch.rand(6, 5, 7, generator=gen) ** 8
    occ.update(first, 0.8)
    before = occ.flags.clone()
    second = torch.rand(6, 5, 7, generator=gen) ** 8  # occupies other voxels as well
    fraction = occ.update(second, 0.8, shrink_only=True)
    fresh = grid.OccupancyGrid((6, 5, 7), BOUNDS)
    fresh.update(second, 0.8)
    assert (fresh.flags & ~before).any() and (before & ~fresh.flags).any()  # both ways
    assert torch.equal(occ.flags, before & fresh.flags)
    assert fraction == pytest.approx(occ.flags.float().mean().item())
    assert occ.update(torch.ones(6, 5, 7), 0.5, shrink_only=True) == fraction  # nothing back


@pytest.mark.parametrize(
    "old, new", [((10, 9, 8), (20, 20, 20)), ((5, 6, 7), (13, 6, 9)), ((4, 4, 4), (4, 4, 4))]
)
def test_upsample_is_conservative(old, new):
    """Every point that read occupied before still does (dilate, then nearest)."""
    occ = random_grid(old, fill=0.1, seed=4)
    points = random_points(50000, seed=5)
    before = occ.query(points)
    occupied = occ.flags.float().mean()
    occ.upsample(new)
    assert occ.resolution == new and occ.flags.dtype == torch.bool
    after = occ.query(points)
    assert not (before & ~after).any()
    assert occ.flags.float().mean() >= occupied


def test_upsample_refuses_to_shrink():
    occ = random_grid((6, 5, 7))
    with pytest.raises(ValueError, match=r"resolution: expected no axis smaller than"):
        occ.upsample((6, 4, 7))
    assert occ.resolution == (6, 5, 7)


def test_load_flags_and_state_dict_adopt_the_saved_resolution():
    saved = random_grid((9, 8, 7), seed=6)
    occ = grid.OccupancyGrid((3, 3, 3), BOUNDS)
    occ.load_state_dict(saved.state_dict())
    assert occ.resolution == (9, 8, 7) and torch.equal(occ.flags, saved.flags)
    points = random_points(500)
    assert torch.equal(occ.query(points), saved.query(points))
    # An old checkpoint's plain bool tensor: rename the key, or hand it to load_flags.
    old = {"occupancy": random_grid((4, 5, 6), seed=7).flags}
    occ.load_state_dict({"flags": old["occupancy"]})
    assert torch.equal(occ.flags, old["occupancy"])
    other = grid.OccupancyGrid(2, BOUNDS)
    other.load_flags(old["occupancy"])
    assert torch.equal(other.flags, old["occupancy"])
    assert other.flags is not old["occupancy"]  # a copy
    assert other.query(points).shape == (500,)


class Parent(torch.nn.Module):
    """How a model that used to hold the flags as its `occupancy` buffer holds the grid
    and still loads its old checkpoints (the recipe for VoxelNeRF)."""

    def __init__(self) -> None:
        super().__init__()
        self.occupancy_grid = grid.OccupancyGrid((3, 3, 3), BOUNDS)

    def _load_from_state_dict(self, state_dict, prefix, *args) -> None:
        old = prefix + "occupancy"
        if old in state_dict:  # a checkpoint from before the OccupancyGrid
            state_dict[prefix + "occupancy_grid.flags"] = state_dict.pop(old)
        super()._load_from_state_dict(state_dict, prefix, *args)


def test_a_parent_loads_an_old_checkpoint_by_renaming_the_key():
    flags = random_grid((8, 6, 4), seed=8).flags
    parent = Parent()
    parent.load_state_dict({"occupancy": flags})  # strict: nothing missing or unexpected
    assert torch.equal(parent.occupancy_grid.flags, flags)
    assert list(parent.state_dict()) == ["occupancy_grid.flags"]
    outer = torch.nn.Sequential(Parent())
    outer.load_state_dict({"0.occupancy": flags})
    assert torch.equal(outer[0].occupancy_grid.flags, flags)
    fresh = Parent()
    fresh.load_state_dict(parent.state_dict())  # and the new layout
    assert fresh.occupancy_grid.resolution == (8, 6, 4)


def test_loading_refuses_what_is_not_a_bool_grid():
    occ = grid.OccupancyGrid((3, 4, 5), BOUNDS)
    with pytest.raises(RuntimeError, match=r"flags: expected a bool tensor \[X, Y, Z\], got"):
        occ.load_state_dict({"flags": torch.ones(3, 4, 5)})
    with pytest.raises(RuntimeError, match=r"flags: expected shape \[X, Y, Z\]"):
        occ.load_state_dict({"flags": torch.ones(3, 4, dtype=torch.bool)})
    with pytest.raises(TypeError, match=r"flags: expected a bool tensor \[X, Y, Z\], got"):
        occ.load_flags(torch.ones(3, 4, 5, dtype=torch.uint8))
    with pytest.raises(TypeError, match=r"flags: expected a bool tensor"):
        occ.load_flags([[[True]]])
    with pytest.raises(ValueError, match=r"flags: expected shape \[X, Y, Z\], every size >= 2"):
        occ.load_flags(torch.ones(1, 4, 5, dtype=torch.bool))
    assert occ.resolution == (3, 4, 5)


@pytest.mark.parametrize("cast", ["double", "half", "bfloat16"])
def test_casts_keep_the_box_float32(cast):
    occ = grid.OccupancyGrid(5, ((0.3, 0.3, 0.3), (1.7, 1.7, 1.7)))
    box = occ.bounds.clone()
    getattr(occ, cast)()
    assert occ.bounds.dtype == torch.float32 and torch.equal(occ.bounds, box)
    assert occ.flags.dtype == torch.bool


@pytest.mark.parametrize("device", DEVICES)
def test_to_device_moves_flags_and_box(device):
    occ = random_grid().to(device)
    assert occ.flags.device.type == occ.bounds.device.type == device
    points = random_points(100).to(device)
    assert torch.equal(occ.query(points).cpu(), random_grid().query(points.cpu()))


def test_torch_compile_fullgraph_matches_eager():
    torch._dynamo.reset()
    occ = random_grid()
    points = random_points(300)
    compiled = torch.compile(occ.query, fullgraph=True)
    assert torch.equal(compiled(points), occ.query(points))


def test_bad_inputs_name_the_argument():
    occ = random_grid()
    with pytest.raises(ValueError, match=r"points: expected shape \[\.\.\., 3\], got \[5, 2\]"):
        occ.query(torch.zeros(5, 2))
    with pytest.raises(TypeError, match=r"points: expected a floating-point tensor"):
        occ.query(torch.zeros(5, 3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"points: expected a tensor on cpu like flags"):
        occ.query(torch.zeros(5, 3, device="meta"))
    with pytest.raises(ValueError, match=r"alpha: expected shape \[6, 5, 7\]"):
        occ.update(torch.zeros(6, 5, 8), 0.1)
    with pytest.raises(ValueError, match=r"alpha: expected shape \[X, Y, Z\]"):
        occ.update(torch.zeros(6, 5, 7, 1), 0.1)
    with pytest.raises(ValueError, match=r"threshold: expected a finite number"):
        occ.update(torch.zeros(6, 5, 7), math.nan)
    with pytest.raises(ValueError, match=r"resolution: expected every size >= 2"):
        grid.OccupancyGrid((1, 4, 4), BOUNDS)
    with pytest.raises(ValueError, match=r"bounds: expected min < max"):
        grid.OccupancyGrid(4, ((0, 0, 0), (1, 0, 1)))


def test_exported_from_package():
    assert "OccupancyGrid" in grid.__all__
