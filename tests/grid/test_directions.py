"""grid.spherical_harmonics: orthonormal over the sphere, each band whole (the addition
theorem), tiny-cuda-nn's functions, gradients, bad arguments refused."""

from __future__ import annotations

import math

import pytest
import torch

from grid import spherical_harmonics


def directions(n: int, seed: int = 0) -> torch.Tensor:
    """n unit directions, uniform on the sphere, float64."""
    d = torch.randn(n, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    return d / d.norm(dim=-1, keepdim=True)


def test_spherical_harmonics_are_orthonormal_over_the_sphere():
    y = spherical_harmonics(directions(1 << 20))  # [N, 16]
    gram = 4 * math.pi * (y.T @ y) / y.shape[0]  # Monte-Carlo integral of Y_i Y_j
    torch.testing.assert_close(gram, torch.eye(16, dtype=torch.float64), atol=0.02, rtol=0)


def test_each_band_sums_to_the_addition_theorem_in_every_direction():
    """sum_m Y_lm(d)^2 = (2l + 1) / (4 pi) for every d: each band is whole and rotates into
    itself (a wrong constant or a missing term breaks it somewhere on the sphere)."""
    y = spherical_harmonics(directions(1000, seed=1))
    for band in range(4):
        total = y[:, band**2 : (band + 1) ** 2].square().sum(-1)
        expected = torch.full_like(total, (2 * band + 1) / (4 * math.pi))
        torch.testing.assert_close(total, expected, atol=1e-12, rtol=0)


def test_they_are_tiny_cuda_nns_functions():
    """Against tiny-cuda-nn's degree-4 formulas as written there (in x^2 + y^2 + z^2 forms,
    so the same values only on unit directions): an independent transcription."""
    d = directions(1000, seed=5)
    x, y, z = d.unbind(-1)
    xx, yy, zz = x * x, y * y, z * z
    c2, c3 = 1.0925484305920792, (0.5900435899266435, 2.890611442640554, 0.4570457994644658)
    tcnn = [
        torch.full_like(x, 0.28209479177387814),
        *(s * 0.4886025119029199 * v for s, v in ((-1, y), (1, z), (-1, x))),
        c2 * x * y, -c2 * y * z, 0.31539156525252005 * (2 * zz - xx - yy), -c2 * x * z,
        0.5462742152960396 * (xx - yy),
        -c3[0] * y * (3 * xx - yy), c3[1] * x * y * z, -c3[2] * y * (4 * zz - xx - yy),
        0.3731763325901154 * z * (2 * zz - 3 * xx - 3 * yy), -c3[2] * x * (4 * zz - xx - yy),
        1.445305721320277 * z * (xx - yy), -c3[0] * x * (xx - 3 * yy),
    ]  # fmt: skip
    torch.testing.assert_close(spherical_harmonics(d), torch.stack(tcnn, -1), atol=1e-12, rtol=0)


def test_lower_degrees_are_the_first_bands_and_bad_degrees_are_refused():
    d = directions(7, seed=2)
    full = spherical_harmonics(d)
    for degree in (1, 2, 3):
        torch.testing.assert_close(spherical_harmonics(d, degree), full[:, : degree**2])
    for degree in (0, 5):
        with pytest.raises(ValueError, match="degree: expected 1 to 4"):
            spherical_harmonics(d, degree)


def test_gradients_match_finite_differences():
    d = directions(6, seed=6).requires_grad_()
    assert torch.autograd.gradcheck(spherical_harmonics, (d,))
    assert torch.autograd.gradgradcheck(spherical_harmonics, (d,))


def test_any_leading_shape_and_float32():
    d = directions(24, seed=7).float().reshape(2, 3, 4, 3)
    out = spherical_harmonics(d)
    assert out.shape == (2, 3, 4, 16) and out.dtype == torch.float32
    torch.testing.assert_close(out.reshape(-1, 16), spherical_harmonics(d.reshape(-1, 3)))


def test_directions_of_another_width_are_refused():
    with pytest.raises(ValueError, match=r"directions: expected \[\.\.\., 3\], got \[5, 2\]"):
        spherical_harmonics(torch.zeros(5, 2))
