"""Buffer sizes of the fused renderer (`render.render_fused`), planned so that a training step
on CUDA never waits for the GPU.

Two counts of a batch are only known on the device: the samples that reach the density grid
(set by the occupancy grid) and those worth colouring (weight above the threshold). Reading
them every step would stall the step on the GPU, so `SampleCapacity` measures them in an
"exact" render now and then and sizes the buffers of the renders in between from that;
`compact` gathers the samples to colour into a buffer of planned size.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor


class SampleCapacity:
    """Buffer sizes of the fused render, planned from measured counts.

    An exact render (`sizes` returned None) reads both counts back and records them per ray;
    the next renders of the same state use `margin` times that, rounded up to `granule`
    slots, and read nothing back. Each planned render writes its own true counts into
    `seen` on the device (a captured step too); `lag` renders before the `every`-th one a
    copy of them starts to the host, and at the `every`-th the plan is made again from that
    copy, already there: while the state holds, no render stops to measure (an exact render
    there was an op-by-op training step: 100 of the fast config's 10000 steps).

    The state is the occupancy grid's flags (a refresh or an upsample changes them), the
    weight threshold and the rays' dtype: any change makes the next render exact. A new
    plan that is at most the current one and at least `keep` times it keeps the current
    sizes, so that a training step captured as a CUDA graph (whose buffers have fixed
    sizes) is replayed rather than captured again after every measurement. Samples that do
    not fit (the far ends of the last rays of a batch, or the last samples to colour) are
    dropped and counted on the device in `dropped`, which a caller reads when it logs.

    On the CPU, reading a count costs nothing, so `mode="auto"` renders exactly there.
    """

    margin = 1.05
    every = 64
    granule = 1024
    keep = 0.8
    lag = 8

    def __init__(self) -> None:
        self.key: tuple | None = None
        self.per_ray: tuple[float, float] = (0.0, 0.0)  # samples, coloured samples
        self.planned: tuple[int, int, int] | None = None  # rays, sample slots, colour slots
        self.renders = 0
        self.dropped: Tensor | None = None  # [] int64 on the device, added to in place
        # [2] int64 on the device: the last planned render's counts (samples, coloured), -1
        # before one; and a copy of them under way to the host: (host [2], rays, event)
        self.seen: Tensor | None = None
        self.copy: tuple[Tensor, int, Any] | None = None

    def sizes(self, key: tuple, n_rays: int) -> tuple[int, int] | None:
        """(sample slots, colour slots) for a render of `n_rays` rays, or None: exact.
        Counts the render (`every`)."""
        plan = self.peek(key, n_rays)
        if plan is not None:
            self.count_render()
        return plan

    def count_render(self) -> None:
        """One planned render more (a CUDA graph's replay renders without calling `sizes`)."""
        self.renders += 1
        if self.renders == self.every - self.lag and self.planned is not None:
            if not (self.seen.is_cuda and torch.cuda.is_current_stream_capturing()):
                self._copy_seen()  # (a capture's render is the replay's: none then)

    def peek(self, key: tuple, n_rays: int) -> tuple[int, int] | None:
        """What `sizes` would return (the plan it keeps), without counting a render. At the
        `every`-th render it plans from the copied counts (`seen`), or returns None where
        there are none."""
        if key != self.key:
            return None
        if self.renders >= self.every and not self._read_seen():
            return None
        want = tuple(self._slots(per * n_rays) for per in self.per_ray)
        if self.planned is not None and self.planned[0] == n_rays:
            old = self.planned[1:]
            if all(self.keep * o <= w <= o for w, o in zip(want, old, strict=True)):
                return old
        self.planned = (n_rays, *want)
        return want

    def measured(
        self, key: tuple, samples: int, coloured: int, n_rays: int, device: torch.device
    ) -> None:
        self.key, self.renders, self.copy = key, 0, None
        self.per_ray = (samples / max(n_rays, 1), coloured / max(n_rays, 1))
        if self.dropped is None:  # made here, never inside a captured step (which would
            self.dropped = torch.zeros((), dtype=torch.int64, device=device)  # re-zero it)
            self.seen = torch.empty(2, dtype=torch.int64, device=device)
        self.seen.fill_(-1)  # nothing planned in this state yet

    def observe(self, samples: Tensor, coloured: Tensor, slots: tuple[int, int]) -> None:
        """A planned render's true counts ([] each, on the device) against its buffers'
        `slots` (samples, colour): what did not fit is added to `dropped`, and the counts
        are written into `seen`, both in place (a captured step does it too)."""
        self.dropped.add_((samples - slots[0]).clamp_min(0) + (coloured - slots[1]).clamp_min(0))
        self.seen[0].copy_(samples)
        self.seen[1].copy_(coloured)

    def _copy_seen(self) -> None:
        """Starts the copy of `seen` to the host (pinned memory on CUDA: no waiting)."""
        cuda = self.seen.is_cuda
        host = torch.empty(2, dtype=torch.int64, pin_memory=cuda)
        host.copy_(self.seen, non_blocking=cuda)
        event = None
        if cuda:
            event = torch.cuda.Event()
            event.record()
        self.copy = (host, self.planned[0], event)

    def _read_seen(self) -> bool:
        """The copied counts as the new per-ray rates (True), or False where no copy holds
        a planned render's counts. The copy started `lag` renders ago: its wait, if any, is
        for work long queued, and the GPU keeps the renders since then."""
        if self.copy is None:
            return False
        host, rays, event = self.copy
        self.copy = None
        if event is not None:
            event.synchronize()
        samples, coloured = host.tolist()
        if samples < 0:
            return False
        self.renders = 0
        self.per_ray = (samples / max(rays, 1), coloured / max(rays, 1))
        return True

    def _slots(self, count: float) -> int:
        g = self.granule
        return max(g, math.ceil(count * self.margin / g) * g)


def compact(mask: Tensor, size: int) -> tuple[Tensor, Tensor]:
    """The positions of the True entries of `mask` [N], in order, in a [size] int64 tensor,
    read nothing back: slots past the count hold N; True entries past `size` are dropped.
    Returns (positions [size], the count of True entries [] int64)."""
    n = mask.shape[0]
    position = torch.cumsum(mask, 0) - 1  # [N] the slot of each True entry
    slot = torch.where(mask & (position < size), position, size)  # the rest: a spare slot
    out = torch.full((size + 1,), n, dtype=torch.int64, device=mask.device)
    out.scatter_(0, slot, torch.arange(n, device=mask.device))
    count = position[-1] + 1 if n else position.new_zeros(())
    return out[:size], count


def capacity_key(model: Any, dtype: torch.dtype) -> tuple:
    """The state a `SampleCapacity` plan of `model`'s (a `VoxelNeRF`'s) fused renders holds
    for: the occupancy flags (the tensor and its version: an upsample replaces it, a refresh
    updates it), the weight threshold, the rays' dtype."""
    flags = model.occupancy_grid.flags
    return (flags.data_ptr(), flags._version, model.weight_threshold, dtype)
