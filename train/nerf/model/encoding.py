"""The encodings of the view direction that the colour MLP reads: positional (sines and
cosines at octaves) or real spherical harmonics (instant-ngp's); `ViewInput`, all that the
colour MLP reads of the view (with `nerf.reflected_views`, the reflection too)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from grid import spherical_harmonics

from .reflection import NormalField, reflect

#: The degree of instant-ngp's view encoding (`grid.spherical_harmonics`: 16 functions).
SH_DEGREE = 4


def positional_encoding(x: Tensor, frequencies: int, out: Tensor | None = None) -> Tensor:
    """x: [..., C] -> [..., C * (1 + 2 * frequencies)]: x, sin(2^k x), cos(2^k x), computed
    in x's dtype and written into `out` (a slice of a wider buffer, any float dtype) where
    given: no concatenation, no gradient (view directions carry none)."""
    c = x.shape[-1]
    if out is None:
        out = x.new_empty(*x.shape[:-1], c * (1 + 2 * frequencies))
    scales = 2.0 ** torch.arange(frequencies, device=x.device, dtype=x.dtype)
    xb = (x[..., None] * scales).flatten(-2)  # [..., C * frequencies]
    out[..., :c] = x
    torch.sin(xb, out=out[..., c : c * (1 + frequencies)])
    torch.cos(xb, out=out[..., c * (1 + frequencies) :])
    return out


def view_dim(kind: str, frequencies: int) -> int:
    """Width of `encode_views`' output for a view encoding `kind` ("frequencies" or "sh")."""
    return SH_DEGREE**2 if kind == "sh" else 3 * (1 + 2 * frequencies)


def encode_views(
    directions: Tensor, kind: str, frequencies: int, out: Tensor | None = None
) -> Tensor:
    """directions: [..., 3] unit -> [..., view_dim(kind, frequencies)], into `out` where
    given (`positional_encoding`)."""
    if kind != "sh":
        return positional_encoding(directions, frequencies, out)
    sh = spherical_harmonics(directions, SH_DEGREE)
    return sh if out is None else out.copy_(sh)


class ViewInput(nn.Module):
    """What the colour MLP reads of the view, `width` values a sample in `dtype` (the colour
    MLP's autocast dtype; None: the directions' own): the direction's encoding
    (`encode_views`), and with `reflected` besides it the encoding of the direction mirrored
    about the density's normal and the cosine between them (`reflection.py`; the normals,
    not saved, are set by `refresh`).

    Each part is written once, in `dtype`, into one buffer. Concatenated in float32 and cast
    after, the fast config's colour input cost three more `cat`s over every coloured sample
    and a cast: half of what reflected views added to its step (bench/notes/nerf.md, H11)."""

    def __init__(
        self,
        kind: str,
        frequencies: int,
        reflected: bool,
        backend: str,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.kind, self.frequencies, self.dtype = kind, frequencies, dtype
        self.normals = NormalField(backend, device) if reflected else None
        self.encoded = view_dim(kind, frequencies)  # one direction's encoding
        self.width = 2 * self.encoded + 1 if reflected else self.encoded

    def encode(self, directions: Tensor) -> Tensor:
        """directions: [..., 3] unit -> [..., view_dim]: the direction's encoding alone."""
        return encode_views(directions, self.kind, self.frequencies)

    def reader(self, directions: Tensor) -> Callable[[Tensor, Tensor], Tensor]:
        """For rays along `directions` [R, 3]: (points [V, 3], rays [V] in [0, R]) -> [V,
        width]; ray R is the fused renderer's padding (a zero encoding). Each ray's direction
        is encoded once; with reflected views each sample's reflection beside it."""
        views = self.encode(directions).to(self.dtype or directions.dtype)  # [R, E]
        views = torch.cat([views, views.new_zeros(1, views.shape[1])])  # row R: padding
        if self.normals is None:
            return lambda points, rays: views[rays]
        padded = torch.cat([directions, directions.new_zeros(1, 3)])  # [R + 1, 3]
        return lambda points, rays: self(points, padded[rays], views[rays])

    def forward(self, points: Tensor, directions: Tensor, encoded: Tensor | None = None) -> Tensor:
        """points: [V, 3], directions: [V, 3] unit -> [V, width] in `dtype` (`encoded`: the
        directions' encoding [V, E], if already computed)."""
        dtype = self.dtype or directions.dtype
        if self.normals is None:
            return (self.encode(directions) if encoded is None else encoded).to(dtype)
        e = self.encoded
        out = directions.new_empty(directions.shape[0], self.width, dtype=dtype)
        if encoded is None:
            encode_views(directions, self.kind, self.frequencies, out[:, :e])
        else:
            out[:, :e] = encoded
        reflected, cos = reflect(directions, self.normals(points))
        encode_views(reflected, self.kind, self.frequencies, out[:, e : 2 * e])
        out[:, 2 * e :] = cos
        return out

    def refresh(self, raw: Callable[[], Tensor], bounds: Tensor) -> None:
        """With reflected views, the normals from `raw()` ([X, Y, Z] raw density at the
        vertices of `bounds` [2, 3]; called only then)."""
        if self.normals is not None:
            self.normals.refresh(raw(), bounds)
