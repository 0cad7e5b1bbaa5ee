"""L1 of bench/ops/bench_ops.py: the fitting loop's field step as `python -m train` runs it
(`python bench/ops/bench_ops.py --only L1`).

    density_256  configs/density_256.toml at its final 256^3 grid, 2^20 points per step
    default      configs/default.toml: 96^3, 65536 points per step

Two rows per config, each against the step as the loop ran it before issue 21 (op by op,
the density from tensor ops, foreach Adam):

    <config>_graph  this tree's default: on CUDA the step captured as a CUDA graph
                    (train/step_graph.py: fused capturable Adam, the fused density kernel);
                    on the CPU op by op, as before
    <config>_eager  train.cuda_graph = "off": op by op with the fused density kernel
                    (on CUDA), i.e. what the target's fusion gives without the capture

Each step is the loop's: learning rate, draw, target, forward, MSE, backward, Adam, and the
batch MSE added to the device-side sum. Besides the harness's queued and synchronised
timings (the verdicts read the synchronised one: one step from an idle GPU to a
synchronise), `loop_ms` times LOOP_STEPS steps back to back and one synchronise, per step:
the pace behind the loop's points/s (`train_seconds` excludes only evaluations).
"""

from __future__ import annotations

from pathlib import Path

import torch

from bench.harness import ROOT, Ctx, attempt, host_times, make_row, statistics
from train.config import load_config
from train.distributed import SINGLE
from train.loop import make_experiment
from train.step_graph import GraphedStep, eager_step

CONFIGS = ("density_256", "default")
LOOP_STEPS = 50


class FormulaTarget:
    """The density as the loop computed it before the fused kernel: tensor ops only."""

    def __init__(self, target) -> None:
        self.target = target

    def __call__(self, xyz: torch.Tensor) -> torch.Tensor:
        return self.target.formula(xyz.float())


def experiment(name: str, size: dict, device: torch.device, mode: str, formula: bool):
    """The config's field experiment at its final resolution, built as the loop builds it."""
    r, n = size[name]["r"], size[name]["n"]
    config = load_config(
        Path(ROOT) / "configs" / f"{name}.toml",
        [
            f"device={device.type}",
            f"grid.resolution={r}",
            "train.upsample_steps=[]",
            "train.upsample_resolutions=[]",
            f"train.batch_size={n}",
            "eval.points=65536",
            f"train.cuda_graph={mode}",
        ],
    )
    gen = torch.Generator(device=device).manual_seed(config.seed)
    exp = make_experiment(config, device, gen, None)
    if formula:
        exp.target = FormulaTarget(exp.target)
    return exp  # op by op: foreach Adam, as before; captured: fused capturable Adam


def stepper(exp, device: torch.device):
    """One loop step of `exp` (captured when the experiment says so)."""
    runner = GraphedStep(exp, SINGLE) if exp.graphed else None
    total = torch.zeros((), dtype=torch.float64, device=device)

    def step() -> None:
        exp.begin_step(10)
        value = runner.step() if runner is not None else eager_step(exp, SINGLE)
        total.add_(value.detach())

    return step


def timed(ctx: Ctx, fn, device: torch.device) -> dict:
    stats, error = attempt(lambda: ctx.time(fn, device))
    loop = attempt(lambda: statistics(host_times(fn, device, 5, LOOP_STEPS)))[0] if stats else None
    if stats is not None:
        stats["loop"] = loop
    return {"stats": stats, "error": error, "peak_mb": None}


def bench_loop(ctx: Ctx, name: str, size: dict, seed: int) -> list[dict]:
    dev = ctx.device
    rows = []
    for config in CONFIGS:
        n, r = size[config]["n"], size[config]["r"]
        before = timed(ctx, stepper(experiment(config, size, dev, "off", True), dev), dev)
        for key, mode in (("graph", "auto"), ("eager", "off")):
            exp = experiment(config, size, dev, mode, False)
            ours = timed(ctx, stepper(exp, dev), dev)
            what = "captured" if exp.graphed else "op by op"
            what += ", cuda_graph off" if key == "eager" else ""
            note = f"configs/{config}.toml at {r}^3, {n} points per step, {what}"
            row = make_row(name, f"{config}_{key}", f"{config} step ({what})", ours,
                           "step before (op by op, tensor-op density, foreach Adam)", before,
                           0, None, r**3 * 4 / 2**20, note)  # fmt: skip
            for side, stats in (("ours", ours["stats"]), ("baseline", before["stats"])):
                loop = stats and stats.get("loop")
                row[f"{side}_loop_ms"] = loop["median"] if loop else None
                row[f"{side}_points_per_s_loop"] = n / loop["median"] * 1e3 if loop else None
            if row["ours_loop_ms"] and row["baseline_loop_ms"]:
                row["speedup_loop"] = row["baseline_loop_ms"] / row["ours_loop_ms"]
                row["note"] += (
                    f"; loop pace {row['ours_loop_ms']:.3f} vs {row['baseline_loop_ms']:.3f} ms "
                    f"per step ({row['ours_points_per_s_loop'] / 1e6:.1f}M vs "
                    f"{row['baseline_points_per_s_loop'] / 1e6:.1f}M points/s), "
                    f"{row['speedup_loop']:.2f}x"
                )
            rows.append(row)
            del exp
    return rows
