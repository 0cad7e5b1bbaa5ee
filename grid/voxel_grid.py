"""`VoxelGrid`: a learnable dense feature grid over a world-space box, as an `nn.Module`."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import ops
from ._checks import floating_dtype, plural
from .boxes import _bounds, _resolution, check_inside, lattice
from .ops import sample, total_variation, total_variation_add_grad_
from .parameters import replace_data
from .shape_rules import INTERPOLATIONS

INITS = ("zeros", "normal", "uniform")
PADDINGS = ("zeros", "border")
_HALF = (torch.float16, torch.bfloat16)


class VoxelGrid(nn.Module):
    """A learnable `[X, Y, Z, F]` feature grid over an axis-aligned world-space box.

    `forward` maps world points `[..., 3]` to trilinearly interpolated features
    `[..., F]` through the fused `grid.sample` operator. Voxel centres span the
    box exactly (align_corners=True): voxel `(0, 0, 0)` sits at `bounds[0]` and
    voxel `(X-1, Y-1, Z-1)` at `bounds[1]`, so the spacing along x is
    `(xmax - xmin) / (X - 1)`.

    Args:
        resolution: an int (a cube) or `(X, Y, Z)`; every size >= 2.
        features: F, the number of channels per voxel (>= 1).
        bounds: `((xmin, ymin, zmin), (xmax, ymax, zmax))` in world units, min < max.
        init: "uniform" (U(-init_scale, init_scale), the default, as tiny-cuda-nn),
            "normal" (N(0, init_scale^2)) or "zeros".
        init_scale: the half-width (uniform) or standard deviation (normal) of the init.
        padding: what points outside the box read: "zeros" (the default) or "border"
            (the value at the nearest point of the box).
        interpolation: "linear" (trilinear, the default) or "smoothstep" (the same eight
            voxels, each axis weighted by s(t) = t^2 (3 - 2t): a C1 field whose gradient
            is continuous across cells, e.g. for SDFs trained with an eikonal loss).
        dtype: the feature storage dtype: float32 (default), float64, or float16 /
            bfloat16 (half precision storage; coordinates stay float32).
        device: where the features live.

    Loading: `load_state_dict` (directly or through a parent module) adopts the
    saved grid's resolution, so a model rebuilt at its starting resolution loads a
    state saved after `upsample`. The `features` Parameter stays the same object and
    its data is resized in place, then the values and the bounds are copied. An
    optimiser holding state for the old shape is then stale (its next step fails on
    the shape): load the optimiser's saved state after the model's, as a checkpoint
    resume does (`model.load_state_dict(...)`, then `optimizer.load_state_dict(...)`).
    A saved grid with another feature count or dtype is refused with a message
    (cast first to load another dtype).

    Attributes:
        features: `nn.Parameter` `[X, Y, Z, F]`, channels last.
        bounds: buffer `[2, 3]` (min row, max row). It stays float32 (float64 for a
            float64 grid) when the module is cast to half precision, so world-to-grid
            mapping keeps its accuracy.

    Examples:
        >>> import torch
        >>> import grid
        >>> field = grid.VoxelGrid(16, 4, bounds=((-1.5, -1.5, -1.0), (1.5, 1.5, 1.0)))
        >>> field.features.shape  # [X, Y, Z, F]
        torch.Size([16, 16, 16, 4])
        >>> xyz = torch.rand(128, 32, 3) * 2 - 1  # [..., 3] world points
        >>> field(xyz).shape  # [..., F]
        torch.Size([128, 32, 4])
        >>> opt = torch.optim.Adam(field.parameters(), lr=1e-2)
        >>> field(xyz).square().mean().backward()
        >>> opt.step()
        >>> field.upsample(24, optimizer=opt)  # coarse to fine; Adam's moments follow
        >>> field.resolution, opt.state[field.features]["exp_avg"].shape
        ((24, 24, 24), torch.Size([24, 24, 24, 4]))
    """

    features: nn.Parameter
    bounds: Tensor

    def __init__(
        self,
        resolution: int | Sequence[int],
        features: int,
        bounds: Sequence[Sequence[float]] = ((-1.0, -1.0, -1.0), (1.0, 1.0, 1.0)),
        *,
        init: str = "uniform",
        init_scale: float = 1e-4,
        padding: str = "zeros",
        interpolation: str = "linear",
        dtype: torch.dtype | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        size = _resolution(resolution)
        if not isinstance(features, int) or isinstance(features, bool) or features < 1:
            raise ValueError(f"features: expected an int >= 1, got {features!r}")
        lo, hi = _bounds(bounds)
        if init not in INITS:
            raise ValueError(f"init: expected one of {', '.join(map(repr, INITS))}, got {init!r}")
        if not isinstance(init_scale, int | float) or not init_scale >= 0:
            raise ValueError(f"init_scale: expected a number >= 0, got {init_scale!r}")
        if padding not in PADDINGS:
            raise ValueError(
                f"padding: expected one of {', '.join(map(repr, PADDINGS))}, got {padding!r}"
            )
        if interpolation not in INTERPOLATIONS:
            raise ValueError(
                f"interpolation: expected one of {', '.join(map(repr, INTERPOLATIONS))}, "
                f"got {interpolation!r}"
            )
        dtype = floating_dtype(dtype)
        self.padding = padding
        self.interpolation = interpolation
        self.init = init
        self.init_scale = float(init_scale)

        data = torch.empty(*size, features, dtype=dtype, device=device)
        self.features = nn.Parameter(data)
        self.reset_parameters()
        bounds_dtype = torch.float64 if dtype == torch.float64 else torch.float32
        self.register_buffer("bounds", torch.tensor([lo, hi], dtype=bounds_dtype, device=device))

    # ---- shape and description ------------------------------------------------------

    @property
    def resolution(self) -> tuple[int, int, int]:
        """(X, Y, Z), the current number of voxels along each axis."""
        x, y, z, _ = self.features.shape
        return (x, y, z)

    def get_out_dim(self) -> int:
        """F, the size of the last dimension `forward` returns."""
        return self.features.shape[3]

    def extra_repr(self) -> str:
        lo, hi = self.bounds.tolist()
        fmt = ", ".join
        return (
            f"resolution={self.resolution}, features={self.get_out_dim()}, "
            f"bounds=(({fmt(f'{v:g}' for v in lo)}), ({fmt(f'{v:g}' for v in hi)})), "
            f"padding={self.padding!r}, interpolation={self.interpolation!r}, "
            f"dtype={self.features.dtype}"
        )

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Re-draw the features with the init chosen at construction."""
        if self.init == "zeros":
            self.features.zero_()
        elif self.init == "normal":
            self.features.normal_(0.0, self.init_scale)
        else:
            self.features.uniform_(-self.init_scale, self.init_scale)

    def _apply(self, fn, recurse=True):
        # Module.to(dtype) / .half() cast every floating buffer; keep the box in float32
        # so that, e.g., bounds of 0.3 do not become 0.2998 with a half precision grid.
        bounds = self.bounds
        super()._apply(fn, recurse)
        if self.bounds.dtype in _HALF:
            self.bounds = bounds.to(device=self.bounds.device, dtype=torch.float32)
        return self

    # ---- evaluation -------------------------------------------------------------------

    def _coordinate_dtype(self) -> torch.dtype:
        return torch.float64 if self.features.dtype == torch.float64 else torch.float32

    def normalize(self, xyz: Tensor) -> Tensor:
        """World points `[..., 3]` -> normalised grid coordinates `[..., 3]`, the box
        mapped onto [-1, 1] (float32, or float64 for a float64 grid)."""
        scale, shift = self._box_map()
        # one fused op: a call's host cost is per op, and it is most of a small call's time
        return torch.addcmul(shift, xyz.to(scale.dtype), scale)

    def _box_map(self) -> tuple[Tensor, Tensor]:
        """(scale [3], shift [3]) with `normalize(xyz) = xyz * scale + shift`:
        scale = 2 / (hi - lo), shift = -lo * scale - 1, in the coordinate dtype.

        Cached until `bounds` is replaced or modified in place (its version counter):
        deriving them costs several tensor ops, more than the sampling itself on small
        inputs. Computed afresh while compiling, where they fuse anyway.
        """
        bounds, dtype = self.bounds, self._coordinate_dtype()
        if torch.compiler.is_compiling():
            return _box_map(bounds.to(dtype))
        key = (bounds, bounds._version, dtype)
        cached = self.__dict__.get("_box_map_cache")
        if cached is None or cached[0][0] is not bounds or cached[0][1:] != key[1:]:
            with torch.no_grad():
                cached = (key, _box_map(bounds.to(dtype)))
            self.__dict__["_box_map_cache"] = cached
        return cached[1]

    def _box(self) -> list[float]:
        """`bounds` as the op's `bounds` argument, [xmin, ymin, zmin, xmax, ymax, zmax].

        Read from the buffer once and cached until `bounds` is replaced (`.to()`,
        `load_state_dict` with `assign=True`) or modified in place (its version counter),
        so a CUDA grid synchronises for it once, not per call: a CUDA graph captured after
        the first call replays with these numbers."""
        bounds = self._buffers["bounds"]
        cached = self.__dict__.get("_box_cache")
        if cached is not None and cached[0] is bounds and cached[1] == bounds._version:
            return cached[2]
        lo, hi = bounds.tolist()
        box = lo + hi
        self.__dict__["_box_cache"] = (bounds, bounds._version, box)
        return box

    def forward(self, xyz: Tensor) -> Tensor:
        """Interpolate the features at world points.

        One `grid.sample` call with the box as its `bounds`: the kernels map the world
        points onto the grid (the map and its gradient are `normalize`'s), so a call costs
        about what the op alone costs. Under torch.compile, `normalize` then `sample`
        (the compiler fuses the map with what produced the points).

        Args:
            xyz: `[..., 3]` world coordinates (x, y, z); any leading batch shape,
                including none (`[3]`) and empty (`[0, 3]`).

        Returns:
            `[..., F]` in the dtype of the features. Points outside the box read
            zeros (padding="zeros") or the nearest boundary value (padding="border").
            Twice differentiable with respect to the features and to `xyz` (e.g. an
            eikonal loss on `torch.autograd.grad(..., create_graph=True)`).
        """
        features = self._parameters["features"]
        if torch.compiler.is_compiling():
            _check_xyz(xyz)
            return sample(
                features,
                self.normalize(xyz),
                align_corners=True,
                padding=self.padding,
                interpolation=self.interpolation,
            )
        dtype = torch.float64 if features.dtype == torch.float64 else torch.float32
        if xyz.dtype != dtype:
            xyz = xyz.to(dtype)
        try:
            return ops._SAMPLE_ENTRY(
                features, xyz, True, self.padding, self.interpolation, self._box()
            )
        except RuntimeError:
            # The op refuses the same shapes; its message names `points`, ours `xyz`. Checked
            # here, on failure only: the check is a tenth of a tiny call's cost.
            _check_xyz(xyz)
            raise

    # ---- regularisation ---------------------------------------------------------------

    def total_variation(self) -> Tensor:
        """Smoothness penalty: the mean over the three axes of the mean squared
        difference between neighbouring voxels along that axis (and over features).

        Zero for a constant grid; differentiable; a float32 scalar (float64 for a
        float64 grid). Not normalised by the voxel spacing, as in DirectVoxGO. One fused
        native pass over the grid (`grid.total_variation`), and one for its gradient.
        """
        return total_variation(self.features)

    @torch.no_grad()
    def total_variation_add_grad(self, weight: float, *, value: bool = False) -> Tensor | None:
        """Add `weight * d total_variation() / d features` straight into `features.grad`.

        The same gradient as `(weight * grid.total_variation()).backward()`, without
        building a loss graph: one pass that reads the features and reads and writes
        their gradient (DirectVoxGO's `total_variation_add_grad`). Call it after the
        loss's `backward()` and before `optimizer.step()` (`zero_grad` would erase it);
        `features.grad` is created (zeros) if it is None.

        Args:
            weight: the regulariser's weight.
            value: also return the (unweighted) total variation, computed in the same
                pass; by default nothing is returned and no value is computed.

        Returns:
            The value as a [] tensor if `value`, else None.
        """
        param = self.features
        if param.grad is None:
            param.grad = torch.zeros_like(param, memory_format=torch.contiguous_format)
        return total_variation_add_grad_(param.grad, param, weight, compute_value=value)

    # ---- coarse to fine ---------------------------------------------------------------

    @torch.no_grad()
    def upsample(
        self,
        resolution: int | Sequence[int],
        optimizer: torch.optim.Optimizer | None = None,
        *,
        rescale_moments: bool = False,
    ) -> None:
        """Resample the grid to a finer resolution, keeping the represented function.

        The features are resampled trilinearly at the new voxel positions (same box,
        align_corners=True), so the new grid interpolates the old one: exact for a
        field that is linear in each cell, and in general the new grid's `forward`
        equals the old one's at every new voxel.

        The `nn.Parameter` object stays the same (its data is swapped in place), so
        every optimiser, hook or parameter list that holds it keeps pointing at the
        live parameter; an optimiser that holds it but is not passed here fails
        loudly at its next step (state shape mismatch) instead of silently
        optimising a stale tensor, as a new Parameter would.

        Args:
            resolution: the new `(X, Y, Z)` (or an int); no axis may shrink.
            optimizer: optional; its per-parameter state tensors shaped like the
                features (Adam's `exp_avg`, `exp_avg_sq`, `max_exp_avg_sq`, SGD's
                `momentum_buffer`, ...) are resampled the same way, so training goes
                on without resetting the optimiser. Second-moment states (names
                ending in `_sq`) stay non-negative: trilinear weights are convex.
            rescale_moments: also scale the moments to the new cell size. With
                uniformly drawn training points a voxel's gradient is proportional
                to its cell's volume, which shrinks by `r = old cells / new cells`;
                True multiplies first moments by `r` and second moments (`*_sq`) by
                `r^2` (Adam's m / sqrt(v) is unchanged). The default, False, only
                resamples them: then the larger old second moments damp the first
                fine steps. Measured on the default density experiment (32^3 ->
                64^3 -> 96^3, see docs/voxel-grid.md) the two end equal and plain resampling
                was slightly ahead just after each upsample, hence the default.
        """
        new = _resolution(resolution)
        old = self.resolution
        if any(n < o for n, o in zip(new, old, strict=True)):
            raise ValueError(
                f"resolution: expected no axis smaller than the current {old}, got {new}"
            )
        param = self.features
        ratio = math.prod(o - 1 for o in old) / math.prod(n - 1 for n in new)

        def resize(value: Tensor, second: bool) -> Tensor:
            resized = _resample(value, new)
            if second:
                resized.clamp_(min=0)
            if rescale_moments:
                resized.mul_(ratio**2 if second else ratio)
            return resized

        self._resize_state(optimizer, resize)
        replace_data(param, _resample(param.data, new))

    @torch.no_grad()
    def crop(
        self,
        bounds: Sequence[Sequence[float]],
        resolution: int | Sequence[int],
        optimizer: torch.optim.Optimizer | None = None,
    ) -> None:
        """Resample the grid onto a sub-box of its box, e.g. the region a coarse stage
        found occupied, so that the same voxel budget lands on it.

        The new voxels read the old grid trilinearly at their positions, so inside the
        new box the represented function is kept (exactly where it is linear in each
        old cell). Like `upsample`, the Parameter object stays the same and the
        optimiser's state tensors shaped like the features are resampled with it.

        Args:
            bounds: the new box `((xmin, ymin, zmin), (xmax, ymax, zmax))`, inside the
                current one (up to a rounding of 1e-6 of its size).
            resolution: the new `(X, Y, Z)` (or an int); any sizes >= 2.
            optimizer: optional, as in `upsample`.
        """
        new = _resolution(resolution)
        lo, hi = _bounds(bounds)
        box = torch.tensor([lo, hi], dtype=self.bounds.dtype, device=self.bounds.device)
        check_inside(box, self.bounds)
        points = lattice(box, new)  # [X', Y', Z', 3] world positions of the new voxels
        old = self._box()

        def resize(value: Tensor, second: bool) -> Tensor:
            dtype = torch.float64 if value.dtype == torch.float64 else torch.float32
            out = sample(value.to(dtype), points.to(dtype), padding="border", bounds=old)
            return out.to(value.dtype).contiguous()

        self._resize_state(optimizer, resize)
        replace_data(self.features, resize(self.features.data, False))
        self.bounds.copy_(box)

    @torch.no_grad()
    def add_(self, value: float | Tensor) -> None:
        """Add `value` (a number, or a [F] tensor: one per feature channel) to every voxel's
        features in place, outside autograd; the Parameter object stays. E.g. a density grid
        whose activation reads `raw + shift` lowered everywhere at once.

        Examples:
            >>> import grid
            >>> g = grid.VoxelGrid(2, 1, [[0, 0, 0], [1, 1, 1]], init="zeros")
            >>> g.add_(-0.5)
            >>> g.features.unique().tolist()
            [-0.5]
        """
        if isinstance(value, Tensor) and value.shape not in ((), (self.get_out_dim(),)):
            raise ValueError(
                f"value: expected a number or a [{self.get_out_dim()}] tensor, "
                f"got shape {list(value.shape)}"
            )
        self.features.add_(value)

    def _resize_state(self, optimizer, resize) -> None:
        """Replaces the optimiser's state tensors shaped like the features by
        `resize(tensor, second_moment)` (second moments: names ending in `_sq`)."""
        param = self.features
        if optimizer is not None:
            for group in optimizer.param_groups:
                if any(p is param for p in group["params"]):
                    break
            else:
                raise ValueError("optimizer: does not hold this grid's features parameter")
            state = optimizer.state.get(param, {})
            for key, value in state.items():
                if isinstance(value, Tensor) and value.shape == param.shape:
                    state[key] = resize(value, key.endswith("_sq"))

    # ---- loading ------------------------------------------------------------------------

    def _load_from_state_dict(
        self,
        state_dict: dict[str, Tensor],
        prefix: str,
        local_metadata: dict,
        strict: bool,
        missing_keys: list[str],
        unexpected_keys: list[str],
        error_msgs: list[str],
    ) -> None:
        """`load_state_dict` (also through a parent module) adopts the saved grid's
        resolution: the features parameter is resized in place (the same object, as
        `upsample` does) before the values and the bounds are copied. A saved grid
        with another feature count or dtype is an error, as is any other shape."""
        key = prefix + "features"
        saved = state_dict.get(key)
        assign = local_metadata.get("assign_to_params_buffers", False)
        if isinstance(saved, Tensor) and not assign:
            problem = self._saved_grid_problem(saved)
            if problem:
                error_msgs.append(f"{key}: {problem}")
                state_dict = {k: v for k, v in state_dict.items() if k != key}
            elif saved.shape != self.features.shape:
                empty = torch.empty(saved.shape, dtype=saved.dtype, device=self.features.device)
                replace_data(self.features, empty)
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )
        if key in missing_keys and saved is not None:
            missing_keys.remove(key)  # present, but refused above with its own message

    def _saved_grid_problem(self, saved: Tensor) -> str:
        """Why a saved `features` tensor cannot be loaded here ("" if it can)."""
        features, dtype = self.get_out_dim(), self.features.dtype
        if saved.dim() != 4 or min(saved.shape[:3]) < 2:
            return (
                f"expected a saved grid [X, Y, Z, F] with every size X, Y, Z >= 2, "
                f"got shape {list(saved.shape)}"
            )
        if saved.shape[3] != features:
            return (
                f"the saved grid has {plural(saved.shape[3], 'feature')} per voxel, this VoxelGrid "
                f"{features}; loading adopts another resolution, not another feature count"
            )
        if saved.dtype != dtype:
            return (
                f"the saved grid is {saved.dtype}, this VoxelGrid {dtype}; cast the module "
                f"(.to({saved.dtype})) or the saved tensor to match before loading"
            )
        return ""


def _check_xyz(xyz: Tensor) -> None:
    """`xyz` is [..., 3] (raised without the op's error as its context)."""
    if xyz.shape[-1:] != (3,):
        raise ValueError(f"xyz: expected shape [..., 3], got {list(xyz.shape)}") from None


def _box_map(bounds: Tensor) -> tuple[Tensor, Tensor]:
    """bounds [2, 3] -> (scale [3], shift [3]) mapping the box onto [-1, 1]."""
    scale = 2.0 / (bounds[1] - bounds[0])
    return scale, -bounds[0] * scale - 1.0


def _resample(features: Tensor, resolution: tuple[int, int, int]) -> Tensor:
    """features: [X, Y, Z, F] -> [X', Y', Z', F], trilinear with align_corners=True.

    Computed in float32 (float64 for float64), returned in the input dtype and
    memory layout (channels last, contiguous).
    """
    dtype = torch.float64 if features.dtype == torch.float64 else torch.float32
    volume = features.to(dtype).permute(3, 0, 1, 2).unsqueeze(0)  # [1, F, X, Y, Z]
    out = F.interpolate(volume, size=resolution, mode="trilinear", align_corners=True)
    return out[0].permute(1, 2, 3, 0).to(features.dtype).contiguous()
