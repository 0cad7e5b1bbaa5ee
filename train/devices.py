"""Devices: the config's and the command line's device names, and how a run reports one."""

from __future__ import annotations

from pathlib import Path

import torch

from .errors import ConfigError, plural


def select_device(name: str) -> torch.device:
    """ "auto" -> CUDA when available, else CPU; "cpu" / "cuda" as given."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def gpu_config_note(config: Path | None, device: str) -> str | None:
    """A note where a config sized for a GPU (`configs/*_gpu.toml`) would run on the CPU:
    `device` "auto" on a machine without CUDA. None otherwise. Such a run takes hours (a
    400x400 scene's generation alone took over an hour on 2 cores) and said nothing."""
    if config is None or not config.stem.endswith("_gpu") or device != "auto":
        return None
    if torch.cuda.is_available():
        return None
    return (
        f"{config} is sized for a GPU and this machine has none: it runs on the CPU, where "
        "its scene and steps take hours; the configs without _gpu are sized for a CPU"
    )


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
