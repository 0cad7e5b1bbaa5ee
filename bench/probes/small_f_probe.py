"""Small-F kernel variants on S5's rays, side by side with the benchmark's own timing.
(CUDA only.)

Times `bench/probes/small_f_probe.cu` (the kernels of csrc/cuda/sample_small_f.cuh with one or two
points per thread in the forward; in the backward z-pair vector or scalar atomics, with or without
the warp's run sums of csrc/cuda/corner_runs.cuh) next to grid.sample's forward and backward op
and F.grid_sample, for F = 1, 2, 3, 4; then the backward variants again on as many uniform
points in the same grid (random order: what the run sums cost where nothing is shared).

    python bench/probes/small_f_probe.py [--json PATH]
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
from bench.ops.ops_sample import small_f_case  # noqa: E402
from bench.ops.workloads import FULL, generator, grid_sample, make_points, seed_of, uniform_points  # noqa: E402
from grid import _backend  # noqa: E402


def backward_variants(probe, g, feats, points) -> dict:
    """The small-F backward kernels (grid gradient only): atomics x run sums."""
    return {
        f"bw small-F {atomics}{' + runs' if runs else ''}": (
            lambda vector=vector, runs=runs: probe.backward(g, feats, points, vector, runs)
        )
        for atomics, vector in (("vector atomics", True), ("scalar atomics", False))
        for runs in (False, True)
    }


def time_uniform(ctx: Ctx, probe, case, lines: list[str]) -> dict:
    """The backward variants on uniform points (as many as the rays), same grid and grad_out."""
    f, feats, device = case.f, case.features, case.device
    g = case.grad.reshape(-1, f)
    points = uniform_points(g.shape[0], device, generator(device, 7))
    ref_grad = torch.ops.grid.sample_backward(
        g, feats, points, True, "zeros", "linear", [True, False]
    )[0]
    variants = {
        "uniform: bw grid op (grid)": lambda: torch.ops.grid.sample_backward(
            g, feats, points, True, "zeros", "linear", [True, False]
        ),
        **{f"uniform: {k}": v for k, v in backward_variants(probe, g, feats, points).items()},
    }
    rows = {}
    for name, fn in variants.items():
        stats = ctx.time(fn, device)
        if "small-F" in name:
            stats["rel_err"] = rel_err(fn(), ref_grad)
        rows[name] = stats
        err = f"  err {stats['rel_err']:.1e}" if "rel_err" in stats else ""
        lines.append(f"F={f} {name:37s} {stats['median']:.4f} ms{err}")
    return rows


def time_variants(ctx: Ctx, probe, case, lines: list[str]) -> dict:
    """Every variant for one F: queued medians, and errors against the library's results."""
    f, feats, points, device = case.f, case.features, case.points, case.device
    g = case.grad.reshape(-1, f)
    cf = feats.permute(3, 2, 1, 0)[None].contiguous()
    p5 = points.reshape(1, 1, 1, -1, 3)
    cfg = cf.detach().requires_grad_()
    g_cf = g.T.reshape(1, f, 1, 1, -1).contiguous()
    ref_out = grid.sample(feats, points)
    ref_grad = torch.ops.grid.sample_backward(
        g, feats, points, True, "zeros", "linear", [True, False]
    )[0]
    variants = {
        "fw F.grid_sample": lambda: grid_sample(cf, p5),
        "fw grid.sample": lambda: grid.sample(feats, points),
        "fw small-F 1/thread": lambda: probe.forward(feats, points, 1),
        "fw small-F 2/thread": lambda: probe.forward(feats, points, 2),
        "bw F.grid_sample (grid)": lambda: torch.autograd.grad(grid_sample(cfg, p5), cfg, g_cf),
        "bw grid op (grid)": lambda: torch.ops.grid.sample_backward(
            g, feats, points, True, "zeros", "linear", [True, False]
        ),
        **backward_variants(probe, g, feats, points),
    }
    rows = {}
    for name, fn in variants.items():
        stats = ctx.time(fn, device)
        if "small-F" in name:
            want = ref_out if name.startswith("fw") else ref_grad
            stats["rel_err"] = rel_err(fn(), want)
        rows[name] = stats
        err = f"  err {stats['rel_err']:.1e}" if "rel_err" in stats else ""
        lines.append(f"F={f} {name:37s} {stats['median']:.4f} ms{err}")
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=str(ROOT / "bench" / "results" / "small_f_probe.json"))
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("small_f_probe: needs a CUDA device", file=sys.stderr)
        return 1
    probe = load(
        name="grid_small_f_probe",
        sources=[str(Path(__file__).with_name("small_f_probe.cu"))],
        extra_include_paths=[str(ROOT / "csrc")],
        extra_cuda_cflags=_backend.NVCC_FLAGS,
        extra_ldflags=_backend.LINK_FLAGS,
    )
    device = torch.device("cuda")
    ctx = Ctx(parse_args(["--device", "cuda", "--only", "S5"]), device)
    seed = seed_of("S5")  # the benchmark's S5 inputs
    size = FULL["S5"]
    points = make_points(size, device, generator(device, seed)).reshape(-1, 3)
    result: dict = {"device": torch.cuda.get_device_name(device), "torch": torch.__version__}
    lines: list[str] = []
    for f in (1, 2, 3, 4):
        case = small_f_case(ctx, size, seed, f, points, 0)
        result[f"F={f}"] = time_variants(ctx, probe, case, lines)
        result[f"F={f}"].update(time_uniform(ctx, probe, case, lines))
    print(f"{result['device']} | torch {result['torch']} | S5 rays, R=160")
    print("\n".join(lines))
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(result, indent=1))
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
