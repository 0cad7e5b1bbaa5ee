"""A diverging run stops: the first non-finite loss or gradient ends it with one line.

Every training step (eager or captured as a CUDA graph, train/step_graph.py) calls
`DivergenceWatch.observe` after its backward: a few scalar ops on the device that count the
step and, at the first step whose loss or gradient is not finite, keep which it was (the
loss, one of the experiment's named terms, a gradient). Nothing is read back there: the
loop reads `first` where it looks at the device anyway (the progress bar's lagged values,
the evaluations and checkpoints, the end) and raises `Diverged` before it evaluates or
writes anything, so the checkpoint on disk is the last finite one and `--resume` continues
from it (with a lower learning rate, say).

`Diverged` is a ConfigError: `python -m train` prints `grid-train: diverged: <message>`
and exits with code 2. `GrowthWarning` watches the batch values the loop reads anyway
and warns once when one grows by orders of magnitude over the best so far.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from .errors import ConfigError

if TYPE_CHECKING:
    from .distributed import World

GROWTH = 1e3  # a batch value this many times its best so far gets a warning


class Diverged(ConfigError):
    """The loss or a gradient went non-finite at `step`; the message says what and what to try."""

    label = "diverged"

    def __init__(self, step: int, what: str, learning_rate: float) -> None:
        self.step, self.what = step, what
        super().__init__(
            f"step {step}: {what} is not finite; try a lower learning rate (it was "
            f"{learning_rate:.3g} at that step)"
        )

    def add_hint(self, hint: str) -> None:
        """Append what is left of the run and how to go on, after "; "."""
        self.args = (f"{self.args[0]}; {hint}",)


class DivergenceWatch:
    """Device flags of the first step with a non-finite loss or gradient, and the best batch
    value so far (for `GrowthWarning`).

    names: the experiment's loss terms (`Experiment.loss_terms`), in a fixed order.
    """

    def __init__(self, device: torch.device, names: list[str]) -> None:
        self.names = names
        self.steps = torch.zeros((), dtype=torch.int64, device=device)  # steps observed
        self.first = torch.zeros((), dtype=torch.int64, device=device)  # 0: none yet
        # at that step: [loss, gradient, *terms] not finite
        self.found = torch.zeros(2 + len(names), dtype=torch.bool, device=device)
        self.best = torch.full((), math.inf, dtype=torch.float64, device=device)
        self.best_at = torch.zeros((), dtype=torch.int64, device=device)

    def observe(
        self, loss: Tensor, value: Tensor, grads: list[Tensor | None], terms: list[Tensor]
    ) -> None:
        """After a step's backward (capturable: in-place device ops, no read-back).
        loss, value: the step's loss and batch value, []; terms: `names`' values, []."""
        self.steps.add_(1)
        grad = largest_magnitude([g for g in grads if g is not None], loss.device)
        values = torch.stack([loss.detach().float(), grad.float(), *(t.float() for t in terms)])
        bad = ~torch.isfinite(values)
        new = bad.any() & (self.first == 0)
        self.found.copy_(torch.where(new, bad, self.found))
        self.first.copy_(torch.where(new, self.steps, self.first))
        value = value.detach().double()
        self.best_at.copy_(torch.where(value < self.best, self.steps, self.best_at))
        self.best.copy_(torch.fmin(self.best, value))

    def numbers(self) -> Tensor:
        """[4] float64 on the device: the first non-finite step (0: none), the best batch
        value, its step, and the steps observed; for one (lagged) read with the bar's."""
        counts = torch.stack([self.first, self.best_at, self.steps]).double()
        return torch.stack([counts[0], self.best, counts[1], counts[2]])

    def stop(self, first: int, first_step: int, learning_rate: Callable[[int], float]) -> None:
        """Raise Diverged: the `first`-th step watched (after `first_step`) went non-finite."""
        step = first_step + first
        raise Diverged(step, self.what(), learning_rate(step - 1))

    def check(
        self,
        world: World,
        parameters: list[Tensor],
        first_step: int,
        step: int,
        learning_rate: Callable[[int], float],
    ) -> None:
        """At a synchronised `step` (every rank): raise Diverged if any rank's flags are set,
        or a parameter is not finite after the last optimiser step (a finite gradient's
        update can overflow it). Every rank raises the same error here: it is agreed (rank
        0 alone prints it)."""
        finite = parameters_finite(parameters)
        first, broken = world.max_([int(self.first), int(not finite)])
        try:
            if first:
                self.stop(first, first_step, learning_rate)
            if broken:
                what = "a parameter after the optimiser's step"
                raise Diverged(step, what, learning_rate(step - 1))
        except Diverged as error:
            error.agreed = True  # type: ignore[attr-defined]  (train.distributed.is_agreed)
            raise

    def what(self) -> str:
        """What went non-finite at the first such step (reads the flags back)."""
        loss, grad, *terms = self.found.tolist()
        named = [name for name, bad in zip(self.names, terms, strict=True) if bad]
        if loss and named:
            listed = named[0] if len(named) == 1 else f"{', '.join(named[:-1])} and {named[-1]}"
            return f"the loss (its {listed} term{'s' if len(named) > 1 else ''})"
        if loss:
            return "the loss"
        return "a gradient (the loss was finite)" if grad else "the loss"


def largest_magnitude(tensors: list[Tensor], device: torch.device) -> Tensor:
    """max |value| over `tensors`, []: NaN or infinite iff a value is (no overflow). On CUDA
    one fused kernel (`_foreach_norm`, inf-norm); on the CPU each tensor's amax and amin,
    which are 50x faster there than the fused norm (0.05 against 1.2 ms a 96^3 gradient)."""
    if not tensors:
        return torch.zeros((), device=device)
    if device.type == "cuda":
        return torch.stack(torch._foreach_norm(tensors, math.inf)).amax()
    return torch.stack([t for g in tensors for t in (g.amax(), g.amin())]).abs().amax()


def parameters_finite(parameters: list[Tensor]) -> bool:
    """Whether every parameter is finite (one pass over them; reads one flag back)."""
    flags = [torch.isfinite(p.detach()).all() for p in parameters]
    return bool(torch.stack(flags).all()) if flags else True


class GrowthWarning:
    """Warns once when the batch value grows to GROWTH times its best so far (host numbers
    the loop reads anyway: `DivergenceWatch.numbers`)."""

    def __init__(self, key: str, enabled: bool) -> None:
        self.key, self.enabled, self.warned = key, enabled, False

    def check(self, value: float, step: int, best: float, best_at: int) -> None:
        """value: the batch value after `step`; best: the least so far, at step `best_at`."""
        if not self.enabled or self.warned or not math.isfinite(value) or not best > 0:
            return
        if value >= GROWTH * best:
            self.warned = True
            print(
                f"warning: {self.key} {value:.3g} at step {step} is {value / best:.2g} times its "
                f"best ({best:.3g} at step {best_at}): the run may be diverging; a lower "
                "learning rate may help",
                file=sys.stderr,
            )
