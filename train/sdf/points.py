"""Oriented point clouds: surface points with their normals, drawn from a shape or read.

Two sources:

* `sample_surface`: points drawn uniformly (by area) on the surface of an analytic shape
  of `train.shapes` (sphere, torus, box), with their exact normals; seeded, in float64.
* `read_point_cloud`: a file, by suffix:
  - `.npy`: a float or integer array of shape [N, 6], rows `x y z nx ny nz`, or a
    structured array with (at least) the fields x, y, z, nx, ny, nz. Pickled objects
    (a saved dict) are refused: loading them runs arbitrary code.
  - `.xyz` and `.pwn` (CGAL's name for the same text): one point per line, `x y z nx ny
    nz` separated by spaces, tabs or commas (`x y z` alone when the normals are to be
    estimated); blank lines and lines starting with `#` are skipped; a first line holding
    one integer alone is a point count (CGAL's readers accept one) and must match.
  - `.ply`: ascii or binary (little or big endian), a `vertex` element with the
    properties x, y, z, nx, ny, nz (any scalar types; other properties and elements, such
    as a mesh's faces, are ignored). Read with plyfile, an optional dependency.

Every problem with a file is an `InputFileError` naming it (and the config key that named
it): no points, no normals, wrong columns, NaN or infinite values, zero-length normals.
Normals are normalised to unit length. Points outside the grid's box are refused
(`check_inside`): the grid cannot represent a surface beyond its box.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ..errors import ConfigError, InputFileError, plural, read_input
from ..shapes import Box, Sphere, Target, Torus
from .config import POINTS_KIND_KEYS, PointsConfig

KEY = "points.path"  # the config key naming a point-cloud file
FIELDS = ("x", "y", "z", "nx", "ny", "nz")
#: Normals shorter than this (before normalising) carry no direction.
MIN_NORMAL = 1e-12


@dataclass
class PointCloud:
    """points: [N, 3], normals: [N, 3] of unit length (float32, same device; zeros for a
    file read without its normals). report: how estimated normals were decided, if they
    were (`normals.estimate_normals`)."""

    points: Tensor
    normals: Tensor
    report: dict[str, float] | None = None

    def __len__(self) -> int:
        return self.points.shape[0]

    def to(self, device: torch.device) -> PointCloud:
        return PointCloud(self.points.to(device), self.normals.to(device), self.report)


# ---- analytic shapes --------------------------------------------------------------------


def shape_params(config: PointsConfig) -> dict[str, Any]:
    """The keys of a [points] table that its kind reads, by name."""
    return {k: getattr(config, k) for k in POINTS_KIND_KEYS[config.kind]}


def exact_sdf(kind: str, params: dict[str, Any]) -> Target:
    """The exact signed distance of the shape `kind` ("sphere", "torus", "box") of
    `params` (as `shape_params` gives them): negative inside, zero on the surface."""
    if kind == "sphere":
        return Sphere(params["radius"], params["center"])
    if kind == "torus":
        return Torus(params["major_radius"], params["minor_radius"], params["center"])
    if kind == "box":
        return Box(params["half_size"], params["center"])
    raise ValueError(f"points.kind: no exact SDF for {kind!r}")


def sample_surface(kind: str, params: dict, n: int, gen: torch.Generator) -> PointCloud:
    """n points uniform by area on the surface of `kind` ("sphere", "torus", "box"), with
    their exact outward normals. `params` holds the shape's keys of [points] (radius,
    major_radius, minor_radius, half_size, center); `gen` is a CPU generator: the same
    seed gives the same points on every machine (drawn in float64)."""
    center = torch.tensor(params["center"], dtype=torch.float64)
    if kind == "sphere":
        points, normals = _sphere(params["radius"], n, gen)
    elif kind == "torus":
        points, normals = _torus(params["major_radius"], params["minor_radius"], n, gen)
    elif kind == "box":
        points, normals = _box(params["half_size"], n, gen)
    else:
        raise ValueError(f"points.kind: no surface to sample for {kind!r}")
    return PointCloud((points + center).float(), normals.float())


def _sphere(radius: float, n: int, gen: torch.Generator) -> tuple[Tensor, Tensor]:
    # A normalised Gaussian vector is uniform on the unit sphere.
    normals = torch.randn(n, 3, generator=gen, dtype=torch.float64)
    normals = normals / normals.norm(dim=1, keepdim=True).clamp_min(1e-300)
    return radius * normals, normals


def _torus(major: float, minor: float, n: int, gen: torch.Generator) -> tuple[Tensor, Tensor]:
    """Torus around the z axis: angle u around the axis, v around the tube. The area
    element is proportional to (major + minor cos v), so v is drawn by rejection."""
    kept: list[Tensor] = []
    count = 0
    while count < n:
        v = torch.rand(2 * n, generator=gen, dtype=torch.float64) * (2 * math.pi)
        accept = torch.rand(2 * n, generator=gen, dtype=torch.float64) * (major + minor)
        v = v[accept < major + minor * torch.cos(v)]
        kept.append(v)
        count += v.numel()
    v = torch.cat(kept)[:n]
    u = torch.rand(n, generator=gen, dtype=torch.float64) * (2 * math.pi)
    cu, su, cv, sv = torch.cos(u), torch.sin(u), torch.cos(v), torch.sin(v)
    normals = torch.stack([cv * cu, cv * su, sv], dim=1)
    ring = torch.stack([major * cu, major * su, torch.zeros_like(u)], dim=1)
    return ring + minor * normals, normals


def _box(half: list[float], n: int, gen: torch.Generator) -> tuple[Tensor, Tensor]:
    """Axis-aligned box: a face picked with probability proportional to its area, then a
    uniform point on it; the normal is the face's."""
    h = torch.tensor(half, dtype=torch.float64)
    areas = torch.stack([h[1] * h[2], h[0] * h[2], h[0] * h[1]]).repeat(2)  # +x,+y,+z,-x,..
    face = torch.multinomial(areas, n, replacement=True, generator=gen)
    axis, sign = face % 3, 1.0 - 2.0 * (face // 3).double()
    points = (torch.rand(n, 3, generator=gen, dtype=torch.float64) * 2 - 1) * h
    rows = torch.arange(n)
    points[rows, axis] = sign * h[axis]
    normals = torch.zeros(n, 3, dtype=torch.float64)
    normals[rows, axis] = sign
    return points, normals


# ---- files ----------------------------------------------------------------------------------


def read_point_cloud(path: str | Path, key: str = KEY, normals: bool = True) -> PointCloud:
    """The oriented point cloud in `path` (.npy, .xyz, .pwn or .ply; see the module docstring).
    normals=False: the points alone (3 or 6 columns, any normals ignored; the cloud's
    normals are zeros, to be estimated).

    Raises InputFileError naming the file and `key` when it is missing, unreadable or
    not an oriented point cloud (normals=False: not a point cloud)."""
    file = Path(path)
    suffix = file.suffix.lower()
    if suffix == ".npy":
        array = read_input(file, lambda f: np.load(f, allow_pickle=False), ".npy array", key=key)
        rows = _npy_rows(file, array, key, normals)
    elif suffix in (".xyz", ".pwn"):
        data = read_input(file, Path.read_bytes, f"{suffix} file", key=key)
        rows = _xyz_rows(file, data, key, normals)
    elif suffix == ".ply":
        rows = _ply_rows(file, key, normals)
    else:
        raise InputFileError(
            file,
            f"unknown point-cloud format {suffix!r}; expected .npy, .xyz, .pwn or .ply",
            key=key,
        )
    if not normals:
        rows = np.concatenate([rows[:, :3], np.ones((len(rows), 3))], axis=1)
    cloud = _oriented(file, rows, key)
    return cloud if normals else PointCloud(cloud.points, torch.zeros_like(cloud.points))


#: How a refusal of points without normals ends.
ESTIMATE = '; or set points.normals = "estimate" to estimate them'


def _oriented(file: Path, rows: np.ndarray, key: str) -> PointCloud:
    """[N, 6] float64 rows -> PointCloud, after checking them (unit normals)."""
    if rows.shape[0] == 0:
        raise InputFileError(file, "holds no points", key=key)
    bad = ~np.isfinite(rows).all(axis=1)
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        raise InputFileError(
            file,
            f"{plural(int(bad.sum()), 'point')} {'has' if bad.sum() == 1 else 'have'} NaN or "
            f"infinite values (the first: point {first})",
            key=key,
        )
    length = np.linalg.norm(rows[:, 3:], axis=1)
    short = length < MIN_NORMAL
    if short.any():
        first = int(np.flatnonzero(short)[0])
        raise InputFileError(
            file,
            f"{plural(int(short.sum()), 'point')} {'has' if short.sum() == 1 else 'have'} a "
            f"zero-length normal (the first: point {first}); "
            f"every point needs an orientation",
            key=key,
        )
    points = torch.from_numpy(rows[:, :3]).float()
    normals = torch.from_numpy(rows[:, 3:] / length[:, None]).float()
    return PointCloud(points, normals)


def _npy_rows(file: Path, array: np.ndarray, key: str, normals: bool) -> np.ndarray:
    """[N, 6] rows ([N, 3] without `normals`) of a .npy array."""
    fields = FIELDS if normals else FIELDS[:3]
    if array.dtype.names is not None:  # structured: pick the fields by name
        missing = [f for f in fields if f not in array.dtype.names]
        if missing:
            raise InputFileError(
                file,
                f"structured array without the field(s) {', '.join(missing)} (it has "
                f"{', '.join(array.dtype.names)}); expected x, y, z, nx, ny, nz"
                + (
                    "; the normals are missing" + ESTIMATE
                    if set(missing) <= {"nx", "ny", "nz"}
                    else ""
                ),
                key=key,
            )
        try:
            columns = [array[f].astype(np.float64) for f in fields]
            return np.stack(columns, axis=1).reshape(-1, len(fields))
        except (TypeError, ValueError) as error:
            raise InputFileError(file, f"non-numeric fields ({error})", key=key) from None
    if not (np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.integer)):
        raise InputFileError(file, f"expected a numeric array, got dtype {array.dtype}", key=key)
    if array.ndim == 2 and array.shape[1] == 3:
        if not normals:
            return array.astype(np.float64)
        raise InputFileError(
            file,
            f"shape {list(array.shape)}: points without normals; expected [N, 6] "
            f"(x, y, z, nx, ny, nz per row){ESTIMATE}",
            key=key,
        )
    if array.ndim != 2 or array.shape[1] != 6:
        raise InputFileError(
            file,
            f"shape {list(array.shape)}; expected [N, 6] (x, y, z, nx, ny, nz per row) or a "
            f"structured array with the fields x, y, z, nx, ny, nz",
            key=key,
        )
    return array.astype(np.float64)


def _xyz_rows(file: Path, data: bytes, key: str, normals: bool) -> np.ndarray:
    """[N, 6] rows ([N, 3] without `normals`) of an .xyz or .pwn file."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InputFileError(
            file, "not a text file (expected x y z nx ny nz per line)", key=key
        ) from None
    rows: list[list[float]] = []
    count: tuple[int, int] | None = None  # (line, points) of a count header
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = re.split(r"[\s,]+", line)
        if len(parts) == 1 and not rows and count is None and parts[0].isdigit():
            count = (number, int(parts[0]))  # CGAL's optional point count
            continue
        if not normals and len(parts) in (3, 6):
            parts = parts[:3]
        elif len(parts) != 6:
            what = "points without normals" if len(parts) == 3 else plural(len(parts), "value")
            hint = ESTIMATE if len(parts) == 3 else ""
            expected = "6 values, x y z nx ny nz" if normals else "3 or 6 values, x y z [nx ny nz]"
            raise InputFileError(file, f"line {number}: {what}; expected {expected}{hint}", key=key)
        try:
            rows.append([float(v) for v in parts])
        except ValueError:
            raise InputFileError(
                file, f"line {number}: not a number in {line[:60]!r}", key=key
            ) from None
    if count is not None and count[1] != len(rows):
        raise InputFileError(
            file,
            f"line {count[0]}: a count of {plural(count[1], 'point')}, but the file holds "
            f"{len(rows)}",
            key=key,
        )
    return np.array(rows, dtype=np.float64).reshape(-1, 6 if normals else 3)


# ---- PLY ------------------------------------------------------------------------------------


def _ply_rows(file: Path, key: str, normals: bool) -> np.ndarray:
    """The vertex element's x, y, z, nx, ny, nz, read with plyfile (ascii and binary of
    either byte order; any scalar types; other elements and properties ignored)."""
    import plyfile  # optional: checked at start-up (train/dependencies.py)

    ply = read_input(file, lambda f: plyfile.PlyData.read(str(f)), ".ply file", key=key)
    names = [e.name for e in ply.elements]
    if "vertex" not in names:
        raise InputFileError(
            file, f"no 'vertex' element (it has: {', '.join(names) or 'none'})", key=key
        )
    vertex = ply["vertex"].data
    fields = FIELDS if normals else FIELDS[:3]
    missing = [f for f in fields if f not in (vertex.dtype.names or ())]
    if missing:
        no_normals = set(missing) <= {"nx", "ny", "nz"}
        raise InputFileError(
            file,
            f"the vertex element lacks the properties {', '.join(missing)}"
            f"{' (the points have no normals)' if no_normals else ''}; "
            f"expected x, y, z, nx, ny, nz{ESTIMATE if no_normals else ''}",
            key=key,
        )
    try:
        columns = [vertex[f].astype(np.float64) for f in fields]
        return np.stack(columns, axis=1).reshape(-1, len(fields))
    except (TypeError, ValueError) as error:  # a list property named x, say
        raise InputFileError(file, f"non-numeric vertex properties ({error})", key=key) from None


# ---- the grid's box ---------------------------------------------------------------------


#: The share of a fitted box's side that the points' bounding box fills (`fitted_box`).
FILL = 0.9


def fitted_box(points: Tensor) -> list[list[float]]:
    """`points.fit_box`: the cube around points [N, 3] centred on their bounding box, its
    side the box's largest side over FILL (so the points keep a margin of 5% of it)."""
    low, high = points.min(dim=0).values.double(), points.max(dim=0).values.double()
    centre, half = (low + high) / 2, (high - low).max().item() / FILL / 2 or 1.0
    return [(centre - half).tolist(), (centre + half).tolist()]


def check_inside(cloud: PointCloud, bounds: list[list[float]], source: str) -> None:
    """Refuse points outside the box `bounds` ([[xmin, ymin, zmin], [xmax, ymax, zmax]]).

    `source` is the file's path (InputFileError) or "" for a shape of [points]
    (ConfigError naming grid.bounds). The message proposes a box that holds them all."""
    lo, hi = (torch.tensor(b, dtype=torch.float32) for b in bounds)
    points = cloud.points.cpu()
    outside = ((points < lo) | (points > hi)).any(dim=1)
    if not outside.any():
        return
    first = int(outside.nonzero()[0, 0])
    low, high = points.min(dim=0).values, points.max(dim=0).values
    margin = 0.05 * (high - low).max().item()
    box = [
        [round(v - margin, 3) for v in low.tolist()],
        [round(v + margin, 3) for v in high.tolist()],
    ]
    where = ", ".join(f"{v:.4g}" for v in points[first].tolist())
    problem = (
        f"{int(outside.sum())} of the {len(cloud)} points "
        f"{'lies' if outside.sum() == 1 else 'lie'} outside grid.bounds = {bounds} "
        f"(the first: point {first} at ({where})); set grid.bounds to a box that "
        f"holds them, e.g. {box}" + ("; or set points.fit_box = true" if source else "")
    )
    if source:
        raise InputFileError(source, problem, key=KEY)
    raise ConfigError(f"grid.bounds: {problem}")
