"""The sdf experiment: a signed distance grid fitted to an oriented point cloud.

Only the surface is given (points and their outward normals, `[points]`), never the
distance anywhere else. Each step draws `train.batch_size` of the surface points and
`train.eikonal_points` uniform points in the box, takes the field's gradient at all of
them with `torch.autograd.grad(..., create_graph=True)` and minimises

    mean_surface f^2  +  normal_weight * mean_surface |grad f - n|^2
                      +  eikonal_weight * mean_uniform (|grad f| - 1)^2

(+ `train.tv_weight` x total variation), so f = 0 on the points, its gradient is the
normal there, and it grows at unit rate everywhere (a distance). f is negative inside.
With `sdf.surface_units = "voxel"` the surface term is the mean of (f / h)^2, h the
current voxel size: it keeps its weight against the other two as the grid is refined, so
the points are fitted to the same fraction of a voxel at every resolution (with f in
world units the normal and eikonal terms win more of the balance at every upsample).
Points without normals get estimated ones (`points.normals = "estimate"`,
`normals.estimate_normals`). At each upsample the pockets of the wrong sign the finer grid
inherits are turned (`sdf.repair_signs`, `sign_repair.py`).
The grid interpolates with `grid.interpolation` (linear by default: a smoothstep grid is
C1, but its gradient vanishes on the voxel planes, which costs it its normals).

Evaluation (`evaluate`), against the exact shape where [points] is one, else against the
input points themselves (`evaluation.py`). The mesh is the zero level set by marching
cubes, without the pieces the points do not support with `sdf.keep = "supported"`
(`train.mesh.distance.supported_components`). Pictures: mesh.png, curves.png (`pictures.py`).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from grid.voxel_grid import VoxelGrid

from ..config import Config
from ..distributed import SINGLE, World
from ..errors import ConfigError, plural, writing
from ..experiment import Experiment
from ..grid_schedule import GridSchedule, learning_rate, make_optimizer, uniform_points
from ..mesh.triangles import Mesh, write_ply
from ..metrics import LaggedValues
from ..multires_config import active_levels
from ..schema import as_resolution
from ..step_graph import use_graphs
from .denoise import project_to_surfaces
from .evaluation import Evaluation
from .multires_field import MultiresSdf, multires_field, multires_optimizer, set_group_rates
from .neighbours import knn
from .normals import estimate_normals, normal_agreement
from .points import (
    PointCloud,
    check_inside,
    read_point_cloud,
    sample_surface,
    shape_params,
)
from .sign_repair import repair_signs
from .winding import nearest_side, point_areas, winding_numbers


def final_resolution(config: Config) -> tuple[int, int, int]:
    """The resolution after the last upsample (or the starting one)."""
    res = config.train.upsample_resolutions
    return as_resolution(res[-1] if res else config.grid.resolution, "grid.resolution")


def scatter_cap(config: Config, spread: float) -> tuple[int, int, int] | None:
    """The finest resolution of the schedule (the start included) whose voxel is at least
    `spread` / sdf.scatter_voxels, or None when that is the final one (or the cap is off)."""
    ratio, t = config.sdf.scatter_voxels, config.train
    if not ratio:
        return None
    bounds = config.grid.bounds
    stages = [config.grid.resolution, *t.upsample_resolutions]
    sizes = [as_resolution(r, "train.upsample_resolutions") for r in stages]
    kept = [r for r in sizes if spread <= ratio * voxel_size(r, bounds)]
    cap = kept[-1] if kept else sizes[0]
    return None if cap == sizes[-1] else cap


def load_points(config: Config, device: torch.device | None = None) -> PointCloud:
    """The oriented points of `[points]` (on `device`, default the CPU): drawn on the
    shape or read from the file, refused (naming the key or the file) when any lies
    outside `grid.bounds`; with `points.normals = "estimate"` their normals estimated
    (`normals.estimate_normals`; `cloud.report` says how)."""
    p = config.points
    estimate = p.normals == "estimate"
    if p.kind == "file":
        cloud = read_point_cloud(p.path, normals=not estimate)
    else:
        gen = torch.Generator().manual_seed(p.seed)
        cloud = sample_surface(p.kind, shape_params(p), p.count, gen)
    check_inside(cloud, config.grid.bounds, p.path if p.kind == "file" else "")
    cloud = cloud.to(device or torch.device("cpu"))
    if p.denoise:
        moved, spread = project_to_surfaces(cloud.points, knn(cloud.points, p.denoise)[0])
        shift = (moved - cloud.points).norm(dim=1)
        report = {"points_spread_median": spread.median().item()}
        report["points_spread_quartile"] = spread.quantile(0.25).item()
        report["points_moved_median"] = shift.median().item()
        cloud = PointCloud(moved, cloud.normals, {**(cloud.report or {}), **report})
    if estimate:
        given = cloud.normals if p.kind != "file" else None
        normals, report = estimate_normals(cloud.points, config.grid.bounds, p.normal_neighbours)
        if given is not None:  # a shape: how far from the exact normals
            report.update(normal_agreement(normals, given))
        cloud = PointCloud(cloud.points, normals, {**(cloud.report or {}), **report})
    return cloud


#: Below this many input points per voxel they occupy at the final resolution the points,
#: not the grid, bound the fit: 100k points of a scan are 3.0 per voxel at 128^3, where the
#: fit reaches the grid's exact-SDF limit, and 1.4 at 256^3, where it stays 1.2-1.9x above
#: it until 400k points (bench/NOTES.md, "S1 at 256^3: the points' density").
SPARSE_POINTS = 2.0


def points_per_voxel(points: Tensor, resolution: tuple[int, int, int], bounds: list) -> float:
    """len(points) over the number of cells of a grid of `resolution` nodes over `bounds`
    ([[x0, y0, z0], [x1, y1, z1]]) that hold at least one of them; points: [N, 3]."""
    lo, hi = torch.tensor(bounds, dtype=points.dtype, device=points.device).unbind(0)
    cells = torch.tensor(resolution, device=points.device) - 1  # [3] cells per axis
    index = ((points - lo) / (hi - lo) * cells).long().clamp(min=0).minimum(cells - 1)
    key = (index[:, 0] * cells[1] + index[:, 1]) * cells[2] + index[:, 2]
    return len(points) / max(torch.unique(key).numel(), 1)


#: The points init measures distances to at most this many of the points (a random subset)
INIT_POINTS = 1 << 15
#: ... and signs each voxel by this many nearest points,
INIT_NEIGHBOURS = 8
#: or, beyond this many voxels from every point, by the winding number of this many.
FAR_VOXELS = 2.0
WINDING_POINTS = 2048


@torch.no_grad()
def points_init(model: VoxelGrid, cloud: PointCloud, gen: torch.Generator) -> None:
    """Set every voxel to its distance to the nearest point of the cloud, negative where
    it is inside the surface.

    Near the points (within FAR_VOXELS voxels), inside means behind its nearest points: the
    mean over the INIT_NEIGHBOURS nearest points of (x - p) . n is negative (the nearest
    point alone fails near corners, where a far voxel's nearest point can lie on a face that
    the voxel is behind although it is outside). Farther away, where a scan's hole or
    unscanned side leaves the nearest points' normals facing any way, inside means a
    winding number above 1/2 (train/sdf/winding.py, of WINDING_POINTS of the points): the
    surface closes across the hole as screened Poisson's does. The field then starts with
    the right sign everywhere, so no spurious surface has to be swept away where the points
    say nothing: a zero start leaves such sheets, a local minimum of the eikonal term.
    Measured against random subsets of the points (`gen`), by brute force in chunks (the
    start grid is coarse)."""
    points, normals = cloud.points, cloud.normals
    if len(cloud) > INIT_POINTS:
        pick = torch.randperm(len(cloud), generator=gen, device=gen.device)[:INIT_POINTS]
        points, normals = points[pick.to(points.device)], normals[pick.to(points.device)]
    lo, hi = model.bounds.tolist()
    axes = [
        torch.linspace(a, b, n, device=points.device)
        for a, b, n in zip(lo, hi, model.resolution, strict=True)
    ]
    nodes = torch.stack(torch.meshgrid(*axes, indexing="ij"), dim=-1).reshape(-1, 3)
    values = torch.empty(nodes.shape[0], device=points.device)
    k = min(INIT_NEIGHBOURS, len(points))
    for start in range(0, nodes.shape[0], 1 << 16):
        x = nodes[start : start + (1 << 16)]  # [C, 3]
        distance, side = nearest_side(x, points, normals, k)  # [C, k], [C]
        values[start : start + len(x)] = torch.where(side < 0, -distance[:, 0], distance[:, 0])
    far = values.abs() > FAR_VOXELS * voxel_size(model.resolution, [lo, hi])
    if far.any() and len(points) > 2:
        few = torch.randperm(len(points), generator=gen, device=gen.device)[:WINDING_POINTS]
        few = few.to(points.device)
        p, n = points[few], normals[few]
        inside = winding_numbers(nodes[far], p, n, point_areas(p)) > 0.5
        values[far] = torch.where(inside, -values[far].abs(), values[far].abs())
    model.features.copy_(values.reshape(model.features.shape))


def voxel_size(resolution: tuple[int, int, int], bounds: list) -> float:
    """The largest side of a voxel of a grid of `resolution` over `bounds` (lo, hi)."""
    lo, hi = bounds
    return max((b - a) / (n - 1) for a, b, n in zip(lo, hi, resolution, strict=True))


def sdf_losses(
    model: VoxelGrid, surface: Tensor, normals: Tensor, uniform: Tensor, robust: float = 0.0
) -> tuple[Tensor, Tensor, Tensor]:
    """(surface, normal, eikonal) terms, each a mean, differentiable w.r.t. the grid.

    surface: [B, 3] points on the surface, normals: [B, 3] their unit normals, uniform:
    [E, 3] points in the box (E may be 0: the eikonal term is then 0); robust: the normal
    term's c^2 (`sdf.normal_robust`; 0: squares). One grid call for all points; the
    gradient w.r.t. the points keeps its graph (double backward)."""
    x = torch.cat([surface, uniform]).requires_grad_(True)
    f = model(x)[..., 0]  # [B + E]
    (g,) = torch.autograd.grad(f.sum(), x, create_graph=True)  # [B + E, 3]
    b = surface.shape[0]
    surface_term = f[:b].square().mean()
    residual = (g[:b] - normals).square().sum(dim=1)  # [B]
    if robust > 0:
        residual = robust * residual / (robust + residual)
    normal_term = residual.mean()
    if uniform.shape[0] == 0:
        return surface_term, normal_term, torch.zeros_like(surface_term)
    # sqrt(|g|^2 + tiny): |g| has no derivative at g = 0, where a zero grid starts
    length = (g[b:].square().sum(dim=1) + 1e-20).sqrt()
    return surface_term, normal_term, (length - 1).square().mean()


class SdfExperiment(GridSchedule, Experiment):
    """Fit a one-channel VoxelGrid to the points of `config.points` (module docstring)."""

    unit = "points"
    eval_name = "surface"
    train_metric = "train_loss"

    def __init__(
        self,
        config: Config,
        device: torch.device,
        gen: torch.Generator,
        resolution: tuple[int, int, int] | None,
        world: World = SINGLE,
    ) -> None:
        c = self.config = config
        self.device, self.gen, self.world = device, gen, world
        if c.train.eikonal_points % world.size:
            raise ConfigError(
                f"train.eikonal_points: {plural(c.train.eikonal_points, 'point')} "
                f"{'does' if c.train.eikonal_points == 1 else 'do'} not split into "
                f"{world.size} equal shares (torchrun started {world.size} processes)"
            )
        # this rank's rows of every batch (all of them in a single process)
        self.rows = world.share(c.train.batch_size)
        self.uniform_rows = world.share(c.train.eikonal_points)
        self.lo, self.hi = torch.tensor(c.grid.bounds, device=device).unbind(0)
        self.cloud = load_points(c, device)
        if c.points.normals == "estimate" and world.is_main and c.output.progress:
            r = self.cloud.report
            print(
                f'points.normals = "estimate": {plural(len(self.cloud), "normal")} by PCA over '
                f"{plural(c.points.normal_neighbours, 'neighbour')}; oriented from outside "
                f"{100 * r['oriented_from_outside']:.1f}%, by their neighbours "
                f"{100 * r['oriented_by_neighbours']:.1f}%, away from the centroid "
                f"{100 * r['oriented_by_centroid']:.1f}%"
                + (
                    f"; against the exact normals: {r['normals_error']:.2f} deg, "
                    f"{100 * r['normals_flipped']:.2f}% flipped"
                    if "normals_error" in r
                    else ""
                ),
                file=sys.stderr,
            )
        res = final_resolution(c)
        spread = (self.cloud.report or {}).get("points_spread_quartile")
        # a multires field has no upsamples to stop (sdf.encoding)
        self.multires = c.sdf.encoding == "multires"
        self.cap = None if spread is None or self.multires else scatter_cap(c, spread)
        if self.cap is not None:
            if world.is_main:
                print(
                    f"note: the points scatter {spread:.2e} (lower quartile of their "
                    f"neighbourhood planes' spread), {spread / voxel_size(res, c.grid.bounds):.2f}"
                    f" voxels at {'x'.join(map(str, res))}: the grid stops at "
                    f"{'x'.join(map(str, self.cap))}, where it does not follow the noise "
                    f"(sdf.scatter_voxels = {c.sdf.scatter_voxels:g}; 0 refines as scheduled)",
                    file=sys.stderr,
                )
            res = self.cap
        self.points_per_voxel = points_per_voxel(self.cloud.points, res, c.grid.bounds)
        if self.points_per_voxel < SPARSE_POINTS and world.is_main:
            print(
                f"note: {plural(len(self.cloud), 'point')} "
                f"{'is' if len(self.cloud) == 1 else 'are'} {self.points_per_voxel:.1f} per voxel "
                f"they occupy at {'x'.join(map(str, res))}: the points, not the grid, limit the "
                f"surface's detail (from about {SPARSE_POINTS:.0f} a voxel the grid does); more "
                "points or a coarser grid",
                file=sys.stderr,
            )
        self.interpolation = c.grid.interpolation
        self.label = f"sdf {c.points.kind}"
        self.evaluation = Evaluation(c, self.cloud, res, device, world)
        torch.manual_seed(c.seed)
        self.model = (self.make_multires if self.multires else self.make_grid)(resolution)
        self.graphed = use_graphs(c, device)  # steps as CUDA graph replays (train/step_graph.py)
        if self.multires:
            self.optimizer = multires_optimizer(self.model, self.group_rates(0), c, self.graphed)
        else:
            self.optimizer = make_optimizer(self.model, c, self.graphed)
        self.terms = torch.zeros(3)  # the last batch's (surface, normal, eikonal) terms
        self.bar_terms = LaggedValues()  # read for the progress bar without a synchronisation
        self.last: tuple[Any, dict[str, Any]] | None = None  # (grid state, evaluation)
        self.repairs: dict[str, int] = {}  # sdf.repair_signs: voxels turned at each upsample
        # (the points' areas, the side test's subset), drawn at the first repair
        self.repair_inputs: tuple[Tensor, Tensor] | None = None
        self.step = -1  # the step begin_step last began

    def make_grid(self, resolution: tuple[int, int, int] | None) -> VoxelGrid:
        """The dense field: one VoxelGrid at `resolution` (resuming) or grid.resolution,
        set by grid.init."""
        c = self.config
        model = VoxelGrid(
            resolution or as_resolution(c.grid.resolution, "grid.resolution"),
            1,
            c.grid.bounds,
            init="zeros" if c.grid.init == "points" else c.grid.init,
            init_scale=c.grid.init_scale,
            padding=c.grid.padding,
            interpolation=self.interpolation,
            device=self.device,
        )
        if c.grid.init == "points":
            points_init(model, self.cloud, torch.Generator().manual_seed(c.seed))
        return model

    def make_multires(self, resolution: tuple[int, int, int] | None) -> MultiresSdf:
        """sdf.encoding = "multires": the coarse grid at grid.resolution (whatever
        `resolution` a checkpoint recorded: the mesh's lattice) plus the decoded
        MultiresGrid of [multires] (train/sdf/multires_field.py)."""
        c = self.config
        base = self.make_grid(as_resolution(c.grid.resolution, "grid.resolution"))
        return multires_field(c, base, final_resolution(c))

    def group_rates(self, step: int) -> list[float]:
        """sdf.encoding = "multires": the learning rates of the optimiser's groups at `step`
        (the base grid's, then the table's and the decoder's), each decayed as train.lr."""
        c = self.config
        decay = learning_rate(c, step) / c.train.lr
        return [c.train.lr * decay, c.multires.lr * decay]

    def loss(self) -> tuple[Tensor, Tensor]:
        """(loss, loss): the weighted sum of the terms on this step's batch. The whole
        batch's random numbers are drawn on every rank; each keeps its rows."""
        t = self.config.train
        index = torch.randint(
            len(self.cloud), (t.batch_size,), generator=self.gen, device=self.device
        )[self.rows]
        uniform = uniform_points(t.eikonal_points, self.lo, self.hi, self.gen)[self.uniform_rows]
        # index_select: 4x faster than indexing on the CPU (0.44 -> 0.09 ms for 2 x 32k rows)
        points, normals = (
            x.index_select(0, index) for x in (self.cloud.points, self.cloud.normals)
        )
        terms = sdf_losses(self.model, points, normals, uniform, self.config.sdf.normal_robust)
        surface, normal, eikonal = terms
        if self.config.sdf.surface_units == "voxel":
            surface = surface / voxel_size(self.model.resolution, self.config.grid.bounds) ** 2
        loss = surface + t.normal_weight * normal + t.eikonal_weight * eikonal
        if t.tv_weight:
            loss = loss + t.tv_weight * self.model.total_variation()
        self.terms = torch.stack(terms).detach()
        return loss, loss.detach()

    def begin_step(self, step: int) -> None:
        self.step = step  # what evaluate() caches on
        if self.multires:
            set_group_rates(self.optimizer, self.group_rates(step))
            count = active_levels(self.config.multires, step)  # coarse to fine
            if self.model.encoding.active_levels != count:
                self.model.encoding.set_active_levels(count)
        else:
            super().begin_step(step)

    def upsample(self, resolution: tuple[int, int, int]) -> None:
        """To the schedule's next resolution, unless past the points' scatter cap; a
        multires field has nothing to refine (its mesh's lattice is the final resolution)."""
        if self.multires:
            return
        if self.cap is None or all(a <= b for a, b in zip(resolution, self.cap, strict=True)):
            super().upsample(resolution)
            if self.config.sdf.repair_signs:
                self.repair_signs()

    def repair_signs(self) -> None:
        """Turn the pockets of the wrong sign the new grid inherited (train/sdf/sign_repair.py)."""
        points, normals = self.cloud.points, self.cloud.normals
        if len(points) < 3:  # no winding number to judge by
            return
        if self.repair_inputs is None:
            # the same draw on every rank (the grids stay equal), apart from the batches' stream
            gen = torch.Generator().manual_seed(self.config.seed)
            subset = torch.randperm(len(points), generator=gen)[:INIT_POINTS]
            self.repair_inputs = point_areas(points), subset.to(points.device)
        areas, subset = self.repair_inputs
        values = self.model.features.data[..., 0]
        turned = repair_signs(values, self.model.bounds, points, normals, areas, subset)
        self.repairs["x".join(map(str, self.model.resolution))] = turned

    def loss_terms(self) -> dict[str, Tensor]:
        """The last batch's unweighted terms, to name one that goes non-finite."""
        return dict(zip(("surface", "normal", "eikonal"), self.terms.unbind(), strict=True))

    def progress(self, loss: float) -> dict[str, str]:
        surface, normal, eikonal = self.bar_terms.read(self.terms)
        return {
            "loss": f"{loss:.2e}",
            "f2": f"{surface:.1e}",
            "normal": f"{normal:.1e}",
            "eik": f"{eikonal:.1e}",
        }

    def evaluate(self, train_seconds: float) -> dict[str, Any]:
        # The summary evaluates the grid the last step's evaluation saw: measured once.
        # the step, not the grid's version counter: CUDA graph replays update the grid
        # without counting (train/step_graph.py)
        version = (self.step, self.model.resolution)
        if self.last is None or self.last[0] != version:
            bake = self.model.bake if self.multires else None
            self.last = (version, self.evaluation(self.model, self.interpolation, bake))
        return dict(self.last[1])

    def eval_line(self, quality: dict[str, Any]) -> str:
        return self.evaluation.line(quality)

    def state_dict(self) -> dict[str, Any]:
        return {"sign_repairs": dict(self.repairs)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.repairs = dict(state.get("sign_repairs", {}))

    def summary(self, common: dict[str, Any]) -> dict[str, Any]:
        c, e = self.config, self.evaluation
        quality = self.evaluate(common["train_seconds"])
        mesh = e.mesh
        return {
            **quality,
            "steps": common["steps"],
            "seconds": common["seconds"],
            "train_seconds": common["train_seconds"],
            "points_per_second": common["per_second"],
            "device": common["device"],
            "points": c.points.kind if c.points.kind != "file" else c.points.path,
            "point_count": len(self.cloud),
            "points_per_voxel": self.points_per_voxel,  # at the final resolution
            "reference": e.reference,
            "normals": c.points.normals,
            **(self.cloud.report or {}),
            "band": e.band,
            "box_size": e.box_size,
            "interpolation": self.interpolation,
            "resolution": list(self.model.resolution),
            "scatter_cap": None if self.cap is None else list(self.cap),  # sdf.scatter_voxels
            "sign_repairs": dict(self.repairs),  # sdf.repair_signs: voxels turned, per upsample
            "encoding": c.sdf.encoding,
            "parameters": sum(p.numel() for p in self.model.parameters()),
            "batch_size": c.train.batch_size,
            "eikonal_points": c.train.eikonal_points,
            "processes": common["processes"],
            "mesh_vertices": len(mesh.vertices) if mesh is not None else None,
            "mesh_faces": len(mesh.faces) if mesh is not None else None,
            **{f"{k}_seconds": v for k, v in e.seconds.items()},  # the last evaluation's
            "torch": common["torch"],
            "grid_ops": common["grid_ops"],
        }

    def write_files(self, out: Path, summary: dict[str, Any]) -> None:
        """mesh.ply, the last evaluation's zero level set (with output.mesh)."""
        if self.config.output.mesh:
            path = out / "mesh.ply"
            with writing(path, remove=path):
                write_ply(path, self.evaluation.mesh or Mesh.empty())

    def write_pictures(self, out: Path, records: list[dict], summary: dict[str, Any]) -> None:
        from .pictures import write_pictures

        write_pictures(out, self.config, self.evaluation.mesh, records, summary)
