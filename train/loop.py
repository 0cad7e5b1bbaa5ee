"""The fitting loop: sample points, MSE against the target, Adam, evaluate, checkpoint.

Run directory layout (all written by `run`; `rundir.RUN_FILES` lists them, and a new
run refuses a directory holding them unless told to resume or overwrite it):

    config.toml       the resolved config (feed it back with --config)
    metrics.jsonl     one JSON object per evaluation
    checkpoint.pt     model, optimiser, RNG and counters; written atomically
    summary.json      final numbers (written when the run completes)
    slices.png        target / fit / error through the middle of each axis
    curves.png        training loss, held-out MSE and PSNR against steps
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from tqdm import tqdm

import grid
from grid.voxel_grid import VoxelGrid

from .config import Config, as_resolution, load_config, to_dict, to_toml
from .dependencies import check_dependencies
from .errors import ConfigError, InputFileError, read_input
from .metrics import MetricsLog, psnr
from .rundir import check_run_dir, prepare_run_dir
from .targets import Target, make_target

CHECKPOINT = "checkpoint.pt"
#: Layout of checkpoint.pt. 2: stores "format" and "kind"; 1: the same keys without
#: them (written before they existed; read as a field checkpoint).
CHECKPOINT_FORMAT = 2
#: What this loop fits; stored in its checkpoints so another experiment's are refused.
EXPERIMENT_KIND = "field"
#: Keys every readable checkpoint holds (besides "format" and "kind").
CHECKPOINT_KEYS = (
    *("step", "config", "model", "optimizer", "generator", "torch_rng"),
    *("seconds", "train_seconds", "loss_sum", "loss_count"),
)
EVAL_CHUNK = 1 << 18


def select_device(name: str) -> torch.device:
    """ "auto" -> CUDA when available, else CPU; "cpu" / "cuda" as given."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def describe_device(device: torch.device) -> str:
    if device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(device)})"
    return f"cpu ({torch.get_num_threads()} threads)"


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def uniform_points(n: int, lo: Tensor, hi: Tensor, gen: torch.Generator) -> Tensor:
    """[n, 3] points uniform in the box [lo, hi] (lo, hi: [3]) on the generator's device."""
    return lo + (hi - lo) * torch.rand(n, 3, generator=gen, device=gen.device)


def draw_batch(
    config: Config, target: Target, lo: Tensor, hi: Tensor, gen: torch.Generator
) -> Tensor:
    """[batch_size, 3] training points: uniform, plus a near-surface share for SDFs."""
    n = config.train.batch_size
    near = round(n * config.train.surface_fraction)
    points = uniform_points(n - near, lo, hi, gen)
    if near:
        surface = target.surface_points(near, config.train.surface_std, lo, hi, gen)
        points = torch.cat([points, surface])
    return points


def learning_rate(config: Config, step: int) -> float:
    """Exponential decay from train.lr at step 0 to train.lr_final at the last step."""
    t = config.train
    return t.lr * (t.lr_final / t.lr) ** (step / max(1, t.steps - 1))


def make_optimizer(model: VoxelGrid, config: Config) -> torch.optim.Adam:
    return torch.optim.Adam(
        model.parameters(), lr=config.train.lr, betas=tuple(config.train.betas), eps=1e-15
    )


@torch.no_grad()
def evaluate(model: VoxelGrid, points: Tensor, values: Tensor) -> float:
    """Mean squared error over the held-out points (points: [N, 3], values: [N])."""
    total = 0.0
    for start in range(0, points.shape[0], EVAL_CHUNK):
        pred = model(points[start : start + EVAL_CHUNK])[..., 0].float()
        total += (pred - values[start : start + EVAL_CHUNK]).double().square().sum().item()
    return total / points.shape[0]


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    """Write `state` to a temporary file next to `path`, then rename it over `path`:
    a crash leaves either the old checkpoint or the new one, never half of one."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def load_checkpoint(out_dir: Path, kind: str = EXPERIMENT_KIND) -> dict[str, Any]:
    """The checkpoint of a run directory (tensors on the CPU).

    Raises InputFileError naming the file when it is damaged (truncated, corrupt),
    not a grid-train checkpoint, of another experiment kind, or of a format this
    version does not read.
    """
    path = out_dir / CHECKPOINT
    state = read_input(
        path,
        lambda f: torch.load(f, map_location="cpu", weights_only=True),
        "checkpoint",
        invalid="damaged (truncated or corrupt) or not a checkpoint",
        hint="it cannot be resumed; start the run again with --overwrite",
    )
    if not isinstance(state, dict) or not all(k in state for k in CHECKPOINT_KEYS):
        missing = [k for k in CHECKPOINT_KEYS if not isinstance(state, dict) or k not in state]
        raise InputFileError(
            path, f"not a grid-train checkpoint (it lacks {', '.join(map(repr, missing))})"
        )
    version = state.get("format", 1)
    if version not in range(1, CHECKPOINT_FORMAT + 1):
        raise InputFileError(
            path,
            f"checkpoint format {version!r}, but this version of grid-train reads formats "
            f"1 to {CHECKPOINT_FORMAT} (written by a newer grid-train?)",
        )
    found = state.get("kind", EXPERIMENT_KIND)
    if found != kind:
        raise InputFileError(
            path, f"a checkpoint of a {found!r} experiment, but this run is a {kind!r} one"
        )
    return state


def resume_config(out_dir: Path, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """The config a run directory's checkpoint was written with, plus `--set` overrides.

    Raises ConfigError (key `--resume`) when there is no checkpoint, InputFileError
    when it cannot be used (see `load_checkpoint`).
    """
    if not (out_dir / CHECKPOINT).is_file():
        raise ConfigError(f"--resume: no {CHECKPOINT} in {out_dir}")
    return load_config(base=load_checkpoint(out_dir)["config"], overrides=overrides)


def run(
    config: Config,
    out_dir: str | Path,
    *,
    resume: bool = False,
    overwrite: bool = False,
    stop_at: int | None = None,
) -> dict[str, Any] | None:
    """Fit a VoxelGrid to the configured target; write the run directory.

    Args:
        config: a validated config (`load_config`).
        out_dir: the run directory (created if needed). A new run refuses a
            directory that already holds one (ConfigError) unless `overwrite`.
        resume: continue from `out_dir/checkpoint.pt`. With the same config the
            result is identical to an uninterrupted run (RNG states are saved).
        overwrite: replace the run in `out_dir`: delete the files a run writes
            (`rundir.RUN_FILES`), keep anything else. Not with `resume`.
        stop_at: stop after this step (writing the checkpoint) without finishing;
            continue later with `resume=True`.

    Returns:
        The summary (also written to summary.json), or None when stopped early.
    """
    c = config
    out = Path(out_dir)
    check_dependencies(c)
    check_run_dir(out, resume=resume, overwrite=overwrite)
    device = select_device(c.device)
    lo, hi = torch.tensor(c.grid.bounds, device=device).unbind(0)
    target = make_target(c.target, c.grid.bounds).to(device)
    # Only now that the target's files are read: a failure leaves the old run intact.
    prepare_run_dir(out, resume=resume, overwrite=overwrite)

    # Fixed held-out points, independent of the training seed.
    eval_gen = torch.Generator().manual_seed(c.eval.seed)
    eval_points = uniform_points(c.eval.points, lo.cpu(), hi.cpu(), eval_gen).to(device)
    with torch.no_grad():
        eval_values = torch.cat([target(p) for p in eval_points.split(EVAL_CHUNK)])
    value_range = (eval_values.max() - eval_values.min()).item() or 1.0

    schedule = dict(zip(c.train.upsample_steps, c.train.upsample_resolutions, strict=True))
    torch.manual_seed(c.seed)
    resolution = as_resolution(c.grid.resolution, "grid.resolution")
    gen = torch.Generator(device=device).manual_seed(c.seed)
    log = MetricsLog(out / "metrics.jsonl")
    step, seconds, train_seconds = 0, 0.0, 0.0
    loss_sum, loss_count = torch.zeros((), dtype=torch.float64, device=device), 0
    checkpoint = load_checkpoint(out) if resume else None
    model = VoxelGrid(
        resolution,
        1,
        c.grid.bounds,
        init=c.grid.init,
        init_scale=c.grid.init_scale,
        padding=c.grid.padding,
        device=device,
    )
    optimizer = make_optimizer(model, c)
    if checkpoint is not None:
        try:
            model.load_state_dict(checkpoint["model"])  # adopts an upsampled resolution
            optimizer.load_state_dict(checkpoint["optimizer"])
            gen.set_state(checkpoint["generator"])
            torch.set_rng_state(checkpoint["torch_rng"])
        except (RuntimeError, ValueError, TypeError, KeyError) as error:
            problem = " ".join(str(error).split())  # one line
            raise InputFileError(out / CHECKPOINT, f"does not fit this run ({problem})") from None
        step, seconds = checkpoint["step"], checkpoint["seconds"]
        train_seconds = checkpoint["train_seconds"]
        loss_sum = checkpoint["loss_sum"].to(device)
        loss_count = checkpoint["loss_count"]
        log.truncate_after(step)
    else:
        log.reset()
        (out / "summary.json").unlink(missing_ok=True)
    (out / "config.toml").write_text(to_toml(c))

    def state() -> dict[str, Any]:
        return {
            "format": CHECKPOINT_FORMAT,
            "kind": EXPERIMENT_KIND,
            "step": step,
            "config": to_dict(c),
            "resolution": list(model.resolution),
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "generator": gen.get_state(),
            "torch_rng": torch.get_rng_state(),
            "seconds": seconds,
            "train_seconds": train_seconds,
            "loss_sum": loss_sum,
            "loss_count": loss_count,
        }

    steps, batch = c.train.steps, c.train.batch_size
    end = steps if stop_at is None else max(step, min(stop_at, steps))
    bar = tqdm(
        total=steps,
        initial=step,
        unit="step",
        desc=f"{c.target.kind} {'x'.join(map(str, model.resolution))}",
        disable=not c.output.progress,
        dynamic_ncols=True,
        file=sys.stderr,
    )
    bar_every = 10
    session_start = segment_start = bar_time = time.perf_counter()
    bar_step = step

    while step < end:
        if step in schedule:
            new = as_resolution(schedule[step], "train.upsample_resolutions")
            if c.train.upsample_moments == "reset":
                model.upsample(new)
                optimizer = make_optimizer(model, c)
            else:
                rescale = c.train.upsample_moments == "rescale"
                model.upsample(new, optimizer, rescale_moments=rescale)
            bar.set_description(f"{c.target.kind} {'x'.join(map(str, new))}")
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(c, step)

        points = draw_batch(c, target, lo, hi, gen)  # [B, 3]
        with torch.no_grad():
            values = target(points)  # [B]
        mse = (model(points)[..., 0] - values).square().mean()
        loss = mse + c.train.tv_weight * model.total_variation() if c.train.tv_weight else mse
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        loss_sum += mse.detach()
        loss_count += 1
        step += 1

        if step % bar_every == 0 or step == end:
            now = time.perf_counter()
            mse_now = mse.item()  # synchronises
            rate = batch * (step - bar_step) / max(time.perf_counter() - bar_time, 1e-9)
            bar.set_postfix(
                loss=f"{mse_now:.2e}",
                psnr=f"{psnr(mse_now, value_range):.1f}",
                pts_s=f"{rate:.3g}",
                refresh=False,
            )
            bar.update(step - bar.n)
            bar_step, bar_time = step, now

        is_eval = step % c.eval.every == 0 or step == steps
        is_checkpoint = step == end or (
            c.output.checkpoint_every and step % c.output.checkpoint_every == 0
        )
        if is_eval or is_checkpoint:
            _sync(device)
            now = time.perf_counter()
            train_seconds += now - segment_start
        if is_eval:
            held_out = evaluate(model, eval_points, eval_values)
            record = {
                "step": step,
                "mse": held_out,
                "psnr": psnr(held_out, value_range),
                "train_mse": (loss_sum / max(loss_count, 1)).item(),
                "lr": learning_rate(c, step - 1),
                "resolution": list(model.resolution),
                "seconds": seconds + time.perf_counter() - session_start,
                "points_per_second": step * batch / max(train_seconds, 1e-9),
            }
            log.write(record)
            loss_sum.zero_()
            loss_count = 0
            if c.output.progress:
                bar.write(
                    f"step {step:>6}  held-out mse {held_out:.3e}  psnr {record['psnr']:6.2f} dB"
                    f"  res {'x'.join(map(str, model.resolution))}"
                )
        if is_checkpoint:
            seconds += time.perf_counter() - session_start
            session_start = time.perf_counter()
            save_checkpoint(out / CHECKPOINT, state())
        if is_eval or is_checkpoint:
            segment_start = time.perf_counter()
    bar.close()
    seconds += time.perf_counter() - session_start

    if step < steps:
        print(f"stopped at step {step} of {steps}; continue with --resume", file=sys.stderr)
        return None

    held_out = evaluate(model, eval_points, eval_values)
    summary = {
        "psnr": psnr(held_out, value_range),
        "mse": held_out,
        "steps": steps,
        "seconds": seconds,
        "train_seconds": train_seconds,
        "points_per_second": steps * batch / max(train_seconds, 1e-9),
        "device": describe_device(device),
        "target": c.target.kind,
        "resolution": list(model.resolution),
        "parameters": model.features.numel(),
        "batch_size": batch,
        "value_range": value_range,
        "held_out_points": c.eval.points,
        "torch": torch.__version__,
        "grid_ops": grid._backend.source if hasattr(grid, "_backend") else "",
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    if c.output.pictures:
        from .pictures import write_pictures

        write_pictures(out, c, model, target, log.read(), summary)
    return summary
