"""Pure-PyTorch reference implementations: the executable specification.

Every native kernel is tested against these. They favour being obviously right
over being fast: `sample` builds the `[N, 8, F]` corner tensor that the native
kernel never materialises, and the rendering references (`ray_aabb`, `march_rays`,
`occupancy_query`, `composite_weights`, `accumulate_along_rays`) walk one ray, sample or
point at a time where the packed versions in `grid.rays` and `grid.volrend` work on
whole lists.

Examples:
    >>> import torch
    >>> import grid
    >>> features = torch.linspace(-1, 1, 6**3 * 4, dtype=torch.float64).reshape(6, 6, 6, 4)
    >>> points = torch.linspace(-1.2, 1.2, 300, dtype=torch.float64).reshape(100, 3)  # [N, 3]
    >>> expected = grid.reference.sample(features, points)  # builds the [N, 8, F] corners
    >>> expected.shape, torch.allclose(grid.sample(features, points), expected)
    (torch.Size([100, 4]), True)
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

# Corner k sits at offset (dx, dy, dz) = ((k >> 2) & 1, (k >> 1) & 1, k & 1).
CORNER_OFFSETS = [((k >> 2) & 1, (k >> 1) & 1, k & 1) for k in range(8)]


def _corner_weights(frac: Tensor) -> Tensor:
    """frac: [N, 3] position in the cell in [0, 1] -> [N, 8] trilinear weights."""
    w = []
    for dx, dy, dz in CORNER_OFFSETS:
        wx = frac[:, 0] if dx else 1 - frac[:, 0]
        wy = frac[:, 1] if dy else 1 - frac[:, 1]
        wz = frac[:, 2] if dz else 1 - frac[:, 2]
        w.append(wx * wy * wz)
    return torch.stack(w, dim=1)


def trilinear(corners: Tensor, local: Tensor) -> Tensor:
    """corners: [N, 8, F], local: [N, 3] in [-1, 1] -> [N, F].

    `local = -1` is the `d = 0` face of the cell and `+1` the `d = 1` face.
    """
    weights = _corner_weights((local + 1) / 2)  # [N, 8]
    return (weights.unsqueeze(-1).to(corners.dtype) * corners).sum(dim=1)


def _unnormalize(coord: Tensor, size: int, align_corners: bool) -> Tensor:
    """Normalised [-1, 1] coordinate -> continuous voxel index (F.grid_sample's rule)."""
    if align_corners:
        return (coord + 1) / 2 * (size - 1)
    return ((coord + 1) * size - 1) / 2


def smoothstep(t: Tensor) -> Tensor:
    """s(t) = t^2 (3 - 2t): 0 and 1 at the ends with zero slope there, so a blend by s is C1."""
    return t * t * (3 - 2 * t)


def sample(
    features: Tensor,
    points: Tensor,
    align_corners: bool = True,
    padding: str = "zeros",
    interpolation: str = "linear",
    bounds: Sequence[Sequence[float]] | None = None,
) -> Tensor:
    """features: [X, Y, Z, F], points: [..., 3] -> [..., F].

    bounds: None, or the world box ((xmin, ymin, zmin), (xmax, ymax, zmax)) that maps onto
    [-1, 1]: the points are then world coordinates, `(points - min) * 2 / (max - min) - 1`
    the normalised ones.

    With interpolation="linear", the semantics of `F.grid_sample(mode="bilinear")` on
    `features.permute(3, 2, 1, 0)[None]`, written as an explicit gather. With
    "smoothstep", the same eight corners weighted by `smoothstep(t)` instead of the
    position `t` in the cell along each axis. Differentiable twice through autograd.

    Non-finite and far coordinates: with `padding="zeros"` a point outside the
    sampled region (or with a NaN coordinate) gives zeros and no gradient; with
    `padding="border"` coordinates are clamped to the grid, NaN clamping to the
    low border (index 0), and clamped axes get no gradient.
    """
    if padding not in ("zeros", "border"):
        raise ValueError(f"padding: expected 'zeros' or 'border', got {padding!r}")
    if interpolation not in ("linear", "smoothstep"):
        raise ValueError(f"interpolation: expected 'linear' or 'smoothstep', got {interpolation!r}")
    sizes = features.shape[:3]
    batch = points.shape[:-1]
    pts = points.reshape(-1, 3)
    acc = torch.float64 if torch.float64 in (features.dtype, points.dtype) else torch.float32
    pts = pts.to(acc)
    if bounds is not None:
        lo, hi = torch.tensor(bounds, dtype=acc, device=pts.device)
        pts = (pts - lo) * (2 / (hi - lo)) - 1

    index = torch.stack(
        [_unnormalize(pts[:, a], sizes[a], align_corners) for a in range(3)], dim=1
    )  # [N, 3]
    if padding == "border":
        upper = torch.tensor([s - 1 for s in sizes], dtype=acc, device=pts.device)
        # nan_to_num sends NaN to the low border; clamp(min, max) keeps the gradient
        # only strictly inside, like F.grid_sample's clip_coordinates.
        index = torch.where(index.isnan(), torch.zeros_like(index), index)
        inside = (index > 0) & (index < upper)
        index = torch.where(inside, index, index.detach().clamp(min=0).minimum(upper))
        keep = torch.ones(pts.shape[0], dtype=torch.bool, device=pts.device)
    else:
        upper = torch.tensor(sizes, dtype=acc, device=pts.device)
        keep = ((index >= -1) & (index <= upper)).all(dim=1)  # NaN compares False
        index = torch.where(keep[:, None], index, torch.zeros_like(index))

    base = index.detach().floor()
    frac = index - base
    if interpolation == "smoothstep":
        frac = smoothstep(frac)
    base = base.long()
    weights = _corner_weights(frac) * keep[:, None]  # [N, 8]

    values = []
    for k, (dx, dy, dz) in enumerate(CORNER_OFFSETS):
        ix, iy, iz = base[:, 0] + dx, base[:, 1] + dy, base[:, 2] + dz
        valid = (
            (ix >= 0) & (ix < sizes[0]) & (iy >= 0) & (iy < sizes[1]) & (iz >= 0) & (iz < sizes[2])
        )
        gathered = features[
            ix.clamp(0, sizes[0] - 1), iy.clamp(0, sizes[1] - 1), iz.clamp(0, sizes[2] - 1)
        ]  # [N, F]
        values.append(torch.where(valid[:, None], gathered, torch.zeros_like(gathered)))
        weights[:, k] = weights[:, k] * valid
    corners = torch.stack(values, dim=1)  # [N, 8, F]
    out = (weights.unsqueeze(-1) * corners.to(acc)).sum(dim=1)
    return out.to(features.dtype).reshape(*batch, features.shape[3])


def total_variation(features: Tensor) -> Tensor:
    """features: [X, Y, Z, F] -> []: the mean over the three axes of the mean squared
    difference between neighbouring voxels along that axis, in float32 (float64 for
    float64 features)."""
    f = features.to(torch.float64 if features.dtype == torch.float64 else torch.float32)
    dx = (f[1:] - f[:-1]).square().mean()
    dy = (f[:, 1:] - f[:, :-1]).square().mean()
    dz = (f[:, :, 1:] - f[:, :, :-1]).square().mean()
    return (dx + dy + dz) / 3


def masked_adam_(
    param: Tensor,
    exp_avg: Tensor,
    exp_avg_sq: Tensor,
    grad: Tensor,
    *,
    lr: float,
    beta1: float,
    beta2: float,
    eps: float,
    weight_decay: float = 0.0,
    decoupled_weight_decay: bool = False,
    step: int,
) -> None:
    """One Adam step, in place, on the elements whose `grad` is non-zero (all four tensors
    alike in shape and dtype): torch.optim.Adam's update with the bias corrections of the
    global `step`, computed in float32 (float64 for float64 tensors) and rounded once. The
    elements whose gradient is zero (+0 or -0) keep param, exp_avg and exp_avg_sq."""
    acc = torch.float64 if param.dtype == torch.float64 else torch.float32
    g, p, m, v = (t.to(acc) for t in (grad, param, exp_avg, exp_avg_sq))
    if weight_decay and decoupled_weight_decay:
        p = p * (1 - lr * weight_decay)
    elif weight_decay:
        g = g + weight_decay * p
    m = torch.lerp(m, g, 1 - beta1)
    v = v * beta2 + (1 - beta2) * g * g
    denom = v.sqrt() / (1 - beta2**step) ** 0.5 + eps
    p = p - lr / (1 - beta1**step) * m / denom
    update = grad != 0
    for old, new in ((param, p), (exp_avg, m), (exp_avg_sq, v)):
        old.copy_(torch.where(update, new.to(old.dtype), old))


# ---- rendering: per-ray loops over the packed functions of grid.rays and grid.volrend ----


def ray_aabb(
    origins: Tensor, directions: Tensor, lo: Tensor, hi: Tensor, near: float = 0.0
) -> tuple[Tensor, Tensor]:
    """origins, directions: [R, 3]; lo, hi: [3] -> t_near, t_far: [R], one ray at a time.

    Per axis the ray is between the two planes for t between (lo - o) / d and (hi - o) / d
    (written `* (1 / d)`, as the packed version computes it; a zero d stands in as 1e-10);
    inside the box is the intersection of the three intervals, cut at `near`.
    """
    dtype = torch.promote_types(origins.dtype, lo.dtype)
    t_near, t_far = [], []
    for o, d in zip(origins, directions, strict=True):
        entries, exits = [], []
        for a in range(3):
            inv = 1.0 / (d[a] if d[a] != 0 else d.new_tensor(1e-10))
            t0, t1 = (lo[a] - o[a]) * inv, (hi[a] - o[a]) * inv
            entries.append(torch.minimum(t0, t1))
            exits.append(torch.maximum(t0, t1))
        t_near.append(torch.stack(entries).max().clamp_min(near))
        t_far.append(torch.stack(exits).min())
    if not t_near:
        return origins.new_zeros(0, dtype=dtype), origins.new_zeros(0, dtype=dtype)
    return torch.stack(t_near), torch.stack(t_far)


def occupancy_query(flags: Tensor, bounds: Tensor, points: Tensor) -> Tensor:
    """flags: [X, Y, Z] bool; bounds: [2, 3]; points: [P, 3] -> [P] bool, one point at a time:
    the flag of the voxel whose index is the point's continuous index rounded (half to
    even), clamped to the grid."""
    lo, hi = bounds
    out = []
    for p in points:
        index = []
        for a in range(3):
            last = flags.shape[a] - 1
            i = int(((p[a] - lo[a]) / (hi[a] - lo[a]) * last).round())
            index.append(min(max(i, 0), last))
        out.append(bool(flags[tuple(index)]))
    return torch.tensor(out, dtype=torch.bool)


def march_rays(
    origins: Tensor,
    directions: Tensor,
    lo: Tensor,
    hi: Tensor,
    step: float,
    near: float = 0.0,
    flags: Tensor | None = None,
    flag_bounds: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """-> ray_indices [S] int64, t [S], points [S, 3]: for each ray in turn, its
    ceil((t_far - t_near) / step) step centres t_near + (j + 0.5) * step, dropping those
    whose nearest voxel in `flags` (over the box `flag_bounds` [2, 3]) is False. A ray
    with a zero direction or a non-finite span gets none."""
    t_near, t_far = ray_aabb(origins, directions, lo, hi, near)
    rays, ts, points = [], [], []
    for r in range(origins.shape[0]):
        n = ((t_far[r] - t_near[r]) / step).ceil()
        n = int(n) if n.isfinite() and n > 0 and directions[r].any() else 0
        for j in range(n):
            t = t_near[r] + (torch.tensor(float(j), dtype=t_near.dtype) + 0.5) * step
            p = origins[r] + directions[r] * t
            if flags is not None and not occupancy_query(flags, flag_bounds, p[None])[0]:
                continue
            rays.append(r)
            ts.append(t)
            points.append(p)
    if not rays:
        return (
            torch.zeros(0, dtype=torch.int64),
            t_near.new_zeros(0),
            origins.new_zeros(0, 3),
        )
    return torch.tensor(rays), torch.stack(ts), torch.stack(points)


def composite_weights(alpha: Tensor, ray_indices: Tensor, n_rays: int) -> Tensor:
    """alpha: [S]; ray_indices: [S] -> weights [S]: walking the samples in order, each
    gets alpha times its ray's transmittance so far (a float64 product of 1 - alpha)."""
    transmittance = [1.0] * n_rays
    out = []
    for a, r in zip(alpha.tolist(), ray_indices.tolist(), strict=True):
        out.append(a * transmittance[r])
        transmittance[r] *= 1.0 - a
    return torch.tensor(out, dtype=torch.float64).to(alpha.dtype)


def accumulate_along_rays(
    weights: Tensor, values: Tensor | None, ray_indices: Tensor, n_rays: int
) -> Tensor:
    """weights: [S]; values: [S, C], [S] or None; ray_indices: [S] -> [R, C] or [R]:
    each ray's sum of weight * value (or of the weights), in float64."""
    w = weights.double()
    v = torch.ones_like(w) if values is None else values.double()
    out = torch.zeros((n_rays, *v.shape[1:]), dtype=torch.float64)
    for i, r in enumerate(ray_indices.tolist()):
        out[r] += w[i] * v[i]
    dtype = weights.dtype if values is None else torch.promote_types(weights.dtype, values.dtype)
    return out.to(dtype)


def march_rays_static(
    origins: Tensor,
    directions: Tensor,
    lo: Tensor,
    hi: Tensor,
    step: Tensor,
    jitter: Tensor,
    near: float,
    max_steps: int,
    flags: Tensor | None = None,
    flag_bounds: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """-> ray_indices [S] int64, t [S], points [S, 3], counts [R] int64: for each ray in
    turn (step [R] and jitter [R] in the rays' dtype), its min(ceil((t_far - t_near) /
    step), max_steps) positions t_near + (j + jitter) * step, keeping those whose nearest
    voxel in `flags` is set. No samples for a non-finite or all-zero ray or a step that is
    not a positive finite number. Written with the same rounded operations as the kernels,
    so the samples are bitwise equal."""
    t_near, t_far = ray_aabb(origins, directions, lo, hi, near)
    rays, ts, points, counts = [], [], [], []
    for r in range(origins.shape[0]):
        o, d, s = origins[r], directions[r], step[r]
        usable = bool(o.isfinite().all() and d.isfinite().all() and d.any())
        usable = usable and bool(s.isfinite() and s > 0)
        n = ((t_far[r] - t_near[r]) / s).ceil() if usable else t_near.new_tensor(0.0)
        n = min(int(n), max_steps) if n.isfinite() and n > 0 else 0
        kept = 0
        for j in range(n):
            t = t_near[r] + (t_near.new_tensor(float(j)) + jitter[r]) * s
            p = o + d * t
            if flags is not None and not occupancy_query(flags, flag_bounds, p[None])[0]:
                continue
            rays.append(r)
            ts.append(t)
            points.append(p)
            kept += 1
        counts.append(kept)
    counts = torch.tensor(counts, dtype=torch.int64)
    if not rays:
        return (
            torch.zeros(0, dtype=torch.int64),
            t_near.new_zeros(0),
            origins.new_zeros(0, 3),
            counts,
        )
    return torch.tensor(rays), torch.stack(ts), torch.stack(points), counts


def composite_rays(
    tau: Tensor, colors: Tensor, t: Tensor, offsets: Tensor, background: Tensor | None = None
) -> tuple[Tensor, Tensor, Tensor]:
    """tau [S], colors [S, C], t [S], offsets [R + 1], background [C] / [R, C] / None ->
    rgb [R, C], depth [R], acc [R]: for each ray, its samples front to back, each with
    weight (1 - exp(-tau)) times the product of exp(-tau) over the samples in front.
    Differentiable through autograd (a loop of small ops)."""
    n_rays, channels = offsets.shape[0] - 1, colors.shape[1]
    rgbs, depths, accs = [], [], []
    for r in range(n_rays):
        begin, end = int(offsets[r]), int(offsets[r + 1])
        transmittance = tau.new_ones(())
        rgb, depth, acc = tau.new_zeros(channels), tau.new_zeros(()), tau.new_zeros(())
        for i in range(begin, end):
            w = (1 - torch.exp(-tau[i])) * transmittance
            rgb = rgb + w * colors[i]
            depth = depth + w * t[i]
            acc = acc + w
            transmittance = transmittance * torch.exp(-tau[i])
        if background is not None:
            rgb = rgb + (1 - acc) * (background if background.dim() == 1 else background[r])
        rgbs.append(rgb)
        depths.append(depth)
        accs.append(acc)
    if n_rays == 0:
        return tau.new_zeros(0, channels), tau.new_zeros(0), tau.new_zeros(0)
    return torch.stack(rgbs), torch.stack(depths), torch.stack(accs)


def ray_weights(tau: Tensor, offsets: Tensor) -> Tensor:
    """tau [S], offsets [R + 1] -> weights [S] (0 outside every ray), a float64 product."""
    out = [0.0] * tau.shape[0]
    x = tau.double().tolist()
    for r in range(offsets.shape[0] - 1):
        transmittance = 1.0
        for i in range(int(offsets[r]), int(offsets[r + 1])):
            out[i] = -math.expm1(-x[i]) * transmittance
            transmittance *= math.exp(-x[i])
    return torch.tensor(out, dtype=torch.float64).to(tau.dtype)


# ---- multiresolution encoding --------------------------------------------------------

# instant-ngp's spatial hash: one prime per axis (1 for x), XOR-ed in uint32 arithmetic.
HASH_PRIMES = (1, 2654435761, 805459861)


def multires_level_is_dense(resolution: int, table_size: int) -> bool:
    """A level of `resolution` cells per axis has (resolution + 1)^3 vertices: stored densely
    when they fit the table's `table_size` rows, else hashed into them."""
    return (resolution + 1) ** 3 <= table_size


def multires_index(corner: Tensor, resolution: int, table_size: int) -> Tensor:
    """corner: [..., 3] integer vertex (x, y, z) in [0, resolution] -> [...] table row.

    Dense: x + y (R + 1) + z (R + 1)^2. Hashed: (x * 1 ^ y * 2654435761 ^ z * 805459861)
    in uint32 arithmetic, mod `table_size`."""
    if multires_level_is_dense(resolution, table_size):
        side = resolution + 1
        return corner[..., 0] + corner[..., 1] * side + corner[..., 2] * side * side
    mask = 0xFFFFFFFF  # int64 products of coordinates < 2^25 and primes < 2^32 do not overflow
    x, y, z = ((corner[..., a] * HASH_PRIMES[a]) & mask for a in range(3))
    return (x ^ y ^ z) % table_size


def multires(table: Tensor, points: Tensor, resolutions: Sequence[int]) -> Tensor:
    """table: [L, T, F], points: [..., 3] in [-1, 1] -> [..., L * F] (level-major: level l
    is columns l F .. l F + F - 1).

    Level l is a grid of `resolutions[l]` = R cells per axis, with (R + 1)^3 vertices whose
    features are table rows `multires_index(vertex, R, T)` of `table[l]`. A point maps to
    `(p + 1) / 2 * R` (align_corners: p = -1 and 1 are the first and last vertices) and is
    blended trilinearly from its cell's eight vertices. Coordinates are clamped to [-1, 1]
    first (no gradient outside, as torch.clamp). Computed in float32 (float64 when table or
    points are), returned in the table's dtype. Differentiable twice through autograd.
    """
    L, T, F = table.shape
    if len(resolutions) != L:
        raise ValueError(f"resolutions: expected {L} levels like table, got {len(resolutions)}")
    acc = torch.float64 if torch.float64 in (table.dtype, points.dtype) else torch.float32
    unit = (points.reshape(-1, 3).to(acc).clamp(-1, 1) + 1) / 2  # [N, 3] in [0, 1]
    levels = []
    for level, R in enumerate(resolutions):
        pos = unit * R
        low = pos.detach().floor().clamp(max=R - 1)  # p = 1 sits in the last cell, t = 1
        weights = _corner_weights(pos - low)  # [N, 8]
        corners = low.long()[:, None, :] + torch.tensor(CORNER_OFFSETS, device=low.device)
        rows = table[level][multires_index(corners, R, T)]  # [N, 8, F]
        levels.append((weights.unsqueeze(-1) * rows.to(acc)).sum(dim=1))
    out = torch.cat(levels, dim=1) if levels else unit.new_zeros(unit.shape[0], 0)
    return out.to(table.dtype).reshape(*points.shape[:-1], L * F)
