"""Whole images from a `VoxelNeRF`: its rays rendered in chunks sized by the samples a ray
(each chunk an exact render: op by op, its counts read back), so an image costs a few
renders rather than one per training batch's worth of rays."""

from __future__ import annotations

import torch
from torch import Tensor, nn

#: A model's first chunk of rays: a training batch's worth.
FIRST_CHUNK = 1 << 13
#: The fewest and the most rays in one chunk of an image, whatever its samples.
MIN_CHUNK, MAX_CHUNK = 1 << 10, 1 << 15


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
    (`image_chunk`; the first sized as the model's last image's last, `model.image_rays`)."""
    shape = origins.shape[:-1]
    o, d = origins.reshape(-1, 3), directions.reshape(-1, 3)
    rgbs, depths, accs = [], [], []
    start, chunk = 0, model.image_rays
    while start < o.shape[0]:
        rays = (o[start : start + chunk], d[start : start + chunk])
        out = model.render(*rays, background, exact=True)
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
    twice `chunk` (the next rows may hold more of the object) and MAX_CHUNK (a chunk of
    rays that all cross it: 65536 rays took 15 GB early in a realistic-scene run), at
    least MIN_CHUNK. At 8192 rays a chunk, the chunks' fixed cost was most of an
    evaluation's 1.3 s (bench/notes/nerf.md, H11)."""
    per_ray = max(marched / max(rays, 1), 1.0)
    return int(max(MIN_CHUNK, min(2 * chunk, MAX_CHUNK, samples / per_ray)))
