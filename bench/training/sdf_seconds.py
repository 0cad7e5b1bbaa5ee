"""S2: points in, mesh out: the whole sdf command's seconds, as a user runs it.

    python bench/training/sdf_seconds.py POINTS.npy [POINTS.npy ...] [--resolutions 128]
        [--config configs/sdf_scan.toml] [--modes full,mesh] [--json PATH] [--md PATH]

Each run is `python -m train --config CONFIG --set points.path=POINTS` in a fresh process,
timed from its launch: to `mesh.ply` written (its modification time) and to the process's
exit, with the run's own `phases` (summary.json) beside them. Modes: `full` (the config
as shipped: Chamfer scores and pictures) and `mesh` (`eval.chamfer=false`,
`output.pictures=false`: what a user who wants the mesh waits for). 512^3 uses the same
schedule as bench/training/bench_sdf.py.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: bench, grid, train

from bench.training.bench_sdf import RESOLUTION_SETS  # the schedule per resolution, as S1 runs it  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
MODES = {"full": [], "mesh": ["eval.chamfer=false", "output.pictures=false"]}


def run_once(points: Path, config: Path, resolution: int, mode: str, out: Path) -> dict:
    sets = [f"points.path={points}", "output.progress=false", *MODES[mode]]
    sets += RESOLUTION_SETS.get(resolution, [])
    command = [sys.executable, "-m", "train", "--config", str(config), "--out", str(out)]
    command += [arg for s in sets for arg in ("--set", s)]
    start = time.time()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    end = time.time()
    if done.returncode != 0:
        raise SystemExit(f"sdf_seconds: {' '.join(command)} failed:\n{done.stderr[-3000:]}")
    summary = json.loads((out / "summary.json").read_text())
    return {
        "points": points.stem,
        "resolution": resolution,
        "mode": mode,
        "to_mesh_ply": (out / "mesh.ply").stat().st_mtime - start,
        "whole": end - start,
        "train": summary["train_seconds"],
        "mesh": summary.get("mesh_seconds"),
        "chamfer_seconds": summary.get("chamfer_seconds"),
        "chamfer_box": summary.get("chamfer_box"),
        "mesh_components": summary.get("mesh_components"),
        "phases": summary["phases"],
        "phase_parts": summary.get("phase_parts", {}),
        "device": summary["device"],
    }


def table(rows: list[dict]) -> str:
    keys = ["start_up", "setup", "train", "evaluations_and_checkpoints", "files", "pictures"]
    head = (
        "| points | res | mode | to mesh.ply | whole | "
        + " | ".join(keys[:1] + ["(import torch)"] + keys[1:])
        + " | mesh | Chamfer/box |"
    )
    lines = [head, "|" + " --- |" * (head.count("|") - 1)]
    for r in rows:
        p = r["phases"]
        cells = [f"{p[k]:.2f}" if k in p else "-" for k in keys]
        torch_s = r["phase_parts"].get("start_up", {}).get("import_torch")
        cells.insert(1, "-" if torch_s is None else f"{torch_s:.2f}")
        chamfer = f"{r['chamfer_box']:.3e}" if r["chamfer_box"] is not None else "-"
        lines.append(
            f"| {r['points']} | {r['resolution']} | {r['mode']} | {r['to_mesh_ply']:.2f} s | "
            f"{r['whole']:.2f} s | " + " | ".join(cells) + f" | {r['mesh'] or 0:.2f} | {chamfer} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("points", nargs="+", type=Path)
    parser.add_argument("--resolutions", default="128")
    parser.add_argument("--config", type=Path, default=ROOT / "configs/sdf_scan.toml")
    parser.add_argument("--modes", default="full,mesh")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--md", type=Path)
    args = parser.parse_args()
    for m in args.modes.split(","):
        if m not in MODES:
            parser.error(f"--modes: {m!r} is not one of {', '.join(MODES)}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for points in args.points:
            for res in (int(r) for r in args.resolutions.split(",")):
                for mode in args.modes.split(","):
                    out = Path(tmp) / f"{points.stem}-{res}-{mode}"
                    rows.append(run_once(points.resolve(), args.config.resolve(), res, mode, out))
                    r = rows[-1]
                    print(
                        f"{r['points']} {res} {mode}: mesh.ply at {r['to_mesh_ply']:.2f} s, "
                        f"whole {r['whole']:.2f} s, train {r['train']:.2f} s",
                        flush=True,
                    )
    text = f"S2 on {rows[0]['device']} ({os.cpu_count()} CPUs)\n\n" + table(rows)
    print(text)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    if args.md:
        args.md.write_text(text + "\n")


if __name__ == "__main__":
    main()
