"""S1: surfaces from oriented points, side by side: our fit (the sdf experiment), Open3D's
screened Poisson reconstruction on the same points, and the exact-SDF limit of a grid of
the same resolution, all scored the same way against the true mesh.

    python bench/training/bench_sdf.py [--device cpu|cuda] [--resolutions 128] [--json PATH]
        [--scans bunny,armadillo,dragon | none] [--scans-from PATH] [--shapes torus,box]
        [--variants clean,noisy,uneven,holes,estimated] [--methods ours,poisson,limit]
        [--points 100000] [--config PATH] [--set key=value ...]

Inputs (bench/training/sdf_inputs.py): real scanned meshes from Debian's libcgal-demo package
(found where `apt-get install libcgal-demo` puts them, or --scans-from; a missing one
stops the bench, naming where it looked) and the synthetic shapes, each normalised into
[-1, 1]^3 (box size 2). On each, 100k points uniform by area with their face normals
(seeded), and the variants: noisy (0.2% of the box, 5 degrees), uneven (30% of the
surface keeps a tenth of its points), holes (three holes of radius 5% of the box),
estimated (the same points without normals: the fit estimates them, points.normals; the
Poisson row of this variant reconstructs from the same estimated normals).

Methods, one row each, scored by train/mesh/scoring.py (exact point-to-triangle distances
between 100k area samples of each mesh and the other: Chamfer-L1 over the box size, the
99th percentile of those distances, normal consistency, F-score at 0.5% of the box,
components, debris faces):

    ours     `python -m train` on the points: on the CPU configs/sdf_scan.toml (128^3;
             64 with --resolutions 64: a shorter schedule), on CUDA
             configs/sdf_scan_gpu.toml (256^3; 512 with the overrides of RESOLUTION_SETS);
             its training time is measured (train_seconds of summary.json)
    poisson  Open3D's screened Poisson reconstruction (depth --poisson-depth, 9), an
             optional bench dependency (`pip install open3d`); absent, the rows say so
    limit    marching cubes on the exact SDF of the true mesh sampled on the same grid
             (train/mesh/signed_distance.py; analytic for the shapes): the best a dense grid of
             that resolution can do (clean input only: it does not read the points)
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # the checkout: bench, grid, train
    sys.path.insert(0, str(ROOT))

# train first: it sets GOMP_SPINCOUNT before torch loads libgomp (train/__init__.py); the fits
# run in this process, and spinning threads made them ~20x slower beside another job
import train  # noqa: E402, F401, I001

import numpy as np  # noqa: E402
import torch  # noqa: E402

from bench.training.sdf_inputs import (  # noqa: E402
    BOX,
    BOX_SIZE,
    SCANS,
    SHAPES,
    VARIANTS,
    MissingInput,
    load_scan,
    oriented_points,
    shape_mesh,
    variant,
)

from grid.voxel_grid import VoxelGrid  # noqa: E402
from train.config import load_config  # noqa: E402
from train.mesh.distance import distance_to_mesh  # noqa: E402
from train.mesh.level_set import zero_level_set  # noqa: E402
from train.mesh.scoring import score_mesh  # noqa: E402
from train.mesh.signed_distance import grid_sdf  # noqa: E402
from train.mesh.triangles import Mesh, face_components  # noqa: E402
from train.shapes import Box, Sphere, Torus  # noqa: E402

#: The config of our fit per device, and the overrides for each resolution it runs at.
CONFIGS = {"cpu": ROOT / "configs/sdf_scan.toml", "cuda": ROOT / "configs/sdf_scan_gpu.toml"}
RESOLUTION_SETS: dict[int, list[str]] = {
    64: ["train.upsample_resolutions=[48, 64]", "train.steps=600"],
    128: [],
    256: [],
    512: [
        "train.upsample_steps=[150, 400, 600, 800]",
        "train.upsample_resolutions=[64, 128, 256, 512]",
    ],
}


def fit_ours(
    points: np.ndarray,
    normals: np.ndarray | None,
    resolution: int | None,
    device: str,
    config: Path,
    sets: list[str],
    work: Path,
) -> tuple[Mesh, dict[str, Any]]:
    """Our fit of the points (normals None: estimated by the fit) at `resolution`: its
    mesh and summary.json (train_seconds, seconds)."""
    from train.loop import run

    columns = points if normals is None else np.concatenate([points, normals], axis=1)
    np.save(work / "points.npy", columns.astype(np.float32))
    overrides = [
        "points.kind=file",
        f"points.path={work / 'points.npy'}",
        f"device={device}",
        "output.progress=false",
        "output.pictures=false",
        *RESOLUTION_SETS.get(resolution, []),
        *(["points.normals=estimate"] if normals is None else []),
        *sets,
    ]
    cfg = load_config(config, overrides)
    final = cfg.train.upsample_resolutions[-1] if cfg.train.upsample_resolutions else None
    final = final or cfg.grid.resolution
    if resolution is not None and final != resolution:
        raise SystemExit(
            f"bench_sdf: {config.name} with {RESOLUTION_SETS.get(resolution, [])} ends at "
            f"{final}, not {resolution}: give --set train.upsample_resolutions=..."
        )
    start = time.perf_counter()
    summary = run(cfg, work / "run", overwrite=True)
    summary["command_seconds"] = time.perf_counter() - start
    return read_ply_mesh(work / "run" / "mesh.ply"), summary


def read_ply_mesh(path: Path) -> Mesh:
    """The mesh.ply a run writes (`train.mesh.triangles.write_ply`: binary, vertices x y z nx ny
    nz as float, triangles as a uchar count and 3 ints), read with numpy alone."""
    data = path.read_bytes()
    end = data.index(b"end_header\n") + len(b"end_header\n")
    header = data[:end].decode("ascii").splitlines()
    count = {line.split()[1]: int(line.split()[2]) for line in header if line.startswith("element")}
    vertex = np.dtype([(n, "<f4") for n in ("x", "y", "z", "nx", "ny", "nz")])
    face = np.dtype([("count", "u1"), ("index", "<i4", (3,))])
    v = np.frombuffer(data, vertex, count["vertex"], end)
    f = np.frombuffer(data, face, count["face"], end + count["vertex"] * vertex.itemsize)
    vertices = np.stack([v["x"], v["y"], v["z"]], axis=1).astype(np.float64)
    return Mesh(vertices, f["index"].astype(np.int64), np.zeros_like(vertices))


def poisson(points: np.ndarray, normals: np.ndarray, depth: int) -> tuple[Mesh, float]:
    """Open3D's screened Poisson reconstruction (no density trimming): (mesh, seconds)."""
    import open3d as o3d

    cloud = o3d.geometry.PointCloud()
    cloud.points = o3d.utility.Vector3dVector(points.astype(np.float64))
    cloud.normals = o3d.utility.Vector3dVector(normals.astype(np.float64))
    start = time.perf_counter()
    mesh, _ = o3d.geometry.TriangleMesh.create_from_point_cloud_poisson(cloud, depth=depth)
    seconds = time.perf_counter() - start
    vertices = np.asarray(mesh.vertices, dtype=np.float64)
    return Mesh(vertices, np.asarray(mesh.triangles, dtype=np.int64), vertices * 0), seconds


def limit(name: str, truth: Mesh, resolution: int) -> tuple[Mesh, float]:
    """Marching cubes on the exact SDF on the grid (analytic for a shape): (mesh, s)."""
    start = time.perf_counter()
    model = VoxelGrid(resolution, 1, BOX, init="zeros")
    if name in SHAPES:
        lin = torch.linspace(-1, 1, resolution, dtype=torch.float64)
        nodes = torch.stack(torch.meshgrid(lin, lin, lin, indexing="ij"), dim=-1)
        shape = {
            "torus": Torus(0.55, 0.2, [0.0, 0.0, 0.0]),
            "sphere": Sphere(0.6, [0.0, 0.0, 0.0]),
            "box": Box([0.5, 0.35, 0.25], [0.0, 0.0, 0.0]),
        }[name]
        values = torch.cat([shape(x) for x in nodes.reshape(-1, 3).split(1 << 20)])
    else:
        values = torch.from_numpy(grid_sdf(truth, BOX, (resolution,) * 3))
    with torch.no_grad():
        model.features.copy_(values.reshape(model.features.shape))
    # not relaxed (sdf.relax): on a sampled exact SDF the interpolant's zero set inside the
    # cells lies off the surface (a sphere: faces' centres 21% farther), unlike a fitted one
    return zero_level_set(model, "linear"), time.perf_counter() - start


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--resolutions", default=None, help="default: 128 (cpu), 256 (cuda)")
    parser.add_argument("--scans", default=",".join(SCANS), help="names, .off paths, or none")
    parser.add_argument("--scans-from", default=None, help="CGAL data archive or folder")
    parser.add_argument("--shapes", default="torus,box", help="of torus, sphere, box; or none")
    parser.add_argument("--variants", default="clean", help=f"of {', '.join(VARIANTS)}")
    parser.add_argument("--methods", default="ours,poisson,limit")
    parser.add_argument("--points", type=int, default=100_000)
    parser.add_argument("--samples", type=int, default=100_000, help="area samples per mesh")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--poisson-depth", type=int, default=9)
    parser.add_argument("--config", type=Path, default=None, help="our fit's config")
    parser.add_argument("--set", action="append", default=[], help="override of our config")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--keep", type=Path, default=None, help="keep the run folders here")
    args = parser.parse_args(argv)
    default = {"cpu": "128", "cuda": "256"}[args.device]
    args.resolutions = [int(r) for r in (args.resolutions or default).split(",")]
    args.methods = args.methods.split(",")
    args.variants = args.variants.split(",")
    for v in args.variants:
        if v not in VARIANTS:
            parser.error(f"--variants: unknown {v!r}; expected of {', '.join(VARIANTS)}")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch.cuda.is_available() is False")
    args.config = args.config or CONFIGS[args.device]
    return args


def inputs(args: argparse.Namespace) -> list[tuple[str, Mesh]]:
    """(name, true mesh) of every scan and shape asked for (MissingInput if one lacks)."""
    out = []
    for name in [] if args.scans == "none" else args.scans.split(","):
        label = Path(name).stem if name.endswith(".off") else name
        out.append((label, load_scan(name, args.scans_from)))
    for shape in [] if args.shapes == "none" else args.shapes.split(","):
        out.append((shape, shape_mesh(shape, 256)))
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    methods = args.methods
    if "poisson" in methods:
        try:
            import open3d  # noqa: F401
        except ImportError as error:
            methods = [m for m in methods if m != "poisson"]
            print(
                f"bench_sdf: Open3D is not importable ({error}): no Poisson rows "
                f"(pip install open3d; its wheel needs Debian's libusb-1.0-0)",
                file=sys.stderr,
            )
    try:
        meshes = inputs(args)
    except MissingInput as error:
        print(f"bench_sdf: {error}", file=sys.stderr)
        return 2
    rows: list[dict[str, Any]] = []

    def add(row: dict[str, Any]) -> None:
        rows.append(row)
        print(line(row), flush=True)

    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp)
        for name, truth in meshes:
            score = Scorer(truth, args)
            clean = oriented_points(truth, args.points, args.seed)
            for res in args.resolutions:
                if "limit" in methods:
                    mesh, seconds = limit(name, truth, res)
                    add(score(mesh, name, "clean", res, "limit", seconds=seconds))
            for var in args.variants:
                points, normals = variant(*clean, var, args.seed + 1)
                # the input's own error: how far the (noisy) points lie from the true
                # surface, a floor no mesh through them goes below without smoothing
                error = float(distance_to_mesh(points, truth).mean()) / BOX_SIZE
                extra = {"points": len(points), "points_error": error}
                if var == "estimated":
                    agreement, estimate = estimated_normals(points, normals)
                    extra.update(agreement)
                    if "poisson" in methods:  # Poisson on the same estimated normals
                        mesh, seconds = poisson(points, estimate, args.poisson_depth)
                        method = f"poisson d{args.poisson_depth}"
                        add(score(mesh, name, var, None, method, seconds=seconds, **extra))
                elif "poisson" in methods:
                    mesh, seconds = poisson(points, normals, args.poisson_depth)
                    method = f"poisson d{args.poisson_depth}"
                    add(score(mesh, name, var, None, method, seconds=seconds, **extra))
                for res in args.resolutions if "ours" in methods else []:
                    work = root / f"{name}_{var}_{res}"
                    work.mkdir(parents=True, exist_ok=True)
                    given = None if var == "estimated" else normals
                    mesh, summary = fit_ours(
                        points, given, res, args.device, args.config, args.set, work
                    )
                    seconds, train = summary["command_seconds"], summary["train_seconds"]
                    add(score(mesh, name, var, res, "ours", seconds, train, **extra))
    print()
    print(table(rows))
    if args.json:
        meta = {"device": args.device, "config": str(args.config), "sets": args.set}
        args.json.write_text(json.dumps({**meta, "rows": rows}, indent=2) + "\n")
    return 0


def estimated_normals(points: np.ndarray, normals: np.ndarray) -> tuple[dict[str, Any], np.ndarray]:
    """How the normals our fit estimates (points.normals = "estimate") agree with the true
    ones (the same estimate, made here: it is deterministic), and the estimate [N, 3]
    (Poisson's row of the variant reconstructs from it)."""
    from train.sdf.normals import estimate_normals, normal_agreement

    start = time.perf_counter()
    estimate, report = estimate_normals(torch.from_numpy(points).float(), BOX)
    agreement = normal_agreement(estimate, torch.from_numpy(normals).float())
    seconds = time.perf_counter() - start
    return {**agreement, **report, "normals_seconds": seconds}, estimate.double().numpy()


class Scorer:
    """Scores meshes against one true mesh (train/mesh/scoring.py) into bench rows."""

    def __init__(self, truth: Mesh, args: argparse.Namespace) -> None:
        self.truth, self.args = truth, args
        self.components = len(face_components(truth.faces, len(truth.vertices))[1])

    def __call__(
        self,
        mesh: Mesh,
        name: str,
        var: str,
        res: int | None,
        method: str,
        seconds: float | None = None,
        train_seconds: float | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        a = self.args
        scores = score_mesh(
            mesh,
            self.truth,
            BOX_SIZE,
            samples=a.samples,
            seed=a.seed,
            true_components=self.components,
        )
        return {
            "input": name,
            "variant": var,
            "resolution": res,
            "method": method,
            **scores,
            "seconds": seconds,
            "train_seconds": train_seconds,
            **extra,
        }


def _f(value: Any, form: str) -> str:
    return "-" if value is None else format(value, form)


def line(r: dict[str, Any]) -> str:
    """One progress line of a row."""
    return (
        f"{r['input']:>10} {r['variant']:>9} {str(r['resolution'] or '-'):>4} "
        f"{r['method']:>10}  chamfer {_f(r['chamfer'], '.2e')}  "
        f"p99 {_f(r.get('distance_p99'), '.2e')}  "
        f"nc {_f(r['normal_consistency'], '.4f')}  F {_f(r['fscore'], '.4f')}  "
        f"comps {r['components']}  debris {r['debris_faces']}  "
        f"train {_f(r['train_seconds'], '.1f')} s  total {_f(r['seconds'], '.1f')} s"
        + (f"  normals {r['normals_error']:.2f} deg" if "normals_error" in r else "")
    )


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as a markdown table."""
    out = [
        "| input | variant | grid | method | Chamfer (box) | p99 (box) | normal consistency | "
        "F-score (0.5%) | components (true) | debris faces | training s | total s | "
        "points' error (box) |",
        "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        out.append(
            f"| {r['input']} | {r['variant']} | {r['resolution'] or '-'} | {r['method']} | "
            f"{_f(r['chamfer'], '.2e')} | {_f(r.get('distance_p99'), '.2e')} | "
            f"{_f(r['normal_consistency'], '.4f')} | "
            f"{_f(r['fscore'], '.4f')} | {r['components']} ({r['true_components']}) | "
            f"{r['debris_faces']} | {_f(r['train_seconds'], '.1f')} | {_f(r['seconds'], '.1f')} | "
            f"{_f(r.get('points_error'), '.2e')} |"
        )
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
