"""Scores of a reconstructed mesh against a true one, the same way for every method.

Both meshes are sampled uniformly by area (`sample_mesh`, seeded); every distance is
exact (the nearest point on the other mesh's triangles, `mesh.nearest_triangles`):

* `chamfer`: the Chamfer-L1 distance, the mean of the two directed mean distances
  (samples of the reconstruction to the true mesh, and back), over the box size (the
  largest side of the grid's box): a fraction of the box;
* `distance_p99`: the 99th percentile of the distances of both directions, over the box
  size (where the worst places are: a fold, a missing thin part);
* `normal_consistency`: the mean |cos| between a sample's face normal and the normal of
  the triangle nearest to it on the other mesh, over both directions (1: every normal
  right up to orientation);
* `fscore`: the harmonic mean of precision (the share of the reconstruction's samples
  within tau of the true mesh) and recall (the share of the true mesh's samples within
  tau of the reconstruction), tau = `tau` x the box size (0.5% by default);
* `components`: connected components of the reconstruction (triangles sharing a vertex);
  `debris_faces`: its faces outside its largest k components, k the true mesh's count,
  and `debris_share` their share of its faces.

Needs scipy (the sdf extra).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .distance import nearest_triangles
from .triangles import Mesh, face_components


def face_normals(vertices: np.ndarray, faces: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(unit normals [T, 3] by the right hand (zeros for a degenerate face), areas [T])."""
    corners = vertices[faces]
    cross = np.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0])
    twice = np.linalg.norm(cross, axis=1)
    return cross / np.maximum(twice, 1e-300)[:, None], twice / 2


def sample_mesh(mesh: Mesh, n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """n points uniform by area on the triangles: (points [n, 3], the face normal of each
    [n, 3], its face [n]). Seeded by `seed` (numpy's PCG64)."""
    normals, areas = face_normals(mesh.vertices, mesh.faces)
    rng = np.random.default_rng(seed)
    face = rng.choice(len(areas), size=n, p=areas / areas.sum())
    u, v = rng.random(n), rng.random(n)
    flip = u + v > 1  # fold the square onto the triangle
    u, v = np.where(flip, 1 - u, u), np.where(flip, 1 - v, v)
    a, b, c = (mesh.vertices[mesh.faces[face, i]] for i in range(3))
    points = a + u[:, None] * (b - a) + v[:, None] * (c - a)
    return points, normals[face], face


def score_mesh(
    mesh: Mesh,
    truth: Mesh,
    box_size: float,
    *,
    samples: int = 100_000,
    seed: int = 0,
    tau: float = 0.005,
    true_components: int | None = None,
) -> dict[str, Any]:
    """The scores of the module docstring for `mesh` against `truth` (None for all but
    the counts when `mesh` has no faces). `true_components`: the shape's number of
    components (default: counted on `truth`)."""
    if true_components is None:
        true_components = len(face_components(truth.faces, len(truth.vertices))[1])
    out: dict[str, Any] = {"faces": len(mesh.faces), "true_components": true_components}
    if len(mesh.faces) == 0:
        nothing = ("chamfer", "distance_p99", "normal_consistency", "fscore", "precision", "recall")
        return {**out, **dict.fromkeys(nothing), "components": 0, "debris_faces": 0}
    ours, our_normals, _ = sample_mesh(mesh, samples, seed)
    true, true_normals, _ = sample_mesh(truth, samples, seed + 1)
    to_truth, near_truth = nearest_triangles(ours, truth.vertices, truth.faces)
    to_ours, near_ours = nearest_triangles(true, mesh.vertices, mesh.faces)
    truth_face_normals = face_normals(truth.vertices, truth.faces)[0]
    our_face_normals = face_normals(mesh.vertices, mesh.faces)[0]
    cos_ours = np.abs((our_normals * truth_face_normals[near_truth]).sum(axis=1))
    cos_true = np.abs((true_normals * our_face_normals[near_ours]).sum(axis=1))
    threshold = tau * box_size
    precision = float((to_truth < threshold).mean())
    recall = float((to_ours < threshold).mean())
    _, sizes = face_components(mesh.faces, len(mesh.vertices))
    debris = int(sizes[true_components:].sum())
    return {
        **out,
        "chamfer": float(to_truth.mean() + to_ours.mean()) / 2 / box_size,
        "accuracy": float(to_truth.mean()) / box_size,  # reconstruction -> truth
        "completeness": float(to_ours.mean()) / box_size,  # truth -> reconstruction
        "distance_p99": float(np.quantile(np.concatenate([to_truth, to_ours]), 0.99)) / box_size,
        "normal_consistency": float(cos_ours.mean() + cos_true.mean()) / 2,
        "fscore": 2 * precision * recall / max(precision + recall, 1e-30),
        "precision": precision,
        "recall": recall,
        "components": len(sizes),
        "debris_faces": debris,
        "debris_share": debris / len(mesh.faces),
    }
