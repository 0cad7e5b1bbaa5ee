"""Per-image appearance (`nerf.appearance = "affine"`): the transform, the test-time colour
correction, a capture whose images change exposure, resume, errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from tests.train.nerf.test_nerf import args_for, scene  # noqa: F401  (the module's scene fixture)
from train.__main__ import main
from train.config import ConfigError, load_config
from train.nerf.data.rays import pixel_views
from train.nerf.model.appearance import Appearance, color_correct


def test_zero_codes_are_the_identity_and_codes_act_per_image():
    gen = torch.Generator().manual_seed(0)
    app = Appearance(3)
    rgb = torch.rand(10, 3, generator=gen)
    view = torch.tensor([0, 1, 2, 0, 1, 2, 0, 1, 2, 0], dtype=torch.int32)
    assert torch.equal(app(rgb, view), rgb)
    with torch.no_grad():
        app.codes.copy_(torch.randn(3, 12, generator=gen) * 0.1)
    out = app(rgb, view)
    for i in range(10):
        code = app.codes[view[i]].detach()
        expected = rgb[i] + rgb[i] @ code[:9].reshape(3, 3) + code[9:]
        torch.testing.assert_close(out[i], expected)
    # the training loss's penalty is the weighted mean square of the codes
    _, penalty = app.fit(rgb, view, 0.5)
    torch.testing.assert_close(penalty, 0.5 * app.codes.square().mean())


def test_pixel_views_number_each_pixel_with_its_image():
    views = pixel_views((2, 2, 3))
    assert views.dtype == torch.int32 and views.tolist() == [0] * 6 + [1] * 6
    mask = torch.zeros(2, 2, 3, dtype=torch.bool)
    mask[0, 0, 0] = mask[1, 1, 2] = mask[1, 0, 1] = True
    assert pixel_views((2, 2, 3), mask).tolist() == [0, 1, 1]


def test_color_correct_undoes_an_affine_colour_change():
    gen = torch.Generator().manual_seed(1)
    truth = torch.rand(8, 9, 3, generator=gen)
    matrix = torch.eye(3) * 0.7 + torch.rand(3, 3, generator=gen) * 0.1
    render = truth @ matrix + torch.tensor([0.05, -0.02, 0.1])
    torch.testing.assert_close(color_correct(render, truth), truth, atol=1e-5, rtol=0)
    # fitted on the masked pixels only: other pixels are mapped, not fitted
    mask = torch.zeros(8, 9, dtype=torch.bool)
    mask[:4] = True
    noisy = truth.clone()
    noisy[4:] = 0.5  # what the fit must ignore
    torch.testing.assert_close(color_correct(render, noisy, mask), truth, atol=1e-5, rtol=0)
    flat = torch.full((4, 4, 3), 0.3)  # one colour: still solvable, maps onto the mean
    assert torch.isfinite(color_correct(flat, truth[:4, :4])).all()


def exposed_copy(source: Path, out: Path, seed: int = 0) -> np.ndarray:
    """A copy of the scene in `source` whose training images each got their own exposure and
    white balance (a gain per image times one per channel) after compositing onto white, as a
    camera's auto-exposure changes a whole picture; returns the gains [V, 3] in the order of
    the training views."""
    shutil.copytree(source, out)
    rng = np.random.default_rng(seed)
    frames = json.loads((out / "transforms_train.json").read_text())["frames"]
    gains = np.exp(rng.normal(0, 0.25, (len(frames), 1)) + rng.normal(0, 0.08, (len(frames), 3)))
    for frame, gain in zip(frames, gains, strict=True):
        path = out / (frame["file_path"] + ".png")
        with Image.open(path) as image:
            rgba = np.asarray(image.convert("RGBA"), dtype=np.float64) / 255
        rgb = rgba[..., :3] * rgba[..., 3:] + (1 - rgba[..., 3:])  # onto white
        opaque = np.concatenate([np.clip(rgb * gain, 0, 1), np.ones_like(rgb[..., :1])], -1)
        Image.fromarray(np.rint(opaque * 255).astype(np.uint8)).save(path)
    return gains


def test_codes_follow_each_images_exposure(scene, tmp_path):  # noqa: F811
    gains = exposed_copy(scene, tmp_path / "exposed")  # [V, 3]
    out = tmp_path / "run"
    args = args_for(tmp_path / "exposed", "data.generate=false", "nerf.appearance=affine")
    assert main(["--out", str(out), *args]) == 0
    codes = torch.load(out / "checkpoint.pt", weights_only=True)["experiment"]["appearance"]
    assert codes.shape == (12, 12)
    # what each image's transform makes of mid grey, per channel, against the image's gain:
    # after 120 steps measured 0.76, 0.85, 0.86 (codes that ignore the exposure: ~0)
    matrix, offset = codes[:, :9].reshape(-1, 3, 3).double(), codes[:, 9:].double()
    grey = 0.5 + 0.5 * matrix.sum(1) + offset  # [V, 3]
    for c in range(3):
        assert np.corrcoef(gains[:, c], grey[:, c].numpy())[0, 1] > 0.6, c


def test_resume_restores_the_codes(scene, tmp_path):  # noqa: F811
    whole, split = tmp_path / "whole", tmp_path / "split"
    args = args_for(scene, "train.steps=70", "output.checkpoint_every=0")
    args += ["--set", "nerf.appearance=affine"]
    assert main(["--out", str(whole), *args]) == 0
    assert main(["--out", str(split), *args, "--stop-at", "50"]) == 0
    assert main(["--out", str(split), "--resume"]) == 0
    a, b = (torch.load(d / "checkpoint.pt", weights_only=True) for d in (whole, split))
    assert torch.equal(a["experiment"]["appearance"], b["experiment"]["appearance"])
    for key, value in a["model"].items():
        assert torch.equal(value, b["model"][key]), key


@pytest.mark.parametrize(
    "overrides, key",
    [
        (["nerf.appearance=per_image"], "nerf.appearance"),
        (["nerf.lr_appearance=0"], "nerf.lr_appearance"),
        (["nerf.appearance_weight=-1"], "nerf.appearance_weight"),
    ],
)
def test_config_errors_name_the_key(overrides, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config(Path(__file__).resolve().parents[3] / "configs/nerf_scene.toml", overrides)
