"""A field run in `grid-train view`: the grid's slices, as coloured planes in the scene.

One plane normal to each axis, moved along it by a slider in the panel; the colour scale
is the range of the three middle slices (fixed while the sliders move, so colours compare,
set again for newer weights). `train.sdf.view` shows a signed distance run the same way,
with its mesh.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from grid.voxel_grid import VoxelGrid

from ..errors import InputFileError
from .pictures import AXES, slice_values

#: Samples along each side of a slice.
SLICE_PIXELS = 256


def load_grid(out: Path, config: Any, checkpoint: dict[str, Any], device: torch.device):
    """The VoxelGrid of a field or sdf checkpoint, on `device`; InputFileError naming the
    checkpoint when it does not fit its config."""
    g = config.grid
    model = VoxelGrid(
        tuple(checkpoint["resolution"]),
        1,
        g.bounds,
        init="zeros",
        padding=g.padding,
        interpolation=g.interpolation,
        device=device,
    )
    return load_weights(model, checkpoint, out).eval()


def load_weights(model: torch.nn.Module, checkpoint: dict[str, Any], out: Path):
    """`model` with the checkpoint's weights; InputFileError naming the checkpoint when they
    do not fit it (the run's config built another model)."""
    try:
        model.load_state_dict(checkpoint["model"])
    except (RuntimeError, ValueError, KeyError) as error:
        problem = " ".join(str(error).split())
        raise InputFileError(
            out / "checkpoint.pt", f"does not fit its config ({problem})"
        ) from None
    return model


def plane_rotation(axis: int) -> np.ndarray:
    """[3, 3]: columns (u, v, u x v), u and v the other two axes in xyz order: an image's
    x and y axes in the scene."""
    u, v = [a for a in range(3) if a != axis]
    e = np.eye(3)
    return np.stack([e[u], e[v], np.cross(e[u], e[v])], axis=1)


def colour(values: np.ndarray, lo: float, hi: float, cmap: str) -> np.ndarray:
    """values [H, W] -> [H, W, 3] uint8 through the matplotlib colour map on [lo, hi]."""
    from matplotlib import colormaps

    scaled = (values - lo) / max(hi - lo, 1e-12)
    return (colormaps[cmap](np.clip(scaled, 0, 1))[..., :3] * 255 + 0.5).astype(np.uint8)


def frame_box(server, bounds: list[list[float]]) -> None:
    """Start the browsers' cameras outside the box `bounds`, looking at its centre, z up."""
    lo, hi = np.array(bounds, dtype=np.float64)
    centre, radius = (lo + hi) / 2, float(np.linalg.norm(hi - lo)) / 2
    server.scene.set_up_direction("+z")
    server.initial_camera.position = tuple(centre + np.array([1.0, -1.0, 0.6]) * radius * 1.6)
    server.initial_camera.look_at = tuple(centre)
    server.initial_camera.up = (0.0, 0.0, 1.0)


class SliceView:
    """Three slice planes of a one-channel grid (see the module docstring).

    symmetric: the colour scale is [-m, m] (a signed distance: zero in the middle of
    `cmap`), else [min, max]."""

    def __init__(self, server, config: Any, model: VoxelGrid, *, cmap: str, symmetric: bool):
        self.server, self.model, self.cmap, self.symmetric = server, model, cmap, symmetric
        self.bounds = config.grid.bounds
        lo, hi = self.bounds
        frame_box(server, self.bounds)
        self.sliders = []
        with server.gui.add_folder("slices"):
            for axis in range(3):
                slider = server.gui.add_slider(
                    f"{AXES[axis]} =",
                    min=lo[axis],
                    max=hi[axis],
                    step=(hi[axis] - lo[axis]) / 200,
                    initial_value=(lo[axis] + hi[axis]) / 2,
                )
                slider.on_update(lambda _, axis=axis: self.draw(axis))
                self.sliders.append(slider)
        self.update(model)

    def update(self, model: VoxelGrid) -> None:
        """Newer weights: a new colour scale, every plane drawn again."""
        self.model = model
        middle = np.concatenate([self.values(axis, None).ravel() for axis in range(3)])
        if self.symmetric:
            limit = float(np.abs(middle).max()) or 1.0
            self.range = (-limit, limit)
        else:
            self.range = (float(middle.min()), float(middle.max()))
        for axis in range(3):
            self.draw(axis)

    def values(self, axis: int, at: float | None) -> np.ndarray:
        """[n (v), n (u)] the grid on the plane normal to `axis` at `at` (None: middle)."""
        device = self.model.features.device
        field = lambda p: self.model(p)[..., 0]  # noqa: E731
        return slice_values(field, axis, self.bounds, SLICE_PIXELS, device, at)[0]

    def draw(self, axis: int) -> None:
        import viser.transforms as tf

        at = float(self.sliders[axis].value)
        with torch.no_grad():
            image = colour(self.values(axis, at)[::-1], *self.range, self.cmap)  # row 0: top
        lo, hi = np.array(self.bounds)
        centre = (lo + hi) / 2
        centre[axis] = at
        u, v = [a for a in range(3) if a != axis]
        self.server.scene.add_image(
            f"/slices/{AXES[axis]}",
            image,
            render_width=float(hi[u] - lo[u]),
            render_height=float(hi[v] - lo[v]),
            format="png",
            wxyz=tf.SO3.from_matrix(plane_rotation(axis)).wxyz,
            position=centre,
        )

    def close(self) -> None:
        self.server.scene.remove_by_name("/slices")


class FieldView:
    """`ExperimentSpec.view` of the field experiment: the slices of the fitted grid."""

    def __init__(self, server, out: Path, config: Any, checkpoint: dict[str, Any], options):
        self.out, self.device = out, options.device
        from .config import SDF_KINDS

        model = load_grid(out, config, checkpoint, self.device)
        sdf = config.target.kind in SDF_KINDS  # signed distances: blue inside, red outside
        cmap = "RdBu_r" if sdf else "magma"
        self.slices = SliceView(server, config, model, cmap=cmap, symmetric=sdf)

    def update(self, config: Any, checkpoint: dict[str, Any]) -> None:
        self.slices.update(load_grid(self.out, config, checkpoint, self.device))

    def close(self) -> None:
        self.slices.close()


def open_view(server, out: Path, config: Any, checkpoint: dict[str, Any], options) -> FieldView:
    """`ExperimentSpec.view`'s entry point (see `train.viewer.server`)."""
    return FieldView(server, out, config, checkpoint, options)
