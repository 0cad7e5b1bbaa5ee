"""`Experiment`: every hook the loop (`train.loop`) and the step runner (`train.step_graph`)
call on an experiment, declared in one place.

Each experiment's class (`train/<name>/experiment.py`, found through `train.experiments`)
subclasses it. The required hooks raise NotImplementedError here; the optional ones have
the defaults documented below, which an experiment overrides when it has something to say.
The loop calls every hook by name: nothing is discovered with getattr or hasattr.

A step, as `train.loop` drives it:

    begin_step(step)                   learning rates, maintenance (occupancy, ...)
    loss() -> (loss, value)            draws the batch; backward and the optimiser follow
    [graph_key(), replayed()]          when the steps are captured as CUDA graphs
    [gradient_support()]               under torchrun, before the gradients are averaged

and at the loop's cadences `progress`, `evaluate` / `eval_line`, `state_dict` (the
checkpoint), at an upsample step `upsample`, at the end `summary`, `write_files` and
`write_pictures`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

if TYPE_CHECKING:
    from .config import Config


class Experiment:
    """What one experiment adds to the loop skeleton: its batch, loss, evaluation, files.

    A subclass's `__init__(config, device, gen, resolution, world)` reads its inputs,
    builds `model` (at `resolution` when resuming, else the config's) and `optimizer`,
    and sets the attributes declared here.
    """

    label: str  # progress-bar prefix, e.g. "torus", "nerf native"
    unit: str  # what the batch counts ("points", "rays"): metrics key `<unit>_per_second`
    eval_name: str  # what evaluate() measures on, for the log line
    train_metric: str  # metrics key of the batch value's mean ("train_mse", "train_loss")
    config: Config
    gen: torch.Generator  # the batches' random numbers (a captured step registers it)
    model: nn.Module  # has .resolution and state_dict(); saved in the checkpoint
    optimizer: torch.optim.Optimizer  # Adam-like; its param_groups are what a step updates
    #: Steps captured as CUDA graphs (`train.step_graph.use_graphs`). True requires a
    #: `loss` that never synchronises with the host and a capturable optimiser whose
    #: learning rates are device tensors (train/step_graph.py's docstring).
    graphed: bool = False

    # ---- required --------------------------------------------------------------------------

    def learning_rate(self, step: int) -> float:
        """The learning rate of `step`, reported in metrics.jsonl."""
        raise NotImplementedError

    def begin_step(self, step: int) -> None:
        """Before `step`: learning rates and any maintenance."""
        raise NotImplementedError

    def upsample(self, resolution: tuple[int, int, int]) -> None:
        """To the schedule's next resolution (`train.upsample_steps`)."""
        raise NotImplementedError

    def loss(self) -> tuple[Tensor, Tensor]:
        """(loss to minimise, batch value) of one step, both [] device tensors: draws the
        batch. The batch value (e.g. the MSE) is what the bar and metrics.jsonl show."""
        raise NotImplementedError

    def progress(self, value: float) -> dict[str, str]:
        """The progress bar's numbers for the batch value `value`."""
        raise NotImplementedError

    def evaluate(self, train_seconds: float) -> dict[str, Any]:
        """Quality now (mse, psnr, ...): one metrics.jsonl record's own keys."""
        raise NotImplementedError

    def eval_line(self, quality: dict[str, Any]) -> str:
        """`evaluate()`'s result as the log line's middle part."""
        raise NotImplementedError

    def summary(self, common: dict[str, Any]) -> dict[str, Any]:
        """summary.json's numbers, from the loop's `common` ones (steps, seconds, ...)."""
        raise NotImplementedError

    def write_pictures(self, out: Path, records: list[dict], summary: dict[str, Any]) -> None:
        """The run's pictures into `out` (with output.pictures)."""
        raise NotImplementedError

    # ---- optional, with their defaults -----------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The checkpoint's extra state besides model, optimiser and RNG. Default: none."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what `state_dict` returned. Default: nothing to restore."""

    def write_files(self, out: Path, summary: dict[str, Any]) -> None:
        """Results besides the pictures (sdf: mesh.ply), written before the final checkpoint
        and the summary. Default: none."""

    def fit_optimizer(self) -> None:
        """After a checkpoint's optimiser state is loaded: make the optimiser what this run's
        step mode needs (`graphed` or not), so either mode resumes any checkpoint. Default:
        nothing to change."""

    def graph_key(self) -> tuple | None:
        """For a captured step: what the graph depends on beyond the optimiser's tensors (a
        new value re-captures it), or None to run this step op by op (it synchronises).
        Default: () (nothing else; every step capturable)."""
        return ()

    def replayed(self) -> None:
        """After a graph replay: the host bookkeeping the skipped Python would have done.
        Default: none."""

    def gradient_support(self) -> dict[Tensor, Tensor] | None:
        """Under torchrun: for some parameters, the rows their gradient can be non-zero in
        (only those are averaged between the ranks); None averages every gradient whole.
        Default: None."""
        return None

    def loss_terms(self) -> dict[str, Tensor]:
        """The last `loss()`'s terms by name ([] device tensors, fixed names), so that a
        run whose loss goes non-finite can name the term (train/divergence.py). Default:
        none known."""
        return {}

    def tensorboard_images(self) -> dict[str, Tensor]:
        """Images of the last evaluation, name -> [H, W, 3] in [0, 1], written with each
        metrics record under output.tensorboard (train/tensorboard.py). Default: none."""
        return {}
