"""The realistic scene: a radiance field with the difficulties of the original Blender
scenes, and the renderer that makes its images (`train.nerf.scenes.generate --scene realistic`
writes them in the Blender layout).

What is in it (`train.nerf.scenes.realistic_shapes`, `train.nerf.scenes.realistic_look`): a
vase sculpted by domain-warped noise, hollow and open at the top, with a plant of thin stems and
half-voxel leaves; a wheel with sixteen crossed spokes of about half a voxel, a lattice of
thin bars, a mirror sphere, a glass shell with a cube inside, on a wooden base; textures
with detail from half the object down to about two pixels at 400x400 (wood grain, mottled
glaze, a band of glyphs, leaf veins, a fine checker), sharp Blinn-Phong highlights and
mirror reflections of an environment with a sun and windows; the rest of the box empty.
Sizes are in world units; the box is [-1.5, 1.5]^3 and a voxel of a 160^3 grid over it
0.019.

The field: every part has a function `f` that bounds its distance (`f / L` with a
Lipschitz bound L) and a density `sigma_part * smoothstep((WIDTH - f) / (2 WIDTH))`: SIGMA
(opaque within one shell) for the solid parts, GLASS_SIGMA for the glass (an optical depth
of about 0.35 across its wall at normal incidence, more at grazing angles). The colour is
the parts' radiance blended by density where shells overlap.

Rendering (as `train.nerf.scenes.procedural`): each ray jumps through space where the bound says no
density can be (`min over parts of (f - WIDTH) / L`), and inside shells advances by STEP,
taking the midpoint's density and colour (alpha = 1 - exp(-sigma * step)), until the
transmittance is below STOP_TRANSMITTANCE. Each pixel averages SUPERSAMPLE x SUPERSAMPLE
rays on a regular grid inside it, as a path tracer's anti-aliasing does (a ray through the
centre alone would alias the textures and thin parts). Halving STEP changes the images by
far less than a grey level: tests/train/nerf/test_nerf_realistic.py checks it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from . import realistic_look as look
from . import realistic_shapes as shapes
from .procedural import SCENE_BOUNDS, box_interval

__all__ = ["REALISTIC", "SCENE_BOUNDS", "Parts", "render_rays", "scene_field"]

WIDTH = 0.004  # half-width of the density transition at each surface
SIGMA = 2500.0  # density inside the solid parts (optical depth 10 across one WIDTH)
GLASS_SIGMA = 22.0  # density of the glass
STEP = 0.001  # marching step inside shells: WIDTH / 4
STOP_TRANSMITTANCE = 1e-5
SUPERSAMPLE = 2  # rays per pixel along each image axis
NORMAL_EPS = 2e-4  # finite differences of each part's function (normals)
TETRAHEDRON = ((1, -1, -1), (-1, -1, 1), (-1, 1, -1), (1, 1, 1))
COLOUR_CHUNK = 1 << 20  # shell samples coloured together

PART_SIGMA = tuple(GLASS_SIGMA if name == "glass" else SIGMA for name in shapes.PARTS)


@dataclass(frozen=True)
class Parts:
    """A scene of parts, as the renderer sees it (`REALISTIC`; `train.nerf.scenes.scan` another).

    sdfs: points [n, 3] -> (f [n, P], L [n, P]): each part's function and Lipschitz bound;
    exact: (part, points [n, 3]) -> f [n], the function the normals differentiate;
    radiance: (part, points, unit normals, viewdirs: [n, 3] each) -> colour [n, 3] in [0, 1];
    sigma: each part's density inside; normal_eps: each part's finite-difference step.
    """

    sdfs: Callable[[Tensor], tuple[Tensor, Tensor]]
    exact: Callable[[int, Tensor], Tensor]
    radiance: Callable[[int, Tensor, Tensor, Tensor], Tensor]
    sigma: tuple[float, ...]
    normal_eps: tuple[float, ...]


REALISTIC = Parts(
    shapes.part_sdfs, shapes.exact_sdf, look.radiance, PART_SIGMA, (NORMAL_EPS,) * shapes.N_PARTS
)


def _density(f: Tensor, parts: Parts = REALISTIC) -> Tensor:
    """f [n, parts] -> sigma [n, parts]: each part's density, zero where f >= WIDTH."""
    x = ((WIDTH - f) / (2 * WIDTH)).clamp(0.0, 1.0)
    scale = torch.tensor(parts.sigma, dtype=f.dtype, device=f.device)
    return scale * x * x * (3 - 2 * x)


def _normal(part: int, points: Tensor, parts: Parts = REALISTIC) -> Tensor:
    """Unit gradient [n, 3] of part `part`'s function at points [n, 3]: differences over
    the four corners of a tetrahedron, `sum_k k f(p + eps k)` for k in TETRAHEDRON."""
    corners = torch.tensor(TETRAHEDRON, dtype=points.dtype, device=points.device)  # [4, 3]
    shifted = (points[None] + parts.normal_eps[part] * corners[:, None]).reshape(-1, 3)
    f = parts.exact(part, shifted).reshape(4, -1)  # [4, n]
    grad = f.T @ corners  # [n, 3]
    return grad / grad.norm(dim=-1, keepdim=True).clamp_min(1e-12)


def _colour(points: Tensor, sigmas: Tensor, viewdirs: Tensor, parts: Parts = REALISTIC) -> Tensor:
    """The parts' radiance at points [n, 3] seen along viewdirs [n, 3], blended by their
    densities sigmas [n, parts] -> [n, 3] (0 where no part has density)."""
    rgb = torch.zeros_like(points)
    for part in range(len(parts.sigma)):
        ids = torch.nonzero(sigmas[:, part] > 0).squeeze(-1)
        if ids.numel():
            p = points[ids]
            colour = parts.radiance(part, p, _normal(part, p, parts), viewdirs[ids])
            rgb.index_add_(0, ids, sigmas[ids, part, None] * colour)
    return rgb / sigmas.sum(-1, keepdim=True).clamp_min(1e-30)


def scene_field(
    points: Tensor, viewdirs: Tensor, parts: Parts = REALISTIC
) -> tuple[Tensor, Tensor]:
    """The analytic radiance field: the truth the images are rendered from.

    points: [..., 3] world; viewdirs: [..., 3] unit directions of travel (camera to point).
    Returns sigma [...] (>= 0, per world unit) and rgb [..., 3] in [0, 1] (0 where sigma = 0).
    """
    shape = points.shape[:-1]
    p, d = points.reshape(-1, 3), viewdirs.reshape(-1, 3)
    sigmas = _density(parts.sdfs(p)[0], parts)
    return sigmas.sum(-1).reshape(shape), _colour(p, sigmas, d, parts).reshape(*shape, 3)


def render_rays(
    origins: Tensor, directions: Tensor, *, step: float = STEP, parts: Parts = REALISTIC
) -> tuple[Tensor, Tensor]:
    """Volume-renders rays [N, 3] (unit directions) through the scene.

    Returns (rgb [N, 3] premultiplied by alpha, alpha [N] = 1 - transmittance). Inside
    shells the ray advances by `step` and takes the midpoint's sigma and colour; elsewhere
    it jumps over space the parts' bounds prove empty. The march keeps each shell sample's
    weight (transmittance x alpha); the colours are computed after it, all at once.
    """
    n = origins.shape[0]
    transmittance = torch.ones(n, device=origins.device, dtype=origins.dtype)
    t, t_far = box_interval(origins, directions)
    ids = torch.nonzero(t < t_far).squeeze(-1)
    o, d, t, t_far = origins[ids], directions[ids], t[ids], t_far[ids]
    trans = torch.ones(ids.numel(), device=origins.device, dtype=origins.dtype)
    samples: list[tuple[Tensor, Tensor, Tensor, Tensor]] = []  # ray, weight, point, sigmas
    half = 0.5 * step
    while ids.numel():
        points = o + (t + half)[:, None] * d  # the midpoints of [t, t + step]
        f, lip = parts.sdfs(points)
        clear = ((f - WIDTH) / lip).amin(-1)  # no density within this of the midpoint
        empty = clear > half
        t = torch.where(empty, t + half + clear, t + step)
        shell = torch.nonzero((~empty) & (f.amin(-1) < WIDTH)).squeeze(-1)
        if shell.numel():
            sigmas = _density(f[shell], parts)  # [S, parts]
            alpha = 1.0 - torch.exp(-sigmas.sum(-1) * step)
            samples.append((ids[shell], trans[shell] * alpha, points[shell], sigmas))
            trans[shell] = trans[shell] * (1.0 - alpha)
        done = (t >= t_far) | (trans < STOP_TRANSMITTANCE)
        if done.any():
            transmittance[ids[done]] = trans[done]
            keep = ~done
            ids, o, d, t, t_far, trans = (
                ids[keep],
                o[keep],
                d[keep],
                t[keep],
                t_far[keep],
                trans[keep],
            )
    rgb = torch.zeros(n, 3, device=origins.device, dtype=origins.dtype)
    if samples:
        ray, weight, points, sigmas = (torch.cat(x) for x in zip(*samples, strict=True))
        for start in range(0, len(ray), COLOUR_CHUNK):
            part = slice(start, start + COLOUR_CHUNK)
            colour = _colour(points[part], sigmas[part], directions[ray[part]], parts)
            rgb.index_add_(0, ray[part], weight[part, None] * colour)
    return rgb, 1.0 - transmittance
