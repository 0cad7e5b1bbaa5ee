"""Dense voxel feature grids for PyTorch: fused trilinear operators (CPU and CUDA) and a
`VoxelGrid` module.

    >>> import grid
    >>> grid.sample(features, points)  # features: [X, Y, Z, F], points: [..., 3] -> [..., F]
"""

from . import reference
from ._version import __version__
from .ops import sample, total_variation, total_variation_add_grad_, trilinear
from .voxel_grid import VoxelGrid

__all__ = [
    "VoxelGrid",
    "sample",
    "trilinear",
    "total_variation",
    "total_variation_add_grad_",
    "reference",
    "__version__",
]
