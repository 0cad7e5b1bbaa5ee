"""A trained radiance field's surface as a mesh: `python -m train.export --out RUN`.

    python -m train.export --out runs/nerf_scene [--level 0.5] [--resolution 256] [--colors]
                           [--mesh PATH]

* Surface: the level set where the density's alpha over one training sample step is
  `--level` (default 0.5: a sample there lets half the light through), i.e.
  `1 - exp(-sigma * interval) = level` with the model's own `interval` (`VoxelNeRF.alpha`).
  Since the model interpolates the raw density before its activation, that is the level
  set `raw = raw_level` of the trilinear raw grid: marching cubes (the one the sdf experiment
  uses too, `train.mesh.level_set.zero_level_set`) on `raw_level - raw` puts each vertex on
  a voxel edge exactly where the trained field has alpha = level (but the few it adds
  inside ambiguous cells, the mean of their edge vertices), with normals pointing out of
  the dense region and triangles wound outwards.
* `--resolution R`: march on R^3 samples of the trained field (trilinear between its
  voxels) instead of its own voxels, for a finer or coarser mesh.
* `--colors`: vertex colours (PLY red, green, blue) from the colour grid and MLP, seen
  along the surface normal (view direction = -normal, a camera facing the surface).
* Output: `RUN/mesh.ply` (or `--mesh PATH`), binary PLY with normals, in the world
  coordinates of the poses (`grid.bounds`).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import ConfigError, InputFileError, plural

# torch and the model are imported where they are used: `python -m train.export --help`
# reads `add_arguments` without them (0.1 s instead of 1.5 s on 2 cores)
if TYPE_CHECKING:
    import torch

    from .model.voxel_nerf import VoxelNeRF

DEFAULT_LEVEL = 0.5
MESH = "mesh.ply"


def add_arguments(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--level",
        type=float,
        default=DEFAULT_LEVEL,
        help="alpha over one training sample step at the surface, in (0, 1) (default 0.5)",
    )
    group.add_argument(
        "--resolution",
        type=int,
        metavar="R",
        help="march on R^3 samples of the field (default: the model's own voxels)",
    )
    group.add_argument(
        "--colors", action="store_true", help="vertex colours from the colour field and MLP"
    )
    group.add_argument("--mesh", type=Path, help=f"the PLY to write (default RUN/{MESH})")


def export(out: Path, config: Any, checkpoint: dict[str, Any], args: argparse.Namespace) -> str:
    """Write the mesh of the run in `out` (see the module docstring); returns what it wrote.

    Raises ConfigError naming the option for a bad value, InputFileError when the checkpoint's
    model does not fit its config. Needs no optional package (marching cubes is grid's own).
    """
    from ..mesh.triangles import write_ply

    if not 0 < args.level < 1:
        raise ConfigError(f"--level: expected a number in (0, 1), got {args.level}")
    if args.resolution is not None and args.resolution < 2:
        raise ConfigError(f"--resolution: expected an integer >= 2, got {args.resolution}")
    model = load_model(config, checkpoint, out)
    mesh = density_mesh(model, args.level, args.resolution)
    colors = vertex_colors(model, mesh.vertices, mesh.normals) if args.colors else None
    path = args.mesh or out / MESH
    path.parent.mkdir(parents=True, exist_ok=True)
    write_ply(path, mesh, colors)
    what = "vertex colours, " if args.colors else ""
    return (
        f"wrote {path}: {len(mesh.vertices)} "
        f"{'vertex' if len(mesh.vertices) == 1 else 'vertices'}, "
        f"{plural(len(mesh.faces), 'triangle')} "
        f"({what}alpha {args.level:g} per sample step of the step-{checkpoint['step']} field)"
    )


def load_model(
    config: Any, checkpoint: dict[str, Any], out: Path, device: torch.device | None = None
) -> VoxelNeRF:
    """The trained VoxelNeRF of a nerf checkpoint, on `device` (default the CPU), in eval
    mode; InputFileError naming the checkpoint when it does not fit its config."""
    import torch

    from .experiment import final_resolution, make_model

    resolution = tuple(checkpoint["resolution"])
    model = make_model(
        config,
        resolution,
        final_resolution(config),
        backend=config.grid.backend,
        device=device or torch.device("cpu"),
    )
    try:
        model.load_state_dict(checkpoint["model"])
    except (RuntimeError, ValueError, KeyError) as error:
        problem = " ".join(str(error).split())
        path = out / "checkpoint.pt"
        raise InputFileError(path, f"does not fit its config ({problem})") from None
    return model.eval()


def raw_level(model: VoxelNeRF, level: float) -> float:
    """The raw density where alpha over the model's sample step is `level`:
    activate(raw) * interval = -log(1 - level)."""
    return model.raw_for(-math.log1p(-level) / model.interval())


def density_mesh(model: VoxelNeRF, level: float, resolution: int | None = None):
    """The `level` set of alpha (see `raw_level`) as a `train.mesh.triangles.Mesh` in world
    coordinates: marching cubes over the model's voxels, or over `resolution`^3 samples."""
    import torch

    with torch.no_grad():
        return _density_mesh(model, level, resolution)


def _density_mesh(model: VoxelNeRF, level: float, resolution: int | None):
    import torch

    from grid.voxel_grid import VoxelGrid

    from ..mesh.level_set import zero_level_set

    if resolution is None:
        raw = model.density_values().detach().float().cpu()  # [X, Y, Z]
    else:
        lo, hi = torch.tensor(model.bounds_list, dtype=torch.float32)
        axes = [torch.linspace(float(a), float(b), resolution) for a, b in zip(lo, hi, strict=True)]
        points = torch.stack(torch.meshgrid(*axes, indexing="ij"), dim=-1)  # [R, R, R, 3]
        flat = points.reshape(-1, 3)
        raw = torch.cat([model.density(c)[..., 0] for c in flat.split(1 << 18)])
        raw = raw.reshape(resolution, resolution, resolution)
    # negative where denser than the level, positive outside: normals and winding face out
    field = VoxelGrid(tuple(raw.shape), 1, model.bounds_list, init="zeros")
    field.features.data.copy_((raw_level(model, level) - raw.double()).float()[..., None])
    return zero_level_set(field, "linear")


def vertex_colors(model: VoxelNeRF, vertices: np.ndarray, normals: np.ndarray) -> np.ndarray:
    """[V, 3] uint8: the colour field at each vertex seen along -normal (a camera facing
    the surface); where a normal is unknown (zero), seen along -z."""
    import torch

    with torch.no_grad():
        return _vertex_colors(model, vertices, normals)


def _vertex_colors(model: VoxelNeRF, vertices: np.ndarray, normals: np.ndarray) -> np.ndarray:
    import torch

    out, chunk = np.zeros((len(vertices), 3), dtype=np.uint8), 1 << 16
    for start in range(0, len(vertices), chunk):
        points = torch.as_tensor(vertices[start : start + chunk], dtype=torch.float32)
        n = torch.as_tensor(normals[start : start + chunk], dtype=torch.float32)
        view = torch.where(n.norm(dim=-1, keepdim=True) > 0.5, -n, torch.tensor([0.0, 0.0, -1.0]))
        rgb = model.rgb(points, model.views(points, view))
        out[start : start + len(points)] = (rgb * 255 + 0.5).clamp(0, 255).byte().numpy()
    return out
