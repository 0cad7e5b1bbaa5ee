"""The fitting loop skeleton: draw a batch, loss, Adam, evaluate, checkpoint, resume.

What differs between experiments (the batch, the loss, the evaluation, the pictures) lives
in one package per experiment (`train/<name>/`, found through `train.experiments`), whose
class has the methods of `Experiment`. This file holds only what they share.

Run directory layout (all written by `run`; `rundir.RUN_FILES` lists them, and a new
run refuses a directory holding them unless told to resume or overwrite it):

    config.toml       the resolved config (feed it back with --config)
    metrics.jsonl     one JSON object per evaluation
    checkpoint.pt     model, optimiser, RNG and counters; written atomically, every
                      output.checkpoint_every steps, every output.checkpoint_minutes,
                      at the end and when a signal stops the run (train/interrupt.py)
    summary.json      final numbers (written when the run completes)
    *.png, *.gif      the experiment's pictures
    tensorboard/      with output.tensorboard: metrics.jsonl as TensorBoard events
    other files       what the experiment's `write_files` writes (`rundir.RUN_FILES`)
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import Tensor, nn
from tqdm import tqdm

import grid

from . import distributed, experiments, memory, step_graph
from .checkpoint import (
    CHECKPOINT,
    CHECKPOINT_FORMAT,
    load_checkpoint,
    load_state,
    save_checkpoint,
)
from .config import Config, as_resolution, to_dict, to_toml
from .dependencies import check_dependencies
from .distributed import World
from .errors import ConfigError, OutputFileError, writing
from .interrupt import Interrupted, StopCheck, StopSignals
from .metrics import LaggedValues, MetricsLog
from .rundir import check_run_dir, prepare_run_dir
from .tensorboard import experiment_images, open_log

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


def device_option(name: str, option: str = "--device") -> torch.device:
    """A command line's device: auto / cpu / cuda[:N] (`select_device`); ConfigError naming
    `option` for anything else, or for cuda on a machine without it."""
    try:
        device = select_device(name)
    except RuntimeError:
        device = None
    if device is None or device.type not in ("cpu", "cuda"):
        raise ConfigError(f"{option}: expected auto, cpu or cuda, got {name!r}")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"{option}: cuda, but this machine has no CUDA device (use cpu)")
    return device


def describe_device(device: torch.device) -> str:
    if device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(device)})"
    return f"cpu ({torch.get_num_threads()} threads)"


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


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


@dataclass
class Progress:
    """How far a run got, for the errors that stop it: the device, the model, the steps
    done, the step of the checkpoint on disk (None: none) and whether the run directory
    was prepared."""

    device: torch.device | None = None
    model: nn.Module | None = None
    step: int = 0
    saved: int | None = None
    started: bool = False

    def left(self, fix: str = "") -> str:
        """What is left of the run, and how to go on (after `fix`, if given)."""
        then = f"{fix}, then " if fix else ""
        if self.saved is not None:
            return f"{CHECKPOINT} of step {self.saved} is intact: {then}continue with --resume"
        if self.started:
            return f"no checkpoint was written yet: {then}start again with --overwrite"
        return f"nothing was written: {then}run the command again"


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

    SIGINT and SIGTERM are caught while it runs (in the main thread; train/interrupt.py):
    the current step finishes, the checkpoint is written and `Interrupted` is raised.

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

    Raises:
        ConfigError: before training, naming the key, option or file (also a config
            that cannot fit in the device's memory, see train/memory.py).
        Interrupted: a signal stopped the run; its checkpoint is written.
        OutputFileError: a run file could not be written; the previous checkpoint is intact.
        OutOfMemory: the device ran out of memory; the last checkpoint is intact.
    """
    progress = Progress()
    with StopSignals() as signals:
        try:
            return _train(config, Path(out_dir), resume, overwrite, stop_at, signals, progress)
        except OutputFileError as error:
            error.add_hint(progress.left(error.fix))
            raise
        except Exception as error:
            if not memory.is_out_of_memory(error):
                raise
            model = progress.model
            raise memory.out_of_memory(
                config,
                progress.device,
                step=progress.step,
                resolution=model.resolution if model is not None else None,
                kept=progress.left(),
            ) from None


def _train(
    c: Config,
    out: Path,
    resume: bool,
    overwrite: bool,
    stop_at: int | None,
    signals: StopSignals,
    progress: Progress,
) -> dict[str, Any] | None:
    """`run`'s work, with `signals` installed; keeps `progress` up to date."""
    from . import STARTED

    phases = {"start_up": time.perf_counter() - STARTED}  # summary.json's "phases", seconds
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
        if c.eval.seconds and world.size > 1:  # each rank's clock would decide alone
            raise ConfigError("eval.seconds: not under torchrun (one process only)")
        check_run_dir(out, resume=resume, overwrite=overwrite)
        device = progress.device = world.device(select_device(c.device))
        trained = distributed.scaled_config(c, world)  # train.scaling; c is what is written
        world.check_batch(trained.train.batch_size, experiments.specs()[c.experiment].unit)
        memory.check_memory(trained, device)  # before anything is allocated
        gen = torch.Generator(device=device).manual_seed(c.seed)
        checkpoint = load_checkpoint(out, c.experiment) if resume else None
        resolution = tuple(checkpoint["resolution"]) if checkpoint is not None else None
        exp = make_experiment(trained, device, gen, resolution, world)  # reads its input files
        model = progress.model = exp.model
        if checkpoint is not None:
            load_state(out, checkpoint, exp, gen)
            if hasattr(exp, "fit_optimizer"):  # either step mode resumes any checkpoint
                exp.fit_optimizer()
    except ConfigError as caught:
        if distributed.is_agreed(caught):
            raise
        error = caught
    world.agree(error)
    phases["setup"] = time.perf_counter() - STARTED - phases["start_up"]
    loss_sum = torch.zeros((), dtype=torch.float64, device=device)
    if checkpoint is not None:
        step, seconds = checkpoint["step"], checkpoint["seconds"]
        train_seconds = checkpoint["train_seconds"]
        loss_sum = checkpoint["loss_sum"].to(device)
        loss_count = checkpoint["loss_count"]
        progress.step = progress.saved = step
    # Ranks start identical (same seed, same checkpoint); rank 0's copy makes sure.
    world.broadcast_(list(model.parameters()))

    # Only now that every rank has read its input files: a failure leaves the old run
    # intact. Rank 0 alone writes the run directory.
    error, board = None, None
    if world.is_main:
        try:
            prepare_run_dir(out, resume=resume, overwrite=overwrite)
            progress.started = True
            if checkpoint is not None:
                log.truncate_after(step)
            else:
                log.reset()
            path = out / "config.toml"
            with writing(path, remove=path):
                path.write_text(to_toml(c))
            board = open_log(out, c.output.tensorboard, step if checkpoint is not None else None)
        except ConfigError as caught:
            error = caught
    world.agree(error)
    progress.started = True

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

    steps, batch = c.train.steps, trained.train.batch_size  # the global batch
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
    bar_step = first_step = step
    stops = StopCheck(signals, c.output.checkpoint_minutes, world)
    stop = False
    # The steps: captured as CUDA graphs where the experiment allows it (train/step_graph.py)
    graphed = step_graph.GraphedStep(exp, world) if getattr(exp, "graphed", False) else None
    bar_values = LaggedValues()  # the bar's batch value, read without a synchronisation
    eval_times = sorted(s for s in c.eval.seconds if s > train_seconds)  # still ahead

    while not stop and step < end:
        if step in schedule:
            new = as_resolution(schedule[step], "train.upsample_resolutions")
            exp.upsample(new)
            bar.set_description(f"{exp.label} {'x'.join(map(str, new))}")
        exp.begin_step(step)
        mse = graphed.step() if graphed is not None else step_graph.eager_step(exp, world)
        loss_sum += mse.detach()
        loss_count += 1
        step = progress.step = step + 1

        if not bar.disable and (step % bar_every == 0 or step == end):
            now = time.perf_counter()
            (value,) = bar_values.read(mse)  # a few steps old on CUDA: no synchronisation
            rate = batch * (step - bar_step) / max(time.perf_counter() - bar_time, 1e-9)
            bar.set_postfix(
                **exp.progress(value),
                **{RATE_LABELS.get(exp.unit, exp.unit) + "_s": f"{rate:.3g}"},
                refresh=False,
            )
            bar.update(step - bar.n)
            bar_step, bar_time = step, now

        stop, due = stops.poll(step, end)  # a signal; output.checkpoint_minutes passed
        is_eval = step % c.eval.every == 0 or step == steps
        if eval_times and not is_eval:  # host time: the step has synchronised (or nearly)
            is_eval = train_seconds + time.perf_counter() - segment_start >= eval_times[0]
        # a finished run's checkpoint is written after its files (write_results): the
        # mesh or pictures a user waits for do not wait for it
        is_checkpoint = stop or (
            step < steps
            and (
                step == end
                or due
                or bool(c.output.checkpoint_every and step % c.output.checkpoint_every == 0)
            )
        )
        if is_eval or is_checkpoint:
            _sync(device)
            now = time.perf_counter()
            train_seconds += now - segment_start
            world.mean_(loss_sum)  # each rank's sum of its shares' MSEs -> the batches'
        if is_eval:
            eval_times = [s for s in eval_times if s > train_seconds]
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
            world.on_main(partial(log.write, record))
            if board is not None:  # rank 0 alone has one
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
            world.on_main(lambda: save_checkpoint(out / CHECKPOINT, state()))
            progress.saved = step
            stops.saved()
        if is_eval or is_checkpoint:
            segment_start = time.perf_counter()
    bar.close()
    if board is not None:
        board.close()
    seconds += time.perf_counter() - session_start

    if stop:
        raise Interrupted(stops.signum, step, steps)
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
    done = time.perf_counter()
    summary = exp.summary(common)  # every rank: its evaluation is split across them
    summary["cuda_graph"] = graphed is not None
    if graphed is not None:  # how often the step was captured (again) and ran op by op
        summary["graph_captures"] = graphed.captures
        summary["graph_eager_steps"] = graphed.eager_steps
        summary["graph_capture_seconds"] = graphed.capture_seconds
    phases.update(train=train_seconds, evaluations_and_checkpoints=seconds - train_seconds)
    phases["final_evaluation"] = time.perf_counter() - done
    if world.size > 1:  # the gradient averaging's all-reduced bytes (World.traffic)
        averaged = world.traffic.get("bytes", 0) / max(step - first_step, 1)
        summary["gradient_mb_averaged_per_step"] = averaged / 2**20

    def write_summary() -> None:
        path = out / "summary.json"
        with writing(path, remove=path):
            path.write_text(json.dumps({**summary, "phases": phases}, indent=2) + "\n")

    def write_results() -> None:
        # the files first (sdf: mesh.ply, what a user waits for), then the checkpoint,
        # then the summary: a summary or a picture that cannot be written leaves this
        # step's checkpoint to resume from
        start = time.perf_counter()
        exp.write_files(out, summary)
        phases["files"] = time.perf_counter() - start
        if progress.saved != step:  # not already written by a signal or the clock
            start = time.perf_counter()
            save_checkpoint(out / CHECKPOINT, state())
            progress.saved = step
            phases["checkpoint"] = time.perf_counter() - start
        write_summary()
        if c.output.pictures:
            start = time.perf_counter()
            exp.write_pictures(out, log.read(), summary)
            phases["pictures"] = time.perf_counter() - start
        phases["total"] = time.perf_counter() - STARTED
        write_summary()  # again, with the files' and pictures' times
        print("phases: " + ", ".join(f"{k} {v:.1f} s" for k, v in phases.items()), file=sys.stderr)

    world.on_main(write_results)
    progress.saved = step
    summary["phases"] = phases
    return summary
