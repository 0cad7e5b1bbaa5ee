"""The workloads of bench/ops/bench_ops.py: their IDs, full and quick sizes, seeds, and the
inputs they draw (uniform points, rays, the voxels the points touch, the F.grid_sample
baseline's call). The probes in bench/probes/ draw the same inputs from here."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from grid import reference

WORKLOADS = (
    "P1",
    "P2",
    "S1",
    "S2",
    "S3",
    "S4",
    "S5",
    "T1",
    "C1",
    "O1",
    "V1",
    "D1",
    "E1",
    "L1",
    "U1",
)

# name -> sizes; "rays" = (rays, samples per ray), "n" = uniform points.
FULL = {
    "P1": {"n": 65536, "f": 256},
    "P2": {"n": 2**20, "f": 16},
    "S1": {"r": 128, "f": 16, "rays": (4096, 256)},
    "S2": {"r": 128, "f": 16, "n": 2**20},
    "S3": {"r": 256, "f": 32, "rays": (4096, 256)},
    "S4": {"r": 128, "f": 16, "rays": (4096, 256)},
    "S5": {"r": 160, "rays": (8192, 192)},
    "T1": {"r": 128, "f": 16, "n": 2**20},
    "C1": {"r": 128, "f": 16, "n": 2**18},
    "O1": {"r": 4, "f": 8, "n": 16, "calls": 2000},
    "V1": {"r": 256, "f": 16},
    "D1": {
        "S1": {"r": 128, "f": 16, "rays": (4096, 256)},
        "S2": {"r": 128, "f": 16, "n": 2**20},
        "S5": {"r": 160, "rays": (8192, 192)},
    },
    "E1": {"r": 128, "n": 2**18},
    "L1": {"density_256": {"r": 256, "n": 2**20}, "default": {"r": 96, "n": 65536}},
    "U1": {"r": 160, "f": 12, "fractions": (0.05, 0.5, 1.0)},
}
QUICK = {
    "P1": {"n": 16384, "f": 64},
    "P2": {"n": 2**17, "f": 16},
    "S1": {"r": 64, "f": 16, "rays": (512, 128)},
    "S2": {"r": 64, "f": 16, "n": 2**16},
    "S3": {"r": 96, "f": 32, "rays": (512, 128)},
    "S4": {"r": 64, "f": 16, "rays": (512, 128)},
    "S5": {"r": 48, "rays": (256, 64)},
    "T1": {"r": 64, "f": 16, "n": 2**16},
    "C1": {"r": 64, "f": 16, "n": 2**16},
    "O1": {"r": 4, "f": 8, "n": 16, "calls": 500},
    "V1": {"r": 64, "f": 16},
    "D1": {
        "S1": {"r": 64, "f": 16, "rays": (512, 128)},
        "S2": {"r": 64, "f": 16, "n": 2**16},
        "S5": {"r": 48, "rays": (256, 64)},
    },
    "E1": {"r": 32, "n": 2**12},
    "L1": {"density_256": {"r": 32, "n": 2**13}, "default": {"r": 24, "n": 2**12}},
    "U1": {"r": 48, "f": 12, "fractions": (0.05, 0.5, 1.0)},
}


def seed_of(workload: str, base: int = 0) -> int:
    """The seed a workload draws its inputs with: `base` (--seed) + 1000 x its place in
    WORKLOADS (not its place in --only); S4 draws S1's inputs."""
    return base + 1000 * WORKLOADS.index("S1" if workload == "S4" else workload)


# ---- inputs -----------------------------------------------------------------------


def generator(device: torch.device, seed: int) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


def uniform_points(n: int, device, gen) -> torch.Tensor:
    """[n, 3] uniform in [-1, 1]^3."""
    return torch.rand(n, 3, device=device, generator=gen) * 2 - 1


def ray_points(n_rays: int, n_samples: int, device, gen) -> torch.Tensor:
    """[n_rays, n_samples, 3]: origins on spheres of radius 1.5-2 around the cube, each ray
    aimed at a random point of the cube, samples evenly spaced on its segment inside the
    cube, ordered ray by ray (like a NeRF batch)."""
    direction = torch.randn(n_rays, 3, device=device, generator=gen)
    radius = 1.5 + 0.5 * torch.rand(n_rays, 1, device=device, generator=gen)
    origin = direction / direction.norm(dim=1, keepdim=True) * radius
    aim = torch.rand(n_rays, 3, device=device, generator=gen) * 2 - 1
    d = aim - origin
    d = d / d.norm(dim=1, keepdim=True)
    t_a, t_b = (-1 - origin) / d, (1 - origin) / d  # slab test against [-1, 1]^3
    t_near = torch.minimum(t_a, t_b).amax(dim=1, keepdim=True)
    t_far = torch.maximum(t_a, t_b).amin(dim=1, keepdim=True)
    steps = (torch.arange(n_samples, device=device) + 0.5) / n_samples
    t = t_near + (t_far - t_near) * steps  # [n_rays, n_samples]
    points = origin[:, None, :] + t[..., None] * d[:, None, :]
    return points.clamp(-1, 1).contiguous()


def make_points(size: dict, device, gen) -> torch.Tensor:
    if "rays" in size:
        return ray_points(*size["rays"], device, gen)
    return uniform_points(size["n"], device, gen)


def touched_voxels(points: torch.Tensor, r: int) -> int:
    """Distinct in-range voxels among the eight corners of every point's cell
    (align_corners=True): the least grid data any kernel must read."""
    index = (points.reshape(-1, 3).float() + 1) / 2 * (r - 1)
    base = index.floor().long()
    seen = torch.zeros(r**3, dtype=torch.bool, device=points.device)
    for k in range(8):
        c = base + torch.tensor(reference.CORNER_OFFSETS[k], device=points.device)
        valid = ((c >= 0) & (c < r)).all(dim=1)
        c = c[valid]
        seen[(c[:, 0] * r + c[:, 1]) * r + c[:, 2]] = True
    return int(seen.sum())


def grid_sample(cf: torch.Tensor, points5: torch.Tensor) -> torch.Tensor:
    """The baseline: channels-first [1, F, Z, Y, X], points [1, 1, 1, N, 3] -> [1, F, 1, 1, N]."""
    return F.grid_sample(cf, points5, mode="bilinear", padding_mode="zeros", align_corners=True)
