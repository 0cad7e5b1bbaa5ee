"""What `grid-train ... --view` costs the training: one config trained several ways, one
after the other on the same machine, steps per second from each run's summary.json.

    python bench/training/view_cost.py CONFIG --out DIR [--moving] [--repeat N]
        [--set KEY=VALUE ...] [--modes plain,view,still,moving] [--runs RUNS] [--size PX]
    python bench/training/bench_viewer.py --train-cost CONFIG --out DIR ...   (the same)

plain    without --view
view     --view, nobody connected
still    --view, a browser-free client (bench/training/viser_client.py) connected, its camera still
         at the start camera: the viewer renders the full frame of each new checkpoint
moving   (--moving) --view, the client orbiting the camera all the time (20 ms between
         camera messages, as a dragging browser): previews rendered without pause

Under --view a run without intermediate checkpoints writes one at every evaluation; their
writing counts in the whole command's seconds, not in the steps' (`train_seconds`).
Writes DIR/view_cost.json and DIR/view_cost.md; the runs are RUNS/<mode>-<k> (--runs,
default DIR), each with its log RUNS/<mode>-<k>.log.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
MODES = ("plain", "view", "still", "moving")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def hold_camera(port: int, training: subprocess.Popen, moving: bool, size: int) -> dict:
    """A client of the training run's viewer until the run ends: connects as soon as the
    viewer serves, looks from the start camera (again whenever the viewer sets it: its
    first checkpoint), orbits when `moving` -> the frames it received."""
    from websockets.exceptions import ConnectionClosed

    client = connect(f"http://127.0.0.1:{port}", training, size)
    if client is None:
        return {"connected": False}
    client.replayed.wait(30)
    try:
        follow(client, training, moving)
    except ConnectionClosed:  # the run ended: its viewer with it
        pass
    client.close()
    kinds = [f.format for f in client.frames]
    return {
        "connected": True,
        "previews": kinds.count("jpeg"),
        "full_frames": kinds.count("png"),
        "camera_messages": len(client.sent),
    }


def follow(client, training: subprocess.Popen, moving: bool) -> None:
    """Send the client's cameras until the run ends (see `hold_camera`)."""
    from bench.training.viser_client import CAMERA_INTERVAL, orbit

    seen, k = -1, 0
    while training.poll() is None and not client.closed.is_set():
        if client.home_version != seen:  # the viewer (re)set its start camera
            seen, home = client.home_version, client.camera()
            for _ in range(2):  # the renderer can miss a client's first camera message
                client.send_camera(**home)
                time.sleep(CAMERA_INTERVAL)
        if moving:
            position = orbit(home["position"], home["look_at"], home["up"], k)
            client.send_camera(position, home["look_at"], home["up"], home["fov"])
            k += 1
        time.sleep(CAMERA_INTERVAL if moving else 0.1)


def connect(url: str, training: subprocess.Popen, size: int):
    """A `ViserClient` once the viewer at `url` answers, or None if the run ended first."""
    from websockets.exceptions import WebSocketException

    from bench.training.viser_client import ViserClient

    while training.poll() is None:
        try:
            return ViserClient(url, size, size, timeout=2)
        except (OSError, TimeoutError, WebSocketException):
            time.sleep(0.2)
    return None


def train(config: Path, out: Path, mode: str, sets: list[str], size: int) -> dict[str, Any]:
    """One training run in `mode` -> its row of the table."""
    command = [sys.executable, "-m", "train", "--config", str(config), "--out", str(out)]
    command += ["--overwrite", "--set", "output.pictures=false", "--set", "output.progress=false"]
    command += [arg for pair in sets for arg in ("--set", pair)]
    port = free_port()
    if mode != "plain":
        command += ["--view", str(port)]
    # a new directory, made now: `--view`'s viewer gives up on a run directory that does not
    # exist yet (the run makes it after reading its data), and would show an old checkpoint
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    log_path = out.parent / f"{out.name}.log"
    log = log_path.open("w")
    start = time.perf_counter()
    training = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    client: dict[str, Any] = {}
    holder = None
    if mode in ("still", "moving"):
        holder = threading.Thread(
            target=lambda: client.update(hold_camera(port, training, mode == "moving", size)),
            daemon=True,
        )
        holder.start()
    code = training.wait()
    wall = time.perf_counter() - start
    if holder is not None:
        holder.join(timeout=30)
    log.close()
    if code != 0:
        raise RuntimeError(f"{mode}: exit code {code}, see {log_path}")
    viewer_failed = re.search(r" view: .*error", log_path.read_text()) is not None
    summary = json.loads((out / "summary.json").read_text())
    phases = summary.get("phases", {})
    return {
        "mode": mode,
        "steps": summary["steps"],
        "train_seconds": round(summary["train_seconds"], 2),
        "steps_per_second": round(summary["steps"] / summary["train_seconds"], 2),
        "evaluations_and_checkpoints_seconds": round(
            phases.get("evaluations_and_checkpoints", float("nan")), 2
        ),
        "command_seconds": round(wall, 2),
        "psnr": summary.get("psnr"),
        "client": client or None,
        "viewer_failed": viewer_failed,
    }


def table(rows: list[dict[str, Any]]) -> str:
    """Markdown: steps/s of each mode (each run, the median), the change against plain."""
    by_mode: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_mode.setdefault(row["mode"], []).append(row)
    base = statistics.median(r["steps_per_second"] for r in by_mode.get("plain", rows))
    lines = [
        "| run | steps/s (each run) | median | vs plain | command s | frames received |",
        "| --- | --- | ---: | ---: | --- | --- |",
    ]
    for mode, runs in by_mode.items():
        rates = [r["steps_per_second"] for r in runs]
        median = statistics.median(rates)
        frames = ", ".join(received(r) for r in runs)
        each = ", ".join(f"{v:.2f}" for v in rates)
        seconds = ", ".join(f"{r['command_seconds']:.1f}" for r in runs)
        change = 100 * (median / base - 1)
        lines.append(f"| {mode} | {each} | {median:.2f} | {change:+.1f}% | {seconds} | {frames} |")
    return "\n".join(lines) + "\n"


def received(row: dict[str, Any]) -> str:
    """The frames column of one run."""
    client = row["client"]
    if row.get("viewer_failed"):
        return "the viewer failed (see the run's log)"
    if client and client["connected"]:
        return f"{client['previews']} previews + {client['full_frames']} full"
    return "-"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", type=Path)
    parser.add_argument("--out", type=Path, required=True, help="the table (JSON, markdown)")
    parser.add_argument("--runs", type=Path, help="the run directories and logs (default --out)")
    parser.add_argument("--moving", action="store_true", help="also a client orbiting the camera")
    parser.add_argument("--modes", help=f"a comma-separated subset of {', '.join(MODES)}")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each mode, interleaved")
    parser.add_argument("--size", type=int, default=512, help="the client's canvas, pixels")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    modes = MODES if args.moving else MODES[:3]
    modes = args.modes.split(",") if args.modes else modes
    runs = args.runs or args.out
    for folder in (args.out, runs):
        folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for k in range(args.repeat):
        for mode in modes:
            rows.append(train(args.config, runs / f"{mode}-{k}", mode, args.set, args.size))
            print(json.dumps(rows[-1]), flush=True)
    result = {"config": str(args.config), "sets": args.set, "runs": rows}
    (args.out / "view_cost.json").write_text(json.dumps(result, indent=1) + "\n")
    (args.out / "view_cost.md").write_text(table(rows))
    print(table(rows))


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
