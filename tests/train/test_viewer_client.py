"""bench/training/viser_client.py, the browser-free viser client of bench/training/bench_viewer.py
--client python and bench/training/view_cost.py: it connects to `grid-train view` on a tiny radiance
field, and the full frames it receives are, pixel for pixel, the offline renders of the cameras it
sent. Skips without viser."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # bench/ is a package of the checkout

pytest.importorskip("viser")

from bench.training import bench_viewer, view_cost  # noqa: E402
from bench.training.viser_client import CAMERA_INTERVAL, ViserClient, opengl_camera  # noqa: E402
from tests.train.test_viewer import TINY, quiet, sets  # noqa: E402
from train.__main__ import main as train_main  # noqa: E402
from train.nerf.view import render_camera, to_bytes  # noqa: E402
from train.viewer.server import Viewer, ViewOptions  # noqa: E402


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("client")
    out = root / "run"
    steps = ["train.steps=30", "eval.every=30", f"data.path={root / 'scene'}", "data.generate=true"]
    code, err = quiet(train_main, ["--out", str(out), *sets([*TINY, *steps])])
    assert code == 0, err
    return out


def offline(viewer: Viewer, message: dict, width: int, height: int) -> np.ndarray:
    camera = opengl_camera(message)
    view = viewer.view
    rgb = render_camera(view.model, view.background, camera.c2w, camera.fov, width, height)
    return to_bytes(rgb)


def test_the_client_receives_the_offline_render_of_its_cameras(run):
    options = ViewOptions(device=torch.device("cpu"), max_size=48)
    viewer = Viewer(run, options, host="127.0.0.1", port=bench_viewer.free_port())
    client = None
    try:
        client = ViserClient(viewer.url, 64, 48)
        assert client.replayed.wait(10)
        assert set(client.home) == {"position", "look_at", "up", "fov"}  # the run's camera
        home = client.camera()
        for _ in range(2):  # as the web client: on connecting, then the server's camera
            client.send_camera(**home)
            time.sleep(CAMERA_INTERVAL)
        bench_viewer.wait_for(lambda: viewer.view.renderers, 10)
        renderer = next(iter(viewer.view.renderers.values()))
        for turn in (0.0, 25.0):
            if turn:  # a short drag about the up axis
                bench_viewer.drag(client, home, 5.0, turn, steps=5)
            frame = bench_viewer.settle(renderer, client)
            assert (frame.format, frame.width, frame.height) == ("png", 48, 36)  # aspect kept
            expected = offline(viewer, client.sent[-1][1], 48, 36)
            np.testing.assert_array_equal(client.last_image, expected)
            np.testing.assert_array_equal(renderer.last.image, expected)
        assert any(f.format == "jpeg" for f in client.frames)  # previews while it moved
    finally:
        if client is not None:
            client.close()
        viewer.stop()
    assert client.closed.is_set()


def test_the_train_cost_table_compares_each_mode_with_plain():
    def row(mode: str, rate: float, client=None) -> dict:
        return {"mode": mode, "steps_per_second": rate, "command_seconds": 10.0, "client": client}

    frames = {"connected": True, "previews": 3, "full_frames": 4}
    rows = [row("plain", 10.0), row("plain", 12.0), row("view", 11.0)]
    rows += [row("still", 9.9, frames), row("still", 10.1, frames)]
    lines = view_cost.table(rows).splitlines()
    assert lines[2].startswith("| plain | 10.00, 12.00 | 11.00 | +0.0% |")
    assert lines[3].startswith("| view | 11.00 | 11.00 | +0.0% |")
    assert lines[4].startswith("| still | 9.90, 10.10 | 10.00 | -9.1% |")
    assert lines[4].endswith("| 3 previews + 4 full, 3 previews + 4 full |")
