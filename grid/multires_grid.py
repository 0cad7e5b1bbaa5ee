"""`MultiresGrid`: a learnable multiresolution (dense + hashed) feature grid over a world box,
as an `nn.Module` beside `VoxelGrid` (instant-ngp's hash encoding, one fused op for all levels).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from ._checks import floating_dtype
from .boxes import _bounds
from .multires_ops import multires
from .reference import multires_level_is_dense

_MAX_LEVELS = 32
_MAX_RESOLUTION = 1 << 24


def _positive_int(name: str, value: object, upper: int | None = None) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name}: expected an int >= 1, got {value!r}")
    if upper is not None and value > upper:
        raise ValueError(f"{name}: expected an int in [1, {upper}], got {value!r}")
    return value


def level_resolutions(levels: int, base_resolution: int, growth_factor: float) -> list[int]:
    """Cells per axis of each level: floor(base_resolution * growth_factor^l), l = 0..L-1."""
    return [math.floor(base_resolution * growth_factor**level) for level in range(levels)]


class MultiresGrid(nn.Module):
    """A learnable multiresolution feature grid: world points `[..., 3]` -> `[..., L * F]`.

    L levels from `base_resolution` cells per axis, each `growth_factor` times finer
    (level l has floor(base_resolution * growth_factor^l) cells), each with F features
    per vertex in a table of `table_size` rows: stored densely where a level's vertices
    fit, hashed into the rows above (instant-ngp / tiny-cuda-nn's HashGrid). Every level
    is sampled in one fused `grid.multires` call (forward, backward to the table and the
    points, double backward). The box `bounds` maps onto the grids' [-1, 1]; points
    outside it read the box's surface (coordinates clamped, no gradient there).

    tiny-cuda-nn's HashGrid keys: n_levels -> `levels`, n_features_per_level ->
    `features`, log2_hashmap_size -> `table_size = 2 ** log2_hashmap_size`,
    base_resolution -> `base_resolution`, per_level_scale -> `growth_factor`. Unlike
    tiny-cuda-nn, the vertices of a level sit on the box's faces (align_corners) and
    a dense level uses (R + 1)^3 rows of its table.

    Args:
        levels: L in [1, 32].
        features: F per level (>= 1).
        table_size: T rows per level (< 2^31), e.g. 2**19.
        base_resolution: cells per axis of level 0 (>= 1).
        growth_factor: >= 1, the scale between consecutive levels.
        bounds: `((xmin, ymin, zmin), (xmax, ymax, zmax))` in world units, min < max.
        init_scale: the table is drawn from U(-init_scale, init_scale) (instant-ngp: 1e-4).
        dtype: table storage: float32 (default), float64, float16 or bfloat16 (half
            precision storage; points stay float32 and sums are float32).
        device: where the table lives.

    The table is one dense `nn.Parameter` whose rows that no point touched get an exact
    zero gradient, so `grid.MaskedAdam` updates only the touched rows.

    Attributes:
        table: `nn.Parameter` `[L, T, F]`.
        bounds: buffer `[2, 3]` (float32; float64 for a float64 table).
        resolutions: the L cells-per-axis counts.

    Examples:
        >>> import torch
        >>> import grid
        >>> enc = grid.MultiresGrid(levels=16, features=2, table_size=2**14,
        ...                         base_resolution=16, growth_factor=1.5)
        >>> enc.get_out_dim()
        32
        >>> enc(torch.rand(1024, 3) * 2 - 1).shape
        torch.Size([1024, 32])
    """

    table: nn.Parameter
    bounds: Tensor

    def __init__(
        self,
        levels: int = 16,
        features: int = 2,
        table_size: int = 2**19,
        base_resolution: int = 16,
        growth_factor: float = 2.0,
        bounds: Sequence[Sequence[float]] = ((-1.0, -1.0, -1.0), (1.0, 1.0, 1.0)),
        *,
        init_scale: float = 1e-4,
        dtype: torch.dtype | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        levels = _positive_int("levels", levels, _MAX_LEVELS)
        features = _positive_int("features", features)
        table_size = _positive_int("table_size", table_size, 2**31 - 1)
        base_resolution = _positive_int("base_resolution", base_resolution, _MAX_RESOLUTION)
        if not isinstance(growth_factor, int | float) or not growth_factor >= 1:
            raise ValueError(f"growth_factor: expected a number >= 1, got {growth_factor!r}")
        resolutions = level_resolutions(levels, base_resolution, float(growth_factor))
        if resolutions[-1] > _MAX_RESOLUTION:
            raise ValueError(
                f"growth_factor: the finest level would have {resolutions[-1]} cells per axis, "
                f"more than {_MAX_RESOLUTION}; use fewer levels or a smaller growth_factor"
            )
        lo, hi = _bounds(bounds)
        if not isinstance(init_scale, int | float) or not init_scale >= 0:
            raise ValueError(f"init_scale: expected a number >= 0, got {init_scale!r}")
        dtype = floating_dtype(dtype)
        self.resolutions = resolutions
        self.base_resolution = base_resolution
        self.growth_factor = float(growth_factor)
        self.init_scale = float(init_scale)
        self.table = nn.Parameter(
            torch.empty(levels, table_size, features, dtype=dtype, device=device)
        )
        self.reset_parameters()
        bounds_dtype = torch.float64 if dtype == torch.float64 else torch.float32
        self.register_buffer("bounds", torch.tensor([lo, hi], dtype=bounds_dtype, device=device))

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Re-draw the table from U(-init_scale, init_scale)."""
        self.table.uniform_(-self.init_scale, self.init_scale)

    def get_out_dim(self) -> int:
        """L * F, the size of the last dimension `forward` returns."""
        return self.table.shape[0] * self.table.shape[2]

    @property
    def dense_levels(self) -> int:
        """How many of the levels (the coarsest ones) are stored densely, not hashed."""
        T = self.table.shape[1]
        return sum(multires_level_is_dense(r, T) for r in self.resolutions)

    def extra_repr(self) -> str:
        L, T, F = self.table.shape
        lo, hi = self.bounds.tolist()
        fmt = ", ".join
        return (
            f"levels={L}, features={F}, table_size={T}, resolutions={self.resolutions[0]}.."
            f"{self.resolutions[-1]} (growth {self.growth_factor:g}, {self.dense_levels} dense), "
            f"bounds=(({fmt(f'{v:g}' for v in lo)}), ({fmt(f'{v:g}' for v in hi)})), "
            f"dtype={self.table.dtype}"
        )

    def _apply(self, fn, recurse=True):
        # Keep the box in float32 (float64 for a float64 table) when the module is cast to
        # half precision, as VoxelGrid does, so that the world-to-grid map keeps its accuracy.
        super()._apply(fn, recurse)
        if self.bounds.dtype in (torch.float16, torch.bfloat16):
            self.bounds = self.bounds.to(torch.float32)
        return self

    def normalize(self, xyz: Tensor) -> Tensor:
        """World points `[..., 3]` -> grid coordinates `[..., 3]`, the box mapped onto
        [-1, 1] (float32, or float64 for a float64 table)."""
        dtype = torch.float64 if self.table.dtype == torch.float64 else torch.float32
        lo, hi = self.bounds.to(dtype)
        scale = 2 / (hi - lo)
        return torch.addcmul(-lo * scale - 1, xyz.to(dtype), scale)

    def forward(self, xyz: Tensor) -> Tensor:
        """World points `[..., 3]` -> features `[..., L * F]` in the table's dtype
        (level l in columns l F .. l F + F - 1). Differentiable twice with respect to the
        table and the points."""
        if xyz.dim() < 1 or xyz.shape[-1] != 3:
            raise ValueError(f"xyz: expected shape [..., 3], got {list(xyz.shape)}")
        return multires(self.table, self.normalize(xyz), self.resolutions)
