"""Devices: the config's and the command line's device names, and how a run reports one."""

from __future__ import annotations

import torch

from .errors import ConfigError, plural


def select_device(name: str) -> torch.device:
    """ "auto" -> CUDA when available, else CPU; "cpu" / "cuda" as given."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def device_option(name: str, option: str = "--device") -> torch.device:
    """A command line's device: auto / cpu / cuda[:N] (`select_device`); ConfigError naming
    `option` for anything else, or for cuda on a machine without it."""
    try:
        device = select_device(name)
    except RuntimeError:
        device = None
    if device is None or device.type not in ("cpu", "cuda"):
        raise ConfigError(f"{option}: expected auto, cpu or cuda, got {name!r}")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"{option}: cuda, but this machine has no CUDA device (use cpu)")
    return device


def describe_device(device: torch.device) -> str:
    """e.g. `cuda (NVIDIA H100 80GB HBM3)`, `cpu (2 threads)`: summary.json's "device"."""
    if device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(device)})"
    return f"cpu ({plural(torch.get_num_threads(), 'thread')})"


def sync(device: torch.device) -> None:
    """Wait for the device's queued work (CUDA; nothing on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
