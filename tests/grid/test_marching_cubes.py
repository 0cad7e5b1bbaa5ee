"""grid.marching_cubes: the surface lies on the field's level set, is closed and wound
outwards, matches scikit-image's vertices, and is the same on CUDA as on the CPU."""

import numpy as np
import pytest
import torch

import grid
from grid.marching_cubes import _triangle_table


def sphere(n: int, radius: float = 0.55, dtype=torch.float32) -> torch.Tensor:
    lin = torch.linspace(-1, 1, n, dtype=dtype)
    x = torch.stack(torch.meshgrid(lin, lin, lin, indexing="ij"), dim=-1)
    return x.norm(dim=-1) - radius  # [n, n, n]


def closed_and_oriented(faces: torch.Tensor) -> bool:
    """Every edge is shared by two triangles that run along it in opposite directions."""
    f = faces.cpu().numpy()
    directed = np.concatenate([f[:, [0, 1]], f[:, [1, 2]], f[:, [2, 0]]])
    _, count = np.unique(directed, axis=0, return_counts=True)
    reverse = {tuple(e) for e in directed[:, ::-1]}
    return count.max() == 1 and all(tuple(e) in reverse for e in directed)


def test_the_table_has_every_case_and_at_most_five_triangles():
    counts, tables = _triangle_table()
    assert counts[0] == counts[255] == 0 and max(counts) == 5
    assert all(0 < c for c in counts[1:255])


def test_vertices_lie_on_the_trilinear_zero_set_and_triangles_wind_outwards():
    values = sphere(17)
    vertices, faces = grid.marching_cubes(values, bounds=((-1, -1, -1), (1, 1, 1)))
    assert len(faces) > 100 and vertices.dtype == torch.float32
    f = grid.sample(values[..., None], vertices.float(), bounds=((-1, -1, -1), (1, 1, 1)))
    assert f.abs().max() < 1e-5
    corners = vertices.double()[faces]
    normal = torch.linalg.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0])
    assert ((normal * corners.mean(dim=1)).sum(dim=1) > 0).all()
    assert closed_and_oriented(faces)


def test_random_fields_give_closed_oriented_surfaces():
    # random signs exercise every case, and cells that share an ambiguous face
    gen = torch.Generator().manual_seed(0)
    for trial in range(20):
        values = torch.rand(7, 6, 8, generator=gen, dtype=torch.float64) - 0.5
        values[[0, -1]] = values[:, [0, -1]] = values[:, :, [0, -1]] = 1.0  # closed
        vertices, faces = grid.marching_cubes(values)
        assert closed_and_oriented(faces), trial
        assert vertices.dtype == torch.float64
        v0 = vertices.floor().long().clamp(max=torch.tensor(values.shape) - 2)
        frac = vertices - v0
        assert ((frac > 0) & (frac < 1)).sum(dim=1).le(1).all()  # on a voxel edge


def test_the_vertices_are_scikit_images():
    measure = pytest.importorskip("skimage.measure")
    gen = torch.Generator().manual_seed(1)
    values = sphere(24) + 0.05 * torch.randn(24, 24, 24, generator=gen)  # many pieces
    vertices, faces = grid.marching_cubes(values, level=0.02)
    theirs, their_faces, _, _ = measure.marching_cubes(values.numpy(), level=0.02)
    ours = {tuple(v) for v in np.round(vertices.numpy(), 4)}
    theirs = {tuple(v) for v in np.round(theirs, 4)}
    assert len(ours) == len(vertices) and ours <= theirs  # every crossing of an edge, once
    # theirs has more: points inside cells where an ambiguous case is resolved (Lewiner)
    extra = np.array(sorted(theirs - ours))
    assert len(extra) < 0.02 * len(ours)
    assert ((extra != np.round(extra)).sum(axis=1) > 1).all()  # none on a voxel edge
    assert abs(len(faces) - len(their_faces)) < 0.02 * len(faces)


def test_smoothstep_vertices_lie_on_the_smoothstep_zero_set():
    values = sphere(9) + 0.03
    bounds = ((-1, -1, -1), (1, 1, 1))
    vertices, _ = grid.marching_cubes(values, interpolation="smoothstep", bounds=bounds)
    model = grid.VoxelGrid(9, 1, init="zeros", interpolation="smoothstep")
    with torch.no_grad():
        model.features.copy_(values[..., None])
    assert model(vertices)[..., 0].abs().max() < 1e-5
    linear, _ = grid.marching_cubes(values, bounds=bounds)
    assert (vertices - linear).abs().max() > 1e-3  # a different place


def test_no_crossing_is_an_empty_mesh_and_values_at_the_level_make_no_flat_triangles():
    vertices, faces = grid.marching_cubes(torch.ones(4, 4, 4))
    assert vertices.shape == (0, 3) and faces.shape == (0, 3)
    values = torch.ones(5, 5, 5)
    values[2, 2, 2] = -1.0
    values[2, 2, 3] = 0.0  # exactly at the level: counts as above it
    vertices, faces = grid.marching_cubes(values)
    corners = vertices[faces]
    assert (
        len(faces) > 0
        and (
            torch.linalg.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0]).norm(
                dim=1
            )
            > 0
        ).all()
    )
    assert faces.max() < len(vertices)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"values": torch.zeros(4, 4)}, "values: expected a floating-point tensor [X, Y, Z]"),
        ({"values": torch.zeros(4, 4, 4, dtype=torch.int32)}, "values: expected a floating-point"),
        ({"values": torch.zeros(4, 1, 4)}, "values: expected at least 2 per side"),
        ({"values": torch.full((3, 3, 3), float("nan"))}, "values: contains NaN or infinity"),
        ({"values": torch.zeros(3, 3, 3), "level": float("inf")}, "level: expected a finite"),
        ({"values": torch.zeros(3, 3, 3), "interpolation": "cubic"}, "interpolation: expected"),
    ],
)
def test_bad_inputs_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        grid.marching_cubes(**kwargs)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_gives_the_cpu_mesh():
    gen = torch.Generator().manual_seed(2)
    values = sphere(40) + 0.05 * torch.randn(40, 40, 40, generator=gen)
    cpu = grid.marching_cubes(values)
    gpu = grid.marching_cubes(values.cuda())
    assert gpu[0].is_cuda and gpu[1].is_cuda
    torch.testing.assert_close(gpu[0].cpu(), cpu[0])
    torch.testing.assert_close(gpu[1].cpu(), cpu[1])
