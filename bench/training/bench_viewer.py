"""The viewer's speed as a person sees it: a headless chromium (Debian's) opens
`grid-train view` on a trained radiance field, and the viewer's own log of the frames it
sent gives the numbers.

    python bench/training/bench_viewer.py RUN [--size 512] [--seconds 3] [--device cpu]
        [--client chromium|python] [--json FILE]

first frame   seconds from the browser's connection to the first frame sent (a preview)
still         seconds to render the full size x size frame once the camera stops (median)
moving        frames sent per second while the mouse drags the camera, and their size

Frames are timed where they are sent (the server), not where the browser paints them.
`--client python` (no browser: bench/training/viser_client.py speaks viser's wire protocol) reports
the same server numbers and, under "at_client", the same measures where the frames arrive,
and checks the last full frame received against the offline render of its camera.
`--render-only` (no browser, no viser needed) times the render function alone.
`--train-cost CONFIG --out DIR [--moving] [--set K=V ...]`: steps/s of CONFIG trained
without --view, with --view alone and with a python client connected (bench/training/view_cost.py).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: bench, grid, train

from bench.training.view_cost import free_port  # noqa: E402
from train.viewer.server import Viewer, ViewOptions  # noqa: E402


def wait_for(condition, seconds: float = 60.0) -> None:
    end = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > end:
            raise TimeoutError
        time.sleep(0.005)


def measure(run: Path, size: int, seconds: float, device: str) -> dict:
    """The browser: headless chromium opens the viewer and drags its camera."""
    from playwright.sync_api import sync_playwright

    options = ViewOptions(device=torch.device(device), max_size=size)
    viewer = Viewer(run, options, host="127.0.0.1", port=free_port())
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": size, "height": size})
            page.goto(viewer.url)
            wait_for(lambda: viewer.view.renderers)
            renderer = next(iter(viewer.view.renderers.values()))
            wait_for(lambda: renderer.log)
            stills = []
            for k in range(3):  # full frames of three still cameras
                wait_for(lambda k=k: renderer.counts["full"] > k)
                stills.append(renderer.last.seconds)
                page.mouse.move(size * 0.3, size * 0.5)
                page.mouse.down()
                page.mouse.move(size * 0.3 + 20, size * 0.5, steps=4)
                page.mouse.up()
            wait_for(
                lambda: renderer.counts["full"] >= 3 and renderer.finished == renderer.previewed
            )
            start = time.perf_counter()
            page.mouse.move(size * 0.2, size * 0.5)
            page.mouse.down()
            k = 0
            while time.perf_counter() - start < seconds:  # a drag back and forth
                x = size * (0.2 + 0.6 * abs((k % 100) / 50 - 1))
                page.mouse.move(x, size * 0.5 + 10 * ((k // 7) % 3))
                time.sleep(0.01)
                k += 1
            end = time.perf_counter()
            page.mouse.up()
            browser.close()
    finally:
        viewer.stop()
    return {"device": str(device), **server_numbers(renderer, size, stills, start, end)}


def server_numbers(renderer, size: int, stills: list[float], start: float, end: float) -> dict:
    """The viewer's own log of the frames it sent (`ProgressiveRenderer.log`): the first
    frame after the browser connected, the render seconds of the full frames of still
    cameras (`stills`), and the previews sent between `start` and `end` (the camera
    moving)."""
    moving = [f for f in renderer.log if start <= f[0] <= end and not f[1]]
    return {
        "threads": torch.get_num_threads(),
        "size": size,
        "first_frame_seconds": round(renderer.log[0][0] - renderer.connected_at, 3),
        "first_frame_size": list(renderer.log[0][2:4]),
        "still_full_frame_seconds": round(statistics.median(stills), 3),
        "moving_fps": round(len(moving) / (end - start), 1),
        "moving_preview_size": [
            round(statistics.median(f[2] for f in moving)),
            round(statistics.median(f[3] for f in moving)),
        ]
        if moving
        else None,
        "moving_render_seconds": round(statistics.median(f[4] for f in moving), 4)
        if moving
        else None,
    }


def measure_python(run: Path, size: int, seconds: float, device: str) -> dict:
    """No browser: `viser_client.ViserClient` speaks viser's wire protocol in its place,
    sends the cameras a browser sends (the start camera, three still cameras after short
    drags, then an orbit at the web client's rate of camera messages) and times the frames
    where they arrive; the viewer's own log gives the server's numbers as for chromium.
    The last full frame received is compared with the offline render of its camera."""
    from bench.training.viser_client import CAMERA_INTERVAL, ViserClient

    options = ViewOptions(device=torch.device(device), max_size=size)
    viewer = Viewer(run, options, host="127.0.0.1", port=free_port())
    client = None
    try:
        client = ViserClient(viewer.url, size, size)
        client.replayed.wait(30)
        home = client.camera()
        # the web client sends its camera on connecting and again once it has applied the
        # server's start camera: two messages (the renderer can miss the first: viser runs
        # the connect callback that registers it on a thread pool, racing that message's
        # camera callbacks; `camera_messages` counts those it saw)
        for _ in range(2):
            client.send_camera(**home)
            time.sleep(CAMERA_INTERVAL)
        wait_for(lambda: client.frames)
        wait_for(lambda: viewer.view.renderers)
        renderer = next(iter(viewer.view.renderers.values()))
        stills, waits = [], []
        for k in range(3):  # the start camera, then two short drags
            if k:
                drag(client, home, 3.0 * k, 3.0 * k + 2.0, steps=4)
            frame = settle(renderer, client)
            stills.append(renderer.last.seconds)
            waits.append(frame.at - client.sent[-1][0])
        start = time.perf_counter()
        turned = drag(
            client, home, 10.0, 10.0 + 50.0 * seconds, steps=int(seconds / CAMERA_INTERVAL)
        )
        end = time.perf_counter()
        settle(renderer, client)
        matches = offline_check(viewer, client)
    finally:
        if client is not None:
            client.close()
        viewer.stop()
    numbers = {"device": str(device), "client": "python"}
    numbers |= server_numbers(renderer, size, stills, start, end)
    numbers["at_client"] = client_numbers(client, renderer, waits, start, end, turned)
    return numbers | matches


def drag(client, home: dict, first: float, last: float, steps: int) -> float:
    """Orbit the camera from `first` to `last` degrees about the up axis through the look-at
    point, one camera message per CAMERA_INTERVAL (a dragging browser's rate); -> degrees
    turned."""
    from bench.training.viser_client import CAMERA_INTERVAL, orbit

    tick = time.perf_counter()
    for k in range(steps):
        angle = first + (last - first) * k / max(steps - 1, 1)
        client.send_camera(
            orbit(home["position"], home["look_at"], home["up"], angle),
            home["look_at"],
            home["up"],
            home["fov"],
        )
        tick += CAMERA_INTERVAL
        time.sleep(max(0.0, tick - time.perf_counter()))
    return last - first


def settle(renderer, client, quiet: float = 0.3) -> Any:
    """Wait until the viewer has sent the full frame of the client's last camera and the
    client has received everything sent (nothing for `quiet` seconds) -> that frame."""
    from bench.training.viser_client import opengl_camera

    camera = opengl_camera(client.sent[-1][1])
    wait_for(
        lambda: (
            renderer.last is not None
            and renderer.last.full
            and torch.equal(renderer.last.camera.c2w, camera.c2w)
            and renderer.finished == (renderer.camera_version, renderer.scene_version)
            and time.perf_counter() - renderer.moved_at > renderer.still_after
        )
    )
    sent_at = renderer.last.sent_at  # still in the server's send window, maybe
    wait_for(lambda: time.perf_counter() - max(client.frames[-1].at, sent_at) > quiet)
    frame = client.frames[-1]
    assert frame.format == "png", frame
    return frame


def offline_check(viewer, client) -> dict:
    """Is the last frame received (a full frame, PNG) the offline render of the client's
    last camera (`train.nerf.view.render_camera`), pixel for pixel?"""
    from bench.training.viser_client import opengl_camera
    from train.nerf.view import render_camera, to_bytes

    camera = opengl_camera(client.sent[-1][1])
    width, height = client.frames[-1].width, client.frames[-1].height
    view = viewer.view
    expected = to_bytes(
        render_camera(view.model, view.background, camera.c2w, camera.fov, width, height)
    )
    got = client.last_image
    same = got.shape == expected.shape
    diff = int(np.abs(got.astype(int) - expected.astype(int)).max()) if same else None
    return {
        "full_frame_equals_offline": bool(same and diff == 0),
        "full_frame_max_difference": diff,
    }


def client_numbers(client, renderer, waits, start: float, end: float, turned: float) -> dict:
    """The same measures where the frames arrive: first frame after the websocket opened
    and after the first camera message; a still camera's full frame after its last camera
    message (less the viewer's wait for the camera to stay still); frames received while
    the camera orbits, the gaps between them, the time from the server's send to arrival."""
    frames = client.frames
    moving = [f for f in frames if start <= f.at <= end]
    gaps = [b.at - a.at for a, b in zip(moving, moving[1:], strict=False)]
    return {
        "first_frame_seconds": round(frames[0].at - client.connected_at, 3),
        "first_frame_after_camera_seconds": round(frames[0].at - client.sent[0][0], 3),
        "first_frame": [frames[0].format, frames[0].width, frames[0].height],
        "still_full_frame_seconds": round(statistics.median(waits), 3),
        "still_after_the_wait_seconds": round(statistics.median(waits) - renderer.still_after, 3),
        "camera_messages_per_second": round(
            sum(start <= t <= end for t, _ in client.sent) / (end - start), 1
        ),
        "orbit_degrees": round(turned, 1),
        "moving_fps": round(len(moving) / (end - start), 1),
        "moving_frame_size": [
            round(statistics.median(f.width for f in moving)),
            round(statistics.median(f.height for f in moving)),
        ]
        if moving
        else None,
        "moving_gap_median_max_seconds": [round(statistics.median(gaps), 3), round(max(gaps), 3)]
        if gaps
        else None,
        "moving_transport_seconds": round(
            statistics.median(f.at - f.server_stamp for f in moving), 4
        )
        if moving
        else None,
        "camera_messages": {"sent": len(client.sent), "seen": renderer.camera_version},
        "frames_received": len(frames),
        "frames_sent": len(renderer.log),
    }


def measure_render(run: Path, size: int, seconds: float, device: str) -> dict:
    """Without a browser (a GPU machine without chromium or viser): the viewer's own render
    function (`train.nerf.view.render_bands` + `to_bytes`, what `grid-train view` calls
    per frame) timed as the progressive renderer would call it: the first preview
    (FIRST_PREVIEW pixels on the longer side, cold), full size x size frames, and previews
    at the size that 1 / fps of the measured speed gives. No image encoding or transport."""
    from train.checkpoint import load_checkpoint
    from train.config import load_config
    from train.nerf.view import home, load, render_bands, to_bytes
    from train.viewer.progressive import FIRST_PREVIEW, MIN_PREVIEW

    dev = torch.device(device)

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize()

    start = time.perf_counter()
    config = load_config(run / "config.toml")
    model, background = load(run, config, load_checkpoint(run, "nerf"), dev)
    start_at = home(config)
    c2w, fov = start_at.c2w[0].double(), start_at.fov
    loaded = time.perf_counter() - start

    def frame(longer: int) -> float:
        side = max(MIN_PREVIEW, longer)
        sync()
        t = time.perf_counter()
        to_bytes(render_bands(model, background, c2w, fov, side, side))
        sync()
        return time.perf_counter() - t

    first = frame(FIRST_PREVIEW)
    full = [frame(size) for _ in range(5)]
    speed = size * size / statistics.median(full)
    longer = int(size * (speed / 20.0 / (size * size)) ** 0.5)  # a 20 fps budget
    preview = max(MIN_PREVIEW, min(longer, size))
    previews, end = [], time.perf_counter() + seconds
    while time.perf_counter() < end:
        previews.append(frame(preview))
    return {
        "device": str(dev),
        "size": size,
        "load_seconds": round(loaded, 3),
        "first_preview_seconds": round(first, 4),
        "full_frame_seconds": round(statistics.median(full), 4),
        "preview_size": preview,
        "preview_fps": round(len(previews) / sum(previews), 1),
        "full_size_fps": round(1 / statistics.median(full), 1),
    }


def main() -> None:
    if "--train-cost" in sys.argv:  # bench/training/view_cost.py: training with and without --view
        from bench.training import view_cost

        argv = sys.argv[1:]
        argv.remove("--train-cost")
        view_cost.main(argv)
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--render-only", action="store_true", help="no browser: render times")
    parser.add_argument(
        "--client",
        choices=("chromium", "python"),
        default="chromium",
        help="the browser: headless chromium, or python (viser's protocol, no browser)",
    )
    parser.add_argument("--json", type=Path, help="also write the numbers to this file")
    args = parser.parse_args()
    how = {"chromium": measure, "python": measure_python}[args.client]
    how = measure_render if args.render_only else how
    numbers = how(args.run, args.size, args.seconds, args.device)
    print(json.dumps(numbers, indent=1))
    if args.json:
        args.json.write_text(json.dumps(numbers, indent=1) + "\n")


if __name__ == "__main__":
    main()
