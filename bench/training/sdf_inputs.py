"""The inputs of bench/training/bench_sdf.py: real scanned meshes, synthetic shapes, and the point
clouds drawn on them (clean, noisy, uneven, with holes).

Real scans come from Debian's `libcgal-demo` package (CGAL's demo data, LGPL/GPL): it
ships them in `/usr/share/doc/libcgal-dev/data.tar.gz`, read here without unpacking
(`apt-get install libcgal-demo`), or from a folder holding that archive's `data/`
tree, or an .off file given by path. Nothing is downloaded.

Every mesh is moved and scaled into the box [-1, 1]^3: its bounding box centred, its
largest side 1.8 (so the box size, its largest side, is 2).
"""

from __future__ import annotations

import io
import math
import tarfile
from pathlib import Path

import numpy as np

from train.mesh.scoring import face_normals, sample_mesh
from train.mesh.triangles import Mesh
from train.nerf.scenes.scan_mesh import read_off

#: Where `apt-get install libcgal-demo` puts CGAL's data archive.
CGAL_ARCHIVE = Path("/usr/share/doc/libcgal-dev/data.tar.gz")
#: Real scanned meshes of that archive: name -> path inside it. All three are range scans
#: (Stanford's bunny and armadillo, closed, genus 0; a decimated scan of a Chinese dragon
#: statue, with a small hole: 6 boundary edges).
SCANS = {
    "bunny": "data/meshes/bunny00.off",  # 37706 vertices, 75408 faces, closed
    "armadillo": "data/meshes/armadillo.off",  # 26002 vertices, 52000 faces, closed
    "dragon": "data/meshes/ChineseDragon-10kv.off",  # 10000 vertices, 19994 faces, a hole
}
SHAPES = ("torus", "sphere", "box")
VARIANTS = ("clean", "noisy", "noisy0.1", "uneven", "holes", "estimated")
BOX = [[-1.0, -1.0, -1.0], [1.0, 1.0, 1.0]]
BOX_SIZE = 2.0
FILL = 1.8  # the largest side of a mesh in the box


class MissingInput(RuntimeError):
    """A scan the bench was asked for is not where it looked (the message says where)."""


def normalise(mesh: Mesh) -> Mesh:
    """The mesh centred in the box [-1, 1]^3, its largest side FILL, degenerate faces
    (zero area) dropped."""
    lo, hi = mesh.vertices.min(axis=0), mesh.vertices.max(axis=0)
    vertices = (mesh.vertices - (lo + hi) / 2) * (FILL / (hi - lo).max())
    _, areas = face_normals(vertices, mesh.faces)
    faces = mesh.faces[areas > 1e-14]
    return Mesh(vertices, faces, np.zeros_like(vertices))


def load_scan(name: str, source: str | None) -> Mesh:
    """The scan `name` (a key of SCANS, or the path of an .off file), normalised.

    `source`: a CGAL data archive (.tar.gz) or a folder holding its `data/` tree; by
    default CGAL_ARCHIVE. Raises MissingInput saying where it looked."""
    if name.endswith(".off"):
        path = Path(name)
        if not path.is_file():
            raise MissingInput(f"scan {name}: no such file")
        return normalise(read_off(path.read_bytes(), name))
    if name not in SCANS:
        raise MissingInput(f"scan {name!r}: unknown; expected one of {', '.join(SCANS)} or a path")
    where = Path(source) if source else CGAL_ARCHIVE
    member = SCANS[name]
    if where.is_dir():
        path = where / member
        if not path.is_file():
            raise MissingInput(f"scan {name}: {path} does not exist (--scans-from {where})")
        return normalise(read_off(path.read_bytes(), name))
    if not where.is_file():
        raise MissingInput(
            f"scan {name}: {where} does not exist; install Debian's libcgal-demo "
            f"(apt-get install libcgal-demo), or give --scans-from (the archive or a folder "
            f"holding its data/ tree), or run with --scans none"
        )
    with tarfile.open(where) as archive:
        try:
            data = archive.extractfile(member)
        except KeyError:
            raise MissingInput(f"scan {name}: {where} holds no {member}") from None
        return normalise(read_off(io.BytesIO(data.read()).read(), name))


def shape_mesh(kind: str, n: int = 512) -> Mesh:
    """A fine triangulation of the sdf experiment's default shapes (train/sdf/config.py):
    torus (major 0.55, minor 0.2, 2n x n quads), sphere (radius 0.6, a UV sphere of
    2n x n quads), box (half sizes 0.5, 0.35, 0.25: 12 triangles, exact)."""
    if kind == "box":
        h = np.array([0.5, 0.35, 0.25])
        corners = np.array([[i, j, k] for i in (-1, 1) for j in (-1, 1) for k in (-1, 1)]) * h
        quads = [[0, 1, 3, 2], [4, 6, 7, 5], [0, 4, 5, 1], [2, 3, 7, 6], [0, 2, 6, 4], [1, 5, 7, 3]]
        faces = [[q[0], q[1], q[2]] for q in quads] + [[q[0], q[2], q[3]] for q in quads]
        return Mesh(corners, np.array(faces), np.zeros_like(corners))
    u = np.linspace(0, 2 * math.pi, 2 * n, endpoint=False)
    if kind == "torus":
        v = np.linspace(0, 2 * math.pi, n, endpoint=False)
        uu, vv = np.meshgrid(u, v, indexing="ij")
        r = 0.55 + 0.2 * np.cos(vv)
        vertices = np.stack([r * np.cos(uu), r * np.sin(uu), 0.2 * np.sin(vv)], -1).reshape(-1, 3)
        i, j = np.meshgrid(np.arange(2 * n), np.arange(n), indexing="ij")
        a, b = i * n + j, ((i + 1) % (2 * n)) * n + j
        c, d = ((i + 1) % (2 * n)) * n + (j + 1) % n, i * n + (j + 1) % n
    elif kind == "sphere":
        v = np.linspace(0, math.pi, n + 1)[1:-1]  # rings between the poles
        uu, vv = np.meshgrid(u, v, indexing="ij")
        ring = np.stack([np.sin(vv) * np.cos(uu), np.sin(vv) * np.sin(uu), np.cos(vv)], -1)
        vertices = 0.6 * np.concatenate([ring.reshape(-1, 3), [[0, 0, 1], [0, 0, -1]]])
        m = n - 1  # rings
        i, j = np.meshgrid(np.arange(2 * n), np.arange(m - 1), indexing="ij")
        a, b = i * m + j + 1, ((i + 1) % (2 * n)) * m + j + 1
        c, d = ((i + 1) % (2 * n)) * m + j, i * m + j
        top, bottom = 2 * n * m, 2 * n * m + 1
        k = np.arange(2 * n)
        caps = [
            np.stack([np.full(2 * n, top), k * m, ((k + 1) % (2 * n)) * m], 1),
            np.stack([np.full(2 * n, bottom), ((k + 1) % (2 * n)) * m + m - 1, k * m + m - 1], 1),
        ]
    else:
        raise ValueError(f"unknown shape {kind!r}; expected one of {', '.join(SHAPES)}")
    faces = np.concatenate([np.stack([a, b, c], -1), np.stack([a, c, d], -1)], axis=-2)
    faces = faces.reshape(-1, 3)
    if kind == "sphere":
        faces = np.concatenate([faces, *caps])
    return Mesh(vertices, faces.astype(np.int64), np.zeros_like(vertices))


def oriented_points(mesh: Mesh, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """n points uniform by area on the mesh with their face normals (seeded)."""
    points, normals, _ = sample_mesh(mesh, n, seed)
    return points, normals


def variant(
    points: np.ndarray, normals: np.ndarray, kind: str, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """A robustness variant of a clean oriented cloud (seeded; kind of VARIANTS):

    * clean: as drawn; estimated: the same points (the fit estimates the normals);
    * noisy: positions moved by Gaussian noise of 0.2% of the box (std per axis), normals
      turned by 5 degrees about a random axis normal to them; noisy0.1: half of both;
    * uneven: the 30% of the points of largest x keep a tenth of themselves;
    * holes: no points within 5% of the box of three surface points (three holes)."""
    rng = np.random.default_rng(seed)
    if kind in ("clean", "estimated"):
        return points, normals
    if kind in ("noisy", "noisy0.1"):
        share = 0.002 if kind == "noisy" else 0.001
        moved = points + rng.normal(scale=share * BOX_SIZE, size=points.shape)
        axis = np.cross(normals, rng.normal(size=normals.shape))
        axis /= np.linalg.norm(axis, axis=1, keepdims=True)
        angle = math.radians(2500 * share)
        turned = normals * math.cos(angle) + np.cross(axis, normals) * math.sin(angle)
        return np.clip(moved, -1, 1), turned
    if kind == "uneven":
        cut = np.quantile(points[:, 0], 0.7)
        keep = (points[:, 0] <= cut) | (rng.random(len(points)) < 0.1)
        return points[keep], normals[keep]
    if kind == "holes":
        centres = points[rng.choice(len(points), 3, replace=False)]
        distance = np.linalg.norm(points[:, None] - centres[None], axis=2).min(axis=1)
        keep = distance > 0.05 * BOX_SIZE
        return points[keep], normals[keep]
    raise ValueError(f"unknown variant {kind!r}; expected one of {', '.join(VARIANTS)}")
