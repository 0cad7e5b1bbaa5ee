"""train.metrics: PSNR and the NeRF literature's SSIM."""

from __future__ import annotations

import math

import pytest
import torch

from train.metrics import gaussian_window, psnr, ssim


def test_psnr():
    assert psnr(0.01, 1.0) == pytest.approx(20.0)
    assert psnr(0.0, 1.0) == math.inf


def test_window_is_the_normalised_gaussian():
    g = gaussian_window()
    assert g.shape == (11,) and g.sum().item() == pytest.approx(1.0)
    assert g[6] / g[5] == pytest.approx(math.exp(-0.5 / 1.5**2))  # one tap from the centre
    assert g[0] / g[5] == pytest.approx(math.exp(-0.5 * 25 / 1.5**2))


def test_constant_images_by_hand():
    # no variance: SSIM is the luminance term (2 a b + C1) / (a^2 + b^2 + C1) everywhere
    a, b = torch.full((12, 14, 3), 0.3), torch.full((12, 14, 3), 0.6)
    c1 = 0.01**2
    expected = (2 * 0.3 * 0.6 + c1) / (0.3**2 + 0.6**2 + c1)  # 0.80004...
    assert ssim(a, b).item() == pytest.approx(expected, rel=1e-9)
    assert ssim(a, a).item() == pytest.approx(1.0)


def test_one_window_by_hand():
    # 11x11 images: the map has one position, the window's weights w_ij = g_i g_j
    gen = torch.Generator().manual_seed(0)
    a = torch.rand(11, 11, 1, generator=gen, dtype=torch.float64)
    b = (a * 0.7 + 0.2 * torch.rand(11, 11, 1, generator=gen, dtype=torch.float64)).clamp(0, 1)
    g = gaussian_window()
    w = g[:, None] * g[None, :]
    x, y = a[..., 0], b[..., 0]
    mx, my = (w * x).sum(), (w * y).sum()
    vx, vy = (w * (x - mx) ** 2).sum(), (w * (y - my) ** 2).sum()
    cov = (w * (x - mx) * (y - my)).sum()
    c1, c2 = 0.01**2, 0.03**2
    expected = (2 * mx * my + c1) * (2 * cov + c2) / ((mx**2 + my**2 + c1) * (vx + vy + c2))
    assert ssim(a, b).item() == pytest.approx(expected.item(), rel=1e-9)


def test_matches_scikit_image_and_batches():
    structural_similarity = pytest.importorskip("skimage.metrics").structural_similarity
    gen = torch.Generator().manual_seed(1)
    a = torch.rand(2, 30, 27, 3, generator=gen)
    b = (a + 0.1 * torch.randn(2, 30, 27, 3, generator=gen)).clamp(0, 1)
    ours = ssim(a, b)
    assert ours.shape == (2,)
    for i in range(2):
        theirs = structural_similarity(
            a[i].numpy(),
            b[i].numpy(),
            channel_axis=-1,
            gaussian_weights=True,
            sigma=1.5,
            use_sample_covariance=False,
            data_range=1.0,
        )
        assert ours[i].item() == pytest.approx(float(theirs), abs=1e-5)
    assert ssim(a[0], b[0]).item() == pytest.approx(ours[0].item())


def test_worse_images_score_lower():
    gen = torch.Generator().manual_seed(2)
    a = torch.rand(40, 40, 3, generator=gen)
    noise = torch.randn(40, 40, 3, generator=gen)
    scores = [ssim(a, (a + s * noise).clamp(0, 1)).item() for s in (0.01, 0.05, 0.2)]
    assert 1 > scores[0] > scores[1] > scores[2] > 0


def test_bad_inputs():
    with pytest.raises(ValueError, match=r"at least 11x11; got 8x20"):
        ssim(torch.rand(8, 20, 3), torch.rand(8, 20, 3))
    with pytest.raises(ValueError, match="one shape"):
        ssim(torch.rand(12, 12, 3), torch.rand(12, 13, 3))
