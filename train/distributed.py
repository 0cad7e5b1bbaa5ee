"""Data-parallel training under `torchrun`: the process group, the shares, the reductions.

`torchrun --nproc_per_node=N -m train ...` starts N processes (ranks) with WORLD_SIZE,
RANK and LOCAL_RANK in their environment; `start()` sees them and joins the process
group (NCCL for CUDA tensors, gloo for CPU tensors). A plain `python -m train` has no
WORLD_SIZE: `start()` returns the single-process `World` and nothing here runs a
collective, so the single-process path is the one it always was.

How the work is split (see docs/multi-gpu.md):

* Batches: every rank draws the *whole* global batch of `train.batch_size` from the
  same seeded generator (drawing random numbers is cheap next to a step) and trains on
  its own contiguous share `[rank * B / N, (rank + 1) * B / N)`, as
  `torch.utils.data.DistributedSampler` shares one permutation. So the shares are
  disjoint, the global batch is the one a single process would draw, and every rank's
  generator state stays identical: one checkpoint holds all of it, and a run gives the
  same result (to float rounding) on any number of processes, resumed or not.
* Gradients: each rank's loss is the mean over its share; `average_gradients` averages
  the gradients over the ranks (`all_reduce`), which with equal shares is the gradient
  of the mean over the global batch. Every rank then takes the same optimiser step, so
  parameters and optimiser state stay identical (upsampling too: it is deterministic).
* Evaluation: split across ranks, sums reduced (`all_sum`).
* Files: rank 0 alone writes the run directory. Errors before training are agreed
  (`agree`): every rank stops, rank 0 prints the one line; so are errors writing a run
  file during training (`on_main`). A signal stops every rank at the same step
  (`train.interrupt`); running out of memory stops the rank it happens on, which says
  so, and torchrun stops the others.
"""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
from torch import Tensor

from .errors import ConfigError, plural

if TYPE_CHECKING:
    from .config import Config

# torch is imported: the phase "import_torch" of a run's summary ends here (train/loop.py);
# `python -m train` imports torch first through this module (train/__main__.py)
LOADED = time.perf_counter()

ENV_KEYS = ("WORLD_SIZE", "RANK", "LOCAL_RANK")
MESSAGE_BYTES = 1024  # longest error line passed between ranks
#: Gradients with fewer elements are averaged together in one flat buffer (an MLP's
#: layers: thousands of floats each); larger ones (grids, tables) each in place.
SMALL_GRADIENT = 1 << 18


class AgreedError(ConfigError):
    """A ConfigError every rank already knows about (raised by `World.agree`)."""

    def __init__(self, label: str, message: str) -> None:
        super().__init__(message)
        self.label = label


@dataclass(frozen=True)
class World:
    """This process's place among the ranks: `size` 1 is a plain single-process run."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0
    #: what `average_gradients` did so far: "bytes" (summed over its all-reduces) and
    #: "all_reduces" (how many)
    traffic: dict[str, int] = field(default_factory=dict, compare=False, repr=False)

    @property
    def is_main(self) -> bool:
        """Rank 0: the one that writes files and prints."""
        return self.rank == 0

    def share(self, n: int) -> slice:
        """Rows `[rank * n / size, (rank + 1) * n / size)` of n (n divisible by size)."""
        part = n // self.size
        return slice(self.rank * part, (self.rank + 1) * part)

    def split(self, n: int) -> range:
        """Contiguous, nearly equal shares of n items for evaluation (any n)."""
        part, extra = divmod(n, self.size)
        start = self.rank * part + min(self.rank, extra)
        return range(start, start + part + (self.rank < extra))

    def check_batch(self, batch_size: int, unit: str) -> None:
        """ConfigError naming train.batch_size unless it splits into equal shares."""
        if batch_size % self.size:
            raise ConfigError(
                f"train.batch_size: {plural(batch_size, unit.removesuffix('s'))} "
                f"{'does' if batch_size == 1 else 'do'} not split into {self.size} equal shares"
                f" (torchrun started {self.size} processes); use a multiple of "
                f"{self.size}, e.g. {batch_size - batch_size % self.size or self.size}"
            )

    def device(self, device: torch.device) -> torch.device:
        """The CUDA device of this rank (`cuda:LOCAL_RANK`); other devices as given."""
        if device.type != "cuda" or self.size == 1:
            return device
        count = torch.cuda.device_count()
        if self.local_rank >= count:
            raise ConfigError(
                f"device: torchrun started local rank {self.local_rank}, but this host "
                f"has {count} CUDA devices; use --nproc_per_node={count} or fewer"
            )
        return torch.device("cuda", self.local_rank)

    # ---- collectives (no-ops for a single process) ---------------------------------------

    def agree(self, error: ConfigError | None) -> None:
        """Every rank calls this at the same points: if any rank has an error, every rank
        raises the error of the lowest failing rank (an `AgreedError`, or the rank's own).

        An AgreedError coming out of a nested step is already agreed: callers re-raise
        it without agreeing again (every rank has left that collective).
        """
        if self.size == 1:
            if error is not None:
                raise error
            return
        messages = torch.zeros(self.size, MESSAGE_BYTES, dtype=torch.uint8)
        if error is not None:
            text = f"{error.label}\n{error}".encode()[:MESSAGE_BYTES] or b"?"
            messages[self.rank, : len(text)] = torch.frombuffer(bytearray(text), dtype=torch.uint8)
        dist.all_reduce(messages)  # CPU tensor: gloo; the rows do not overlap
        failed = messages.any(dim=1).nonzero().flatten().tolist()
        if not failed:
            return
        if failed[0] == self.rank and error is not None:
            error.agreed = True  # type: ignore[attr-defined]
            raise error
        text = bytes(messages[failed[0]].tolist()).rstrip(b"\0").decode(errors="replace")
        label, _, message = text.partition("\n")
        raise AgreedError(label, message)

    def on_main(self, write: Callable[[], None]) -> None:
        """Rank 0 runs `write` (it writes the run directory); a ConfigError there (a file
        that cannot be written) stops every rank at this same point (`agree`)."""
        error = None
        if self.is_main:
            try:
                write()
            except ConfigError as caught:
                error = caught
        self.agree(error)

    def average_gradients(
        self, params: list[Tensor], support: dict[Tensor, Tensor] | None = None
    ) -> None:
        """Replace each parameter's `.grad` by its mean over the ranks, in place.

        One `all_reduce` per large gradient in place, and one for all the small ones
        together (fewer than SMALL_GRADIENT elements, of one dtype: the MLPs' layers and
        codes, copied into one flat buffer and back, as `DistributedDataParallel`'s buckets
        do): a small layer's collective costs its fixed latency, not its bytes. No
        wrapper: the grids change shape at every upsample, which DDP does not allow. A
        parameter without a gradient on this rank gets zeros first, so every rank runs the
        same collectives.

        `support` maps a parameter (by identity) to the rows of `p.grad.view(-1, F)` that
        may be non-zero on some rank, the same int64 index tensor on every rank (a NeRF's
        colour grid: the voxels around occupied cells, `NerfExperiment.gradient_support`):
        only those rows are packed, averaged and put back, and the others stay as they are
        (zero on every rank). The bytes averaged and the collectives are counted in
        `traffic`.
        """
        if self.size == 1:
            return
        support = support or {}
        small: dict[torch.dtype, list[Tensor]] = {}  # the small gradients, by dtype
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            rows = support.get(p)
            if rows is None and p.grad.numel() < SMALL_GRADIENT:
                small.setdefault(p.grad.dtype, []).append(p.grad)
                continue
            if rows is None:
                self._average(p.grad)
                continue
            grad = p.grad.view(-1, p.grad.shape[-1])  # [voxels, F] for a [X, Y, Z, F] grid
            packed = grad.index_select(0, rows)  # [K, F]
            self._average(packed)
            grad.index_copy_(0, rows, packed)
        for grads in small.values():
            flat = torch.cat([g.reshape(-1) for g in grads])  # [sum of numel]
            self._average(flat)
            for g, part in zip(grads, flat.split([g.numel() for g in grads]), strict=True):
                g.copy_(part.view_as(g))

    def _average(self, tensor: Tensor) -> None:
        self.traffic["bytes"] = (
            self.traffic.get("bytes", 0) + tensor.numel() * tensor.element_size()
        )
        self.traffic["all_reduces"] = self.traffic.get("all_reduces", 0) + 1
        if tensor.is_cuda:
            dist.all_reduce(tensor, op=dist.ReduceOp.AVG)  # NCCL divides in the kernel
        else:  # gloo has no AVG
            dist.all_reduce(tensor)
            tensor.div_(self.size)

    def all_sum(self, tensor: Tensor) -> Tensor:
        """Sum `tensor` over the ranks in place (returned for chaining)."""
        if self.size > 1:
            dist.all_reduce(tensor)
        return tensor

    def mean_(self, tensor: Tensor) -> Tensor:
        """Average `tensor` over the ranks in place (returned for chaining)."""
        if self.size > 1:
            dist.all_reduce(tensor)
            tensor.div_(self.size)
        return tensor

    def max_(self, values: list[int]) -> list[int]:
        """Each of `values`' maximum over the ranks (one small all-reduce on the CPU)."""
        if self.size == 1:
            return list(values)
        tensor = torch.tensor(values, dtype=torch.int64)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)  # CPU tensor: gloo
        return tensor.tolist()

    def broadcast_(self, tensors: list[Tensor]) -> None:
        """Copy rank 0's values of `tensors` to every rank (in place)."""
        if self.size > 1:
            for t in tensors:
                dist.broadcast(t.detach(), src=0)  # the storage, not an autograd op


def scaled_config(config: Config, world: World) -> Config:
    """The config the experiment trains with: with `train.scaling = "weak"` under torchrun,
    a copy whose global batches are `world.size` times the config's (every rank draws the
    whole global batch and trains on its share, as in strong scaling). The run directory
    keeps the config as given, so a resume scales it again for its own processes."""
    if config.train.scaling != "weak" or world.size == 1:
        return config
    scaled = copy.deepcopy(config)
    scaled.train.batch_size *= world.size
    scaled.train.eikonal_points *= world.size
    return scaled


SINGLE = World()
_world = SINGLE


def world() -> World:
    """The World `start` set up (the single-process one outside torchrun)."""
    return _world


def from_env(environ: dict[str, str] | os._Environ = os.environ) -> World:
    """The World torchrun describes in the environment (WORLD_SIZE, RANK, LOCAL_RANK);
    the single-process one when WORLD_SIZE is absent."""
    if "WORLD_SIZE" not in environ:
        return SINGLE
    values = {}
    for key in ENV_KEYS:
        try:
            values[key] = int(environ.get(key, "0"))
        except ValueError:
            raise ConfigError(
                f"{key}: expected an integer (set by torchrun), got {environ[key]!r}"
            ) from None
    size, rank = values["WORLD_SIZE"], values["RANK"]
    if size < 1 or not 0 <= rank < size:
        raise ConfigError(f"RANK: expected 0 <= RANK < WORLD_SIZE = {size}, got {rank}")
    return World(rank, size, values["LOCAL_RANK"])


def start() -> World:
    """Join the process group when started by torchrun (a no-op otherwise).

    Backends: NCCL for CUDA tensors (after `torch.cuda.set_device(LOCAL_RANK)`), gloo for
    CPU tensors (the errors agreed before training, a CPU run's gradients).
    """
    global _world
    w = from_env()
    if w.size > 1 and not dist.is_initialized():
        backend = "gloo"
        if torch.cuda.is_available() and dist.is_nccl_available():
            if w.local_rank < torch.cuda.device_count():
                torch.cuda.set_device(w.local_rank)
            backend = "cpu:gloo,cuda:nccl"
        dist.init_process_group(backend)
    _world = w
    return w


def is_agreed(error: BaseException) -> bool:
    """Whether `error` came out of `World.agree` (every rank raised it together)."""
    return isinstance(error, AgreedError) or getattr(error, "agreed", False)


def stop(*, barrier: bool = True) -> None:
    """Leave the process group. With `barrier` (every rank got here in step), first wait
    for all ranks, so none leaves while rank 0 still writes; without it (an unexpected
    exception, the ranks out of step) leave at once: torchrun stops the others."""
    global _world
    if _world.size > 1 and dist.is_initialized():
        try:
            if barrier:
                _world.agree(None)
        finally:
            dist.destroy_process_group()
    _world = SINGLE
