"""The radiance-field scene that ships with the project: its density and colour, and the
renderer that makes its images (`train.nerf.scenes.generate` writes them in the Blender layout).

The scene is analytic: a few solids, each a "core" set (a point, a segment, a circle,
a box, a disc) thickened by a radius, so its signed distance and surface normal are
exact: `sdf = |p - closest(p)| - radius`, `normal = (p - closest) / |p - closest|`.

- density: sharp but continuous, `SIGMA * smoothstep((WIDTH - sdf) / (2 * WIDTH))` per
  solid (zero outside a shell of half-width `WIDTH` around the surface, `SIGMA` inside),
  summed over solids; the optical depth across one shell is about 10, so surfaces are
  opaque to one part in 1e4 within 2 * WIDTH = 0.02 (about 1 voxel of a 160^3 grid);
- colour: checkers on a floor disc and on a sphere, stripes on a box, plain rods
  (radius 0.03: 2% of the box, a thin structure) and a thin ring; Lambert shading from a
  fixed light plus a specular term on the sphere, ring and floor that depends on the view
  direction (a radiance field needs its view input here); solids blend by density where
  their shells overlap.

Everything lies inside `SCENE_BOUNDS` with a margin; the field is exactly zero outside.
Cameras sit on a sphere of radius 4 looking at the origin (z is up, as in the original
scenes): train and val on Fibonacci spirals over elevations -20..75 degrees (different
azimuth offsets drawn from the seed), test on a turntable at 30 degrees elevation.

Images are rendered by marching each ray through the pixel centre at a fixed step
`STEP` inside the solids' shells, with the midpoint rule and alpha compositing; empty
space is skipped exactly (a point at distance s > WIDTH from every solid has no density
within s - WIDTH of it). Measured on the 100 training views at 64x64, composited on white:
halving STEP (0.0025 -> 0.00125) changes the pixels by a mean of 0.006/255 (max 0.98/255);
doubling it (0.005 vs 0.0025) by a mean of 0.025/255 (max 3.6/255).
tests/train/nerf/test_nerf_scene.py checks the halving on a few views.
PNGs are 8-bit RGBA, alpha = 1 - transmittance, colour not premultiplied, as in the
original scenes: train on a white background.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

SCENE_BOUNDS = ((-1.5, -1.5, -1.5), (1.5, 1.5, 1.5))  # the box holding everything

WIDTH = 0.01  # half-width of the density transition around each surface (world units)
SIGMA = 1000.0  # density inside the solids (per world unit)
STEP = 0.0025  # marching step inside shells: WIDTH / 4
STOP_TRANSMITTANCE = 1e-5  # a ray ends once less than this much light can still pass

LIGHT = (0.4, -0.5, 0.77)  # direction towards the light (normalised below)
AMBIENT, DIFFUSE = 0.35, 0.65


# ---- geometry: signed distance and normal of each solid -------------------------------------


def _rotation_z(angle: float) -> Tensor:
    c, s = math.cos(angle), math.sin(angle)
    return torch.tensor([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def _rotation_x(angle: float) -> Tensor:
    c, s = math.cos(angle), math.sin(angle)
    return torch.tensor([[1.0, 0.0, 0.0], [0.0, c, -s], [0.0, s, c]])


# The solids (z up). Each entry's numbers are world units.
FLOOR = {"centre": (0.0, 0.0, -0.9), "radius": 1.0, "thickness": 0.08}  # a pill-edged disc
SPHERES = {"centres": ((0.35, -0.3, -0.37), (-0.05, 0.1, 0.95)), "radii": (0.45, 0.16)}
BOX = {"centre": (-0.45, 0.4, -0.5), "half": (0.22, 0.22, 0.22), "round": 0.06, "yaw": 0.5}
RING = {"centre": (0.0, 0.0, 0.3), "major": 0.75, "minor": 0.035, "tilt": 0.45}
RODS = {  # vertical capsules standing on the floor
    "bottoms": ((0.8, 0.35, -0.85), (-0.55, -0.7, -0.85), (-0.2, 0.85, -0.85)),
    "heights": (1.15, 1.45, 0.9),
    "radius": 0.03,
}
N_SOLIDS = 8  # floor, 2 spheres, box, ring, 3 rods (the order of the last axis below)


def _offsets(points: Tensor) -> tuple[Tensor, Tensor]:
    """points: [..., 3] -> (offset from each solid's core [..., 8, 3], sdf [..., 8])."""
    dev, dt = points.device, points.dtype

    def const(x) -> Tensor:
        return torch.tensor(x, device=dev, dtype=dt)

    offsets, sdfs = [], []

    # floor: a disc of radius R in the plane z = z0, thickened by `thickness`
    p = points - const(FLOOR["centre"])
    rho = p[..., :2].norm(dim=-1, keepdim=True)
    shrink = (FLOOR["radius"] / rho.clamp_min(1e-12)).clamp(max=1.0)
    offset = torch.cat([p[..., :2] * (1 - shrink), p[..., 2:]], dim=-1)
    offsets.append(offset)
    sdfs.append(offset.norm(dim=-1) - FLOOR["thickness"])

    # spheres: points thickened by their radii
    offset = points[..., None, :] - const(SPHERES["centres"])  # [..., 2, 3]
    offsets.extend(offset.unbind(-2))
    sdfs.extend((offset.norm(dim=-1) - const(SPHERES["radii"])).unbind(-1))

    # box: an axis-aligned box in a frame turned by `yaw` about z, with rounded edges
    rotation = _rotation_z(BOX["yaw"]).to(dev, dt)
    local = (points - const(BOX["centre"])) @ rotation  # world -> box frame
    half = const(BOX["half"])
    offset_local = local - torch.minimum(torch.maximum(local, -half), half)
    inside = (local.abs() - half).amax(dim=-1).clamp(max=0.0)  # < 0 inside the core
    offsets.append(offset_local @ rotation.T)
    sdfs.append(offset_local.norm(dim=-1) + inside - BOX["round"])

    # ring: a circle of radius `major` tilted about x, thickened by `minor`
    rotation = _rotation_x(RING["tilt"]).to(dev, dt)
    local = (points - const(RING["centre"])) @ rotation
    rho = local[..., :2].norm(dim=-1, keepdim=True).clamp_min(1e-12)
    core = torch.cat([local[..., :2] * (RING["major"] / rho), torch.zeros_like(rho)], dim=-1)
    offset = (local - core) @ rotation.T
    offsets.append(offset)
    sdfs.append(offset.norm(dim=-1) - RING["minor"])

    # rods: vertical segments thickened by `radius`
    bottoms = const(RODS["bottoms"])  # [3, 3]
    p = points[..., None, :] - bottoms  # [..., 3, 3]
    z = torch.minimum(p[..., 2].clamp_min(0.0), const(RODS["heights"]))
    offset = torch.cat([p[..., :2], (p[..., 2] - z)[..., None]], dim=-1)
    offsets.extend(offset.unbind(-2))
    sdfs.extend((offset.norm(dim=-1) - RODS["radius"]).unbind(-1))

    return torch.stack(offsets, dim=-2), torch.stack(sdfs, dim=-1)


def _density(sdf: Tensor) -> Tensor:
    """sdf: [...] -> sigma [...]: SIGMA inside, 0 beyond WIDTH outside, smoothstep between."""
    x = ((WIDTH - sdf) / (2 * WIDTH)).clamp(0.0, 1.0)
    return SIGMA * x * x * (3 - 2 * x)


# ---- colour --------------------------------------------------------------------------------


def _checker(f: Tensor, softness: float = 0.25) -> Tensor:
    """f: [...] a product of sines -> [...] in [0, 1]: 0 where f << 0, 1 where f >> 0."""
    x = (0.5 + f / (2 * softness)).clamp(0.0, 1.0)
    return x * x * (3 - 2 * x)


def _mix(a, b, w: Tensor) -> Tensor:
    """Colours a, b (3 numbers) mixed by w [...] -> [..., 3]."""
    a = torch.tensor(a, device=w.device, dtype=w.dtype)
    b = torch.tensor(b, device=w.device, dtype=w.dtype)
    return a + (b - a) * w[..., None]


# plain colours: small sphere, ring, the three rods
PLAIN = ((0.55, 0.25, 0.8), (0.9, 0.62, 0.18), (0.85, 0.1, 0.1), (0.1, 0.7, 0.2), (0.2, 0.3, 0.9))


def _albedo(points: Tensor, normals: Tensor) -> Tensor:
    """points [..., 3], normals [..., 8, 3] -> albedo [..., 8, 3] of each solid at the points."""
    x, y = points[..., 0], points[..., 1]
    cell = 0.25
    floor = _mix(
        (0.1, 0.35, 0.4),
        (0.75, 0.76, 0.78),
        _checker(torch.sin(math.pi * x / cell) * torch.sin(math.pi * y / cell)),
    )
    n = normals[..., 1, :]  # the big sphere: latitude-longitude checker
    longitude = torch.atan2(n[..., 1], n[..., 0])
    latitude = torch.asin(n[..., 2].clamp(-1.0, 1.0))
    sphere = _mix(
        (0.8, 0.12, 0.1),
        (0.93, 0.92, 0.88),
        _checker(torch.sin(6 * longitude) * torch.sin(4 * latitude)),
    )
    local = (points - torch.tensor(BOX["centre"], device=x.device, dtype=x.dtype)) @ _rotation_z(
        BOX["yaw"]
    ).to(x.device, x.dtype)
    box = _mix(
        (0.15, 0.3, 0.85),
        (0.95, 0.8, 0.2),
        _checker(torch.sin(2 * math.pi * (local[..., 0] + local[..., 2]) / 0.2), 0.5),
    )
    plain = torch.tensor(PLAIN, device=x.device, dtype=x.dtype).expand(*x.shape, 5, 3)
    small, ring, rods = plain[..., 0, :], plain[..., 1, :], plain[..., 2:, :].unbind(-2)
    return torch.stack([floor, sphere, small, box, ring, *rods], dim=-2)


# specular strength and exponent per solid (floor, sphere, small sphere, box, ring, rods)
SPECULAR = (0.15, 0.6, 0.3, 0.0, 0.5, 0.0, 0.0, 0.0)
SHININESS = (8.0, 40.0, 20.0, 1.0, 16.0, 1.0, 1.0, 1.0)


def _radiance(points: Tensor, offsets: Tensor, viewdirs: Tensor) -> Tensor:
    """Colour of each solid seen along `viewdirs`.

    points [..., 3], offsets [..., 8, 3] (from `_offsets`), viewdirs [..., 3] -> [..., 8, 3].
    """
    normals = offsets / offsets.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    light = torch.tensor(LIGHT, device=points.device, dtype=points.dtype)
    light = light / light.norm()
    lambert = (normals @ light).clamp_min(0.0)  # [..., 8]
    v = viewdirs[..., None, :]
    reflected = v - 2 * (v * normals).sum(-1, keepdim=True) * normals
    highlight = (reflected @ light).clamp_min(0.0)
    strength = torch.tensor(SPECULAR, device=points.device, dtype=points.dtype)
    exponent = torch.tensor(SHININESS, device=points.device, dtype=points.dtype)
    specular = strength * highlight**exponent  # [..., 8]
    albedo = _albedo(points, normals)
    colour = albedo * (AMBIENT + DIFFUSE * lambert)[..., None] + specular[..., None]
    return colour.clamp(0.0, 1.0)


def scene_field(points: Tensor, viewdirs: Tensor) -> tuple[Tensor, Tensor]:
    """The analytic radiance field: the truth the images are rendered from.

    points: [..., 3] world; viewdirs: [..., 3] unit directions of travel (camera to point).
    Returns sigma [...] (>= 0, per world unit) and rgb [..., 3] in [0, 1] (0 where sigma = 0).
    """
    offsets, sdf = _offsets(points)
    sigmas = _density(sdf)  # [..., 8]
    sigma = sigmas.sum(-1)
    colours = _radiance(points, offsets, viewdirs)
    rgb = (sigmas[..., None] * colours).sum(-2) / sigma.clamp_min(1e-30)[..., None]
    return sigma, rgb


# ---- rendering -----------------------------------------------------------------------------


def box_interval(origins: Tensor, directions: Tensor) -> tuple[Tensor, Tensor]:
    """Where rays [N, 3] cross SCENE_BOUNDS: (t_near [N], t_far [N]); t_far <= t_near: a miss."""
    lo = torch.tensor(SCENE_BOUNDS[0], device=origins.device, dtype=origins.dtype)
    hi = torch.tensor(SCENE_BOUNDS[1], device=origins.device, dtype=origins.dtype)
    inverse = 1.0 / torch.where(directions == 0, torch.full_like(directions, 1e-30), directions)
    t0, t1 = (lo - origins) * inverse, (hi - origins) * inverse
    near = torch.minimum(t0, t1).amax(dim=-1).clamp_min(0.0)
    far = torch.maximum(t0, t1).amin(dim=-1)
    return near, far


def render_rays(
    origins: Tensor, directions: Tensor, *, step: float = STEP
) -> tuple[Tensor, Tensor]:
    """Volume-renders rays [N, 3] (unit directions) through the scene.

    Returns (rgb [N, 3] premultiplied by alpha, alpha [N] = 1 - transmittance).
    Inside the solids' shells the ray advances by `step` and takes the midpoint's sigma and
    colour (alpha = 1 - exp(-sigma * step)); elsewhere it jumps over space whose density is
    exactly zero. Stops when transmittance falls below STOP_TRANSMITTANCE.
    """
    n = origins.shape[0]
    rgb = torch.zeros(n, 3, device=origins.device, dtype=origins.dtype)
    transmittance = torch.ones(n, device=origins.device, dtype=origins.dtype)
    t, t_far = box_interval(origins, directions)
    ids = torch.nonzero(t < t_far).squeeze(-1)
    o, d, t, t_far = origins[ids], directions[ids], t[ids], t_far[ids]
    colour = torch.zeros(ids.numel(), 3, device=origins.device, dtype=origins.dtype)
    trans = torch.ones(ids.numel(), device=origins.device, dtype=origins.dtype)
    half = 0.5 * step
    while ids.numel():
        points = o + (t + half)[:, None] * d  # the midpoints of [t, t + step]
        offsets, sdf = _offsets(points)
        nearest = sdf.amin(dim=-1)
        empty = nearest - WIDTH > half  # no density within `nearest - WIDTH` of the midpoint
        t = torch.where(empty, t + half + (nearest - WIDTH), t + step)
        shell = torch.nonzero((~empty) & (nearest < WIDTH)).squeeze(-1)
        if shell.numel():
            sigmas = _density(sdf[shell])  # [S, 8]
            sigma = sigmas.sum(-1)
            colours = _radiance(points[shell], offsets[shell], d[shell])
            weights = sigmas / sigma[:, None]
            alpha = 1.0 - torch.exp(-sigma * step)
            c = (weights[..., None] * colours).sum(-2)
            colour[shell] += (trans[shell] * alpha)[:, None] * c
            trans[shell] = trans[shell] * (1.0 - alpha)
        done = (t >= t_far) | (trans < STOP_TRANSMITTANCE)
        if done.any():
            rgb[ids[done]] = colour[done]
            transmittance[ids[done]] = trans[done]
            keep = ~done
            ids, o, d, t, t_far = ids[keep], o[keep], d[keep], t[keep], t_far[keep]
            colour, trans = colour[keep], trans[keep]
    return rgb, 1.0 - transmittance


# ---- cameras -------------------------------------------------------------------------------
