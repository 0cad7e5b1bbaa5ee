"""The sdf experiment's table `[points]`: where the oriented points come from, and its checks."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ConfigError, InputFileError
from ..multires_config import table_entries, validate_multires
from ..schema import (
    ADAM_COPIES,
    Need,
    check_kind_keys,
    choice,
    doc,
    grid_need,
    largest_grid,
    positive,
    triple,
)

if TYPE_CHECKING:
    from ..config import Config

POINTS_KINDS = ("torus", "sphere", "box", "file")
#: The keys of [points] that every kind reads.
NORMAL_KEYS = ("normals", "normal_neighbours", "denoise")
#: The keys of [points] that each kind reads (besides `kind`).
POINTS_KIND_KEYS: dict[str, tuple[str, ...]] = {
    "sphere": ("count", "seed", "radius", "center", *NORMAL_KEYS),
    "torus": ("count", "seed", "major_radius", "minor_radius", "center", *NORMAL_KEYS),
    "box": ("count", "seed", "half_size", "center", *NORMAL_KEYS),
    "file": ("path", "fit_box", *NORMAL_KEYS),
}
NORMALS = ("given", "estimate")
KEEP = ("all", "supported")
POINT_FILE_SUFFIXES = (".npy", ".xyz", ".pwn", ".ply")


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
        "structured array with those fields), `.xyz` or `.pwn` (text, `x y z nx ny nz` per "
        "line, an optional first line with the count) or `.ply` (ascii or binary, vertex "
        "properties x, y, z, nx, ny, nz). Every point must lie inside grid.bounds (or "
        "`points.fit_box`); normals are normalised (relative paths: from the current "
        "directory).",
        "",
    )
    fit_box: bool = doc(
        "sdf, file: replace grid.bounds by a cube around the points (centred on their "
        "bounding box, which fills 90% of its side), so a scan in any units and place fits "
        "without editing the box; the run's config.toml records the box used.",
        False,
    )
    normals: str = doc(
        "sdf: `given` (the file's normals, or the shape's exact ones) or `estimate`: normals "
        "estimated from the points alone (a quadric fitted over each point's neighbours, "
        "oriented outwards: train/sdf/normals.py), for points without normals "
        "(a 3-column .npy, .xyz or .pwn, a .ply without nx, ny, nz); a file's normals, if any, "
        "are then ignored.",
        "given",
    )
    normal_neighbours: int = doc(
        'sdf, `points.normals = "estimate"`: k: each normal is fitted to k/2, 3k/4, k, 3k/2 '
        "or 2k neighbours, whichever lie nearest a plane (more: less noise, rounder edges).",
        16,
    )
    denoise: int = doc(
        "sdf: 0 (off), or k >= 6: before anything else each point is moved onto a quadric "
        "fitted to itself and its k nearest neighbours (train/sdf/denoise.py), for noisy "
        "scans: scatter along the normal shrinks by about sqrt(6 / (k + 1)) (32: 0.43x); on "
        "clean points it costs detail (Chamfer 1.07-1.2x on three scans at 128^3), so "
        "leave it off there (docs/sdf.md, Noisy scans). The summary reports the scatter "
        "measured before (`points_spread_median`, `points_spread_quartile`: the lower "
        "quartile, world units; see `sdf.scatter_voxels`) and how far the points moved "
        "(`points_moved_median`).",
        0,
    )


ENCODINGS = ("dense", "multires")


@dataclass
class SdfConfig:
    encoding: str = doc(
        "sdf: what f is: `dense` (one VoxelGrid, refined coarse to fine) or `multires`: a "
        "coarse grid at `grid.resolution` (set by `grid.init`) plus a small MLP over a "
        "multiresolution hash grid (`[multires]`; train/sdf/multires_field.py), meshed by "
        "marching cubes on f sampled at the final resolution of the schedule; the upsamples "
        "change nothing, and `sdf.repair_signs`, `sdf.scatter_voxels` and "
        "`train.upsample_moments` do not apply (docs/sdf.md, Multiresolution encoding).",
        "dense",
    )
    surface_units: str = doc(
        "sdf: the units of f in the surface term (the mean of f^2 at the points): `world`, "
        "or `voxel` (f over the current voxel size): then the term keeps its weight "
        "against `train.normal_weight` and `train.eikonal_weight` as the grid is refined, "
        "and the points are fitted to the same fraction of a voxel at every resolution.",
        "world",
    )
    keep: str = doc(
        "sdf: which pieces of the zero level set the mesh keeps: `all`, or `supported`: the "
        "connected components whose vertices lie as near the input points as the mesh's "
        "do (the median distance from a component's vertices to the nearest point at most "
        "`sdf.support_ratio` times the median over all the vertices): spurious pieces off "
        "the data go, separate parts of the scan stay.",
        "all",
    )
    min_island: int = doc(
        "sdf: before marching cubes, islands of one sign (6-connected voxels with f < 0, "
        "or f >= 0) of fewer than this many voxels take the sign around them (0: none): "
        "noisy points leave bubbles of a voxel or two on both sides of the surface, each "
        "a separate piece of the mesh. Islands touching the box's boundary are kept. "
        "Only the mesh changes; the grid is left as fitted.",
        0,
    )
    close: bool = doc(
        "sdf: when the mesh is extracted, the grid's outermost layer of voxels counts as "
        "outside, so a surface that leaves the box (a scan cut off by the box, a side never "
        "scanned) is closed along the box's faces, at most one voxel in: the mesh is "
        "watertight. `false`: left open where it meets the box. Only the mesh changes; the "
        "grid is left as fitted.",
        True,
    )
    relax: int = doc(
        "sdf: rounds of evening out the mesh after marching cubes (train/mesh/level_set.py, "
        "`relax_vertices`): each vertex moves half way to its neighbours' mean along the "
        "surface and back onto the zero level set; marching cubes' thin triangles become "
        "even ones whose faces follow the surface (armadillo at 256^3, 3 rounds: Chamfer "
        "-12%, normal consistency 0.982 -> 0.986). 0: marching cubes' mesh as it is.",
        3,
    )
    scatter_voxels: float = doc(
        "sdf, with `points.denoise`: the grid is not refined past the last scheduled "
        "resolution whose voxel is at least the points' measured scatter (the lower quartile "
        "of their neighbourhood planes' spread, before denoising) over this: on noisy points "
        "a finer grid follows the noise (0.2% of the box at 256^3: Chamfer 1.03-1.23x "
        "screened Poisson's, at 128^3 0.66-0.95x; bench/NOTES.md, S1 scatter). Later "
        "upsamples are skipped and the mesh comes from the grid reached; the run says so. "
        "0: refine as scheduled.",
        0.35,
    )
    normal_robust: float = doc(
        "sdf: the normal term's scale c^2 (0: plain squares): each point's r^2 = |grad f - "
        "n|^2 counts as c^2 r^2 / (c^2 + r^2) (Geman-McClure), so a normal turned the wrong "
        "way (r^2 near 4) stops pulling once the field disagrees with it, while small "
        "residuals count as before; for estimated normals, which turn a few points where "
        "parts nearly touch.",
        0.0,
    )
    repair_signs: bool = doc(
        "sdf: at each upsample, voxels farther than 1.5 voxels from every point whose sign "
        "the points contradict (their nearest points' side and the points' winding number "
        "both) take the other sign: a coarse grid fills gaps narrower than its voxel (between "
        "legs, an ear and the head), and the finer grid would keep the filled pocket, walled "
        "by sheets no point supports (train/sdf/sign_repair.py; the cow at 256^3 on an H100: "
        "Chamfer 1.43x the exact-SDF limit, 1.10x with it; bench/NOTES.md, S1 pockets).",
        True,
    )
    support_ratio: float = doc(
        'sdf, `sdf.keep = "supported"`: how much farther from the points than the mesh '
        "as a whole a component may lie (medians of the vertices' distances) and be kept.",
        3.0,
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
                "points.path: required when points.kind = 'file' (a .npy, .xyz, .pwn or .ply file)"
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
    if p.denoise != 0 and p.denoise < 6:
        raise ConfigError(f"points.denoise: expected 0 (off) or an integer >= 6, got {p.denoise}")
    if p.normal_neighbours < 3:
        raise ConfigError(
            f"points.normal_neighbours: expected an integer >= 3, got {p.normal_neighbours}"
        )
    s = c.sdf
    choice(s.encoding, ENCODINGS, "sdf.encoding")
    validate_multires(c.multires)
    if s.encoding == "multires":
        if c.train.tv_weight:
            raise ConfigError(
                f"train.tv_weight: not used with sdf.encoding = 'multires' (the total "
                f"variation is a dense grid's), got {c.train.tv_weight}; set it to 0"
            )
        if c.grid.interpolation != "linear":
            raise ConfigError(
                f"grid.interpolation: sdf.encoding = 'multires' interpolates linearly only, "
                f"got {c.grid.interpolation!r}"
            )
    choice(s.surface_units, ("world", "voxel"), "sdf.surface_units")
    choice(s.keep, KEEP, "sdf.keep")
    positive(s.support_ratio, "sdf.support_ratio")
    if s.relax < 0:
        raise ConfigError(f"sdf.relax: expected an integer >= 0, got {s.relax!r}")
    if not s.scatter_voxels >= 0:
        raise ConfigError(f"sdf.scatter_voxels: expected a number >= 0, got {s.scatter_voxels}")
    if not s.normal_robust >= 0:
        raise ConfigError(f"sdf.normal_robust: expected a number >= 0, got {s.normal_robust}")
    if s.min_island < 0:
        raise ConfigError(f"sdf.min_island: expected an integer >= 0, got {s.min_island!r}")
    if c.grid.backend != "native":
        raise ConfigError("grid.backend: the sdf experiment uses 'native' only")
    if c.train.surface_fraction > 0:
        raise ConfigError(
            "train.surface_fraction: not used by experiment = 'sdf' (its surface points are "
            "[points]; train.eikonal_points sets the uniform ones)"
        )


#: Bytes a step certainly allocates per point (surface and uniform): the point and the
#: field's gradient there (12 each), the field value, and the double-backward graph's
#: copies of both.
POINT_BYTES = 64
#: Bytes per oriented point held: position and normal.
CLOUD_POINT_BYTES = 24
#: Bytes per held-out point: position, normal, the point moved off the surface, its sdf.
EVAL_POINT_BYTES = 40


def memory(c: Config) -> list[Need]:
    """What an sdf run allocates (see `train.memory`): the grid, the batch, the point
    cloud (a file's size is not known before it is read), the held-out points."""
    t, p, e = c.train, c.points, c.eval.points
    needs = [
        grid_need(c, 1) if c.sdf.encoding == "dense" else multires_need(c),
        Need(
            "train.batch_size",
            f"{t.batch_size} surface and {t.eikonal_points} uniform points per step",
            (t.batch_size + t.eikonal_points) * POINT_BYTES,
        ),
        Need("eval.points", f"{e} held-out points", e * EVAL_POINT_BYTES),
    ]
    if p.kind != "file":
        needs.append(
            Need("points.count", f"{p.count} oriented points", p.count * CLOUD_POINT_BYTES)
        )
    return needs


def multires_need(c: Config) -> Need:
    """sdf.encoding = "multires": the table with its gradient and Adam's moments, and the
    lattice f is sampled on for the mesh (the base grid and the decoder are small)."""
    m = c.multires
    x, y, z = largest_grid(c)[1]
    return Need(
        "multires.log2_table_size",
        f"the multires table of {m.levels} x 2^{m.log2_table_size} x {m.features} with its "
        f"gradient and 2 Adam moments, and the {x}x{y}x{z} lattice of the mesh",
        (table_entries(m) * ADAM_COPIES + x * y * z) * 4,
    )
