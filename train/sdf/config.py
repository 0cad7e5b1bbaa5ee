"""The sdf experiment's table `[points]`: where the oriented points come from, and its checks."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ConfigError, InputFileError
from ..schema import check_kind_keys, choice, doc, positive, triple

if TYPE_CHECKING:
    from ..config import Config

POINTS_KINDS = ("torus", "sphere", "box", "file")
#: The keys of [points] that every kind reads.
NORMAL_KEYS = ("normals", "normal_neighbours")
#: The keys of [points] that each kind reads (besides `kind`).
POINTS_KIND_KEYS: dict[str, tuple[str, ...]] = {
    "sphere": ("count", "seed", "radius", "center", *NORMAL_KEYS),
    "torus": ("count", "seed", "major_radius", "minor_radius", "center", *NORMAL_KEYS),
    "box": ("count", "seed", "half_size", "center", *NORMAL_KEYS),
    "file": ("path", *NORMAL_KEYS),
}
NORMALS = ("given", "estimate")
INIT_SIGNS = ("normals", "winding")
KEEP = ("all", "supported")
POINT_FILE_SUFFIXES = (".npy", ".xyz", ".ply")


@dataclass
class PointsConfig:
    kind: str = doc(
        "sdf: where the oriented points come from: `torus`, `sphere`, `box` (drawn uniformly "
        "on that shape's surface, with exact normals; the shape's exact SDF is then known "
        "and evaluated against) or `file` (`points.path`).",
        "torus",
    )
    count: int = doc("sdf, shapes: number of surface points drawn.", 100000)
    seed: int = doc(
        "sdf, shapes: seed of the surface points (independent of the training seed).", 0
    )
    radius: float = doc("sdf, sphere: radius.", 0.6)
    center: list[float] = doc("sdf, sphere, torus, box: centre of the shape.", [0.0, 0.0, 0.0])
    major_radius: float = doc("sdf, torus: distance from the centre to the tube's axis.", 0.55)
    minor_radius: float = doc(
        "sdf, torus: radius of the tube, < major_radius (the torus lies in the xy-plane).", 0.2
    )
    half_size: list[float] = doc("sdf, box: half extents along x, y, z.", [0.5, 0.35, 0.25])
    path: str = doc(
        "sdf, file: an oriented point cloud, `.npy` ([N, 6] rows x, y, z, nx, ny, nz, or a "
        "structured array with those fields), `.xyz` (text, `x y z nx ny nz` per line) or "
        "`.ply` (ascii or binary_little_endian, vertex properties x, y, z, nx, ny, nz). Every "
        "point must lie inside grid.bounds; normals are normalised (relative paths: from the "
        "current directory).",
        "",
    )
    normals: str = doc(
        "sdf: `given` (the file's normals, or the shape's exact ones) or `estimate`: normals "
        "estimated from the points alone (local PCA over `points.normal_neighbours` "
        "neighbours, oriented outwards: train/sdf/normals.py), for points without normals "
        "(a 3-column .npy or .xyz, a .ply without nx, ny, nz); a file's normals, if any, "
        "are then ignored.",
        "given",
    )
    normal_neighbours: int = doc(
        'sdf, `points.normals = "estimate"`: neighbours of each point its normal is '
        "fitted to (more: less noise, rounder edges).",
        16,
    )


@dataclass
class SdfConfig:
    surface_units: str = doc(
        "sdf: the units of f in the surface term (the mean of f^2 at the points): `world`, "
        "or `voxel` (f over the current voxel size): then the term keeps its weight "
        "against `train.normal_weight` and `train.eikonal_weight` as the grid is refined, "
        "and the points are fitted to the same fraction of a voxel at every resolution.",
        "world",
    )
    smooth_weight: float = doc(
        "sdf: weight of the smoothness term, the mean over the box of (Laplacian of f)^2 "
        "in world units (so the same weight means the same at every resolution), added "
        "to the loss as its gradient (two passes of the native total-variation op).",
        0.0,
    )
    band_fraction: float = doc(
        "sdf: share of `train.eikonal_points` drawn near the points (a surface point "
        "moved by a Gaussian offset of `sdf.band_width` voxels), the rest uniform in the "
        "box.",
        0.0,
    )
    band_width: float = doc(
        "sdf: standard deviation of the near-surface eikonal points' offset, in voxels of "
        "the current grid.",
        2.0,
    )
    free_band: float = doc(
        "sdf: after each upsample, only the voxels within this many voxels (of the new "
        "grid) of an input point keep training; the others keep the coarser fit, resampled "
        "(0: all train). Far voxels see only a rare eikonal point, and Adam makes each such "
        "rare gradient a full step: frozen, they cannot drift into spurious surface.",
        0.0,
    )
    init_sign: str = doc(
        'sdf, `grid.init = "points"`: the sign of the start: `normals` (the mean of '
        "(x - p) . n over the 8 nearest points) or `winding` (the same near the points; "
        "farther than 2 voxels, the generalised winding number of the oriented points, "
        "which stays right far from the surface, behind holes and thin parts).",
        "normals",
    )
    keep: str = doc(
        "sdf: which pieces of the zero level set the mesh keeps: `all`, or `supported`: "
        "the connected components with at least `sdf.support_share` of their vertices "
        "within `sdf.support_distance` voxels of an input point (spurious pieces away "
        "from the data go).",
        "all",
    )
    support_distance: float = doc(
        'sdf, `sdf.keep = "supported"`: how near (in voxels of the final grid) a vertex '
        "must be to an input point to count as supported.",
        1.0,
    )
    support_share: float = doc(
        'sdf, `sdf.keep = "supported"`: the share of a component\'s vertices that must '
        "be supported for it to be kept.",
        0.5,
    )
    lr_scale: str = doc(
        "sdf: `none`, or `voxel`: the learning rate is multiplied by the voxel size "
        "relative to the starting grid's after each upsample (Adam's steps are in "
        "distance units: the same rate moves a finer surface by more voxels).",
        "none",
    )


def validate(c: Config, explicit: dict[str, set[str]]) -> None:
    """Check [points] and the sdf experiment's use of the shared tables."""
    p = c.points
    choice(p.kind, POINTS_KINDS, "points.kind")
    check_kind_keys("points", p.kind, explicit.get("points", set()), POINTS_KIND_KEYS)
    if p.count < 1:
        raise ConfigError(f"points.count: expected an integer >= 1, got {p.count}")
    positive(p.radius, "points.radius")
    triple(p.center, "points.center")
    positive(p.major_radius, "points.major_radius")
    positive(p.minor_radius, "points.minor_radius")
    if p.kind == "torus" and not p.minor_radius < p.major_radius:
        raise ConfigError(
            f"points.minor_radius: expected less than points.major_radius = {p.major_radius} "
            f"(a ring torus), got {p.minor_radius}"
        )
    triple(p.half_size, "points.half_size")
    for i, h in enumerate(p.half_size):
        positive(h, f"points.half_size[{i}]")
    if p.kind == "file":
        if not p.path:
            raise ConfigError(
                "points.path: required when points.kind = 'file' (a .npy, .xyz or .ply file)"
            )
        file = Path(p.path).expanduser().resolve()
        if file.suffix.lower() not in POINT_FILE_SUFFIXES:
            raise InputFileError(
                file,
                f"unknown point-cloud format {file.suffix or '(no suffix)'!r}; expected one of "
                f"{', '.join(POINT_FILE_SUFFIXES)}",
                key="points.path",
            )
        p.path = str(file)  # absolute: a resumed run may start in another directory
    choice(p.normals, NORMALS, "points.normals")
    if p.normal_neighbours < 3:
        raise ConfigError(
            f"points.normal_neighbours: expected an integer >= 3, got {p.normal_neighbours}"
        )
    s = c.sdf
    choice(s.surface_units, ("world", "voxel"), "sdf.surface_units")
    positive(s.smooth_weight, "sdf.smooth_weight", zero=True)
    if not 0 <= s.band_fraction <= 1:
        raise ConfigError(f"sdf.band_fraction: expected a number in [0, 1], got {s.band_fraction}")
    positive(s.band_width, "sdf.band_width")
    positive(s.free_band, "sdf.free_band", zero=True)
    choice(s.init_sign, INIT_SIGNS, "sdf.init_sign")
    choice(s.keep, KEEP, "sdf.keep")
    positive(s.support_distance, "sdf.support_distance")
    if not 0 <= s.support_share <= 1:
        raise ConfigError(f"sdf.support_share: expected a number in [0, 1], got {s.support_share}")
    choice(s.lr_scale, ("none", "voxel"), "sdf.lr_scale")
    if c.grid.backend != "native":
        raise ConfigError("grid.backend: the sdf experiment uses 'native' only")
    if c.train.surface_fraction > 0:
        raise ConfigError(
            "train.surface_fraction: not used by experiment = 'sdf' (its surface points are "
            "[points]; train.eikonal_points sets the uniform ones)"
        )
