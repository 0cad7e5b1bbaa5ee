"""A signed distance run in `grid-train view`: its zero level set as a mesh (marching
cubes on the checkpoint's grid, as the run's own mesh.ply), and the grid's slices
(`train.field.view.SliceView`: blue inside, red outside). A multires field
(`sdf.encoding`) is shown sampled on its mesh's lattice."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from grid.voxel_grid import VoxelGrid

from ..field.view import SliceView, load_grid, load_weights
from ..mesh.level_set import zero_level_set
from ..schema import as_resolution
from .multires_field import multires_field


def load_sdf_grid(out: Path, config: Any, checkpoint: dict[str, Any], device):
    """The checkpoint's field as a VoxelGrid: the grid itself, or with `sdf.encoding =
    "multires"` the field sampled on its mesh's lattice (`MultiresSdf.bake`); InputFileError
    naming the checkpoint when it does not fit its config."""
    if config.sdf.encoding != "multires":
        return load_grid(out, config, checkpoint, device)
    g = config.grid
    base = VoxelGrid(
        as_resolution(g.resolution, "grid.resolution"),
        1,
        g.bounds,
        init="zeros",
        padding=g.padding,
        device=device,
    )
    field = multires_field(config, base, tuple(checkpoint["resolution"]))
    return load_weights(field, checkpoint, out).eval().bake()


class SdfView:
    """`ExperimentSpec.view` of the sdf experiment (see the module docstring)."""

    def __init__(self, server, out: Path, config: Any, checkpoint: dict[str, Any], options):
        self.server, self.out, self.device = server, out, options.device
        model = load_sdf_grid(out, config, checkpoint, self.device)
        self.show_mesh(model, config)
        self.slices = SliceView(server, config, model, cmap="RdBu_r", symmetric=True)

    def show_mesh(self, model, config: Any) -> None:
        mesh = zero_level_set(model, config.grid.interpolation)
        if len(mesh.faces) == 0:
            self.server.scene.remove_by_name("/mesh")
            return
        self.server.scene.add_mesh_simple(
            "/mesh",
            mesh.vertices.astype(np.float32),
            mesh.faces.astype(np.uint32),
            color=(200, 200, 200),
            side="double",
        )

    def update(self, config: Any, checkpoint: dict[str, Any]) -> None:
        model = load_sdf_grid(self.out, config, checkpoint, self.device)
        self.show_mesh(model, config)
        self.slices.update(model)

    def close(self) -> None:
        self.slices.close()
        self.server.scene.remove_by_name("/mesh")


def open_view(server, out: Path, config: Any, checkpoint: dict[str, Any], options) -> SdfView:
    """`ExperimentSpec.view`'s entry point (see `train.viewer.server`)."""
    return SdfView(server, out, config, checkpoint, options)
