"""Benchmark the grid operators against plain PyTorch and `F.grid_sample`.

    python bench/ops/bench_ops.py [--device cuda|cpu|auto] [--only P1,S2,...] [--json PATH]
                              [--quick] [--cpu-threads N] [--warmup N] [--reps N]

Workloads (full sizes; `--quick` shrinks them for a CPU smoke test):
    P1  grid.trilinear, N = 65536, F = 256: forward, backward (grads to corners and local,
        the backward op alone), backward with the grad to corners only; vs grid.reference.
    P2  the same with N = 2^20, F = 16.
    S1  grid.sample, R = 128, F = 16, rays (4096 rays x 256 samples): forward and
        forward+backward (grads to features and points); vs F.grid_sample on the
        channels-first [1, F, Z, Y, X] copy of the grid (made outside the timed region).
    S2  S1 with 2^20 points uniform in [-1, 1]^3.
    S3  R = 256, F = 32, rays.
    S4  S1 with bfloat16 features (float32 points); vs our own float32 S1, and vs
        F.grid_sample in bfloat16.
    S5  small F: F in 1, 2, 3, 4, 8, 12, 16, 32, R = 160, rays (8192 rays x 192 samples):
        forward and forward+backward to the grid only; vs F.grid_sample.
    T1  one VoxelGrid training step (forward, MSE, backward to features, Adam step),
        R = 128, F = 16, 2^20 uniform points; vs the same step with F.grid_sample.
    C1  CPU (always), grid.sample R = 128, F = 16, 2^18 uniform points, forward and
        forward+backward; vs F.grid_sample on the CPU.
    O1  per-call host cost on tiny inputs ([4, 4, 4, 8] grid, 16 points), microseconds per
        call (many calls back to back, then one synchronize): grid.sample forward and
        forward+backward, VoxelGrid forward, and grid.sample on 0 points (the custom-op
        dispatch floor); vs F.grid_sample. On the GPU device and on the CPU with 1 thread.
        Also VoxelGrid forward against grid.sample forward (its wrapper's cost), with the
        grid not requiring and requiring grad (the latter is what VoxelGrid calls).
    V1  total variation, R = 256, F = 16, float32: grid.total_variation forward+backward,
        and total_variation_add_grad_ (the gradient added into an existing one); vs the
        plain PyTorch definition (grid.reference.total_variation) forward+backward.
    D1  the sample backward op alone under torch.use_deterministic_algorithms(True): on S1's
        and S2's inputs (grads to features and points), and on S5's rays for F = 1, 2, 3, 4, 16
        (grad to the grid only, S5's grids); vs our default (atomic) backward.
    E1  an eikonal training step (forward, grad_x by create_graph=True, loss
        (|grad_x f| - 1)^2 + |f|, backward through the double backward, Adam), R = 128,
        2^18 uniform points, F = 1 and F = 8 (f = the sum of the channels), linear and
        smoothstep; vs the same step on grid.reference.sample (gather + weights, second
        order through autograd), and vs F.grid_sample where it has a double backward.
    L1  the fitting loop's field step (bench/ops/bench_loop.py): configs/density_256.toml at
        256^3 with 2^20 points (steps/s) and configs/default.toml (points/s), captured as a
        CUDA graph (the default on CUDA) and op by op; vs the step before issue 21.
    U1  one grid.MaskedAdam step over a [160, 160, 160, 12] float32 grid whose gradient is
        non-zero in a random 5%, 50% or 100% of the voxels; vs torch.optim.Adam fused and
        foreach (which update every voxel). Floor: the gradient read once, param and both
        moments read and written in the 64-byte lines (CPU) / 32-byte sectors (CUDA) that
        hold a non-zero gradient.

Every time is a median over repetitions. On the GPU two timings per row: queued (CUDA
events around kernels enqueued back to back behind a GPU sleep: the kernels' time) and
synchronised (host clock around each repetition plus a device synchronise: what a step
loop sees, host cost included); on the CPU perf_counter (both columns the same). The
"floor" is the minimal bytes a workload must move divided by the copy bandwidth measured
in the same run (bench/NOTES.md has the byte formulas); "% of ceiling" = floor / measured.
Prints one table and writes JSON plus a markdown table next to it (default
bench/results/bench.json and bench.md).

Code: bench/harness.py (timing, rows, targets, tables, JSON; shared with the other
benchmarks), bench/ops/workloads.py (sizes, seeds, inputs), bench/ops/ops_sample.py (S1-S5, C1, D1),
bench/ops/ops_other.py (P1, P2, O1, V1, U1), bench/ops/bench_steps.py (T1, E1),
bench/ops/bench_loop.py (L1); this file holds the command line and the targets.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import sys
import time
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: bench, grid, train

import grid  # noqa: E402
from bench.harness import (  # noqa: E402
    ROOT,
    Ctx,
    failures,
    free_memory,
    header,
    make_row,
    targets,
    targets_text,
    text_table,
    write_results,
)
from bench.ops.bench_loop import bench_loop  # noqa: E402
from bench.ops.bench_steps import E1_FEATURES, E1_INTERPOLATIONS, bench_eikonal, bench_train  # noqa: E402
from bench.ops.ops_other import (  # noqa: E402
    bench_masked_adam,
    bench_overhead,
    bench_total_variation,
    bench_trilinear,
)
from bench.ops.ops_sample import (  # noqa: E402
    D1_S5_FEATURES,
    S5_FEATURES,
    bench_bf16,
    bench_cpu,
    bench_deterministic,
    bench_sample,
    bench_small_f,
)
from bench.ops.workloads import FULL, QUICK, WORKLOADS, seed_of  # noqa: E402

BENCHES = {
    "P1": bench_trilinear,
    "P2": bench_trilinear,
    "S1": bench_sample,
    "S2": bench_sample,
    "S3": bench_sample,
    "S4": bench_bf16,
    "S5": bench_small_f,
    "T1": bench_train,
    "C1": bench_cpu,
    "O1": bench_overhead,
    "V1": bench_total_variation,
    "D1": bench_deterministic,
    "E1": bench_eikonal,
    "L1": bench_loop,
    "U1": bench_masked_adam,
}


# ---- targets ---------------------------------------------------------------------


# Which timing a verdict reads: the queued one (kernels back to back) for the pure kernel
# rows, the synchronised one where host cost is part of what the user gets (a training step,
# the small-F sweep's forward+backward). Fixed here, before any run: never the more
# flattering one after the fact.
SYNCED_VERDICTS = (
    {("T1", "step")}
    | {("S5", f"fwbw_F{f}") for f in (1, 2, 3, 4, 8, 12, 16, 32)}
    | {("E1", f"step_F{f}_{i}") for f in E1_FEATURES for i in E1_INTERPOLATIONS}
    | {("L1", "density_256_graph"), ("L1", "default_graph")}
)


def target_specs() -> list[tuple]:
    """(workload, key, kind, threshold, text) of every target."""
    pct = "achieved bandwidth >= 85% of the copy bandwidth"
    specs = [
        ("P1", "fw", "pct", 0.85, pct),
        ("P1", "bw", "pct", 0.85, pct),
        ("P2", "fw", "pct", 0.85, pct),
        ("P2", "bw", "pct", 0.85, pct),
        ("S1", "fw", "speedup", 5, ">= 5x F.grid_sample"),
        ("S1", "fwbw", "speedup", 5, ">= 5x F.grid_sample"),
        ("S2", "fw", "speedup", 2, ">= 2x F.grid_sample"),
        ("S2", "fwbw", "speedup", 3, ">= 3x F.grid_sample"),
        ("S3", "fw", "speedup", 5, ">= 5x F.grid_sample"),
        ("S3", "fwbw", "speedup", 5, ">= 5x F.grid_sample"),
        ("S4", "fwbw_vs_fp32", "ratio", 0.6, "bf16 time <= 0.6x float32 (S1) time"),
    ]
    for f in S5_FEATURES:
        specs.append(("S5", f"fw_F{f}", "speedup", 2, ">= 2x F.grid_sample"))
        goal = 2 if f == 1 else 3 if f <= 4 else None
        if goal:
            specs.append(("S5", f"fwbw_F{f}", "speedup", goal, f">= {goal}x F.grid_sample"))
    specs += [
        ("T1", "step", "speedup", 3, ">= 3x the steps/s of the F.grid_sample step"),
        ("C1", "fw", "speedup", 5, ">= 5x F.grid_sample on the CPU"),
        ("C1", "fwbw", "speedup", 5, ">= 5x F.grid_sample on the CPU"),
        ("O1", "fw", "speedup", 1, "host cost per call <= F.grid_sample's"),
        ("O1", "fwbw", "speedup", 1, "host cost per call <= F.grid_sample's"),
        ("O1", "fw_cpu", "speedup", 1, "cost per call (1 thread) <= F.grid_sample's"),
        ("O1", "fwbw_cpu", "speedup", 1, "cost per call (1 thread) <= F.grid_sample's"),
        ("O1", "module_vs_fw", "ratio", 1.3, "VoxelGrid fw <= 1.3x grid.sample fw per call"),
        ("O1", "module_vs_fw_cpu", "ratio", 1.3, "VoxelGrid fw <= 1.3x grid.sample fw (1 thread)"),
        ("V1", "fwbw", "pct", 0.5, ">= 50% of the byte floor"),
        ("V1", "add_grad", "pct", 0.5, ">= 50% of the byte floor"),
        ("D1", "bw_S1", "ratio", 2, "deterministic time <= 2x the atomic backward"),
        ("D1", "bw_S2", "ratio", 2, "deterministic time <= 2x the atomic backward"),
        ("U1", "p5_fused", "speedup", 3, ">= 3x torch's fused Adam (5% of the voxels)"),
        ("U1", "p100_fused", "ratio", 1.1, "time <= 1.1x torch's fused Adam (every voxel)"),
    ]
    for f in D1_S5_FEATURES:
        specs.append(("D1", f"bw_S5_F{f}", "ratio", 2, "deterministic <= 2x the atomic backward"))
    for f in E1_FEATURES:
        for i in E1_INTERPOLATIONS:
            specs.append(("E1", f"step_F{f}_{i}", "speedup", 5, ">= 5x the reference's steps/s"))
    specs += [
        ("L1", "density_256_graph", "speedup", 1.5, ">= 1.5x the steps/s of the step before"),
        ("L1", "default_graph", "speedup", 5, ">= 5x the points/s of the step before"),
    ]
    return specs


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="auto", choices=("auto", "cuda", "cpu"))
    parser.add_argument("--only", default="", help="comma-separated workloads, e.g. P1,S2")
    parser.add_argument("--json", default=str(ROOT / "bench" / "results" / "bench.json"))
    parser.add_argument("--quick", action="store_true", help="small sizes (smoke test)")
    parser.add_argument("--cpu-threads", type=int, default=None, help="torch.set_num_threads")
    parser.add_argument("--warmup", type=int, default=None, help="override warm-up iterations")
    parser.add_argument("--reps", type=int, default=None, help="override timed repetitions")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    args.only = [w.strip().upper() for w in args.only.split(",") if w.strip()] or list(WORKLOADS)
    unknown = sorted(set(args.only) - set(WORKLOADS))
    if unknown:
        parser.error(f"--only: unknown workloads {unknown}; choose from {', '.join(WORKLOADS)}")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.cpu_threads:
        torch.set_num_threads(args.cpu_threads)
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.device == "cuda" and not torch.cuda.is_available():
        print("--device cuda: torch sees no CUDA device", file=sys.stderr)
        return 2
    device = torch.device(args.device)
    sizes = QUICK if args.quick else FULL
    ctx = Ctx(args, device)
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
    else:
        name = f"CPU ({platform.processor() or platform.machine()})"
    meta = {
        "device": args.device,
        "device_name": name,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "grid_version": grid.__version__,
        "grid_ops": getattr(sys.modules.get("grid._backend"), "source", "?"),
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "cpu_threads": torch.get_num_threads(),
        "quick": args.quick,
        "argv": sys.argv[1:] if argv is None else list(argv),
    }
    print(f"bench: {name}, torch {torch.__version__}, {torch.get_num_threads()} CPU threads")

    rows: list[dict] = []
    errors: dict[str, str] = {}
    for workload in args.only:
        size = sizes[workload]
        print(f"  {workload} {size} ...", flush=True)
        t0 = time.perf_counter()
        # Seeded per workload (not per position in --only); S4 draws S1's inputs.
        seed = seed_of(workload, args.seed)
        try:
            torch.manual_seed(seed)
            rows += BENCHES[workload](ctx, workload, size, seed)
        except Exception as error:  # noqa: BLE001 - keep the other workloads
            message = f"{type(error).__name__}: {str(error).strip()[:500]}"
            errors[workload] = message
            traceback.print_exc()
            failed = {"stats": None, "error": message, "peak_mb": None}
            rows.append(
                make_row(workload, "error", "ERROR", failed, None, None, 0, None, None, message)
            )
        free_memory()
        print(f"    done in {time.perf_counter() - t0:.1f} s", flush=True)

    meta["copy_bandwidth_gbps"] = dict(ctx.bandwidth)
    meta["copy_bandwidth_stats"] = ctx.bandwidth_stats
    met = targets(rows, target_specs(), SYNCED_VERDICTS)
    result = {
        **meta,
        "sizes": {w: sizes[w] for w in args.only},
        "rows": rows,
        "errors": errors,
        "targets": met,
    }

    top = header(meta)
    table = text_table(rows)
    notes = "\n".join(f"  {w}: {r['note']}" for w, r in {r["workload"]: r for r in rows}.items())
    print()
    print(top)
    print(table)
    print("\nnotes:\n" + notes)
    failed = failures(rows, errors)
    if failed:
        print("\nerrors:\n" + "\n".join(failed))
    print(
        "\ntargets" + (" (defined for CUDA; informational on CPU)" if device.type == "cpu" else "")
    )
    print(targets_text(met))

    path = Path(args.json)
    md = write_results(path, result, top, rows, met)
    print(f"\nwrote {path} and {md}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
