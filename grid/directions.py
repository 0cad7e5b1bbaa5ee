"""Encodings of unit directions for the colour network of a radiance field."""

from __future__ import annotations

import torch
from torch import Tensor


def spherical_harmonics(directions: Tensor, degree: int = 4) -> Tensor:
    """The real spherical harmonics of bands 0 .. degree - 1 at unit directions: instant-ngp's
    view encoding (tiny-cuda-nn's `SphericalHarmonics` of that degree; it is handed
    `(d + 1) / 2` and maps it back, this takes `d`). Orthonormal over the sphere,
    Condon-Shortley signs, band by band and m = -l .. l within a band. Pure PyTorch:
    differentiable, any dtype and device, `torch.compile`-able.

    Args:
        directions: [..., 3] unit vectors (not normalised here).
        degree: 1 to 4 (1, 4, 9 or 16 functions).

    Returns:
        [..., degree^2].

    Raises:
        ValueError: a degree outside 1 to 4, or directions not [..., 3].

    Examples:
        >>> import torch, grid
        >>> d = torch.nn.functional.normalize(torch.randn(5, 3), dim=-1)
        >>> grid.spherical_harmonics(d).shape
        torch.Size([5, 16])
        >>> round(grid.spherical_harmonics(d)[0, 0].item(), 4)  # band 0: 1 / (2 sqrt(pi))
        0.2821
    """
    if not 1 <= degree <= 4:
        raise ValueError(f"degree: expected 1 to 4, got {degree}")
    if directions.shape[-1:] != (3,):
        raise ValueError(f"directions: expected [..., 3], got {list(directions.shape)}")
    x, y, z = directions.unbind(-1)
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
