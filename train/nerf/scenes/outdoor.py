"""The unbounded scene (`data.scene = "unbounded"`): an object standing on textured ground
that runs to the horizon, buildings at many distances, a sky; cameras on a full orbit.

Everything is ray-cast analytically (no density to march), z up:

- the object: `train.nerf.scenes.textured`'s painted disc (radius 1.4, a plinth on the ground),
  sphere and box, with its random 3D paint;
- the ground: the plane z = 0 out to radius `GROUND_RADIUS` (100, seventy times the plinth),
  painted with colour patches of about 6 and 1.6 units and a 0.5-unit checker of low
  contrast; past its edge, distant land below the horizon;
- `BUILDINGS`: boxes standing on the ground from 9 to 70 units away, 2 to 30 high, each of
  its own colour with horizontal bands;
- the sky at infinity: a gradient from the horizon to the zenith and a glow around the sun;
- light: Lambert shading from the sun plus ambient, with shadows (a ray towards the sun from
  each hit: the object and the buildings cast them), and aerial haze that fades surfaces
  towards the horizon colour with distance (`HAZE`).

Cameras (`camera_poses`): every split on a full orbit around `TARGET`, azimuths evenly spaced
with a random jitter, radius drawn in `CAMERA_RADII` and height in `CAMERA_HEIGHTS`, a 60
degree field of view, so the views hold the object, the ground to the horizon, the buildings
and the sky. Each pixel averages 2x2 rays. Images are opaque RGBA (alpha 1 everywhere: there
is no background, the sky is part of the scene).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

import grid

from ..data.cameras import look_at_origin
from .textured import SEED as PAINT_SEED
from .textured import paint, surface_hits

SUPERSAMPLE = 2
STEP = 0.0  # ray-cast, not marched (scene.json's "step")
CAMERA_ANGLE_X = math.radians(60.0)
TARGET = (0.0, 0.0, 0.35)
CAMERA_RADII = (2.6, 4.0)
CAMERA_HEIGHTS = (0.3, 2.0)
GROUND_RADIUS = 100.0
SUN = (0.55, -0.4, 0.6)  # direction towards the sun (normalised below): 37 degrees up
AMBIENT, DIFFUSE = 0.35, 0.75
HAZE = 150.0  # distance over which the air hides 63% of a surface
ZENITH, HORIZON = (0.2, 0.4, 0.78), (0.76, 0.85, 0.94)
LAND = (0.45, 0.5, 0.42)  # below the horizon, past the ground's edge
SUN_COLOUR = (1.0, 0.9, 0.7)
GRASS, DIRT = (0.33, 0.5, 0.2), (0.58, 0.46, 0.3)
# (x, y) centre, (half x, half y), height, colour
BUILDINGS = (
    ((9.0, 3.0), (0.8, 0.8), 3.0, (0.75, 0.3, 0.25)),
    ((-6.0, 8.5), (1.2, 0.6), 2.0, (0.85, 0.7, 0.3)),
    ((-14.0, -10.0), (2.0, 2.0), 6.0, (0.45, 0.55, 0.7)),
    ((5.0, -22.0), (1.5, 3.0), 9.0, (0.88, 0.86, 0.8)),
    ((30.0, 25.0), (4.0, 4.0), 15.0, (0.65, 0.35, 0.25)),
    ((-45.0, 20.0), (3.0, 6.0), 20.0, (0.25, 0.6, 0.6)),
    ((10.0, 60.0), (8.0, 3.0), 12.0, (0.7, 0.68, 0.6)),
    ((-20.0, -65.0), (2.0, 2.0), 30.0, (0.55, 0.5, 0.65)),
)
METADATA = {  # what scene.json records beyond the common keys
    "camera_angle_x": CAMERA_ANGLE_X,
    "camera_radii": list(CAMERA_RADII),
    "camera_heights": list(CAMERA_HEIGHTS),
    "ground_radius": GROUND_RADIUS,
    "buildings": len(BUILDINGS),
}
CHUNK = 1 << 16  # rays shaded together
GROUND_SEED = 11  # of the ground's colour patches
VARIANT_SEED = 1000  # variant k's world is drawn from seed VARIANT_SEED + k


@dataclass(frozen=True)
class World:
    """What a variant changes: `buildings` as BUILDINGS, `sun` (direction towards it, not
    normalised), the ground's `grass` and `dirt` colours and `ground_seed`, the object's
    `paint_seed` (`textured.paint`)."""

    buildings: tuple
    sun: tuple[float, float, float]
    grass: tuple[float, float, float]
    dirt: tuple[float, float, float]
    ground_seed: int
    paint_seed: int


DEFAULT = World(BUILDINGS, SUN, GRASS, DIRT, GROUND_SEED, PAINT_SEED)


def world(variant: int) -> World:
    """The world of `variant` (0: DEFAULT). Variant k > 0: len(BUILDINGS) buildings at
    distances spread over 9 to 70 units (one per eighth of that range, in random
    directions), heights growing with distance (2 to 30), footprints 0.6 to 4 half-width,
    random colours; the sun 25 to 55 degrees up in a random direction; grass and dirt
    shifted by up to 0.08; new ground and paint seeds. ValueError for a negative or
    non-integer variant."""
    if isinstance(variant, bool) or not isinstance(variant, int) or variant < 0:
        raise ValueError(f"variant must be an integer >= 0; got {variant!r}")
    if variant == 0:
        return DEFAULT
    gen = torch.Generator().manual_seed(VARIANT_SEED + variant)

    def uniform(lo: float, hi: float, n: int = 1) -> list[float]:
        return (lo + (hi - lo) * torch.rand(n, generator=gen, dtype=torch.float64)).tolist()

    n = len(BUILDINGS)
    buildings = []
    for k in range(n):
        fraction = (k + uniform(0.1, 0.9)[0]) / n  # one per slice of the range of distances
        distance = 9.0 + (70.0 - 9.0) * fraction
        azimuth = uniform(0.0, 2 * math.pi)[0]
        centre = (round(distance * math.cos(azimuth), 3), round(distance * math.sin(azimuth), 3))
        half = tuple(round(h * (0.6 + 3.4 * fraction), 3) for h in uniform(0.5, 1.0, 2))
        height = round(2.0 + 28.0 * fraction * uniform(0.6, 1.0)[0], 3)
        colour = tuple(round(c, 3) for c in uniform(0.25, 0.9, 3))
        buildings.append((centre, half, height, colour))
    azimuth, elevation = uniform(0.0, 2 * math.pi)[0], math.radians(uniform(25.0, 55.0)[0])
    sun = (
        math.cos(elevation) * math.cos(azimuth),
        math.cos(elevation) * math.sin(azimuth),
        math.sin(elevation),
    )
    grass, dirt = (
        tuple(min(1.0, max(0.0, c + d)) for c, d in zip(base, uniform(-0.08, 0.08, 3), strict=True))
        for base in (GRASS, DIRT)
    )
    return World(tuple(buildings), sun, grass, dirt, GROUND_SEED + variant, PAINT_SEED + variant)


class OutdoorScene:
    """The unbounded scene in the world of `variant` > 0: what `train.nerf.scenes.generate`
    asks of a scene module (STEP, SUPERSAMPLE, CAMERA_ANGLE_X, METADATA, camera_poses,
    render_rays). Variant 0 is this module itself."""

    STEP = STEP
    SUPERSAMPLE = SUPERSAMPLE
    CAMERA_ANGLE_X = CAMERA_ANGLE_X

    def __init__(self, variant: int) -> None:
        self.variant, self.world = variant, world(variant)
        self.METADATA = {**METADATA, "variant": variant, "buildings": len(self.world.buildings)}

    def camera_poses(self, n_train: int, n_val: int, n_test: int, seed: int) -> dict:
        """As the module's `camera_poses` (the same orbits)."""
        return camera_poses(n_train, n_val, n_test, seed)

    def render_rays(self, origins: Tensor, directions: Tensor) -> tuple[Tensor, Tensor]:
        """As the module's `render_rays`, in this variant's world."""
        return render_rays(origins, directions, self.world)


def look_at(position: Tensor, target: tuple[float, float, float] = TARGET) -> Tensor:
    """Camera positions [V, 3] -> OpenGL camera-to-world [V, 4, 4] looking at `target`, z up."""
    centre = torch.tensor(target, dtype=position.dtype)
    c2w = look_at_origin(position - centre)
    c2w[:, :3, 3] = position
    return c2w


def camera_poses(n_train: int, n_val: int, n_test: int, seed: int) -> dict[str, Tensor]:
    """c2w [V, 4, 4] float64 per split, each a full orbit (see the module docstring); the
    seed draws each split's azimuth offset, jitter, radii and heights."""
    gen = torch.Generator().manual_seed(seed)

    def orbit(n: int) -> Tensor:
        offset, jitter, radius, height = torch.rand(4, n, generator=gen, dtype=torch.float64)
        azimuth = 2 * math.pi * (offset[0] + (torch.arange(n) + 0.5 * jitter) / n)
        radius = CAMERA_RADII[0] + (CAMERA_RADII[1] - CAMERA_RADII[0]) * radius
        height = CAMERA_HEIGHTS[0] + (CAMERA_HEIGHTS[1] - CAMERA_HEIGHTS[0]) * height
        xy = radius[:, None] * torch.stack([azimuth.cos(), azimuth.sin()], -1)
        return look_at(torch.cat([xy, height[:, None]], -1))

    return {"train": orbit(n_train), "val": orbit(n_val), "test": orbit(n_test)}


def render_rays(
    origins: Tensor, directions: Tensor, world: World = DEFAULT
) -> tuple[Tensor, Tensor]:
    """Rays [N, 3] (unit directions) -> (colour [N, 3] in [0, 1], alpha [N], all ones), on
    the rays' device (shaded on the CPU, in chunks), in `world` (a variant's)."""
    device = origins.device
    o, d = origins.detach().cpu().float(), directions.detach().cpu().float()
    chunks = range(0, len(o), CHUNK)
    rgb = torch.cat([_shade(o[k : k + CHUNK], d[k : k + CHUNK], world) for k in chunks])
    return rgb.to(device), torch.ones(len(o), device=device)


def _shade(o: Tensor, d: Tensor, world: World = DEFAULT) -> Tensor:
    t, kind, normal, albedo = _nearest(o, d, world=world)
    hit = torch.isfinite(t)
    p = o + t.nan_to_num(posinf=0.0)[:, None] * d
    sun = torch.tensor(world.sun) / torch.tensor(world.sun).norm()
    lit = (normal @ sun).clamp_min(0)
    shadow_t, _, _, _ = _nearest(p + 1e-3 * normal, sun.expand_as(p), shade=False, world=world)
    lit = torch.where(torch.isfinite(shadow_t), 0.0, lit)
    colour = albedo * (AMBIENT + DIFFUSE * lit)[:, None]
    fog = torch.exp(-t.nan_to_num(posinf=0.0) / HAZE)[:, None]
    colour = colour * fog + torch.tensor(HORIZON) * (1 - fog)
    return torch.where(hit[:, None], colour, _sky(d, sun)).clamp(0.0, 1.0)


def _nearest(
    o: Tensor, d: Tensor, shade: bool = True, world: World = DEFAULT
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The nearest hit in `world`: (t [N], inf on a miss; what was hit [N]: 0 the object,
    1 the ground, 2 + k building k; normal [N, 3]; albedo [N, 3] if `shade`)."""
    t_obj, part, normal = surface_hits(o, d)  # the plinth disc, sphere, box
    if not shade:  # shadow rays: the plinth (on the ground) casts nothing
        t_obj = torch.where(part == 0, math.inf, t_obj)
    t_ground = torch.where((d[:, 2] < 0) & (o[:, 2] > 0), -o[:, 2] / d[:, 2], math.inf)
    reach = (o[:, :2] + t_ground.nan_to_num(posinf=0.0)[:, None] * d[:, :2]).norm(dim=-1)
    t_ground = torch.where(reach < GROUND_RADIUS, t_ground, math.inf)
    t_ground = torch.where(torch.isfinite(t_obj) & (part == 0), math.inf, t_ground)
    lo, hi = _building_boxes(world.buildings)  # [K, 3] each
    inv = 1.0 / torch.where(d == 0, torch.full_like(d, 1e-10), d)
    t0, t1 = (lo - o[:, None]) * inv[:, None], (hi - o[:, None]) * inv[:, None]  # [N, K, 3]
    t_near, t_far = torch.minimum(t0, t1).amax(-1), torch.maximum(t0, t1).amin(-1)
    t_box = torch.where((t_near < t_far) & (t_near > 0), t_near, math.inf)  # [N, K]
    t_all = torch.cat([t_obj[:, None], t_ground[:, None], t_box], 1)
    t, kind = t_all.min(1)
    if not shade:
        return t, kind, normal, normal
    p = o + t.nan_to_num(posinf=0.0)[:, None] * d
    normal = normal.clone()
    normal[kind == 1] = torch.tensor([0.0, 0.0, 1.0])
    on_box = kind >= 2
    k = (kind[on_box] - 2).clamp_min(0)
    centre, half = (lo + hi)[k] / 2, (hi - lo)[k] / 2
    q = (p[on_box] - centre) / half  # [-1, 1] on the faces
    axis = q.abs().argmax(-1)
    box_normal = torch.zeros_like(q)
    rows = torch.arange(len(q))
    box_normal[rows, axis] = q[rows, axis].sign()
    normal[on_box] = box_normal
    albedo = torch.zeros_like(p)
    on_object = torch.isfinite(t) & (kind == 0)
    albedo[on_object] = paint(p[on_object], world.paint_seed)
    albedo[kind == 1] = _ground(p[kind == 1], world)
    colours = torch.tensor([b[3] for b in world.buildings])[k]
    bands = (p[on_box, 2] / (hi[k, 2] / 6)).floor().remainder(2)  # six bands a building
    albedo[on_box] = colours * (0.8 + 0.2 * bands)[:, None]
    return t, kind, normal, albedo


def _building_boxes(buildings: tuple = BUILDINGS) -> tuple[Tensor, Tensor]:
    centre = torch.tensor([b[0] for b in buildings])
    half = torch.tensor([b[1] for b in buildings])
    height = torch.tensor([b[2] for b in buildings])
    zeros = torch.zeros_like(height)
    return torch.cat([centre - half, zeros[:, None]], 1), torch.cat(
        [centre + half, height[:, None]], 1
    )


def _ground(p: Tensor, world: World = DEFAULT) -> Tensor:
    """Albedo [N, 3] of ground points [N, 3]: grass and dirt patches, a faint checker."""
    gen = torch.Generator().manual_seed(world.ground_seed)
    xy = p[:, :2] / GROUND_RADIUS
    points = torch.cat([xy, torch.zeros_like(xy[:, :1])], -1)
    mix = grid.sample(torch.rand(32, 32, 2, 1, generator=gen), points, padding="border")
    shade = grid.sample(torch.rand(128, 128, 2, 1, generator=gen), points, padding="border")
    colour = torch.tensor(world.grass) * (1 - mix) + torch.tensor(world.dirt) * mix
    checker = ((p[:, 0] / 0.5).floor() + (p[:, 1] / 0.5).floor()).remainder(2)
    return colour * (0.8 + 0.3 * shade) * (0.93 + 0.07 * checker)[:, None]


def _sky(d: Tensor, sun: Tensor) -> Tensor:
    """Colour [N, 3] of the sky (and the land past the ground's edge) in directions d."""
    up = d[:, 2:3].clamp_min(0).sqrt()
    sky = torch.tensor(HORIZON) * (1 - up) + torch.tensor(ZENITH) * up
    towards = (d @ sun).clamp_min(0)[:, None]
    sky = sky + torch.tensor(SUN_COLOUR) * (0.6 * towards**300 + 0.15 * towards**8)
    below = (-d[:, 2:3] * 20).clamp(0, 1)
    return sky * (1 - below) + torch.tensor(LAND) * below
