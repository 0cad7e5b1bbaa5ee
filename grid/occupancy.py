"""`OccupancyGrid`: which cells of a box may hold something, for empty-space skipping."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import _checks
from .boxes import _bounds, _resolution, check_inside, lattice


class OccupancyGrid(nn.Module):
    """A boolean `[X, Y, Z]` grid over a world box: False marks empty space to skip.

    Laid out like `VoxelGrid` (align_corners=True): voxel `(0, 0, 0)` sits at `bounds[0]`
    and voxel `(X-1, Y-1, Z-1)` at `bounds[1]`; a point reads its nearest voxel's flag.
    It starts all occupied. `update` refreshes it from a density (alpha) grid of the same
    resolution, `upsample` follows a grid's coarse-to-fine schedule.

    Args:
        resolution: an int (a cube) or `(X, Y, Z)`; every size >= 2.
        bounds: `((xmin, ymin, zmin), (xmax, ymax, zmax))` in world units, min < max.
        device: where the flags live.

    Attributes:
        flags: buffer `[X, Y, Z]` bool, True = occupied (samples there are kept). It is
            the module's whole state: `state_dict()` is `{"flags": ...}`, so a checkpoint
            that stored the flags as a plain bool tensor (VoxelNeRF's `occupancy` buffer)
            loads after renaming its key to `<name>.flags`, or through `load_flags`.
            Loading adopts the saved resolution, as `VoxelGrid` does.
        bounds: non-persistent buffer `[2, 3]` float32 (min row, max row): configuration
            given to the constructor, not saved. It stays float32 when the module is cast,
            so a cast of the parent model never moves the cell boundaries.

    Examples:
        >>> import torch
        >>> import grid
        >>> occupancy = grid.OccupancyGrid(8)  # over [-1, 1]^3, all occupied at first
        >>> alpha = torch.zeros(8, 8, 8)  # [X, Y, Z], a density grid's opacity per voxel
        >>> alpha[4, 4, 4] = 0.5
        >>> occupancy.update(alpha, threshold=0.01)  # that voxel and its 26 neighbours: 27 / 512
        0.052734375
        >>> occupancy.query(torch.tensor([[0.15, 0.15, 0.15], [-0.9, -0.9, -0.9]])).tolist()
        [True, False]
    """

    flags: Tensor
    bounds: Tensor

    def __init__(
        self,
        resolution: int | Sequence[int],
        bounds: Sequence[Sequence[float]] = ((-1.0, -1.0, -1.0), (1.0, 1.0, 1.0)),
        *,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        size = _resolution(resolution)
        lo, hi = _bounds(bounds)
        self.register_buffer("flags", torch.ones(size, dtype=torch.bool, device=device))
        box = torch.tensor([lo, hi], dtype=torch.float32, device=device)
        self.register_buffer("bounds", box, persistent=False)

    @property
    def resolution(self) -> tuple[int, int, int]:
        """(X, Y, Z), the number of voxels along each axis."""
        x, y, z = self.flags.shape
        return (x, y, z)

    def extra_repr(self) -> str:
        lo, hi = self.bounds.tolist()
        fmt = ", ".join
        return (
            f"resolution={self.resolution}, "
            f"bounds=(({fmt(f'{v:g}' for v in lo)}), ({fmt(f'{v:g}' for v in hi)}))"
        )

    def _apply(self, fn, recurse=True):
        # Module.to(dtype) / .double() / .half() cast every floating buffer; keep the box
        # float32 so queries map points to the same voxels whatever the parent is cast to.
        bounds = self.bounds
        super()._apply(fn, recurse)
        if self.bounds.dtype != torch.float32:
            self.bounds = bounds.to(device=self.bounds.device, dtype=torch.float32)
        return self

    # ---- queries ----------------------------------------------------------------------

    def query(self, points: Tensor) -> Tensor:
        """The flag of each point's nearest voxel.

        Args:
            points: `[..., 3]` world points, on the flags' device. Points outside the box
                read the nearest boundary voxel (clamped).

        Returns:
            `[...]` bool.
        """
        _checks.float_tensor("points", points, "[..., 3]", None, 3)
        _checks.same_device("points", points, "flags", self.flags)
        lo, hi = self.bounds
        last = self._last_index()  # [3] int64, resolution - 1
        index = ((points - lo) / (hi - lo) * last).round().long()
        index = torch.minimum(index.clamp_min(0), last)
        x, y, z = index.unbind(-1)
        return self.flags[x, y, z]

    def _last_index(self) -> Tensor:
        """`resolution - 1` as an int64 [3] tensor on the flags' device, cached until the
        flags change shape or device (building it is a host-to-device copy)."""
        flags = self.flags
        key = (tuple(flags.shape), flags.device)
        if torch.compiler.is_compiling():
            return torch.tensor([s - 1 for s in key[0]], device=flags.device)
        cached = self.__dict__.get("_last_index_cache")
        if cached is None or cached[0] != key:
            cached = (key, torch.tensor([s - 1 for s in key[0]], device=flags.device))
            self.__dict__["_last_index_cache"] = cached
        return cached[1]

    # ---- updates ----------------------------------------------------------------------

    @torch.no_grad()
    def update(self, alpha: Tensor, threshold: float, *, shrink_only: bool = False) -> float:
        """Recompute the flags from per-voxel alpha (the opacity of one sample step).

        A voxel is occupied when it or a neighbour has alpha >= threshold: the 3x3x3 max
        covers every cell that touches the voxel, so all eight corners a trilinear sample
        reads are checked, not just the nearest.

        Args:
            alpha: `[X, Y, Z]` floating, this grid's resolution and device.
            threshold: the alpha below which a neighbourhood counts as empty.
            shrink_only: keep a voxel only if it was occupied before as well: empty space
                stays empty (DirectVoxGO's fine-stage mask), so density cannot grow into
                space the grid has already given up.

        Returns:
            The occupied fraction (a Python float: reads one number back).
        """
        _checks.float_tensor("alpha", alpha, "[X, Y, Z]", 3)
        if tuple(alpha.shape) != self.resolution:
            raise ValueError(
                f"alpha: expected shape {list(self.resolution)} (this grid's resolution), "
                f"got {list(alpha.shape)}"
            )
        _checks.same_device("alpha", alpha, "flags", self.flags)
        threshold = _checks.real("threshold", threshold)
        dilated = F.max_pool3d(alpha[None, None], 3, stride=1, padding=1)[0, 0]
        if shrink_only:
            self.flags &= dilated >= threshold
        else:
            self.flags.copy_(dilated >= threshold)
        return self.flags.float().mean().item()

    @torch.no_grad()
    def upsample(self, resolution: int | Sequence[int]) -> None:
        """Resample the flags to a finer `resolution` (X, Y, Z), conservatively: dilate
        by one voxel (3x3x3 max), then nearest. Dilation happens even at the same
        resolution. No axis may shrink."""
        new = _resolution(resolution)
        old = self.resolution
        if any(n < o for n, o in zip(new, old, strict=True)):
            raise ValueError(
                f"resolution: expected no axis smaller than the current {old}, got {new}"
            )
        occupied = self.flags.float()[None, None]
        occupied = F.max_pool3d(occupied, 3, stride=1, padding=1)
        self.flags = F.interpolate(occupied, size=new, mode="nearest")[0, 0] > 0

    @torch.no_grad()
    def crop(self, bounds: Sequence[Sequence[float]], resolution: int | Sequence[int]) -> None:
        """Move onto a sub-box of the current box at `resolution` (X, Y, Z; any sizes >= 2),
        conservatively: dilate by one voxel (3x3x3 max), then each new voxel reads its
        nearest old voxel (as `VoxelGrid.crop` follows a box found by a coarse stage)."""
        new = _resolution(resolution)
        lo, hi = _bounds(bounds)
        box = torch.tensor([lo, hi], dtype=torch.float32, device=self.flags.device)
        check_inside(box, self.bounds)
        occupied = F.max_pool3d(self.flags.float()[None, None], 3, stride=1, padding=1)
        self.flags = occupied[0, 0] > 0
        self.flags = self.query(lattice(box, new))
        self.bounds = box

    def load_flags(self, flags: Tensor) -> None:
        """Adopt `flags` (`[X, Y, Z]` bool, any resolution with sizes >= 2) as the grid,
        copied to this module's device. For a bool tensor saved by older code."""
        error, problem = _flags_problem(flags)
        if problem:
            raise error(f"flags: {problem}")
        self.flags = flags.to(self.flags.device, copy=True).contiguous()

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
        """`load_state_dict` adopts the saved flags' resolution (the buffer is replaced
        by one of the saved shape before the copy); anything but a 3-D bool tensor with
        sizes >= 2 is refused with a message."""
        key = prefix + "flags"
        saved = state_dict.get(key)
        if isinstance(saved, Tensor):
            _, problem = _flags_problem(saved)
            if problem:
                error_msgs.append(f"{key}: {problem}")
                state_dict = {k: v for k, v in state_dict.items() if k != key}
            elif saved.shape != self.flags.shape:
                self.flags = torch.empty(saved.shape, dtype=torch.bool, device=self.flags.device)
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )
        if key in missing_keys and saved is not None:
            missing_keys.remove(key)  # present, but refused above with its own message


def _flags_problem(flags: object) -> tuple[type[Exception], str]:
    """(the exception to raise, why `flags` cannot be an occupancy grid); "" if it can."""
    if not isinstance(flags, Tensor):
        return TypeError, f"expected a bool tensor [X, Y, Z], got {type(flags).__name__}"
    if flags.dtype != torch.bool:
        return TypeError, f"expected a bool tensor [X, Y, Z], got dtype {flags.dtype}"
    if flags.dim() != 3 or min(flags.shape) < 2:
        return ValueError, f"expected shape [X, Y, Z], every size >= 2, got {list(flags.shape)}"
    return ValueError, ""
