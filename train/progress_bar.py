"""Progress displays: the loop's (tqdm's bar on a terminal, plain lines in a log) and a
time-based one for work with no bar of its own (`progress_lines`: a scene's rendering).

tqdm redraws its bar with carriage returns, which a file that is not a terminal (a job's
log, `| tee`) keeps as one endless line. There `PlainProgress` prints a line every
`PLAIN_EVERY` percent instead, with the same numbers as the bar (description, steps,
postfix), through the same methods the loop calls on the bar.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from tqdm import tqdm

PLAIN_EVERY = 5  # percent of the run between two lines in a log


class PlainProgress:
    """tqdm's interface as the loop uses it (`set_description`, `set_postfix`, `update`,
    `write`, `close`, `n`, `disable`), printing a line every PLAIN_EVERY percent."""

    def __init__(
        self, total: int, initial: int, desc: str, disable: bool, unit: str = "step"
    ) -> None:
        self.total, self.n, self.desc, self.disable = total, initial, desc, disable
        self.unit = unit
        self.postfix: dict[str, Any] = {}
        self.next_percent = (100 * initial // max(total, 1)) // PLAIN_EVERY * PLAIN_EVERY
        self.next_percent += PLAIN_EVERY

    def set_description(self, desc: str) -> None:
        self.desc = desc

    def set_postfix(self, refresh: bool = True, **values: Any) -> None:
        self.postfix = values

    def update(self, n: int) -> None:
        self.n += n
        percent = 100 * self.n // max(self.total, 1)
        if self.disable or (percent < self.next_percent and self.n < self.total):
            return
        self.next_percent = (percent // PLAIN_EVERY + 1) * PLAIN_EVERY
        numbers = "  ".join(f"{k} {v}" for k, v in self.postfix.items())
        print(
            f"{self.desc}: {self.unit} {self.n}/{self.total} ({percent}%)  {numbers}".rstrip(),
            file=sys.stderr,
            flush=True,
        )

    def write(self, line: str) -> None:
        print(line, flush=True)

    def close(self) -> None:
        pass


def progress_bar(
    total: int, initial: int, desc: str, show: bool, unit: str = "step"
) -> tqdm | PlainProgress:
    """tqdm's bar on stderr when it is a terminal, else plain lines (`show`: at all);
    `unit`: what is counted (the loop's steps, a video's frames)."""
    if not sys.stderr.isatty():
        return PlainProgress(total, initial, desc, disable=not show, unit=unit)
    return tqdm(
        total=total,
        initial=initial,
        unit=unit,
        desc=desc,
        disable=not show,
        dynamic_ncols=True,
        file=sys.stderr,
    )


def progress_lines(
    verb: str,
    unit: str,
    stream: TextIO | None = None,
    every: float = 10.0,
    clock: Callable[[], float] = time.monotonic,
) -> Callable[[int, int], None]:
    """A progress callback `(done, total)` that writes "  VERB done of total UNIT in N s,
    about M s left" to `stream` (default stderr) at most every `every` seconds, and the last
    line if it wrote any: quick work says nothing, and a large scene rendered on the CPU
    (minutes to an hour) says how far it is."""
    start = last = clock()
    wrote = False

    def report(done: int, total: int) -> None:
        nonlocal last, wrote
        now = clock()
        if now - last < every and not (wrote and done == total):
            return
        last, wrote = now, True
        spent = now - start
        left = spent / max(done, 1) * (total - done)
        print(
            f"  {verb} {done} of {total} {unit} in {spent:.0f} s"
            + (f", about {left:.0f} s left" if done < total else ""),
            file=stream or sys.stderr,
            flush=True,
        )

    return report
