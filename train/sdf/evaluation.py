"""How well a grid's field is a signed distance to the surface of a point cloud.

Against the exact shape, when [points] is one (`reference = "exact"`), on fixed
held-out points drawn with `eval.seed`:

* `sdf_error`: mean |f - sdf| over points near the surface: `eval.points` surface points
  drawn uniformly on the shape, each moved along its normal by a uniform offset in
  [-band, band], band = `eval.band` voxels of the final grid (so |sdf| < band there);
  `sdf_error_box` is it divided by the box size (the largest side of `grid.bounds`);
* `surface_f`: mean |f| on the held-out surface points (before the offset);
* `normal_error`: mean angle in degrees between grad f and the true normal there (a zero
  gradient, which has no direction, counts as 90 degrees);
* with `output.mesh`, the zero level set by marching cubes and the Chamfer distance
  `chamfer = (mesh_to_surface + surface_to_mesh) / 2`: the mean exact distance from the
  mesh vertices to the true surface (|sdf| there), and the mean exact distance from the
  held-out surface points to the mesh's triangles; `chamfer_box` is it over the box size.

For a point-cloud file (`reference = "input points"`) nothing exact is known, so the same
keys are measured against the input points: `surface_f` and `normal_error` on
`eval.points` of them (the training points themselves, drawn with `eval.seed`; the input
normals as truth), `mesh_to_surface` from the mesh vertices to the nearest input point,
`surface_to_mesh` from those input points to the mesh. No `sdf_error`.

Under torchrun the points are split across ranks and the sums added up; the mesh and the
Chamfer distance are computed by rank 0 only (which alone writes them).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from grid.voxel_grid import VoxelGrid

from ..config import Config
from ..distributed import World
from ..mesh.distance import distance_to_mesh, distance_to_points, supported_components
from ..mesh.level_set import field_and_gradient, zero_level_set
from ..mesh.triangles import Mesh, face_components
from .points import PointCloud, exact_sdf, sample_surface, shape_params

CHUNK = 1 << 16


def angle_degrees(g: Tensor, n: Tensor) -> Tensor:
    """[N] angles in degrees between vectors g [N, 3] and unit normals n [N, 3], in
    float64 (atan2 of |g x n| and g . n: accurate near 0); 90 where g is zero."""
    g, n = g.double(), n.double()
    angle = torch.atan2(torch.linalg.cross(g, n).norm(dim=1), (g * n).sum(dim=1))
    return torch.where(g.norm(dim=1) > 0, angle.rad2deg(), torch.full_like(angle, 90.0))


class Evaluation:
    """The fixed evaluation points of an sdf run, and its numbers (see the module
    docstring). `mesh` holds the zero level set of the last call (None without
    output.mesh or before the first call)."""

    def __init__(
        self,
        config: Config,
        cloud: PointCloud,
        final: tuple[int, int, int],
        device: torch.device,
        world: World,
    ) -> None:
        c, p = config, config.points
        self.world = world
        lo, hi = (torch.tensor(b, dtype=torch.float64) for b in c.grid.bounds)
        self.box_size = (hi - lo).max().item()
        voxel = ((hi - lo) / (torch.tensor(final, dtype=torch.float64) - 1)).max().item()
        self.band = c.eval.band * voxel
        self.with_mesh = c.output.mesh
        self.with_chamfer = c.eval.chamfer
        self.mesh: Mesh | None = None
        self.seconds: dict[str, float] = {}  # the last mesh's: "mesh", "chamfer"
        # sdf.keep = "supported": components away from the input points are dropped
        self.keep = c.sdf.keep
        self.support_ratio = c.sdf.support_ratio
        self.min_island, self.close, self.relax = c.sdf.min_island, c.sdf.close, c.sdf.relax
        self.inputs = cloud.points.double().cpu().numpy()
        gen = torch.Generator().manual_seed(c.eval.seed)
        if p.kind == "file":
            self.reference = "input points"
            self.shape = None
            pick = torch.randperm(len(cloud), generator=gen)[: c.eval.points].to(
                cloud.points.device
            )
            self.points, self.normals = cloud.points[pick], cloud.normals[pick]
            self.cloud = cloud.points.double().cpu().numpy()  # the whole input, for Chamfer
            self.near = self.near_sdf = None
        else:
            self.reference = "exact"
            params = shape_params(p)
            self.shape = exact_sdf(p.kind, params).to(device)
            held = sample_surface(p.kind, params, c.eval.points, gen)
            offset = (torch.rand(c.eval.points, 1, generator=gen) * 2 - 1) * self.band
            self.points, self.normals = held.points.to(device), held.normals.to(device)
            near = (held.points.double() + offset.double() * held.normals.double()).float()
            self.near = near.to(device)  # [eval.points, 3], |sdf| < band
            with torch.no_grad():
                self.near_sdf = self.shape(self.near)

    def __call__(
        self,
        model: nn.Module,
        interpolation: str,
        mesh_grid: Callable[[], VoxelGrid] | None = None,
    ) -> dict[str, Any]:
        """The numbers of the module docstring for the current field `model` (points [..., 3]
        -> f [..., 1]: a VoxelGrid, or sdf.encoding = "multires"'s field); the mesh is
        marching cubes on the grid `mesh_grid()` returns (default: `model` itself)."""
        world = self.world
        mine = world.split(self.points.shape[0])
        rows = slice(mine.start, mine.stop)
        f, g = field_and_gradient(model, self.points[rows])
        sums = [f.double().abs().sum(), angle_degrees(g, self.normals[rows]).sum()]
        if self.near is not None:
            with torch.no_grad():
                values = torch.cat([model(x)[..., 0] for x in self.near[rows].split(CHUNK)])
            sums.append((values.double() - self.near_sdf[rows].double()).abs().sum())
        total = world.all_sum(torch.stack(sums)).tolist()
        n = self.points.shape[0]
        out: dict[str, Any] = {}
        if self.near is not None:
            out["sdf_error"] = total[2] / n
            out["sdf_error_box"] = out["sdf_error"] / self.box_size
        out["surface_f"] = total[0] / n
        out["normal_error"] = total[1] / n
        if self.with_mesh and world.is_main:
            out.update(self.chamfer(model if mesh_grid is None else mesh_grid(), interpolation))
        return out

    def chamfer(self, model: VoxelGrid, interpolation: str) -> dict[str, Any]:
        """Extract the mesh (kept in `self.mesh`) and its Chamfer distances (None when
        the field has no zero level set)."""
        start = time.perf_counter()
        mesh = zero_level_set(model, interpolation, self.min_island, self.close, self.relax)
        pieces = face_components(mesh.faces, len(mesh.vertices))
        removed = {"mesh_components": len(pieces[1])}
        if self.keep == "supported":
            mesh, components, faces = supported_components(
                mesh, self.inputs, self.support_ratio, pieces, self.points.device
            )
            removed.update(removed_components=components, removed_faces=faces)
        self.mesh = mesh
        self.seconds = {"mesh": time.perf_counter() - start}
        if len(mesh.faces) == 0 or not self.with_chamfer:
            keys = ("chamfer", "chamfer_box", "mesh_to_surface", "surface_to_mesh")
            return {**dict.fromkeys(keys), **removed}
        start = time.perf_counter()
        points = self.points.double().cpu().numpy()
        if self.shape is not None:
            vertices = torch.as_tensor(mesh.vertices, device=self.points.device)
            with torch.no_grad():  # the exact distance of each vertex to the surface
                to_surface = self.shape(vertices).abs().double().mean().item()
        else:
            to_surface = float(distance_to_points(mesh.vertices, self.cloud).mean())
        to_mesh = float(distance_to_mesh(points, mesh).mean())
        chamfer = (to_surface + to_mesh) / 2
        self.seconds["chamfer"] = time.perf_counter() - start
        return {
            "chamfer": chamfer,
            "chamfer_box": chamfer / self.box_size,
            "mesh_to_surface": to_surface,
            "surface_to_mesh": to_mesh,
            **removed,
        }

    def line(self, quality: dict[str, Any]) -> str:
        """The progress line of an evaluation."""
        parts = []
        if "sdf_error" in quality:
            parts.append(
                f"|f - sdf| {quality['sdf_error']:.2e} ({100 * quality['sdf_error_box']:.3f}% "
                f"of the box)"
            )
        else:
            parts.append(f"|f| at the points {quality['surface_f']:.2e}")
        parts.append(f"normals {quality['normal_error']:5.2f} deg")
        if quality.get("chamfer") is not None:
            parts.append(f"chamfer {quality['chamfer']:.2e}")
        if quality.get("mesh_components") is not None:
            dropped = quality.get("removed_components")
            parts.append(
                f"pieces {quality['mesh_components']}"
                + (f" (-{dropped} unsupported)" if dropped else "")
            )
        return "  ".join(parts)
