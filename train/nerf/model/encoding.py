"""The encodings of the view direction that the colour MLP reads: positional (sines and
cosines at octaves) or real spherical harmonics (instant-ngp's)."""

from __future__ import annotations

import torch
from torch import Tensor

#: The degree of instant-ngp's view encoding: bands l = 0..3, 16 real spherical harmonics
#: (orthonormal over the sphere, Condon-Shortley signs).
SH_DEGREE = 4


def positional_encoding(x: Tensor, frequencies: int) -> Tensor:
    """x: [..., C] -> [..., C * (1 + 2 * frequencies)]: x, sin(2^k x), cos(2^k x)."""
    scales = 2.0 ** torch.arange(frequencies, device=x.device, dtype=x.dtype)
    xb = (x[..., None] * scales).flatten(-2)  # [..., C * frequencies]
    return torch.cat([x, xb.sin(), xb.cos()], dim=-1)


def spherical_harmonics(d: Tensor, degree: int = SH_DEGREE) -> Tensor:
    """d: [..., 3] unit directions -> [..., degree^2]: the real spherical harmonics of bands
    0 .. degree - 1 (degree 1 to 4), band by band, m = -l .. l within a band."""
    if not 1 <= degree <= 4:
        raise ValueError(f"degree: expected 1 to 4, got {degree}")
    x, y, z = d.unbind(-1)
    out = [torch.full_like(x, 0.28209479177387814)]
    if degree > 1:
        out += [-0.48860251190291987 * y, 0.48860251190291987 * z, -0.48860251190291987 * x]
    if degree > 2:
        xx, yy, zz = x * x, y * y, z * z
        out += [
            1.0925484305920792 * x * y,
            -1.0925484305920792 * y * z,
            0.94617469575755997 * zz - 0.31539156525251999,
            -1.0925484305920792 * x * z,
            0.54627421529603959 * (xx - yy),
        ]
    if degree > 3:
        out += [
            0.59004358992664352 * y * (yy - 3 * xx),
            2.8906114426405538 * x * y * z,
            0.45704579946446572 * y * (1 - 5 * zz),
            0.3731763325901154 * z * (5 * zz - 3),
            0.45704579946446572 * x * (1 - 5 * zz),
            1.4453057213202769 * z * (xx - yy),
            0.59004358992664352 * x * (3 * yy - xx),
        ]
    return torch.stack(out, dim=-1)


def view_dim(kind: str, frequencies: int) -> int:
    """Width of `encode_views`' output for a view encoding `kind` ("frequencies" or "sh")."""
    return SH_DEGREE**2 if kind == "sh" else 3 * (1 + 2 * frequencies)


def encode_views(directions: Tensor, kind: str, frequencies: int) -> Tensor:
    """directions: [..., 3] unit -> [..., view_dim(kind, frequencies)]."""
    if kind == "sh":
        return spherical_harmonics(directions)
    return positional_encoding(directions, frequencies)
