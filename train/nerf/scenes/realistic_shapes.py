"""The realistic scene's geometry (`train.nerf.scenes.realistic`): ten parts, each a bounding
sphere and a signed-distance-like function `f` with a Lipschitz bound `L`
(`|f(p) - f(q)| <= L |p - q|`), so a point where `f > 0` has no surface within `f / L`.

    0 base      a pill-edged wooden disc the others stand on
    1 vase      a hollow vase open at the top (a concavity), its body sculpted by
                domain-warped multi-octave noise (`Waves`), bumps down to 0.025 across
    2 stems     five capsules of radius 0.009 (about a voxel of a 160^3 grid over the box)
    3 leaves    six bent leaves, 0.008 thick (half a voxel)
    4 mirror    a polished metal sphere
    5 glass     a thin spherical glass shell: low density, semi-transparent
    6 cube      a rounded cube inside the glass
    7 wheel     a wheel's rim and hub
    8 spokes    sixteen crossed spokes of radius 0.005
    9 lattice   a cubic lattice of bars of radius 0.007

z is up; everything lies within 1.35 of the origin (inside the box [-1.5, 1.5]^3, as the
original Blender scenes), the rest of the box is empty.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .waves import Waves

PARTS = ("base", "vase", "stems", "leaves", "mirror", "glass", "cube", "wheel", "spokes", "lattice")
N_PARTS = len(PARTS)
REACH = 0.02  # points nearer than this to a part's bounding sphere get its exact function
MARGIN = 0.01  # bounding spheres hold the region where a part's function is below this


def _frame(yaw: float, pitch: float = 0.0) -> Tensor:
    """Rotation [3, 3] whose columns are a local frame: yaw about z, then pitch about x."""
    cy, sy, cp, sp = math.cos(yaw), math.sin(yaw), math.cos(pitch), math.sin(pitch)
    rz = torch.tensor([[cy, -sy, 0.0], [sy, cy, 0.0], [0.0, 0.0, 1.0]], dtype=torch.float64)
    rx = torch.tensor([[1.0, 0.0, 0.0], [0.0, cp, -sp], [0.0, sp, cp]], dtype=torch.float64)
    return rz @ rx


def _const(x, like: Tensor) -> Tensor:
    return torch.as_tensor(x, dtype=like.dtype).to(like.device)


def _smin(a: Tensor, b: Tensor, k: float) -> Tensor:
    """Polynomial smooth minimum: <= min(a, b); its gradient is a convex combination of
    theirs, so it keeps their Lipschitz bound."""
    h = (0.5 + 0.5 * (b - a) / k).clamp(0.0, 1.0)
    return b + (a - b) * h - k * h * (1.0 - h)


def _capsules(p: Tensor, a: Tensor, b: Tensor) -> Tensor:
    """Distance from points p [n, 3] to segments a -> b [m, 3] each: [n, m]."""
    ab = b - a  # [m, 3]
    ap = p[:, None, :] - a  # [n, m, 3]
    t = ((ap * ab).sum(-1) / (ab * ab).sum(-1)).clamp(0.0, 1.0)
    return (ap - t[..., None] * ab).norm(dim=-1)


# ---- the parts ----------------------------------------------------------------------------

BASE = {"centre": (0.0, 0.0, -0.95), "radius": 0.95, "half": 0.06}  # top at z = -0.89
VASE = {"axis": (0.05, 0.1), "wall": 0.022, "top": 0.37}
MIRROR = {"centre": (0.55, -0.5, -0.66), "radius": 0.23}
GLASS = {"centre": (-0.6, -0.45, -0.6), "radius": 0.29, "half": 0.008}
CUBE = {"centre": (-0.6, -0.45, -0.67), "half": 0.09, "round": 0.015, "yaw": 0.6}
WHEEL = {"centre": (-0.42, 0.6, -0.455), "radius": 0.42, "rim": 0.016, "yaw": 0.35}
SPOKES = {"count": 16, "radius": 0.005, "hub": 0.028, "flange": 0.04, "twist": 0.12}
LATTICE = {"centre": (0.62, 0.42, -0.71), "half": 0.18, "cells": 3, "bar": 0.007, "yaw": 0.3}
STEM_RADIUS = 0.009
LEAF = {"half_length": 0.13, "half_width": 0.05, "half_thickness": 0.004, "bend": 1.5}

# the vase's sculpting: a low-frequency warp of the domain, then five octaves of bumps
VASE_WARP = Waves(11, octaves=1, per_octave=4, wavelength=0.8, amplitude=0.015, channels=3)
VASE_BUMPS = Waves(12, octaves=5, per_octave=6, wavelength=0.4, amplitude=0.0053, gain=0.4)
VASE_LIPSCHITZ = 1.0 + VASE_BUMPS.lipschitz * (1.0 + VASE_WARP.lipschitz)


def _plant() -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Stems (starts, tips [5, 3]) and leaves (centres [6, 3], frames [6, 3, 3] whose
    columns are the leaf's length, width and normal directions), drawn from a fixed seed."""
    gen = torch.Generator().manual_seed(5)
    ax, ay = VASE["axis"]
    starts, tips, centres, frames = [], [], [], []
    for i in range(6):
        r = torch.rand(4, generator=gen, dtype=torch.float64).tolist()
        azimuth = 2 * math.pi * (i + 0.4 * r[0]) / 6
        out = torch.tensor([math.cos(azimuth), math.sin(azimuth), 0.0], dtype=torch.float64)
        start = torch.tensor([ax, ay, 0.25], dtype=torch.float64)
        tip = start + out * (0.16 + 0.14 * r[1]) + torch.tensor([0.0, 0.0, 0.38 + 0.35 * r[2]])
        length = out * 0.75 + torch.tensor([0.0, 0.0, 0.45 + 0.5 * r[3]], dtype=torch.float64)
        length = length / length.norm()
        side = torch.linalg.cross(length, torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64))
        side = side / side.norm()
        roll = 0.9 * (r[0] - 0.5)  # turn the blade about its length
        side, normal = (
            side * math.cos(roll) + torch.linalg.cross(length, side) * math.sin(roll),
            torch.linalg.cross(length, side) * math.cos(roll) - side * math.sin(roll),
        )
        if i < 5:  # five stems; the sixth leaf sprouts from the first stem's middle
            starts.append(start)
            tips.append(tip)
        else:
            tip = 0.5 * (starts[0] + tips[0])
        centres.append(tip + length * LEAF["half_length"])
        frames.append(torch.stack([length, side, normal], dim=-1))
    return torch.stack(starts), torch.stack(tips), torch.stack(centres), torch.stack(frames)


STEM_STARTS, STEM_TIPS, LEAF_CENTRES, LEAF_FRAMES = _plant()


def _wheel_spokes() -> tuple[Tensor, Tensor]:
    """Spoke ends in the wheel's frame (x, z in its plane, y along the axle): [16, 3] each."""
    n, s = SPOKES["count"], SPOKES
    phi = 2 * math.pi * torch.arange(n, dtype=torch.float64) / n
    side = torch.where(torch.arange(n) % 2 == 0, 1.0, -1.0).double() * s["flange"]
    twist = torch.where(torch.arange(n) % 4 < 2, 1.0, -1.0).double() * s["twist"]
    hub = torch.stack([s["hub"] * phi.cos(), side, s["hub"] * phi.sin()], -1)
    rim_r = WHEEL["radius"]
    rim = torch.stack([rim_r * (phi + twist).cos(), 0 * phi, rim_r * (phi + twist).sin()], -1)
    return hub, rim


SPOKE_HUB, SPOKE_RIM = _wheel_spokes()


def local_coordinates(points: Tensor, centre, frame: Tensor) -> Tensor:
    """World points [n, 3] -> coordinates in a frame (columns of `frame`) at `centre`."""
    return (points - _const(centre, points)) @ _const(frame, points)


def base_sdf(p: Tensor) -> Tensor:
    q = p - _const(BASE["centre"], p)
    rho = torch.hypot(q[:, 0], q[:, 1])
    return torch.hypot((rho - BASE["radius"]).clamp_min(0.0), q[:, 2]) - BASE["half"]


def vase_body(p: Tensor) -> Tensor:
    """The vase's solid body before sculpting (a 1-Lipschitz bound of its distance)."""
    ax, ay = VASE["axis"]
    q = p - _const((ax, ay, 0.0), p)
    rho, z = torch.hypot(q[:, 0], q[:, 1]), q[:, 2]
    bulb = torch.hypot(rho, z + 0.5) - 0.4
    neck = torch.hypot(rho, z - z.clamp(-0.15, 0.33)) - 0.13
    lip = torch.hypot(rho - 0.14, z - 0.36) - 0.035
    return _smin(_smin(bulb, neck, 0.2), lip, 0.06)


def vase_sdf(p: Tensor) -> tuple[Tensor, Tensor]:
    """(f [n], Lipschitz bound [n]): the sculpted, hollowed vase, cut open at the top.
    The noise is evaluated only where it can reach the surface (elsewhere the unsculpted
    body minus the noise's bound is a 1-Lipschitz lower bound)."""
    body = vase_body(p)
    reach = VASE_BUMPS.bound + VASE["wall"] + REACH
    f = body.abs() - VASE_BUMPS.bound - VASE["wall"]
    lip = torch.ones_like(f)
    near = torch.nonzero(body.abs() < reach).squeeze(-1)
    if near.numel():
        q = p[near]
        sculpted = body[near] + VASE_BUMPS(q + VASE_WARP(q))
        f[near] = sculpted.abs() - VASE["wall"]
        lip[near] = VASE_LIPSCHITZ
    return torch.maximum(f, p[:, 2] - VASE["top"]), lip


def stems_sdf(p: Tensor) -> Tensor:
    return _capsules(p, _const(STEM_STARTS, p), _const(STEM_TIPS, p)).amin(-1) - STEM_RADIUS


def leaf_coordinates(p: Tensor) -> Tensor:
    """Points [n, 3] -> [n, 6, 3]: (along, across, normal) coordinates in each leaf's frame,
    the normal one measured from the bent midsurface."""
    local = torch.einsum(
        "nmk,mkj->nmj", p[:, None, :] - _const(LEAF_CENTRES, p), _const(LEAF_FRAMES, p)
    )
    b = LEAF["half_length"]
    u = local[..., 0].clamp(-b, b)  # the bend stops at the tips: its slope stays bounded
    bend = LEAF["bend"] * (u * u - b * b)
    return torch.stack([local[..., 0], local[..., 1], local[..., 2] - bend], -1)


def leaves_sdf(p: Tensor) -> tuple[Tensor, float]:
    """Each leaf a vesica (two arcs meeting in points) in its bent plane, thickened."""
    uvh = leaf_coordinates(p)
    b, w = LEAF["half_length"], LEAF["half_width"]
    d = (b * b - w * w) / (2 * w)  # vesica: two discs of radius r whose centres are 2d apart
    r = d + w
    x, y = uvh[..., 1].abs(), uvh[..., 0].abs()
    tip = (y - b) * d > x * b
    d2 = torch.where(
        tip,
        torch.hypot(x, y - b),
        torch.hypot(x + d, y) - r,
    )
    f = torch.hypot(d2.clamp_min(0.0), uvh[..., 2]) - LEAF["half_thickness"]
    # the bend's slope, 2 * bend * u with |u| <= b, adds at most that to the gradient
    return f.amin(-1), 1.0 + 2 * LEAF["bend"] * b


def mirror_sdf(p: Tensor) -> Tensor:
    return (p - _const(MIRROR["centre"], p)).norm(dim=-1) - MIRROR["radius"]


def glass_sdf(p: Tensor) -> Tensor:
    sphere = (p - _const(GLASS["centre"], p)).norm(dim=-1) - GLASS["radius"]
    return sphere.abs() - GLASS["half"]


CUBE_FRAME = _frame(CUBE["yaw"])
WHEEL_FRAME = _frame(WHEEL["yaw"]) @ _frame(0.0, math.pi / 2)  # its plane holds z
LATTICE_FRAME = _frame(LATTICE["yaw"])


def cube_sdf(p: Tensor) -> Tensor:
    q = local_coordinates(p, CUBE["centre"], CUBE_FRAME).abs() - (CUBE["half"] - CUBE["round"])
    outside = q.clamp_min(0.0).norm(dim=-1) + q.amax(-1).clamp(max=0.0)
    return outside - CUBE["round"]


def wheel_sdf(p: Tensor) -> Tensor:
    q = local_coordinates(p, WHEEL["centre"], WHEEL_FRAME)  # x, y in the wheel's plane, z the axle
    rho = torch.hypot(q[:, 0], q[:, 1])
    rim = torch.hypot(rho - WHEEL["radius"], q[:, 2]) - WHEEL["rim"]
    hub = torch.hypot(rho, q[:, 2] - q[:, 2].clamp(-0.05, 0.05)) - SPOKES["hub"]
    return torch.minimum(rim, hub)


def spokes_sdf(p: Tensor) -> Tensor:
    q = local_coordinates(p, WHEEL["centre"], WHEEL_FRAME)
    hub, rim = SPOKE_HUB[:, [0, 2, 1]], SPOKE_RIM[:, [0, 2, 1]]  # (x, z, y) -> (x, y, axle)
    return _capsules(q, _const(hub, q), _const(rim, q)).amin(-1) - SPOKES["radius"]


def lattice_sdf(p: Tensor) -> Tensor:
    q = local_coordinates(p, LATTICE["centre"], LATTICE_FRAME)
    h, n = LATTICE["half"], LATTICE["cells"]
    spacing = 2 * h / n
    nearest = q - (((q + h) / spacing).round().clamp(0, n) * spacing - h)  # to the bar lines
    along = (q.abs() - h).clamp_min(0.0)  # beyond the bars' ends
    bars = []
    for axis in range(3):  # the bars along this axis: distance in the other two
        others = [k for k in range(3) if k != axis]
        parts = [along[:, axis], nearest[:, others[0]], nearest[:, others[1]]]
        bars.append(torch.stack(parts, -1).norm(dim=-1))
    return torch.stack(bars, -1).amin(-1) - LATTICE["bar"]


def _bounding_spheres() -> list[tuple[tuple[float, float, float], float]]:
    ax, ay = VASE["axis"]
    plant_top = torch.cat([STEM_TIPS, LEAF_CENTRES]).mean(0)
    reach_plant = float(
        torch.cat([STEM_STARTS - plant_top, STEM_TIPS - plant_top, LEAF_CENTRES - plant_top])
        .norm(dim=-1)
        .max()
    )
    leaf_extent = LEAF["half_length"] + LEAF["bend"] * LEAF["half_length"] ** 2 + 0.01
    spheres = [
        (BASE["centre"], BASE["radius"] + BASE["half"]),
        ((ax, ay, -0.3), 0.8),
        (tuple(plant_top.tolist()), reach_plant + 0.02),
        (tuple(plant_top.tolist()), reach_plant + leaf_extent),
        (MIRROR["centre"], MIRROR["radius"]),
        (GLASS["centre"], GLASS["radius"] + GLASS["half"]),
        (CUBE["centre"], CUBE["half"] * math.sqrt(3)),
        (WHEEL["centre"], WHEEL["radius"] + WHEEL["rim"] + 0.06),
        (WHEEL["centre"], WHEEL["radius"] + 0.01),
        (LATTICE["centre"], (LATTICE["half"] + LATTICE["bar"]) * math.sqrt(3)),
    ]
    return [(centre, radius + MARGIN) for centre, radius in spheres]


BOUNDING = _bounding_spheres()  # per part: (centre, radius) holding where its f < MARGIN
_SDFS = (
    base_sdf,
    vase_sdf,
    stems_sdf,
    leaves_sdf,
    mirror_sdf,
    glass_sdf,
    cube_sdf,
    wheel_sdf,
    spokes_sdf,
    lattice_sdf,
)


def exact_sdf(part: int, points: Tensor) -> Tensor:
    """Part `part`'s function at points [n, 3] -> [n] (for normals: its gradient)."""
    out = _SDFS[part](points)
    return out[0] if isinstance(out, tuple) else out


def part_sdfs(points: Tensor) -> tuple[Tensor, Tensor]:
    """points [n, 3] -> (f [n, 10], L [n, 10]): each part's function and Lipschitz bound.

    Where a point is more than REACH outside a part's bounding sphere, f is the distance
    to that sphere (a lower bound of the distance to the part, L = 1): only the points
    near a part pay for its exact function.
    """
    centres = torch.tensor([c for c, _ in BOUNDING], dtype=points.dtype).to(points.device)
    radii = torch.tensor([r for _, r in BOUNDING], dtype=points.dtype).to(points.device)
    squared = (points * points).sum(-1, keepdim=True) - 2 * points @ centres.T
    f = (squared + (centres * centres).sum(-1)).clamp_min(0.0).sqrt() - radii  # [n, 10]
    lip = torch.ones_like(f)
    for i, sdf in enumerate(_SDFS):
        near = torch.nonzero(f[:, i] < REACH).squeeze(-1)
        if not near.numel():
            continue
        out = sdf(points[near])
        value, bound = out if isinstance(out, tuple) else (out, 1.0)
        f[near, i] = value
        lip[near, i] = bound if isinstance(bound, float) else bound.to(f.dtype)
    return f, lip
