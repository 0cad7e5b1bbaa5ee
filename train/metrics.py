"""Quality and speed numbers, and the metrics.jsonl log."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from .errors import InputFileError, read_input, writing


def psnr(mse: float, value_range: float) -> float:
    """Peak signal-to-noise ratio in dB: `10 * log10(range^2 / mse)`.

    `value_range` is max - min of the target over the held-out points (a fixed
    number per experiment, also used for the training-batch PSNR). Infinite for a
    perfect fit.
    """
    if mse <= 0:
        return math.inf
    return 10.0 * math.log10(value_range**2 / mse)


class LaggedValues:
    """Device values for the progress bar, read without waiting for the device.

    On CUDA, `read(values)` starts a copy of `values` into pinned host memory and returns
    what the last finished copy held (numbers a few steps old), so the bar costs the loop
    no synchronisation; the very first read waits for its copy. On the CPU it returns the
    values themselves.
    """

    def __init__(self) -> None:
        self.host: Tensor | None = None
        self.event: torch.cuda.Event | None = None
        self.last: list[float] | None = None

    def read(self, values: Tensor) -> list[float]:
        """values: [] or [K] -> K floats."""
        values = values.detach().reshape(-1)
        if not values.is_cuda:
            return values.tolist()
        if self.event is not None and (self.last is None or self.event.query()):
            self.event.synchronize()  # done already, except for the very first read
            self.last, self.event = self.host.tolist(), None
        if self.event is None:
            if self.host is None or self.host.shape != values.shape:
                self.host = torch.empty(values.shape, dtype=values.dtype, pin_memory=True)
            self.host.copy_(values, non_blocking=True)
            self.event = torch.cuda.Event()
            self.event.record()
        if self.last is None:
            return self.read(values)
        return self.last


class MetricsLog:
    """Appends one JSON object per line to `path` (flushed at every write).

    A write that fails (a full disk) raises OutputFileError naming the file; a line cut
    short by it is removed again where the disk allows.
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    def truncate_after(self, step: int) -> None:
        """Drop lines logged after `step` (a resumed run redoes those steps).

        A last line cut short by a crash (no newline at its end, not JSON) is dropped
        too; any other line that is not a JSON record raises InputFileError.
        """
        if not self.path.exists():
            return
        text = read_input(self.path, Path.read_text, "metrics log")
        lines = text.splitlines()
        if lines and not text.endswith("\n"):
            try:
                json.loads(lines[-1])
            except ValueError:
                lines.pop()  # torn by a crash while it was written
        keep = [
            line for n, line in enumerate(lines, 1) if line.strip() and self._step(line, n) <= step
        ]
        kept = "".join(line + "\n" for line in keep)
        if kept == text:
            return
        with writing(self.path):
            if text.startswith(kept):  # the usual case: cut the end, writing nothing new
                os.truncate(self.path, len(kept.encode()))
            else:
                self.path.write_text(kept)

    def _step(self, line: str, number: int) -> int:
        """The `step` of line `number`; InputFileError if it is not a metrics record."""
        try:
            step = json.loads(line)["step"]
        except (ValueError, TypeError, KeyError):
            step = None
        if not isinstance(step, int):
            raise InputFileError(self.path, f"line {number} is not a metrics record: {line[:80]!r}")
        return step

    def reset(self) -> None:
        with writing(self.path):
            self.path.write_text("")

    def write(self, record: dict[str, Any]) -> None:
        with writing(self.path):
            size = self.path.stat().st_size if self.path.exists() else 0
            try:
                with self.path.open("a") as f:
                    f.write(json.dumps(record) + "\n")
            except OSError:
                try:  # drop the part of the line that made it
                    os.truncate(self.path, size)
                except OSError:
                    pass
                raise

    def read(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]
