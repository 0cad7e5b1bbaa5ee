"""`MultiresGrid`: a learnable multiresolution (dense + hashed) feature grid over a world box,
as an `nn.Module` beside `VoxelGrid` (instant-ngp's hash encoding, one fused op for all levels).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

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


# ---- tiny-cuda-nn's grid encoding configs ----------------------------------------------

#: The keys of a tiny-cuda-nn grid encoding (include/tiny-cuda-nn/encodings/grid.h) we read.
_TCNN_KEYS = frozenset(
    {
        "otype",
        "type",
        "n_levels",
        "n_features",
        "n_grid_features",
        "n_features_per_level",
        "log2_hashmap_size",
        "base_resolution",
        "per_level_scale",
        "interpolation",
        "stochastic_interpolation",
        "hash",
        "n_dims_to_encode",
    }
)
_TCNN_OTYPES = {"hashgrid": "hash", "grid": "hash", "densegrid": "dense"}
_TCNN_TYPES = {"hash": "hash", "dense": "dense"}


def _tcnn_int(config: Mapping[str, Any], key: str, default: int, upper: int) -> int:
    value = config.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= upper:
        raise ValueError(f"{key}: expected an int in [1, {upper}], got {value!r}")
    return value


def _tcnn_name(config: Mapping[str, Any], key: str, default: str, allowed: Mapping) -> str:
    """A case-insensitive name (tiny-cuda-nn compares them so) mapped through `allowed`."""
    value = config.get(key, default)
    if not isinstance(value, str) or value.lower() not in allowed:
        raise ValueError(
            f"{key}: expected one of {sorted(allowed)} (case-insensitive), got {value!r}"
        )
    return allowed[value.lower()]


def _tcnn_levels(config: Mapping[str, Any], features: int) -> int:
    """n_levels, or n_features (n_grid_features) / n_features_per_level, as tiny-cuda-nn."""
    total_key = next((k for k in ("n_features", "n_grid_features") if k in config), None)
    if total_key is None:
        return _tcnn_int(config, "n_levels", 16, _MAX_LEVELS)
    if "n_levels" in config:
        raise ValueError(f"n_levels: give n_levels or {total_key}, not both")
    total = _tcnn_int(config, total_key, 32, _MAX_LEVELS * features)
    if total % features:
        raise ValueError(
            f"{total_key}: expected a multiple of n_features_per_level ({features}), got {total}"
        )
    return total // features


def tcnn_level_scales(levels: int, base_resolution: int, per_level_scale: float) -> list[float]:
    """tiny-cuda-nn's `grid_scale` of each level, base_resolution * per_level_scale^l - 1: the
    cells its level spans over the unit cube (it stores ceil(scale) + 1 vertices per axis)."""
    return [base_resolution * per_level_scale**level - 1 for level in range(levels)]


def _growth_reaching(base: int, level: int, cells: int) -> float:
    """The smallest growth factor g with floor(base * g^level) >= cells, in floating point."""
    g = (cells / base) ** (1 / level)
    while math.floor(base * g**level) < cells:
        g = math.nextafter(g, math.inf)
    return g


def _closest_levels(scales: Sequence[float]) -> tuple[int, float]:
    """Our (base_resolution, growth_factor) whose floor(base * growth^l) cells come closest to
    `scales`: the largest |log(ours / theirs)| over the levels, minimised over the bases
    around scales[0] and the growth factors that put some level exactly on its target
    rounded down or up. The first best candidate wins (deterministic)."""

    def worst(base: int, growth: float) -> float:
        ours = level_resolutions(len(scales), base, growth)
        return max(abs(math.log(r / s)) for r, s in zip(ours, scales, strict=True))

    candidates = []
    for base in sorted({max(1, math.floor(scales[0])), max(1, math.ceil(scales[0]) + 1)}):
        candidates.append((base, 1.0))
        for level, scale in enumerate(scales[1:], start=1):
            for cells in sorted({math.floor(scale), math.ceil(scale)}):
                if cells >= base:
                    candidates.append((base, _growth_reaching(base, level, cells)))
    return min(candidates, key=lambda c: worst(*c))


def _from_tcnn(config: Mapping[str, Any]) -> dict[str, Any]:
    """`MultiresGrid`'s levels, features, table_size, base_resolution and growth_factor for a
    tiny-cuda-nn HashGrid / Grid / DenseGrid encoding config (see `from_tcnn_config`)."""
    if not isinstance(config, Mapping):
        raise ValueError(f"config: expected a dict (a tiny-cuda-nn encoding), got {config!r}")
    unknown = sorted(set(config) - _TCNN_KEYS)
    if unknown:
        raise ValueError(
            f"{unknown[0]}: not a key of tiny-cuda-nn's grid encodings that this mapping "
            f"knows (unknown keys: {unknown}; known: {sorted(_TCNN_KEYS)})"
        )
    if "otype" not in config:
        raise ValueError(
            "otype: missing (tiny-cuda-nn has no default: HashGrid, Grid or DenseGrid)"
        )
    kind = _tcnn_name(config, "otype", "", _TCNN_OTYPES)
    kind = _tcnn_name(config, "type", kind, _TCNN_TYPES)
    _tcnn_name(config, "interpolation", "Linear", {"linear": "linear"})
    _tcnn_name(config, "hash", "CoherentPrime", {"coherentprime": "coherentprime"})
    if config.get("stochastic_interpolation", False) is not False:
        raise ValueError(
            f"stochastic_interpolation: expected false, got {config['stochastic_interpolation']!r}"
        )
    if config.get("n_dims_to_encode", 3) != 3:
        raise ValueError(f"n_dims_to_encode: expected 3, got {config['n_dims_to_encode']!r}")
    features = _tcnn_int(config, "n_features_per_level", 2, 2**20)
    levels = _tcnn_levels(config, features)
    log2_size = _tcnn_int(config, "log2_hashmap_size", 19, 30)
    base = _tcnn_int(config, "base_resolution", 16, _MAX_RESOLUTION)
    if base < 2:
        raise ValueError(
            f"base_resolution: expected an int >= 2 (tiny-cuda-nn's level 0 spans "
            f"base_resolution - 1 cells), got {base}"
        )
    # tiny-cuda-nn's default: 2 for a hash grid, 256 cells at the finest level for a dense one.
    default_scale = 2.0 if kind == "hash" else (256 / base) ** (1 / max(levels - 1, 1))
    scale = config.get("per_level_scale", default_scale)
    if not isinstance(scale, int | float) or isinstance(scale, bool) or not scale >= 1:
        raise ValueError(f"per_level_scale: expected a number >= 1, got {scale!r}")
    scales = tcnn_level_scales(levels, base, float(scale))
    if scales[-1] > _MAX_RESOLUTION:
        raise ValueError(
            f"per_level_scale: the finest level would span {scales[-1]:.0f} cells, more than "
            f"{_MAX_RESOLUTION}"
        )
    our_base, growth = _closest_levels(scales)
    table_size = 2**log2_size
    if kind == "dense":  # every level dense: the finest level's vertices fit its table
        finest = level_resolutions(levels, our_base, growth)[-1]
        table_size = (finest + 1) ** 3
        if table_size > 2**31 - 1:
            raise ValueError(
                f"per_level_scale: a dense finest level of {finest} cells needs "
                f"{table_size} rows, more than 2^31 - 1; use a HashGrid"
            )
    return {
        "levels": levels,
        "features": features,
        "table_size": table_size,
        "base_resolution": our_base,
        "growth_factor": growth,
    }


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
    `features`, log2_hashmap_size -> `table_size = 2 ** log2_hashmap_size`;
    base_resolution and per_level_scale give that library's levels base * scale^l - 1
    cells, so `MultiresGrid.from_tcnn_config` picks the `base_resolution` and
    `growth_factor` that come closest. Unlike tiny-cuda-nn, the vertices of a level sit
    on the box's faces (align_corners) and a dense level uses (R + 1)^3 rows of its
    table (docs/multires.md: every difference).

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

    Coarse to fine: `set_active_levels(k)` zeroes the features of levels k..L-1 (and so
    their table's gradients) until it is called again with a larger k, as Neuralangelo
    switches levels on during training; all L are active by default.

    Attributes:
        table: `nn.Parameter` `[L, T, F]`.
        bounds: buffer `[2, 3]` (float32; float64 for a float64 table).
        resolutions: the L cells-per-axis counts.
        active_levels: how many of the coarsest levels give features (the others give 0).

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
        # [L F]: 1 for the features of an active level, 0 above (updated in place, so a
        # captured CUDA graph that multiplies by it follows `set_active_levels`)
        ones = torch.ones(levels * features, dtype=dtype, device=device)
        self.register_buffer("level_mask", ones, persistent=False)
        self.active_levels = levels

    @torch.no_grad()
    def set_active_levels(self, count: int) -> None:
        """Only the `count` coarsest levels give features from now on (1 <= count <= L);
        the others give zeros, and their rows of the table get zero gradients."""
        L, _, F = self.table.shape
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= L:
            raise ValueError(f"count: expected an integer in [1, {L}] (the levels), got {count!r}")
        self.level_mask[: count * F] = 1
        self.level_mask[count * F :] = 0
        self.active_levels = count

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Re-draw the table from U(-init_scale, init_scale)."""
        self.table.uniform_(-self.init_scale, self.init_scale)

    @classmethod
    def from_tcnn_config(
        cls,
        config: Mapping[str, Any],
        bounds: Sequence[Sequence[float]] = ((0.0, 0.0, 0.0), (1.0, 1.0, 1.0)),
        **kwargs: Any,
    ) -> MultiresGrid:
        """A grid shaped by a tiny-cuda-nn grid encoding config (the dict given to
        `tcnn.Encoding(3, config)`): `otype` "HashGrid", "Grid" or "DenseGrid".

        Keys and tiny-cuda-nn's defaults where one is missing: `n_levels` (16; or
        `n_features` / `n_grid_features`, the levels times the features) -> `levels`;
        `n_features_per_level` (2) -> `features`; `log2_hashmap_size` (19) ->
        `table_size = 2 ** log2_hashmap_size`; `base_resolution` (16) and `per_level_scale`
        (2; a DenseGrid's: 256 cells at the finest level) -> `base_resolution` and
        `growth_factor`, chosen so that our levels' cells per axis, floor(base * growth^l),
        come as close as that formula allows to tiny-cuda-nn's, base_resolution *
        per_level_scale^l - 1 (its `grid_scale`; the largest ratio over the levels is
        minimised); `type` ("Hash", "Dense"), `interpolation` ("Linear"), `hash`
        ("CoherentPrime", the primes we use), `stochastic_interpolation` (false).
        A DenseGrid gets `table_size = (finest + 1)^3`, so that every level is dense.

        What stays different (docs/multires.md lists it with numbers): the vertices sit on
        the box's faces, where tiny-cuda-nn's are offset by half a cell per level; its
        level scales need not be integers, ours are, and need not be geometric, ours are
        (`tcnn_level_scales` gives its values, `resolutions` ours); points outside the box
        are clamped, where tiny-cuda-nn's wrap; every level holds T rows, where its dense
        levels hold only their vertices; the table is drawn from our own generator.

        Args:
            config: the encoding dict. Other values than those above (a TiledGrid,
                Smoothstep or Nearest interpolation, another hash, unknown keys) raise a
                `ValueError` naming the key; so do values our grid cannot hold (more than
                32 levels, log2_hashmap_size above 30, per_level_scale below 1).
            bounds: the world box that plays tiny-cuda-nn's unit cube (its inputs are in
                [0, 1]^3, the default).
            **kwargs: `init_scale`, `dtype`, `device`, as the constructor's.

        Examples:
            >>> import grid
            >>> ngp = {"otype": "HashGrid", "n_levels": 16, "n_features_per_level": 2,
            ...        "log2_hashmap_size": 15, "base_resolution": 16,
            ...        "per_level_scale": 1.3819}
            >>> enc = grid.MultiresGrid.from_tcnn_config(ngp)
            >>> enc.table.shape, enc.get_out_dim()
            (torch.Size([16, 32768, 2]), 32)
            >>> enc.resolutions[0], enc.resolutions[-1]  # cells per axis
            (15, 2105)
            >>> from grid.multires_grid import tcnn_level_scales
            >>> [round(s, 1) for s in tcnn_level_scales(16, 16, 1.3819)[::15]]  # tcnn's
            [15.0, 2046.7]
        """
        return cls(**_from_tcnn(config), bounds=bounds, **kwargs)

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
        out = multires(self.table, self.normalize(xyz), self.resolutions)
        if self.active_levels == self.table.shape[0]:
            return out
        return out * self.level_mask
