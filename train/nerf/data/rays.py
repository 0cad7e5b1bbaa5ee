"""The training pixels' rays and colours on the training device, in few bytes a ray.

Every ray of a view starts at its camera, so a ray keeps its direction (float32) and its
view's number, not its origin; the colour is kept in float16 (rounded by at most 2^-12 on
[0.5, 1]: a sixteenth of an 8-bit level). 18 bytes a ray (22 with views of different sizes,
whose view numbers are stored) instead of 36 for three float32 [N, 3] tensors: 100 views of
800x800 are 64M rays, 1.07 GiB less than before on the GPU, beside grids of ~1 GiB.
"""

from __future__ import annotations

import torch
from torch import Tensor

from grid import ray_aabb

from .blender import Views, camera_rays


def pixel_views(shape: tuple[int, int, int], mask: Tensor | None = None) -> Tensor:
    """[N] int32: the image of each training pixel, for images `shape` (V, H, W) flattened in
    order, of the pixels `mask` [V, H, W] keeps (default all)."""
    views = torch.arange(shape[0], dtype=torch.int32).view(-1, 1, 1).expand(shape)
    return views.reshape(-1) if mask is None else views[mask]


class TrainingRays:
    """The rays and colours of every training pixel of `views` (flattened view by view, row
    by row; views of different sizes: their own pixels only), on `device`."""

    def __init__(self, views: Views, device: torch.device) -> None:
        origins, directions = camera_rays(views)  # [V, H, W, 3] each
        colors = torch.as_tensor(views.images)  # [V, H, W, 3]
        mask = views.mask()  # [V, H, W] or None
        self.pixels = views.height * views.width  # per view, when all views have all
        self.origins = origins[:, 0, 0].to(device)  # [V, 3]: the cameras
        self.view: Tensor | None = None  # [N] int32, stored only with a mask
        if mask is not None:
            directions, colors = directions[mask], colors[mask]
            self.view = pixel_views(tuple(mask.shape), mask).to(device)
        self.directions = directions.reshape(-1, 3).to(device)  # [N, 3] float32
        self.colors = colors.reshape(-1, 3).to(device, torch.float16)  # [N, 3]

    def __len__(self) -> int:
        return self.directions.shape[0]

    @property
    def dtype(self) -> torch.dtype:
        """The rays' floating dtype (what the renderer is given)."""
        return self.directions.dtype

    def view_of(self, index: Tensor) -> Tensor:
        """[K] the view of each ray in `index` [K]."""
        if self.view is not None:
            return self.view[index]
        return torch.div(index, self.pixels, rounding_mode="floor")

    def rays(self, index: Tensor) -> tuple[Tensor, Tensor]:
        """(origins, directions) [K, 3] float32 of the rays `index` [K]."""
        return self.origins[self.view_of(index)], self.directions[index]

    def take(self, index: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """(origins, directions, colours) [K, 3] float32 of the rays `index` [K]."""
        return *self.rays(index), self.colors[index].float()

    def crossing(self, box: list[list[float]], chunk: int = 1 << 20) -> Tensor:
        """The indices [K] int32 of the rays that cross `box` (lo, hi corners)."""
        lo, hi = box
        crossing = []
        for start in range(0, len(self), chunk):
            index = torch.arange(start, min(start + chunk, len(self)), device=self.colors.device)
            o, d = self.rays(index)
            t_near, t_far = ray_aabb(o, d, lo, hi)
            crossing.append(t_far > t_near)
        return torch.cat(crossing).nonzero()[:, 0].to(torch.int32)
