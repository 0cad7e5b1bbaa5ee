"""`nerf.view_encoding`: what the colour MLP reads of the view direction, positional
frequencies (the default) or real spherical harmonics of degree 4 (instant-ngp's; the
function itself is tested in tests/grid/test_directions.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from grid import spherical_harmonics
from train.__main__ import main
from train.config import ConfigError, load_config
from train.nerf.model.encoding import encode_views, positional_encoding, view_dim
from train.nerf.model.voxel_nerf import VoxelNeRF

from .test_nerf import SHORT, sets

BOX = ((-1.0, -1.0, -1.0), (1.0, 1.0, 1.0))


def directions(n: int, seed: int = 0) -> torch.Tensor:
    d = torch.randn(n, 3, generator=torch.Generator().manual_seed(seed))
    return d / d.norm(dim=-1, keepdim=True)


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
