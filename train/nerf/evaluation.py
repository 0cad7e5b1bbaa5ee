"""What the nerf experiment's evaluation reports beside PSNR and SSIM: floaters on the test
views' background and the training time to a PSNR."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor


def seconds_to(records: list[dict], level: float) -> float | None:
    """Training seconds at the first evaluation whose test PSNR reached `level` (None: never)."""
    for record in records:
        if record["psnr"] >= level:
            return record["train_seconds"]
    return None


def background_errors(error: Tensor, acc: Tensor, background: Tensor) -> Tensor:
    """Over one view's background pixels: (sum of squared colour error, sum of opacity,
    pixel count), [3] float64 (error [H, W, 3], acc and background [H, W])."""
    mask = background.to(error.dtype)
    return torch.stack([(error.sum(-1) * mask).sum() / 3, (acc.double() * mask).sum(), mask.sum()])


def background_metrics(squared: float, opacity: float, pixels: float) -> dict[str, Any]:
    """Floaters: the test views' background pixels' colour MSE and mean rendered opacity
    (None without alpha in the test images)."""
    if pixels == 0:
        return {"background_mse": None, "background_opacity": None}
    return {"background_mse": squared / pixels, "background_opacity": opacity / pixels}
