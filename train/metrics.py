"""Quality and speed numbers, and the metrics.jsonl log."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any


def psnr(mse: float, value_range: float) -> float:
    """Peak signal-to-noise ratio in dB: `10 * log10(range^2 / mse)`.

    `value_range` is max - min of the target over the held-out points (a fixed
    number per experiment, also used for the training-batch PSNR). Infinite for a
    perfect fit.
    """
    if mse <= 0:
        return math.inf
    return 10.0 * math.log10(value_range**2 / mse)


class MetricsLog:
    """Appends one JSON object per line to `path` (flushed at every write)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def truncate_after(self, step: int) -> None:
        """Drop lines logged after `step` (a resumed run redoes those steps)."""
        if not self.path.exists():
            return
        keep = [
            line
            for line in self.path.read_text().splitlines()
            if line.strip() and json.loads(line)["step"] <= step
        ]
        self.path.write_text("".join(line + "\n" for line in keep))

    def reset(self) -> None:
        self.path.write_text("")

    def write(self, record: dict[str, Any]) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps(record) + "\n")

    def read(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]
