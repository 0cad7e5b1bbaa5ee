"""N1: one NeRF training step (render a batch of rays, MSE + TV, backward, Adam), VoxelNeRF on
`grid.sample` with the fused renderer ("native": the native ray marcher and compositor, no
host synchronisation) against the same model on `F.grid_sample` with the plain-PyTorch
renderer ("grid_sample", the baseline) and on `grid.sample` with the plain-PyTorch renderer
("native_torch", the step before the fused renderer). A multires config
(`nerf.density_encoding = "multires"`) has no grid_sample twin: its rows are native and
native_torch alone ("-" in the grid_sample columns). The step's optimiser is the
experiment's own (train/nerf/optimizer.py).

    python bench/training/bench_nerf.py --config configs/nerf_scene_gpu.toml
                               [--checkpoint RUN/checkpoint.pt]
                               [--json PATH] [--set key=value ...] [--warmup N] [--reps N]
                               [--profile] [--profile-loop] [--profile-eval]

The model and the rays are those of the config (its scene, `train.batch_size` training rays,
the same rays every repetition). With `--checkpoint` (a run directory's checkpoint.pt of
that config) the step is timed on the trained model, occupancy grid included: the state
training spends most of its steps in. Two rows per state:

    N1 trained   the checkpoint's grids and occupancy (empty space skipped)
    N1 dense     the same grids with skipping off (occupancy all true, weight threshold 0):
                 every sample inside the box reaches both grids and the MLP

Then "N1 loop": the training loop's own step (`begin_step`, then the step: captured as CUDA
graphs, op by op, and op by op on grid_sample), random batches, losses, occupancy refreshes
and buffer measurements included, timed 20 steps back to back and one step synchronised.

Two timing methods for the N1 rows, both medians (bench/harness.py): "queued" is `timeit`
(CUDA events around work enqueued behind a GPU sleep: the kernels back to back) and "synced"
is `timeit_synced`, a per-step loop that synchronises after every step and reads the host
clock. JSON and a markdown table go next to --json.

`--profile-loop` only prints where 20 of the training loop's steps (captured where the config
captures) spend their time, by kernel on CUDA (by op on the CPU), from the checkpoint's step
on, after `--warmup` steps (default 128: past the first captures and exact renders).
`--profile-eval` only prints what one evaluation of the config's test views costs on the
checkpoint's model (seconds, synchronised; microseconds a ray) and where it spends its time,
by kernel on CUDA (by op on the CPU). The three profiles are bench/training/nerf_profile.py.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: bench, grid, train

from bench.harness import (  # noqa: E402
    ROOT,
    Ctx,
    attempt,
    fmt_ms,
    free_memory,
    host_times,
    statistics,
    timeit,
    timeit_synced,
)
from train.config import load_config  # noqa: E402
from train.distributed import SINGLE  # noqa: E402
from train.loop import select_device  # noqa: E402
from train.nerf.experiment import NerfExperiment, make_model  # noqa: E402
from train.nerf.model.voxel_nerf import VoxelNeRF  # noqa: E402
from train.nerf.optimizer import make_optimizer  # noqa: E402
from train.step_graph import GraphedStep, eager_step  # noqa: E402


def has_twin(model: VoxelNeRF) -> bool:
    """Whether the model has a grid_sample twin: dense grids only (a multires table or
    density network has none; its rows compare the fused and torch renderers alone)."""
    return all(hasattr(m, "features") for m in (model.density, model.color) if m is not None)


def to_channels_first(native: VoxelNeRF, config) -> VoxelNeRF:
    """The same model (same parameters, occupancy, thresholds) on the grid_sample backend."""
    device = native.occupancy.device
    res = native.resolution
    other = make_model(config, res, res, backend="grid_sample", device=device)
    other.weight_threshold = native.weight_threshold
    other.final_voxel = native.final_voxel
    with torch.no_grad():
        for name in ("density", "color"):
            f = getattr(native, name).features
            getattr(other, name).features.copy_(f.permute(3, 2, 1, 0)[None])
            getattr(other, name).bounds.copy_(native.density.bounds)  # a fitted box too
        other._sync_box(other, None)
        other.mlp.load_state_dict(native.mlp.state_dict())
        other.occupancy_grid.load_flags(native.occupancy.clone())
    return other


def step_fn(model: VoxelNeRF, exp: NerfExperiment, index: torch.Tensor, tv_weight: float):
    """One training step on fixed rays, with the experiment's optimiser (its groups and
    `nerf.optimizer`, train/nerf/optimizer.py) over `model`."""
    opt = make_optimizer(exp.config, model, None, graphed=False, device=exp.device)
    o, d, target = exp.rays.take(index)
    info = {}

    def step():
        opt.zero_grad(set_to_none=True)
        out = model.render(o, d, exp.background)
        loss = (out["rgb"] - target).square().mean()
        if tv_weight:
            loss = loss + tv_weight * model.total_variation()
        loss.backward()
        opt.step()
        info["samples"] = out["samples"]  # an int, or a tensor on the device (fused)
        return loss

    return step, info


def bench_state(ctx: Ctx, exp: NerfExperiment, state: str, index: torch.Tensor) -> dict:
    """Both backends, both timing methods, on the experiment's model in `state`."""
    native = exp.model
    if state == "dense":
        native.occupancy.fill_(True)
        native.weight_threshold = 0.0
    other = to_channels_first(native, exp.config) if has_twin(native) else None
    native_torch = copy.deepcopy(native)
    native_torch.renderer = "torch"
    o, d, _ = exp.rays.take(index)
    with torch.no_grad():
        a = native.render(o, d, exp.background)["rgb"]
        c = native_torch.render(o, d, exp.background)["rgb"]
        b = a if other is None else other.render(o, d, exp.background)["rgb"]
    row = {
        "workload": "N1",
        "state": state,
        "rays": index.numel(),
        "rgb_max_abs_diff": None if other is None else float((a - b).abs().max()),
        "rgb_max_abs_diff_torch_renderer": float((a - c).abs().max()),
        "grid_sample": None,  # no twin: a multires model
    }
    dev = exp.device
    warm, reps = ctx.warmup[dev.type], ctx.reps[dev.type]
    models = [("native", native), ("native_torch", native_torch)]
    models += [] if other is None else [("grid_sample", other)]
    for name, model in models:
        step, info = step_fn(model, exp, index, exp.config.train.tv_weight)
        queued, error = attempt(lambda step=step: timeit(step, dev, warm, reps))
        sync, error2 = attempt(lambda step=step: timeit_synced(step, dev, warm, reps))
        row[name] = {
            "queued": queued,
            "synced": sync,
            "error": error or error2,
            "samples_per_ray": float(info.get("samples", 0)) / index.numel(),
        }
        free_memory()
    dropped = native.capacity.dropped
    row["native_samples_dropped"] = 0 if dropped is None else int(dropped)
    for method in ("queued", "synced"):
        ours, before = row["native"][method], row["native_torch"][method]
        base = row["grid_sample"][method] if row["grid_sample"] else None
        if ours and base:
            row[f"speedup_{method}"] = base["median"] / ours["median"]
            row[f"native_steps_per_s_{method}"] = 1e3 / ours["median"]
            row[f"grid_sample_steps_per_s_{method}"] = 1e3 / base["median"]
        if ours and before:
            row[f"speedup_vs_torch_renderer_{method}"] = before["median"] / ours["median"]
    return row


LOOP_MODES = (  # name, overrides: the loop's step as `train` runs it
    ("native_graph", ["train.cuda_graph=auto"]),
    ("native", ["train.cuda_graph=off"]),
    ("grid_sample", ["train.cuda_graph=off"]),
)


def loop_step(args, checkpoint: dict | None, device: torch.device, overrides=(), grid_sample=False):
    """The training loop's step as `train` runs it (`begin_step`, then the step: captured as
    CUDA graphs or op by op, train/step_graph.py), from the checkpoint's step on; on
    grid_sample's backend with `grid_sample`. Returns (step, experiment, runner or None)."""
    config = load_config(args.config, ["output.progress=false", *args.set, *overrides])
    gen = torch.Generator(device=device).manual_seed(args.seed)
    resolution = None if checkpoint is None else tuple(checkpoint["resolution"])
    exp = NerfExperiment(config, device, gen, resolution)
    if checkpoint is not None:
        exp.model.load_state_dict(checkpoint["model"])
    if grid_sample:
        exp.model = to_channels_first(exp.model, config)
        exp.optimizer = exp.make_optimizer()
    runner = GraphedStep(exp, SINGLE) if exp.graphed else None
    at = [0 if checkpoint is None else checkpoint["step"]]

    def step():
        exp.begin_step(at[0])
        runner.step() if runner is not None else eager_step(exp, SINGLE)
        at[0] += 1

    return step, exp, runner


def bench_loop(
    ctx: Ctx, args, checkpoint: dict | None, device: torch.device, twin: bool = True
) -> dict:
    """N1 loop: the training loop's step (`begin_step`, then the step: captured as CUDA
    graphs or op by op, train/step_graph.py) on random batches from the checkpoint's step
    on, occupancy refreshes and buffer measurements included. "back to back": `calls`
    steps between two synchronisations (the loop's rate, host and GPU overlapping);
    "synced": one step from an idle GPU to a synchronise."""
    warm, reps = ctx.warmup[device.type], ctx.reps[device.type]
    calls = 20
    row = {"workload": "N1 loop", "state": "trained", "calls": calls}
    row["grid_sample"] = None  # stays so without a grid_sample twin (`twin`: a dense model)
    for name, overrides in LOOP_MODES:
        if name == "grid_sample" and not twin:
            continue
        step, exp, runner = loop_step(args, checkpoint, device, overrides, name == "grid_sample")
        for _ in range(warm):
            step()
        back, error = attempt(lambda step=step: statistics(host_times(step, device, reps, calls)))
        synced, error2 = attempt(lambda step=step: statistics(host_times(step, device, reps)))
        row[name] = {"back_to_back": back, "synced": synced, "error": error or error2}
        if runner is not None:
            row[name]["captures"], row[name]["eager_steps"] = runner.captures, runner.eager_steps
        del exp, runner
        free_memory()
    for method in ("back_to_back", "synced"):
        base = row["grid_sample"][method] if row["grid_sample"] else None
        for name in ("native_graph", "native"):
            ours = row[name][method]
            if ours and base:
                row[f"speedup_{name}_{method}"] = base["median"] / ours["median"]
    return row


def loop_markdown(row: dict) -> list[str]:
    def ms(name, method):
        if row[name] is None:
            return "-"  # no grid_sample twin
        stats = row[name][method]
        return fmt_ms(stats["median"]) if stats else "ERROR"

    def ratio(name, method):
        x = row.get(f"speedup_{name}_{method}")
        return "-" if x is None else f"{x:.2f}x"

    lines = [
        "",
        f"N1 loop: the training loop's step, random batches ({row['calls']} steps back to back "
        "/ one step synchronised), ms per step",
        "",
        "| step | back to back ms | vs grid_sample | synced ms | vs grid_sample |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for name, _ in LOOP_MODES:
        lines.append(
            f"| {name} | {ms(name, 'back_to_back')} | {ratio(name, 'back_to_back')} | "
            f"{ms(name, 'synced')} | {ratio(name, 'synced')} |"
        )
    return lines


def markdown(rows: list[dict], meta: dict) -> str:
    lines = [
        f"{meta['device_name']} | torch {meta['torch']} | {meta['date']} | {meta['config']}"
        + (f" | checkpoint {meta['checkpoint']}" if meta["checkpoint"] else ""),
        "",
        "| workload | state | samples/ray | native queued ms | grid_sample queued ms | speedup "
        "| native synced ms | grid_sample synced ms | speedup | steps/s native / grid_sample "
        "(synced) | native_torch queued / synced ms | native vs native_torch (queued / synced) |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:

        def ms(who, method, r=r):
            if r[who] is None:
                return "-"  # no grid_sample twin
            stats = r[who][method]
            return fmt_ms(stats["median"]) if stats else "ERROR"

        def ratio(method, r=r, prefix="speedup_"):
            x = r.get(f"{prefix}{method}")
            return "-" if x is None else f"{x:.2f}x"

        rate = "-"
        if r.get("native_steps_per_s_synced"):
            rate = (
                f"{r['native_steps_per_s_synced']:.1f} / {r['grid_sample_steps_per_s_synced']:.1f}"
            )
        lines.append(
            f"| N1 | {r['state']} | {r['native']['samples_per_ray']:.1f} | "
            f"{ms('native', 'queued')} | {ms('grid_sample', 'queued')} | {ratio('queued')} | "
            f"{ms('native', 'synced')} | {ms('grid_sample', 'synced')} | {ratio('synced')} | "
            f"{rate} | {ms('native_torch', 'queued')} / {ms('native_torch', 'synced')} | "
            f"{ratio('queued', prefix='speedup_vs_torch_renderer_')} / "
            f"{ratio('synced', prefix='speedup_vs_torch_renderer_')} |"
        )
    return "\n".join(lines)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=str(ROOT / "configs" / "nerf_scene_gpu.toml"))
    parser.add_argument("--checkpoint", default="", help="checkpoint.pt of a run of --config")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--json", default=str(ROOT / "bench" / "results" / "bench_nerf.json"))
    parser.add_argument("--quick", action="store_true", help="few repetitions (smoke test)")
    parser.add_argument("--warmup", type=int, default=None)
    parser.add_argument("--reps", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--profile", action="store_true", help="also print torch.profiler tables of the step"
    )
    parser.add_argument(
        "--profile-loop",
        action="store_true",
        help="only print where the training loop's step spends its time (by kernel on CUDA, "
        "by op on the CPU) and exit",
    )
    parser.add_argument(
        "--profile-eval",
        action="store_true",
        help="only print what one evaluation of the test views costs (seconds, microseconds a "
        "ray) and where its time goes (by kernel on CUDA, by op on the CPU), and exit",
    )
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    config = load_config(args.config, ["output.progress=false", *args.set])
    device = select_device(config.device)
    ctx = Ctx(args, device)
    gen = torch.Generator(device=device).manual_seed(args.seed)
    resolution = None
    checkpoint = None
    if args.checkpoint:
        checkpoint = torch.load(args.checkpoint, map_location="cpu", weights_only=True)
        resolution = tuple(checkpoint["resolution"])
    if args.profile_loop or args.profile_eval:
        from bench.training.nerf_profile import profile_eval, profile_loop

        (profile_loop if args.profile_loop else profile_eval)(args, checkpoint, device)
        return 0
    exp = NerfExperiment(config, device, gen, resolution)
    if checkpoint is not None:
        exp.model.load_state_dict(checkpoint["model"])
    index = torch.randint(len(exp.rays), (config.train.batch_size,), generator=gen, device=device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    meta = {
        "device_name": name,
        "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "config": args.config,
        "overrides": args.set,
        "checkpoint": args.checkpoint,
        "resolution": list(exp.model.resolution),
        "batch_size": config.train.batch_size,
    }
    print(f"bench_nerf: {name}, grids {exp.model.resolution}, {index.numel()} rays", flush=True)
    if args.profile:
        from bench.training.nerf_profile import profile

        profile(exp, index)
    rows = [bench_state(ctx, exp, state, index) for state in ("trained", "dense")]
    twin = has_twin(exp.model)
    del exp
    free_memory()
    loop = bench_loop(ctx, args, checkpoint, device, twin)
    table = "\n".join([markdown(rows, meta), *loop_markdown(loop)])
    rows.append(loop)
    print(table)
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**meta, "rows": rows}, indent=2, default=str))
    path.with_suffix(".md").write_text(table + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
