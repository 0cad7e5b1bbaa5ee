"""The instant-ngp / nerfstudio reader (`train.nerf.data.ngp`) and its cameras
(`train.nerf.data.cameras`) on hand-made scenes, and a scene trained in both layouts to the
same PSNR."""

from __future__ import annotations

import contextlib
import io
import json
import math
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image  # installed with matplotlib

from tests.train.nerf.test_blender import pose, random_rgba, write_scene
from train.__main__ import main
from train.config import ConfigError, load_config
from train.nerf.data.blender import DatasetError, Views, camera_rays, load_blender
from train.nerf.data.cameras import distort, pixel_directions, undistort
from train.nerf.data.ngp import layout, load_ngp, load_views, ngp_box

W, H = 12, 8


def write_ngp(root: Path, images: list[np.ndarray], ext: str = ".png", **top) -> Path:
    """transforms.json (`top` at the top level, explicit intrinsics by default) and one
    image per array ([H, W, 3] or [H, W, 4] uint8) as images/f_{k}{ext}."""
    (root / "images").mkdir(parents=True, exist_ok=True)
    frames = []
    for k, image in enumerate(images):
        name = f"images/f_{k}{ext}"
        Image.fromarray(image).save(root / name, **({"quality": 95} if ext == ".jpg" else {}))
        frames.append({"file_path": name, "transform_matrix": pose((0.5 * k, 0, 4), 0.3 * k)})
    meta = {"fl_x": 10.0, "fl_y": 11.0, "cx": 6.5, "cy": 3.5, "w": W, "h": H, **top}
    (root / "transforms.json").write_text(json.dumps({**meta, "frames": frames}, indent=2))
    return root


def edit(root: Path, change) -> None:
    path = root / "transforms.json"
    meta = json.loads(path.read_text())
    change(meta)
    path.write_text(json.dumps(meta))


def rgb(seed: int, height=H, width=W) -> np.ndarray:
    return random_rgba(seed, height, width)[..., :3]


def lists(train, test) -> dict:
    return {
        "train_filenames": [f"images/f_{k}.png" for k in train],
        "test_filenames": [f"images/f_{k}.png" for k in test],
    }


# ---- reading ---------------------------------------------------------------------------------


def test_reads_rgb_and_rgba_images_poses_and_intrinsics(tmp_path):
    rgba = random_rgba(1, H, W)
    write_ngp(tmp_path, [rgb(0), rgba, rgb(2)], **lists([0, 1], [2]))
    bg = (0.2, 0.5, 0.9)
    views = load_ngp(tmp_path, "train", background=bg)
    assert isinstance(views, Views) and len(views) == 2
    assert views.images.shape == (2, H, W, 3) and views.images.dtype == torch.float32
    np.testing.assert_allclose(views.images[0].numpy(), rgb(0) / 255, atol=1e-6)  # no alpha
    x = rgba.astype(np.float64) / 255  # RGBA: composited like Blender
    expected = x[..., :3] * x[..., 3:] + np.asarray(bg) * (1 - x[..., 3:])
    np.testing.assert_allclose(views.images[1].numpy(), expected, atol=1e-6)
    np.testing.assert_allclose(views.c2w[1].numpy(), pose((0.5, 0, 4), 0.3), atol=1e-7)
    assert views.intrinsics.tolist() == [[10.0, 11.0, 6.5, 3.5]] * 2
    assert views.distortion is None and views.names[1].endswith("f_1.png")
    assert [Path(n).name for n in load_ngp(tmp_path, "test").names] == ["f_2.png"]


def test_rays_use_fx_fy_cx_cy(tmp_path):
    write_ngp(tmp_path, [rgb(0), rgb(1)], **lists([0], [1]))
    views = load_ngp(tmp_path, "train")
    views.c2w[0] = torch.eye(4)
    _, directions = camera_rays(views, 0)  # [H, W, 3]
    d = directions / -directions[..., 2:]
    j, i = 9, 6  # pixel centre (9.5, 6.5)
    torch.testing.assert_close(d[i, j, :2], torch.tensor([(9.5 - 6.5) / 10, -(6.5 - 3.5) / 11]))
    torch.testing.assert_close(directions.norm(dim=-1), torch.ones(H, W))


def test_jpeg_images_are_read(tmp_path):
    image = np.zeros((H, W, 3), np.uint8)
    image[:, : W // 2] = (200, 30, 90)
    write_ngp(tmp_path, [image, image], ext=".jpg")
    edit(tmp_path, lambda m: m.update(train_filenames=["images/f_0.jpg"]))
    edit(tmp_path, lambda m: m.update(test_filenames=["images/f_1.jpg"]))
    views = load_ngp(tmp_path, "train")
    assert np.abs(views.images[0].numpy() - image / 255).mean() < 0.02  # JPEG is lossy


def test_intrinsics_per_frame_angles_and_defaults(tmp_path):
    write_ngp(tmp_path, [rgb(k) for k in range(3)], **lists([0, 1, 2], [0]))

    def change(meta):
        for key in ("fl_x", "fl_y", "cx", "cy", "w", "h"):
            del meta[key]
        meta["camera_angle_x"] = 1.2
        meta["frames"][1].update(fl_x=20.0, cx=5.0, w=W, h=H)
        meta["frames"][2].update(camera_angle_x=0.9, camera_angle_y=0.7)

    edit(tmp_path, change)
    views = load_ngp(tmp_path, "train")
    fx0 = 0.5 * W / math.tan(0.6)  # camera_angle_x; fl_y = fl_x; centre of the image
    fx2, fy2 = 0.5 * W / math.tan(0.45), 0.5 * H / math.tan(0.35)
    expected = [[fx0, fx0, W / 2, H / 2], [20.0, 20.0, 5.0, H / 2], [fx2, fy2, W / 2, H / 2]]
    np.testing.assert_allclose(views.intrinsics.numpy(), expected, rtol=1e-12)


def test_downscale_scales_the_intrinsics(tmp_path):
    write_ngp(tmp_path, [rgb(0), rgb(1)], **lists([0], [1]))
    half = load_ngp(tmp_path, "train", downscale=2)
    assert half.images.shape == (1, H // 2, W // 2, 3)
    assert half.intrinsics.tolist() == [[5.0, 5.5, 3.25, 1.75]]


def test_holdout_every_in_file_path_order(tmp_path):
    write_ngp(tmp_path, [rgb(k, 4, 4) for k in range(10)], w=4, h=4)
    edit(tmp_path, lambda m: random.Random(0).shuffle(m["frames"]))  # any order in the json
    names = {
        s: [Path(n).stem for n in load_ngp(tmp_path, s, holdout_every=4).names]
        for s in ("train", "test", "val")
    }
    # sorted by file_path: f_0, f_1, f_2, ..., f_9 (one digit); 0, 4, 8 held out
    assert names["test"] == names["val"] == ["f_0", "f_4", "f_8"]
    assert names["train"] == ["f_1", "f_2", "f_3", "f_5", "f_6", "f_7", "f_9"]
    assert len(load_ngp(tmp_path, "test")) == 2  # every 8th by default: f_0, f_8


def test_split_lists_and_fallbacks(tmp_path):
    write_ngp(tmp_path, [rgb(k) for k in range(4)])
    edit(tmp_path, lambda m: m.update(train_filenames=["./images/f_3.png", "images/f_1.png"]))
    edit(tmp_path, lambda m: m.update(val_filenames=["images/f_2.png"]))
    stems = [Path(n).stem for n in load_ngp(tmp_path, "train").names]
    assert stems == ["f_1", "f_3"]  # file_path order, "./" ignored
    assert [Path(n).stem for n in load_ngp(tmp_path, "test").names] == ["f_2"]  # val stands in


def test_png_extension_may_be_left_out(tmp_path):
    write_ngp(tmp_path, [rgb(0), rgb(1)])
    edit(tmp_path, lambda m: m["frames"][1].update(file_path="./images/f_1"))
    assert load_ngp(tmp_path, "train").names[0].endswith("f_1.png")


def test_to_ngp_and_bounds_command_lines(tmp_path, capsys):
    from train.nerf.capture import bounds
    from train.nerf.data import to_ngp

    write_scene(tmp_path / "blender", [random_rgba(0), random_rgba(1)], split="train")
    write_scene(tmp_path / "blender", [random_rgba(2)], split="test")
    out = tmp_path / "ngp"
    assert to_ngp.main(["--scene", str(tmp_path / "blender"), "--out", str(out)]) == 0
    assert to_ngp.main(["--scene", str(tmp_path / "nowhere"), "--out", str(out)]) == 2
    capsys.readouterr()
    for split in ("train", "test"):
        a, b = load_blender(tmp_path / "blender", split), load_ngp(out, split)
        assert torch.equal(a.c2w, b.c2w) and (a.images - b.images).abs().max() <= 0.5 / 255 + 1e-6
    assert bounds.main([str(out)]) == 0
    printed = capsys.readouterr().out
    assert "3 cameras (ngp layout)" in printed and "suggested: --set 'grid.bounds=" in printed


def test_layout_detection(tmp_path):
    blender = write_scene(tmp_path / "blender", [random_rgba(0)])
    ngp = write_ngp(tmp_path / "ngp", [rgb(0), rgb(1)])
    assert layout(blender) == "blender" and layout(ngp) == "ngp"
    (ngp / "transforms_train.json").write_text((blender / "transforms_train.json").read_text())
    assert layout(ngp) == "blender"  # both: the Blender files win
    assert len(load_views(blender, "train")) == 1


def test_default_world_and_the_boxes_it_means(tmp_path):
    write_ngp(tmp_path, [rgb(0), rgb(1)], scale=0.33, offset=[0.5, 0.5, 0.5], aabb_scale=4)
    assert len(load_ngp(tmp_path, "train")) == 1
    unit, aabb = ngp_box({"aabb_scale": 4})
    np.testing.assert_allclose(unit, [[-0.5 / 0.33] * 3, [0.5 / 0.33] * 3])
    np.testing.assert_allclose(aabb, [[-2 / 0.33] * 3, [2 / 0.33] * 3])


# ---- cameras: lens distortion ----------------------------------------------------------------

LENSES = [
    [-0.05, 0.01, 0.0002, -0.0001, 0.0],  # a phone camera
    [-0.28, 0.07, 0.001, -0.0005, 0.0],  # a wide lens, strong barrel
    [0.15, -0.02, -0.002, 0.003, 0.004],  # pincushion, k3
]


@pytest.mark.parametrize("lens", LENSES)
def test_undistort_inverts_distort(lens):
    gen = torch.Generator().manual_seed(0)
    x, y = (torch.rand(2, 1000, generator=gen, dtype=torch.float64) - 0.5) * 1.2  # +-33 degrees
    k = torch.tensor(lens, dtype=torch.float64)
    x_d, y_d = distort(x, y, k)
    assert (x_d - x).abs().max() > 1e-4  # the lens does distort
    u, v = undistort(x_d, y_d, k)
    torch.testing.assert_close(u, x, atol=1e-12, rtol=0)
    torch.testing.assert_close(v, y, atol=1e-12, rtol=0)


def test_distorted_rays_project_back_onto_their_pixels(tmp_path):
    k1, k2, p1, p2 = LENSES[1][:4]
    write_ngp(tmp_path, [rgb(0), rgb(1)], camera_model="OPENCV", k1=k1, k2=k2, p1=p1, p2=p2)
    views = load_ngp(tmp_path, "test")
    assert views.distortion.tolist() == [[k1, k2, p1, p2, 0.0]]
    views.c2w[0] = torch.eye(4)
    _, d = camera_rays(views, 0)
    # back to OpenCV axes (y down, z forward), normalise, distort, to pixels
    x, y = (d[..., 0] / -d[..., 2]).double(), (-d[..., 1] / -d[..., 2]).double()
    x_d, y_d = distort(x.reshape(1, -1), y.reshape(1, -1), views.distortion)
    u = (10.0 * x_d + 6.5).reshape(H, W)
    v = (11.0 * y_d + 3.5).reshape(H, W)
    centres_u = torch.arange(W, dtype=torch.float64) + 0.5
    centres_v = torch.arange(H, dtype=torch.float64) + 0.5
    torch.testing.assert_close(u, centres_u.expand(H, W), atol=1e-4, rtol=0)  # float32 rays
    torch.testing.assert_close(v, centres_v[:, None].expand(H, W), atol=1e-4, rtol=0)


def test_blender_intrinsics_give_the_blender_rays(tmp_path):
    write_scene(tmp_path, [random_rgba(0), random_rgba(1)])
    views = load_blender(tmp_path, "train")
    assert views.intrinsics is None  # the Blender path is unchanged
    k = torch.tensor([[views.focal, views.focal, W / 2, H / 2]] * 2, dtype=torch.float64)
    general = Views(views.images, views.c2w, views.focal, H, W, views.names, k)
    for a, b in zip(camera_rays(views), camera_rays(general), strict=True):
        torch.testing.assert_close(a, b, atol=2e-7, rtol=0)
    assert pixel_directions(k, None, H, W).shape == (2, H, W, 3)


# ---- errors: one line naming the file and the key --------------------------------------------


def outside(meta):
    meta["frames"][1]["file_path"] = "../elsewhere/f_1.png"


def drop_focal(meta):
    meta.pop("fl_x"), meta.pop("fl_y")


BOX = r"\[\[-1\.0, -1\.0, -1\.0\], \[1\.0, 1\.0, 1\.0\]\]"
MISSING = r"'images/f_7\.png' is not the file_path of any frame"


@pytest.mark.parametrize(
    "change, message",
    [
        (drop_focal, r"missing key 'fl_x' \(or 'camera_angle_x'\)"),
        (lambda m: m.update(fl_x="wide"), r"fl_x must be a number; got 'wide'"),
        (lambda m: m["frames"][1].update(fl_y=-3), r"frames\[1\]\.fl_y must be positive"),
        (lambda m: m["frames"][0].update(camera_angle_x=4.0), r"frames\[0\]\.camera_angle_x must"),
        (lambda m: m.update(w=12.5), r"w must be a whole number of pixels"),
        (
            lambda m: m["frames"][1].update(file_path="images/f_9.png"),
            r"frames\[1\]\.file_path: image not found",
        ),
        (outside, r"frames\[1\]\.file_path '\.\./elsewhere/f_1\.png' is outside"),
        (
            lambda m: m["frames"][0].update(file_path="/etc/passwd"),
            r"frames\[0\]\.file_path '/etc/passwd' is outside",
        ),
        (lambda m: m.update(scale=0.5), r"scale = 0\.5: .* set grid\.bounds = " + BOX),
        (
            lambda m: m.update(offset=[0.5, 0.5, 0.0]),
            r"offset = \[0\.5, 0\.5, 0\.0\]: .*\[1\.5152, 1\.5152, 3\.0303\]",
        ),
        (lambda m: m.update(aabb_scale=0), r"aabb_scale must be a positive number"),
        (lambda m: m.update(camera_model="OPENCV_FISHEYE"), r"'OPENCV_FISHEYE' is not supported"),
        (lambda m: m["frames"][1].update(is_fisheye=True), r"frames\[1\]\.is_fisheye: fisheye"),
        (lambda m: m.update(k4=0.01), r"k4 = 0\.01: only OpenCV's k1, k2, p1, p2 and k3"),
        (lambda m: m.update(test_filenames=["images/f_7.png"]), r"test_filenames\[0\] " + MISSING),
        (lambda m: m.pop("test_filenames"), r"missing key 'test_filenames' \(the file has split"),
        (lambda m: m.update(train_filenames=[]), r"train_filenames must be a non-empty list"),
        (
            lambda m: m["frames"][0].pop("transform_matrix"),
            r"frames\[0\] is missing key 'transform_matrix'",
        ),
    ],
)
def test_bad_transforms_json(tmp_path, change, message):
    write_ngp(tmp_path, [rgb(0), rgb(1), rgb(2)], **lists([0, 1], [2]))
    edit(tmp_path, change)
    with pytest.raises(DatasetError, match=message) as info:
        load_ngp(tmp_path, "train")
        load_ngp(tmp_path, "test")
    assert str(info.value).startswith(f"{tmp_path / 'transforms.json'}: ")
    assert "\n" not in str(info.value)


def test_image_size_must_match_w_and_h(tmp_path):
    write_ngp(tmp_path, [rgb(0), rgb(1, H, W + 2)], **lists([0, 1], [0]))
    says = r"f_1\.png: image is 14x8 \(WxH\) but transforms\.json says w = 12"
    with pytest.raises(DatasetError, match=says):
        load_ngp(tmp_path, "train")


def test_frames_of_their_own_size_are_padded(tmp_path):
    wide = rgb(1, H, W + 2)
    write_ngp(tmp_path, [rgb(0), wide], **lists([0, 1], [0]))
    edit(tmp_path, lambda m: m["frames"][1].update(w=W + 2, cx=7.5))  # the intrinsics say so
    views = load_ngp(tmp_path, "train")
    assert (views.height, views.width) == (H, W + 2) and views.sizes.tolist() == [
        [H, W],
        [H, W + 2],
    ]
    mask = views.mask()
    assert mask[1].all() and mask[0, :, :W].all() and not mask[0, :, W:].any()
    assert (views.images[0, :, W:] == 0).all()
    np.testing.assert_allclose(views.images[1].numpy(), wide / 255, atol=1e-6)
    alone = load_ngp(tmp_path, "test")  # view 0 alone: no padding
    assert alone.sizes is None and alone.mask() is None
    for a, b in zip(camera_rays(views, 0), camera_rays(alone, 0), strict=True):
        assert torch.equal(a[:, :W], b)  # the padding does not move the view's own rays


def test_the_experiment_trains_and_tests_on_own_pixels_only(tmp_path):
    from train.nerf.experiment import NerfExperiment

    write_ngp(tmp_path, [rgb(0), rgb(1, H, W + 2), rgb(2, H - 2, W)], **lists([0, 1], [2, 1]))
    edit(tmp_path, lambda m: m["frames"][1].update(w=W + 2))
    edit(tmp_path, lambda m: m["frames"][2].update(h=H - 2))
    overrides = ["experiment=nerf", "device=cpu", f"data.path={tmp_path}", "data.generate=false"]
    overrides += ["grid.resolution=8", "nerf.hidden=8", "output.picture_views=2"]
    config = load_config(None, overrides)
    exp = NerfExperiment(config, torch.device("cpu"), torch.Generator(), None)
    assert exp.rays.colors.shape == (H * W + H * (W + 2), 3)  # no padding among the training rays
    quality = exp.evaluate(0.0)
    assert all(math.isfinite(p) for p in quality["view_psnr"])
    assert [r.shape[:2] for r, _ in exp.renders] == [(H, W + 2), (H - 2, W)]  # f_1, f_2
    assert exp.truth(1).shape == (H - 2, W, 3)
    images = exp.tensorboard_images()
    assert images["test_view/1"].shape == (H - 2, 2 * W, 3)
    from train.nerf.pictures import write_test_views, write_turntable

    summary = {**quality, "resolution": [8] * 3, "steps": 0, "train_seconds": 0.0}
    write_test_views(tmp_path / "views.png", exp, {**summary, "device": "cpu"})
    write_turntable(tmp_path / "turntable.gif", exp, 2)
    with Image.open(tmp_path / "turntable.gif") as gif:
        assert gif.size == (W + 2, H)  # the first test view's camera (f_1)


def test_unreadable_image_and_missing_json(tmp_path):
    write_ngp(tmp_path, [rgb(0), rgb(1)], **lists([0], [1]))
    (tmp_path / "images" / "f_0.png").write_bytes(b"not an image")
    with pytest.raises(DatasetError, match=r"f_0\.png: cannot read the image"):
        load_ngp(tmp_path, "train")
    with pytest.raises(DatasetError, match=r"transforms\.json: file not found"):
        load_ngp(tmp_path / "nowhere", "train")


def test_holdout_every_is_checked():
    with pytest.raises(ConfigError, match=r"^data\.holdout_every: expected an integer >= 2"):
        load_config(None, ["experiment=nerf", "data.holdout_every=1"])
    with pytest.raises(ValueError, match="holdout_every must be an integer >= 2"):
        load_ngp(".", "train", holdout_every=1)


def test_a_bad_file_stops_the_command_with_one_line(tmp_path, capsys):
    write_ngp(tmp_path / "scene", [rgb(0), rgb(1)])
    edit(tmp_path / "scene", lambda m: [m.pop(k) for k in ("fl_x", "fl_y")])
    args = ["experiment=nerf", "device=cpu", f"data.path={tmp_path / 'scene'}"]
    args += ["data.generate=false", "output.progress=false"]
    out = tmp_path / "run"
    assert main(["--out", str(out), *[a for s in args for a in ("--set", s)]]) == 2
    err = capsys.readouterr().err.strip()
    json_path = tmp_path / "scene" / "transforms.json"
    assert err.startswith(f"grid-train: file error: data.path: {json_path}: missing key 'fl_x'")
    assert "\n" not in err and not out.exists()


# ---- the same scene in both layouts trains to the same PSNR ---------------------------------

SHORT = [
    "experiment=nerf",
    "device=cpu",
    "data.generate=false",
    "grid.resolution=16",
    "grid.bounds=[[-1.5, -1.5, -1.5], [1.5, 1.5, 1.5]]",
    "nerf.hidden=32",
    "nerf.occupancy_threshold=1e-3",
    "nerf.occupancy_start=40",
    "nerf.occupancy_every=20",
    "train.steps=200",
    "train.batch_size=512",
    "train.upsample_steps=[100]",
    "train.upsample_resolutions=[24]",
    "eval.every=200",
    "output.checkpoint_every=0",
    "output.progress=false",
    "output.pictures=false",
]


def train_psnr(scene: Path, out: Path) -> float:
    args = [a for s in [*SHORT, f"data.path={scene}"] for a in ("--set", s)]
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["--out", str(out), *args]) == 0
    return json.loads((out / "summary.json").read_text())["psnr"]


def test_the_ngp_layout_trains_to_the_blender_psnr(tmp_path):
    from train.nerf.data.to_ngp import write_ngp as convert
    from train.nerf.scenes.generate import generate_scene

    blender = generate_scene(tmp_path / "blender", size=16, n_train=20, n_val=1, n_test=2)
    ngp = convert(blender, tmp_path / "ngp")  # RGB PNGs on white, fl_x ... h, split lists
    edit(ngp, lambda m: random.Random(0).shuffle(m["frames"]))  # the reader sorts them
    meta = json.loads((ngp / "transforms.json").read_text())
    assert {"fl_x", "fl_y", "cx", "cy", "w", "h", "train_filenames", "test_filenames"} <= set(meta)
    with Image.open(ngp / meta["frames"][0]["file_path"]) as image:
        assert image.mode == "RGB"
    from train.nerf.capture.bounds import read_poses, suggest_bounds

    box = suggest_bounds(read_poses(ngp))  # cameras 4 from the origin, looking at it
    np.testing.assert_allclose(box, [[-1.5] * 3, [1.5] * 3], atol=1e-6)
    psnr_blender = train_psnr(blender, tmp_path / "run_blender")
    psnr_ngp = train_psnr(ngp, tmp_path / "run_ngp")
    # Measured 14.52 and 14.52 dB (the untrained model: about 9 dB); the images differ by
    # the 8-bit rounding of the composite (at most 0.5/255), the rays by float rounding.
    assert psnr_blender > 12.5, psnr_blender
    assert abs(psnr_ngp - psnr_blender) <= 0.3, (psnr_ngp, psnr_blender)
