"""D3: ours and DirectVoxGO over a set of generated scenes, so that a model change is
decided on the mean over scenes, not on the one scene it was tuned on.

    python bench/training/bench_scenes.py --meshes DIR [--scenes a,b] [--split tune|held_out|all]
        [--config FILE] [--out DIR]
        [--data DIR] [--set KEY=VALUE ...] [--size N] [--label NAME] [--generate-only |
        --ours-only | --dvgo-only | --gsplat-only | --ngp-only]
        [--dvgo DIR] [--dvgo-log DIR] [--dvgo-iters C,F] [--gsplat-steps N]
        [--ngp DIR] [--ngp-steps N]

The scenes (bench/training/scene_set.py's SCENES), in two halves (`split`): the tuning half,
on which every config value is chosen (the realistic scene, `data.scene = "realistic"`, and
five scanned meshes in five looks, `data.scene = "scan"`, train/nerf/scenes/scan.py), and
the held-out half, on which verdicts are reported and nothing is tuned (five other meshes,
thin-legged or finely carved, the looks mixed otherwise); 400x400, one of each half at
800x800; 100 training and 25 test views each (the config's). --split picks a half (default
all). The meshes are CGAL's demo data: Debian's `libcgal-demo` package installs them in
/usr/share/doc/libcgal-dev/data.tar.gz (unpack it: `tar xzf ... data/meshes`); --meshes
names the folder holding the .off files (or its `data/meshes`). Nothing is downloaded.

For each scene: the scene generated into --data (once: scene.json says when it is current;
on the GPU when there is one), ours trained on it (--config, `data.*` set per scene, its
own schedule, through `train.loop.run`), and unless --ours-only DirectVoxGO (its default
schedule, bench/compare/dvgo/bench_dvgo.py's functions; a log `<scene>.log` already in --dvgo-log is
read instead of running it again, and a new run's log is kept there). Results accumulate
in --out/scenes.json (a call updates the scenes it ran), so scenes, systems and calls can
be split to fit a time limit (bench/training/scenes_pool.py spreads them over a host's GPUs);
--label names ours' system (one per config or schedule: `fast`, `quality`, ...).
scenes.md is the table of all of them (bench/training/scenes_table.py): per scene (and its
split) a row per system (PSNR, SSIM, training seconds, peak memory; ours against
DirectVoxGO: the end's difference, PSNR at its training time, and when ours first reaches
its PSNR as a fraction of its time), then each system's means and how many scenes it is
below DirectVoxGO on, per half and over all.
--generate-only generates the scenes and records their generation seconds.
--gsplat-only trains Gaussian splatting instead (bench/compare/gsplat/gsplat_scene.py, gsplat's
rasterizer in a program of its own; the system `gsplat` in the table, the upper anchor).
--ngp-only trains instant-ngp's field by nerfacc's example recipe instead (bench_nerfacc.py
--backends ngp, the hash encoding from torch-ngp's gridencoder in --ngp DIR; nerfacc installed:
`pip install --no-index --find-links WHEELS nerfacc rich`): the system `ngp`, the field's best
method built from other projects' parts (its seconds from step 20, as bench_nerfacc times them).
--ngp-args "--ngp-samples 65536 ..." changes its recipe (bench_nerfacc's options) under the
name --ngp-label (`ngp_<word>`), so variants of the anchor sit beside it in one table.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: bench, grid, train

from bench.compare.dvgo.bench_dvgo import (  # noqa: E402
    BenchError,
    dvgo_result,
    find_dvgo,
    run_dvgo,
    run_ours,
)
from bench.harness import ROOT  # noqa: E402
from bench.training.scene_set import NAMES, pick, scene_overrides  # noqa: E402
from bench.training.scenes_table import load_results, save  # noqa: E402
from train.config import load_config  # noqa: E402
from train.errors import ConfigError  # noqa: E402
from train.loop import select_device  # noqa: E402
from train.metrics import psnr  # noqa: E402
from train.nerf.scene_path import ensure_scene  # noqa: E402


def ours_result(ours: dict[str, Any]) -> dict[str, Any]:
    """The numbers of a `run_ours` result that the table shows; `curve`: [train seconds,
    PSNR] at each evaluation (for PSNR at DirectVoxGO's time and the time to reach its);
    `train_psnr`: the training batches' PSNR since the evaluation before each (a test curve
    that levels off while this one climbs is the model fitting the training views)."""
    summary = ours["summary"] or {}
    evaluations = [r for r in ours["records"] if "psnr" in r]
    curve = [[r["train_seconds"], r["psnr"]] for r in evaluations]
    trained = all("train_mse" in r for r in evaluations)
    train_psnr = [psnr(r["train_mse"], 1.0) for r in evaluations] if trained else None
    return {
        "psnr": summary.get("psnr"),
        "ssim": summary.get("ssim"),
        "train_seconds": summary.get("train_seconds"),
        "steps": summary.get("steps"),
        "peak_allocated": ours["peak_allocated"],
        "peak_reserved": ours["peak_reserved"],
        "curve": curve,
        "train_psnr": train_psnr,
        # where a captured run's training time went besides its steps
        **{k: summary[k] for k in ("graph_captures", "graph_capture_seconds") if k in summary},
    }


def dvgo_summary(text: str, scene: Path) -> dict[str, Any]:
    """DirectVoxGO's numbers from its output; PSNR and SSIM of its 8-bit renders scored
    here (as ours) when they are still on disk, else its own."""
    result = dvgo_result(text, scene)
    scored = result["scored"]
    return {
        "psnr": scored["psnr"] if scored else result["psnr"],
        "ssim": scored["ssim"] if scored else result["ssim"],
        "scored_here": scored is not None,
        "own_psnr": result["psnr"],
        "own_ssim": result["ssim"],
        "train_seconds": result["train_seconds"],
        "peak_allocated": result["peak_allocated"],
        "peak_reserved": result["peak_reserved"],
    }


def one_scene(row: tuple, args, device: torch.device, entry: dict, dvgo_dir: Path | None) -> None:
    """Generates scene `row`, then trains the systems asked for; fills `entry`."""
    name = row[0]
    overrides = scene_overrides(row, args.meshes, args.data, args.size)
    sets = ["output.progress=false", *args.set, *overrides]
    base = load_config(args.config, sets)
    start = time.perf_counter()
    scene = ensure_scene(base, device).resolve()
    seconds = time.perf_counter() - start
    if seconds > 1.0 or "generate_seconds" not in entry:  # not merely found in place
        entry["generate_seconds"] = seconds
    print(f"bench_scenes: {name} ready in {seconds:.1f} s ({scene})", flush=True)
    if args.generate_only:
        return
    if args.gsplat_only:
        entry["gsplat"] = run_gsplat(scene, Path(args.work) / name / "gsplat", args.gsplat_steps)
        return
    if args.ngp_only:
        work = Path(args.work) / name / args.ngp_label
        extra = shlex.split(args.ngp_args)
        entry[args.ngp_label] = run_ngp(scene, work, args.ngp_steps, args.ngp, extra)
        return
    if not args.ours_only:
        cached = Path(args.dvgo_log) / f"{name}.log" if args.dvgo_log else None
        if cached is not None and cached.is_file():
            text = cached.read_text()
        else:
            work = Path(args.work) / name
            log = cached or work / "dvgo.log"
            log.parent.mkdir(parents=True, exist_ok=True)
            text = run_dvgo(dvgo_dir, scene, work, log, iters=args.dvgo_iters)
        entry["dvgo"] = dvgo_summary(text, scene)
    if not args.dvgo_only:
        quiet = ["output.checkpoint_every=0", "output.turntable_frames=0"]
        config = load_config(args.config, [*sets, *quiet])
        run_dir = Path(args.work) / name / args.label
        entry[args.label] = ours_result(run_ours(config, run_dir, device))


def run_gsplat(scene: Path, work: Path, steps: int) -> dict[str, Any]:
    """bench/compare/gsplat/gsplat_scene.py on `scene` as a program of its own (its output on
    ours); its
    numbers (gsplat.json). BenchError when it fails."""
    script = ROOT / "bench" / "compare" / "gsplat" / "gsplat_scene.py"
    command = [sys.executable, str(script), str(scene), "--out", str(work)]
    if subprocess.run([*command, "--steps", str(steps)]).returncode != 0:
        raise BenchError(
            f"gsplat on {scene}: bench/compare/gsplat/gsplat_scene.py failed (its output above)"
        )
    return json.loads((work / "gsplat.json").read_text())


def run_ngp(
    scene: Path, work: Path, steps: int, ngp: str | None, extra: list[str] = ()
) -> dict[str, Any]:
    """bench/compare/nerfacc/bench_nerfacc.py --backends ngp on `scene` as a program of its
    own, with `extra` of its options; its numbers as a system's entry (no SSIM: bench_nerfacc
    scores PSNR). BenchError when it fails."""
    script = ROOT / "bench" / "compare" / "nerfacc" / "bench_nerfacc.py"
    command = [sys.executable, str(script), "--backends", "ngp", "--data", str(scene)]
    command += ["--steps", str(steps), "--out", str(work), "--progress", "2000"]
    command += ["--ngp", ngp] if ngp else []
    command += list(extra)
    if subprocess.run(command).returncode != 0:
        raise BenchError(
            f"ngp on {scene}: bench/compare/nerfacc/bench_nerfacc.py failed (its output above)"
        )
    run = json.loads((work / "nerfacc.json").read_text())["runs"]["ngp"]
    peak = run.get("peak_gib")
    return {
        "psnr": run["psnr"],
        "ssim": None,
        "train_seconds": run["train_seconds"],
        "peak_allocated": None if peak is None else peak * 2**30,
        "steps": run["steps"],
        "rays_per_step": run["rays_per_step"],
        "field": run["field"],
    }


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--meshes", default=None, help="folder of the .off meshes")
    parser.add_argument("--scenes", default=None, help=f"comma-separated, of {', '.join(NAMES)}")
    parser.add_argument("--split", default="all", help="tune, held_out or all (SCENES' halves)")
    parser.add_argument("--config", default=str(ROOT / "configs" / "nerf_realistic_gpu.toml"))
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "scenes"))
    parser.add_argument("--data", type=Path, default=ROOT / "data" / "scenes")
    parser.add_argument("--work", default=str(ROOT / "bench" / "results" / "scenes_work"))
    parser.add_argument("--size", type=int, default=None, help="every scene's size (a check)")
    parser.add_argument("--generate-only", action="store_true", help="generate, train nothing")
    parser.add_argument("--ours-only", action="store_true", help="no DirectVoxGO")
    parser.add_argument("--label", default="ours", help="ours' name in the table (one per config)")
    parser.add_argument("--dvgo-only", action="store_true", help="DirectVoxGO alone")
    parser.add_argument("--dvgo", default=None, help="DirectVoxGO folder (default: $DVGO_DIR)")
    parser.add_argument("--dvgo-log", default=None, help="folder of <scene>.log outputs")
    parser.add_argument("--dvgo-iters", default=None, metavar="C,F", help="a quick check")
    parser.add_argument("--gsplat-only", action="store_true", help="Gaussian splatting alone")
    parser.add_argument("--gsplat-steps", type=int, default=30000, help="its training steps")
    parser.add_argument("--ngp-only", action="store_true", help="the instant-ngp anchor alone")
    parser.add_argument("--ngp", default=None, help="torch-ngp's gridencoder folder")
    parser.add_argument("--ngp-steps", type=int, default=20000, help="its training steps")
    parser.add_argument("--ngp-args", default="", help="more bench_nerfacc.py options for it")
    parser.add_argument("--ngp-label", default="ngp", help="its name in the table: ngp_<word>")
    return parser.parse_args(argv)


def main(argv=None, train=one_scene) -> int:
    args = parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = load_results(out / "scenes.json")
    meta = {
        "device_name": "CPU",
        "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "config": args.config,
        "overrides": args.set,
    }
    try:
        check_label(args.label)
        check_ngp_label(args.ngp_label)
        rows = pick(args.scenes, split=args.split)
        needs_dvgo = not (args.ours_only or args.generate_only or args.gsplat_only or args.ngp_only)
        dvgo_dir = find_dvgo(args.dvgo) if needs_dvgo and not _all_cached(args, rows) else None
        device = select_device(load_config(args.config, ["output.progress=false"]).device)
        if device.type == "cuda":
            meta["device_name"] = torch.cuda.get_device_name(device)
        for row in rows:
            entry = results.setdefault(row[0], {})
            entry.update(mesh=row[1], look=row[2], size=args.size or row[3], split=row.split)
            train(row, args, device, entry, dvgo_dir)
            save(out, results, meta)  # after every scene: a later failure keeps the others
    except (BenchError, ConfigError) as error:
        print(f"bench_scenes: {error}", file=sys.stderr)
        return 2
    table = save(out, results, meta)
    print(table)
    print(f"wrote {out / 'scenes.md'} and {out / 'scenes.json'}")
    return 0


def check_label(label: str) -> None:
    """--label names a system in the table: a word, not DirectVoxGO's nor a scene field."""
    taken = ("dvgo", "gsplat", "ngp", "mesh", "look", "size", "split", "generate_seconds")
    if not label.replace("_", "").replace("-", "").isalnum() or label in taken:
        raise BenchError(
            f"--label: expected a word of letters, digits, - or _ other than "
            f"{', '.join(taken)}; got {label!r}"
        )


def check_ngp_label(label: str) -> None:
    """--ngp-label names the anchor or a variant of it: `ngp` or `ngp_<word>`."""
    if not re.fullmatch(r"ngp(_[A-Za-z0-9-]+)?", label):
        raise BenchError(f"--ngp-label: expected ngp or ngp_<letters, digits, ->, got {label!r}")


def _all_cached(args, rows: list[tuple]) -> bool:
    """Every scene's DirectVoxGO output is in --dvgo-log already (no DirectVoxGO needed)."""
    return bool(args.dvgo_log) and all(
        (Path(args.dvgo_log) / f"{row[0]}.log").is_file() for row in rows
    )


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
