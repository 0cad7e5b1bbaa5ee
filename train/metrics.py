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


def finite(value: Any) -> Any:
    """`value` (numbers, lists, dicts) with every NaN or infinity replaced by None: JSON
    has no such numbers (json.dumps would write NaN and Infinity, which JSON readers
    reject)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def json_text(value: Any, indent: int | None = None) -> str:
    """`value` as strict JSON: NaN and infinities written as null (`finite`)."""
    return json.dumps(finite(value), indent=indent, allow_nan=False)


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


def gaussian_window(size: int = 11, sigma: float = 1.5) -> Tensor:
    """The normalised 1-D Gaussian [size] of `ssim`, float64: tap k weighs
    `exp(-(k - size // 2)^2 / (2 sigma^2))`."""
    x = torch.arange(size, dtype=torch.float64) - size // 2
    g = torch.exp(-0.5 * (x / sigma) ** 2)
    return g / g.sum()


def ssim(
    a: Tensor,
    b: Tensor,
    *,
    max_val: float = 1.0,
    size: int = 11,
    sigma: float = 1.5,
    k1: float = 0.01,
    k2: float = 0.03,
) -> Tensor:
    """Structural similarity of images a, b [..., H, W, C] -> [...], computed in float64.

    The NeRF literature's SSIM (mip-NeRF's `compute_ssim`, which DirectVoxGO's
    `rgb_ssim` copies; scikit-image's `structural_similarity` with `gaussian_weights=True`
    agrees): local means, variances and covariance under a separable `size` x `size`
    Gaussian window of std `sigma`, over the "valid" positions only (no padding: the map
    is (H - size + 1) x (W - size + 1)), per channel;
    `map = (2 mu_a mu_b + C1)(2 cov + C2) / ((mu_a^2 + mu_b^2 + C1)(var_a + var_b + C2))`
    with `C1 = (k1 max_val)^2`, `C2 = (k2 max_val)^2`, variances clipped at 0 and the
    covariance's magnitude at `sqrt(var_a var_b)` (rounding can break both); the result is
    the mean of the map over positions and channels.
    """
    if a.shape != b.shape or a.dim() < 3:
        raise ValueError(
            f"ssim: a and b must be images of one shape [..., H, W, C]; got {tuple(a.shape)} "
            f"and {tuple(b.shape)}"
        )
    *batch, height, width, channels = a.shape
    if height < size or width < size:
        raise ValueError(f"ssim: images must be at least {size}x{size}; got {height}x{width}")
    taps = gaussian_window(size, sigma).tolist()

    def blur(x: Tensor) -> Tensor:  # [N, H, W] -> [N, H - size + 1, W - size + 1]
        # the window's shifted slices summed, rows then columns: conv2d has no fast float64
        # kernel (on an H200 it was 42% of an 800x800 evaluation's device time; on 2 CPU
        # cores 5x slower than this), and the sum is the same arithmetic
        rows, cols = x.shape[-2] - size + 1, x.shape[-1] - size + 1
        vertical = x[:, :rows] * taps[0]
        for k in range(1, size):
            vertical.add_(x[:, k : k + rows], alpha=taps[k])
        out = vertical[..., :cols] * taps[0]
        for k in range(1, size):
            out.add_(vertical[..., k : k + cols], alpha=taps[k])
        return out

    def planes(x: Tensor) -> Tensor:  # [..., H, W, C] -> [N * C, H, W] float64
        return x.double().movedim(-1, -3).reshape(-1, height, width)

    x, y = planes(a), planes(b)
    mu_x, mu_y = blur(x), blur(y)
    var_x = (blur(x * x) - mu_x * mu_x).clamp_min(0.0)
    var_y = (blur(y * y) - mu_y * mu_y).clamp_min(0.0)
    cov = blur(x * y) - mu_x * mu_y
    bound = (var_x * var_y).sqrt()
    cov = torch.sign(cov) * torch.minimum(bound, cov.abs())
    c1, c2 = (k1 * max_val) ** 2, (k2 * max_val) ** 2
    numerator = (2 * mu_x * mu_y + c1) * (2 * cov + c2)
    denominator = (mu_x * mu_x + mu_y * mu_y + c1) * (var_x + var_y + c2)
    return (numerator / denominator).reshape(*batch, -1).mean(-1)


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
                    f.write(json_text(record) + "\n")
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
