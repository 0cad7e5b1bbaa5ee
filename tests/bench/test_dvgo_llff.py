"""bench/compare/dvgo/dvgo_llff.py on the CPU: the unbounded scene in LLFF's layout. The rows
read back through the project's LLFF reader (train.nerf.capture.orient.llff_poses) give the
Blender cameras, the order makes llffhold = 8 hold out exactly the test views, and, where the
anchor copy of DirectVoxGO is in the checkout, its own loader reads the folder and the config
written for it (in a subprocess: its code is never imported here)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # bench/ is a package of the checkout

from bench.compare.dvgo import dvgo_llff, dvgo_unbounded  # noqa: E402
from train.nerf.capture.orient import llff_poses, pose_errors  # noqa: E402
from train.nerf.data.blender import load_blender  # noqa: E402
from train.nerf.scenes.generate import ensure_scene  # noqa: E402

ANCHOR = ROOT / ".anchors" / "dvgo"


@pytest.fixture(scope="module")
def scene(tmp_path_factory) -> Path:
    """The unbounded scene at 24x24: 14 training, 2 test views (llffhold 8: 16 images)."""
    path = tmp_path_factory.mktemp("unbounded") / "scene"
    return ensure_scene(path, size=24, n_train=14, n_test=2, seed=0, scene="unbounded")


@pytest.fixture(scope="module")
def llff(scene, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("llff") / "llff"
    dvgo_llff.write_llff(scene, folder)
    return folder


def test_order_holds_out_exactly_the_test_views():
    order = dvgo_llff.llff_order(175, 25)
    assert len(order) == 200
    assert [i for i, (split, _) in enumerate(order) if split == "test"] == list(range(0, 200, 8))
    assert [k for split, k in order if split == "test"] == list(range(25))
    assert [k for split, k in order if split == "train"] == list(range(175))  # their order
    assert len(dvgo_llff.llff_order(168, 25)) == 193  # the fewest: the last row a test view
    for n_train in (167, 176):
        with pytest.raises(dvgo_llff.LlffError, match="take 168 to 175 training views"):
            dvgo_llff.llff_order(n_train, 25)


def test_rows_read_back_through_the_projects_llff_reader():
    gen = torch.Generator().manual_seed(1)
    q, _ = torch.linalg.qr(torch.randn(5, 3, 3, generator=gen, dtype=torch.float64))
    rotations = q * torch.linalg.det(q)[:, None, None].sign()  # proper rotations
    c2w = np.tile(np.eye(4), (5, 1, 1))
    c2w[:, :3, :3] = rotations.numpy()
    c2w[:, :3, 3] = torch.randn(5, 3, generator=gen, dtype=torch.float64).numpy()
    bounds = np.array([[0.5 + k, 50.0 + k] for k in range(5)])
    rows = dvgo_llff.llff_rows(c2w, (300, 400, 350.5), bounds)
    assert rows.shape == (5, 17)
    back, hwf, near_far = llff_poses(rows)
    np.testing.assert_allclose(back, c2w, atol=1e-12)
    np.testing.assert_allclose(hwf, np.tile([300, 400, 350.5], (5, 1)))
    np.testing.assert_allclose(near_far, bounds)
    # LLFF's first column points down the image: -y of the OpenGL camera
    np.testing.assert_allclose(rows[:, [0, 5, 10]], -c2w[:, :3, 1])


def test_the_folder_holds_the_scene_in_llff_order(scene, llff):
    array = np.load(llff / "poses_bounds.npy")
    names = sorted(p.name for p in (llff / "images").iterdir())
    assert array.shape == (16, 17) and len(names) == 16
    assert [n.split("_")[1] for n in names[::8]] == ["test", "test"]
    c2w, hwf, bounds = llff_poses(array)
    splits = {s: load_blender(scene, s) for s in ("train", "test")}
    order = dvgo_llff.llff_order(14, 2)
    for i, (split, k) in enumerate(order):
        views = splits[split]
        np.testing.assert_allclose(c2w[i], views.c2w[k].double().numpy(), atol=1e-6)
        assert tuple(hwf[i]) == (24, 24, pytest.approx(views.focal))
        with Image.open(llff / "images" / names[i]) as image:
            assert image.mode == "RGB"
            pixels = torch.tensor(np.array(image), dtype=torch.float32) / 255
        assert torch.equal(pixels, views.images[k])  # the same 8-bit values
    # depths along the optical axis: the nearest ground or object in front of cameras 0.3
    # to 2 units high, out to the ground's edge (radius 100) seen in the haze
    assert (bounds[:, 0] > 0.3).all() and (bounds[:, 0] < 3).all()
    assert (bounds[:, 1] > 10).all() and (bounds[:, 1] < 110).all()
    info = json.loads((llff / "llff_views.json").read_text())
    assert info["near_min"] == pytest.approx(bounds[:, 0].min())
    assert [r["split"] for r in info["rows"]] == [s for s, _ in order]


def test_only_outdoor_opaque_scenes(tmp_path):
    scene = ensure_scene(tmp_path / "scene", size=8, n_train=7, n_test=1, seed=0)
    with pytest.raises(dvgo_llff.LlffError, match="outdoor world's geometry"):
        dvgo_llff.write_llff(scene, tmp_path / "llff")


def test_config_text(tmp_path):
    dvgo = tmp_path / "dvgo"
    path = dvgo_unbounded.write_unbounded_config(tmp_path, dvgo, tmp_path / "llff")
    ns: dict = {}
    exec(path.read_text(), ns)
    assert ns["_base_"] == str(dvgo / "configs/nerf_unbounded/nerf_unbounded_default.py")
    assert ns["data"] == {"datadir": str(tmp_path / "llff"), "factor": 1}
    assert ns["basedir"] == str(tmp_path / "dvgo_logs") and "fine_train" not in ns
    quick = dvgo_unbounded.write_unbounded_config(tmp_path, dvgo, tmp_path / "llff", 4000)
    ns = {}
    exec(quick.read_text(), ns)
    assert ns["fine_train"] == {
        "N_iters": 4000,
        "pg_scale": [200, 400, 600, 800, 1000, 1200, 1400, 1600],
        "tv_before": 2000,
        "tv_dense_before": 2000,
    }


def test_llff_setting_config_text(tmp_path):
    dvgo = tmp_path / "dvgo"
    llff = tmp_path / "llff"
    path = dvgo_unbounded.write_unbounded_config(tmp_path, dvgo, llff, setting="llff")
    ns: dict = {}
    exec(path.read_text(), ns)
    assert ns["_base_"] == str(dvgo / "configs/llff/llff_default.py")
    assert ns["data"] == {"datadir": str(llff), "width": None, "height": None, "factor": 1}
    quick = dvgo_unbounded.write_unbounded_config(tmp_path, dvgo, llff, 3000, setting="llff")
    ns = {}
    exec(quick.read_text(), ns)
    assert ns["fine_train"] == {
        "N_iters": 3000,
        "pg_scale": [200, 400, 600, 800],
        "tv_dense_before": 1000,
    }


LOADER = """
import json, sys, types
sys.path[:0] = ["shim", "."]
sys.modules["cv2"] = types.ModuleType("cv2")  # lib/load_blender's import; LLFF needs none
sys.path.insert(0, BENCH)
import dvgo_v2_shims
dvgo_v2_shims.install()  # imageio.imread without ignoregamma, as DirectVoxGO runs
import mmcv
from lib.load_data import load_data
cfg = mmcv.Config.fromfile(CONFIG)
d = load_data(cfg.data)
keys = ("factor", "llffhold", "spherify", "unbounded_inward", "white_bkgd", "rand_bkgd")
print(json.dumps({
    "data": {k: cfg.data[k] for k in keys},
    "fine_train": {k: cfg.fine_train[k] for k in ("N_iters", "N_rand", "weight_distortion")},
    "num_voxels": cfg.fine_model_and_render.num_voxels,
    "coarse_iters": cfg.coarse_train.N_iters,
    "i_train": d["i_train"].tolist(), "i_test": list(map(int, d["i_test"])),
    "near": float(d["near"]), "far": float(d["far"]), "near_clip": float(d["near_clip"]),
    "HW": d["HW"].tolist(), "focal": float(d["Ks"][0][0][0]),
    "poses": d["poses"].tolist(), "test_images": d["images"][d["i_test"]].tolist(),
}))
"""


@pytest.mark.skipif(not (ANCHOR / "run_dvgo.py").is_file(), reason="no DirectVoxGO anchor copy")
def test_directvoxgos_loader_reads_the_folder(scene, llff, tmp_path):
    config = dvgo_unbounded.write_unbounded_config(tmp_path, ANCHOR, llff)
    code = LOADER.replace("BENCH", repr(str(ROOT / "bench" / "compare" / "dvgo"))).replace(
        "CONFIG", repr(str(config))
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ANCHOR, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert "mogrify" not in done.stdout  # factor 1: images/ itself, no downscaled copy
    assert got["data"] == {
        "factor": 1,
        "llffhold": 8,
        "spherify": True,
        "unbounded_inward": True,
        "white_bkgd": True,
        "rand_bkgd": True,
    }
    assert got["fine_train"] == {"N_iters": 40000, "N_rand": 4096, "weight_distortion": 0.01}
    assert got["num_voxels"] == 320**3 and got["coarse_iters"] == 0
    assert got["i_test"] == [0, 8] and got["i_train"] == [i for i in range(16) if i % 8]
    assert got["HW"][0] == [24, 24] and got["focal"] == pytest.approx(12 / np.tan(np.pi / 6))
    test = load_blender(scene, "test")
    np.testing.assert_allclose(np.array(got["test_images"]), test.images.numpy(), atol=1e-6)
    # its poses (recentred, spherified, rotated, scaled) are ours up to a similarity
    ours = [load_blender(scene, s) for s in ("train", "test")]
    order = dvgo_llff.llff_order(14, 2)
    truth = np.stack([ours[s == "test"].c2w[k].double().numpy() for s, k in order])
    theirs = np.tile(np.eye(4), (16, 1, 1))
    theirs[:, :3, :4] = np.array(got["poses"])
    errors = pose_errors(theirs, truth, scene_size=1.0)  # degrees, % of 1 unit
    # its float32 poses: the arccos of a trace 1e-7 from 3 reads as ~0.03 degrees
    assert errors["rotation_max"] < 0.05 and errors["centre_max"] < 1e-3, errors
    bounds = np.load(llff / "poses_bounds.npy")[:, 15:]
    scale = np.linalg.norm(np.diff(theirs[:2, :3, 3], axis=0))
    scale /= np.linalg.norm(np.diff(truth[:2, :3, 3], axis=0))
    assert got["near_clip"] == pytest.approx(0.9 * bounds.min() * scale, rel=1e-4)


@pytest.mark.skipif(not (ANCHOR / "run_dvgo.py").is_file(), reason="no DirectVoxGO anchor copy")
def test_directvoxgos_llff_setting_reads_the_folder_as_written(llff, tmp_path):
    config = dvgo_unbounded.write_unbounded_config(tmp_path, ANCHOR, llff, setting="llff")
    code = LOADER.replace("BENCH", repr(str(ROOT / "bench" / "compare" / "dvgo"))).replace(
        "CONFIG", repr(str(config))
    )
    code = code.replace('"unbounded_inward", ', '"ndc", ')
    code = code.replace('float(d["near_clip"])', 'd["near_clip"]')  # None with NDC rays
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ANCHOR, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert "mogrify" not in done.stdout  # width/height None, factor 1: images/ itself
    assert got["data"]["ndc"] is True and got["data"]["factor"] == 1
    assert got["fine_train"] == {"N_iters": 30000, "N_rand": 4096, "weight_distortion": 0.01}
    assert got["num_voxels"] == 256**3 and got["coarse_iters"] == 0
    assert got["i_test"] == [0, 8] and got["HW"][0] == [24, 24]
    assert (got["near"], got["far"], got["near_clip"]) == (0.0, 1.0, None)  # NDC's [0, 1]
