"""Will a run fit in memory? Checked before anything is allocated; and one line, not a
traceback, when the device runs out during training.

Before: each experiment's spec lists what a run allocates (`ExperimentSpec.memory`, a
list of `Need`s: its grids at their largest resolution with gradient and Adam's moments,
its data, its per-step buffers as batch x bytes per item). `check_memory` compares the
sum with the device's free memory (CUDA: `torch.cuda.mem_get_info`; CPU: MemAvailable,
within the cgroup's limit) and refuses a config that cannot fit as a ConfigError naming
the key that needs the most, with the numbers. The estimate counts only what a run
certainly allocates (a lower bound): a refused config cannot fit; one that passes may
still run out, which the second half reports.

During: an out-of-memory error (`torch.OutOfMemoryError` on CUDA, the CPU allocator's
RuntimeError) becomes `OutOfMemory`, one line with the step, the sizes and what to
lower; the last checkpoint is untouched.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from . import experiments
from .errors import ConfigError, OutOfMemory
from .schema import Need

if TYPE_CHECKING:
    from .config import Config

GB = 1e9  # decimal, as the allocators' messages ("500000000000 bytes")


def gb(n: float) -> str:
    """Bytes as decimal gigabytes, e.g. `2000.0 GB`, `0.03 GB`."""
    return f"{n / GB:.1f} GB" if n >= 0.05 * GB else f"{n / GB:.2f} GB"


def needs(config: Config) -> list[Need]:
    """What a run of `config` allocates, largest first ([] for an experiment without an
    estimate)."""
    estimate = experiments.specs()[config.experiment].memory
    return sorted(estimate(config) if estimate else [], key=lambda n: -n.bytes)


def _read_number(path: str, prefix: str = "") -> int | None:
    """The first number of `path` (of its line starting with `prefix`), else None."""
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(prefix):
                return int(line[len(prefix) :].split()[0])
    except (OSError, ValueError, IndexError):
        pass
    return None


def available_bytes(device: torch.device) -> int | None:
    """Free memory on `device`: CUDA's free memory, or the RAM the kernel can give
    without swapping (MemAvailable), less if this process's cgroup has a lower limit.
    None when it cannot be told."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return free
    if device.type != "cpu":
        return None
    found = []
    kib = _read_number("/proc/meminfo", "MemAvailable:")
    if kib is not None:
        found.append(kib * 1024)
    else:
        try:
            found.append(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
        except (ValueError, OSError, AttributeError):
            pass
    limit = _read_number("/sys/fs/cgroup/memory.max")  # "max" (no limit) reads as None
    used = _read_number("/sys/fs/cgroup/memory.current")
    if limit is not None and used is not None:
        # file pages the kernel drops before it refuses memory count as free
        cache = _read_number("/sys/fs/cgroup/memory.stat", "inactive_file ") or 0
        found.append(max(limit - used + cache, 0))
    return min(found) if found else None


def _where(device: torch.device) -> str:
    return f"{device} has" if device.type == "cuda" else "the machine has"


def check_memory(config: Config, device: torch.device, available: int | None = None) -> None:
    """Raise ConfigError naming the key that needs the most when the run cannot fit.

    available: free bytes (default: `available_bytes(device)`; no check if unknown).
    On the CPU the torchrun processes of this host (LOCAL_WORLD_SIZE) share the RAM,
    each holding the grids.
    """
    listed = needs(config)
    if available is None:
        available = available_bytes(device)
    if not listed or available is None:
        return
    processes = int(os.environ.get("LOCAL_WORLD_SIZE", "1")) if device.type == "cpu" else 1
    total = sum(n.bytes for n in listed) * processes
    if total <= available:
        return
    per_key: dict[str, int] = {}
    for n in listed:
        per_key[n.key] = per_key.get(n.key, 0) + n.bytes
    key = max(per_key, key=per_key.__getitem__)
    parts = ", ".join(f"{gb(n.bytes)} for {n.what}" for n in listed[:3])
    share = f" in each of {processes} processes" if processes > 1 else ""
    raise ConfigError(
        f"{key}: this run needs at least {gb(total)} of memory: {parts}{share}; "
        f"{_where(device)} {gb(available)} free; lower {key}"
    )


def is_out_of_memory(error: BaseException) -> bool:
    """A CUDA out-of-memory error, or the CPU allocator's (a RuntimeError)."""
    if isinstance(error, torch.OutOfMemoryError):
        return True
    text = str(error)
    return isinstance(error, RuntimeError) and "CPUAllocator" in text and "memory" in text


def out_of_memory(
    config: Config,
    device: torch.device | None,
    *,
    step: int,
    resolution: tuple[int, ...] | None,
    kept: str,
) -> OutOfMemory:
    """The one-line error for running out of memory after `step` steps: the step, the
    grid and batch sizes, the device's use, the keys to lower; `kept` says what is
    left of the run (its checkpoint)."""
    steps = config.train.steps
    when = f"at step {step + 1} of {steps}" if step < steps else "after the last step"
    sizes = [f"train.batch_size = {config.train.batch_size}"]
    if resolution:
        sizes.insert(0, "grid " + "x".join(map(str, resolution)))
    if device is not None and device.type == "cuda":
        _, total = torch.cuda.mem_get_info(device)
        sizes.append(f"{gb(torch.cuda.memory_reserved(device))} of {gb(total)} in use")
    listed = needs(config)
    if listed:
        sizes.append(f"estimated at least {gb(sum(n.bytes for n in listed))}")
    keys = list(dict.fromkeys([n.key for n in listed[:1]] + ["train.batch_size"]))
    where = f" on {device}" if device is not None else ""
    return OutOfMemory(
        f"{when}{where} ({', '.join(sizes)}); lower {' or '.join(keys)} (--set KEY=VALUE); {kept}"
    )
