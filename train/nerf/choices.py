"""The names the nerf experiment's options choose from: one definition for the `[nerf]`
table's checks (`config`, which imports neither torch nor grid) and the model's
(`model.VoxelNeRF`). Imports nothing; anything in `train.nerf` may import it."""

from __future__ import annotations

#: Values of `grid.backend` for a `VoxelNeRF`: the library's `VoxelGrid`, or DirectVoxGO's
#: layout through `F.grid_sample` (`model.grids.ChannelsFirstGrid`).
BACKENDS = ("native", "grid_sample")
#: Values of `nerf.renderer`.
RENDERERS = ("auto", "fused", "torch")
#: Values of `nerf.contraction`: none, or one of `grid.contraction.KINDS`.
CONTRACTIONS = ("none", "sphere", "cube")
#: Values of `nerf.mlp_dtype`: the colour MLP's compute dtype (names of torch dtypes).
MLP_DTYPES = ("float32", "bfloat16")
#: Values of `nerf.density_encoding` and `nerf.color_encoding`: a dense `VoxelGrid`, or a
#: `grid.MultiresGrid` read through an MLP (`model.multires_fields`).
ENCODINGS = ("dense", "multires")
#: Values of `nerf.density_activation`: raw density -> density (`model.VoxelNeRF.activate`).
ACTIVATIONS = ("softplus", "exp")
#: Values of `nerf.view_encoding`: the colour MLP's view-direction encoding
#: (`model.encoding.encode_views`).
VIEW_ENCODINGS = ("frequencies", "sh")
