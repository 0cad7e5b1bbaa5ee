"""The exact signed distance of a triangle mesh sampled on a grid's voxels: the limit of a
dense grid (marching cubes on it is the best mesh a grid of that resolution can give).

Only the voxels within `band` voxels of the surface get their exact distance (the
nearest point on the triangles, `mesh.nearest_triangles`) and sign (the angle-weighted
pseudonormal of the nearest feature: face, edge or corner; Baerentzen and Aanaes 2005,
exact for a closed manifold mesh); the others are set to +-band voxels. Their sign comes
from the band: the voxels outside the band fall into connected regions (6-connected),
and each region takes the sign most of the band voxels beside it have. Marching cubes
only reads the signs away from the surface, so the mesh is that of the full exact SDF.

Candidates for the band: the voxels within band + 1 (per axis) of a dense area sample of
the mesh (spacing below half a voxel), so no voxel of the band is missed. Needs scipy.
"""

from __future__ import annotations

import math

import numpy as np

from .distance import closest_point_triangle, nearest_triangles
from .scoring import face_normals, sample_mesh
from .triangles import Mesh


def pseudonormals(vertices: np.ndarray, faces: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(corner pseudonormals [V, 3]: the angle-weighted sums of the faces' normals at each
    vertex; edge pseudonormals [T, 3, 3]: for each face's edges ab, ac, bc the sum of the
    normals of the faces sharing it). Not normalised: only their signs against x - p
    are used."""
    normals, _ = face_normals(vertices, faces)
    corners = vertices[faces]
    vertex = np.zeros_like(vertices)
    for i in range(3):
        u = corners[:, (i + 1) % 3] - corners[:, i]
        w = corners[:, (i + 2) % 3] - corners[:, i]
        lengths = np.linalg.norm(u, axis=1) * np.linalg.norm(w, axis=1)
        cos = (u * w).sum(1) / np.maximum(lengths, 1e-300)
        angle = np.arccos(np.clip(cos, -1, 1))
        for k in range(3):
            vertex[:, k] += np.bincount(faces[:, i], angle * normals[:, k], len(vertices))
    pairs = np.stack([faces[:, [0, 1]], faces[:, [0, 2]], faces[:, [1, 2]]], axis=1)  # [T, 3, 2]
    pairs = np.sort(pairs, axis=2).reshape(-1, 2)
    _, edge = np.unique(pairs[:, 0] * len(vertices) + pairs[:, 1], return_inverse=True)
    repeated = np.repeat(normals, 3, axis=0)
    summed = np.stack([np.bincount(edge, repeated[:, k]) for k in range(3)], axis=1)
    return vertex, summed[edge].reshape(len(faces), 3, 3)


def signed_distance(
    queries: np.ndarray, mesh: Mesh, corner_normals: np.ndarray, edge_normals: np.ndarray
) -> np.ndarray:
    """[Q] exact signed distances (negative inside: behind the pseudonormal) of queries
    [Q, 3] to the mesh; `corner_normals`, `edge_normals` from `pseudonormals`."""
    distance, face = nearest_triangles(queries, mesh.vertices, mesh.faces)
    point, region = closest_point_triangle(queries, mesh.vertices[mesh.faces[face]])
    normal = face_normals(mesh.vertices, mesh.faces[face])[0]
    for r in (1, 2, 3):
        at = region == r
        normal[at] = corner_normals[mesh.faces[face[at], r - 1]]
    for r in (4, 5, 6):
        at = region == r
        normal[at] = edge_normals[face[at], r - 4]
    side = ((queries - point) * normal).sum(axis=1)
    return np.where(side < 0, -distance, distance)


def grid_sdf(
    mesh: Mesh, bounds: list[list[float]], resolution: tuple[int, int, int], band: float = 1.5
) -> np.ndarray:
    """[X, Y, Z] float32: the exact signed distance of `mesh` at the voxels of a grid over
    `bounds` (voxels on the box corners, as VoxelGrid), clamped to +-band voxels (the
    largest voxel side) away from the surface (see the module docstring)."""
    from scipy import ndimage

    lo, hi = np.array(bounds[0], float), np.array(bounds[1], float)
    res = np.array(resolution)
    spacing = (hi - lo) / (res - 1)
    h = spacing.max()
    # dense samples (spacing < h / 2) -> candidate voxels within band + 1 of one, per axis
    _, areas = face_normals(mesh.vertices, mesh.faces)
    count = int(min(4 * areas.sum() / (spacing.min() / 2) ** 2 + 1000, 5e7))
    samples, _, _ = sample_mesh(mesh, count, seed=0)
    index = np.clip(np.rint((samples - lo) / spacing).astype(np.int64), 0, res - 1)
    near = np.zeros(tuple(res), dtype=bool)
    near[index[:, 0], index[:, 1], index[:, 2]] = True
    near = ndimage.binary_dilation(near, np.ones((3, 3, 3), bool), iterations=math.ceil(band) + 1)
    nodes = np.argwhere(near)
    corner_normals, edge_normals = pseudonormals(mesh.vertices, mesh.faces)
    exact = signed_distance(lo + nodes * spacing, mesh, corner_normals, edge_normals)
    inside_band = np.abs(exact) < band * h
    values = np.zeros(tuple(res), dtype=np.float32)
    in_band = np.zeros(tuple(res), dtype=bool)
    keep = nodes[inside_band]
    values[keep[:, 0], keep[:, 1], keep[:, 2]] = exact[inside_band]
    in_band[keep[:, 0], keep[:, 1], keep[:, 2]] = True
    # the regions outside the band take the majority sign of the band voxels beside them
    label, regions = ndimage.label(~in_band)
    votes = np.zeros(regions + 1)
    sign = np.sign(values)
    for axis in range(3):
        for a, b in ((slice(None, -1), slice(1, None)), (slice(1, None), slice(None, -1))):
            take_a = tuple(a if i == axis else slice(None) for i in range(3))
            take_b = tuple(b if i == axis else slice(None) for i in range(3))
            pair = (label[take_a] > 0) & in_band[take_b]
            votes += np.bincount(
                label[take_a][pair], weights=sign[take_b][pair], minlength=regions + 1
            )
    region_sign = np.where(votes < 0, -1.0, 1.0)
    far = ~in_band
    values[far] = region_sign[label[far]] * band * h
    return values
