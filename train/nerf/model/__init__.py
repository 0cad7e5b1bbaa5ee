"""The radiance field and what trains it: `VoxelNeRF` (two grids and a colour MLP), its
renderers, its losses, per-image appearance and the box it fits.

Modules: `voxel_nerf` (`VoxelNeRF`: the field, its `sigma_fn` and `rgb_fn`, coarse to fine),
`density_activation` (softplus or instant-ngp's trunc_exp), `grids` (the two grid backends:
`VoxelGrid` or DirectVoxGO's `ChannelsFirstGrid`; `mean_spacing`), `multires_fields`
(`MultiresDensity`: the density MLP over a `grid.MultiresGrid`, for `nerf.density_encoding =
"multires"`), `render` (`render_torch`, `render_fused`: bounded scenes), `render_contracted`
(unbounded scenes), `capacity` (the fused renderer's planned buffer sizes and the state they
hold for), `encoding` (the view direction's positional encoding), `linear` (the colour MLP's
layer), `color_mlp` (the colour MLP), `losses` (DirectVoxGO's auxiliary losses, view
consistency), `appearance` (per-image colour transforms), `fit_box` (the box the grids move
onto). How a ray's samples are coloured: `VoxelNeRF.fields` and `shade`.

Floors, lowest first: `encoding`, `linear`, `capacity`, `density_activation` -> `color_mlp`,
`render` -> `render_contracted`, `grids` -> `multires_fields` -> `voxel_nerf` -> `fit_box`,
`losses`. A renderer reads no model: the model hands it functions (`sigma_fn`, `rgb_fn`) and
plain values. This package imports `grid`, torch, `train.nerf.choices` and, for annotations
only, `train.nerf.config`; never the data, the scenes, the capture tools or the experiment.
The experiment, `export` and `view` import it.
"""

from .appearance import Appearance, color_correct, make_appearance
from .capacity import SampleCapacity, capacity_key, compact
from .color_mlp import color_mlp
from .encoding import positional_encoding
from .fit_box import box_resolution, surface_box
from .grids import ChannelsFirstGrid, make_grid, mean_spacing
from .linear import Linear
from .losses import auxiliary_losses
from .multires_fields import MultiresDensity
from .render import render_fused, render_outputs, render_torch
from .render_contracted import render_contracted
from .voxel_nerf import VoxelNeRF

__all__ = [
    "VoxelNeRF",
    "color_mlp",
    "mean_spacing",
    "capacity_key",
    "ChannelsFirstGrid",
    "MultiresDensity",
    "make_grid",
    "render_torch",
    "render_fused",
    "render_contracted",
    "render_outputs",
    "SampleCapacity",
    "compact",
    "positional_encoding",
    "Linear",
    "auxiliary_losses",
    "Appearance",
    "make_appearance",
    "color_correct",
    "surface_box",
    "box_resolution",
]
