"""Where a GPU command's first second goes, and whether CUDA's start can overlap the imports
(issue 62 item 6: the sdf experiment's set-up <= 1 s on a GPU host).

    python bench/probes/cuda_start.py            # prints one JSON line per mode

Each mode runs in a fresh interpreter (CUDA starts once per process):
- `sequential`: import torch; then each first: CUDA's init (`torch.cuda.init`), a tensor on
  the device (the context), a kernel, cuBLAS (a matmul), `torch.cdist` and `topk` (the
  points' init of the sdf experiment); then the project's imports (`train.sdf.experiment`).
- `overlapped`: a thread starts CUDA (init, context, first kernel, cuBLAS) right after
  `import torch` while the main thread imports the project; the join is timed.
- `overlapped_no_blas`: the same without cuBLAS in the thread.
A saving shows as `overlapped`'s total below `sequential`'s.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CHILD = r"""
import json, sys, threading, time
mode = sys.argv[1]
sys.path.insert(0, sys.argv[2])
t = {}
t0 = time.perf_counter()
import torch
t["import_torch"] = time.perf_counter() - t0

def start(blas):
    marks = {}
    s = time.perf_counter()
    torch.cuda.init()
    marks["cuda_init"] = time.perf_counter() - s
    s = time.perf_counter()
    x = torch.ones(64, 64, device="cuda")
    torch.cuda.synchronize()
    marks["context_and_tensor"] = time.perf_counter() - s
    s = time.perf_counter()
    (x * 2).sum().item()
    marks["first_kernels"] = time.perf_counter() - s
    if blas:
        s = time.perf_counter()
        (x @ x).sum().item()
        marks["cublas"] = time.perf_counter() - s
    return marks

def project_imports():
    s = time.perf_counter()
    import grid  # noqa: F401
    import train.sdf.experiment  # noqa: F401
    return time.perf_counter() - s

if mode == "sequential":
    t.update(start(True))
    s = time.perf_counter()
    a = torch.rand(65536, 3, device="cuda"); b = torch.rand(32768, 3, device="cuda")
    torch.cdist(a[:4096], b).topk(8, dim=1, largest=False)[0].sum().item()
    t["first_cdist_topk"] = time.perf_counter() - s
    s = time.perf_counter()
    torch.cdist(a[4096:8192], b).topk(8, dim=1, largest=False)[0].sum().item()
    t["second_cdist_topk"] = time.perf_counter() - s
    t["project_imports"] = project_imports()
else:
    marks = {}
    th = threading.Thread(target=lambda: marks.update(start(mode == "overlapped")))
    s = time.perf_counter()
    th.start()
    t["project_imports"] = project_imports()
    j = time.perf_counter()
    th.join()
    t["join_wait"] = time.perf_counter() - j
    t["overlapped_part"] = time.perf_counter() - s
    t.update({f"thread_{k}": v for k, v in marks.items()})
t["total"] = time.perf_counter() - t0
print(json.dumps({"mode": mode, **{k: round(v, 4) for k, v in t.items()}}))
"""


def main() -> None:
    for repeat in range(3):
        for mode in ("sequential", "overlapped", "overlapped_no_blas"):
            out = subprocess.run(
                [sys.executable, "-c", CHILD, mode, str(ROOT)],
                capture_output=True,
                text=True,
                check=False,
            )
            line = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else out.stderr[-400:]
            print(
                json.dumps({"repeat": repeat, **json.loads(line)}) if line.startswith("{") else line
            )
            time.sleep(0.2)


if __name__ == "__main__":
    main()
