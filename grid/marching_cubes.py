"""Marching cubes over a dense grid of values, in tensor ops: the same code on the CPU and
on CUDA, no copy to the host, vertices shared between neighbouring cells.

The triangle table is built here from the cube itself (`_triangle_table`), not typed in:
on each face of a cell, the edges where the sign changes are paired so that a face with
four sign changes separates its two corners below the level (the decision depends on the
face alone, so the two cells that share a face agree and the mesh has no cracks); the
segments chain into loops around the cell, each loop a fan of triangles.
"""

from __future__ import annotations

import functools
import math

import torch
from torch import Tensor

# corner i of a cell is at offset (i & 1, i >> 1 & 1, i >> 2 & 1) along (x, y, z)
_CORNERS = [(i & 1, i >> 1 & 1, i >> 2 & 1) for i in range(8)]
# the 12 edges (a, b): corners a < b that differ along one axis
_EDGES = [(a, a | 1 << axis) for axis in range(3) for a in range(8) if not a >> axis & 1]


def _faces_ccw() -> list[list[int]]:
    """The six faces of the cell, each its four corners counter-clockwise seen from
    outside."""
    faces = []
    for axis in range(3):
        for side in (0, 1):
            u, v = (axis + 1) % 3, (axis + 2) % 3
            ring = [(0, 0), (1, 0), (1, 1), (0, 1)]  # counter-clockwise in (u, v)
            corners = [sum(b << k for k, b in ((axis, side), (u, du), (v, dv))) for du, dv in ring]
            # (u, v, axis) is right-handed: counter-clockwise in (u, v) faces +axis
            faces.append(corners if side == 1 else corners[::-1])
    return faces


def _fan_root(loop: list[int], on_face: list[set[int]]) -> list[int]:
    """`loop` rotated to start where a fan of triangles from its first edge has no
    diagonal between two edges of one face of the cell: such a diagonal lies in the face,
    and the neighbouring cell may draw the same one (an edge of four triangles). There is
    always such a start (every case checked when the table is built)."""
    for r in range(len(loop)):
        turned = loop[r:] + loop[:r]
        if not any(on_face[turned[0]] & on_face[e] for e in turned[2:-1]):
            return turned
    raise AssertionError(f"no fan start for the loop {loop}")


@functools.cache
def _triangle_table() -> tuple[list[int], list[list[int]]]:
    """(triangle count [256], edge triples [256][3 * count]) for each case, the case's bit
    i set where corner i is below the level."""
    edge_of = {frozenset(e): k for k, e in enumerate(_EDGES)}
    faces = _faces_ccw()
    on_face = [{f for f, ring in enumerate(faces) if a in ring and b in ring} for a, b in _EDGES]
    counts, tables = [], []
    for case in range(256):
        below = [bool(case >> i & 1) for i in range(8)]
        after = {}  # a loop goes from each cut edge to the next
        for ring in faces:
            # edges around the face: (edge, kind) with kind +1 going up, -1 going down
            cuts = []
            for k in range(4):
                a, b = ring[k], ring[(k + 1) % 4]
                if below[a] != below[b]:
                    cuts.append((edge_of[frozenset((a, b))], 1 if below[a] else -1))
            # each upward cut starts a segment ending at the nearest downward cut behind
            # it: a face with four cuts has its corners below the level cut off apart
            for k, (edge, kind) in enumerate(cuts):
                if kind == 1:
                    back = cuts[k - 1]
                    assert back[1] == -1
                    after[edge] = back[0]
        triangles: list[int] = []
        while after:
            loop = [next(iter(after))]
            while after[loop[-1]] != loop[0]:
                loop.append(after.pop(loop[-1]))
            after.pop(loop[-1])
            loop = _fan_root(loop, on_face)
            for k in range(1, len(loop) - 1):
                triangles += [loop[0], loop[k + 1], loop[k]]
        counts.append(len(triangles) // 3)
        tables.append(triangles)
    return counts, tables


@functools.cache
def _tables(device: torch.device) -> tuple[Tensor, Tensor]:
    """(count [256] uint8, edges [256, 3 * most] int64, -1 padded) on `device`."""
    counts, tables = _triangle_table()
    width = 3 * max(counts)
    padded = [t + [-1] * (width - len(t)) for t in tables]
    return (
        torch.tensor(counts, dtype=torch.uint8, device=device),
        torch.tensor(padded, dtype=torch.int64, device=device),
    )


def _check(values: Tensor, level: float, interpolation: str) -> None:
    if not isinstance(values, Tensor) or values.dim() != 3 or not values.is_floating_point():
        raise ValueError(
            "marching_cubes: values: expected a floating-point tensor [X, Y, Z], got "
            + (
                f"{values.dtype} {list(values.shape)}"
                if isinstance(values, Tensor)
                else repr(type(values))
            )
        )
    if min(values.shape) < 2:
        raise ValueError(
            f"marching_cubes: values: expected at least 2 per side, got {list(values.shape)}"
        )
    if not isinstance(level, (int, float)) or not math.isfinite(level):
        raise ValueError(f"marching_cubes: level: expected a finite number, got {level!r}")
    if interpolation not in ("linear", "smoothstep"):
        raise ValueError(
            'marching_cubes: interpolation: expected "linear" or "smoothstep", got '
            f"{interpolation!r}"
        )
    if not torch.isfinite(values).all():
        raise ValueError("marching_cubes: values: contains NaN or infinity")


def marching_cubes(
    values: Tensor,
    level: float = 0.0,
    interpolation: str = "linear",
    bounds: Tensor | tuple | None = None,
) -> tuple[Tensor, Tensor]:
    """The surface where `values` [X, Y, Z] crosses `level`, as (vertices [V, 3], faces
    [T, 3] int64), on `values`' device.

    Vertices lie on the grid's edges, at the level's crossing of the field along the edge:
    linear (`interpolation = "linear"`, as `VoxelGrid`'s trilinear field) or the
    smoothstep field's (`"smoothstep"`). They are in voxel index coordinates, or with
    `bounds` ((lo, hi), as `VoxelGrid.bounds`) in world coordinates. Each vertex is shared
    by the triangles around it. Triangles wind (right hand) towards increasing values:
    outwards for a signed distance. A value equal to the level counts as above it;
    triangles with two vertices at one place are left out. The mesh is empty (V = T = 0)
    where the values do not cross the level.

    Examples:
        >>> import torch
        >>> import grid
        >>> x = torch.linspace(-1, 1, 24)
        >>> sdf = torch.stack(torch.meshgrid(x, x, x, indexing="ij"), -1).norm(dim=-1) - 0.5
        >>> vertices, faces = grid.marching_cubes(sdf, bounds=((-1, -1, -1), (1, 1, 1)))
        >>> vertices.shape[1:], faces.shape[1:], faces.dtype  # [V, 3] world points, [T, 3]
        (torch.Size([3]), torch.Size([3]), torch.int64)
        >>> bool((vertices.norm(dim=-1) - 0.5).abs().max() < 0.01)  # on the sphere of radius 0.5
        True
        >>> len(faces) == 2 * len(vertices) - 4  # one closed piece (Euler: V - E + F = 2)
        True
    """
    _check(values, level, interpolation)
    device = values.device
    count_of, table = _tables(device)
    below = values < level  # [X, Y, Z]
    X, Y, Z = values.shape
    size = (X, Y, Z)
    volume = X * Y * Z
    strides = torch.tensor((Y * Z, Z, 1), device=device)

    # the edges the level crosses: key = axis * volume + the linear index of the edge's
    # lower voxel (sorted), and the cells around them (a crossed edge touches up to 4)
    keys, cells = [], []
    for axis in range(3):
        n = size[axis] - 1
        at = (below.narrow(axis, 0, n) != below.narrow(axis, 1, n)).nonzero()  # [E, 3]
        keys.append((at * strides).sum(1) + axis * volume)
        for side in range(4):
            cell = at.clone()
            for k, other in enumerate(a for a in range(3) if a != axis):
                cell[:, other] -= side >> k & 1
            inside = ((cell >= 0) & (cell < torch.tensor(size, device=device) - 1)).all(1)
            cells.append(cell[inside])
    keys = torch.cat(keys)  # [V]
    cells = torch.unique((torch.cat(cells) * strides).sum(1))  # [A] each cell's corner 0, linear

    # each cell's case: bit i set where corner i is below the level
    corner_offset = (torch.tensor(_CORNERS, device=device) * strides).sum(1)  # [8]
    corner_below = below.reshape(-1)[cells.unsqueeze(1) + corner_offset]  # [A, 8]
    case = (corner_below.long() << torch.arange(8, device=device)).sum(1)  # [A]
    edges = table[case]  # [A, 3 * most], -1 padded
    used = edges >= 0
    edge = edges[used]  # [3 T]
    owner = cells.unsqueeze(1).expand_as(edges)[used]
    # each edge of the cell: its axis, and the offset of its lower corner
    axis_of = torch.tensor([(b ^ a).bit_length() - 1 for a, b in _EDGES], device=device)
    offset_of = corner_offset[[a for a, _ in _EDGES]]
    wanted = owner + offset_of[edge] + axis_of[edge] * volume
    faces = torch.searchsorted(keys, wanted).reshape(-1, 3)

    # vertex positions: the crossing along each edge
    axis = keys // volume
    voxel = keys % volume
    step = strides[axis]
    flat = values.reshape(-1)
    v0, v1 = flat[voxel].double(), flat[voxel + step].double()
    t = ((level - v0) / (v1 - v0)).clamp(0, 1)
    if interpolation == "smoothstep":  # the zero of v0 + (v1 - v0) s(t'), s(t) = t^2 (3 - 2t)
        t = 0.5 - torch.sin(torch.asin((1 - 2 * t).clamp(-1, 1)) / 3)
    index = torch.stack([voxel // (Y * Z), voxel // Z % Y, voxel % Z], dim=1).double()
    index[torch.arange(len(keys), device=device), axis] += t
    vertices = index

    # triangles with two corners at one place (a value exactly at the level)
    corners = vertices[faces]  # [T, 3, 3]
    flat_tri = (
        (corners[:, 0] == corners[:, 1]).all(1)
        | (corners[:, 1] == corners[:, 2]).all(1)
        | (corners[:, 0] == corners[:, 2]).all(1)
    )
    if flat_tri.any():
        faces = faces[~flat_tri]
        kept, faces = torch.unique(faces.reshape(-1), return_inverse=True)
        vertices, faces = vertices[kept], faces.reshape(-1, 3)
    if bounds is not None:
        lo, hi = (torch.as_tensor(b, dtype=torch.float64, device=device) for b in bounds)
        size = torch.tensor(values.shape, dtype=torch.float64, device=device) - 1
        vertices = lo + vertices * (hi - lo) / size
    return vertices.to(torch.promote_types(values.dtype, torch.float32)), faces
