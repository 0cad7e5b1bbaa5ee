"""Target fields to fit, generated in code (or read from a user's `.npy` volume).

A target maps world points `[..., 3]` to scalar values `[...]` (float32, on the
points' device). Signed-distance targets can also draw points near their surface.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from ..errors import InputFileError, plural, read_input
from ..shapes import Box, Sphere, Target, Torus
from .config import TargetConfig

_NPY_KEY = "target.path"  # the config key naming a Volume's file


class Density(Target):
    """A smooth procedural density: Gaussian blobs carved into gyroid membranes.

    `envelope(p) = sum_i a_i exp(-|p - c_i|^2 / (2 s_i^2))` with blob centres,
    widths and amplitudes drawn from `seed`. The detail is a gyroid
    `G(q) = sin qx cos qy + sin qy cos qz + sin qz cos qx` evaluated at
    `q = k R p + phase` (`k = pi * frequency`, i.e. `frequency` periods across a
    width of 2; a random rotation R and phase from `seed`, so the axis slices are
    not degenerate). Density concentrates on thin sheets around G = 0:

        density(p) = envelope(p) * (1 - detail + detail * exp(-(G / thickness)^2))

    Non-negative and infinitely smooth; `frequency` and `thickness` set how fine
    the membranes are (thinner and denser sheets need finer grids).

    On CUDA the whole field is one generated elementwise kernel (`fused`): it reads a
    point and writes its value, where the tensor formula (`formula`, the definition,
    used on the CPU) launches about 25 kernels and, at 2^20 points and 24 blobs, moves
    about 1.3 GB through [N, blobs] temporaries. The fused kernel takes |p - c|^2
    directly instead of through the expansion, so the two agree to float rounding
    (tests/train/test_step_graph.py), not bitwise.
    """

    name = "density"

    def __init__(
        self, blobs: int, frequency: float, thickness: float, detail: float, seed: int
    ) -> None:
        gen = torch.Generator().manual_seed(seed)
        self.centres = (torch.rand(blobs, 3, generator=gen) * 2 - 1) * 0.75  # [B, 3]
        self.widths = 0.1 + 0.2 * torch.rand(blobs, generator=gen)  # [B]
        self.amplitudes = 0.3 + 0.7 * torch.rand(blobs, generator=gen)  # [B]
        self.rotation, _ = torch.linalg.qr(torch.randn(3, 3, generator=gen))  # [3, 3]
        self.phase = torch.rand(3, generator=gen) * 2 * math.pi  # [3]
        self.k = math.pi * frequency
        self.thickness = thickness
        self.detail = detail
        self._kernel = None  # the fused CUDA kernel, generated on first use

    def to(self, device: torch.device) -> Density:
        for name in ("centres", "widths", "amplitudes", "rotation", "phase"):
            setattr(self, name, getattr(self, name).to(device))
        return self

    def __call__(self, xyz: Tensor) -> Tensor:
        xyz = xyz.float()
        if xyz.is_cuda:
            return self.fused(xyz)
        return self.formula(xyz)

    def formula(self, xyz: Tensor) -> Tensor:
        """The field from tensor ops (any device): xyz [..., 3] float32 -> [...]."""
        # |p - c|^2 = |p|^2 - 2 p.c + |c|^2, through a matmul: no [..., B, 3] temporary.
        d2 = xyz.square().sum(-1, keepdim=True) - 2 * xyz @ self.centres.T
        d2 = (d2 + self.centres.square().sum(-1)).clamp_min(0)  # [..., B]
        envelope = torch.exp(d2 * (-0.5 / self.widths.square())) @ self.amplitudes  # [...]
        q = xyz @ self.rotation.T * self.k + self.phase  # [..., 3]
        s, c = torch.sin(q), torch.cos(q)
        gyroid = s[..., 0] * c[..., 1] + s[..., 1] * c[..., 2] + s[..., 2] * c[..., 0]
        sheets = torch.exp(-(gyroid / self.thickness).square())  # [...], in (0, 1]
        return envelope * (1 - self.detail + self.detail * sheets)

    def fused(self, xyz: Tensor) -> Tensor:
        """The same field as one CUDA kernel (xyz [..., 3] float32 on CUDA -> [...]): the
        blobs, rotation and phase are compiled in as float32 constants (jiterator)."""
        if self._kernel is None:
            from torch.cuda.jiterator import _create_jit_fn

            self._kernel = _create_jit_fn(self._kernel_code())
        return self._kernel(xyz[..., 0], xyz[..., 1], xyz[..., 2])

    def _kernel_code(self) -> str:
        """CUDA source of `fused`: `formula` per point, constants as float32 literals."""

        def f32(value: float | Tensor) -> str:
            return f"{float(value)!r}f"  # a float32 value printed exactly

        centres, widths = self.centres.cpu(), self.widths.cpu()
        decay = (-0.5 / widths.square()).tolist()  # as `formula` computes it, in float32
        lines = ["float envelope = 0.0f, dx, dy, dz;"]
        for (cx, cy, cz), a, w in zip(
            centres.tolist(), self.amplitudes.cpu().tolist(), decay, strict=True
        ):
            lines.append(
                f"dx = x - {f32(cx)}; dy = y - {f32(cy)}; dz = z - {f32(cz)}; "
                f"envelope += {f32(a)} * ::exp((dx * dx + dy * dy + dz * dz) * {f32(w)});"
            )
        r, phase = self.rotation.cpu().tolist(), self.phase.cpu().tolist()
        k = f32(torch.tensor(self.k, dtype=torch.float32))
        for i, axis in enumerate("xyz"):
            lines.append(
                f"const float q{axis} = (x * {f32(r[i][0])} + y * {f32(r[i][1])} + "
                f"z * {f32(r[i][2])}) * {k} + {f32(phase[i])};"
            )
        lines += [
            "const float gyroid = ::sin(qx) * ::cos(qy) + ::sin(qy) * ::cos(qz) + "
            "::sin(qz) * ::cos(qx);",
            f"const float s = gyroid / {f32(self.thickness)};",
            f"return envelope * ({f32(1 - self.detail)} + {f32(self.detail)} * ::exp(-(s * s)));",
        ]
        body = "\n  ".join(lines)
        return f"template <typename T> T density_field(T x, T y, T z) {{\n  {body}\n}}"


class Volume(Target):
    """A user's 3-D array spanning the world box, interpolated trilinearly.

    The array's first and last samples along each axis sit on the box faces
    (align_corners=True): sample `[i, j, k]` of an `xyz` array is at
    `lo + (hi - lo) * (i, j, k) / (shape - 1)`. Points outside read the nearest
    boundary value. Interpolated with `F.grid_sample`, independently of `grid.sample`.
    """

    name = "npy"

    def __init__(self, path: str, axes: str, bounds: list[list[float]]) -> None:
        array = read_input(
            path, lambda f: np.load(f, allow_pickle=False), ".npy array", key=_NPY_KEY
        )
        array = array.astype(np.float32)
        bad = int(np.count_nonzero(~np.isfinite(array)))
        if bad:
            raise InputFileError(
                path,
                f"{plural(bad, 'value')} {'is' if bad == 1 else 'are'} NaN or infinite "
                "(as float32)",
                key=_NPY_KEY,
            )
        volume = torch.from_numpy(array)
        # F.grid_sample wants [D, H, W] = [Z, Y, X], the first index being z.
        self.volume = volume.permute(2, 1, 0) if axes == "xyz" else volume
        self.lo = torch.tensor(bounds[0])
        self.hi = torch.tensor(bounds[1])

    def to(self, device: torch.device) -> Volume:
        self.volume, self.lo, self.hi = (t.to(device) for t in (self.volume, self.lo, self.hi))
        return self

    def __call__(self, xyz: Tensor) -> Tensor:
        batch = xyz.shape[:-1]
        normalised = (xyz.float() - self.lo) * (2 / (self.hi - self.lo)) - 1
        out = F.grid_sample(
            self.volume[None, None],
            normalised.reshape(1, 1, 1, -1, 3),
            mode="bilinear",
            padding_mode="border",
            align_corners=True,
        )
        return out.reshape(batch)


def make_target(config: TargetConfig, bounds: list[list[float]]) -> Target:
    """The target described by `config` (a validated [target] table)."""
    c = config
    if c.kind == "density":
        return Density(c.blobs, c.frequency, c.thickness, c.detail, c.seed)
    if c.kind == "sphere":
        return Sphere(c.radius, c.center)
    if c.kind == "torus":
        return Torus(c.major_radius, c.minor_radius, c.center)
    if c.kind == "box":
        return Box(c.half_size, c.center)
    if c.kind == "npy":
        return Volume(c.path, c.axes, bounds)
    raise ValueError(f"target.kind: unknown {c.kind!r}")
