"""`grid-train render` and `grid-train view`, on one tiny radiance field trained here.

Every picture is compared with the offline render of the same camera
(`train.nerf.view.render_camera`: the camera's rays through `train.nerf.model.image.render_image`):
the PNG frames and the losslessly encoded video of a path, the viewer's frames, and the
pixels a real browser (Debian's chromium, driven by Playwright) shows after its camera was
dragged. Without chromium or Playwright that last test skips and says what is missing.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import shutil
import socket
import sys
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import torch

from train.__main__ import main as train_main
from train.camera_path import read_camera_path, shape_path
from train.checkpoint import load_checkpoint
from train.config import load_config
from train.nerf import view as nerf_view
from train.nerf.data.blender import camera_rays
from train.nerf.model.image import render_image

CPU = torch.device("cpu")
TINY = [
    "experiment=nerf",
    "device=cpu",
    "data.scene_size=16",
    "data.scene_train_views=16",
    "data.scene_test_views=2",
    "grid.resolution=16",
    "nerf.hidden=16",
    "nerf.occupancy_start=20",
    "nerf.occupancy_every=20",
    "train.steps=60",
    "train.batch_size=512",
    "eval.every=30",
    "output.checkpoint_every=0",
    "output.progress=false",
    "output.pictures=false",
]


def sets(pairs: list[str]) -> list[str]:
    return [arg for pair in pairs for arg in ("--set", pair)]


def quiet(main, argv: list[str]) -> tuple[int, str]:
    """(exit code, stderr) of a command's main, its stdout swallowed."""
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, err.getvalue()


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("viewer")
    out = root / "run"
    code, err = quiet(
        train_main,
        ["--out", str(out), *sets([*TINY, f"data.path={root / 'scene'}", "data.generate=true"])],
    )
    assert code == 0, err
    return out


@pytest.fixture(scope="module")
def trained(run):
    """(config, model, background, home cameras) of the run, on the CPU."""
    checkpoint = load_checkpoint(run)
    config = load_config(base=checkpoint["config"])
    model, background = nerf_view.load(run, config, checkpoint, CPU)
    return config, model, background, nerf_view.home(config)


def offline(trained, c2w, fov, width, height) -> np.ndarray:
    _, model, background, _ = trained
    return nerf_view.to_bytes(nerf_view.render_camera(model, background, c2w, fov, width, height))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- grid-train render --------------------------------------------------------------------


def test_a_test_camera_renders_as_the_run_renders_its_test_view(trained):
    """The camera model (vertical fov, square pixels, centred) is the test views' own."""
    config, model, background, home = trained
    from train.nerf.data.ngp import load_views

    views = load_views(Path(config.data.path), "test", background=tuple(config.data.background))
    origins, directions = camera_rays(views, 0)
    expected, _, _ = render_image(model, origins, directions, background)
    got = nerf_view.render_camera(model, background, home.c2w[0], home.fov, home.width, home.height)
    torch.testing.assert_close(got, expected.clamp(0, 1), atol=1e-5, rtol=0)


def test_render_frames_and_lossless_video_are_the_offline_renders(run, trained, tmp_path):
    pytest.importorskip("imageio_ffmpeg")
    import imageio.v2 as imageio
    from PIL import Image

    video, frames, path = tmp_path / "orbit.mp4", tmp_path / "frames", tmp_path / "orbit.json"
    argv = ["render", str(run), "--path", "spiral", "--seconds", "0.5", "--fps", "8"]
    argv += ["--width", "20", "--height", "14", "--out", str(video), "--lossless"]
    argv += ["--frames", str(frames), "--save-path", str(path)]
    code, err = quiet(train_main, argv)
    assert code == 0, err
    # stderr is no terminal here: the progress is plain lines, not tqdm's carriage returns
    assert "\r" not in err
    assert [line for line in err.splitlines() if line.startswith("render: ")] == [
        f"render: frame {n}/4 ({25 * n}%)" for n in range(1, 5)
    ], err
    _, _, _, home = trained
    cameras = shape_path("spiral", home.c2w[0], home.up, 4, home.fov, (20, 14), 8.0)
    reader = imageio.get_reader(video)
    assert reader.get_meta_data()["fps"] == 8
    for i in range(4):
        expected = offline(trained, cameras.c2w[i], float(cameras.fov[i]), 20, 14)
        png = np.asarray(Image.open(frames / f"frame_{i:05d}.png").convert("RGB"))
        np.testing.assert_array_equal(png, expected)
        np.testing.assert_array_equal(reader.get_data(i), expected)
    assert sorted(p.name for p in frames.iterdir())[-1] == "frame_00003.png"
    saved = read_camera_path(path)  # the path written is the path rendered
    torch.testing.assert_close(saved.c2w, cameras.c2w)
    assert (saved.width, saved.height, saved.fps) == (20, 14, 8.0)


def test_a_nerfstudio_camera_path_file(run, trained, tmp_path):
    _, _, _, home = trained
    c2w = home.c2w[0]
    moved = c2w.clone()
    moved[:3, 3] *= 1.2
    file = tmp_path / "camera_path.json"
    cameras = [
        {"camera_to_world": m.reshape(-1).tolist(), "fov": fov, "aspect": 1.5}
        for m, fov in ((c2w, 40.0), (moved, 55.0))
    ]
    data = {"render_height": 12, "render_width": 18, "seconds": 1.0, "camera_path": cameras}
    data |= {"camera_type": "perspective", "keyframes": [], "smoothness_value": 0.5}
    file.write_text(json.dumps(data))
    frames = tmp_path / "frames"
    code, err = quiet(
        train_main, ["render", str(run), "--path", str(file), "--frames", str(frames)]
    )
    assert code == 0, err
    from PIL import Image

    for i, (m, fov) in enumerate(((c2w, 40.0), (moved, 55.0))):
        png = np.asarray(Image.open(frames / f"frame_{i:05d}.png").convert("RGB"))
        np.testing.assert_array_equal(png, offline(trained, m, fov, 18, 12))
    assert read_camera_path(file).fps == 2.0  # two frames over one second, as nerfstudio


BAD_PATHS = {
    "not json": ("{", "not a valid camera path JSON"),
    "no size": ({"camera_path": []}, "'render_height': expected an integer >= 1"),
    "no cameras": (
        {"render_height": 8, "render_width": 8, "seconds": 1, "camera_path": []},
        "'camera_path': expected a non-empty list",
    ),
    "15 numbers": (
        {
            "render_height": 8,
            "render_width": 8,
            "seconds": 1,
            "camera_path": [{"camera_to_world": [0.0] * 15, "fov": 50}],
        },
        "camera_path[0].camera_to_world: expected 16 numbers",
    ),
    "bad fov": (
        {
            "render_height": 8,
            "render_width": 8,
            "seconds": 1,
            "camera_path": [{"camera_to_world": np.eye(4).reshape(-1).tolist(), "fov": 0}],
        },
        "camera_path[0].fov: expected degrees in (0, 180)",
    ),
    "no duration": (
        {
            "render_height": 8,
            "render_width": 8,
            "camera_path": [{"camera_to_world": np.eye(4).reshape(-1).tolist(), "fov": 50}],
        },
        "expected 'seconds' (the path's duration) or 'fps'",
    ),
}


@pytest.mark.parametrize("case", BAD_PATHS)
def test_a_bad_camera_path_file_is_one_line_naming_it(run, tmp_path, case):
    content, message = BAD_PATHS[case]
    file = tmp_path / "path.json"
    file.write_text(content if isinstance(content, str) else json.dumps(content))
    code, err = quiet(
        train_main, ["render", str(run), "--path", str(file), "--frames", str(tmp_path)]
    )
    assert code == 2
    assert err.count("\n") == 1 and f"--path: {file}: " in err and message in err, err


BAD_RENDER_ARGUMENTS = {
    ("--path", "circle", "--out", "v.mp4"): "--path: expected orbit, spiral or a camera_path.json",
    ("--path", "orbit"): "--out: expected a video file to write",
    ("--path", "orbit", "--out", "v.mp4", "--fps", "0"): "--fps: expected a number > 0",
    ("--path", "orbit", "--out", "v.mp4", "--width", "0"): "--width: expected pixels",
    (
        "--path",
        "orbit",
        "--out",
        "v.mp4",
        "--device",
        "tpu",
    ): "--device: expected auto, cpu or cuda",
}


@pytest.mark.parametrize("video_packages", [True, False], ids=["with imageio", "without imageio"])
def test_bad_render_arguments_are_one_line_naming_the_option(
    run, tmp_path, monkeypatch, video_packages
):
    """A bad option or run is named first, whether or not the video packages are installed
    (without them, a good command names --out and how to install them)."""
    if not video_packages:
        monkeypatch.setitem(sys.modules, "imageio", None)  # its import raises ImportError
    for extra, message in BAD_RENDER_ARGUMENTS.items():
        code, err = quiet(train_main, ["render", str(run), *extra])
        assert code == 2 and err.count("\n") == 1 and message in err, (extra, err)
    missing = tmp_path / "nowhere"
    code, err = quiet(train_main, ["render", str(missing), "--path", "orbit", "--out", "v.mp4"])
    assert code == 2 and f"RUN: {missing} is not a directory" in err, err
    code, err = quiet(train_main, ["render", str(tmp_path), "--path", "orbit", "--out", "v.mp4"])
    assert code == 2 and f"RUN: no checkpoint.pt in {tmp_path}" in err, err
    if not video_packages:
        code, err = quiet(train_main, ["render", str(run), "--path", "orbit", "--out", "v.mp4"])
        assert code == 2 and err.count("\n") == 1, err
        assert "--out: videos need imageio" in err and "[video]" in err, err


def test_a_run_that_is_no_radiance_field_has_no_camera_path(tmp_path):
    out = tmp_path / "field"
    argv = ["--out", str(out), *sets(["device=cpu", "grid.resolution=8", "train.steps=2"])]
    code, err = quiet(
        train_main, [*argv, *sets(["output.progress=false", "output.pictures=false"])]
    )
    assert code == 0, err
    code, err = quiet(
        train_main, ["render", str(out), "--path", "orbit", "--frames", str(tmp_path)]
    )
    assert code == 2 and "holds a 'field' run; camera paths render radiance fields (nerf" in err, (
        err
    )


# ---- grid-train view ----------------------------------------------------------------------


class FakeClient:
    """A viser client as the progressive renderer sees it: a camera, a background image."""

    def __init__(self, c2w: torch.Tensor, fov: float, width: int, height: int) -> None:
        import viser.transforms as tf

        from train.viewer.progressive import opencv_to_opengl

        self.client_id = 0
        rotation = opencv_to_opengl(c2w[:3, :3].numpy())  # OpenGL -> OpenCV: its own inverse
        self.camera = type("Camera", (), {})()
        self.camera.wxyz = tf.SO3.from_matrix(rotation).wxyz
        self.camera.position = c2w[:3, 3].numpy()
        self.camera.fov = math.radians(fov)
        self.camera.image_width, self.camera.image_height = width, height
        self.scene = self
        self.sent: list[tuple[str, np.ndarray]] = []

    def set_background_image(self, image, format, jpeg_quality=None) -> None:
        self.sent.append((format, image))


def wait_for(condition, seconds: float = 30.0) -> None:
    end = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.01)


def test_progressive_frames_preview_then_the_full_offline_render(trained):
    pytest.importorskip("viser")
    from train.viewer.progressive import FIRST_PREVIEW, ProgressiveRenderer

    _, model, background, home = trained
    client = FakeClient(home.c2w[0], home.fov, 40, 30)
    view = type("View", (), {"model": model, "background": background})()
    renderer = ProgressiveRenderer(client, nerf_view.NerfView.render.__get__(view), max_size=32)
    view.lock = threading.Lock()
    renderer.start()
    try:
        renderer.moved()
        wait_for(lambda: renderer.counts["full"] == 1)
        previews = [image for kind, image in client.sent if kind == "jpeg"]
        assert previews and max(previews[0].shape[:2]) <= FIRST_PREVIEW
        kind, image = client.sent[-1]
        assert kind == "png" and image.shape == (24, 32, 3)  # --max-size 32, aspect kept
        np.testing.assert_array_equal(image, offline(trained, home.c2w[0], home.fov, 32, 24))
        renderer.refresh()  # newer weights: rendered again
        wait_for(lambda: renderer.counts["full"] == 2)
    finally:
        renderer.stop()


@pytest.mark.parametrize("viser", [True, False], ids=["with viser", "without viser"])
def test_view_errors_are_one_line_naming_run(run, tmp_path, monkeypatch, viser):
    """A wrong RUN or option is named first; without viser, a good one names the package."""
    if viser:
        pytest.importorskip("viser")
    else:
        monkeypatch.setitem(sys.modules, "viser", None)  # its import raises ImportError
    code, err = quiet(train_main, ["view", str(tmp_path / "nowhere")])
    assert code == 2 and err.count("\n") == 1 and "RUN: " in err and "is not a directory" in err
    code, err = quiet(train_main, ["view", str(tmp_path)])
    assert code == 2 and f"RUN: no checkpoint.pt in {tmp_path}" in err, err
    code, err = quiet(train_main, ["view", str(tmp_path), "--max-size", "4"])
    assert code == 2 and "--max-size: expected pixels >= 16" in err, err
    if not viser:
        code, err = quiet(train_main, ["view", str(run)])
        assert code == 2 and err.count("\n") == 1, err
        assert "the viewer needs viser" in err and "[view]" in err, err


ONLY_CANVASES = "* { visibility: hidden !important } canvas { visibility: visible !important }"


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def test_a_browser_sees_the_offline_render_of_its_dragged_camera(run, trained):
    """Headless chromium opens the viewer, drags the camera; the full frame the viewer
    sends for the camera it ends at is that camera's offline render, and so are the
    pixels the browser shows."""
    pytest.importorskip("viser")
    browser_path = chromium()
    if browser_path is None:
        pytest.skip("needs chromium: apt-get install chromium (Debian's package)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("needs playwright (the [test] extra): pip install playwright")
    from train.viewer.server import Viewer, ViewOptions

    viewer = Viewer(run, ViewOptions(device=CPU, max_size=512), host="127.0.0.1", port=free_port())
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=browser_path, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 320, "height": 240})
            page.goto(viewer.url)
            wait_for(lambda: viewer.view.renderers)
            renderer = next(iter(viewer.view.renderers.values()))
            wait_for(lambda: renderer.counts["full"] >= 1)
            first = renderer.last.camera
            # only the scene's canvas: the panel, its plot and the notices out of the way
            page.add_style_tag(content=ONLY_CANVASES)
            page.evaluate(
                "for (const c of document.querySelectorAll('canvas'))"
                " if (c.clientWidth < window.innerWidth) c.style.display = 'none'"
            )
            page.mouse.move(100, 150)
            page.mouse.down()
            for k in range(10):
                page.mouse.move(100 + 8 * k, 150 + 3 * k)
                time.sleep(0.03)
            page.mouse.up()
            wait_for(
                lambda: renderer.counts["full"] >= 2 and renderer.finished == renderer.previewed
            )
            time.sleep(0.5)  # the browser draws the frame it was sent
            shot = page.screenshot()
            browser.close()
    finally:
        viewer.stop()
    last = renderer.last
    assert last.full and renderer.counts["preview"] >= 2
    assert not torch.equal(last.camera.c2w, first.c2w), "the drag moved the camera"
    camera = last.camera
    expected = offline(trained, camera.c2w, camera.fov, camera.width, camera.height)
    np.testing.assert_array_equal(last.image, expected)
    from PIL import Image

    shown = np.asarray(Image.open(io.BytesIO(shot)).convert("RGB")).astype(int)
    assert shown.shape == expected.shape == (240, 320, 3)
    close = (np.abs(shown - expected).max(-1) <= 2).mean()
    assert close >= 0.98, close


def test_training_with_view_serves_the_viewer_while_it_trains(tmp_path):
    pytest.importorskip("viser")
    port = free_port()
    served = []

    def probe() -> None:
        end = time.monotonic() + 60
        while not served and time.monotonic() < end:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=1) as page:
                    served.append(page.status)
            except OSError:
                time.sleep(0.2)

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    steps = ["train.steps=400", "eval.every=100", f"data.path={tmp_path / 'scene'}"]
    steps.append("data.generate=true")
    argv = ["--out", str(tmp_path / "run"), "--view", str(port), *sets([*TINY, *steps])]
    code, err = quiet(train_main, argv)
    assert code == 0, err
    assert "--view: writing the checkpoint every 100 steps" in err
    thread.join()
    assert served == [200]
    with pytest.raises(OSError):  # the viewer ended with the command
        urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=1)


@pytest.mark.parametrize("experiment", ["field", "sdf"])
def test_grid_runs_open_in_the_viewer_with_their_slices(tmp_path, experiment):
    """A field run shows its slices, an sdf run its mesh too; newer weights redraw them."""
    pytest.importorskip("viser")
    pytest.importorskip("scipy")  # the sdf run's mesh
    from train.viewer.server import Viewer, ViewOptions

    out = tmp_path / "run"
    keys = ["device=cpu", "grid.resolution=12", "train.steps=4", "eval.every=2"]
    keys += ["output.progress=false", "output.pictures=false"]
    if experiment == "sdf":
        keys += ["experiment=sdf", "points.kind=sphere", "points.count=2000"]
        keys += ["train.batch_size=1024", "train.eikonal_points=1024", "eval.points=1024"]
    code, err = quiet(train_main, ["--out", str(out), *sets(keys)])
    assert code == 0, err
    viewer = Viewer(out, ViewOptions(device=CPU), host="127.0.0.1", port=free_port())
    try:
        scene = viewer.server.scene
        assert type(viewer.view).__name__ == {"field": "FieldView", "sdf": "SdfView"}[experiment]
        for axis in "xyz":
            assert scene.get_handle_by_name(f"/slices/{axis}") is not None
        assert (scene.get_handle_by_name("/mesh") is not None) == (experiment == "sdf")
        slices = viewer.view.slices
        slices.sliders[2].value = float(slices.bounds[0][2])  # the bottom slice of z
        slices.draw(2)
        checkpoint = load_checkpoint(out)
        viewer.view.update(load_config(base=checkpoint["config"]), checkpoint)
        assert viewer.records and viewer.step == 4
    finally:
        viewer.stop()
