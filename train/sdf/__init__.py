"""The sdf experiment: a signed distance grid fitted to an oriented point cloud.

Modules: `config` (the `[points]` table), `points` (point clouds: analytic shapes, files),
`experiment` (`SdfExperiment`: the surface, normal and eikonal losses), `evaluation`
(distances, normals, Chamfer), `pictures` (mesh.png, curves.png), `view` (the mesh and
slices in `grid-train view`). The meshes (marching cubes, PLY, exact point-to-mesh distances,
scores) are `train.mesh`'s, shared with the nerf experiment.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..dependencies import INSTALL_SDF, require
from ..multires_config import MultiresConfig
from ..schema import ExperimentSpec
from .config import POINTS_KIND_KEYS, PointsConfig, SdfConfig, memory, validate

if TYPE_CHECKING:
    from ..config import Config


def dependencies(config: Config) -> None:
    if config.output.mesh:
        # marching cubes is grid's own; scipy labels the sign islands (on the CPU), the
        # mesh's components and finds the Chamfer distances' nearest triangles (k-d trees)
        require(
            "scipy",
            key="output.mesh",
            needs="the mesh (mesh.ply, mesh.png: sign islands, components) and the Chamfer "
            "distances",
            install=INSTALL_SDF,
            turn_off="--set output.mesh=false",
        )
    p = config.points
    if p.kind == "file" and p.path.lower().endswith(".ply"):
        require(
            "plyfile",
            key="points.path",
            needs=".ply point clouds (use .npy or .xyz without it)",
            install=INSTALL_SDF,
        )


def validate_and_fit_box(config: Config, explicit: dict[str, set[str]]) -> None:
    """`config.validate`, then `points.fit_box`: grid.bounds becomes the cube around the
    file's points (`points.fitted_box`), before anything reads the box."""
    validate(config, explicit)
    p = config.points
    if p.kind == "file" and p.fit_box:
        from .points import fitted_box, read_point_cloud

        config.grid.bounds = fitted_box(read_point_cloud(p.path, normals=False).points)


SPEC = ExperimentSpec(
    name="sdf",
    summary="a signed distance grid from the oriented points of `[points]`",
    sections={"points": PointsConfig, "sdf": SdfConfig, "multires": MultiresConfig},
    validate=validate_and_fit_box,
    experiment="SdfExperiment",
    unit="points",
    files=("mesh.ply", "mesh.png"),
    kinded={"points": POINTS_KIND_KEYS},
    dependencies=dependencies,
    memory=memory,
    view="view",
)
