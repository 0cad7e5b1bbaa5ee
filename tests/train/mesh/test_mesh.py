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


def _grid_faces(n: int, numbering: np.ndarray) -> np.ndarray:
    """Two triangles per square of an n x n vertex grid (one component, diameter ~2n),
    vertices renumbered by `numbering`."""
    idx = np.arange(n * n).reshape(n, n)
    a, b = idx[:-1, :-1].ravel(), idx[1:, :-1].ravel()
    c, d = idx[:-1, 1:].ravel(), idx[1:, 1:].ravel()
    return numbering[np.concatenate([np.stack([a, b, c], 1), np.stack([b, d, c], 1)])]


@pytest.mark.parametrize("case", ["random", "grid", "grid_shuffled", "pieces"])
def test_face_components_match_scipys(case):
    """The torch union-find against scipy's connected components: the same partition, the
    same numbering (largest first, ties by smallest vertex) and sizes."""
    coo_matrix = pytest.importorskip("scipy.sparse").coo_matrix
    from scipy.sparse.csgraph import connected_components

    from train.mesh.triangles import face_components, vertex_components

    rng = np.random.default_rng(3)
    if case == "random":  # many small pieces, isolated vertices
        vertices, faces = 5000, rng.integers(0, 5000, (1500, 3))
    elif case == "pieces":  # three grids side by side, the middle one larger
        n = [20, 40, 20]
        start = np.cumsum([0, *[k * k for k in n[:-1]]])
        faces = np.concatenate(
            [_grid_faces(k, np.arange(k * k) + s) for k, s in zip(n, start, strict=True)]
        )
        vertices = sum(k * k for k in n)
    else:
        n = 120
        order = rng.permutation(n * n) if case == "grid_shuffled" else np.arange(n * n)
        vertices, faces = n * n, _grid_faces(n, order)
    rows, cols = np.repeat(faces[:, 0], 2), faces[:, 1:].reshape(-1)
    graph = coo_matrix((np.ones(len(rows)), (rows, cols)), shape=(vertices, vertices))
    count, theirs = connected_components(graph, directed=False)
    ours = vertex_components(faces, vertices)
    assert len(np.unique(ours)) == count
    assert len(np.unique(np.stack([ours, theirs], 1), axis=0)) == count  # same partition
    assert (ours <= np.arange(vertices)).all() and (ours[ours] == ours).all()  # smallest index
    label, sizes = face_components(faces, vertices)
    _, their_label, their_sizes = np.unique(
        theirs[faces[:, 0]], return_inverse=True, return_counts=True
    )
    order = np.argsort(-their_sizes, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    np.testing.assert_array_equal(sizes, their_sizes[order])
    np.testing.assert_array_equal(label, rank[their_label])
    if case == "pieces":
        assert sizes.tolist() == [2 * 39 * 39, 2 * 19 * 19, 2 * 19 * 19]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_distance_to_points_on_a_gpu_matches_the_kd_tree():
    pytest.importorskip("scipy")
    from train.mesh.distance import distance_to_points

    rng = np.random.default_rng(4)
    points, queries = rng.uniform(-1, 1, (20000, 3)), rng.uniform(-1, 1, (3000, 3))
    queries[:100] = points[:100] + 1e-5  # near zero distances stay exact in float32
    cpu = distance_to_points(queries, points)
    gpu = distance_to_points(queries, points, torch.device("cuda"))
    np.testing.assert_allclose(gpu, cpu, rtol=1e-5, atol=1e-6)


def test_face_components_import_no_scipy():
    """The mesh's pieces before mesh.ply cost no scipy import (0.2-0.3 s on a GPU host)."""
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "import sys, numpy as np; from train.mesh.triangles import face_components; "
        "f = np.array([[0, 1, 2], [3, 4, 5], [2, 6, 7]]); print(face_components(f, 8)[1]); "
        "print('scipy' in sys.modules)"
    )
    root = Path(__file__).resolve().parents[3]
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["[2 1]", "False"]
