"""Triangle meshes: the `Mesh` type, its PLY file and its connected components.

Shared by the sdf experiment (its mesh.ply) and the nerf experiment (`python -m
train.export`, the scanned meshes of `train.nerf.scenes.scan_mesh`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass
class Mesh:
    """vertices: [V, 3] world points (float64), faces: [T, 3] vertex indices (int64),
    normals: [V, 3] unit normals (float64; zeros where not known)."""

    vertices: np.ndarray
    faces: np.ndarray
    normals: np.ndarray

    @staticmethod
    def empty() -> Mesh:
        return Mesh(np.zeros((0, 3)), np.zeros((0, 3), dtype=np.int64), np.zeros((0, 3)))


def write_ply(path: Path, mesh: Mesh, colors: np.ndarray | None = None) -> None:
    """A binary little-endian PLY: vertices (x, y, z, nx, ny, nz as float; with `colors`,
    [V, 3] uint8, also red, green, blue as uchar) and triangles (`vertex_indices`, a list
    of 3 ints). Meshes viewers read it; so does `train.point_cloud.read_point_cloud`, as an
    oriented point cloud."""
    rgb = () if colors is None else ("red", "green", "blue")
    vertex = np.empty(
        len(mesh.vertices),
        dtype=[(n, "<f4") for n in ("x", "y", "z", "nx", "ny", "nz")] + [(n, "u1") for n in rgb],
    )
    for i, name in enumerate(("x", "y", "z")):
        vertex[name] = mesh.vertices[:, i]
        vertex["n" + name] = mesh.normals[:, i]
    for i, name in enumerate(rgb):
        vertex[name] = colors[:, i]
    face = np.empty(len(mesh.faces), dtype=[("count", "u1"), ("index", "<i4", (3,))])
    face["count"] = 3
    face["index"] = mesh.faces
    header = (
        "ply\nformat binary_little_endian 1.0\ncomment zero level set, written by grid-train\n"
        f"element vertex {len(vertex)}\n"
        + "".join(f"property float {n}\n" for n in ("x", "y", "z", "nx", "ny", "nz"))
        + "".join(f"property uchar {n}\n" for n in rgb)
        + f"element face {len(face)}\nproperty list uchar int vertex_indices\nend_header\n"
    )
    path.write_bytes(header.encode("ascii") + vertex.tobytes() + face.tobytes())


def face_components(faces: np.ndarray, vertex_count: int) -> tuple[np.ndarray, np.ndarray]:
    """Connected components of a triangle mesh (faces sharing a vertex are connected):
    (component of each face [T], numbered from the largest (in faces) down; the faces in
    each component [C], decreasing)."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    if len(faces) == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    rows = np.repeat(faces[:, 0], 2)
    cols = faces[:, 1:].reshape(-1)
    graph = coo_matrix((np.ones(len(rows)), (rows, cols)), shape=(vertex_count, vertex_count))
    _, vertex_label = connected_components(graph, directed=False)
    label = vertex_label[faces[:, 0]]
    _, label, sizes = np.unique(label, return_inverse=True, return_counts=True)
    order = np.argsort(-sizes, kind="stable")  # old label -> rank
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return rank[label], sizes[order]
