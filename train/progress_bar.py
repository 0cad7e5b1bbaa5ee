"""The loop's progress display: tqdm's bar on a terminal, plain lines in a log.

tqdm redraws its bar with carriage returns, which a file that is not a terminal (a job's
log, `| tee`) keeps as one endless line. There `PlainProgress` prints a line every
`PLAIN_EVERY` percent instead, with the same numbers as the bar (description, steps,
postfix), through the same methods the loop calls on the bar.
"""

from __future__ import annotations

import sys
from typing import Any

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
