"""Per-call cost of `grid.sample` and `VoxelGrid.forward` on a tiny grid, layer by layer.

    python bench/ops/per_call.py [--device cpu|cuda] [--threads 1] [--rounds 25] [--calls 2000]
                             [--json PATH]

O1 (`bench/ops/bench_ops.py --only O1`) gives the verdicts; this script splits the same call into
its layers and times every case in interleaved rounds (case A's block of calls, then B's, ...,
`--rounds` times), so that a load change on a shared machine hits every case alike. Each block
issues `--calls` calls back to back, then synchronises once (CUDA); a case's figure is the
median over rounds of the time per call, in microseconds, with p20/p80. Inputs are O1's: a
[4, 4, 4, 8] float32 grid, 16 points.

Rows: `F.grid_sample` forward (plain grid, grid requiring grad) and forward+backward (both
gradients); `grid.sample` the same ways; the op's entry point without the Python wrapper;
the 0-point call (dispatch and allocation, no sampling); `VoxelGrid.forward`, the op call it
makes (a grid requiring grad, the box passed as 6 numbers), and its Python share. Ratios:
ours / `F.grid_sample` (goal <= 1.2 on one CPU thread), VoxelGrid / `grid.sample` fw (goal
<= 1.3) and VoxelGrid / `grid.sample` with the grid requiring grad (what VoxelGrid calls).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: bench, grid, train

import grid  # noqa: E402
from grid import ops  # noqa: E402


def cases(device: torch.device) -> dict:
    gen = torch.Generator(device=device).manual_seed(0)
    r, f, n = 4, 8, 16
    feats = torch.randn(r, r, r, f, device=device, generator=gen)
    pts = torch.rand(n, 3, device=device, generator=gen) * 2 - 1
    g = torch.randn(n, f, device=device, generator=gen)
    fg, pg = feats.detach().requires_grad_(), pts.detach().requires_grad_()
    cf = feats.permute(3, 2, 1, 0)[None].contiguous()  # [1, F, Z, Y, X]
    p5 = pts.reshape(1, 1, 1, n, 3)
    g5 = g.T.reshape(1, f, 1, 1, n).contiguous()
    cfg, p5g = cf.detach().requires_grad_(), p5.detach().requires_grad_()
    module = grid.VoxelGrid(r, f, device=device)
    with torch.no_grad():
        module.features.copy_(feats)
    box, empty, entry = module._box(), pts[:0].contiguous(), ops._SAMPLE_ENTRY

    def gs(x, p):
        return F.grid_sample(x, p, mode="bilinear", padding_mode="zeros", align_corners=True)

    return {
        "grid_sample fw": lambda: gs(cf, p5),
        "grid_sample fw, grid requires grad": lambda: gs(cfg, p5),
        "grid_sample fw+bw": lambda: torch.autograd.grad(gs(cfg, p5g), [cfg, p5g], g5),
        "sample fw": lambda: grid.sample(feats, pts),
        "sample fw, grid requires grad": lambda: grid.sample(fg, pts),
        "sample fw+bw": lambda: torch.autograd.grad(grid.sample(fg, pg), [fg, pg], g),
        "op entry fw": lambda: entry(feats, pts, True, "zeros", "linear", None),
        "op entry fw, 0 points": lambda: entry(feats, empty, True, "zeros", "linear", None),
        "VoxelGrid fw": lambda: module(pts),
        "op entry as VoxelGrid calls it": lambda: entry(
            module.features, pts, True, "zeros", "linear", box
        ),
    }


RATIOS = (  # (name, ours, baseline, goal)
    ("fw / grid_sample fw", "sample fw", "grid_sample fw", 1.2),
    ("fw+bw / grid_sample fw+bw", "sample fw+bw", "grid_sample fw+bw", 1.2),
    ("VoxelGrid fw / sample fw", "VoxelGrid fw", "sample fw", 1.3),
    ("VoxelGrid fw / sample fw, grid requires grad", "VoxelGrid fw",
     "sample fw, grid requires grad", None),
    ("VoxelGrid's Python / its op call", "VoxelGrid fw", "op entry as VoxelGrid calls it", None),
    ("sample's Python / op entry", "sample fw", "op entry fw", None),
)  # fmt: skip


def measure(fns: dict, device: torch.device, rounds: int, calls: int) -> dict:
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for fn in fns.values():  # warm up (first-call allocations, lazy initialisation)
        for _ in range(max(1, calls // 4)):
            fn()
    sync()
    times = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            sync()
            times[name].append((time.perf_counter() - t0) * 1e6 / calls)
    return {name: spread(ts) for name, ts in times.items()}


def spread(times: list[float]) -> dict:
    s = sorted(times)
    q = {p: s[round(p * (len(s) - 1))] for p in (0.2, 0.5, 0.8)}
    return {"median_us": q[0.5], "p20_us": q[0.2], "p80_us": q[0.8], "min_us": s[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (torch)")
    parser.add_argument("--rounds", type=int, default=25)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    rows = measure(cases(device), device, args.rounds, args.calls)
    ratios = {}
    for name, ours, base, goal in RATIOS:
        value = rows[ours]["median_us"] / rows[base]["median_us"]
        ratios[name] = {
            "ratio": value,
            "goal": goal,
            "met": None if goal is None else value <= goal,
        }
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.machine()
    print(f"{device.type} ({where}), torch {torch.__version__}, {args.threads} CPU thread(s), "
          f"{args.rounds} rounds x {args.calls} calls")  # fmt: skip
    print(f"{'case':44s} {'median us':>10s} {'p20':>8s} {'p80':>8s}")
    for name, s in rows.items():
        print(f"{name:44s} {s['median_us']:10.2f} {s['p20_us']:8.2f} {s['p80_us']:8.2f}")
    print()
    for name, r in ratios.items():
        verdict = (
            "" if r["goal"] is None else (" met" if r["met"] else " MISSED") + f" (<= {r['goal']})"
        )
        print(f"{name:52s} {r['ratio']:6.2f}x{verdict}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"device": device.type, "device_name": where, "torch": torch.__version__,
                       "threads": args.threads, "rounds": args.rounds, "calls": args.calls,
                       "cases": rows, "ratios": ratios}, fh, indent=1)  # fmt: skip
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
