"""How fast could any S1 / S2 backward be, with atomics, in the points' order or sorted?
(CUDA only.)

Times `bench/probes/scatter_probe.cu`, which makes the feature-gradient updates of
grid.sample's CUDA backward (float4 atomics of the weighted grad_out rows into the [R, R, R, F]
gradient grid, the backward's thread layout) with the cell computation done beforehand and no
point gradient, on S1's and S2's inputs: in the points' order, after sorting the points by cell
(sorted inputs, or read through the sorted index), and as plain stores (racy, for the cost of
the scattered access alone). Next to it: grid.sample's forward, forward+backward and backward
op (both gradients, the grid's only, the points' only), zeroing the gradient grid (`zero_`),
cub's radix sort and torch.sort of the cell keys, and the permutation of grad_out and the cells
into sorted order, all with the benchmark's own timing. From these, the best forward+backward
each order allows, as a share of the byte floor (bench/NOTES.md, "Floors").

    python bench/probes/scatter_probe.py [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from torch.utils.cpp_extension import load

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: bench, grid, train
import grid  # noqa: E402
from bench.harness import ROOT, Ctx, rel_err  # noqa: E402
from bench.ops.bench_ops import parse_args  # noqa: E402
from bench.ops.ops_sample import SampleCase  # noqa: E402
from bench.ops.workloads import FULL, seed_of  # noqa: E402
from bench.probes.gather_probe import precomputed_cells  # noqa: E402
from grid import _backend  # noqa: E402


def build_probe():
    return load(
        name="grid_scatter_probe",
        sources=[str(Path(__file__).with_name("scatter_probe.cu"))],
        extra_include_paths=[str(ROOT / "csrc")],
        extra_cuda_cflags=_backend.NVCC_FLAGS,
        extra_ldflags=_backend.LINK_FLAGS,
    )


def timings(ctx: Ctx, probe, case: SampleCase) -> tuple[dict, dict]:
    """Queued timings (name -> timeit stats) and the probe's errors against the backward op."""
    device, f, r = case.device, case.f, case.r
    feats, points, grad = case.features, case.points, case.grad
    g = grad.reshape(-1, f)  # [N, F]
    cells = precomputed_cells(feats, points)  # [N, 4]
    keys = (cells[:, 0] // f).contiguous()  # [N]: the cell's corner-0 voxel
    index = torch.arange(keys.numel(), dtype=torch.int32, device=device)
    end_bit = (r**3 - 1).bit_length()
    order = probe.sort_pairs(keys, index, end_bit)[1]  # [N] int32
    sorted_g, sorted_cells = g.index_select(0, order), cells.index_select(0, order)
    none = torch.empty(0, dtype=torch.int32, device=device)
    target = torch.zeros_like(feats)  # accumulates over the repetitions: only timed
    fg, pg = feats.detach().requires_grad_(), points.detach().requires_grad_()

    def backward(mask):
        return lambda: torch.ops.grid.sample_backward(
            grad, feats, points, True, "zeros", "linear", mask
        )

    def scatter(rows, cells_, order_, atomic):
        return lambda: probe.scatter_probe(rows, cells_, order_, target, atomic)

    fns = {
        "fw grid.sample": lambda: grid.sample(feats, points),
        "fw+bw grid.sample": lambda: torch.autograd.grad(grid.sample(fg, pg), [fg, pg], grad),
        "bw op, both grads": backward([True, True]),
        "bw op, grid grad only": backward([True, False]),
        "bw op, point grad only": backward([False, True]),
        "zero grad grid": target.zero_,
        "scatter atomic, given order": scatter(g, cells, none, True),
        "scatter atomic, sorted inputs": scatter(sorted_g, sorted_cells, none, True),
        "scatter atomic, through sorted index": scatter(g, cells, order, True),
        "scatter store, given order": scatter(g, cells, none, False),
        "scatter store, sorted inputs": scatter(sorted_g, sorted_cells, none, False),
        f"sort cub pairs ({end_bit} bits)": lambda: probe.sort_pairs(keys, index, end_bit),
        "sort torch.sort int32": lambda: torch.sort(keys),
        "permute grad_out + cells": lambda: (
            g.index_select(0, order),
            cells.index_select(0, order),
        ),
    }
    stats = {name: ctx.time(fn, device) for name, fn in fns.items()}
    stats["sort cub pairs"] = stats.pop(f"sort cub pairs ({end_bit} bits)")

    expected = backward([True, False])()[0]
    errors = {}
    for name, (rows, cells_, order_) in {
        "given order": (g, cells, none),
        "sorted inputs": (sorted_g, sorted_cells, none),
        "through sorted index": (g, cells, order),
    }.items():
        target.zero_()
        probe.scatter_probe(rows, cells_, order_, target, True)
        errors[f"scatter atomic, {name}"] = rel_err(target, expected)
    return stats, errors


def bounds(t: dict[str, float], floor: float) -> dict[str, dict]:
    """Forward+backward times the probes allow (ms) and their share of the byte floor.
    Every bound takes our forward as it is; "+ point grad" adds our point-gradient-only
    backward as a separate kernel (a fused kernel might hide part of it); the others take the
    point gradient as free, so they are the most any backward in that order can reach."""
    fw, zero, pg = t["fw grid.sample"], t["zero grad grid"], t["bw op, point grad only"]
    sort = t["sort cub pairs"]
    given = fw + zero + t["scatter atomic, given order"]
    sorted_ = fw + sort + t["permute grad_out + cells"] + zero + t["scatter atomic, sorted inputs"]
    indexed = fw + sort + zero + t["scatter atomic, through sorted index"]
    times = {
        "ours fw+bw (measured)": t["fw+bw grid.sample"],
        "fw + zero + atomic scatter, given order": given,
        "fw + zero + atomic scatter, given order + point grad": given + pg,
        "fw + cub sort + permute + zero + sorted atomic scatter": sorted_,
        "fw + cub sort + permute + zero + sorted scatter + point grad": sorted_ + pg,
        "fw + cub sort + zero + atomic scatter through sorted index": indexed,
        "fw + plain stores, given order (no zeroing, no atomics)": fw
        + t["scatter store, given order"],
    }
    return {name: {"ms": ms, "floor_pct": 100 * floor / ms} for name, ms in times.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=str(ROOT / "bench" / "results" / "scatter_probe.json"))
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("scatter_probe: needs a CUDA device", file=sys.stderr)
        return 1
    probe = build_probe()
    device = torch.device("cuda")
    ctx = Ctx(parse_args(["--device", "cuda", "--only", "S1,S2"]), device)
    gbps = ctx.gbps(device)
    result = {"device": torch.cuda.get_device_name(device), "torch": torch.__version__}
    result["copy_gbps"] = gbps
    print(f"{result['device']} | torch {result['torch']} | copy {gbps:.0f} GB/s")
    for name in ("S1", "S2"):
        seed = seed_of(name)  # the benchmark's inputs
        case = SampleCase(ctx, FULL[name], seed, device)
        stats, errors = timings(ctx, probe, case)
        medians = {k: v["median"] for k, v in stats.items()}
        floor = case.nbytes["fwbw"] / (gbps * 1e9) * 1e3
        result[name] = {
            "note": case.note,
            "floor_fwbw_ms": floor,
            "timings": stats,
            "rel_err_vs_bw_op": errors,
            "bounds": bounds(medians, floor),
        }
        print(f"{name}: {case.note}; fw+bw floor {floor:.4f} ms")
        for key, ms in medians.items():
            err = f"  rel_err {errors[key]:.1e}" if key in errors else ""
            print(f"  {key:42s} {ms:.4f} ms{err}")
        for key, b in result[name]["bounds"].items():
            print(f"  {key:62s} {b['ms']:.4f} ms  {b['floor_pct']:4.0f}% of floor")
        del case
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(result, indent=1))
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
