"""A quick textured scene for pose estimation: a few shapes a ray hits analytically,
painted with a random 3D colour texture, rendered in a fraction of a second per view.

Why not the realistic scene itself: its renderer marches each ray through density shells
(seconds per 200x200 view on a CPU), and at 200x200 its object covers a third of the image
with little detail SIFT can lock on to (about 150 features a view; between views 30 degrees
apart at most ~25 verified matches, too few for COLMAP to start). The pose tests need dozens
of views in seconds with texture at every scale, as a photo of a textured object has:

- a disc of radius 1.4 on z = 0 (both faces painted);
- a sphere of radius 0.5 at (0, 0, 0.5);
- a box, half-size 0.25, at (0.65, -0.55, 0.25).

The paint: two random colour grids over [-1.5, 1.5]^3 (16^3 and 64^3 cells, seeded)
sampled trilinearly (`grid.sample`) at the hit point and averaged: blobs of about 13 and
3 pixels at 200x200, the scales SIFT finds.

Shading is Lambert from one light plus ambient (view-independent, no shadows); the
background is white; each pixel averages 2x2 rays. `capture_poses` places cameras on a
Fibonacci spiral over a band of elevations (20 to 65 degrees: from 10 degrees, where the
disc is seen edge-on, COLMAP registered 28 of 32 views), looking at the origin (z up, as
`train.nerf.scenes.generate`).
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from torch import Tensor

import grid

from ..data.blender import Views, camera_rays
from ..data.cameras import CAMERA_ANGLE_X, look_at_origin

DISC_RADIUS = 1.4
SPHERE = ((0.0, 0.0, 0.5), 0.5)
BOX = ((0.65, -0.55, 0.25), 0.25)
SUPERSAMPLE = 2
LIGHT = (0.45, -0.35, 0.82)
AMBIENT, DIFFUSE = 0.38, 0.72
PAINT = (16, 64)  # cells per side of the colour grids
SEED = 7


def capture_poses(
    n: int, *, radius: float = 4.0, elevations: tuple[float, float] = (20.0, 65.0)
) -> Tensor:
    """c2w [n, 4, 4] float64 (OpenGL axes) on a Fibonacci spiral between `elevations`
    (degrees) at `radius`, looking at the origin."""
    lo, hi = (math.sin(math.radians(e)) for e in elevations)
    i = torch.arange(n, dtype=torch.float64)
    elevation = torch.asin(hi - (hi - lo) * (i + 0.5) / n)
    azimuth = math.pi * (3.0 - math.sqrt(5.0)) * i
    position = radius * torch.stack(
        [
            torch.cos(elevation) * torch.cos(azimuth),
            torch.cos(elevation) * torch.sin(azimuth),
            torch.sin(elevation),
        ],
        dim=-1,
    )
    return look_at_origin(position)


def surface_hits(origins: Tensor, directions: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Nearest hit of rays [N, 3]: (t [N], inf on a miss; shape index [N]: 0 disc,
    1 sphere, 2 box; normal [N, 3])."""
    n = origins.shape[0]
    inf = torch.full((n,), math.inf, dtype=origins.dtype)
    # the disc z = 0
    t_disc = -origins[:, 2] / directions[:, 2]
    p = origins + t_disc[:, None] * directions
    t_disc = torch.where((t_disc > 0) & (p[:, :2].norm(dim=-1) < DISC_RADIUS), t_disc, inf)
    # the sphere
    centre = torch.tensor(SPHERE[0], dtype=origins.dtype)
    oc = origins - centre
    b = (oc * directions).sum(-1)
    disc = b * b - (oc * oc).sum(-1) + SPHERE[1] ** 2
    t_sphere = -b - disc.clamp_min(0).sqrt()
    t_sphere = torch.where((disc > 0) & (t_sphere > 0), t_sphere, inf)
    # the box: slabs
    lo = torch.tensor(BOX[0], dtype=origins.dtype) - BOX[1]
    hi = torch.tensor(BOX[0], dtype=origins.dtype) + BOX[1]
    t0, t1 = (lo - origins) / directions, (hi - origins) / directions
    t_near = torch.minimum(t0, t1).amax(-1)
    t_far = torch.maximum(t0, t1).amin(-1)
    t_box = torch.where((t_near < t_far) & (t_near > 0), t_near, inf)
    t, shape = torch.stack([t_disc, t_sphere, t_box], dim=-1).min(-1)
    p = origins + t.clamp(max=1e3)[:, None] * directions
    normal = torch.zeros_like(p)
    normal[:, 2] = torch.where(directions[:, 2] < 0, 1.0, -1.0)  # the disc's face seen
    on_sphere = shape == 1
    normal[on_sphere] = (p[on_sphere] - centre) / SPHERE[1]
    on_box = shape == 2
    q = (p[on_box] - torch.tensor(BOX[0], dtype=p.dtype)) / BOX[1]  # [-1, 1] on the faces
    axis = q.abs().argmax(-1)
    box_normal = torch.zeros_like(q)
    box_normal[torch.arange(len(q)), axis] = q[torch.arange(len(q)), axis].sign()
    normal[on_box] = box_normal
    return t, shape, normal


def render_rays(origins: Tensor, directions: Tensor) -> Tensor:
    """Colours [N, 3] in [0, 1] of rays [N, 3] (unit directions); white where they miss."""
    t, shape, normal = surface_hits(origins, directions)
    p = origins + t.clamp(max=1e3)[:, None] * directions
    rgb = torch.ones_like(p)
    light = torch.tensor(LIGHT, dtype=p.dtype) / torch.tensor(LIGHT).norm()
    shade = AMBIENT + DIFFUSE * (normal @ light).clamp_min(0)
    hit = torch.isfinite(t)
    rgb[hit] = paint(p[hit]) * shade[hit, None]
    return rgb.clamp(0.0, 1.0)


def paint(points: Tensor, seed: int = SEED) -> Tensor:
    """Albedo [N, 3] in [0.1, 0.9] at world points [N, 3]; `seed` draws the colour grids."""
    gen = torch.Generator().manual_seed(seed)
    normalised = (points / 1.5).float()
    albedo = 0
    for cells in PAINT:
        colours = torch.rand(cells, cells, cells, 3, generator=gen)  # [X, Y, Z, 3]
        albedo = albedo + grid.sample(colours, normalised, padding="border")
    return 0.1 + 0.8 * albedo / len(PAINT)


def render_views(c2w: Tensor, size: int, supersample: int = SUPERSAMPLE) -> Tensor:
    """c2w [V, 4, 4] -> RGB [V, size, size, 3] float32 in [0, 1], the field of view of
    `train.nerf.scenes.generate` (CAMERA_ANGLE_X), supersample^2 rays per pixel."""
    fine = size * supersample
    focal = 0.5 * fine / math.tan(0.5 * CAMERA_ANGLE_X)
    out = []
    threads = torch.get_num_threads()
    # One thread: these are small element-wise ops, and on a busy machine torch's threads
    # wait on each other (measured: 0.04 s a view on one thread, 0.9 s on two)
    torch.set_num_threads(1)
    try:
        for pose in c2w.to(torch.float32):
            views = Views(torch.empty(0), pose[None], focal, fine, fine, [""])
            origins, directions = (x.reshape(-1, 3) for x in camera_rays(views))
            rgb = render_rays(origins, directions)
            out.append(rgb.reshape(size, supersample, size, supersample, 3).mean(dim=(1, 3)))
    finally:
        torch.set_num_threads(threads)
    return torch.stack(out)


def write_views(c2w: Tensor, size: int, out_dir: Path) -> list[Path]:
    """Renders c2w [V, 4, 4] into `out_dir/view_{k:03d}.png` (RGB) and returns the files."""
    from PIL import Image  # Pillow comes with matplotlib (the `train` extra)

    out_dir.mkdir(parents=True, exist_ok=True)
    files = []
    for k, rgb in enumerate(render_views(c2w, size)):
        files.append(out_dir / f"view_{k:03d}.png")
        Image.fromarray((rgb.numpy() * 255 + 0.5).astype("uint8")).save(files[-1])
    return files


def focal_length(size: int) -> float:
    """The views' focal length in pixels at `size` x `size`."""
    return 0.5 * size / math.tan(0.5 * CAMERA_ANGLE_X)
