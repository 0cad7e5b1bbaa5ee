"""The sign of space far from a scan (train/sdf/winding.py, the points init) and meshes
closed along the box's faces (`sdf.close`): the winding number of sampled spheres and
hemispheres, a one-sided scan whose far side starts outside (not the sheet down to the box
that the nearest points' normals give), and watertight meshes of a field cut by the box."""

from __future__ import annotations

import math

import pytest
import torch

import train.sdf.experiment as experiment
from grid.voxel_grid import VoxelGrid
from train.mesh.level_set import zero_level_set
from train.sdf.points import PointCloud
from train.sdf.winding import point_areas, winding_numbers


def _sphere(n: int = 4000, radius: float = 0.5, seed: int = 0):
    """n points on a sphere about the origin and their outward normals."""
    normals = torch.randn(n, 3, generator=torch.Generator().manual_seed(seed))
    normals = normals / normals.norm(dim=1, keepdim=True)
    return radius * normals, normals


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_winding_numbers_are_the_dipole_sum_bitwise(dtype):
    """The in-place chunks compute exactly the plain expression of the dipoles' sum, a
    query on a point itself (r = 0) included, over several chunks (a small `block`)."""
    points, normals = (t.to(dtype) for t in _sphere(300))
    areas = point_areas(points)
    queries = torch.cat(
        [
            torch.rand(500, 3, generator=torch.Generator().manual_seed(1)).to(dtype) * 2 - 1,
            points[:7],
        ]
    )
    dipoles = normals * areas[:, None] / (4 * math.pi)
    dot = (points * dipoles).sum(1)[None] - queries @ dipoles.T
    r2 = (
        points.square().sum(1)[None]
        + queries.square().sum(1, keepdim=True)
        - 2 * queries @ points.T
    )
    r3 = r2.clamp_min(0) * r2.clamp_min(0).sqrt()
    expected = torch.where(r3 > 0, dot / r3, 0.0).sum(1)
    assert torch.equal(winding_numbers(queries, points, normals, areas, block=300 * 64), expected)


def test_areas_add_up_to_the_surface():
    points, _ = _sphere()
    assert point_areas(points).sum().item() == pytest.approx(4 * math.pi * 0.25, rel=0.05)
    with pytest.raises(ValueError, match="need at least 2"):
        point_areas(points[:1])


def test_winding_number_of_a_sphere_and_a_hemisphere():
    points, normals = _sphere()
    areas = point_areas(points)
    x = torch.tensor([[0.0, 0.0, 0.0], [0.2, -0.1, 0.15], [0.8, 0.0, 0.0], [2.0, 2.0, 2.0]])
    w = winding_numbers(x, points, normals, areas)
    assert w[:2].tolist() == pytest.approx([1.0, 1.0], abs=0.03)  # inside
    assert w[2:].tolist() == pytest.approx([0.0, 0.0], abs=0.03)  # outside
    top = points[:, 2] > 0  # an open hemisphere: the solid angle of its rim over 4 pi
    below = torch.tensor([[0.0, 0.0, -0.4]])
    d, r = 0.4, 0.5
    want = (1 - d / math.hypot(d, r)) / 2
    got = winding_numbers(below, points[top], normals[top], areas[top]).item()
    assert got == pytest.approx(want, abs=0.03)
    many = torch.rand(5000, 3) - 0.5  # chunked as one block: the same numbers
    torch.testing.assert_close(
        winding_numbers(many, points, normals, areas, block=1 << 14),
        winding_numbers(many, points, normals, areas),
    )


def _init(cloud: PointCloud, far: float) -> torch.Tensor:
    model = VoxelGrid((32, 32, 32), 1, bounds=[[-0.6] * 3, [0.6] * 3])
    old = experiment.FAR_VOXELS
    experiment.FAR_VOXELS = far
    try:
        experiment.points_init(model, cloud, torch.Generator().manual_seed(0))
    finally:
        experiment.FAR_VOXELS = old
    return model.features[..., 0]


def test_a_one_sided_scan_starts_closed_not_as_a_sheet_to_the_box():
    points, normals = _sphere()
    top = points[:, 2] > 0.0  # the top half alone, as a range scan sees it
    cloud = PointCloud(points[top].contiguous(), normals[top].contiguous())
    f = _init(cloud, experiment.FAR_VOXELS)
    local = _init(cloud, float("inf"))  # signs from the nearest points' normals alone
    axis = torch.linspace(-0.6, 0.6, 32)
    centre = int(torch.argmin(axis.abs()))
    column = f[centre, centre]  # along z through the middle
    floor = axis < -0.3  # well below the scan, inside the rim's cylinder
    assert (local[centre, centre][floor] < 0).all()  # the sheet: inside down to the floor
    assert (column[floor] > 0).all()  # the winding number: outside there
    up = (axis > 0.05) & (axis < 0.4)
    assert (column[up] < 0).all() and (column[axis > 0.55] > 0).all()  # under the dome
    near = f.abs() <= experiment.FAR_VOXELS * 1.2 / 31
    assert torch.equal(f[near], local[near])  # near the points, the normals decide


def test_closed_scans_keep_their_start():
    points, normals = _sphere()
    cloud = PointCloud(points, normals)
    assert torch.equal(_init(cloud, experiment.FAR_VOXELS), _init(cloud, float("inf")))


def _boundary_edges(mesh) -> int:
    """Edges used by one face only: 0 for a watertight mesh."""
    faces = torch.as_tensor(mesh.faces)
    edges = torch.cat([faces[:, [0, 1]], faces[:, [1, 2]], faces[:, [2, 0]]]).sort(1).values
    _, counts = torch.unique(edges, dim=0, return_counts=True)
    return int((counts == 1).sum())


@pytest.mark.parametrize("interpolation", ["linear", "smoothstep"])
def test_close_makes_a_field_cut_by_the_box_watertight(interpolation):
    model = VoxelGrid((20, 20, 20), 1, bounds=[[-1.0] * 3, [1.0] * 3])
    axis = torch.linspace(-1.0, 1.0, 20)
    x, y, z = torch.meshgrid(axis, axis, axis, indexing="ij")
    with torch.no_grad():  # a ball of radius 1.2 about a corner: cut by three faces
        model.features[..., 0] = ((x - 1) ** 2 + (y - 1) ** 2 + (z - 1) ** 2).sqrt() - 1.2
    open_ = zero_level_set(model, interpolation)
    closed = zero_level_set(model, interpolation, close=True)
    assert _boundary_edges(open_) > 0
    assert _boundary_edges(closed) == 0 and len(closed.faces) > len(open_.faces)
    assert closed.vertices.max() <= 1.0 + 1e-6
    assert (model.features[-1, ..., 0] < 0).any()  # the grid itself is left as fitted
    with torch.no_grad():  # inside everywhere: no surface, or the box closed half a voxel in
        model.features.fill_(-1.0)
    assert len(zero_level_set(model, interpolation).faces) == 0
    box = zero_level_set(model, interpolation, close=True)
    assert _boundary_edges(box) == 0
    half = 1.0 - 0.5 * 2.0 / 19  # crossings halfway between the faces' nodes and the next
    assert box.vertices.min() == pytest.approx(-half) and box.vertices.max() == pytest.approx(half)
