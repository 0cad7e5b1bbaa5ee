"""bench/compare/gsplat/gsplat_scene.py's parts that need no GPU and no gsplat: its cameras agree
with the project's rays, its start, its SSIM loss, and its refusals."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # bench/ is a package of the checkout
from bench.compare.gsplat import gsplat_scene  # noqa: E402
from train.metrics import ssim  # noqa: E402
from train.nerf.data.blender import Views, camera_rays  # noqa: E402


def _views() -> Views:
    """Two cameras at radius 4 looking at the origin, OpenGL axes (as the scenes)."""
    poses = []
    for angle in (0.3, 2.0):
        eye = torch.tensor([4 * math.cos(angle), 4 * math.sin(angle), 1.0])
        back = eye / eye.norm()  # the camera looks down -z: z points away from the origin
        right = torch.linalg.cross(torch.tensor([0.0, 0.0, 1.0]), back)
        right = right / right.norm()
        up = torch.linalg.cross(back, right)
        c2w = torch.eye(4)
        c2w[:3, 0], c2w[:3, 1], c2w[:3, 2], c2w[:3, 3] = right, up, back, eye
        poses.append(c2w)
    images = torch.zeros(2, 12, 16, 3)
    return Views(images, torch.stack(poses), 20.0, 12, 16, ["a.png", "b.png"])


def test_cameras_project_points_back_to_the_pixels_of_the_project_rays():
    views = _views()
    viewmats, ks = gsplat_scene.cameras(views, torch.device("cpu"))
    origins, directions = camera_rays(views)  # [V, H, W, 3] through the pixel centres
    points = origins + 3.0 * directions  # a point on each ray
    homogeneous = torch.cat([points, torch.ones_like(points[..., :1])], -1)
    camera = torch.einsum("vij,vhwj->vhwi", viewmats, homogeneous)[..., :3]
    assert (camera[..., 2] > 0).all()  # in front: OpenCV cameras look down +z
    pixels = torch.einsum("vij,vhwj->vhwi", ks, camera / camera[..., 2:3])[..., :2]
    j = torch.arange(16) + 0.5
    i = torch.arange(12) + 0.5
    want = torch.stack(torch.meshgrid(j, i, indexing="xy"), -1).expand_as(pixels)  # (u, v)
    torch.testing.assert_close(pixels, want, atol=1e-4, rtol=0)


def test_start_and_scene_scale():
    views = _views()
    assert gsplat_scene.scene_scale(views) == pytest.approx(1.1 * 4 * math.sin(0.85), rel=1e-6)
    start = gsplat_scene.initial_gaussians(500, 1.5, torch.Generator().manual_seed(0), "cpu")
    assert start["means"].abs().max() <= 1.5 and start["means"].std() > 0.5
    assert [tuple(v.shape) for v in start.values()] == [
        (500, 3), (500, 3), (500, 4), (500,), (500, 1, 3), (500, 15, 3)
    ]  # fmt: skip
    colour = start["sh0"][:, 0] * gsplat_scene.SH_C0 + 0.5
    assert colour.min() >= 0 and colour.max() <= 1
    assert torch.sigmoid(start["opacities"]).allclose(torch.tensor(0.1))
    # scales: the root mean square distance to the 3 nearest others, by brute force
    d2 = torch.cdist(start["means"], start["means"]).square()
    want = d2.topk(4, dim=1, largest=False).values[:, 1:].mean(1).sqrt().log()
    torch.testing.assert_close(start["scales"], want[:, None].expand(-1, 3), rtol=1e-4, atol=1e-5)


def test_ssim_loss_is_zero_on_equal_images_and_follows_the_scoring():
    gen = torch.Generator().manual_seed(0)
    a = torch.rand(40, 50, 3, generator=gen)
    b = (a + 0.1 * torch.randn(40, 50, 3, generator=gen)).clamp(0, 1).requires_grad_()
    assert gsplat_scene.ssim_loss(a, a).abs() < 1e-6
    loss = gsplat_scene.ssim_loss(a, b)
    assert abs(float(loss.detach()) - (1 - float(ssim(a, b.detach())))) < 0.05  # padding
    loss.backward()
    assert b.grad.abs().max() > 0


def test_bad_arguments_are_refused(capsys):
    for argv, key in (
        (["s", "--out", "o", "--steps", "0"], "--steps"),
        (["s", "--box", "0", "--out", "o"], "--box"),
    ):
        with pytest.raises(SystemExit):
            gsplat_scene.parse_args(argv)
        assert key in capsys.readouterr().err
    if not torch.cuda.is_available():
        assert gsplat_scene.main(["scene", "--out", "o"]) == 2
        assert "needs a CUDA GPU" in capsys.readouterr().err
