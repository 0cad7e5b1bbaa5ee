"""Stopping a run cleanly: SIGINT / SIGTERM, and checkpoints every few minutes.

A cluster scheduler or a preempted cloud machine sends SIGTERM, a user presses Ctrl-C
(SIGINT). While `train.loop.run` trains, `StopSignals` catches both: the handler only
sets a flag; the loop finishes the current step, writes the checkpoint and raises
`Interrupted`, which the command line prints as one line and turns into exit code
130 (SIGINT) or 143 (SIGTERM), as a shell reports a process killed by them. A second
signal exits at once (same codes, no checkpoint). `output.checkpoint_minutes` bounds
what anything else (SIGKILL, a power cut) can lose: `StopCheck` also asks for a
checkpoint once that much time has passed since the last one.

Under torchrun the ranks get their signals at slightly different times, and each
measures its own time, yet they must stop and checkpoint at the same step (the
checkpoint step runs collectives). So with more than one process they agree every
`AGREE_EVERY` steps (and at the last step): one all-reduce of two numbers on the CPU
(gloo), negligible next to ten steps; a single process checks every step, for free.
A signal therefore stops a torchrun job within AGREE_EVERY steps.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from types import FrameType, TracebackType

from .distributed import World

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
AGREE_EVERY = 10  # steps between the ranks' agreements under torchrun


class Interrupted(Exception):
    """The run stopped on a signal after `step` of `steps`, with a checkpoint there."""

    def __init__(self, signum: int, step: int, steps: int) -> None:
        self.signum, self.step, self.steps = signum, step, steps
        super().__init__(f"interrupted at step {step} of {steps}; continue with --resume")

    @property
    def exit_code(self) -> int:
        """128 + the signal number: 130 for SIGINT, 143 for SIGTERM."""
        return 128 + self.signum


class StopSignals:
    """SIGINT and SIGTERM handlers for the duration of a `with` block.

    The first signal sets `signum`; a second one exits the process at once with
    128 + its number. The previous handlers come back when the block ends (also on an
    error). Outside the main thread (where Python allows no handlers), for a signal the
    process was started with ignored (a background job's SIGINT, nohup) and for one whose
    handler was installed outside Python, nothing is installed.
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, object] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                previous = signal.getsignal(sig)
                # None: a handler installed outside Python, which could not be put back
                if previous is not signal.SIG_IGN and previous is not None:
                    self._previous[sig] = previous
                    signal.signal(sig, self._handle)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)  # type: ignore[arg-type]
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is None:
            self.signum = signum  # the loop stops after this step
            return
        name = signal.Signals(signum).name
        os.write(2, f"grid-train: second {name}: quitting without a checkpoint\n".encode())
        os._exit(128 + signum)


class StopCheck:
    """After each step: stop now (a signal came), checkpoint now (`minutes` passed)?

    `poll` answers the same on every rank (see the module docstring); `saved` restarts
    the clock after any checkpoint.
    """

    def __init__(self, signals: StopSignals, minutes: float, world: World) -> None:
        self.signals, self.seconds, self.world = signals, minutes * 60.0, world
        self.last = time.perf_counter()
        self.signum = 0  # the agreed signal, once poll says stop

    def saved(self) -> None:
        self.last = time.perf_counter()

    def poll(self, step: int, end: int) -> tuple[bool, bool]:
        """(stop, checkpoint due) after `step` (the loop ends at `end`)."""
        if self.world.size > 1 and step % AGREE_EVERY and step != end:
            return False, False
        signum = self.signals.signum or 0
        due = bool(self.seconds) and time.perf_counter() - self.last >= self.seconds
        if self.world.size > 1:
            signum, due = self.world.max_([signum, int(due)])
            due = bool(due)
        self.signum = signum
        return signum != 0, due
