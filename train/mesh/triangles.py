"""Triangle meshes: the `Mesh` type, its PLY file and its connected components.

Shared by the sdf experiment (its mesh.ply) and the nerf experiment (`python -m
train.export`, the scanned meshes of `train.nerf.scenes.scan_mesh`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch


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
    if len(faces) == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    vertex_label = vertex_components(faces, vertex_count)
    label = vertex_label[faces[:, 0]]
    _, label, sizes = np.unique(label, return_inverse=True, return_counts=True)
    order = np.argsort(-sizes, kind="stable")  # old label -> rank
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return rank[label], sizes[order]


def vertex_components(faces: np.ndarray, vertex_count: int) -> np.ndarray:
    """[V] int64: each vertex's component of the mesh faces [T, 3] (vertex_count V), as the
    smallest vertex index in it. Union-find by rounds of hooking and pointer jumping in torch
    (no scipy to import: 0.2-0.3 s of a GPU host's points-to-mesh command): each root that
    shares an edge with a smaller root points to the smallest such, then every vertex
    follows its pointers to its root; edges inside one component drop out. Parents only
    decrease, so no cycle forms; each round merges at least two roots."""
    f = torch.from_numpy(np.ascontiguousarray(faces, dtype=np.int64))
    u, v = torch.cat([f[:, 0], f[:, 0]]), torch.cat([f[:, 1], f[:, 2]])  # [2T] edges
    parent = torch.arange(vertex_count)
    while True:
        pu, pv = parent[u], parent[v]
        differ = pu != pv
        if not bool(differ.any()):
            return parent.numpy()
        u, v, pu, pv = u[differ], v[differ], pu[differ], pv[differ]
        parent.scatter_reduce_(0, torch.maximum(pu, pv), torch.minimum(pu, pv), "amin")
        while True:
            grand = parent[parent]
            if torch.equal(grand, parent):
                break
            parent = grand
