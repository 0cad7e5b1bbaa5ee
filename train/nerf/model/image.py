"""Whole images from a `VoxelNeRF`: its rays rendered in chunks sized by the samples a ray
(each chunk an exact render: op by op, its counts read back), so an image costs a few
renders rather than one per training batch's worth of rays."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .render import TooManySamples

#: A model's first chunk of rays: a training batch's worth.
FIRST_CHUNK = 1 << 13
#: The fewest and the most rays in one chunk of an image, whatever its samples.
MIN_CHUNK, MAX_CHUNK = 1 << 10, 1 << 17


@torch.no_grad()
def render_image(
    model: nn.Module,
    origins: Tensor,
    directions: Tensor,
    background: Tensor,
    samples: int = 1 << 21,
) -> tuple[Tensor, Tensor, Tensor]:
    """origins, directions: [H, W, 3] -> rgb [H, W, 3], depth [H, W], acc [H, W], rendered
    by `model.render` (a `VoxelNeRF`'s) in chunks of about `samples` samples each
    (`image_chunk`; the first sized as the model's last image's last, `model.image_rays`).

    A chunk whose rays march more than twice `samples` (rows of empty space, then the
    object) is not rendered but tried again with fewer rays, so no chunk's fields run on
    more than 2 * `samples` samples, however the samples a ray change along the image."""
    shape = origins.shape[:-1]
    o, d = origins.reshape(-1, 3), directions.reshape(-1, 3)
    rgbs, depths, accs = [], [], []
    start, chunk = 0, model.image_rays
    while start < o.shape[0]:
        rays = (o[start : start + chunk], d[start : start + chunk])
        # the smallest chunk renders whatever it marches: every retry takes fewer rays
        limit = 2 * samples if rays[0].shape[0] > MIN_CHUNK else None
        try:
            out = model.render(*rays, background, exact=True, max_samples=limit)
        except TooManySamples as error:  # at most `samples` at the rate it marched
            chunk = max(MIN_CHUNK, rays[0].shape[0] * samples // error.samples)
            continue
        rgbs.append(out["rgb"])
        depths.append(out["depth"])
        accs.append(out["acc"])
        start += rays[0].shape[0]
        chunk = image_chunk(rays[0].shape[0], int(out["samples"]), chunk, samples)
    model.image_rays = chunk
    rgb = torch.cat(rgbs).reshape(*shape, 3)
    return rgb, torch.cat(depths).reshape(shape), torch.cat(accs).reshape(shape)


def image_chunk(rays: int, marched: int, chunk: int, samples: int) -> int:
    """The rays of `render_image`'s next chunk after one of `rays` rays that marched
    `marched` samples (`chunk` rays asked): about `samples` samples at that rate, at most
    twice `chunk` (the next rows may hold more of the object: `render_image` retries a
    chunk that marches more than twice `samples`) and MAX_CHUNK, at least MIN_CHUNK.
    Chunks of at most 32768 rays (the cap before) were 500 renders for 25 test views of
    800x800, whose fixed costs (two read-backs each) were most of the evaluation's wall:
    1.36 s against 0.39 s of device time on an H200 (bench/notes/nerf.md, H16); with
    this cap 265 renders, 0.92 -> 0.63 s on another H200, peak memory 0.83 -> 1.34 GiB
    above the model's (H17)."""
    per_ray = max(marched / max(rays, 1), 1.0)
    return int(max(MIN_CHUNK, min(2 * chunk, MAX_CHUNK, samples / per_ray)))
