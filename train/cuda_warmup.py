"""Start the CUDA driver while torch imports: a GPU command's fixed seconds (issue 62).

The driver's start (`cuInit`) and the first device's context take 0.3-0.4 s on a GPU host,
which torch's first CUDA call pays after its own 1.3-1.9 s import. `start`, called before
torch is imported, does both on a background thread through the driver's C API (ctypes
releases the GIL around each call), so they overlap the import; torch then finds the context
made (its runtime uses the device's primary context, the one retained here).

Nothing depends on it: a machine without the driver, a failing call or a CPU run leaves the
work to torch, as without it. Only the command line calls it (`python -m train`), and only
for a run whose device is `cuda` or `auto`, on one process (torchrun's ranks pick their
devices later), with a CUDA build of torch installed.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import os
import threading
import tomllib
from pathlib import Path


def config_device(args: argparse.Namespace) -> str:
    """The `device` the run will read, as far as the arguments and the config file tell
    without importing torch: the last `--set device=...`, else the config's (the run's
    saved config.toml with --resume), else the default `auto`. `cpu` when unreadable."""
    for item in reversed(args.set):
        key, _, value = item.partition("=")
        if key.strip() == "device":
            return value.strip().strip("'\"")
    try:
        if args.resume:
            path = Path(args.out) / "config.toml" if args.out else None
        elif args.config is not None:
            from .shipped_configs import resolve

            path = resolve(args.config)
        else:
            path = None
        if path is None:
            return "auto"
        with open(path, "rb") as file:
            device = tomllib.load(file).get("device", "auto")
        return device if isinstance(device, str) else "cpu"
    except Exception:  # the run itself reports a bad config; no warm-up for it
        return "cpu"


def torch_has_cuda() -> bool:
    """Whether the installed torch is a CUDA build (its libtorch_cuda beside libtorch), known
    without importing it: a CPU build on a GPU machine makes no context."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return False
    return any(
        (Path(folder) / "lib" / "libtorch_cuda.so").exists()
        for folder in spec.submodule_search_locations
    )


def _warm(library: str) -> None:
    try:
        cuda = ctypes.CDLL(library)
        if cuda.cuInit(0) != 0:
            return
        device = ctypes.c_int()
        if cuda.cuDeviceGet(ctypes.byref(device), 0) != 0:
            return
        context = ctypes.c_void_p()
        cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device)
    except (OSError, AttributeError):
        return


def start(args: argparse.Namespace, library: str = "libcuda.so.1") -> threading.Thread | None:
    """Start the driver and device 0's primary context on a daemon thread when the run is
    on one process and its device is `cuda` or `auto`; the thread (None when not started)."""
    if "WORLD_SIZE" in os.environ or os.environ.get("CUDA_VISIBLE_DEVICES") == "":
        return None
    if config_device(args) not in ("cuda", "auto") or not torch_has_cuda():
        return None
    thread = threading.Thread(target=_warm, args=(library,), name="cuda-warmup", daemon=True)
    thread.start()
    return thread
