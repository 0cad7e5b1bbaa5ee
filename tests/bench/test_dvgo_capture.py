"""bench/compare/dvgo/dvgo_capture.py on the CPU: tiny captures in each layout the project reads
(Blender, instant-ngp, LLFF, COLMAP) rewritten in DirectVoxGO's Blender and LLFF layouts, read
back with the project's own readers: the same poses (through the recorded scale, or the
orientation the LLFF / COLMAP import applies), intrinsics, bounds and pixels; bad captures
refused in one line naming --capture."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # bench/ is a package of the checkout

from bench.compare.dvgo import bench_dvgo, dvgo_capture, dvgo_unbounded  # noqa: E402
from bench.compare.dvgo.dvgo_llff import llff_order  # noqa: E402
from tests.train.nerf.test_blender import random_rgba, write_scene  # noqa: E402
from tests.train.nerf.test_ngp import edit, write_ngp  # noqa: E402
from train.nerf.capture.orient import llff_poses, orient, to_llff  # noqa: E402
from train.nerf.data.blender import load_blender  # noqa: E402
from train.nerf.scenes.generate import camera_poses  # noqa: E402

H, W, FOCAL = 16, 24, 10.0  # the tiny captures' camera: centred, fx = fy (SSIM: >= 11)
VIEWS = 9  # every 8th a test view: 0 and 8; llffhold 8 holds out exactly those

needs_pycolmap = pytest.mark.skipif(
    __import__("importlib").util.find_spec("pycolmap") is None,
    reason="pycolmap is not installed (pip install '.[capture]')",
)


def poses() -> np.ndarray:
    """[VIEWS, 4, 4] OpenGL c2w at radius 4, looking at the origin."""
    return camera_poses(VIEWS, 1, 1, seed=2)["train"].numpy()


def png(path: Path) -> np.ndarray:
    with Image.open(path) as image:
        return np.array(image.convert("RGBA"))


def blender_out(out: Path) -> dict:
    """The Blender layout written: split -> Views."""
    return {s: load_blender(out / "blender", s) for s in ("train", "val", "test")}


def llff_out(out: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[Path]]:
    """The LLFF layout written: c2w [N, 4, 4], hwf [N, 3], bounds [N, 2], images."""
    c2w, hwf, bounds = llff_poses(np.load(out / "llff" / "poses_bounds.npy"))
    return c2w, hwf, bounds, sorted((out / "llff" / "images").iterdir())


def test_a_blender_capture_round_trips(tmp_path):
    train = [random_rgba(k) for k in range(7)]
    test = [random_rgba(10 + k) for k in range(2)]
    capture = write_scene(write_scene(tmp_path / "cap", train, "train"), test, "test")
    info = dvgo_capture.convert(capture, tmp_path / "out")
    assert info["layout"] == "blender" and info["data_path"] == str(capture.resolve())
    views = blender_out(tmp_path / "out")
    source = {s: load_blender(capture, s) for s in ("train", "test")}
    for split in ("train", "test"):
        got, want = views[split], source[split]
        assert np.allclose(got.c2w[:, :3, :3], want.c2w[:, :3, :3], atol=1e-7)
        assert np.allclose(got.c2w[:, :3, 3] / info["scale"], want.c2w[:, :3, 3], atol=1e-5)
        assert got.focal == pytest.approx(want.focal, rel=1e-9)
        assert (got.height, got.width) == (want.height, want.width)
    assert np.array_equal(views["val"].c2w, views["test"].c2w)
    for k, image in enumerate(test):  # the same 8-bit RGBA values
        assert np.array_equal(png(tmp_path / "out" / "blender" / "test" / f"r_{k}.png"), image)
    median = np.median(np.linalg.norm(views["train"].c2w[:, :3, 3].numpy(), axis=-1))
    assert median == pytest.approx(dvgo_capture.RADIUS, rel=1e-6)  # its near 2, far 6


@pytest.fixture
def ngp(tmp_path) -> Path:
    """An instant-ngp capture of VIEWS RGB images, centred fx = fy cameras, near and far."""
    images = [random_rgba(k, H, W)[..., :3] for k in range(VIEWS)]
    root = write_ngp(tmp_path / "ngp", images, fl_x=FOCAL, fl_y=FOCAL, cx=W / 2, cy=H / 2, w=W, h=H)

    def place(meta):
        for k, frame in enumerate(meta["frames"]):
            frame |= {"transform_matrix": poses()[k].tolist(), "near": 1 + 0.1 * k, "far": 9.0}

    edit(root, place)
    return root


def test_an_ngp_capture_round_trips_in_both_layouts(ngp, tmp_path):
    info = dvgo_capture.convert(ngp, tmp_path / "out", "llff")
    assert (info["layout"], info["train_views"], info["test_views"]) == ("ngp", 7, 2)
    views, truth = blender_out(tmp_path / "out"), poses()
    test, train = [0, 8], [1, 2, 3, 4, 5, 6, 7]  # every 8th in file-name order
    assert np.allclose(views["test"].c2w[:, :3, 3] / info["scale"], truth[test, :3, 3], atol=1e-5)
    assert np.allclose(views["train"].c2w[:, :3, :3], truth[train, :3, :3], atol=1e-6)
    assert views["train"].focal == pytest.approx(FOCAL, rel=1e-6)
    c2w, hwf, bounds, files = llff_out(tmp_path / "out")
    order = [test[k] if split == "test" else train[k] for split, k in llff_order(7, 2)]
    assert np.allclose(c2w, truth[order], atol=1e-6)  # the capture's own world
    assert np.allclose(hwf, [H, W, FOCAL])
    assert np.allclose(bounds, [[1 + 0.1 * k, 9.0] for k in order])
    source = sorted((ngp / "images").iterdir())
    for row, file in zip(order, files, strict=True):
        assert np.array_equal(png(file)[..., :3], png(source[row])[..., :3])


def test_an_llff_capture_round_trips(tmp_path):
    capture = tmp_path / "llff_capture"
    (capture / "images").mkdir(parents=True)
    for k in range(VIEWS):
        Image.fromarray(random_rgba(k, H, W)[..., :3]).save(capture / "images" / f"i_{k}.png")
    bounds = np.stack([np.linspace(1.0, 2.0, VIEWS), np.full(VIEWS, 8.0)], -1)
    np.save(capture / "poses_bounds.npy", to_llff(poses(), [H, W, FOCAL], bounds))
    info = dvgo_capture.convert(capture, tmp_path / "out", "llff")
    assert info["layout"] == "llff" and Path(info["data_path"]) == tmp_path / "out" / "capture"
    expected, orientation = orient(poses())  # what the project's LLFF import applies
    c2w, hwf, got_bounds, _ = llff_out(tmp_path / "out")
    order = [(0, 8)[k] if s == "test" else k + 1 for s, k in llff_order(7, 2)]
    assert np.allclose(c2w, expected[order], atol=1e-6)
    assert np.allclose(hwf, [H, W, FOCAL])
    assert np.allclose(got_bounds, bounds[order] * orientation.scale)


def _quaternion(r: np.ndarray) -> list[float]:
    """Rotation matrix -> (w, x, y, z), COLMAP's order."""
    w = np.sqrt(max(0.0, 1 + r[0, 0] + r[1, 1] + r[2, 2])) / 2
    x = np.copysign(np.sqrt(max(0.0, 1 + r[0, 0] - r[1, 1] - r[2, 2])) / 2, r[2, 1] - r[1, 2])
    y = np.copysign(np.sqrt(max(0.0, 1 - r[0, 0] + r[1, 1] - r[2, 2])) / 2, r[0, 2] - r[2, 0])
    z = np.copysign(np.sqrt(max(0.0, 1 - r[0, 0] - r[1, 1] + r[2, 2])) / 2, r[1, 0] - r[0, 1])
    return [w, x, y, z]


def write_colmap(root: Path, points: np.ndarray) -> Path:
    """A COLMAP text model (one PINHOLE camera, VIEWS images seeing every point) in
    root/sparse/0 and its images in root/images."""
    (root / "images").mkdir(parents=True)
    (root / "sparse" / "0").mkdir(parents=True)
    lines, tracks = [], [[] for _ in points]
    for k, c2w in enumerate(poses()):
        Image.fromarray(random_rgba(k, H, W)[..., :3]).save(root / "images" / f"v_{k}.png")
        w2c = np.linalg.inv(c2w @ np.diag([1.0, -1.0, -1.0, 1.0]))  # OpenCV axes
        t = w2c[:3, 3]
        lines.append(" ".join(map(str, [k + 1, *_quaternion(w2c[:3, :3]), *t, 1, f"v_{k}.png"])))
        seen = []
        for j, p in enumerate(points):
            c = w2c[:3, :3] @ p + t
            seen.append(f"{FOCAL * c[0] / c[2] + W / 2} {FOCAL * c[1] / c[2] + H / 2} {j + 1}")
            tracks[j].append(f"{k + 1} {j}")
        lines.append(" ".join(seen))
    model = root / "sparse" / "0"
    (model / "images.txt").write_text("\n".join(lines) + "\n")
    (model / "cameras.txt").write_text(f"1 PINHOLE {W} {H} {FOCAL} {FOCAL} {W / 2} {H / 2}\n")
    rows = [
        f"{j + 1} {p[0]} {p[1]} {p[2]} 128 128 128 0.5 " + " ".join(tracks[j])
        for j, p in enumerate(points)
    ]
    (model / "points3D.txt").write_text("\n".join(rows) + "\n")
    return root


@needs_pycolmap
def test_a_colmap_capture_round_trips(tmp_path):
    points = np.random.default_rng(0).uniform(-1, 1, (20, 3))
    capture = write_colmap(tmp_path / "colmap_capture", points)
    assert dvgo_capture.capture_layout(capture) == "colmap"
    info = dvgo_capture.convert(capture, tmp_path / "out", "llff")
    expected, o = orient(poses())
    views = blender_out(tmp_path / "out")
    train = [1, 2, 3, 4, 5, 6, 7]
    assert np.allclose(views["train"].c2w[:, :3, :3], expected[train, :3, :3], atol=1e-5)
    assert np.allclose(
        views["train"].c2w[:, :3, 3] / info["scale"], expected[train, :3, 3], atol=1e-4
    )
    assert views["train"].focal == pytest.approx(FOCAL, rel=1e-6)
    # the bounds: the points' depth percentiles, computed here from the orientation itself
    c2w, hwf, bounds, _ = llff_out(tmp_path / "out")
    assert np.allclose(hwf, [H, W, FOCAL])
    moved = o.scale * (points @ o.rotation.T + o.translation)
    for pose, (near, far) in zip(c2w, bounds, strict=True):
        depth = (moved - pose[:3, 3]) @ -pose[:3, 2]
        assert np.allclose([near, far], np.percentile(depth, (0.1, 99.9)), rtol=1e-5)


def test_bad_captures_are_refused_in_one_line(tmp_path, ngp):
    with pytest.raises(dvgo_capture.CaptureError, match="--capture: .*: no such folder"):
        dvgo_capture.convert(tmp_path / "missing", tmp_path / "out")
    (tmp_path / "empty").mkdir()
    with pytest.raises(dvgo_capture.CaptureError, match="no capture found; expected"):
        dvgo_capture.convert(tmp_path / "empty", tmp_path / "out")
    with pytest.raises(dvgo_capture.CaptureError, match="layout 'nsvf': expected one of"):
        dvgo_capture.convert(ngp, tmp_path / "out", "nsvf")
    cases = [
        ({"k1": 0.1, "camera_model": "OPENCV"}, "lens distortion"),
        ({"cx": W / 2 + 1.5}, "principal point is 1.50 px off the image centre"),
        ({"fl_y": 1.1 * FOCAL}, "fl_x 10 and fl_y 11 .* differ"),
    ]
    for change, message in cases:
        edit(ngp, lambda meta, change=change: meta.update(change))
        with pytest.raises(dvgo_capture.CaptureError, match=message):
            dvgo_capture.convert(ngp, tmp_path / "out")
        edit(ngp, lambda meta, change=change: [meta.pop(k) for k in change])
        edit(ngp, lambda meta: meta.update(fl_y=FOCAL, cx=W / 2))
    edit(ngp, lambda meta: [f.pop("near") for f in meta["frames"]])
    dvgo_capture.convert(ngp, tmp_path / "out")  # the Blender layout needs no bounds
    with pytest.raises(dvgo_capture.CaptureError, match="LLFF's layout needs near and far"):
        dvgo_capture.convert(ngp, tmp_path / "out", "llff")


def test_the_benches_refuse_a_bad_capture_in_one_line(tmp_path, capsys):
    log = tmp_path / "dvgo.log"
    log.write_text("")
    argv = ["--dvgo-log", str(log), "--out", str(tmp_path / "o"), "--work", str(tmp_path / "w")]
    assert bench_dvgo.main([*argv, "--capture", str(tmp_path / "nothing")]) == 2
    assert "bench_dvgo: --capture: " in capsys.readouterr().err
    assert dvgo_unbounded.main([*argv, "--capture", str(tmp_path / "nothing")]) == 2
    assert "dvgo_unbounded: --capture: " in capsys.readouterr().err
    config = ["--set", "data.downscale=2", "--capture", str(tmp_path)]
    assert bench_dvgo.main([*argv, *config]) == 2
    assert "data.downscale = 2: the conversion keeps full-size images" in capsys.readouterr().err


def test_the_bench_reads_the_converted_capture(ngp, tmp_path, capsys):
    """bench_dvgo.py --capture up to DirectVoxGO (a log of its without renders): ours
    would train on the capture itself, DirectVoxGO's layout is in --work/capture."""
    args = bench_dvgo.parse_args(["--capture", str(ngp), "--work", str(tmp_path / "w")])
    base = bench_dvgo.load_config(args.config, ["output.progress=false"])
    sets, info = dvgo_capture.capture_scene(args, base, Path(args.work))
    config = bench_dvgo.load_config(args.config, ["output.progress=false", *sets])
    assert Path(config.data.path) == ngp.resolve() and config.data.generate is False
    assert (Path(info["blender"]) / "transforms_val.json").is_file()
    meta = dvgo_capture.capture_meta({"size": 400}, info)
    assert meta["scene"] == f"capture ngp (ngp, {W}x{H})" and meta["test_views"] == 2


def test_the_unbounded_bench_scores_directvoxgo_on_the_capture_views(ngp, tmp_path):
    """dvgo_unbounded.py --capture with a stand-in DirectVoxGO that renders 0.9 x + 0.05
    of every 8th LLFF image: scored against the capture's own test views, so the rows it
    held out are exactly those."""
    from tests.bench.test_dvgo_unbounded import fake_dvgo
    from train.metrics import psnr
    from train.nerf.data.ngp import load_views

    out, work = tmp_path / "out", tmp_path / "work"
    argv = ["--dvgo", str(fake_dvgo(tmp_path)), "--capture", str(ngp), "--dvgo-only"]
    argv += ["--out", str(out), "--work", str(work), "--set", "device=cpu"]
    assert dvgo_unbounded.main(argv) == 0
    result = json.loads((out / "dvgo_unbounded.json").read_text())
    truth = load_views(ngp, "test").images.double()  # the capture read as ours reads it
    renders = ((truth * 0.9 + 0.05).clamp(0, 1) * 255 + 0.5).floor() / 255
    want = np.mean(
        [psnr(float((r - t).square().mean()), 1.0) for r, t in zip(renders, truth, strict=True)]
    )
    assert result["dvgo_scored"]["views"] == 2
    assert result["dvgo_scored"]["psnr"] == pytest.approx(want, abs=1e-9)
    assert result["llff"]["layout"] == "ngp" and result["llff"]["near_min"] == pytest.approx(1.0)


ANCHOR = ROOT / ".anchors" / "dvgo"  # a copy of DirectVoxGO's code, where the GPU runs are
BLENDER_LOADER = """
import json, sys, types
sys.path[:0] = ["shim", "."]
sys.modules["cv2"] = types.ModuleType("cv2")  # lib/load_blender's import; half_res needs it
sys.path.insert(0, BENCH)
import dvgo_v2_shims
dvgo_v2_shims.install()  # imageio.imread without ignoregamma, as DirectVoxGO runs
import mmcv
from lib.load_data import load_data
d = load_data(mmcv.Config.fromfile(CONFIG).data)
print(json.dumps({
    "i_train": list(map(int, d["i_train"])), "i_test": list(map(int, d["i_test"])),
    "near": float(d["near"]), "far": float(d["far"]), "HW": d["HW"].tolist(),
    "focal": float(d["Ks"][0][0][0]), "cx": float(d["Ks"][0][0][2]),
    "poses": d["poses"].tolist(), "test_images": d["images"][d["i_test"]].tolist(),
}))
"""


@pytest.mark.skipif(not (ANCHOR / "run_dvgo.py").is_file(), reason="no DirectVoxGO anchor copy")
def test_directvoxgos_blender_loader_reads_the_converted_capture(ngp, tmp_path):
    import subprocess

    from train.nerf.data.ngp import load_views

    info = dvgo_capture.convert(ngp, tmp_path / "out")
    config = bench_dvgo.write_dvgo_config(tmp_path, ANCHOR, Path(info["blender"]))
    code = BLENDER_LOADER.replace("BENCH", repr(str(ROOT / "bench" / "compare" / "dvgo")))
    code = code.replace("CONFIG", repr(str(config)))
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ANCHOR, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(got["i_train"]) == 7 and len(got["i_test"]) == 2
    assert (got["near"], got["far"]) == (2.0, 6.0) and got["HW"][0] == [H, W]
    assert got["focal"] == pytest.approx(FOCAL, rel=1e-5) and got["cx"] == W / 2
    test = load_views(ngp, "test")  # what ours is scored on, DirectVoxGO's test images
    np.testing.assert_allclose(np.array(got["test_images"]), test.images.numpy(), atol=1e-6)
    poses = np.array(got["poses"])[got["i_test"]]
    np.testing.assert_allclose(poses[:, :3, :3], test.c2w[:, :3, :3].numpy(), atol=1e-6)
    np.testing.assert_allclose(
        poses[:, :3, 3], info["scale"] * test.c2w[:, :3, 3].numpy(), atol=1e-5
    )
