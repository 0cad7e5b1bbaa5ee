"""The viewer's speed as a person sees it: a headless chromium (Debian's) opens
`grid-train view` on a trained radiance field, and the viewer's own log of the frames it
sent gives the numbers.

    python bench/bench_viewer.py RUN [--size 512] [--seconds 3] [--device cpu]

first frame   seconds from the browser's connection to the first frame sent (a preview)
still         seconds to render the full size x size frame once the camera stops (median)
moving        frames sent per second while the mouse drags the camera, and their size

Frames are timed where they are sent (the server), not where the browser paints them.
`--render-only` (no browser, no viser needed) times the render function alone.
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from train.viewer.server import Viewer, ViewOptions  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(condition, seconds: float = 60.0) -> None:
    end = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > end:
            raise TimeoutError
        time.sleep(0.005)


def measure(run: Path, size: int, seconds: float, device: str) -> dict:
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
            first = renderer.log[0][0] - renderer.connected_at
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
    moving = [f for f in renderer.log if start <= f[0] <= end and not f[1]]
    return {
        "device": str(device),
        "threads": torch.get_num_threads(),
        "size": size,
        "first_frame_seconds": round(first, 3),
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
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--render-only", action="store_true", help="no browser: render times")
    args = parser.parse_args()
    how = measure_render if args.render_only else measure
    print(json.dumps(how(args.run, args.size, args.seconds, args.device), indent=1))


if __name__ == "__main__":
    main()
