"""Dense voxel feature grids for PyTorch: fused trilinear operators (CPU and CUDA), a
`VoxelGrid` module, and the pieces of a grid-based NeRF renderer (ray marching, an
occupancy grid, compositing of packed samples, a scene contraction for unbounded scenes).

    >>> import grid
    >>> grid.sample(features, points)  # features: [X, Y, Z, F], points: [..., 3] -> [..., F]
"""

from . import reference
from ._version import __version__
from .boxes import check_inside, lattice
from .channels import channels_first, channels_last
from .contraction import ContractedSamples, contract, sample_contracted, uncontract
from .marching_cubes import marching_cubes
from .occupancy import OccupancyGrid
from .ops import masked_adam_, sample, total_variation, total_variation_add_grad_, trilinear
from .optim import MaskedAdam
from .parameters import replace_data
from .rays import PackedSamples, RaySamples, march_rays, march_rays_static, ray_aabb
from .volrend import (
    accumulate_along_rays,
    composite,
    composite_rays,
    composite_weights,
    ray_weights,
)
from .voxel_grid import VoxelGrid

__all__ = [
    "VoxelGrid",
    "replace_data",
    "lattice",
    "check_inside",
    "sample",
    "trilinear",
    "channels_last",
    "channels_first",
    "total_variation",
    "total_variation_add_grad_",
    "masked_adam_",
    "MaskedAdam",
    "reference",
    "ray_aabb",
    "march_rays",
    "RaySamples",
    "march_rays_static",
    "PackedSamples",
    "OccupancyGrid",
    "marching_cubes",
    "composite_weights",
    "accumulate_along_rays",
    "composite",
    "composite_rays",
    "ray_weights",
    "contract",
    "uncontract",
    "sample_contracted",
    "ContractedSamples",
    "__version__",
]
