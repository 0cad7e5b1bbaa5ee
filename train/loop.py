"""The fitting loop skeleton: draw a batch, loss, Adam, evaluate, checkpoint, resume.

What differs between experiments (the batch, the loss, the evaluation, the pictures) lives
in one package per experiment (`train/<name>/`, found through `train.experiments`), whose
class has the methods of `Experiment`. This file holds only what they share.

Run directory layout (all written by `run`; `rundir.RUN_FILES` lists them, and a new
run refuses a directory holding them unless told to resume or overwrite it):

    config.toml       the resolved config (feed it back with --config)
    metrics.jsonl     one JSON object per evaluation
    checkpoint.pt     model, optimiser, RNG and counters; written atomically
    summary.json      final numbers (written when the run completes)
    *.png, *.gif      the experiment's pictures
    tensorboard/      with output.tensorboard: metrics.jsonl as TensorBoard events
    other files       what the experiment's `write_files` writes (`rundir.RUN_FILES`)
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import Tensor, nn
from tqdm import tqdm

import grid

from . import distributed, experiments
from .config import Config, as_resolution, load_config, to_dict, to_toml
from .dependencies import check_dependencies
from .distributed import World
from .errors import ConfigError, InputFileError, read_input
from .metrics import MetricsLog
from .rundir import check_run_dir, prepare_run_dir
from .tensorboard import experiment_images, open_log

CHECKPOINT = "checkpoint.pt"
#: Layout of checkpoint.pt. 2: stores "format" and "kind" (the experiment); 1: the same
#: keys without them (written before they existed; read as a field checkpoint).
CHECKPOINT_FORMAT = 2
#: Keys every readable checkpoint holds (besides "format" and "kind").
CHECKPOINT_KEYS = (
    *("step", "config", "resolution", "model", "optimizer", "generator", "torch_rng"),
    *("seconds", "train_seconds", "loss_sum", "loss_count"),
)
RATE_LABELS = {"points": "pts"}  # progress-bar names of the batch units


class Experiment(Protocol):
    """What an experiment's class provides to `run` (`train/<name>/experiment.py`)."""

    label: str  # progress-bar prefix
    unit: str  # what the batch counts ("points", "rays"): metrics key `<unit>_per_second`
    eval_name: str  # what evaluate() measures on, for the log line
    train_metric: str  # metrics key of the batch value's mean ("train_mse", "train_loss")
    model: nn.Module  # has .resolution and state_dict(); saved in the checkpoint
    optimizer: torch.optim.Optimizer

    def learning_rate(self, step: int) -> float: ...  # reported in metrics.jsonl
    def begin_step(self, step: int) -> None: ...  # learning rates, maintenance
    def upsample(self, resolution: tuple[int, int, int]) -> None: ...
    def loss(self) -> tuple[Tensor, Tensor]: ...  # (loss, batch value), draws the batch
    def progress(self, value: float) -> dict[str, str]: ...  # progress-bar numbers
    def evaluate(self, train_seconds: float) -> dict[str, Any]: ...  # mse, psnr, ...
    def eval_line(self, quality: dict[str, Any]) -> str: ...  # evaluate()'s log line
    def state_dict(self) -> dict[str, Any]: ...  # extra checkpoint state
    def load_state_dict(self, state: dict[str, Any]) -> None: ...
    def summary(self, common: dict[str, Any]) -> dict[str, Any]: ...
    def write_files(self, out: Path, summary: dict) -> None: ...  # results besides pictures
    def write_pictures(self, out: Path, records: list[dict], summary: dict) -> None: ...

    # optional: tensorboard_images() -> {name: [H, W, 3] in [0, 1]} of the last evaluation,
    # written with each metrics record under output.tensorboard (train/tensorboard.py)


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


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    """Write `state` to a temporary file next to `path`, then rename it over `path`:
    a crash leaves either the old checkpoint or the new one, never half of one."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def load_checkpoint(out_dir: Path, kind: str | None = None) -> dict[str, Any]:
    """The checkpoint of a run directory (tensors on the CPU).

    Raises InputFileError naming the file when it is damaged (truncated, corrupt),
    not a grid-train checkpoint, of an experiment other than `kind` (any, if None),
    or of a format this version does not read.
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
    found = state.get("kind", experiments.FORMAT_1_KIND)
    if kind is not None and found != kind:
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


def make_experiment(
    config: Config,
    device: torch.device,
    gen: torch.Generator,
    resolution: tuple[int, int, int] | None,
    world: World = distributed.SINGLE,
) -> Experiment:
    """The experiment `config.experiment` names (its package imported on first use, see
    `train.experiments`); under torchrun it trains on this rank's share of each batch."""
    cls = experiments.experiment_class(config.experiment)
    return cls(config, device, gen, resolution, world)


def _load_state(
    out: Path, checkpoint: dict[str, Any], exp: Experiment, gen: torch.Generator
) -> None:
    """Load a checkpoint's model, optimiser, experiment and RNG states (InputFileError
    naming the file when they do not fit this run)."""
    try:
        exp.model.load_state_dict(checkpoint["model"])
        exp.optimizer.load_state_dict(checkpoint["optimizer"])
        exp.load_state_dict(checkpoint.get("experiment", {}))
        gen.set_state(checkpoint["generator"])
        torch.set_rng_state(checkpoint["torch_rng"])
    except (RuntimeError, ValueError, TypeError, KeyError) as error:
        problem = " ".join(str(error).split())  # one line
        raise InputFileError(out / CHECKPOINT, f"does not fit this run ({problem})") from None


def run(
    config: Config,
    out_dir: str | Path,
    *,
    resume: bool = False,
    overwrite: bool = False,
    stop_at: int | None = None,
) -> dict[str, Any] | None:
    """Train the configured experiment; write the run directory.

    Under torchrun (after `distributed.start()`, as `python -m train` does) every rank
    calls this: each trains on its share of every batch, gradients are averaged, and
    rank 0 alone writes the run directory (see train/distributed.py).

    Args:
        config: a validated config (`load_config`).
        out_dir: the run directory (created if needed). A new run refuses a
            directory that already holds one (ConfigError) unless `overwrite`.
        resume: continue from `out_dir/checkpoint.pt`. With the same config the
            result is identical to an uninterrupted run on the CPU (RNG states are saved).
        overwrite: replace the run in `out_dir`: delete the files a run writes
            (`rundir.RUN_FILES`), keep anything else. Not with `resume`.
        stop_at: stop after this step (writing the checkpoint) without finishing;
            continue later with `resume=True`.

    Returns:
        The summary (also written to summary.json), or None when stopped early.
    """
    c = config
    out = Path(out_dir)
    world = distributed.world()
    schedule = dict(zip(c.train.upsample_steps, c.train.upsample_resolutions, strict=True))
    log = MetricsLog(out / "metrics.jsonl")
    step, seconds, train_seconds = 0, 0.0, 0.0
    loss_count = 0
    # Every rank reads the inputs and builds the experiment; an error on any rank stops
    # all of them here, before rank 0 writes anything.
    error = None
    try:
        check_dependencies(c)
        check_run_dir(out, resume=resume, overwrite=overwrite)
        device = world.device(select_device(c.device))
        world.check_batch(c.train.batch_size, experiments.specs()[c.experiment].unit)
        gen = torch.Generator(device=device).manual_seed(c.seed)
        checkpoint = load_checkpoint(out, c.experiment) if resume else None
        resolution = tuple(checkpoint["resolution"]) if checkpoint is not None else None
        exp = make_experiment(c, device, gen, resolution, world)  # reads its input files
        model = exp.model
        if checkpoint is not None:
            _load_state(out, checkpoint, exp, gen)
    except ConfigError as caught:
        if distributed.is_agreed(caught):
            raise
        error = caught
    world.agree(error)
    loss_sum = torch.zeros((), dtype=torch.float64, device=device)
    if checkpoint is not None:
        step, seconds = checkpoint["step"], checkpoint["seconds"]
        train_seconds = checkpoint["train_seconds"]
        loss_sum = checkpoint["loss_sum"].to(device)
        loss_count = checkpoint["loss_count"]
    # Ranks start identical (same seed, same checkpoint); rank 0's copy makes sure.
    world.broadcast_(list(model.parameters()))

    # Only now that every rank has read its input files: a failure leaves the old run
    # intact. Rank 0 alone writes the run directory.
    error, board = None, None
    if world.is_main:
        try:
            prepare_run_dir(out, resume=resume, overwrite=overwrite)
            if checkpoint is not None:
                log.truncate_after(step)
            else:
                log.reset()
                (out / "summary.json").unlink(missing_ok=True)
            (out / "config.toml").write_text(to_toml(c))
            board = open_log(out, c.output.tensorboard, step if checkpoint is not None else None)
        except ConfigError as caught:
            error = caught
    world.agree(error)

    def state() -> dict[str, Any]:
        extra = exp.state_dict()
        return {
            "format": CHECKPOINT_FORMAT,
            "kind": c.experiment,
            "step": step,
            "config": to_dict(c),
            "resolution": list(model.resolution),
            "model": model.state_dict(),
            "optimizer": exp.optimizer.state_dict(),
            "generator": gen.get_state(),
            "torch_rng": torch.get_rng_state(),
            "seconds": seconds,
            "train_seconds": train_seconds,
            "loss_sum": loss_sum,
            "loss_count": loss_count,
            "processes": world.size,  # informational: any number of processes resumes it
            **({"experiment": extra} if extra else {}),
        }

    steps, batch = c.train.steps, c.train.batch_size
    rate_key = f"{exp.unit}_per_second"
    end = steps if stop_at is None else max(step, min(stop_at, steps))
    bar = tqdm(
        total=steps,
        initial=step,
        unit="step",
        desc=f"{exp.label} {'x'.join(map(str, model.resolution))}",
        disable=not c.output.progress or not world.is_main,
        dynamic_ncols=True,
        file=sys.stderr,
    )
    bar_every = 10
    session_start = segment_start = bar_time = time.perf_counter()
    bar_step = step

    while step < end:
        if step in schedule:
            new = as_resolution(schedule[step], "train.upsample_resolutions")
            exp.upsample(new)
            bar.set_description(f"{exp.label} {'x'.join(map(str, new))}")
        exp.begin_step(step)
        loss, mse = exp.loss()
        exp.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if world.size > 1:  # the mean over the ranks' shares: the global batch's gradient
            world.average_gradients([p for g in exp.optimizer.param_groups for p in g["params"]])
        exp.optimizer.step()
        loss_sum += mse.detach()
        loss_count += 1
        step += 1

        if step % bar_every == 0 or step == end:
            now = time.perf_counter()
            value = mse.item()  # synchronises
            rate = batch * (step - bar_step) / max(time.perf_counter() - bar_time, 1e-9)
            bar.set_postfix(
                **exp.progress(value),
                **{RATE_LABELS.get(exp.unit, exp.unit) + "_s": f"{rate:.3g}"},
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
            world.mean_(loss_sum)  # each rank's sum of its shares' MSEs -> the batches'
        if is_eval:
            quality = exp.evaluate(train_seconds)
            record = {
                "step": step,
                **quality,
                exp.train_metric: (loss_sum / max(loss_count, 1)).item(),
                "lr": exp.learning_rate(step - 1),
                "resolution": list(model.resolution),
                "seconds": seconds + time.perf_counter() - session_start,
                rate_key: step * batch / max(train_seconds, 1e-9),
            }
            if world.is_main:
                log.write(record)
                if board is not None:
                    board.write(record, experiment_images(exp))
            loss_sum.zero_()
            loss_count = 0
            if c.output.progress and world.is_main:
                bar.write(
                    f"step {step:>6}  {exp.eval_line(quality)}  "
                    f"res {'x'.join(map(str, model.resolution))}"
                )
        if is_checkpoint:
            seconds += time.perf_counter() - session_start
            session_start = time.perf_counter()
            if world.is_main:
                save_checkpoint(out / CHECKPOINT, state())
        if is_eval or is_checkpoint:
            segment_start = time.perf_counter()
    bar.close()
    if board is not None:
        board.close()
    seconds += time.perf_counter() - session_start

    if step < steps:
        if world.is_main:
            print(f"stopped at step {step} of {steps}; continue with --resume", file=sys.stderr)
        return None

    common = {
        "steps": steps,
        "seconds": seconds,
        "train_seconds": train_seconds,
        "per_second": steps * batch / max(train_seconds, 1e-9),
        "device": describe_device(device),
        "torch": torch.__version__,
        "grid_ops": grid._backend.source if hasattr(grid, "_backend") else "",
        "processes": world.size,
        "records": log.read() if world.is_main else [],
    }
    summary = exp.summary(common)  # every rank: its evaluation is split across them
    if world.is_main:
        (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        exp.write_files(out, summary)
        if c.output.pictures:
            exp.write_pictures(out, log.read(), summary)
    return summary
