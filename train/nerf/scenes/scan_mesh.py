"""A triangle mesh as a part of a generated scene (`train.nerf.scenes.scan`): read from an .off or
.ply file, turned upright, placed, and sampled as a signed-distance grid whose trilinear
interpolation is the part's function `f` with a Lipschitz bound `L` (what the realistic
renderer's space skipping needs: no surface within `f / L` of a point).

The grid: `train.mesh.signed_distance.grid_sdf` gives the exact signed distance on the voxels within
BAND voxels of the surface and +-BAND voxels elsewhere; here the voxels beyond the band get
instead `max(BAND h, d - h sqrt(3) / 2)` (with their sign), where d is the distance to the
nearest band voxel (scipy's Euclidean distance transform). A surface point's nearest voxel
is in the band, so that value never exceeds the true distance, and rays skip large steps
far from the surface. Any two neighbouring voxels then differ by at most one voxel side (a
1-Lipschitz field sampled), so the trilinear interpolation's gradient is at most sqrt(3):
each of its components is a convex combination of differences of neighbours along that
axis over h. `lipschitz` is measured on the grid itself (the largest such difference per
axis), so it stays a valid bound even where a mesh with holes flips a sign. Signs beyond
half a voxel diagonal come from a flood fill from outside (`_outside_positive`).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

import grid

from ...mesh.scoring import face_normals
from ...mesh.triangles import Mesh

BAND = 3.5  # voxels of exact distance on each side (normals read up to ~3.4 voxels out)
MESH_SUFFIXES = (".off", ".ply")
UP_AXES = ("+x", "-x", "+y", "-y", "+z", "-z")


def read_off(data: bytes, name: str) -> Mesh:
    """An OFF / COFF / NOFF mesh (polygons fanned into triangles) -> Mesh (no normals)."""
    words = " ".join(line.split("#")[0] for line in data.decode("latin-1").splitlines()).split()
    head = words[0] if words else ""
    if not head.endswith("OFF"):
        raise ValueError(f"{name}: not an OFF file (starts with {head[:20]!r})")
    vertex_count, face_count = int(words[1]), int(words[2])
    stride = 3 + (4 if head.startswith("C") else 0) + (3 if "N" in head[:-3] else 0)
    at = 4
    table = np.array(words[at : at + vertex_count * stride], dtype=np.float64)
    vertices = table.reshape(vertex_count, stride)[:, :3]
    at += vertex_count * stride
    triangles: list[list[int]] = []
    for _ in range(face_count):
        k = int(words[at])
        ring = [int(w) for w in words[at + 1 : at + 1 + k]]
        triangles += [[ring[0], ring[j], ring[j + 1]] for j in range(1, k - 1)]
        at += 1 + k
    return Mesh(vertices, np.array(triangles, dtype=np.int64), np.zeros_like(vertices))


def _read_ply(path: Path) -> Mesh:
    import plyfile  # optional dependency (the sdf experiment's .ply point clouds)

    ply = plyfile.PlyData.read(str(path))
    v = ply["vertex"]
    vertices = np.stack([v["x"], v["y"], v["z"]], axis=1).astype(np.float64)
    rings = ply["face"].data[ply["face"].properties[0].name]
    faces = [[r[0], r[j], r[j + 1]] for r in rings for j in range(1, len(r) - 1)]
    return Mesh(vertices, np.array(faces, dtype=np.int64), np.zeros_like(vertices))


def read_mesh(path: str | Path) -> Mesh:
    """The triangles of an .off or .ply file; ValueError or OSError saying what is wrong."""
    path = Path(path)
    if path.suffix.lower() not in MESH_SUFFIXES:
        raise ValueError(f"{path}: expected an .off or .ply mesh")
    try:
        mesh = read_off(path.read_bytes(), str(path)) if path.suffix.lower() == ".off" else None
        mesh = mesh or _read_ply(path)
    except (IndexError, KeyError, TypeError, ValueError) as error:  # truncated, malformed
        if str(path) in str(error):
            raise
        raise ValueError(f"{path}: not a readable mesh ({error})") from None
    if not len(mesh.faces) or mesh.faces.max() >= len(mesh.vertices) or mesh.faces.min() < 0:
        raise ValueError(f"{path}: no triangles, or faces naming missing vertices")
    return mesh


def file_hash(path: str | Path) -> str:
    """The first 16 hex digits of the file's SHA-256 (scene.json: a changed mesh regenerates)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def upright(vertices: np.ndarray, up: str) -> np.ndarray:
    """vertices [V, 3] rotated so that the axis `up` (of UP_AXES) becomes +z (a proper
    rotation: a cyclic permutation of the axes, with one more sign flip where needed)."""
    axis, sign = "xyz".index(up[1]), 1.0 if up[0] == "+" else -1.0
    order = [(axis + 1) % 3, (axis + 2) % 3, axis]  # x, y, z of the turned mesh
    turned = vertices[:, order].copy()
    turned[:, 2] *= sign
    turned[:, 0] *= sign  # keeps the determinant +1
    return turned


def place(mesh: Mesh, up: str, size: float, floor: float | None) -> Mesh:
    """The mesh upright, centred on the z axis, its largest side `size`; its lowest point
    at z = `floor` (standing on it), or its box centred at the origin (`floor` None)."""
    v = upright(mesh.vertices, up)
    lo, hi = v.min(axis=0), v.max(axis=0)
    v = (v - (lo + hi) / 2) * (size / (hi - lo).max())
    if floor is not None:
        v[:, 2] += floor - v[:, 2].min()
    _, areas = face_normals(v, mesh.faces)
    return Mesh(v, mesh.faces[areas > 1e-14], np.zeros_like(v))


@dataclass
class SdfGrid:
    """values: [X, Y, Z] float32 signed distances at voxels lo + index * h (world units);
    lipschitz: the bound of their trilinear interpolation's gradient, lipschitz_abs that of
    the interpolation of their absolute values (a hollow mesh's wall: a sign that flips
    near a hole in the mesh leaves it small); box: (lo, hi) of the box outside which the
    interpolation is at least `sdf_grid`'s `clear`."""

    values: Tensor
    lo: tuple[float, float, float]
    h: float
    lipschitz: float
    lipschitz_abs: float
    box: tuple[tuple[float, ...], tuple[float, ...]]

    def on(self, device: torch.device) -> SdfGrid:
        """This grid with its values on `device` (copied once, then kept)."""
        device = torch.device(device)
        if self.values.device == device:
            return self
        copies = self.__dict__.setdefault("_copies", {})
        if device not in copies:
            values = self.values.to(device)
            copies[device] = SdfGrid(
                values, self.lo, self.h, self.lipschitz, self.lipschitz_abs, self.box
            )
        return copies[device]

    def __call__(self, points: Tensor) -> Tensor:
        """The trilinear interpolation at points [n, 3] -> [n] (`grid.sample`; outside the
        grid, as at its nearest face)."""
        values = self.on(points.device).values
        hi = [lo + (n - 1) * self.h for lo, n in zip(self.lo, values.shape, strict=True)]
        out = grid.sample(
            values[..., None],  # [X, Y, Z, 1]
            points.to(values.dtype),
            align_corners=True,
            padding="border",
            bounds=[self.lo, hi],
        )
        return out[:, 0].to(points.dtype)


def sdf_grid(mesh: Mesh, resolution: int, clear: float, reach: float) -> SdfGrid:
    """The SdfGrid of `mesh` with `resolution` voxels along its box's largest side (cubic
    voxels). Its `box` is the mesh's box grown until the interpolation outside it is at
    least `clear`; the grid covers `reach` + 2 voxels more. Needs scipy; the nearest-triangle
    queries of the band take most of the time (threads: numpy and scipy release the GIL)."""
    from scipy import ndimage

    from ...mesh.signed_distance import grid_sdf

    lo, hi = mesh.vertices.min(axis=0), mesh.vertices.max(axis=0)
    h = float((hi - lo).max()) / (resolution - 1)
    # a value is >= its voxel's true distance - (BAND + sqrt(3) / 2) h (see below), a
    # point's voxels are within sqrt(3) h of it
    grown = clear + (BAND + 1.5 * math.sqrt(3)) * h
    pad = math.ceil((grown + reach) / h) + 2
    counts = np.ceil((hi - lo) / h).astype(int) + 1 + 2 * pad
    start = lo - pad * h
    bounds = [start.tolist(), (start + (counts - 1) * h).tolist()]
    values = _outside_positive(grid_sdf(mesh, bounds, tuple(counts), band=BAND), h)
    band = np.abs(values) < BAND * h * (1 - 1e-6)  # the others hold exactly +-BAND h
    # far voxels: distance to the band, less half a voxel diagonal (the surface's nearest
    # voxel is in the band), never below BAND h: a lower bound of the true distance
    far = ndimage.distance_transform_edt(~band) * h - 0.5 * math.sqrt(3) * h
    values = np.where(band, values, np.sign(values) * np.maximum(BAND * h, far))
    steps = [np.abs(np.diff(values, axis=a)).max() / h for a in range(3)]
    steps_abs = [np.abs(np.diff(np.abs(values), axis=a)).max() / h for a in range(3)]
    return SdfGrid(
        values=torch.from_numpy(values.astype(np.float32)),
        lo=tuple(start.tolist()),
        h=h,
        lipschitz=float(np.linalg.norm(steps)) * 1.001,  # float32 rounding of the values
        lipschitz_abs=float(np.linalg.norm(steps_abs)) * 1.001,
        box=(tuple((lo - grown).tolist()), tuple((hi + grown).tolist())),
    )


def _outside_positive(values: np.ndarray, h: float) -> np.ndarray:
    """values [X, Y, Z] with the sign of every voxel farther than half a voxel diagonal from
    the surface taken from a flood fill: positive where the grid's faces reach without
    crossing those nearer voxels (a 6-connected path cannot cross the surface without
    one), negative elsewhere. The pseudonormals' signs alone flip in patches a few voxels
    from some scans' surfaces (self-intersections, thin folds), which would float specks
    of density beside them; near the surface they are kept (a feature thinner than a voxel
    has no far voxels inside)."""
    from scipy import ndimage

    near = np.abs(values) < 0.5 * math.sqrt(3) * h
    label, _ = ndimage.label(~near)
    faces = [label[0], label[-1], label[:, 0], label[:, -1], label[:, :, 0], label[:, :, -1]]
    outside = np.isin(label, np.unique(np.concatenate([f.ravel() for f in faces])))
    outside &= label > 0
    sign = np.where(near, np.sign(values), np.where(outside, 1.0, -1.0))
    values = (sign * np.abs(values)).astype(values.dtype)
    # a near voxel whose sign cannot hold beside a far neighbour's (the true distance
    # changes by at most h between them) takes the far one's
    flip = np.zeros_like(near)
    for axis in range(3):
        for shift in (1, -1):  # np.roll wraps at the grid's faces: outside on both sides
            other = np.roll(values, shift, axis)
            clash = (np.sign(other) != np.sign(values)) & (abs(values) + abs(other) > 1.01 * h)
            flip |= near & ~np.roll(near, shift, axis) & clash
    values[flip] = -values[flip]
    return values


def box_distance(points: Tensor, box) -> Tensor:
    """Distance [n] from points [n, 3] to an axis-aligned box (0 inside): 1-Lipschitz."""
    lo = torch.tensor(box[0], dtype=points.dtype, device=points.device)
    hi = torch.tensor(box[1], dtype=points.dtype, device=points.device)
    return torch.maximum(lo - points, points - hi).clamp_min(0.0).norm(dim=-1)
