"""Runs a Python script as `__main__` and prints the CUDA memory peaks of this process.

    python bench/ops/cuda_peak.py SCRIPT [ARGS...]
    python bench/ops/cuda_peak.py -m MODULE [ARGS...]

The script runs as `python SCRIPT ARGS...` (or `python -m MODULE ARGS...`) would run it (its
own `sys.argv`, `__file__`),
inside this process; at its end (an exception or `sys.exit` included) one line follows:

    CUDA_PEAK allocated <bytes> reserved <bytes>

`torch.cuda.max_memory_allocated()` (the peak of the tensors alive at once) and
`max_memory_reserved()` (the peak the caching allocator held from the driver), device 0,
or `CUDA_PEAK none` when the script never initialised CUDA. These are the numbers
`bench/compare/dvgo/bench_dvgo.py` reports for its own runs, so a third-party program run through
this wrapper is measured the same way (not the CUDA context, nor memory allocated outside
torch's allocator).
"""

from __future__ import annotations

import os
import runpy
import sys

import torch


def peak_line() -> str:
    if not torch.cuda.is_initialized():
        return "CUDA_PEAK none"
    allocated, reserved = torch.cuda.max_memory_allocated(0), torch.cuda.max_memory_reserved(0)
    return f"CUDA_PEAK allocated {allocated} reserved {reserved}"


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1:2] == ["-m"] and len(sys.argv) < 3:
        raise SystemExit("usage: python bench/ops/cuda_peak.py SCRIPT|-m MODULE [ARGS...]")
    module = sys.argv[2] if sys.argv[1] == "-m" else None
    try:
        if module is not None:
            sys.argv = [module, *sys.argv[3:]]
            sys.path[0] = os.getcwd()  # as `python -m` sets it
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        else:
            script = sys.argv[1]
            sys.argv = sys.argv[1:]
            sys.path[0] = os.path.dirname(os.path.abspath(script))  # as `python SCRIPT` sets it
            runpy.run_path(script, run_name="__main__")
    finally:
        print(peak_line(), flush=True)


if __name__ == "__main__":
    main()
