"""CPU thread scaling of the native ops, each against its PyTorch counterpart at the same thread
count (`torch.set_num_threads`), one table row per (op, threads).

    python bench/ops/cpu_threads.py [--threads 1 2 4 8 16] [--json out.json] [--quick]

Rows (float32):
  sample fw        grid.sample, 128^3 x 16 grid, 2^20 uniform points      vs F.grid_sample
  sample fw+bw     the same, gradients to the grid and the points           vs F.grid_sample
  sample fw+bw F4  F = 4                                                    vs F.grid_sample
  sample 2x bw     the eikonal pattern: d|grad_points|^2 / d grid, F = 1    vs F.grid_sample
                   (vs grid.reference.sample where torch has no double backward for it)
  march            march_rays_static, 8192 rays through a 128^3 occupancy grid (half set)
                                                                            vs grid.march_rays
  composite        composite_rays fw+bw on march's samples, C = 3           vs grid.composite
  total variation  fw+bw, 128^3 x 16                                        vs the formula
  masked adam      masked_adam_, 128^3 x 16, a third of the gradient zero   vs the formula

Thread counts above the machine's cores are skipped. Each time is a median of repetitions
(perf_counter, one call per repetition: the host cost is part of a CPU op). The speed-up
column is against the same op on 1 thread; `vs torch` is the counterpart's time over ours.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: bench, grid, train

import grid  # noqa: E402
import grid.reference as ref  # noqa: E402
from bench.harness import timeit  # noqa: E402
from bench.ops import workloads  # noqa: E402


def grid_sample(features: torch.Tensor, points: torch.Tensor) -> torch.Tensor:
    """The baseline on the channels-first copy a grid_sample user keeps, [N, F] out."""
    out = workloads.grid_sample(features, points.reshape(1, 1, 1, -1, 3))
    return out.reshape(features.shape[1], -1).T


def sample_cases(r: int, f: int, n: int, gen: torch.Generator):
    """(ours, theirs) closures of forward and forward+backward."""
    ours = torch.randn(r, r, r, f, generator=gen).requires_grad_(True)
    theirs = ours.detach().permute(3, 2, 1, 0)[None].contiguous().requires_grad_(True)
    points = (torch.rand(n, 3, generator=gen) * 2.2 - 1.1).requires_grad_(True)
    grad_out = torch.randn(n, f, generator=gen)

    def fwbw(fn, features):
        def run():
            features.grad = points.grad = None
            fn(features, points).backward(grad_out)

        return run

    return {
        "fw": (lambda: grid.sample(ours, points), lambda: grid_sample(theirs, points)),
        "fw+bw": (fwbw(grid.sample, ours), fwbw(grid_sample, theirs)),
    }


def eikonal_case(r: int, n: int, gen: torch.Generator):
    """The SDF's eikonal term: the gradient of |d sdf / d points|^2 to the grid."""
    ours = torch.randn(r, r, r, 1, generator=gen).requires_grad_(True)
    theirs = ours.detach().permute(3, 2, 1, 0)[None].contiguous().requires_grad_(True)
    points = (torch.rand(n, 3, generator=gen) * 1.8 - 0.9).requires_grad_(True)

    def run(fn, features):
        def step():
            features.grad = points.grad = None
            sdf = fn(features, points)
            (g,) = torch.autograd.grad(sdf.sum(), points, create_graph=True)
            g.square().sum().backward()

        return step

    theirs_step = run(grid_sample, theirs)
    try:
        theirs_step()
    except RuntimeError:  # torch < 2.13: no double backward of grid_sample; the reference
        theirs = ours.detach().clone().requires_grad_(True)
        theirs_step = run(lambda f, p: ref.sample(f, p), theirs)
    return run(grid.sample, ours), theirs_step


def ray_cases(n_rays: int, r: int, gen: torch.Generator):
    origins = torch.randn(n_rays, 3, generator=gen)
    origins = origins / origins.norm(dim=1, keepdim=True) * 2.5
    aim = (torch.rand(n_rays, 3, generator=gen) * 2 - 1) * 0.5
    directions = aim - origins
    directions = directions / directions.norm(dim=1, keepdim=True)
    occupancy = grid.OccupancyGrid(r, [[-1.0] * 3, [1.0] * 3])
    occupancy.flags.copy_(torch.rand(r, r, r, generator=gen) < 0.5)
    step = 2.0 / r / 2  # half a voxel, as the NeRF configs
    lo, hi = [-1.0] * 3, [1.0] * 3
    max_steps = int(2 * 3**0.5 / step) + 1

    def march():
        return grid.march_rays_static(
            origins, directions, lo, hi, step, max_steps=max_steps, occupancy=occupancy
        )

    def march_torch():
        return grid.march_rays(origins, directions, lo, hi, step, occupancy=occupancy)

    packed = march()
    s = packed.t.shape[0]
    tau = (torch.rand(s, generator=gen) * 0.05).requires_grad_(True)
    colors = torch.rand(s, 3, generator=gen).requires_grad_(True)
    t = packed.t.detach()
    offsets = packed.offsets
    counts = offsets.diff()
    ray_indices = torch.repeat_interleave(torch.arange(n_rays), counts)
    grads = [torch.randn(n_rays, 3, generator=gen), torch.randn(n_rays, generator=gen)]

    def composite():
        tau.grad = colors.grad = None
        rgb, depth, _ = grid.composite_rays(tau, colors, t, offsets)
        torch.autograd.backward([rgb, depth], grads)

    def composite_torch():
        tau.grad = colors.grad = None
        alpha = -torch.expm1(-tau)
        weights = grid.composite_weights(alpha, ray_indices, n_rays)
        rgb, depth, _ = grid.composite(weights, ray_indices, n_rays, colors, t)
        torch.autograd.backward([rgb, depth], grads)

    return {"march": (march, march_torch), "composite": (composite, composite_torch)}, s


def grid_cases(r: int, f: int, gen: torch.Generator):
    features = torch.randn(r, r, r, f, generator=gen).requires_grad_(True)

    def tv(fn):
        def run():
            features.grad = None
            fn(features).backward()

        return run

    state = [torch.randn(r, r, r, f, generator=gen) for _ in range(2)]
    state[1].abs_()
    grad = torch.randn(r, r, r, f, generator=gen)
    grad[torch.rand(r, r, r, f, generator=gen) < 1 / 3] = 0
    param = features.detach().clone()
    options = dict(lr=1e-2, beta1=0.9, beta2=0.99, eps=1e-15, step=10)

    def adam(fn):
        return lambda: fn(param, state[0], state[1], grad, **options)

    return {
        "total variation": (tv(grid.total_variation), tv(ref.total_variation)),
        "masked adam": (adam(grid.masked_adam_), adam(ref.masked_adam_)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    parser.add_argument("--json", help="write the rows here")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--reps", type=int, default=None)
    args = parser.parse_args()
    reps = args.reps or (3 if args.quick else 7)
    cores = os.cpu_count() or 1
    threads = [t for t in args.threads if t <= cores]
    gen = torch.Generator().manual_seed(0)
    n = 2**20
    cases = {}
    for label, f in (("", 16), (" F4", 4)):
        for kind, pair in sample_cases(128, f, n, gen).items():
            if label and kind == "fw":
                continue
            cases[f"sample {kind}{label}"] = pair
    cases["sample 2x bw F1"] = eikonal_case(128, 2**18, gen)
    rays, samples = ray_cases(8192, 128, gen)
    cases.update(rays)
    cases.update(grid_cases(128, 16, gen))

    rows, base = [], {}
    for t in threads:
        torch.set_num_threads(t)
        for name, (ours, theirs) in cases.items():
            ms = timeit(ours, torch.device("cpu"), 1, reps)["median"]
            ref_ms = timeit(theirs, torch.device("cpu"), 1, reps)["median"]
            base.setdefault(name, ms)
            rows.append(
                {
                    "op": name,
                    "threads": t,
                    "ms": ms,
                    "torch_ms": ref_ms,
                    "speedup_vs_1_thread": base[name] / ms,
                    "vs_torch": ref_ms / ms,
                }
            )
            r = rows[-1]
            print(
                f"| {name} | {t} | {ms:.1f} | {r['speedup_vs_1_thread']:.2f}x | "
                f"{ref_ms:.1f} | {r['vs_torch']:.2f}x |",
                flush=True,
            )
    print(
        f"\nCPU threads ({platform.processor() or platform.machine()}, {cores} cores, torch "
        f"{torch.__version__}; march/composite: 8192 rays, {samples} samples), median ms\n"
    )
    print("| op | threads | ours ms | speed-up vs 1 thread | torch ms | ours vs torch |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for r in sorted(rows, key=lambda r: (list(cases).index(r["op"]), r["threads"])):
        print(
            f"| {r['op']} | {r['threads']} | {r['ms']:.1f} | {r['speedup_vs_1_thread']:.2f}x | "
            f"{r['torch_ms']:.1f} | {r['vs_torch']:.2f}x |"
        )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"cores": cores, "torch": torch.__version__, "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
