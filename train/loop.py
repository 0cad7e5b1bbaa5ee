"""The fitting loop skeleton: draw a batch, loss, Adam, evaluate, checkpoint, resume.

What differs between experiments (the batch, the loss, the evaluation, the pictures) lives
in one package per experiment (`train/<name>/`, found through `train.experiments`), whose
class subclasses `train.experiment.Experiment` (every hook the loop calls, declared there).
This file holds only what they share: `_Training` runs a run in phases (set-up, resume,
the run directory, the steps with their evaluation and checkpoint cadences, the finish).

A run stops at the first non-finite loss or gradient (`Diverged`, train/divergence.py),
before it evaluates or writes a checkpoint; the checkpoint on disk is the last finite one.
summary.json's "phases" say where the command's seconds went, and are printed at the end.

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

import sys
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch import nn

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
from .devices import describe_device, device_option, select_device, sync  # noqa: F401
from .distributed import World
from .divergence import Diverged, DivergenceWatch, GrowthWarning
from .errors import ConfigError, OutputFileError, writing
from .experiment import Experiment
from .interrupt import Interrupted, StopCheck, StopSignals
from .metrics import LaggedValues, MetricsLog
from .progress_bar import progress_bar
from .results import grid_ops, write_results
from .rundir import check_run_dir, prepare_run_dir
from .tensorboard import open_log

RATE_LABELS = {"points": "pts"}  # progress-bar names of the batch units


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
        Diverged: the loss or a gradient went non-finite; the last checkpoint (finite) is
            intact.
    """
    progress = Progress()
    with StopSignals() as signals:
        try:
            training = _Training(config, Path(out_dir), resume, overwrite, signals, progress)
            return training.run(stop_at)
        except Diverged as error:
            if progress.model is not None:
                error.add_hint(progress.left("lower the learning rate"))
            raise
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


class _Training:
    """One call of `run`, in phases: `set_up` (every rank reads its inputs and builds the
    experiment), `resume` (the checkpoint's counters), `open_run_dir` (rank 0 writes it),
    `train` (the steps, with `after_step`'s evaluation and checkpoint cadences) and
    `finish` (summary, files, pictures). The counters a checkpoint saves are attributes."""

    def __init__(
        self,
        c: Config,
        out: Path,
        resume: bool,
        overwrite: bool,
        signals: StopSignals,
        progress: Progress,
    ) -> None:
        self.c, self.out, self.resuming, self.overwrite = c, out, resume, overwrite
        self.signals, self.progress = signals, progress
        self.world = distributed.world()
        self.schedule = dict(zip(c.train.upsample_steps, c.train.upsample_resolutions, strict=True))
        self.log = MetricsLog(out / "metrics.jsonl")
        self.step, self.seconds, self.train_seconds, self.loss_count = 0, 0.0, 0.0, 0
        self.checkpoint: dict[str, Any] | None = None
        self.board = None
        self.graphed: step_graph.GraphedStep | None = None
        # summary.json's "phases" (seconds, adding up to "total") and their parts
        self.phases: dict[str, float] = {}
        self.parts: dict[str, dict[str, float]] = {}

    def run(self, stop_at: int | None) -> dict[str, Any] | None:
        from . import STARTED
        from .distributed import LOADED

        start = time.perf_counter()
        import grid  # noqa: F401  (the native extension loads here, timed)

        self.parts["start_up"] = {
            "import_torch": LOADED - STARTED,
            "import_grid": time.perf_counter() - start,
        }
        self.phases["start_up"] = time.perf_counter() - STARTED
        self.set_up()
        self.phases["setup"] = time.perf_counter() - STARTED - self.phases["start_up"]
        self.resume()
        self.open_run_dir()
        self.progress.started = True
        if not self.train(stop_at):
            return None
        return self.finish()

    # ---- set-up -----------------------------------------------------------------------------

    def set_up(self) -> None:
        """Every rank reads the inputs and builds the experiment; an error on any rank stops
        all of them here, before rank 0 writes anything."""
        c, world, progress = self.c, self.world, self.progress
        error = None
        try:
            check_dependencies(c)
            if c.eval.seconds and world.size > 1:  # each rank's clock would decide alone
                raise ConfigError("eval.seconds: not under torchrun (one process only)")
            check_run_dir(self.out, resume=self.resuming, overwrite=self.overwrite)
            device = self.device = progress.device = world.device(select_device(c.device))
            self.trained = distributed.scaled_config(c, world)  # c is what is written
            world.check_batch(self.trained.train.batch_size, experiments.specs()[c.experiment].unit)
            memory.check_memory(self.trained, device)  # before anything is allocated
            self.gen = torch.Generator(device=device).manual_seed(c.seed)
            checkpoint = self.checkpoint = (
                load_checkpoint(self.out, c.experiment) if self.resuming else None
            )
            resolution = tuple(checkpoint["resolution"]) if checkpoint is not None else None
            start = time.perf_counter()
            self.exp = make_experiment(self.trained, device, self.gen, resolution, world)
            self.parts["setup"] = {"experiment": time.perf_counter() - start}  # data, model
            self.model = progress.model = self.exp.model
            if checkpoint is not None:
                load_state(self.out, checkpoint, self.exp, self.gen)
                self.exp.fit_optimizer()  # either step mode resumes any checkpoint
        except ConfigError as caught:
            if distributed.is_agreed(caught):
                raise
            error = caught
        world.agree(error)

    def resume(self) -> None:
        """The checkpoint's counters; every rank starts from rank 0's parameters."""
        self.loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        checkpoint = self.checkpoint
        if checkpoint is not None:
            self.step, self.seconds = checkpoint["step"], checkpoint["seconds"]
            self.train_seconds = checkpoint["train_seconds"]
            self.loss_sum = checkpoint["loss_sum"].to(self.device)
            self.loss_count = checkpoint["loss_count"]
            self.progress.step = self.progress.saved = self.step
        # Ranks start identical (same seed, same checkpoint); rank 0's copy makes sure.
        self.world.broadcast_(list(self.model.parameters()))

    def open_run_dir(self) -> None:
        """Only now that every rank has read its input files: a failure leaves the old run
        intact. Rank 0 alone writes the run directory."""
        out, resumed = self.out, self.checkpoint is not None
        error = None
        if self.world.is_main:
            try:
                prepare_run_dir(out, resume=self.resuming, overwrite=self.overwrite)
                self.progress.started = True
                if resumed:
                    self.log.truncate_after(self.step)
                else:
                    self.log.reset()
                path = out / "config.toml"
                with writing(path, remove=path):
                    path.write_text(to_toml(self.c))
                self.board = open_log(
                    out, self.c.output.tensorboard, self.step if resumed else None
                )
            except ConfigError as caught:
                error = caught
        self.world.agree(error)

    def state(self) -> dict[str, Any]:
        """checkpoint.pt's contents now."""
        extra = self.exp.state_dict()
        return {
            "format": CHECKPOINT_FORMAT,
            "kind": self.c.experiment,
            "step": self.step,
            "config": to_dict(self.c),
            "resolution": list(self.model.resolution),
            "model": self.model.state_dict(),
            "optimizer": self.exp.optimizer.state_dict(),
            "generator": self.gen.get_state(),
            "torch_rng": torch.get_rng_state(),
            "seconds": self.seconds,
            "train_seconds": self.train_seconds,
            "loss_sum": self.loss_sum,
            "loss_count": self.loss_count,
            "processes": self.world.size,  # informational: any number of processes resumes it
            **({"experiment": extra} if extra else {}),
        }

    # ---- the steps --------------------------------------------------------------------------

    def train(self, stop_at: int | None) -> bool:
        """The steps up to `stop_at` (or the end); whether the run reached its end."""
        c, exp, world = self.c, self.exp, self.world
        steps = c.train.steps
        self.end = steps if stop_at is None else max(self.step, min(stop_at, steps))
        resolution = "x".join(map(str, self.model.resolution))
        show = c.output.progress and world.is_main
        self.bar = progress_bar(steps, self.step, f"{exp.label} {resolution}", show)
        self.bar_every = 10
        self.session_start = self.segment_start = self.bar_time = time.perf_counter()
        self.bar_step = self.first_step = self.step
        self.stops = StopCheck(self.signals, c.output.checkpoint_minutes, world)
        self.stop = False
        self.watch = DivergenceWatch(self.device, list(exp.loss_terms()))
        self.growth = GrowthWarning(exp.train_metric, world.is_main)
        self.parts["evaluations_and_checkpoints"] = {"evaluations": 0.0, "checkpoints": 0.0}
        # The steps: captured as CUDA graphs where the experiment allows it (train/step_graph.py)
        self.graphed = step_graph.GraphedStep(exp, world, self.watch) if exp.graphed else None
        self.bar_values = LaggedValues()  # the bar's numbers, read without a synchronisation
        # eval.seconds still ahead
        self.eval_times = sorted(s for s in c.eval.seconds if s > self.train_seconds)
        try:
            while not self.stop and self.step < self.end:
                self.train_step()
                self.after_step()
        finally:
            self.bar.close()
            if self.board is not None:
                self.board.close()
        self.seconds += time.perf_counter() - self.session_start
        if self.stop:
            raise Interrupted(self.stops.signum, self.step, steps)
        if self.step < steps:
            if world.is_main:
                print(
                    f"stopped at step {self.step} of {steps}; continue with --resume",
                    file=sys.stderr,
                )
            return False
        return True

    def train_step(self) -> None:
        """One step: an upsample where the schedule says, the step, the bar."""
        exp, step = self.exp, self.step
        if step in self.schedule:
            new = as_resolution(self.schedule[step], "train.upsample_resolutions")
            exp.upsample(new)
            self.bar.set_description(f"{exp.label} {'x'.join(map(str, new))}")
        exp.begin_step(step)
        if self.graphed is not None:
            mse = self.graphed.step()
        else:
            mse = step_graph.eager_step(exp, self.world, self.watch)
        self.loss_sum += mse.detach()
        self.loss_count += 1
        step = self.step = self.progress.step = step + 1
        if not self.bar.disable and (step % self.bar_every == 0 or step == self.end):
            now = time.perf_counter()
            # a few steps old on CUDA: no synchronisation
            numbers = torch.cat([mse.detach().double().reshape(1), self.watch.numbers()])
            value, first, best, best_at, _ = self.bar_values.read(numbers)
            if first and self.world.size == 1:  # under torchrun: at the next agreed sync
                self.watch.stop(int(first), self.first_step, exp.learning_rate)
            self.growth.check(value, step, best, int(best_at) + self.first_step)
            rate = self.trained.train.batch_size * (step - self.bar_step)
            rate /= max(time.perf_counter() - self.bar_time, 1e-9)
            self.bar.set_postfix(
                **exp.progress(value),
                **{RATE_LABELS.get(exp.unit, exp.unit) + "_s": f"{rate:.3g}"},
                refresh=False,
            )
            self.bar.update(step - self.bar.n)
            self.bar_step, self.bar_time = step, now

    def after_step(self) -> None:
        """The cadences: a signal, the clock, the evaluations and the checkpoints."""
        c, world, step, steps = self.c, self.world, self.step, self.c.train.steps
        self.stop, due = self.stops.poll(step, self.end)  # a signal; checkpoint_minutes passed
        is_eval = step % c.eval.every == 0 or step == steps
        if self.eval_times and not is_eval:  # host time: the step has synchronised (or nearly)
            elapsed = self.train_seconds + time.perf_counter() - self.segment_start
            is_eval = elapsed >= self.eval_times[0]
        # a finished run's checkpoint is written after its files (write_results): the
        # mesh or pictures a user waits for do not wait for it
        every = c.output.checkpoint_every
        is_checkpoint = self.stop or (
            step < steps and (step == self.end or due or bool(every and step % every == 0))
        )
        if not (is_eval or is_checkpoint):
            return
        sync(self.device)
        now = time.perf_counter()
        self.train_seconds += now - self.segment_start
        world.mean_(self.loss_sum)  # each rank's sum of its shares' MSEs -> the batches'
        params = step_graph.parameters(self.exp)  # before an evaluation or a checkpoint:
        self.watch.check(world, params, self.first_step, step, self.exp.learning_rate)
        parts = self.parts["evaluations_and_checkpoints"]
        if is_eval:
            start = time.perf_counter()
            self.evaluate()
            parts["evaluations"] += time.perf_counter() - start
        if is_checkpoint:
            start = time.perf_counter()
            self.seconds += time.perf_counter() - self.session_start
            self.session_start = time.perf_counter()
            world.on_main(lambda: save_checkpoint(self.out / CHECKPOINT, self.state()))
            self.progress.saved = step
            self.stops.saved()
            parts["checkpoints"] += time.perf_counter() - start
        self.segment_start = time.perf_counter()

    def evaluate(self) -> None:
        """An evaluation: a metrics.jsonl record (and TensorBoard's), the log line."""
        c, exp, world, step = self.c, self.exp, self.world, self.step
        self.eval_times = [s for s in self.eval_times if s > self.train_seconds]
        quality = exp.evaluate(self.train_seconds)
        train_value = (self.loss_sum / max(self.loss_count, 1)).item()
        record = {
            "step": step,
            **quality,
            exp.train_metric: train_value,
            "lr": exp.learning_rate(step - 1),
            "resolution": list(self.model.resolution),
            "seconds": self.seconds + time.perf_counter() - self.session_start,
            f"{exp.unit}_per_second": step
            * self.trained.train.batch_size
            / max(self.train_seconds, 1e-9),
        }
        best, best_at = float(self.watch.best), int(self.watch.best_at) + self.first_step
        self.growth.check(train_value, step, best, best_at)  # also without a progress bar
        world.on_main(partial(self.log.write, record))
        if self.board is not None:  # rank 0 alone has one
            self.board.write(record, exp.tensorboard_images())
        self.loss_sum.zero_()
        self.loss_count = 0
        if c.output.progress and world.is_main:
            self.bar.write(
                f"step {step:>6}  {exp.eval_line(quality)}  "
                f"res {'x'.join(map(str, self.model.resolution))}"
            )

    # ---- the end ----------------------------------------------------------------------------

    def finish(self) -> dict[str, Any]:
        """The summary (every rank: its evaluation is split across them); rank 0 writes the
        files, the checkpoint, summary.json and the pictures."""
        c, exp, world, step, phases = self.c, self.exp, self.world, self.step, self.phases
        batch, graphed = self.trained.train.batch_size, self.graphed
        common = {
            "steps": c.train.steps,
            "seconds": self.seconds,
            "train_seconds": self.train_seconds,
            "per_second": c.train.steps * batch / max(self.train_seconds, 1e-9),
            "device": describe_device(self.device),
            "torch": torch.__version__,
            "grid_ops": grid_ops(),
            "processes": world.size,
            "records": self.log.read() if world.is_main else [],
        }
        done = time.perf_counter()
        summary = exp.summary(common)
        summary["cuda_graph"] = graphed is not None
        if graphed is not None:  # how often the step was captured (again) and ran op by op
            summary["graph_captures"] = graphed.captures
            summary["graph_eager_steps"] = graphed.eager_steps
            summary["graph_capture_seconds"] = graphed.capture_seconds
            self.parts["train"] = {"graph_capture": graphed.capture_seconds}
        phases.update(
            train=self.train_seconds, evaluations_and_checkpoints=self.seconds - self.train_seconds
        )
        phases["final_evaluation"] = time.perf_counter() - done
        if world.size > 1:  # the gradient averaging's all-reduced bytes (World.traffic)
            averaged = world.traffic.get("bytes", 0) / max(step - self.first_step, 1)
            summary["gradient_mb_averaged_per_step"] = averaged / 2**20
            calls = world.traffic.get("all_reduces", 0) / max(step - self.first_step, 1)
            summary["gradient_all_reduces_per_step"] = calls

        def checkpoint() -> None:
            save_checkpoint(self.out / CHECKPOINT, self.state())
            self.progress.saved = step

        def write() -> None:  # the checkpoint unless a signal or the clock wrote it already
            saved = self.progress.saved == step
            write_results(
                self.out, exp, summary, phases, self.parts, self.log, None if saved else checkpoint
            )

        world.on_main(write)
        self.progress.saved = step
        summary["phases"] = phases
        summary["phase_parts"] = self.parts
        return summary
