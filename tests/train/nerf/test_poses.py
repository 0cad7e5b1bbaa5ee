"""Poses from images (`python -m train.nerf.capture.poses`): COLMAP on views the project renders
(`train.nerf.scenes.textured`), checked against the true cameras; COLMAP models and LLFF files;
bad captures (one line naming the file, exit code 2, nothing written)."""

from __future__ import annotations

import json
import math
import shutil
import sys

import numpy as np
import pytest
import torch
from PIL import Image

from train.nerf.capture.orient import orient, pose_errors, to_llff
from train.nerf.capture.poses import main
from train.nerf.data.ngp import load_ngp
from train.nerf.scenes import textured
from train.nerf.scenes.generate import look_at_origin

VIEWS, SIZE = 32, 200
SCENE_SIZE = 3.0  # the world box [-1.5, 1.5]^3 the scene sits in

needs_pycolmap = pytest.mark.skipif(
    __import__("importlib").util.find_spec("pycolmap") is None,
    reason="pycolmap is not installed (pip install '.[capture]')",
)


def run(capsys, *args) -> tuple[int, str, str]:
    # one thread: COLMAP's multithreaded mapper is not repeatable, even with a fixed seed
    code = main([*(str(a) for a in args), "--threads", "1"])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def view_index(frame: dict) -> int:
    return int(frame["file_path"].split("_")[-1].split(".")[0])


@pytest.fixture(scope="module")
def capture(tmp_path_factory):
    """(folder of VIEWS rendered photos, their true c2w [VIEWS, 4, 4])."""
    folder = tmp_path_factory.mktemp("capture") / "photos"
    truth = textured.capture_poses(VIEWS)
    textured.write_views(truth, SIZE, folder)
    return folder, truth.numpy()


@pytest.fixture(scope="module")
def estimated(capture, tmp_path_factory):
    """(the scene folder the command wrote, its stdout)."""
    pytest.importorskip("pycolmap")
    out = tmp_path_factory.mktemp("estimated") / "scene"
    code = main([str(capture[0]), "--out", str(out)])
    assert code == 0
    return out, json.loads((out / "transforms.json").read_text())


@needs_pycolmap
def test_poses_match_the_true_cameras(capture, estimated):
    _, truth = capture
    _, meta = estimated
    frames = meta["frames"]
    assert len(frames) >= 0.95 * VIEWS
    est = np.array([f["transform_matrix"] for f in frames])
    errors = pose_errors(est, truth[[view_index(f) for f in frames]], SCENE_SIZE)
    assert errors["rotation_median"] <= 0.3, errors
    assert errors["centre_max"] <= 1.0, errors  # percent of the scene size
    assert meta["poses"]["reprojection_error"] < 1.0
    assert meta["poses"]["track_length"] > 3


@needs_pycolmap
def test_the_scene_loads_oriented_and_scaled(capture, estimated):
    out, meta = estimated
    views = load_ngp(out, "train", holdout_every=8)
    assert views.intrinsics is not None and views.images.shape[1:] == (meta["h"], meta["w"], 3)
    # the focal length of the renders, after undistortion (a pinhole stays a pinhole)
    assert abs(meta["fl_x"] - textured.focal_length(SIZE)) < 0.01 * meta["fl_x"]
    c2w = np.array([f["transform_matrix"] for f in meta["frames"]])
    up = c2w[:, :3, 1].mean(0)
    assert up[2] / np.linalg.norm(up) > 0.999  # the mean camera up is +z
    assert abs(np.linalg.norm(c2w[:, :3, 3], axis=1).max() - 4.0) < 1e-6
    # the true cameras look at the origin from a z-up sphere of radius 4: with the point
    # they look at moved to the origin and the mean up on +z, each camera's elevation is
    # the true one (the rotation about z stays free), up to the tilt of the mean up of 32
    # views, whose horizontal parts do not quite cancel (about 1 degree here)
    truth = capture[1][[view_index(f) for f in meta["frames"]]]

    def elevation(c2w):
        return np.degrees(np.arcsin(c2w[:, 2, 3] / np.linalg.norm(c2w[:, :3, 3], axis=1)))

    assert np.abs(elevation(c2w) - elevation(truth)).max() < 2.0
    assert np.array(meta["applied_transform"]).shape == (3, 4)


@needs_pycolmap
@pytest.mark.parametrize("text", [False, True])
def test_a_colmap_model_is_read(estimated, tmp_path, capsys, text):
    import pycolmap

    out, meta = estimated
    model = out / "sparse" / "0"
    if text:
        model = tmp_path / "text"
        model.mkdir()
        pycolmap.Reconstruction(out / "sparse" / "0").write_text(model)
    code, stdout, err = run(capsys, out / "images", "--out", tmp_path / "again", "--model", model)
    assert code == 0, err
    again = json.loads((tmp_path / "again" / "transforms.json").read_text())
    first = np.array([f["transform_matrix"] for f in meta["frames"]])
    second = np.array([f["transform_matrix"] for f in again["frames"]])
    assert np.abs(first - second).max() < 1e-3
    assert f"registered {len(first)} of {len(first)} images" in stdout


@needs_pycolmap
def test_a_model_naming_a_missing_image_is_refused(estimated, tmp_path, capsys):
    out, meta = estimated
    images = tmp_path / "images"
    shutil.copytree(out / "images", images)
    gone = sorted(images.iterdir())[3]
    gone.unlink()
    model = out / "sparse" / "0"
    code, _, err = run(capsys, images, "--out", tmp_path / "scene", "--model", model)
    assert code == 2
    assert err.count("\n") == 1 and gone.name in err and "not in IMAGES_DIR" in err, err
    assert not (tmp_path / "scene").exists() and list(tmp_path.iterdir()) == [images]


@needs_pycolmap
def test_a_folder_that_is_no_model_is_refused(capture, tmp_path, capsys):
    (tmp_path / "sparse").mkdir()
    (tmp_path / "sparse" / "cameras.bin").write_bytes(b"")
    folder = photos(capture, tmp_path)
    refused(
        capsys,
        folder,
        "--model",
        "no images.bin or images.txt",
        extra=["--model", tmp_path / "sparse"],
    )


@needs_pycolmap
def test_video_frames_match_sequentially(tmp_path, capsys):
    """A turntable of 16 frames 22.5 degrees apart, each matched with the next 3 only."""
    angle = torch.arange(16, dtype=torch.float64) * 2 * math.pi / 16
    elevation = math.radians(35.0)
    position = 4.0 * torch.stack(
        [
            math.cos(elevation) * angle.cos(),
            math.cos(elevation) * angle.sin(),
            torch.full_like(angle, math.sin(elevation)),
        ],
        dim=-1,
    )
    truth = look_at_origin(position)
    textured.write_views(truth, SIZE, tmp_path / "frames")
    out = tmp_path / "scene"
    code, stdout, err = run(
        capsys, tmp_path / "frames", "--out", out, "--matcher", "sequential", "--overlap", 3
    )
    assert code == 0, err
    meta = json.loads((out / "transforms.json").read_text())
    assert len(meta["frames"]) == 16
    est = np.array([f["transform_matrix"] for f in meta["frames"]])
    errors = pose_errors(est, truth.numpy()[[view_index(f) for f in meta["frames"]]], SCENE_SIZE)
    assert errors["rotation_median"] <= 0.3 and errors["centre_max"] <= 1.0, errors


def test_llff_poses_become_opengl_poses(capture, tmp_path, capsys):
    folder, truth = capture
    images = tmp_path / "llff"
    images.mkdir()
    for file in sorted(folder.iterdir())[:8]:
        shutil.copy(file, images / file.name)
    focal = textured.focal_length(SIZE)
    # LLFF's poses were computed on images twice as large: the focal length halves
    bounds = np.tile([2.0, 6.0], (8, 1))
    np.save(
        tmp_path / "poses_bounds.npy", to_llff(truth[:8], [2 * SIZE, 2 * SIZE, 2 * focal], bounds)
    )
    code, stdout, err = run(
        capsys, images, "--out", tmp_path / "scene", "--llff", tmp_path / "poses_bounds.npy"
    )
    assert code == 0, err
    meta = json.loads((tmp_path / "scene" / "transforms.json").read_text())
    expected, orientation = orient(truth[:8])
    c2w = np.array([f["transform_matrix"] for f in meta["frames"]])
    assert np.abs(c2w - expected).max() < 1e-9
    assert abs(meta["fl_x"] - focal) < 1e-9 and meta["w"] == SIZE and meta["cx"] == SIZE / 2
    assert meta["frames"][0]["near"] == pytest.approx(2.0 * orientation.scale)
    assert "registered 8 of 8 images" in stdout and "oriented" in stdout
    assert len(load_ngp(tmp_path / "scene", "test", holdout_every=4)) == 2


def test_llff_rows_must_match_the_images(capture, tmp_path, capsys):
    folder, truth = capture
    np.save(tmp_path / "pb.npy", to_llff(truth[:5], [SIZE, SIZE, 100.0], np.ones((5, 2))))
    code, _, err = run(capsys, folder, "--out", tmp_path / "scene", "--llff", tmp_path / "pb.npy")
    assert code == 2 and "5 poses but IMAGES_DIR has 32 images" in err and "pb.npy" in err


# ---- bad captures -----------------------------------------------------------------------


def photos(capture, tmp_path, count: int = 6):
    folder = tmp_path / "photos"
    folder.mkdir()
    for file in sorted(capture[0].iterdir())[:count]:
        shutil.copy(file, folder / file.name)
    return folder


def refused(capsys, folder, *names, extra=()) -> str:
    out = folder.parent / "scene"
    code, stdout, err = run(capsys, folder, "--out", out, *extra)
    assert code == 2, (stdout, err)
    assert err.count("\n") == 1 and err.startswith("python -m train.nerf.capture.poses: "), err
    for name in names:
        assert name in err, err
    assert not out.exists() and not list(folder.parent.glob(".scene.tmp*"))
    return err


def test_an_unreadable_image_is_named(capture, tmp_path, capsys):
    folder = photos(capture, tmp_path)
    (folder / "view_002.png").write_bytes(b"not a png")
    refused(capsys, folder, "view_002.png", "cannot read the image")


def test_a_duplicate_image_is_named(capture, tmp_path, capsys):
    folder = photos(capture, tmp_path)
    shutil.copy(folder / "view_001.png", folder / "view_001_copy.png")
    refused(capsys, folder, "view_001_copy.png", "the same bytes as view_001.png")


def test_too_few_images(capture, tmp_path, capsys):
    folder = photos(capture, tmp_path, count=2)
    refused(capsys, folder, str(folder), "2 images", "at least 3")


def test_a_non_empty_out_folder_is_refused(capture, tmp_path, capsys):
    folder = photos(capture, tmp_path)
    (tmp_path / "scene").mkdir()
    (tmp_path / "scene" / "keep.txt").write_text("mine")
    code, _, err = run(capsys, folder, "--out", tmp_path / "scene")
    assert code == 2 and "--out" in err and "not empty" in err
    assert (tmp_path / "scene" / "keep.txt").read_text() == "mine"


@needs_pycolmap
def test_images_without_overlap_are_refused(tmp_path, capsys):
    folder = tmp_path / "noise"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for k in range(12):
        pixels = rng.integers(0, 256, (SIZE, SIZE, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / f"noise_{k:02d}.png")
    refused(capsys, folder, str(folder), "share no structure")


@needs_pycolmap
def test_mixed_image_sizes_get_a_camera_each(capture, tmp_path, capsys):
    folder = photos(capture, tmp_path, count=VIEWS)
    smaller = sorted(folder.iterdir())[::4]  # every fourth photo at 160x160
    for file in smaller:
        with Image.open(file) as image:
            image.resize((160, 160), Image.Resampling.LANCZOS).save(file)
    code, stdout, err = run(capsys, folder, "--out", tmp_path / "scene")
    assert code == 0, err
    meta = json.loads((tmp_path / "scene" / "transforms.json").read_text())
    sizes = {f["file_path"].split("/")[-1]: f["w"] for f in meta["frames"]}
    assert len(sizes) >= 0.9 * VIEWS
    assert {sizes[f.name] < 170 for f in smaller if f.name in sizes} == {True}
    assert len(load_ngp(tmp_path / "scene", "train").sizes.unique(dim=0)) == 2


def test_a_missing_pycolmap_names_the_extra(capture, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "pycolmap", None)  # import pycolmap raises ImportError
    folder = photos(capture, tmp_path)
    err = refused(capsys, folder, "pycolmap", "densegrid[capture]")
    assert "missing dependency" in err
