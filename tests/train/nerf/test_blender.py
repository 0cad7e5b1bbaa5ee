"""The Blender-format reader on a hand-made two-view scene written by the test itself."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image  # installed with matplotlib

from train.nerf.data.blender import DatasetError, Views, camera_rays, load_blender, read_png

ANGLE = 0.6911112070083618  # the original scenes' camera_angle_x


def pose(position, yaw=0.0) -> list[list[float]]:
    """OpenGL camera-to-world: rotation by `yaw` about +y, camera at `position`."""
    c, s = math.cos(yaw), math.sin(yaw)
    return [
        [c, 0.0, s, position[0]],
        [0.0, 1.0, 0.0, position[1]],
        [-s, 0.0, c, position[2]],
        [0.0, 0.0, 0.0, 1.0],
    ]


def write_scene(root: Path, rgba: list[np.ndarray], split: str = "train", ext: str = "") -> Path:
    """transforms_{split}.json plus one PNG per uint8 image ([H, W, 4] or [H, W, 3])."""
    (root / split).mkdir(parents=True, exist_ok=True)
    frames = []
    for k, image in enumerate(rgba):
        Image.fromarray(image).save(root / split / f"r_{k}.png")
        frames.append(
            {
                "file_path": f"./{split}/r_{k}{ext}",
                "transform_matrix": pose((0.5 * k, 0.0, 4.0), yaw=0.3 * k),
            }
        )
    meta = {"camera_angle_x": ANGLE, "frames": frames}
    (root / f"transforms_{split}.json").write_text(json.dumps(meta, indent=2))
    return root


def random_rgba(seed: int, height=8, width=12) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, size=(height, width, 4), dtype=np.uint8)


@pytest.fixture
def scene(tmp_path) -> tuple[Path, list[np.ndarray]]:
    images = [random_rgba(0), random_rgba(1)]
    return write_scene(tmp_path, images), images


def composite(image: np.ndarray, bg) -> np.ndarray:
    x = image.astype(np.float64) / 255
    return x[..., :3] * x[..., 3:] + np.asarray(bg) * (1 - x[..., 3:])


@pytest.mark.parametrize("ext", ["", ".png"])
def test_reads_images_poses_and_focal(tmp_path, ext):
    images = [random_rgba(0), random_rgba(1)]
    write_scene(tmp_path, images, ext=ext)
    bg = (0.2, 0.5, 0.9)
    views = load_blender(tmp_path, "train", background=bg)
    assert isinstance(views, Views) and len(views) == 2
    assert views.images.shape == (2, 8, 12, 3) and views.images.dtype == torch.float32
    assert (views.height, views.width) == (8, 12)
    for k in range(2):
        np.testing.assert_allclose(views.images[k].numpy(), composite(images[k], bg), atol=1e-6)
        np.testing.assert_allclose(views.c2w[k].numpy(), pose((0.5 * k, 0, 4), 0.3 * k), atol=1e-7)
    assert views.focal == pytest.approx(0.5 * 12 / math.tan(0.5 * ANGLE))
    assert views.names[1].endswith("r_1.png")


def test_alpha_zero_shows_background_and_rgb_png_has_no_alpha(tmp_path):
    rgba = random_rgba(2)
    rgba[..., 3] = 0
    rgb = random_rgba(3)[..., :3]
    write_scene(tmp_path, [rgba, rgb])
    views = load_blender(tmp_path, "train", background=(0.25, 0.0, 1.0))
    assert torch.equal(views.images[0], torch.tensor([0.25, 0.0, 1.0]).expand(8, 12, 3))
    np.testing.assert_allclose(views.images[1].numpy(), rgb / 255, atol=1e-6)


def test_downscale_averages_blocks_and_scales_focal(scene):
    root, images = scene
    full = load_blender(root, "train")
    half = load_blender(root, "train", downscale=2)
    assert half.images.shape == (2, 4, 6, 3) and (half.height, half.width) == (4, 6)
    blocks = composite(images[1], (1, 1, 1)).reshape(4, 2, 6, 2, 3).mean(axis=(1, 3))
    np.testing.assert_allclose(half.images[1].numpy(), blocks, atol=1e-6)
    assert half.focal == pytest.approx(full.focal / 2)
    assert torch.equal(half.c2w, full.c2w)


def test_limit_spreads_frames(tmp_path):
    images = [random_rgba(k, 4, 4) for k in range(5)]
    write_scene(tmp_path, images, split="test")
    views = load_blender(tmp_path, "test", limit=2)
    assert [Path(n).name for n in views.names] == ["r_0.png", "r_2.png"]
    assert len(load_blender(tmp_path, "test", limit=9)) == 5


def test_centre_ray_of_identity_camera_looks_down_minus_z(tmp_path):
    write_scene(tmp_path, [random_rgba(0, 5, 7)])
    views = load_blender(tmp_path, "train")
    views.c2w[0] = torch.eye(4)
    views.c2w[0, :3, 3] = torch.tensor([1.0, 2.0, 3.0])
    origins, directions = camera_rays(views, 0)
    assert origins.shape == directions.shape == (5, 7, 3)
    torch.testing.assert_close(directions[2, 3], torch.tensor([0.0, 0.0, -1.0]))
    assert torch.equal(origins, torch.tensor([1.0, 2.0, 3.0]).expand(5, 7, 3))
    torch.testing.assert_close(directions.norm(dim=-1), torch.ones(5, 7))
    # x grows to the right (columns), y up (rows go down): pixel centres at +0.5
    right = directions[2, 6] / -directions[2, 6, 2]
    top = directions[0, 3] / -directions[0, 3, 2]
    torch.testing.assert_close(right[0], torch.tensor(3.0 / views.focal))
    torch.testing.assert_close(top[1], torch.tensor(2.0 / views.focal))


def test_rays_follow_the_pose(scene):
    root, _ = scene
    views = load_blender(root, "train")
    origins, directions = camera_rays(views)
    assert origins.shape == (2, 8, 12, 3)
    one_o, one_d = camera_rays(views, 1)
    assert torch.equal(one_d, directions[1]) and torch.equal(one_o, origins[1])
    torch.testing.assert_close(origins[1, 0, 0], torch.tensor([0.5, 0.0, 4.0]))
    # camera 1 is yawed by 0.3 about +y: its forward (-z) axis is -(sin 0.3, 0, cos 0.3)
    forward = (directions[1, 3:5, 5:7]).mean(dim=(0, 1))
    forward = forward / forward.norm()
    expected = -torch.tensor([math.sin(0.3), 0.0, math.cos(0.3)])
    torch.testing.assert_close(forward, expected, atol=1e-6, rtol=0)
    picked = camera_rays(views, torch.tensor([1]))[1]
    assert picked.shape == (1, 8, 12, 3) and torch.equal(picked[0], directions[1])


# ---- errors name the file and the problem --------------------------------------------------


def edit_json(root: Path, edit) -> None:
    path = root / "transforms_train.json"
    meta = json.loads(path.read_text())
    edit(meta)
    path.write_text(json.dumps(meta))


def test_missing_json(tmp_path):
    with pytest.raises(DatasetError, match=r"transforms_val\.json: file not found"):
        load_blender(tmp_path, "val")
    with pytest.raises(DatasetError, match="does not exist"):
        load_blender(tmp_path / "nowhere", "train")


def test_malformed_json(scene):
    root, _ = scene
    (root / "transforms_train.json").write_text('{"camera_angle_x": 0.7,\n "frames": [}')
    with pytest.raises(DatasetError, match=r"transforms_train\.json: malformed JSON at line 2"):
        load_blender(root, "train")


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            lambda m: m.pop("camera_angle_x"),
            r"transforms_train\.json: missing key 'camera_angle_x'",
        ),
        (lambda m: m.pop("frames"), "missing key 'frames'"),
        (lambda m: m.update(frames=[]), "'frames' must be a non-empty list"),
        (lambda m: m.update(camera_angle_x="wide"), "camera_angle_x must be a number"),
        (lambda m: m["frames"][1].pop("file_path"), r"frames\[1\] is missing key 'file_path'"),
        (lambda m: m["frames"][0].pop("transform_matrix"), "missing key 'transform_matrix'"),
        (
            lambda m: m["frames"][1].update(transform_matrix=[[1, 0, 0], [0, 1, 0], [0, 0, 1]]),
            r"frames\[1\]\.transform_matrix must be a 4x4 matrix .* shape \(3, 3\)",
        ),
        (
            lambda m: m["frames"][0].update(transform_matrix=[[1, 0], "x"]),
            r"frames\[0\]\.transform_matrix must be a 4x4 matrix",
        ),
        (
            lambda m: m["frames"][0]["transform_matrix"][3].__setitem__(0, 2.0),
            r"last row \[0, 0, 0, 1\]",
        ),
        (lambda m: m["frames"][1].update(file_path="./train/r_9"), r"frames\[1\] image not found"),
    ],
)
def test_bad_json_content(scene, edit, message):
    root, _ = scene
    edit_json(root, edit)
    with pytest.raises(DatasetError, match=message) as info:
        load_blender(root, "train")
    assert "transforms_train.json" in str(info.value)


def test_unreadable_image(scene):
    root, _ = scene
    (root / "train" / "r_1.png").write_bytes(b"not a png at all")
    with pytest.raises(DatasetError, match=r"r_1\.png: cannot read the image"):
        load_blender(root, "train")


def test_mixed_sizes(tmp_path):
    write_scene(tmp_path, [random_rgba(0, 8, 12), random_rgba(1, 8, 10)])
    with pytest.raises(DatasetError, match=r"r_1\.png: image is 10x8 .*r_0\.png is 12x8"):
        load_blender(tmp_path, "train")


def test_downscale_must_divide(scene):
    root, _ = scene
    with pytest.raises(DatasetError, match=r"r_0\.png: downscale 3 does not divide .* 12x8"):
        load_blender(root, "train", downscale=3)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"split": "training"}, "split must be one of train, val, test; got 'training'"),
        ({"downscale": 0}, "downscale must be a positive integer; got 0"),
        ({"downscale": 2.0}, "downscale must be a positive integer; got 2.0"),
        ({"downscale": True}, "downscale must be a positive integer"),
        ({"limit": 0}, "limit must be a positive integer or None"),
        ({"background": (1.0, 1.0)}, "background must be 3 numbers in"),
        ({"background": (0.0, 2.0, 0.0)}, "background must be 3 numbers in"),
    ],
)
def test_bad_arguments(scene, kwargs, message):
    root, _ = scene
    kwargs = {"split": "train", **kwargs}
    with pytest.raises(ValueError, match=message) as info:
        load_blender(root, **kwargs)
    assert not isinstance(info.value, DatasetError)  # a bad argument, not a bad file


def test_reading_images_without_pillow_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "PIL", None)  # `from PIL import Image` raises ImportError
    with pytest.raises(DatasetError) as error:
        read_png(tmp_path / "r_0.png")
    message = str(error.value)
    assert "reading images needs Pillow" in message
    assert "pip install 'densegrid[train]'" in message
    assert "pip install --no-build-isolation -e '.[train]'" in message
