"""Generated scenes around a real scanned mesh (`data.scene = "scan"`): the mesh of
`data.scene_mesh` (.off or .ply) in one of several looks (`data.scene_look`), rendered by
the realistic scene's renderer (`train.nerf.scenes.realistic`: shells of density around each
part's surface, space skipped by Lipschitz bounds, Blinn-Phong highlights, mirror
reflections of its environment, 2 x 2 rays per pixel) under its light and cameras.

The mesh is turned so that `data.scene_up` is +z, centred, and either stands on the
realistic scene's wooden base, its largest side STANDING_SIZE, or (look `large`) fills
most of the box without a base, its largest side LARGE_SIZE. Its part's function is the
trilinear interpolation of a signed-distance grid (`train.nerf.scenes.scan_mesh`), SDF_RESOLUTION
(256) voxels along the mesh's largest side on the base, LARGE_RESOLUTION (320) large (a
voxel of 0.0063 and 0.0085: under a pixel at 400x400, whose footprint at the origin is
0.0072), computed once per scene on the CPU (its nearest-triangle queries: minutes on two
cores); normals are its differences across one voxel (a tetrahedron of half a voxel), so
highlights run smoothly across the voxels' faces.

Looks (LOOKS): `glossy` (a glazed ceramic painted with dots, stripes and speckle down to
about 0.01 world units, sharp highlights), `mirror` (polished chrome: reflections of the
environment), `rough` (mottled, grainy stone, no highlight), `translucent` (a hollow
amber glass figure: a wall as thin as the glass's, of low density, see-through) and
`large` (painted enamel, the object filling the box). scene.json records the mesh's file
name, the first 16 hex digits of its SHA-256, the look, the up axis and the grid's
resolution, so a changed mesh or look regenerates the scene.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from ...errors import ConfigError
from . import realistic
from . import realistic_look as look
from . import realistic_shapes as shapes
from .scan_mesh import UP_AXES, SdfGrid, box_distance, file_hash, place, read_mesh, sdf_grid
from .waves import Waves, mix, smoothstep

STEP = realistic.STEP
SUPERSAMPLE = realistic.SUPERSAMPLE
SDF_RESOLUTION = 256  # voxels along the mesh's largest side (on the base)
LARGE_RESOLUTION = 320  # the same for a `large` mesh
STANDING_SIZE = 1.6  # largest side of a mesh on the base (the base's diameter is 1.9)
LARGE_SIZE = 2.4  # largest side of a `large` mesh (the box's is 3; the views see about 2.9)
SINK = 0.01  # a standing mesh's lowest point this far into the base's top
REACH = 0.02  # points nearer than this to the mesh part's box get its grid's value
SHELL = 0.008  # half-thickness of a translucent mesh's wall (the glass's)
# its density: an optical depth of about 0.56 across the wall at normal incidence, 1.1
# through a figure's two walls (the glass's 0.35 left one on the wooden base hard to see)
TRANSLUCENT_SIGMA = 35.0
VERSION = 1  # of this module's scenes: bump whenever their images would change


class MeshError(ConfigError):
    """`data.scene_mesh` cannot be used: a missing, unreadable or malformed mesh file, an
    unknown look or up axis (one line naming the key, as every config error)."""

    def __init__(self, problem: str) -> None:
        super().__init__(f"data.scene_mesh: {problem}")


# ---- looks ---------------------------------------------------------------------------------

GLAZE = Waves(31, octaves=4, per_octave=6, wavelength=0.5, amplitude=0.25, gain=0.6)
STONE = Waves(32, octaves=5, per_octave=6, wavelength=0.35, amplitude=0.22, gain=0.55)
ENAMEL = Waves(33, octaves=3, per_octave=5, wavelength=0.7, amplitude=0.3)
WARP = Waves(34, octaves=2, per_octave=4, wavelength=0.5, amplitude=0.03, channels=3)


def _glossy(p: Tensor) -> Tensor:
    """Two glazes, a lattice of dots 0.07 apart (radius 0.017), fine diagonal pin-stripes
    (period 0.022) and speckle (0.012)."""
    ground = mix((0.55, 0.08, 0.1), (0.95, 0.55, 0.15), smoothstep(-0.2, 0.2, GLAZE(p)))
    q = p + WARP(p)
    cell = q / 0.07
    dots = smoothstep(0.26, 0.22, (cell - cell.round()).norm(dim=-1))
    stripes = torch.cos(2 * math.pi * (q @ _const((0.7, -0.5, 0.5), p)) / 0.022)
    speckle = torch.sin(2 * math.pi * (q @ _const((-0.3, 0.8, 0.52), p)) / 0.012)
    albedo = ground * (0.85 + 0.15 * smoothstep(0.3, 0.9, stripes))[:, None]
    albedo = albedo * (0.94 + 0.06 * speckle)[:, None]
    return mix(albedo, (0.95, 0.93, 0.86), dots)


def _chrome(p: Tensor) -> Tensor:
    return _const((0.1, 0.1, 0.11), p).expand(len(p), 3)


def _stone(p: Tensor) -> Tensor:
    """Mottled grey-brown stone with veins and grain down to about 0.01."""
    tone = STONE(p + WARP(p))
    albedo = mix((0.32, 0.28, 0.24), (0.72, 0.66, 0.58), smoothstep(-0.3, 0.3, tone))
    veins = smoothstep(0.04, 0.0, (tone - 0.12).abs())
    grain = torch.sin(2 * math.pi * (p @ _const((0.5, 0.6, -0.62), p)) / 0.011)
    albedo = mix(albedo, (0.2, 0.17, 0.15), 0.8 * veins)
    return albedo * (0.9 + 0.1 * grain)[:, None]


def _amber(p: Tensor) -> Tensor:
    return _const((0.9, 0.45, 0.08), p).expand(len(p), 3)


def _enamel(p: Tensor) -> Tensor:
    """Three enamel colours in patches, a grid of thin gold lines 0.1 apart (0.006 wide)."""
    t = ENAMEL(p + WARP(p))
    albedo = mix((0.08, 0.3, 0.55), (0.1, 0.55, 0.35), smoothstep(-0.15, 0.0, t))
    albedo = mix(albedo, (0.9, 0.85, 0.7), smoothstep(0.15, 0.3, t))
    lines = (p / 0.1 - (p / 0.1).round()).abs().amin(-1) * 0.1  # distance to a grid plane
    return mix(albedo, (0.85, 0.65, 0.2), smoothstep(0.004, 0.002, lines))


@dataclass(frozen=True)
class Look:
    """albedo: points [n, 3] -> [n, 3]; material: (specular strength, exponent,
    reflectivity) as `realistic_look.MATERIALS`; sigma: density inside; shell: wall
    half-thickness of a hollow mesh (0: solid); large: fills the box, no base."""

    albedo: Callable[[Tensor], Tensor]
    material: tuple[float, float, float]
    sigma: float = realistic.SIGMA
    shell: float = 0.0
    large: bool = False


LOOKS = {
    "glossy": Look(_glossy, (0.9, 300.0, 0.1)),
    "mirror": Look(_chrome, (1.5, 500.0, 0.85)),
    "rough": Look(_stone, (0.0, 1.0, 0.0)),
    "translucent": Look(_amber, (2.0, 200.0, 0.35), TRANSLUCENT_SIGMA, SHELL),
    "large": Look(_enamel, (0.7, 150.0, 0.08), large=True),
}


def _const(x, like: Tensor) -> Tensor:
    return torch.tensor(x, dtype=like.dtype, device=like.device)


# ---- the scene -----------------------------------------------------------------------------


@functools.lru_cache(maxsize=2)
def _grid(path: str, digest: str, up: str, large: bool, resolution: int) -> SdfGrid:
    """The placed mesh's SdfGrid (kept for the next call: scene_module is asked often)."""
    del digest  # part of the key only: a changed file is read again
    try:
        mesh = read_mesh(path)
    except (OSError, ValueError) as error:
        raise MeshError(str(error)) from None
    floor = None if large else shapes.BASE["centre"][2] + shapes.BASE["half"] - SINK
    mesh = place(mesh, up, LARGE_SIZE if large else STANDING_SIZE, floor)
    return sdf_grid(mesh, resolution, clear=SHELL + 2 * realistic.WIDTH, reach=REACH)


class ScanScene:
    """The scene of one mesh in one look: what `train.nerf.scenes.generate` asks of a scene module
    (STEP, SUPERSAMPLE, METADATA, render_rays) and `parts()` for `realistic.render_rays`."""

    STEP = STEP
    SUPERSAMPLE = SUPERSAMPLE

    def __init__(self, mesh: str | Path, look: str = "glossy", up: str = "+y") -> None:
        if look not in LOOKS:
            raise ValueError(f"look {look!r}: expected one of {', '.join(LOOKS)}")
        if up not in UP_AXES:
            raise ValueError(f"up axis {up!r}: expected one of {', '.join(UP_AXES)}")
        self.path, self.look, self.up = Path(mesh).expanduser(), look, up
        try:
            self.digest = file_hash(self.path)
        except OSError as error:
            raise MeshError(f"{self.path}: {error.strerror or error}") from None
        self.resolution = LARGE_RESOLUTION if LOOKS[look].large else SDF_RESOLUTION
        self.METADATA = {
            "mesh": self.path.name,
            "mesh_sha256": self.digest,
            "look": look,
            "up": up,
            "sdf_resolution": self.resolution,
            "scan_version": VERSION,
        }

    def grid(self) -> SdfGrid:
        key = (str(self.path), self.digest, self.up, LOOKS[self.look].large, self.resolution)
        return _grid(*key)

    def parts(self, device: torch.device) -> realistic.Parts:
        """Base (unless large) and mesh, their functions on `device`."""
        lk, grid = LOOKS[self.look], self.grid().on(device)
        mesh_f = functools.partial(_mesh_sdf, grid, lk.shell)
        if lk.large:
            return realistic.Parts(
                lambda p: _stack([mesh_f(p)]),
                lambda part, p: mesh_f(p, exact=True)[0],
                lambda part, p, n, v: look.shade(lk.albedo(p), n, v, lk.material),
                (lk.sigma,),
                (0.5 * grid.h,),
            )
        fs = (lambda p, exact=False: (shapes.base_sdf(p), 1.0), mesh_f)
        return realistic.Parts(
            lambda p: _stack([f(p) for f in fs]),
            lambda part, p: fs[part](p, exact=True)[0],
            lambda part, p, n, v: (
                look.radiance(0, p, n, v)
                if part == 0
                else look.shade(lk.albedo(p), n, v, lk.material)
            ),
            (realistic.SIGMA, lk.sigma),
            (realistic.NORMAL_EPS, 0.5 * grid.h),
        )

    def render_rays(
        self, origins: Tensor, directions: Tensor, *, step: float = STEP
    ) -> tuple[Tensor, Tensor]:
        """As `realistic.render_rays`: rays [N, 3] -> (premultiplied rgb [N, 3], alpha [N])."""
        parts = self.parts(origins.device)
        return realistic.render_rays(origins, directions, step=step, parts=parts)

    def scene_field(self, points: Tensor, viewdirs: Tensor) -> tuple[Tensor, Tensor]:
        """As `realistic.scene_field`: (sigma [...], rgb [..., 3]) at points [..., 3]."""
        return realistic.scene_field(points, viewdirs, self.parts(points.device))


def _mesh_sdf(
    grid: SdfGrid, shell: float, p: Tensor, exact: bool = False
) -> tuple[Tensor, Tensor | float]:
    """(f [n], Lipschitz bound) of the mesh part at points [n, 3]: the grid's value (its
    absolute value less `shell` for a hollow mesh) within REACH of its box, the distance to
    the box beyond (no density there: the grid is at least `clear` outside the box). exact:
    the grid's value everywhere (normals are taken near the surface only)."""
    bound = grid.lipschitz_abs if shell else grid.lipschitz
    if exact:
        v = grid(p)
        return (v.abs() - shell if shell else v), bound
    f = box_distance(p, grid.box)
    lip = torch.ones_like(f)
    near = torch.nonzero(f < REACH).squeeze(-1)
    if near.numel():
        v = grid(p[near])
        f[near] = v.abs() - shell if shell else v
        lip[near] = bound
    return f, lip


def _stack(outs: list[tuple[Tensor, Tensor | float]]) -> tuple[Tensor, Tensor]:
    """[(f [n], L [n] or a number)] per part -> (f [n, P], L [n, P])."""
    fs = torch.stack([f for f, _ in outs], -1)
    lips = [
        torch.as_tensor(lip, dtype=fs.dtype, device=fs.device).expand(len(fs)) for _, lip in outs
    ]
    return fs, torch.stack(lips, -1)
