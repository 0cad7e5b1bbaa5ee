"""Our `VoxelGrid` as the field of a nerfacc occupancy-grid model, against the same model on
`F.grid_sample`: training steps/s, test PSNR, seconds and peak memory, side by side.

    python bench/compare/nerfacc/bench_nerfacc.py [--steps N] [--batch RAYS] [--resolution R]
        [--backends ours,grid_sample] [--device cuda|cpu] [--scene-size N] [--out DIR]

The model (bench/compare/nerfacc/nerfacc_field.py; a backend's training run in
nerfacc_run.py) is nerfacc's `examples/train_ngp_nerf_occ.py`
with a dense-grid field in place of the hash grid: a density grid (1 channel, DirectVoxGO's
softplus activation) and a colour grid (12 channels) with VoxelNeRF's small MLP on the
view direction, both grids on "ours" (`grid.VoxelGrid`, channels last) or on "grid_sample"
(`[1, C, X, Y, Z]`, `F.grid_sample`), the same parameters and maths. As in the example:
`nerfacc.OccGridEstimator` over the scene box (--occ-resolution cells a side) refreshed by
`update_every_n_steps` (every 16 steps, the density over one render step as occupancy),
`estimator.sampling` with the density as `sigma_fn` (stratified while training),
`nerfacc.rendering` onto the white background. Unlike it: a fixed batch of --batch rays
a step (drawn from all training pixels), MSE, Adam with DirectVoxGO's learning rates
(grids 0.1, MLP 1e-3, decayed to a tenth over the run), no coarse-to-fine.

The scene: --config's data section (configs/nerf_realistic_gpu.toml: the realistic scene,
400x400, 100 training and 25 test views, generated on first use). Each backend trains
--steps steps from the same seed; the clock (CUDA synchronised) runs from step --warmup to
the end, evaluation excluded; then the mean PSNR over the test views. Peak memory: torch's
max_memory_allocated over the training (the scene's rays, on the device, included).
Writes nerfacc.md (the table) and nerfacc.json to --out, after each backend.
Target (issue 38): ours >= 1.5x grid_sample's steps/s with PSNR within 0.1 dB.

`--backends ngp` adds an anchor, not our grid: instant-ngp's field as nerfacc's example builds it
(bench/compare/nerfacc/ngp_field.py: the hash encoding from torch-ngp's `gridencoder`, built from
--ngp DIR; on the CPU grid.reference's stand-in) trained by the example's own recipe: Adam at
1e-2 (eps 1e-15, weight decay 1e-6), 100 steps of linear warm-up, the rate times 0.33 at 1/2,
3/4 and 9/10 of the run, a render step of 5e-3 (world units), occupancy threshold 1e-2, smooth
L1 (scaled by 2^10, as its never-unscaled gradient scaler does), and rays a step adapted so that
a step renders about --ngp-samples samples (the example's 2^18). Differences: float32 MLPs in
PyTorch (tiny-cuda-nn's are fused, in half precision), torch-ngp's encoder for tiny-cuda-nn's.

nerfacc is a benchmark-only dependency (`pip install nerfacc`; its CUDA ops build with nvcc
on first use). On CUDA this script runs nerfacc or stops; --device cpu (a tiny scene, for
the tests) runs a pure-PyTorch stand-in for nerfacc's CUDA-only sampling and rendering
(bench/compare/nerfacc/nerfacc_cpu.py), labelled as such in the output.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the checkout: bench, grid, train

from bench.compare.nerfacc.nerfacc_field import BACKENDS  # noqa: E402
from bench.compare.nerfacc.nerfacc_run import BenchError, Run, render_rays, sync  # noqa: E402
from bench.harness import ROOT  # noqa: E402
from train.config import load_config  # noqa: E402
from train.errors import ConfigError  # noqa: E402
from train.metrics import psnr  # noqa: E402
from train.nerf.data.blender import camera_rays, load_blender  # noqa: E402
from train.nerf.scene_path import ensure_scene  # noqa: E402

GiB = 2**30
TARGET_RATIO, PSNR_TOLERANCE = 1.5, 0.1
ALL_BACKENDS = (*BACKENDS, "ngp")


def nerfacc_kit(device: torch.device) -> dict[str, Any]:
    """The estimator class, the rendering function and a label: nerfacc's on CUDA (its ops
    built and loaded here, so a failure stops the run before any training), the CPU
    stand-in on the CPU. Raises BenchError when nerfacc is missing or cannot run."""
    try:
        import nerfacc
    except ImportError:
        raise BenchError(
            "nerfacc is not installed (a benchmark-only dependency): pip install nerfacc, "
            "or offline: pip install --no-index --no-deps --find-links WHEEL_DIR nerfacc"
        ) from None
    if device.type == "cpu":
        from bench.compare.nerfacc import nerfacc_cpu as cpu

        kit = {"estimator": cpu.CpuStandInEstimator, "rendering": cpu.rendering}
        return {**kit, "label": cpu.LABEL, "version": nerfacc.__version__}
    start = time.perf_counter()
    try:
        from nerfacc.cuda._backend import _C  # the JIT build, on first use
    except Exception as error:  # a failed build: its log is above; never a fallback on CUDA
        raise BenchError(f"nerfacc's CUDA ops did not build or load: {error}") from error
    if _C is None:
        raise BenchError("nerfacc's CUDA ops are unavailable (no nvcc?); no fallback on CUDA")
    seconds = time.perf_counter() - start
    print(
        f"bench_nerfacc: nerfacc {nerfacc.__version__} CUDA ops loaded in {seconds:.1f} s",
        flush=True,
    )
    return {
        "estimator": nerfacc.OccGridEstimator,
        "rendering": nerfacc.rendering,
        "label": f"nerfacc {nerfacc.__version__}",
        "version": nerfacc.__version__,
        "load_seconds": seconds,
    }


def load_scene(args, device: torch.device) -> dict[str, Any]:
    """--config's scene (generated if needed): every training ray [N, 3] (origins, unit
    directions) and colour [N, 3] on `device`, the test views' rays [V, H, W, 3] and images."""
    sets = ["output.progress=false"]
    if args.scene_size:
        sets.append(f"data.scene_size={args.scene_size}")
    for key in ("train_views", "test_views"):
        if getattr(args, key):
            sets.append(f"data.scene_{key}={getattr(args, key)}")
    config = load_config(args.config, sets)
    d = config.data
    if args.data:  # a scene in the Blender layout, read as it is
        sets += [f"data.path={args.data}", "data.generate=false"]
    elif len(sets) > 1:  # never regenerate the configured scene with other settings
        name = f"nerf_{d.scene}_{d.scene_size}_{d.scene_train_views}x{d.scene_test_views}"
        sets += [f"data.path={Path(d.path).with_name(name)}", "data.generate=true"]
    config = load_config(args.config, sets)
    start = time.perf_counter()
    path = ensure_scene(config, device)
    options = {"downscale": config.data.downscale, "background": tuple(config.data.background)}
    train = load_blender(path, "train", **options).to(device)
    test = load_blender(path, "test", limit=args.eval_views or None, **options).to(device)
    origins, directions = camera_rays(train)
    print(f"bench_nerfacc: scene {path} ready in {time.perf_counter() - start:.1f} s", flush=True)
    return {
        "path": str(path),
        "config": config,
        "rays": (origins.reshape(-1, 3), directions.reshape(-1, 3), train.images.reshape(-1, 3)),
        "test_rays": camera_rays(test),
        "test_images": test.images,
        "background": torch.tensor(config.data.background, dtype=torch.float32, device=device),
        "size": (train.height, train.width, len(train), len(test)),
    }


def train_backend(backend: str, scene: dict, kit: dict, args, device: torch.device) -> dict:
    """One backend's run: --steps steps from --seed, then the test views. Returns its row."""
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    run = Run(backend, scene, kit, args, device)
    samples, skipped, rays = 0, 0, 0
    start = time.perf_counter()
    for step in range(args.steps):
        if step == args.warmup:  # the clock starts after the first steps (allocations, caches)
            sync(device)
            start = time.perf_counter()
        loss, n, count = run.step(step)
        samples, skipped, rays = samples + n, skipped + (loss is None), rays + count
        if args.progress and (step + 1) % args.progress == 0 and loss is not None:
            sync(device)
            rate = (step + 1 - args.warmup) / (time.perf_counter() - start)
            print(
                f"  {backend} step {step + 1}: loss {loss.item():.5f}, {rate:.1f} steps/s",
                flush=True,
            )
    sync(device)
    timed = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated(device) / GiB if device.type == "cuda" else None
    quality = evaluate(run.model, run.estimator, kit, scene, run.step_size, args.eval_chunk)
    if args.profile:  # after the evaluation: these steps train on
        profile_steps(run, args.profile, Path(args.out) / f"nerfacc_profile_{backend}.txt")
    timed_steps = args.steps - min(args.warmup, args.steps)
    return {
        "backend": backend,
        "steps": args.steps,
        "timed_steps": timed_steps,
        "train_seconds": timed,
        "steps_per_second": timed_steps / timed if timed > 0 else math.nan,
        "samples_per_ray": samples / max(rays, 1),
        "rays_per_step": rays / max(args.steps, 1),
        "skipped_steps": skipped,
        "field": getattr(run, "encoder_label", "dense grids"),
        "occupied": run.estimator.binaries.float().mean().item(),
        "peak_gib": peak,
        **quality,
    }


def profile_steps(run: Run, steps: int, path: Path) -> None:
    """`steps` more training steps under torch.profiler: the ops by device time (where the
    step's time goes: the field, nerfacc's sampling and compositing, the MLP, Adam)."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if run.device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    run.model.train()
    run.estimator.train()
    with profile(activities=activities) as prof:
        for step in range(run.args.steps, run.args.steps + steps):
            run.step(step)
        sync(run.device)
    key = "self_cuda_time_total" if run.device.type == "cuda" else "self_cpu_time_total"
    table = prof.key_averages().table(sort_by=key, row_limit=25)
    path.write_text(f"{run.backend}: {steps} steps\n{table}\n")
    print(f"bench_nerfacc: {run.backend}: profile of {steps} steps in {path}", flush=True)


@torch.no_grad()
def evaluate(model, estimator, kit, scene: dict, step_size: float, chunk: int) -> dict:
    """Mean PSNR over the test views (whole images, colours clamped to [0, 1])."""
    model.eval()
    estimator.eval()
    start = time.perf_counter()
    origins, directions = scene["test_rays"]
    view_psnr = []
    for o, d, truth in zip(origins, directions, scene["test_images"], strict=True):
        o, d = o.reshape(-1, 3), d.reshape(-1, 3)
        parts = [
            render_rays(
                model,
                estimator,
                kit,
                o[i : i + chunk],
                d[i : i + chunk],
                scene["background"],
                step_size,
                train=False,
            )[0]
            for i in range(0, o.shape[0], chunk)
        ]
        error = (torch.cat(parts).clamp(0, 1) - truth.reshape(-1, 3)).double().square().mean()
        view_psnr.append(psnr(error.item(), 1.0))
    return {
        "psnr": sum(view_psnr) / len(view_psnr),
        "view_psnr": view_psnr,
        "eval_seconds": time.perf_counter() - start,
    }


def summary(runs: dict[str, dict]) -> dict[str, Any]:
    """ours against grid_sample: the steps/s ratio, the PSNR difference and the verdict."""
    if "ours" not in runs or "grid_sample" not in runs:
        return {}
    ours, base = runs["ours"], runs["grid_sample"]
    ratio = ours["steps_per_second"] / base["steps_per_second"]
    delta = ours["psnr"] - base["psnr"]
    met = ratio >= TARGET_RATIO and delta >= -PSNR_TOLERANCE
    return {"ratio": ratio, "psnr_delta": delta, "target_met": met}


def markdown(runs: dict[str, dict], meta: dict) -> str:
    """The side-by-side table, with what was run above it."""
    head = (
        f"nerfacc-style model (sampler: {meta['sampler']}), {meta['device_name']}, torch "
        f"{meta['torch']}; scene {meta['scene']}; grids {meta['resolution']}^3, occupancy "
        f"{meta['occ_resolution']}^3, {meta['steps']} steps of {meta['batch']} rays, seed "
        f"{meta['seed']}; steps/s over steps {meta['warmup']}-{meta['steps']}, CUDA synchronised"
    )
    lines = [
        head,
        "",
        "| field backend | steps/s | x grid_sample | test PSNR (dB) | train s "
        "| rays/step | samples/ray | peak GiB |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    base = runs.get("grid_sample")
    for name, run in runs.items():
        ratio = f"{run['steps_per_second'] / base['steps_per_second']:.2f}" if base else "-"
        peak = "-" if run["peak_gib"] is None else f"{run['peak_gib']:.2f}"
        lines.append(
            f"| {name} | {run['steps_per_second']:.1f} | {ratio} | {run['psnr']:.3f} | "
            f"{run['train_seconds']:.1f} | {run['rays_per_step']:.0f} | "
            f"{run['samples_per_ray']:.1f} | {peak} |"
        )
    anchors = [f"{name}: {run['field']}" for name, run in runs.items() if name == "ngp"]
    if anchors:
        lines += [
            "",
            "ngp is an anchor, not our grid: instant-ngp's field, " + anchors[0] + "; trained"
            " by its own recipe (the header's grids, occupancy and rays a step are the other"
            " backends'; its own rays a step are in its row)",
        ]
    verdict = summary(runs)
    if verdict:
        met = "met" if verdict["target_met"] else "not met"
        lines += [
            "",
            f"ours / grid_sample: {verdict['ratio']:.2f}x steps/s, PSNR "
            f"{verdict['psnr_delta']:+.3f} dB; target >= {TARGET_RATIO}x within "
            f"{PSNR_TOLERANCE} dB: {met}",
        ]
    return "\n".join(lines)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default=str(ROOT / "configs" / "nerf_realistic_gpu.toml"))
    p.add_argument("--data", default=None, help="a Blender-layout scene (default: --config's)")
    p.add_argument("--scene-size", type=int, default=None, help="pixels a side (a new folder)")
    p.add_argument("--train-views", type=int, default=None)
    p.add_argument("--test-views", type=int, default=None)
    p.add_argument("--eval-views", type=int, default=0, help="test views scored (0: all)")
    p.add_argument(
        "--backends",
        default=",".join(BACKENDS),
        help=f"some of {', '.join(ALL_BACKENDS)} (ngp: the instant-ngp anchor)",
    )
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--warmup", type=int, default=20, help="steps before the clock starts")
    p.add_argument("--batch", type=int, default=8192, help="rays a step")
    p.add_argument("--resolution", type=int, default=160, help="voxels a side, both grids")
    p.add_argument("--occ-resolution", type=int, default=128, help="the estimator's cells")
    p.add_argument("--occ-thre", type=float, default=1e-3, help="update_every_n_steps'")
    p.add_argument("--step-ratio", type=float, default=0.5, help="render step, in voxels")
    p.add_argument("--features", type=int, default=12, help="colour grid channels")
    p.add_argument("--hidden", type=int, default=128, help="MLP width")
    p.add_argument("--lr-grid", type=float, default=0.1)
    p.add_argument("--lr-mlp", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ngp", default=None, help="torch-ngp's gridencoder folder (ngp, CUDA)")
    p.add_argument("--ngp-max-resolution", type=int, default=4096, help="finest level's cells")
    p.add_argument("--ngp-log2-table", type=int, default=19, help="rows a level (CPU: any)")
    p.add_argument("--ngp-samples", type=int, default=2**18, help="samples a step (ngp)")
    p.add_argument("--ngp-step", type=float, default=5e-3, help="render step, world units")
    p.add_argument("--ngp-occ-thre", type=float, default=1e-2)
    p.add_argument("--ngp-weight-decay", type=float, default=1e-6)
    p.add_argument("--eval-chunk", type=int, default=16384, help="rays a test render call")
    p.add_argument("--progress", type=int, default=500, help="a line every N steps (0: none)")
    p.add_argument("--profile", type=int, default=0, help="N more steps profiled, at the end")
    p.add_argument("--out", default=os.environ.get("OUT", str(ROOT / "bench" / "results")))
    args = p.parse_args(argv)
    args.backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = sorted(set(args.backends) - set(ALL_BACKENDS))
    if unknown or not args.backends:
        p.error(f"--backends: expected some of {', '.join(ALL_BACKENDS)}, got {unknown or 'none'}")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    device = torch.device(args.device)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        if device.type == "cuda" and not torch.cuda.is_available():
            raise BenchError("--device cuda: no CUDA device here (--device cpu: the stand-in)")
        kit = nerfacc_kit(device)
        scene = load_scene(args, device)
    except (BenchError, ConfigError) as error:
        print(f"bench_nerfacc: {error}", file=sys.stderr)
        return 2
    height, width, n_train, n_test = scene["size"]
    meta = {
        "sampler": kit["label"],
        "nerfacc": kit["version"],
        "nerfacc_load_seconds": kit.get("load_seconds"),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU",
        "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "scene": f"{scene['path']} ({width}x{height}, {n_train} training, {n_test} test views)",
        **{k: getattr(args, k) for k in ("steps", "warmup", "batch", "resolution", "seed")},
        **{k: getattr(args, k) for k in ("occ_resolution", "occ_thre", "step_ratio", "features")},
    }
    runs: dict[str, dict] = {}
    for backend in args.backends:
        print(f"bench_nerfacc: {backend}: {args.steps} steps", flush=True)
        runs[backend] = train_backend(backend, scene, kit, args, device)
        row = {k: v for k, v in runs[backend].items() if k != "view_psnr"}
        print(f"bench_nerfacc: {row}", flush=True)
        table = markdown(runs, meta)  # written after each backend: a cut-off run keeps some
        (out / "nerfacc.md").write_text(table + "\n")
        result = {"meta": meta, "runs": runs, "summary": summary(runs)}
        (out / "nerfacc.json").write_text(json.dumps(result, indent=2))
    print(table)
    print(f"wrote {out / 'nerfacc.md'} and {out / 'nerfacc.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
