"""Scene contraction for unbounded scenes, and samples spaced for the contracted space.

A dense grid covers a box; an unbounded scene (ground running to the horizon, a sky) does
not fit one. Contraction maps the whole world into a bounded cube: an inner box `[lo, hi]`
(normalised to the unit ball or cube around its centre, each axis by its half-size) keeps
its shape, and everything outside is squeezed into the shell between radius 1 and 2
(mip-NeRF 360's contraction, or DirectVoxGO v2's with the max-norm):

    x = (p - centre) / half                        # the inner box -> the unit ball / cube
    contract(x) = x                                if |x| <= 1
                = (2 - 1 / |x|) x / |x|            otherwise

`|x|` is the Euclidean norm for `kind="sphere"` (mip-NeRF 360: the contracted space is the
ball of radius 2) and the max-norm for `kind="cube"` (DirectVoxGO v2: the cube [-2, 2]^3,
which a grid over that cube fills with no unused corners). A grid over `CONTRACTED_BOUNDS`
then holds the whole world, at full resolution inside the box and at a resolution that
falls off as 1 / distance^2 outside it.

    points = grid.contract(world_points, lo, hi)                      # [..., 3] -> [..., 3]
    s = grid.sample_contracted(origins, directions, lo, hi, step=0.02, far=1000.0,
                               outer_samples=32, occupancy=occ)

`sample_contracted` places samples uniformly (every `step`, in world units) from `near` to
where the ray leaves the inner box, then `outer_samples` samples evenly spaced in
disparity (1 / t) out to `far`: along a ray through the centre that is even spacing in the
contracted space, so distant content gets samples without wasting them near the cameras.
The samples are packed and segmented by ray (`offsets`), as `grid.composite_rays` and
`grid.ray_weights` take them; each carries the length of its segment in the contracted
space (`intervals`), the step a density defined over the contracted grid integrates over.
The samples are made by plain PyTorch ops (the native marcher `march_rays_static` steps
uniformly in world space); their number is read back once per call.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch import Tensor

from . import _checks
from .occupancy import OccupancyGrid
from .rays import _check_occupancy, _check_rays, _corner

#: Values of `kind`: the norm the contraction measures distances with.
KINDS = ("sphere", "cube")
#: The box a grid over the contracted space covers: every contracted point lies inside it.
CONTRACTED_BOUNDS = ((-2.0, -2.0, -2.0), (2.0, 2.0, 2.0))


class ContractedSamples(NamedTuple):
    """Packed samples of `sample_contracted`, sorted by ray and front to back within a ray.

    Attributes:
        ray_indices: [S] int64, the ray of each sample (non-decreasing).
        t: [S] distance of each sample along its ray (world units of the direction).
        points: [S, 3] the samples' contracted positions (inside `CONTRACTED_BOUNDS`).
        intervals: [S] the length, in the contracted space, of each sample's segment of the
            ray (in the inner box: the world step divided by the box's half-size).
        offsets: [R + 1] int64: ray r's samples are `[offsets[r], offsets[r + 1])`.

    Examples:
        >>> import torch
        >>> import grid
        >>> s = grid.sample_contracted(
        ...     torch.zeros(1, 3), torch.tensor([[1.0, 0.0, 0.0]]), (-2, -2, -2), (2, 2, 2),
        ...     step=0.5, far=100.0, outer_samples=2,
        ... )
        >>> ray_indices, t, points, intervals, offsets = s  # a named tuple
        >>> offsets.tolist(), s.intervals[:4].tolist()  # in the box: the step / its half-size
        ([0, 6], [0.25, 0.25, 0.25, 0.25])
    """

    ray_indices: Tensor
    t: Tensor
    points: Tensor
    intervals: Tensor
    offsets: Tensor


def contract(
    points: Tensor,
    lo: Tensor | Sequence[float],
    hi: Tensor | Sequence[float],
    kind: str = "sphere",
) -> Tensor:
    """World points -> the contracted space (see the module docstring).

    Args:
        points: [..., 3] floating world points (finite).
        lo, hi: [3] the inner box's corners (min < max on every axis): tensors on the
            points' device or three numbers each.
        kind: "sphere" (Euclidean norm: mip-NeRF 360) or "cube" (max-norm: DirectVoxGO v2).

    Returns:
        [..., 3] in the points' dtype: the inner box maps linearly onto the unit ball (cube),
        everything else into the shell between radius 1 and 2; differentiable.

    Examples:
        >>> import torch
        >>> import grid
        >>> points = torch.tensor([[0.5, 0.0, 0.0], [2.0, 0.0, 0.0], [1e9, 0.0, 0.0]])  # [N, 3]
        >>> grid.contract(points, (-1, -1, -1), (1, 1, 1)).tolist()  # far away: radius 2
        [[0.5, 0.0, 0.0], [1.5, 0.0, 0.0], [2.0, 0.0, 0.0]]
        >>> far = torch.tensor([[4.0, 2.0, 0.0]])  # max-norm 4: (2 - 1 / 4) / 4 of it
        >>> grid.contract(far, (-1, -1, -1), (1, 1, 1), kind="cube").tolist()
        [[1.75, 0.875, 0.0]]
    """
    _checks.float_tensor("points", points, "[..., 3]", None, 3)
    kind = _kind(kind)
    centre, half = _box(lo, hi, points)
    return _contract((points - centre) / half, kind)


def uncontract(
    points: Tensor,
    lo: Tensor | Sequence[float],
    hi: Tensor | Sequence[float],
    kind: str = "sphere",
) -> Tensor:
    """The inverse of `contract`: contracted points [..., 3] with norm < 2 -> world points.
    Points at norm 2 or beyond map to infinity.

    Examples:
        >>> import torch
        >>> import grid
        >>> x = torch.tensor([[0.5, 0.0, 0.0], [1.5, 0.0, 0.0], [0.0, 1.75, 0.0]])  # [N, 3]
        >>> grid.uncontract(x, (-1, -1, -1), (1, 1, 1)).tolist()
        [[0.5, 0.0, 0.0], [2.0, 0.0, 0.0], [0.0, 4.0, 0.0]]
    """
    _checks.float_tensor("points", points, "[..., 3]", None, 3)
    kind = _kind(kind)
    centre, half = _box(lo, hi, points)
    n = _norm(points, kind).clamp_min(1.0)  # [..., 1]
    radius = 1.0 / (2.0 - n)  # the world norm of a point of contracted norm n > 1
    return points * (radius / n) * half + centre


def sample_contracted(
    origins: Tensor,
    directions: Tensor,
    lo: Tensor | Sequence[float],
    hi: Tensor | Sequence[float],
    *,
    step: float,
    far: float,
    outer_samples: int,
    near: float = 0.0,
    kind: str = "sphere",
    occupancy: OccupancyGrid | None = None,
) -> ContractedSamples:
    """Samples along each ray for a grid over the contracted space, packed by ray.

    Ray r gets `n_r = max(1, ceil((t_exit - near) / step))` samples at the centres of the
    steps `[near + j step, near + (j + 1) step)`, where `t_exit` is where the ray leaves the
    inner region for good (the unit ball or cube of the normalised box; for a ray that
    misses it, its closest approach to the centre). From `t_split = near + n_r step` to
    `far` come `outer_samples` segments of equal width in disparity 1 / t, each sampled at
    its midpoint in disparity (none when `t_split >= far`). With `occupancy` (a grid over
    `CONTRACTED_BOUNDS`), samples whose contracted point's nearest voxel is empty are
    dropped. Rays with a non-finite or zero direction or origin get no samples.

    Args:
        origins, directions: [R, 3] float32 or float64 rays (t counts in the directions'
            units; unit directions give world distances).
        lo, hi: [3] the inner box, as in `contract`.
        step: the inner samples' spacing (> 0), in t.
        far: where the last outer segment ends (> near).
        outer_samples: samples between `t_split` and `far` (>= 1).
        near: no samples before this distance (>= 0).
        kind: "sphere" or "cube", as in `contract`.
        occupancy: optional `OccupancyGrid` over the contracted space, on the rays' device.

    Returns:
        `ContractedSamples(ray_indices, t, points, intervals, offsets)`; constants for
        autograd. Cost: dense [R, max n_r + outer_samples] tensors before the occupancy
        test, and one read-back of max n_r and one of the kept count.

    Examples:
        >>> import torch
        >>> import grid
        >>> origins = torch.zeros(2, 3, dtype=torch.float64)  # [R, 3]: two rays from the centre
        >>> directions = torch.eye(3, dtype=torch.float64)[:2]
        >>> s = grid.sample_contracted(
        ...     origins, directions, (-1, -1, -1), (1, 1, 1), step=0.25, far=1000.0, outer_samples=4
        ... )
        >>> s.offsets.tolist()  # per ray: 4 samples to the unit sphere, then 4 out to `far`
        [0, 8, 16]
        >>> s.t[:4].tolist()  # the inner samples: step centres
        [0.125, 0.375, 0.625, 0.875]
        >>> [round(1 / t, 3) for t in s.t[4:8].tolist()]  # the outer ones: even steps in 1 / t
        [0.875, 0.625, 0.376, 0.126]
        >>> bool(s.points.norm(dim=-1).max() < 2)  # all in the contracted ball
        True
    """
    _check_rays(origins, directions)
    kind = _kind(kind)
    centre, half = _box(lo, hi, origins)
    step = _checks.real("step", step, positive=True)
    near = _checks.real("near", near)
    far = _checks.real("far", far, positive=True)
    if near < 0:
        raise ValueError(f"near: expected a number >= 0, got {near}")
    if far <= near:
        raise ValueError(f"far: expected a number > near ({near}), got {far}")
    outer = _checks.count("outer_samples", outer_samples)
    if outer < 1:
        raise ValueError("outer_samples: expected an int >= 1, got 0")
    if occupancy is not None:
        _check_occupancy(occupancy, origins)

    good = torch.isfinite(origins).all(-1) & torch.isfinite(directions).all(-1)
    good &= (directions != 0).any(-1)  # [R]
    o_n = torch.where(good[:, None], origins, 0.0).sub(centre).div(half)  # normalised rays:
    d_n = torch.where(good[:, None], directions, 1.0).div(half)  # the inner region is unit
    a, b, c = (d_n * d_n).sum(-1), (o_n * d_n).sum(-1), (o_n * o_n).sum(-1)  # [R]
    t_exit = _exit(o_n, d_n, a, b, kind)  # [R]
    inner = ((t_exit - near) / step).ceil().clamp_min(1)  # [R] inner samples per ray
    inner = torch.where(good, inner, 0.0)
    n_in = int(inner.max()) if inner.numel() else 0  # reads one number back

    # inner samples: step centres, [R, Ni]; each interval is |d contract / dt| x step
    t_in = near + (torch.arange(n_in, device=o_n.device, dtype=o_n.dtype) + 0.5) * step
    x_in = torch.addcmul(o_n[:, None], d_n[:, None], t_in[:, None])  # [R, Ni, 3]
    c_in = _contract(x_in, kind)
    keep_in = t_in < near + inner[:, None] * step
    # outer samples: [R, No] between edges evenly spaced in 1 / r, r = |o_n + t d_n|
    t_split = near + inner * step  # [R]: past the closest approach to the centre
    u = torch.linspace(0.0, 1.0, outer + 1, device=o_n.device, dtype=o_n.dtype)  # [No + 1]
    s_split = _radius(a, b, c, t_split).reciprocal()[:, None]
    s_far = _radius(a, b, c, torch.full_like(a, far)).reciprocal()[:, None]
    edges = s_split * (1 - u) + u * s_far  # [R, No + 1] in 1 / r
    t_edges = _along(a, b, c, edges.reciprocal())
    t_out = _along(a, b, c, 2.0 / (edges[:, :-1] + edges[:, 1:]))  # [R, No]
    c_edges = _contract(torch.addcmul(o_n[:, None], d_n[:, None], t_edges[..., None]), kind)
    c_out = _contract(torch.addcmul(o_n[:, None], d_n[:, None], t_out[..., None]), kind)
    keep_out = (good & (t_split < far))[:, None].expand(-1, outer)
    if occupancy is not None:
        keep_in = keep_in & _occupied(occupancy, c_in)
        keep_out = keep_out & _occupied(occupancy, c_out)

    ray_in, j_in = keep_in.nonzero(as_tuple=True)  # row-major: sorted by ray, front to back
    ray_out, j_out = keep_out.nonzero(as_tuple=True)
    x = x_in[ray_in, j_in]  # [S_in, 3]
    intervals_in = _speed(x, d_n[ray_in], kind) * step
    intervals_out = (c_edges[:, 1:] - c_edges[:, :-1]).norm(dim=-1)[ray_out, j_out]
    # merge the two packed lists: ray r's inner samples, then its outer ones
    count_in, count_out = keep_in.sum(1), keep_out.sum(1)  # [R]
    offsets = torch.cat([count_in.new_zeros(1), (count_in + count_out).cumsum(0)])
    first_in = count_in.cumsum(0) - count_in
    first_out = count_out.cumsum(0) - count_out
    at_in = offsets[ray_in] + torch.arange(ray_in.shape[0], device=o_n.device) - first_in[ray_in]
    at_out = offsets[ray_out] + count_in[ray_out]
    at_out += torch.arange(ray_out.shape[0], device=o_n.device) - first_out[ray_out]
    n_total = ray_in.shape[0] + ray_out.shape[0]

    def merge(inner_values: Tensor, outer_values: Tensor) -> Tensor:
        out = inner_values.new_empty((n_total, *inner_values.shape[1:]))
        out[at_in] = inner_values
        out[at_out] = outer_values
        return out

    return ContractedSamples(
        merge(ray_in, ray_out),
        merge(t_in[j_in], t_out[ray_out, j_out]),
        merge(c_in[ray_in, j_in], c_out[ray_out, j_out]),
        merge(intervals_in, intervals_out),
        offsets,
    )


# ---- the computations, without checks ----------------------------------------------------


def _contract(x: Tensor, kind: str) -> Tensor:
    n = _norm(x, kind).clamp_min(1.0)  # [..., 1]; inside the unit region the scale is 1
    return x * ((2.0 - 1.0 / n) / n)


def _radius(a: Tensor, b: Tensor, c: Tensor, t: Tensor) -> Tensor:
    """|o + t d| from a = d.d, b = o.d, c = o.o (all [R])."""
    return (c + t * (2 * b + t * a)).clamp_min(1e-12).sqrt()


def _along(a: Tensor, b: Tensor, c: Tensor, r: Tensor) -> Tensor:
    """The t >= the closest approach at which |o + t d| = r: [R, K] for r [R, K]."""
    a, b, c = a[:, None], b[:, None], c[:, None]
    return (-b + (b * b - a * (c - r * r)).clamp_min(0).sqrt()) / a


def _norm(x: Tensor, kind: str) -> Tensor:
    if kind == "sphere":
        return x.norm(dim=-1, keepdim=True)
    return x.abs().amax(dim=-1, keepdim=True)


def _exit(o: Tensor, d: Tensor, a: Tensor, b: Tensor, kind: str) -> Tensor:
    """Where rays o + t d (normalised coordinates; a = d.d, b = o.d) leave the unit ball
    (cube) for good; the closest approach to the centre for rays that miss it. [R]."""
    closest = -b / a
    if kind == "sphere":
        disc = b * b - a * ((o * o).sum(-1) - 1.0)
        return torch.where(disc > 0, (-b + disc.clamp_min(0).sqrt()) / a, closest)
    inv = 1.0 / torch.where(d == 0, torch.full_like(d, 1e-10), d)
    t0, t1 = (-1.0 - o) * inv, (1.0 - o) * inv
    t_near, t_far = torch.minimum(t0, t1).amax(-1), torch.maximum(t0, t1).amin(-1)
    return torch.where(t_near < t_far, t_far, closest)


def _speed(x: Tensor, d: Tensor, kind: str) -> Tensor:
    """|d contract(x + t d) / dt| at t = 0: [S] for x, d [S, 3] (normalised)."""
    n = _norm(x, kind)  # [S, 1]
    if kind == "sphere":
        dn = (x * d).sum(-1, keepdim=True) / n.clamp_min(1e-12)
    else:
        dn = torch.gather(d * x.sign(), -1, x.abs().argmax(-1, keepdim=True))
    outside = n > 1
    n = n.clamp_min(1.0)
    g = (2.0 - 1.0 / n) / n  # contract(x) = g(|x|) x; g' = 2 (1 - n) / n^3
    dg = torch.where(outside, 2.0 * (1.0 - n) / n**3 * dn, 0.0)
    return (g * d + dg * x).norm(dim=-1)


def _occupied(occupancy: OccupancyGrid, points: Tensor) -> Tensor:
    """`occupancy.query(points)` without its checks: the nearest voxel's flag, [...]."""
    flags = occupancy.flags
    lo, hi = occupancy.bounds.to(points.dtype)
    last = torch.tensor(flags.shape, device=points.device, dtype=points.dtype) - 1
    index = ((points - lo) * (last / (hi - lo))).round_().clamp_(min=0).minimum(last).long()
    x, y, z = index.unbind(-1)
    return flags.view(-1)[(x * flags.shape[1] + y) * flags.shape[2] + z]


def _kind(kind: object) -> str:
    if kind not in KINDS:
        raise ValueError(f"kind: expected one of {', '.join(map(repr, KINDS))}, got {kind!r}")
    return kind


def _box(lo, hi, like: Tensor) -> tuple[Tensor, Tensor]:
    """(centre [3], half-size [3]) of the box [lo, hi] in `like`'s dtype and device."""
    lo, hi = _corner("lo", lo, like), _corner("hi", hi, like)
    if not bool((lo < hi).all()) or not math.isfinite(float((hi - lo).sum())):
        raise ValueError(
            f"lo, hi: expected finite corners with lo < hi on every axis, got "
            f"{lo.tolist()} and {hi.tolist()}"
        )
    return (lo + hi) * 0.5, (hi - lo) * 0.5
