"""A trained (or training) radiance field seen from any camera: `grid-train view` and
`grid-train render`.

`render_camera` is the one render of a camera: the rays of `train.nerf.data.blender.camera_rays`
(a pinhole with square pixels, principal point at the centre) through the model's own
`train.nerf.model.image.render_image` (the fused ray marcher and compositor of the library where the
run's renderer is fused). The viewer renders the same rays band by band (so that it can stop
when the camera moves) and `grid-train render` frame by frame: their pictures are the
offline render's.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ..camera_path import fov_from_focal, up_axis
from .data.blender import Views, camera_rays
from .export import load_model
from .model.image import render_image
from .model.voxel_nerf import VoxelNeRF

#: The share of the time a training run's viewer renders its new checkpoints for a still
#: camera (`ProgressiveRenderer.share`): `--view` costs training at most about this much.
TRAINING_SHARE = 0.05
#: Rays per band of a viewer frame: a band is the unit the viewer can stop after.
BAND_RAYS = 1 << 15


@dataclass
class Home:
    """The run's own cameras, to start from: c2w [V, 4, 4] float64 (OpenGL axes), the
    first one's vertical fov in degrees and image size, and the world's up [3] (unit)."""

    c2w: Tensor
    fov: float
    width: int
    height: int
    up: Tensor


def camera_views(c2w: Tensor, fov: float, width: int, height: int) -> Views:
    """One camera (c2w [4, 4], vertical fov in degrees) as `Views` for `camera_rays`."""
    focal = 0.5 * height / math.tan(math.radians(fov) / 2)
    return Views(
        images=torch.zeros(1, 1, 1, 3),
        c2w=c2w.float()[None],
        focal=focal,
        height=height,
        width=width,
        names=["camera"],
    )


def rays(
    c2w: Tensor, fov: float, width: int, height: int, device: torch.device
) -> tuple[Tensor, Tensor]:
    """c2w: [4, 4] OpenGL camera-to-world, fov: vertical, degrees -> (origins, unit
    directions), [height, width, 3] float32 each on `device`."""
    return camera_rays(camera_views(c2w.to(device), fov, width, height), 0)


@torch.no_grad()
def render_camera(
    model: VoxelNeRF, background: Tensor, c2w: Tensor, fov: float, width: int, height: int
) -> Tensor:
    """The offline render of one camera: rgb [height, width, 3] in [0, 1] on the model's
    device (c2w: [4, 4] OpenGL camera-to-world; fov: vertical, degrees)."""
    origins, directions = rays(c2w, fov, width, height, background.device)
    rgb, _, _ = render_image(model, origins, directions, background)
    return rgb.clamp(0, 1)


@torch.no_grad()
def render_bands(
    model: VoxelNeRF,
    background: Tensor,
    c2w: Tensor,
    fov: float,
    width: int,
    height: int,
    cancelled: Callable[[], bool] = lambda: False,
) -> Tensor | None:
    """`render_camera` band by band of rows (`BAND_RAYS` rays each), asking `cancelled()`
    between bands: None when it said yes, else rgb [height, width, 3] in [0, 1]."""
    origins, directions = rays(c2w, fov, width, height, background.device)
    rows = max(1, BAND_RAYS // width)
    bands = []
    for top in range(0, height, rows):
        if cancelled():
            return None
        band = slice(top, top + rows)
        rgb, _, _ = render_image(model, origins[band], directions[band], background)
        bands.append(rgb)
    return torch.cat(bands).clamp(0, 1)


def to_bytes(rgb: Tensor) -> np.ndarray:
    """rgb [H, W, 3] in [0, 1] -> [H, W, 3] uint8 on the CPU, rounded (as turntable.gif)."""
    return (rgb.clamp(0, 1) * 255 + 0.5).byte().cpu().numpy()


def load(out: Path, config: Any, checkpoint: dict[str, Any], device: torch.device):
    """(model in eval mode on `device`, background [3] on `device`) of a nerf run."""
    model = load_model(config, checkpoint, out, device)
    background = torch.tensor(config.data.background, dtype=torch.float32, device=device)
    return model, background


def home(config: Any) -> Home:
    """The run's test cameras (`data.path`, as the run read them), or, when that scene is
    not there, one camera looking at the centre of `grid.bounds` from outside it, z up."""
    from .data.blender import DatasetError
    from .data.ngp import load_views

    d = config.data
    try:
        views = load_views(
            Path(d.path).expanduser(),
            "test",
            downscale=d.downscale,
            background=tuple(d.background),
            holdout_every=d.holdout_every,
            limit=d.test_views or None,
        )
    except (DatasetError, OSError, ValueError):
        return _default_home(config.grid.bounds)
    c2w = torch.as_tensor(views.c2w).double()
    height, width = views.height, views.width
    if views.sizes is not None:
        height, width = (int(v) for v in views.sizes[0])
    focal = views.focal if views.intrinsics is None else float(views.intrinsics[0, 1])
    axis, sign = up_axis(c2w)
    up = torch.zeros(3, dtype=torch.float64)
    up[axis] = sign
    return Home(c2w, fov_from_focal(focal, height), width, height, up)


def _default_home(bounds: list[list[float]]) -> Home:
    lo, hi = torch.tensor(bounds, dtype=torch.float64)
    centre, radius = (lo + hi) / 2, float((hi - lo).norm()) / 2
    position = centre + torch.tensor([1.0, -1.0, 0.6], dtype=torch.float64) * radius * 1.6
    up = torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64)
    return Home(look_at(position, centre, up)[None], 50.0, 256, 256, up)


def look_at(position: Tensor, target: Tensor, up: Tensor) -> Tensor:
    """[4, 4] float64 OpenGL camera-to-world at `position` looking at `target`, its y axis
    towards `up` (each [3])."""
    back = position - target
    back = back / back.norm()
    right = torch.linalg.cross(up.double(), back)
    right = right / right.norm()
    c2w = torch.eye(4, dtype=torch.float64)
    c2w[:3, 0], c2w[:3, 1], c2w[:3, 2] = right, torch.linalg.cross(back, right), back
    c2w[:3, 3] = position
    return c2w


# ---- the viewer ---------------------------------------------------------------------------


class NerfView:
    """The radiance field in `grid-train view`: each browser gets its own progressive
    renderer (`train.viewer.progressive`) of the model; `update` swaps in newer weights
    and has every browser's view rendered again. The browsers start at the run's first
    test camera, orbiting about the world's up axis."""

    def __init__(self, server, out: Path, config: Any, checkpoint: dict[str, Any], options):
        self.server, self.out, self.options = server, out, options
        self.lock = threading.Lock()
        self.model, self.background = load(out, config, checkpoint, options.device)
        self.renderers: dict[int, Any] = {}
        start = home(config)
        c2w = start.c2w[0]
        position = c2w[:3, 3]
        forward = -c2w[:3, 2]
        # look at the point of the optical axis closest to the origin (the scene's centre)
        target = position + forward * max(float(-(position @ forward)), 1e-3)
        server.scene.set_up_direction(tuple(start.up.tolist()))
        camera = server.initial_camera
        camera.position = tuple(position.tolist())
        camera.look_at = tuple(target.tolist())
        camera.up = tuple(start.up.tolist())
        camera.fov = math.radians(start.fov)
        server.on_client_connect(self._connect)
        server.on_client_disconnect(self._disconnect)
        for client in server.get_clients().values():  # browsers that waited for a checkpoint
            self._connect(client)

    def render(
        self, c2w: Tensor, fov: float, width: int, height: int, cancelled
    ) -> np.ndarray | None:
        """The progressive renderer's `RenderFn`: [height, width, 3] uint8, or None."""
        with self.lock:
            model, background = self.model, self.background
        rgb = render_bands(model, background, c2w, fov, width, height, cancelled)
        return None if rgb is None else to_bytes(rgb)

    def update(self, config: Any, checkpoint: dict[str, Any]) -> None:
        model, background = load(self.out, config, checkpoint, self.options.device)
        with self.lock:
            self.model, self.background = model, background
        for renderer in list(self.renderers.values()):
            renderer.refresh()

    def close(self) -> None:
        for renderer in list(self.renderers.values()):
            renderer.stop()
        self.renderers.clear()

    def _connect(self, client) -> None:
        from ..viewer.progressive import ProgressiveRenderer, camera_of

        if client.client_id in self.renderers:
            return
        renderer = ProgressiveRenderer(
            client,
            self.render,
            max_size=self.options.max_size,
            fps=self.options.fps,
            share=TRAINING_SHARE if self.options.training else 1.0,
        )
        self.renderers[client.client_id] = renderer
        client.camera.on_update(lambda _: renderer.moved())
        renderer.start()
        try:  # the browser's first camera can come before on_update was registered
            camera_of(client.camera)
        except AssertionError:
            return
        renderer.moved()

    def _disconnect(self, client) -> None:
        renderer = self.renderers.pop(client.client_id, None)
        if renderer is not None:
            renderer.stop()


def open_view(server, out: Path, config: Any, checkpoint: dict[str, Any], options) -> NerfView:
    """`ExperimentSpec.view`'s entry point (see `train.viewer.server`)."""
    return NerfView(server, out, config, checkpoint, options)
