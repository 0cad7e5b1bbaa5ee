"""The realistic scene's materials (`train.nerf.scenes.realistic`): textures at several scales,
shading and view-dependent reflections.

Each part's colour at a point is `albedo * (ambient + DIFFUSE * lambert) + specular +
reflectivity * environment(reflected view)`: a hemispherical ambient (sky above, ground
below), Lambert from one directional light, a Blinn-Phong highlight (exponents up to 500:
sharp, strongly view-dependent) and a mirror reflection of an analytic environment (a sky
gradient, a sun and two bright windows with sharp edges), clamped to [0, 1]. No shadows.

Textures: wood rings and grain on the base; a mottled two-glaze vase (noise from 0.5 down to
0.03 world units) with a band of text-like glyphs (3x5 bitmaps drawn by an integer hash,
strokes about 0.012 wide) between two thin gold lines; veined leaves; a fine checker on the
cube; tarnish on the brass lattice. Edges are soft over about WIDTH (0.004): a step function
would make the colour jump inside a surface's density shell, where the renderer's fixed
step would alias it.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from . import realistic_shapes as shapes
from .waves import Waves, hash2, mix, smoothstep

LIGHT = (0.45, -0.35, 0.82)  # towards the light
AMBIENT, DIFFUSE = 0.38, 0.72
SKY, HORIZON, GROUND = (0.42, 0.6, 0.92), (0.95, 0.93, 0.88), (0.32, 0.27, 0.22)
SUN = (0.45, -0.35, 0.82)
WINDOWS = ((0.6, 0.25, 0.22, 0.2), (2.6, 0.1, 0.12, 0.35))  # azimuth, elevation, half sizes

# per part: specular strength, Blinn-Phong exponent, reflectivity
MATERIALS = (
    (0.25, 30.0, 0.04),  # base: waxed wood
    (0.7, 180.0, 0.12),  # vase: glaze
    (0.1, 10.0, 0.0),  # stems
    (0.3, 40.0, 0.03),  # leaves: waxy
    (1.5, 500.0, 0.85),  # mirror
    (2.0, 200.0, 0.35),  # glass
    (0.3, 50.0, 0.02),  # cube
    (0.8, 250.0, 0.1),  # wheel: enamel
    (0.9, 150.0, 0.3),  # spokes: steel
    (0.6, 80.0, 0.2),  # lattice: brass
)

WOOD_WARP = Waves(21, octaves=3, per_octave=5, wavelength=0.6, amplitude=0.012, channels=3)
WOOD_TONE = Waves(22, octaves=3, per_octave=5, wavelength=0.5, amplitude=0.25)
GLAZE = Waves(23, octaves=5, per_octave=6, wavelength=0.5, amplitude=0.22, gain=0.6)
TARNISH = Waves(24, octaves=3, per_octave=5, wavelength=0.2, amplitude=0.3)
LEAF_TONE = Waves(25, octaves=3, per_octave=5, wavelength=0.15, amplitude=0.2)


def _unit(v, like: Tensor) -> Tensor:
    v = torch.as_tensor(v, dtype=like.dtype).to(like.device)
    return v / v.norm()


def environment(r: Tensor) -> Tensor:
    """Radiance [n, 3] arriving from unit directions r [n, 3] (may exceed 1: the sun)."""
    z = r[:, 2]
    sky = mix(HORIZON, SKY, smoothstep(0.0, 0.6, z))
    colour = mix(GROUND, sky, smoothstep(-0.04, 0.04, z))
    sun = smoothstep(0.04, 0.02, torch.acos((r @ _unit(SUN, r)).clamp(-1.0, 1.0)))
    colour = colour + 3.0 * sun[:, None]
    azimuth, elevation = torch.atan2(r[:, 1], r[:, 0]), torch.asin(z.clamp(-1.0, 1.0))
    for a, e, half_a, half_e in WINDOWS:
        da = torch.remainder(azimuth - a + math.pi, 2 * math.pi) - math.pi
        inside = smoothstep(half_a, half_a - 0.03, da.abs()) * smoothstep(
            half_e, half_e - 0.03, (elevation - e).abs()
        )
        bars = smoothstep(0.01, 0.03, (da.abs() - 0.5 * half_a).abs())  # a window's mullion
        colour = colour + 1.6 * (inside * bars)[:, None]
    return colour


def _wood(p: Tensor) -> Tensor:
    q = p + WOOD_WARP(p)
    rings = torch.sin(2 * math.pi * q[:, :2].norm(dim=-1) / 0.045)
    grain = torch.sin(2 * math.pi * (q[:, 0] * 0.8 + q[:, 1] * 0.6) / 0.013 + 6 * q[:, 2])
    tone = 0.5 + WOOD_TONE(p)
    albedo = mix((0.36, 0.2, 0.09), (0.7, 0.48, 0.26), (0.5 + 0.5 * rings) * 0.7 + 0.3 * tone)
    return albedo * (0.9 + 0.1 * grain)[:, None]


def _glyphs(theta: Tensor, z: Tensor) -> Tensor:
    """Ink [n] in [0, 1] of a band of text: cells of 0.05 x 0.08 (arc length x height),
    each a 3x5 bitmap from a hash (a quarter of the cells blank, as spaces), its bits
    interpolated bilinearly and sharpened: rounded strokes about 0.012 wide whose edges
    blur over 0.004 (a step function would alias along the rays through each surface)."""
    width, height = 0.05, 0.08
    s = theta * 0.42  # arc length at the belly (radius about 0.42)
    col_f, row_f = s / width, (z + 0.38) / height
    col, row = col_f.floor(), row_f.floor()
    u, v = col_f - col, row_f - row  # position in the cell, [0, 1)
    bits = hash2(col.long(), row.long())
    bits = torch.where((bits >> 20) % 4 == 0, 0, bits)  # spaces
    gx, gy = (u - 0.15) / 0.7 * 3 - 0.5, (v - 0.1) / 0.8 * 5 - 0.5  # bitmap pixel centres
    x0, y0 = gx.floor(), gy.floor()
    fx, fy = gx - x0, gy - y0
    ink = torch.zeros_like(theta)
    for dx, dy in ((0, 0), (1, 0), (0, 1), (1, 1)):
        x, y = x0 + dx, y0 + dy
        valid = (x >= 0) & (x < 3) & (y >= 0) & (y < 5)
        bit = (bits >> (x.clamp(0, 2) + 3 * y.clamp(0, 4)).long()) & 1
        weight = (fx if dx else 1 - fx) * (fy if dy else 1 - fy)
        ink = ink + weight * (valid & (bit == 1)).to(theta.dtype)
    return smoothstep(0.3, 0.7, ink)


def _vase(p: Tensor) -> Tensor:
    ax, ay = shapes.VASE["axis"]
    q = p - torch.tensor([ax, ay, 0.0], dtype=p.dtype, device=p.device)
    theta, z = torch.atan2(q[:, 1], q[:, 0]), q[:, 2]
    glaze = mix((0.05, 0.16, 0.42), (0.12, 0.55, 0.6), smoothstep(-0.25, 0.25, GLAZE(p)))
    speckle = torch.sin(2 * math.pi * (p @ torch.tensor([0.6, -0.5, 0.62], device=p.device)) / 0.03)
    glaze = glaze * (0.92 + 0.08 * speckle)[:, None]
    band = smoothstep(0.082, 0.078, (z + 0.3).abs())
    ink = _glyphs(theta, z)
    paper = mix((0.92, 0.88, 0.76), (0.12, 0.1, 0.25), ink)
    gold = smoothstep(0.008, 0.004, torch.minimum((z + 0.392).abs(), (z + 0.208).abs()))
    albedo = mix(glaze, paper, band)
    return mix(albedo, (0.85, 0.65, 0.2), gold)


def _leaf(p: Tensor) -> Tensor:
    uvh = shapes.leaf_coordinates(p)  # [n, 6, 3]
    leaf = uvh[..., 2].abs().argmin(-1)  # the leaf whose midsurface is nearest
    uv = uvh[torch.arange(len(p), device=p.device), leaf, :2]
    u, v = uv[:, 0], uv[:, 1].abs()
    rib = smoothstep(0.004, 0.002, v)
    veins = smoothstep(0.75, 0.95, torch.cos(2 * math.pi * (u - 1.2 * v) / 0.028)) * (v > 0.004)
    base = mix((0.1, 0.32, 0.08), (0.3, 0.55, 0.12), 0.5 + LEAF_TONE(p))
    return mix(base, (0.62, 0.75, 0.3), (rib + 0.6 * veins).clamp(max=1.0))


def _cube(p: Tensor) -> Tensor:
    q = shapes.local_coordinates(p, shapes.CUBE["centre"], shapes.CUBE_FRAME)
    waves = torch.sin(math.pi * (q + 0.015) / 0.03).prod(-1)  # cells of 0.03
    return mix((0.82, 0.12, 0.1), (0.95, 0.93, 0.85), smoothstep(-0.25, 0.25, waves))


def _lattice(p: Tensor) -> Tensor:
    return mix((0.8, 0.6, 0.22), (0.35, 0.38, 0.25), smoothstep(0.1, 0.5, TARNISH(p)))


def _plain(colour) -> callable:
    return lambda p: torch.tensor(colour, dtype=p.dtype, device=p.device).expand(len(p), 3)


ALBEDO = (
    _wood,
    _vase,
    _plain((0.3, 0.42, 0.12)),
    _leaf,
    _plain((0.08, 0.08, 0.09)),
    _plain((0.45, 0.75, 0.7)),
    _cube,
    _plain((0.72, 0.07, 0.05)),
    _plain((0.72, 0.73, 0.76)),
    _lattice,
)


def radiance(part: int, points: Tensor, normals: Tensor, viewdirs: Tensor) -> Tensor:
    """Colour [n, 3] in [0, 1] of part `part` at points [n, 3] with unit normals [n, 3],
    seen along unit directions of travel viewdirs [n, 3] (camera to point)."""
    return shade(ALBEDO[part](points), normals, viewdirs, MATERIALS[part])


def shade(albedo: Tensor, normals: Tensor, viewdirs: Tensor, material: tuple) -> Tensor:
    """Colour [n, 3] in [0, 1] of a surface of albedo [n, 3] and unit normals [n, 3] seen
    along viewdirs [n, 3]: material (specular strength, Blinn-Phong exponent, reflectivity)."""
    strength, exponent, reflectivity = material
    light = _unit(LIGHT, normals)
    lambert = (normals @ light).clamp_min(0.0)
    ambient = AMBIENT * mix((0.62, 0.58, 0.52), (1.0, 1.0, 1.0), 0.5 + 0.5 * normals[:, 2])
    half = light - viewdirs
    half = half / half.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    specular = strength * (normals * half).sum(-1).clamp_min(0.0) ** exponent * (lambert > 0)
    colour = albedo * (ambient + DIFFUSE * lambert[:, None]) + specular[:, None]
    if reflectivity:
        reflected = viewdirs - 2 * (viewdirs * normals).sum(-1, keepdim=True) * normals
        colour = colour + reflectivity * environment(reflected)
    return colour.clamp(0.0, 1.0)
