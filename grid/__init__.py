"""Dense voxel feature grids for PyTorch: fused trilinear operators (CPU and CUDA), a
`VoxelGrid` module, and the pieces of a grid-based NeRF renderer (ray marching, an
occupancy grid, compositing of packed samples, a scene contraction for unbounded scenes, the
view direction's spherical harmonics).

Examples:
    >>> import torch
    >>> import grid
    >>> features, points = torch.zeros(8, 8, 8, 4), torch.rand(100, 3) * 2 - 1
    >>> grid.sample(features, points).shape  # features: [X, Y, Z, F], points: [..., 3] -> [..., F]
    torch.Size([100, 4])
"""

from . import _backend, reference
from ._version import __version__
from .boxes import check_inside, lattice
from .channels import channels_first, channels_last
from .contraction import ContractedSamples, contract, sample_contracted, uncontract
from .directions import spherical_harmonics
from .marching_cubes import marching_cubes
from .multires_grid import MultiresGrid
from .multires_ops import multires
from .occupancy import OccupancyGrid
from .ops import masked_adam_, sample, total_variation, total_variation_add_grad_, trilinear
from .optim import Adam, MaskedAdam
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
    "build_info",
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
    "Adam",
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
    "spherical_harmonics",
    "__version__",
    "MultiresGrid",
    "multires",
]


def build_info() -> dict[str, str | bool]:
    """How the native ops were loaded: `source` is "installed" (the built `grid._C`) or "jit"
    (compiled from csrc/ at import, in a checkout without a build); `cuda_kernels` says whether
    the CUDA kernels are in it. Runs record it (summary.json's `grid_ops`).

    Examples:
        >>> import grid
        >>> info = grid.build_info()
        >>> info["source"] in ("installed", "jit"), isinstance(info["cuda_kernels"], bool)
        (True, True)
    """
    return {"source": _backend.source, "cuda_kernels": _backend.has_cuda_kernels}
