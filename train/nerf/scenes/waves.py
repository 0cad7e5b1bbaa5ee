"""Band-limited noise with exact bounds, and an integer hash: the building blocks of the
realistic scene (`train.nerf.scenes.realistic`).

`Waves` is noise by spectral synthesis: a sum of plane waves with random directions and
phases, a few per octave, `n(p) = sum_i a_i sin(k_i . p + phi_i)`. Unlike lattice noise its
value and its gradient have exact bounds (`bound = sum |a_i|`,
`lipschitz = sum |a_i| |k_i|`), which is what sphere tracing a displaced surface needs, and
it costs one small matmul and one `sin` per wave, the same on a CPU and a GPU. The waves
are drawn once from a seed in float64 on the CPU, so every device renders the same scene.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


class Waves:
    """Multi-octave noise: `octaves` octaves of `per_octave` plane waves each.

    Octave o has wavelengths around `wavelength / 2^o` (jittered by +-20%) and amplitudes
    `amplitude * gain^o` per wave; `channels` > 1 gives that many independent noises
    (one output per channel, e.g. a 3-vector for a domain warp).

    points: [..., 3] -> [...] (channels == 1) or [..., channels].
    """

    def __init__(
        self,
        seed: int,
        *,
        octaves: int,
        per_octave: int,
        wavelength: float,
        amplitude: float,
        gain: float = 0.5,
        channels: int = 1,
    ) -> None:
        gen = torch.Generator().manual_seed(seed)
        ks, amps = [], []
        for o in range(octaves):
            dirs = torch.randn(per_octave, 3, generator=gen, dtype=torch.float64)
            dirs = dirs / dirs.norm(dim=-1, keepdim=True)
            jitter = 0.8 + 0.4 * torch.rand(per_octave, 1, generator=gen, dtype=torch.float64)
            ks.append(dirs * (2 * math.pi * 2.0**o / wavelength) / jitter)
            signs = torch.randint(0, 2, (per_octave, channels), generator=gen) * 2 - 1
            amps.append(signs.double() * amplitude * gain**o)
        self.k = torch.cat(ks)  # [n, 3] wave vectors
        self.phase = torch.rand(len(self.k), generator=gen, dtype=torch.float64) * 2 * math.pi
        self.amp = torch.cat(amps)  # [n, channels]
        self.channels = channels
        norms = self.amp.norm(dim=-1)  # each wave's Jacobian has spectral norm |a_i| |k_i|
        self.bound = float(norms.sum())  # |n(p)| <= bound
        self.lipschitz = float((norms * self.k.norm(dim=-1)).sum())  # |n(p) - n(q)| <= L |p - q|
        self._cache: dict[tuple, tuple[Tensor, Tensor, Tensor]] = {}

    def _on(self, like: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        key = (like.device, like.dtype)
        if key not in self._cache:
            self._cache[key] = tuple(
                x.to(like.device, like.dtype) for x in (self.k, self.phase, self.amp)
            )
        return self._cache[key]

    def __call__(self, points: Tensor) -> Tensor:
        k, phase, amp = self._on(points)
        out = torch.sin(points @ k.T + phase) @ amp  # [..., channels]
        return out[..., 0] if self.channels == 1 else out


def hash2(a: Tensor, b: Tensor) -> Tensor:
    """Integer hash of two int64 tensors (any values) -> int64 in [0, 2^31), identical on
    every device (every product stays below 2^63: no overflow)."""
    mask = 0xFFFFFFFF
    h = ((a & mask) * 374761393 + (b & mask) * 668265263) & mask
    h = ((h ^ (h >> 13)) * 1274126177) & mask
    return (h ^ (h >> 16)) & 0x7FFFFFFF


def smoothstep(edge0: float, edge1: float, x: Tensor) -> Tensor:
    """0 below edge0, 1 above edge1, C1 Hermite in between (edge0 > edge1 reverses it)."""
    t = ((x - edge0) / (edge1 - edge0)).clamp(0.0, 1.0)
    return t * t * (3 - 2 * t)


def mix(a, b, w: Tensor) -> Tensor:
    """Colours a, b (3 numbers or [..., 3] tensors) mixed by w [...] -> [..., 3]."""
    a = torch.as_tensor(a, device=w.device, dtype=w.dtype)
    b = torch.as_tensor(b, device=w.device, dtype=w.dtype)
    return a + (b - a) * w[..., None]
