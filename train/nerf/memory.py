"""What a nerf run allocates, for the check before it starts (`train.memory`): its grids or
multires tables, the generated scene's training pixels, a step's samples."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..multires_config import table_need
from ..schema import Need, grid_need, largest_grid

if TYPE_CHECKING:
    from ..config import Config


def dense_needs(c: Config) -> list[Need]:
    """The dense grids and multires tables of `nerf.density_encoding` and `color_encoding`."""
    n = c.nerf
    dense_density, dense_color = n.density_encoding == "dense", n.color_encoding == "dense"
    if dense_density and dense_color:
        return [grid_need(c, 1 + n.color_features, "density and colour grids")]
    needs = []
    if dense_density:
        needs.append(grid_need(c, 1, "density grid"))
    else:
        needs.append(table_need(c.multires, "density's multires table"))
    if dense_color:
        needs.append(grid_need(c, n.color_features, "colour grid"))
    elif dense_density:  # a multires density's table gives the colour its features
        needs.append(table_need(c.multires, "colour's multires table"))
    return needs


#: Bytes per training pixel: its colour (12) in the loaded images and again on the
#: device, its ray's origin and direction (24).
PIXEL_BYTES = 48
#: Bytes per sample along a ray that every step allocates before empty space is
#: skipped: its ray index and position in the ray (16), distance (4), point (12), flags.
SAMPLE_BYTES = 40


def memory(c: Config) -> list[Need]:
    """What a nerf run allocates (see `train.memory`): the density and colour grids (or
    multires tables), the generated scene's training pixels (a scene of your own is not
    read before the check), the samples of a step's rays (about one per `nerf.step_ratio`
    voxels along the grid's longest side)."""
    d, n, t = c.data, c.nerf, c.train
    needs = dense_needs(c)
    if d.generate:
        side = d.scene_size // d.downscale
        pixels = d.scene_train_views * side * side
        needs.append(
            Need(
                "data.scene_size",
                f"{d.scene_train_views} training views of {side}x{side} pixels and their rays",
                pixels * PIXEL_BYTES,
            )
        )
    per_ray = int(max(largest_grid(c)[1]) / n.step_ratio)
    needs.append(
        Need(
            "train.batch_size",
            f"{t.batch_size} rays per step, about {per_ray} samples each",
            t.batch_size * per_ray * SAMPLE_BYTES,
        )
    )
    return needs
