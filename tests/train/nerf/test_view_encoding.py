"""`nerf.view_encoding`: what the colour MLP reads of the view direction, positional
frequencies (the default) or real spherical harmonics of degree 4 (instant-ngp's)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from train.__main__ import main
from train.config import ConfigError, load_config
from train.nerf.model.encoding import (
    encode_views,
    positional_encoding,
    spherical_harmonics,
    view_dim,
)
from train.nerf.model.voxel_nerf import VoxelNeRF

from .test_nerf import SHORT, sets

BOX = ((-1.0, -1.0, -1.0), (1.0, 1.0, 1.0))


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


def test_encode_views_chooses_and_view_dim_is_its_width():
    d = directions(5, seed=3).float()
    torch.testing.assert_close(encode_views(d, "sh", 2), spherical_harmonics(d))
    torch.testing.assert_close(encode_views(d, "frequencies", 2), positional_encoding(d, 2))
    assert view_dim("sh", 2) == 16 and view_dim("frequencies", 2) == 15


def test_the_model_reads_the_encoding_it_was_given():
    torch.manual_seed(0)
    m = VoxelNeRF(BOX, 8, 8, color_features=5, hidden=16, view_encoding="sh")
    assert m.mlp[0].in_features == 5 + 16
    d = directions(4, seed=4).float()
    torch.testing.assert_close(m.encode_views(d), spherical_harmonics(d))
    rgb = m.rgb(torch.rand(4, 3) * 2 - 1, m.encode_views(d))
    rgb.sum().backward()
    assert rgb.shape == (4, 3) and m.mlp[0].weight.grad.abs().sum() > 0
    assert VoxelNeRF(BOX, 8, 8, color_features=5, hidden=16).mlp[0].in_features == 5 + 27
    with pytest.raises(ValueError, match="view_encoding: expected one of frequencies, sh"):
        VoxelNeRF(BOX, 8, 8, view_encoding="spherical")


def test_a_bad_view_encoding_names_the_key():
    with pytest.raises(ConfigError) as error:
        load_config(None, ["experiment=nerf", "nerf.view_encoding=spherical"])
    assert str(error.value).startswith("nerf.view_encoding: expected one of frequencies, sh")


@pytest.fixture(scope="module")
def scene(tmp_path_factory) -> Path:
    from train.nerf.scenes.generate import generate_scene

    return generate_scene(tmp_path_factory.mktemp("scene") / "scene", size=24, n_train=12, n_test=2)


def test_a_run_with_spherical_harmonics_trains_resumes_and_exports(scene, tmp_path):
    """The whole command: the view-consistency term and the export's vertex colours read
    the same encoding as the renderer; the checkpoint restores it."""
    from train.export import main as export_main

    out = tmp_path / "run"
    extra = [f"data.path={scene}", "nerf.view_encoding=sh", "nerf.view_consistency_weight=0.01"]
    extra += ["train.steps=30", "train.upsample_steps=[15]", "train.batch_size=256"]
    assert main(["--out", str(out), "--stop-at", "20", *sets(*SHORT, *extra)]) == 0
    assert main(["--out", str(out), "--resume"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 30 and summary["psnr"] > 10
    assert 'view_encoding = "sh"' in (out / "config.toml").read_text()
    assert export_main(["--out", str(out)]) == 0
