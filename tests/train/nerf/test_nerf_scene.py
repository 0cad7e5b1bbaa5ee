"""The shipped radiance-field scene: its field, its renderer and the dataset it writes."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from train.nerf.data.blender import Views, camera_rays, load_blender
from train.nerf.scenes import generate
from train.nerf.scenes import procedural as scene
from train.nerf.scenes.folder import same_scene, scene_label
from train.nerf.scenes.generate import camera_poses, ensure_scene, generate_scene
from train.nerf.scenes.procedural import SCENE_BOUNDS, STEP, box_interval, render_rays, scene_field

TINY = {"size": 16, "n_train": 3, "n_val": 2, "n_test": 2, "seed": 3}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return generate_scene(tmp_path_factory.mktemp("scene") / "tiny", **TINY)


def direct_render(origin: torch.Tensor, direction: torch.Tensor, step: float) -> torch.Tensor:
    """RGBA of one ray by uniform midpoint marching of `scene_field` over the whole box."""
    near, far = box_interval(origin[None], direction[None])
    n = math.ceil((far - near).item() / step)
    t = near + step * (torch.arange(n, dtype=torch.float64) + 0.5)
    points = (origin.double() + t[:, None] * direction.double()).float()
    sigma, rgb = scene_field(points, direction.expand_as(points))
    alpha = 1 - torch.exp(-sigma.double() * step)
    weights = alpha * torch.cumprod(torch.cat([torch.ones(1), 1 - alpha[:-1]]), 0)
    colour = (weights[:, None] * rgb.double()).sum(0)
    opacity = weights.sum()
    return torch.cat([colour / opacity.clamp_min(1e-12), opacity[None]]).float()


def test_layout_is_the_blender_layout(tiny):
    names = sorted(p.name for p in tiny.iterdir())
    assert names == [
        "scene.json",
        "test",
        "train",
        "transforms_test.json",
        "transforms_train.json",
        "transforms_val.json",
        "val",
    ]
    meta = json.loads((tiny / "transforms_val.json").read_text())
    assert meta["camera_angle_x"] == pytest.approx(0.6911112)
    assert [f["file_path"] for f in meta["frames"]] == ["./val/r_0", "./val/r_1"]
    from PIL import Image

    with Image.open(tiny / "train" / "r_2.png") as image:
        assert image.mode == "RGBA" and image.size == (16, 16)
    scene = json.loads((tiny / "scene.json").read_text())
    assert scene["version"] == generate.VERSION and scene["size"] == 16
    assert scene["seed"] == 3 and scene["bounds"] == [list(b) for b in SCENE_BOUNDS]
    for split, n in (("train", 3), ("val", 2), ("test", 2)):
        views = load_blender(tiny, split)
        assert views.images.shape == (n, 16, 16, 3)
        assert views.focal == pytest.approx(8 / math.tan(0.5 * 0.6911112))


def test_same_seed_same_bytes_other_seed_other_poses(tiny, tmp_path):
    again = generate_scene(tmp_path / "again", **TINY)
    files = sorted(p.relative_to(tiny) for p in tiny.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(again) for p in again.rglob("*") if p.is_file())
    for name in files:
        assert (tiny / name).read_bytes() == (again / name).read_bytes(), name
    other = camera_poses(3, 2, 2, seed=4)["train"]
    assert not torch.allclose(other, camera_poses(3, 2, 2, seed=3)["train"])


def test_splits_have_distinct_poses_on_the_camera_sphere():
    poses = camera_poses(100, 8, 8, seed=0)
    positions = torch.cat([poses[s][:, :3, 3] for s in ("train", "val", "test")])
    torch.testing.assert_close(positions.norm(dim=-1), torch.full((116,), 4.0, dtype=torch.float64))
    gaps = torch.cdist(positions, positions) + 1e9 * torch.eye(116, dtype=torch.float64)
    assert gaps.min() > 0.05  # no two views share a pose, within or across splits
    assert (positions[:, 2] < 0).sum() > 5  # some views from below the horizon
    # each camera looks at the origin: the ray through the image centre passes it
    forward = -poses["train"][:, :3, 2]
    closest = positions[:100] + forward * (-(positions[:100] * forward).sum(-1, keepdim=True))
    assert closest.norm(dim=-1).max() < 1e-9
    rotation = poses["val"][:, :3, :3]
    identity = torch.eye(3, dtype=torch.float64).expand(8, 3, 3)
    torch.testing.assert_close(rotation.transpose(1, 2) @ rotation, identity)


def test_images_are_not_blank(tiny):
    from PIL import Image

    for split in ("train", "test"):
        for path in sorted((tiny / split).glob("*.png")):
            with Image.open(path) as image:
                alpha = np.asarray(image)[..., 3] / 255
            assert 0.1 < alpha.mean() < 0.8, path  # the scene covers part of the frame
            assert (alpha == 1).mean() > 0.05 and (alpha == 0).mean() > 0.1, path


def test_pixels_equal_a_direct_render_of_their_rays(tiny):
    views = load_blender(tiny, "test", background=(0.0, 0.0, 0.0))
    white = load_blender(tiny, "test")
    origins, directions = camera_rays(views)
    gen = torch.Generator().manual_seed(0)
    picked = 0
    for _ in range(12):
        v, i, j = (int(torch.randint(0, n, (1,), generator=gen)) for n in (2, 16, 16))
        rgba = direct_render(origins[v, i, j], directions[v, i, j], STEP / 2)
        alpha = (white.images[v, i, j] - views.images[v, i, j]).mean()  # 1 - alpha, any channel
        torch.testing.assert_close(
            views.images[v, i, j], rgba[:3] * rgba[3], atol=1.5 / 255, rtol=0
        )
        torch.testing.assert_close(1 - alpha, rgba[3], atol=1.5 / 255, rtol=0)
        picked += bool(rgba[3] > 0.5)
    assert picked >= 2  # some of the rays hit the scene


def test_halving_the_step_changes_images_by_well_under_half_a_level():
    poses = camera_poses(2, 1, 1, seed=0)["train"]
    size = 24
    focal = 0.5 * size / math.tan(0.5 * generate.CAMERA_ANGLE_X)
    views = Views(torch.empty(0), poses.float(), focal, size, size, ["", ""])
    origins, directions = (x.reshape(-1, 3) for x in camera_rays(views))
    coarse, alpha_coarse = render_rays(origins, directions, step=STEP)
    fine, alpha_fine = render_rays(origins, directions, step=STEP / 2)
    assert alpha_fine.mean() > 0.2
    on_white = (coarse + (1 - alpha_coarse)[:, None]) - (fine + (1 - alpha_fine)[:, None])
    # measured: a mean of 0.006/255 on the 100 training views at 64x64
    assert on_white.abs().mean() < 0.1 / 255
    assert on_white.abs().max() < 2 / 255


def test_field_is_zero_outside_the_bounds_and_sharp_inside():
    gen = torch.Generator().manual_seed(0)
    face = (torch.rand(20000, 3, generator=gen) * 2 - 1) * 1.5
    axis = torch.randint(0, 3, (20000,), generator=gen)
    face[torch.arange(20000), axis] = 1.5 * torch.sign(torch.randn(20000, generator=gen))
    outside = face * (1 + torch.rand(20000, 1, generator=gen))
    dirs = torch.nn.functional.normalize(torch.randn(20000, 3, generator=gen), dim=-1)
    for points in (face, outside, face * 0.8):  # the box, beyond it, and a margin inside it
        sigma, rgb = scene_field(points, dirs)
        assert torch.equal(sigma, torch.zeros(20000)) and torch.equal(rgb, torch.zeros(20000, 3))
    inside = (torch.rand(200000, 3, generator=gen) * 2 - 1) * 1.5
    sigma, rgb = scene_field(inside, dirs.repeat(10, 1))
    occupied = (sigma > 0).float().mean()
    assert 0.01 < occupied < 0.2 and sigma.max() == pytest.approx(scene.SIGMA * 2, rel=0.5)
    transition = ((sigma > 0) & (sigma < 0.99 * scene.SIGMA)).float().mean()
    assert transition < 0.3 * occupied  # most occupied space is solid, not a soft blob
    assert ((rgb >= 0) & (rgb <= 1)).all()


def test_colour_depends_on_the_view_direction():
    # a point on the big sphere's surface, seen along two directions
    centre, radius = torch.tensor(scene.SPHERES["centres"][0]), scene.SPHERES["radii"][0]
    normal = torch.nn.functional.normalize(torch.tensor([1.0, 0.5, 0.0]), dim=0)
    point = centre + radius * normal
    light = torch.nn.functional.normalize(torch.tensor(scene.LIGHT), dim=0)
    mirror = light - 2 * (light @ normal) * normal  # incoming along this, reflects to the light
    sigma, rgb = scene_field(torch.stack([point, point]), torch.stack([mirror, -normal]))
    assert sigma[0] > 0.4 * scene.SIGMA and sigma[0] == sigma[1]
    assert (rgb[0] - rgb[1]).abs().min() > 0.2  # the highlight


def test_ensure_scene_regenerates_only_when_stale(tmp_path):
    out = generate_scene(tmp_path / "s", **TINY)
    stamp = (out / "scene.json").stat().st_mtime_ns
    assert ensure_scene(out, **TINY) == out
    assert (out / "scene.json").stat().st_mtime_ns == stamp
    ensure_scene(out, **{**TINY, "size": 8})
    assert load_blender(out, "val").images.shape == (2, 8, 8, 3)
    assert not list(tmp_path.glob(".s.tmp*"))  # the staging directory is gone
    precious = tmp_path / "mine"
    precious.mkdir()
    (precious / "notes.txt").write_text("keep")
    with pytest.raises(FileExistsError, match="not a scene written by"):
        ensure_scene(precious, **TINY)
    assert (precious / "notes.txt").read_text() == "keep"
    empty = tmp_path / "empty"  # a capture not copied yet, or a typo's folder: refused too
    empty.mkdir()
    with pytest.raises(FileExistsError, match=r"it holds no capture \(looked for transforms_"):
        ensure_scene(empty, **TINY)
    assert list(empty.iterdir()) == []
    stamp = (out / "scene.json").stat().st_mtime_ns  # another generated scene: kept too
    with pytest.raises(FileExistsError, match=r"holds the generated scene 'procedural', not "):
        ensure_scene(out, **{**TINY, "size": 8, "scene": "realistic"})
    assert (out / "scene.json").stat().st_mtime_ns == stamp
    assert scene_label({"scene": "unbounded", "variant": 2}) == "unbounded, variant 2"
    assert scene_label({"scene": "scan", "mesh": "cow.off", "look": "mirror"}) == (
        "scan cow.off (mirror)"
    )
    assert not same_scene({"scene": "scan", "mesh": "cow.off"}, {"scene": "scan", "mesh": "b.off"})


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"size": 0}, "size must be an integer >= 1; got 0"),
        ({"n_train": 2.5}, "n_train must be an integer >= 1"),
        ({"n_test": 0}, "n_test must be an integer >= 1"),
        ({"seed": -1}, "seed must be an integer >= 0"),
    ],
)
def test_bad_arguments(tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=message):
        generate_scene(tmp_path / "x", **kwargs)
    assert not (tmp_path / "x").exists()


def test_command_line(tmp_path, capsys):
    out = tmp_path / "cli"
    argv = ["--out", str(out), "--size", "8", "--train", "2", "--val", "1", "--test", "1"]
    assert generate.main(argv) == 0
    assert "4 views of 8x8" in capsys.readouterr().out
    assert len(load_blender(out, "train")) == 2
    assert generate.main(["--out", str(out), "--size", "0"]) == 2
    assert "size must be" in capsys.readouterr().err


def test_progress_follows_the_views_and_the_same_pixels_come_out():
    """`render_views` reports (views rendered, all views) after each group of views, ending
    at all of them; the progress changes no pixel."""
    poses = torch.cat(list(camera_poses(3, 2, 2, 3).values()))
    calls = []
    small = 16 * 16 * 2  # two views a group
    with_progress = generate.render_views(
        poses, 16, chunk=small, progress=lambda *c: calls.append(c)
    )
    assert calls == [(2, 7), (4, 7), (6, 7), (7, 7)]
    assert torch.equal(with_progress, generate.render_views(poses, 16, chunk=small))


def test_an_interrupted_generation_leaves_nothing(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("interrupted")

    monkeypatch.setattr(generate, "render_views", broken)
    with pytest.raises(RuntimeError, match="interrupted"):
        generate_scene(tmp_path / "s", **TINY)
    assert list(tmp_path.iterdir()) == []
