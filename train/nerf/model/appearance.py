"""Per-image appearance (`nerf.appearance = "affine"`): real captures change exposure and white
balance from image to image (auto-exposure), which one radiance field cannot explain; each
training image gets its own colour transform of the rendered colour instead.

    rgb_image = rgb + rgb @ M_i + b_i      (M_i [3, 3], b_i [3]: zero at the start)

A small penalty on the codes (`nerf.appearance_weight`) settles what the per-image transforms
alone cannot: the field's colours and every transform can shift together without changing the
loss, and the penalty picks the field that needs the least correction on average, i.e. the
images' mean appearance. Test views have no code of their own: they render with the field's
colours and are scored after `color_correct`, the per-image least-squares affine map of the
render onto the test image (what evaluations of in-the-wild NeRFs do, so that a test image's
own exposure, which no model can know, does not count as error).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

if TYPE_CHECKING:
    from ..config import NerfConfig

CODE_SIZE = 12  # M (9, row-major) then b (3)


class Appearance(nn.Module):
    """One affine colour transform per training image: `codes` [V, 12], zero = identity."""

    def __init__(self, views: int, device: torch.device | str | None = None) -> None:
        super().__init__()
        self.codes = nn.Parameter(torch.zeros(views, CODE_SIZE, device=device))

    def forward(self, rgb: Tensor, view: Tensor) -> Tensor:
        """rgb [R, 3] rendered for rays of the training images `view` [R] (int) -> [R, 3]."""
        code = self.codes[view]  # [R, 12]
        matrix = code[:, :9].reshape(-1, 3, 3)
        return rgb + torch.bmm(rgb.unsqueeze(1), matrix).squeeze(1) + code[:, 9:]

    def fit(self, rgb: Tensor, view: Tensor, weight: float) -> tuple[Tensor, Tensor]:
        """(`forward(rgb, view)`, weight x the mean square of the codes): the training loss's
        terms."""
        return self(rgb, view), weight * self.codes.square().mean()

    def group(self, lr: float) -> dict:
        """The codes' parameter group for the experiment's optimiser (no decay of its own)."""
        return {"params": [self.codes], "lr": lr, "base_lr": lr}


def make_appearance(n: NerfConfig, images: int, device: torch.device) -> Appearance | None:
    """The codes of `images` training images for `nerf.appearance` (n); None when it is off.
    A ray's image is `TrainingRays.view_of` (train.nerf.data.rays)."""
    if n.appearance == "off":
        return None
    return Appearance(images, device)


def color_correct(render: Tensor, truth: Tensor, mask: Tensor | None = None) -> Tensor:
    """The affine colour map (3x3 matrix and offset) that brings `render` [..., 3] closest to
    `truth` [..., 3] in least squares (over the pixels `mask` [...] selects, default all),
    applied to `render`; solved in float64, returned in render's dtype, not clamped."""
    x = render.reshape(-1, 3).double()
    y = truth.reshape(-1, 3).double()
    fit_x, fit_y = (x, y) if mask is None else (x[mask.reshape(-1)], y[mask.reshape(-1)])
    design = torch.cat([fit_x, torch.ones_like(fit_x[:, :1])], dim=1)  # [P, 4]
    # normal equations with a tiny ridge: a flat render (one colour) stays solvable
    gram = design.T @ design + 1e-9 * torch.eye(4, dtype=design.dtype, device=design.device)
    weights = torch.linalg.solve(gram, design.T @ fit_y)  # [4, 3]
    corrected = torch.cat([x, torch.ones_like(x[:, :1])], dim=1) @ weights
    return corrected.reshape(render.shape).to(render.dtype)
