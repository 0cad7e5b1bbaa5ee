"""train/mesh/ (distance.py, level_set.py): exact distances to a mesh, the zero level set's
vertices on the field's zero set, and the relaxed meshes (`sdf.relax`)."""

from __future__ import annotations

import numpy as np
import pytest
import torch


def test_distance_to_mesh_is_exact():
    from train.mesh.distance import distance_to_mesh, point_triangle_distance
    from train.mesh.triangles import Mesh

    rng = np.random.default_rng(0)
    vertices = rng.normal(size=(300, 3))
    faces = np.array([f for f in rng.integers(0, 300, size=(600, 3)) if len(set(f)) == 3])
    mesh = Mesh(vertices, faces, np.zeros_like(vertices))
    queries = rng.normal(size=(100, 3))
    brute = [
        point_triangle_distance(np.repeat(q[None], len(faces), 0), vertices[faces]).min()
        for q in queries
    ]
    np.testing.assert_allclose(distance_to_mesh(queries, mesh), brute, rtol=0, atol=1e-12)
    # a point above a face's interior, beside an edge, beyond a corner
    tri = np.array([[[0.0, 0, 0], [1, 0, 0], [0, 1, 0]]] * 3)
    p = np.array([[0.2, 0.2, 0.5], [0.5, -0.3, 0.0], [-0.3, -0.4, 0.0]])
    np.testing.assert_allclose(point_triangle_distance(p, tri), [0.5, 0.3, 0.5])


@pytest.mark.parametrize("interpolation", ["linear", "smoothstep"])
def test_mesh_vertices_lie_on_the_fields_zero_set(interpolation):
    from grid import VoxelGrid
    from train.mesh.level_set import zero_level_set

    model = VoxelGrid(9, 1, init="zeros", interpolation=interpolation)
    lin = torch.linspace(-1, 1, 9)
    nodes = torch.stack(torch.meshgrid(lin, lin, lin, indexing="ij"), dim=-1)
    with torch.no_grad():
        model.features.copy_((nodes.norm(dim=-1) - 0.55)[..., None])  # a sphere's SDF
    mesh = zero_level_set(model, interpolation)
    values = model(torch.as_tensor(mesh.vertices, dtype=torch.float32))[..., 0]
    assert len(mesh.faces) > 50 and values.abs().max() < 1e-5
    # triangles wound outwards (towards f > 0), as the normals from the gradient
    corners = mesh.vertices[mesh.faces]
    normal = np.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0])
    assert ((normal * corners.mean(axis=1)).sum(axis=1) > 0).all()
    assert ((mesh.normals * mesh.vertices).sum(axis=1) > 0).all()


@pytest.mark.parametrize("interpolation", ["linear", "smoothstep"])
def test_relaxed_meshes_stay_on_the_zero_set_and_face_the_surface_better(interpolation):
    """sdf.relax: the same triangles, vertices still on the field's zero set, the faces'
    normals nearer the sphere's, fewer thin triangles. (On this sampled exact SDF the
    interpolant's zero set inside a cell lies a little inside the sphere, so the faces'
    centres move off it: 1.42e-3 -> 1.72e-3 of the radius at 33^3, linear; a fitted field's
    zero set is where the points are, and there the distances fall.)"""
    from grid import VoxelGrid
    from train.mesh.level_set import zero_level_set

    model = VoxelGrid(33, 1, init="zeros", interpolation=interpolation)
    lin = torch.linspace(-1, 1, 33)
    nodes = torch.stack(torch.meshgrid(lin, lin, lin, indexing="ij"), dim=-1)
    with torch.no_grad():
        model.features.copy_((nodes.norm(dim=-1) - 0.61)[..., None])  # a sphere's SDF

    def faces_off(mesh) -> tuple[float, float]:
        """Mean angle (degrees) between face normals and the sphere's, the thinnest
        triangle's smallest angle (degrees)."""
        a, b, c = (mesh.vertices[mesh.faces[:, i]] for i in range(3))
        normal = np.cross(b - a, c - a)
        normal /= np.linalg.norm(normal, axis=1, keepdims=True)
        centre = (a + b + c) / 3
        radial = centre / np.linalg.norm(centre, axis=1, keepdims=True)
        off = np.degrees(np.arccos(np.clip((normal * radial).sum(1), -1, 1))).mean()

        def angle(p, q, r):
            u, v = q - p, r - p
            cos = (u * v).sum(1) / (np.linalg.norm(u, axis=1) * np.linalg.norm(v, axis=1))
            return np.degrees(np.arccos(np.clip(cos, -1, 1)))

        return off, np.minimum(np.minimum(angle(a, b, c), angle(b, c, a)), angle(c, a, b))

    plain = zero_level_set(model, interpolation)
    relaxed = zero_level_set(model, interpolation, relax=3)
    assert np.array_equal(plain.faces, relaxed.faces)
    values = model(torch.as_tensor(relaxed.vertices, dtype=torch.float32))[..., 0]
    assert values.abs().max() < 1e-4  # back on the zero set (a voxel is 0.0625)
    (off_plain, thin_plain), (off_relaxed, thin_relaxed) = faces_off(plain), faces_off(relaxed)
    assert off_relaxed < 0.8 * off_plain, (off_relaxed, off_plain)
    assert (thin_relaxed < 10).sum() < 0.5 * (thin_plain < 10).sum()
