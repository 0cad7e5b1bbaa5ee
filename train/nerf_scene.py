"""The radiance-field scene that ships with the project, rendered into the Blender layout.

    python -m train.nerf_scene --out data/nerf_scene --size 64 [--train N --val N --test N]

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
doubling it (0.005 vs 0.0025) by a mean of 0.025/255 (max 3.6/255). tests/test_nerf_scene.py
checks the halving on a few views.
PNGs are 8-bit RGBA, alpha = 1 - transmittance, colour not premultiplied, as in the
original scenes: train on a white background.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

GENERATOR = "train.nerf_scene"
VERSION = 1  # bump whenever the images would change: loaders regenerate older scenes

SCENE_BOUNDS = ((-1.5, -1.5, -1.5), (1.5, 1.5, 1.5))  # the box holding everything
CAMERA_RADIUS = 4.0
CAMERA_ANGLE_X = 0.6911112070083618  # the original scenes' field of view (radians)
TEST_ELEVATION = math.radians(30.0)
ELEVATIONS = (math.radians(-20.0), math.radians(75.0))  # train / val band

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


def look_at_origin(position: Tensor) -> Tensor:
    """Camera positions [V, 3] -> OpenGL camera-to-world [V, 4, 4] looking at the origin, z up."""
    back = position / position.norm(dim=-1, keepdim=True)  # the camera's +z axis
    up = torch.tensor([0.0, 0.0, 1.0], dtype=position.dtype).expand_as(back)
    right = torch.linalg.cross(up, back)
    right = right / right.norm(dim=-1, keepdim=True)
    true_up = torch.linalg.cross(back, right)
    c2w = torch.zeros(position.shape[0], 4, 4, dtype=position.dtype)
    c2w[:, :3, 0], c2w[:, :3, 1], c2w[:, :3, 2], c2w[:, :3, 3] = right, true_up, back, position
    c2w[:, 3, 3] = 1.0
    return c2w


def _spherical(azimuth: Tensor, elevation: Tensor) -> Tensor:
    return CAMERA_RADIUS * torch.stack(
        [
            torch.cos(elevation) * torch.cos(azimuth),
            torch.cos(elevation) * torch.sin(azimuth),
            torch.sin(elevation),
        ],
        dim=-1,
    )


def camera_poses(n_train: int, n_val: int, n_test: int, seed: int) -> dict[str, Tensor]:
    """c2w [V, 4, 4] float64 per split: Fibonacci spirals (train, val) and a turntable (test).

    A spiral spreads views evenly over the band of elevations ELEVATIONS (uniform in
    sin(elevation), i.e. per unit area of the sphere, azimuth advancing by the golden
    angle); the seed draws each split's azimuth offset, so the splits share no pose.
    """
    gen = torch.Generator().manual_seed(seed)
    offsets = torch.rand(3, generator=gen, dtype=torch.float64) * 2 * math.pi
    golden = math.pi * (3.0 - math.sqrt(5.0))
    lo, hi = (math.sin(e) for e in ELEVATIONS)

    def spiral(n: int, offset: Tensor) -> Tensor:
        i = torch.arange(n, dtype=torch.float64)
        elevation = torch.asin(hi - (hi - lo) * (i + 0.5) / n)
        return look_at_origin(_spherical(offset + golden * i, elevation))

    turn = offsets[2] + 2 * math.pi * torch.arange(n_test, dtype=torch.float64) / max(n_test, 1)
    test = look_at_origin(_spherical(turn, torch.full_like(turn, TEST_ELEVATION)))
    return {"train": spiral(n_train, offsets[0]), "val": spiral(n_val, offsets[1]), "test": test}


# ---- writing the dataset -------------------------------------------------------------------


def render_views(
    c2w: Tensor, size: int, *, device: str = "cpu", chunk: int | None = None
) -> Tensor:
    """c2w [V, 4, 4] -> straight (not premultiplied) RGBA [V, size, size, 4] float32 in [0, 1].

    chunk: rays marched together (default 2^19 on the CPU, about 0.5 GB at the peak, and
    2^21 on a GPU, where each marching step is a few dozen small kernels).
    """
    if chunk is None:
        chunk = 1 << 21 if torch.device(device).type == "cuda" else 1 << 19
    from .blender import Views, camera_rays

    focal = 0.5 * size / math.tan(0.5 * CAMERA_ANGLE_X)
    views = Views(torch.empty(0), c2w.to(device, torch.float32), focal, size, size, [""] * len(c2w))
    origins, directions = (x.reshape(-1, 3) for x in camera_rays(views))
    rgb, alpha = [], []
    for start in range(0, origins.shape[0], chunk):
        c, a = render_rays(origins[start : start + chunk], directions[start : start + chunk])
        rgb.append(c)
        alpha.append(a)
    rgb, alpha = torch.cat(rgb), torch.cat(alpha)
    straight = rgb / alpha.clamp_min(1e-12)[:, None]
    rgba = torch.cat([straight, alpha[:, None]], dim=-1).clamp(0.0, 1.0)
    return rgba.reshape(len(c2w), size, size, 4).cpu()


def _to_png_bytes(rgba: Tensor) -> np.ndarray:
    """[H, W, 4] float in [0, 1] -> uint8, colour zeroed where alpha rounds to 0."""
    pixels = (rgba.numpy() * 255.0 + 0.5).astype(np.uint8)
    pixels[pixels[..., 3] == 0] = 0
    return pixels


def _check_arguments(size: int, counts: dict[str, int], seed: int) -> None:
    for name, value, least in [("size", size, 1), ("seed", seed, 0)] + [
        (f"n_{split}", n, 1) for split, n in counts.items()
    ]:
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ValueError(f"{name} must be an integer >= {least}; got {value!r}")


def scene_metadata(size: int, n_train: int, n_val: int, n_test: int, seed: int) -> dict:
    """What `scene.json` holds: enough to tell whether a generated scene is current."""
    return {
        "generator": GENERATOR,
        "version": VERSION,
        "seed": seed,
        "size": size,
        "n_train": n_train,
        "n_val": n_val,
        "n_test": n_test,
        "bounds": [list(SCENE_BOUNDS[0]), list(SCENE_BOUNDS[1])],
        "camera_radius": CAMERA_RADIUS,
        "camera_angle_x": CAMERA_ANGLE_X,
        "step": STEP,
    }


def generate_scene(
    out_dir: str | Path,
    *,
    size: int = 64,
    n_train: int = 100,
    n_val: int = 8,
    n_test: int = 8,
    seed: int = 0,
    device: str = "cpu",
) -> Path:
    """Renders the scene into `out_dir` in the Blender layout and returns `out_dir`.

    Writes transforms_{train,val,test}.json, {train,val,test}/r_{i}.png (size x size RGBA)
    and scene.json. The files are assembled in a sibling directory and moved into place
    at the end, so an interrupted run never leaves a scene that looks complete. An
    existing `out_dir` is replaced only if it holds a scene this generator wrote.
    """
    counts = {"train": n_train, "val": n_val, "test": n_test}
    _check_arguments(size, counts, seed)
    out_dir = Path(out_dir)
    if out_dir.exists() and read_scene_metadata(out_dir) is None and any(out_dir.iterdir()):
        raise FileExistsError(
            f"{out_dir}: exists and is not a scene written by {GENERATOR} "
            "(no scene.json); refusing to replace it"
        )
    staging = out_dir.with_name(f".{out_dir.name}.tmp{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        _write_splits(staging, camera_poses(n_train, n_val, n_test, seed), size, device)
        metadata = scene_metadata(size, n_train, n_val, n_test, seed)
        (staging / "scene.json").write_text(json.dumps(metadata, indent=2) + "\n")
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if out_dir.exists():
        shutil.rmtree(out_dir)
    staging.rename(out_dir)
    return out_dir


def _write_splits(root: Path, poses: dict[str, Tensor], size: int, device: str) -> None:
    """Renders every split in one pass (fewer, fuller ray batches) and writes PNGs and json."""
    from PIL import Image  # Pillow is a dependency of matplotlib (the `train` extra)

    rgba = render_views(torch.cat(list(poses.values())), size, device=device)
    first = 0
    for split, c2w in poses.items():
        (root / split).mkdir()
        frames = []
        for k in range(len(c2w)):
            pixels = _to_png_bytes(rgba[first + k])
            Image.fromarray(pixels).save(root / split / f"r_{k}.png")
            frames.append({"file_path": f"./{split}/r_{k}", "transform_matrix": c2w[k].tolist()})
        first += len(c2w)
        meta = {"camera_angle_x": CAMERA_ANGLE_X, "frames": frames}
        (root / f"transforms_{split}.json").write_text(json.dumps(meta, indent=2) + "\n")


def read_scene_metadata(out_dir: str | Path) -> dict | None:
    """The scene.json of a scene this generator wrote, or None."""
    try:
        metadata = json.loads((Path(out_dir) / "scene.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(metadata, dict) or metadata.get("generator") != GENERATOR:
        return None
    return metadata


def ensure_scene(
    out_dir: str | Path,
    *,
    size: int = 64,
    n_train: int = 100,
    n_val: int = 8,
    n_test: int = 8,
    seed: int = 0,
    device: str = "cpu",
) -> Path:
    """`out_dir` holding the current scene at these settings, generating it if needed.

    Regenerates when scene.json is absent or differs (older VERSION, other size, counts
    or seed); returns at once when it matches.
    """
    wanted = scene_metadata(size, n_train, n_val, n_test, seed)
    if read_scene_metadata(out_dir) == wanted:
        return Path(out_dir)
    return generate_scene(
        out_dir,
        size=size,
        n_train=n_train,
        n_val=n_val,
        n_test=n_test,
        seed=seed,
        device=device,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m train.nerf_scene",
        description="Render the shipped radiance-field scene into the Blender layout.",
    )
    parser.add_argument("--out", default="data/nerf_scene", help="output directory")
    parser.add_argument("--size", type=int, default=64, help="image width and height (pixels)")
    parser.add_argument("--train", type=int, default=100, help="number of training views")
    parser.add_argument("--val", type=int, default=8, help="number of validation views")
    parser.add_argument("--test", type=int, default=8, help="number of test views (turntable)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the camera placement")
    parser.add_argument("--device", default="cpu", help="torch device to render on")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    try:
        out = generate_scene(
            args.out,
            size=args.size,
            n_train=args.train,
            n_val=args.val,
            n_test=args.test,
            seed=args.seed,
            device=args.device,
        )
    except (ValueError, FileExistsError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    seconds = time.perf_counter() - start
    views = args.train + args.val + args.test
    print(f"wrote {out}: {views} views of {args.size}x{args.size} in {seconds:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
