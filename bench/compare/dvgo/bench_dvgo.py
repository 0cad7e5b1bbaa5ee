"""D1: DirectVoxGO and ours trained on the same scene, side by side: test PSNR and SSIM
against training seconds, at DirectVoxGO's end and at equal time, and peak GPU memory.

    python bench/compare/dvgo/bench_dvgo.py --dvgo DIR [--config configs/nerf_realistic_gpu.toml]
        [--out DIR] [--work DIR] [--ours-steps N | --ours-rate STEPS_PER_S]
        [--dvgo-only | --dvgo-log FILE] [--shipped] [--set KEY=VALUE ...] [--dvgo-iters C,F]
        [--capture PATH]
    python bench/compare/dvgo/bench_dvgo.py --dvgo DIR --grid ours [--against FILE]
        [--dvgo-log FILE]
DIR (or the environment variable DVGO_DIR) is a copy of DirectVoxGO's public code with the
small changes that run it on current PyTorch (its `run_dvgo.py`). It is GPL code: this
script never imports it, it runs it as a separate program.

1. The scene: --config's (`data.*`: the realistic scene at 400x400, 100 training and 25
   test views), generated on the GPU unless already in `data.path`. Or --capture PATH, a
   capture of one's own in any layout the project reads (Blender, instant-ngp /
   nerfstudio, LLFF, COLMAP): ours reads it (`data.path`, `data.generate = false`; set
   `grid.bounds` to its object with --set), DirectVoxGO reads it rewritten in its Blender
   layout in --work/capture (bench/compare/dvgo/dvgo_capture.py), and its renders are scored
   against the same test views.
2. DirectVoxGO, its default schedule (`configs/default.py`: coarse 5000 and fine 20000
   iterations of 8192 rays, fine grid 160^3), from a config file written into --work
   (Blender layout, white background, datadir = the scene): `run_dvgo.py --render_test
   --dump_images --eval_ssim`, through bench/ops/cuda_peak.py, in a subprocess. Read from its
   output: the coarse and fine stages' times (it prints whole seconds), its test PSNR and
   SSIM (on its float renders), its peak memory. Its 8-bit test renders are scored again
   here (`train.metrics`) against the ground truth ours is scored against. Its output is
   kept in --work/dvgo.log: --dvgo-only stops there, and --dvgo-log reuses such an output
   instead of running it (and its renders, if still in --work), so the two systems can run
   in two calls of under 10 minutes each.
3. Ours: --config trained for `train.steps` such that training ends near DirectVoxGO's
   training time T (--ours-steps, or T x --ours-rate), evaluated at T/3, 2T/3 and T
   (`eval.seconds`) and every steps/4, in this process. Peak memory: torch's
   `max_memory_allocated` / `max_memory_reserved` over the run (after the scene exists).
   --shipped also trains --config as it is (its own schedule: 4000 steps, about a minute),
   for one more row.

"Training seconds": DirectVoxGO's coarse + fine stage times (its data loading and testing
excluded); ours, `train_seconds` (the steps only, evaluations excluded).
Writes to --out: dvgo.md (the table), dvgo.json (all numbers, ours' whole curve),
dvgo.log (DirectVoxGO's output), dvgo_test_000.png (its first test render) and ours/ (the
run directory: metrics.jsonl, summary.json, test_views.png, curves.png).
--grid ours instead runs DirectVoxGO with our grid swapped in (bench/compare/dvgo/dvgo_grid.py) and
tabulates it beside --against (its run on its own grid): dvgo_grid.md, .json and .log.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the checkout: bench, grid, train

from bench.compare.dvgo.dvgo_capture import CaptureError, capture_meta, capture_scene  # noqa: E402
from bench.compare.dvgo.dvgo_grid import swap_table  # noqa: E402
from bench.compare.dvgo.dvgo_table import markdown, table_rows, write_table  # noqa: E402
from bench.harness import ROOT, nerf_run_meta  # noqa: E402
from train.config import load_config  # noqa: E402
from train.errors import ConfigError  # noqa: E402
from train.loop import run, select_device  # noqa: E402
from train.metrics import psnr, ssim  # noqa: E402
from train.nerf.data.blender import load_blender  # noqa: E402
from train.nerf.scene_path import ensure_scene  # noqa: E402

DEFAULT_RATE = 165.0  # ours on an H100: nerf_realistic_gpu.toml, 36000 steps in 214.9 s


class BenchError(RuntimeError):
    """A problem that stops the benchmark, with a one-line explanation."""


# ---- DirectVoxGO ---------------------------------------------------------------------------


def find_dvgo(path: str | None) -> Path:
    """The DirectVoxGO folder (--dvgo or $DVGO_DIR); BenchError when it is missing."""
    path = path or os.environ.get("DVGO_DIR")
    if not path:
        raise BenchError(
            "DirectVoxGO not given: pass --dvgo DIR or set DVGO_DIR to a copy of its code "
            "with run_dvgo.py (the runner that makes it work on current PyTorch)"
        )
    folder = Path(path).expanduser().resolve()
    if not folder.is_dir():
        raise BenchError(f"{folder}: no such folder (DirectVoxGO's code: --dvgo DIR or DVGO_DIR)")
    if not (folder / "run_dvgo.py").is_file() or not (folder / "configs/default.py").is_file():
        raise BenchError(f"{folder}: not a DirectVoxGO copy (no run_dvgo.py or configs/default.py)")
    return folder


def write_dvgo_config(work: Path, dvgo: Path, scene: Path, iters: str | None = None) -> Path:
    """A DirectVoxGO config in `work`: its defaults, the scene in the Blender layout; `iters`
    "C,F" shortens its coarse and fine stages to C and F iterations (a quick check of the
    setup; the fine stage's progressive scaling at the same fractions of F)."""
    logs = work / "dvgo_logs"
    path = work / "dvgo_config.py"
    text = (
        f"_base_ = {str(dvgo / 'configs' / 'default.py')!r}\n"
        "expname = 'bench'\n"
        f"basedir = {str(logs)!r}\n"
        f"data = dict(datadir={str(scene)!r}, dataset_type='blender', white_bkgd=True)\n"
    )
    if iters:
        coarse, fine = (int(n) for n in iters.split(","))
        scales = [fine * k // 20 for k in (1, 2, 3, 4)]  # its default: 1000, ..., 4000 of 20000
        text += f"coarse_train = dict(N_iters={coarse})\n"
        text += f"fine_train = dict(N_iters={fine}, pg_scale={scales})\n"
    path.write_text(text)
    return path


def hms(text: str) -> float:
    """DirectVoxGO's `HH:MM:SS` (seconds rounded, possibly "60") -> seconds."""
    hours, minutes, seconds = (float(x) for x in text.split(":"))
    return 3600 * hours + 60 * minutes + seconds


def parse_dvgo_log(text: str) -> dict[str, Any]:
    """The numbers DirectVoxGO (through bench/ops/cuda_peak.py) prints; BenchError if its
    training or test did not finish."""

    def find(pattern: str) -> str | None:
        found = re.findall(pattern, text)
        return found[-1] if found else None

    coarse = find(r"train: coarse geometry searching in (\d+:\d+:\d+)")
    fine = find(r"train: fine detail reconstruction in (\d+:\d+:\d+)")
    test_psnr = find(r"Testing psnr ([-\d.eE+]+|nan|inf) \(avg\)")
    if fine is None or test_psnr is None:
        tail = "\n".join(text.strip().splitlines()[-15:])
        raise BenchError(
            f"DirectVoxGO did not finish training and testing; its last lines:\n{tail}"
        )
    test_ssim = find(r"Testing ssim ([-\d.eE+]+|nan) \(avg\)")
    peak = re.findall(r"CUDA_PEAK allocated (\d+) reserved (\d+)", text)
    wall = find(r"HARNESS total wall ([\d.]+) s")
    coarse_s = hms(coarse) if coarse else 0.0
    return {
        "coarse_seconds": coarse_s,
        "fine_seconds": hms(fine),
        "train_seconds": coarse_s + hms(fine),
        "psnr": float(test_psnr),
        "ssim": float(test_ssim) if test_ssim is not None else None,
        "peak_allocated": int(peak[-1][0]) if peak else None,
        "peak_reserved": int(peak[-1][1]) if peak else None,
        "render_dir": find(r"All results are dumped into (\S+)"),
        "process_seconds": float(wall) if wall else None,
    }


def run_dvgo(
    dvgo: Path, scene: Path, work: Path, log: Path, our_grid: bool = False, iters: str | None = None
) -> str:
    """Runs DirectVoxGO on `scene` (a fresh log folder in `work`), with its own dense grid
    or (`our_grid`) with ours swapped in by bench/compare/dvgo/dvgo_grid.py; returns its output."""
    work.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(work / "dvgo_logs", ignore_errors=True)  # it would resume a coarse stage
    config = write_dvgo_config(work, dvgo, scene, iters)
    return launch_dvgo(dvgo, config, log, ["dvgo_grid.py"] if our_grid else [], "bench_dvgo")


def launch_dvgo(dvgo: Path, config: Path, log: Path, wrappers: list[str], name: str) -> str:
    """DirectVoxGO's runner on `config` through bench/ops/cuda_peak.py (its peak memory) and the
    bench/ `wrappers` (scripts that change it before it starts), in a subprocess; returns
    its output, also in `log`. `name` labels the lines printed."""
    here = Path(__file__).resolve().parent
    peak = ROOT / "bench" / "ops" / "cuda_peak.py"
    command = [sys.executable, str(peak), *(str(here / w) for w in wrappers)]
    command += [str(dvgo / "run_dvgo.py"), "--config", str(config)]
    command += ["--render_test", "--dump_images", "--eval_ssim", "--i_print", "2500"]
    env = dict(os.environ, TORCH_CUDA_ARCH_LIST=os.environ.get("TORCH_CUDA_ARCH_LIST", "9.0"))
    env.setdefault("MAX_JOBS", str(os.cpu_count() or 4))
    shown = " ".join(command[2 + len(wrappers) :])
    print(f"{name}: running DirectVoxGO ({shown})", flush=True)
    start = time.perf_counter()
    with log.open("w") as out:
        code = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=dvgo)
    seconds = time.perf_counter() - start
    print(f"{name}: DirectVoxGO exited {code.returncode} after {seconds:.0f} s")
    return log.read_text()


def score_renders(render_dir: Path, scene: Path) -> dict[str, Any]:
    """Mean PSNR and SSIM of the 8-bit renders `000.png`, `001.png`, ... of the test views
    against the scene's test images (composited on white, as both systems train)."""
    from PIL import Image

    views = load_blender(scene, "test")
    truth = torch.as_tensor(views.images)  # [T, H, W, 3]
    files = sorted(render_dir.glob("[0-9][0-9][0-9].png"))
    if len(files) != len(truth):
        raise BenchError(f"{render_dir}: {len(files)} renders for {len(truth)} test views")
    psnrs, ssims, squared, pixels = [], [], 0.0, 0
    for path, target, alpha in zip(files, truth, views.alphas, strict=True):
        with Image.open(path) as image:
            render = torch.tensor(np.array(image.convert("RGB")), dtype=torch.float64)
        if render.shape != target.shape:
            raise BenchError(
                f"{path}: {tuple(render.shape)} pixels, the test views are {tuple(target.shape)}"
            )
        render = render / 255.0
        psnrs.append(psnr(float((render - target.double()).square().mean()), 1.0))
        ssims.append(float(ssim(render, target)))
        background = alpha == 0  # floaters: colour error where the scene is empty
        squared += float((render - target.double())[background].square().mean(-1).sum())
        pixels += int(background.sum())
    return {
        "psnr": sum(psnrs) / len(psnrs),
        "ssim": sum(ssims) / len(ssims),
        "views": len(files),
        "background_mse": squared / pixels if pixels else None,
    }


# ---- ours ----------------------------------------------------------------------------------


def ours_overrides(seconds: float, steps: int) -> list[str]:
    """The --set options of ours' run: `steps` steps, evaluated at T/3, 2T/3, T and every
    steps/4, no progress bar, no checkpoint, pictures without the turntable."""
    times = ", ".join(f"{seconds * k / 3:.3f}" for k in (1, 2, 3))
    return [
        f"train.steps={steps}",
        f"eval.every={max(1, steps // 4)}",
        f"eval.seconds=[{times}]",
        "output.progress=false",
        "output.checkpoint_every=0",
        "output.turntable_frames=0",
    ]


def run_ours(config, out: Path, device: torch.device) -> dict[str, Any]:
    """Trains `config` into `out` (replaced); its records, summary and peak memory."""
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    summary = run(config, out, overwrite=True)
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return {
        "summary": summary,
        "records": records,
        "peak_allocated": torch.cuda.max_memory_allocated(device) if cuda else None,
        "peak_reserved": torch.cuda.max_memory_reserved(device) if cuda else None,
    }


# ---- DirectVoxGO on our grid ---------------------------------------------------------------


def dvgo_result(text: str, scene: Path) -> dict[str, Any]:
    """A DirectVoxGO output's numbers, and its 8-bit renders scored here if still there."""
    result = parse_dvgo_log(text)
    renders = Path(result["render_dir"]) if result["render_dir"] else None
    scored = score_renders(renders, scene) if renders and renders.is_dir() else None
    return {**result, "scored": scored}


def grid_swap(args, dvgo_dir: Path | None, scene: Path, work: Path, out: Path) -> int:
    """DirectVoxGO with our grid (run now, or --dvgo-log) beside its own (--against):
    dvgo_grid.md and dvgo_grid.json in `out`."""
    text = Path(args.dvgo_log).read_text() if args.dvgo_log else None
    text = text or run_dvgo(dvgo_dir, scene, work, work / "dvgo.log", True, args.dvgo_iters)
    (out / "dvgo_grid.log").write_text(text)
    if "dvgo_grid: DenseGrid -> VoxelDenseGrid" not in text:
        raise BenchError("the output does not say that our grid was swapped in")
    own = [("DirectVoxGO (its grid)", Path(args.against).read_text())] if args.against else []
    rows = {k: dvgo_result(t, scene) for k, t in [*own, ("DirectVoxGO on grid.sample", text)]}
    table = swap_table(rows, scene.name)
    print(table)
    write_table(out, "dvgo_grid", table, rows)
    return 0


def common_args(description: str, config: str, work: str, work_help: str):
    """The arguments bench_dvgo.py and dvgo_unbounded.py share: an ArgumentParser."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--dvgo", default=None, help="DirectVoxGO folder (default: $DVGO_DIR)")
    parser.add_argument("--config", default=str(ROOT / "configs" / config))
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--out", default=os.environ.get("OUT", str(ROOT / "bench" / "results")))
    parser.add_argument("--work", default=str(ROOT / "bench" / "results" / work), help=work_help)
    parser.add_argument("--dvgo-log", default=None, help="reuse this DirectVoxGO output")
    parser.add_argument("--dvgo-only", action="store_true", help="stop after DirectVoxGO")
    parser.add_argument(
        "--capture",
        default=None,
        help="a capture of your own (Blender, instant-ngp / nerfstudio, LLFF, COLMAP) instead "
        "of the config's generated scene",
    )
    return parser


def parse_args(argv=None):
    work_help = "DirectVoxGO's config, output, logs and renders"
    parser = common_args(
        __doc__.split("\n\n")[0], "nerf_realistic_gpu.toml", "dvgo_work", work_help
    )
    parser.add_argument(
        "--grid",
        choices=("its", "ours"),
        default="its",
        help="DirectVoxGO's dense grid: its own, or ours swapped in "
        "(bench/compare/dvgo/dvgo_grid.py; "
        "then only DirectVoxGO runs, compared with --against)",
    )
    parser.add_argument(
        "--against", default=None, help="with --grid ours: DirectVoxGO's output on its own grid"
    )
    parser.add_argument(
        "--dvgo-iters",
        default=None,
        metavar="C,F",
        help="DirectVoxGO's coarse and fine iterations (default: its 5000,20000): a quick check",
    )
    parser.add_argument("--ours-steps", type=int, default=None, help="ours' train.steps")
    parser.add_argument(
        "--ours-rate", type=float, default=DEFAULT_RATE, help="ours' steps/s, for its steps"
    )
    parser.add_argument(
        "--shipped", action="store_true", help="also train --config's own schedule (+1 min)"
    )
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    out, work = Path(args.out), Path(args.work)
    out.mkdir(parents=True, exist_ok=True)
    info = None
    try:
        dvgo_dir = None if args.dvgo_log else find_dvgo(args.dvgo)
        base = load_config(args.config, ["output.progress=false", *args.set])
        if args.capture:
            capture_sets, info = capture_scene(args, base, work)
            args.set = [*args.set, *capture_sets]
            base = load_config(args.config, ["output.progress=false", *args.set])
        device = select_device(base.device)
        start = time.perf_counter()
        scene = Path(info["blender"]) if info else ensure_scene(base, device).resolve()
        generated = time.perf_counter() - start
        print(f"bench_dvgo: scene {scene} ready in {generated:.1f} s", flush=True)
        if args.grid == "ours":
            return grid_swap(args, dvgo_dir, scene, work / "on_our_grid", out)
        if args.dvgo_log:
            text = Path(args.dvgo_log).read_text()
        else:
            text = run_dvgo(dvgo_dir, scene, work, work / "dvgo.log", iters=args.dvgo_iters)
        (out / "dvgo.log").write_text(text)
        dvgo = parse_dvgo_log(text)
        scored = None
        renders = Path(dvgo["render_dir"]) if dvgo["render_dir"] else None
        if renders is not None and renders.is_dir():
            scored = score_renders(renders, scene)
            shutil.copy(renders / "000.png", out / "dvgo_test_000.png")
        else:
            print(f"bench_dvgo: no DirectVoxGO renders at {renders}: its own numbers only")
        if args.dvgo_only:
            (out / "dvgo.json").write_text(json.dumps({"dvgo": dvgo, "dvgo_scored": scored}))
            print(f"bench_dvgo: DirectVoxGO only: {dvgo}; its output is {work / 'dvgo.log'}")
            return 0
        t = dvgo["train_seconds"]
        steps = args.ours_steps or max(1, round(t * args.ours_rate))
        print(f"bench_dvgo: DirectVoxGO trained {t:.0f} s; ours: {steps} steps", flush=True)
        config = load_config(
            args.config, ["output.progress=false", *args.set, *ours_overrides(t, steps)]
        )
        ours = run_ours(config, out / "ours", device)
        shipped = None
        if args.shipped:  # the config's own schedule, evaluated at its end only
            as_is = [f"eval.every={base.train.steps}", "output.pictures=false"]
            own = load_config(args.config, ["output.progress=false", *args.set, *as_is])
            shipped = run_ours(own, out / "ours_shipped", device)
    except (BenchError, ConfigError, CaptureError) as error:
        print(f"bench_dvgo: {error}", file=sys.stderr)
        return 2
    meta = nerf_run_meta(config, args.config, args.set, device, generated, steps)
    meta = capture_meta(meta, info) if info else meta
    rows = table_rows(dvgo, scored, ours, shipped)
    table = markdown(rows, meta)
    print(table)
    result = {**meta, "rows": rows, "dvgo": dvgo, "dvgo_scored": scored, "ours": ours}
    result["ours_shipped"] = shipped
    write_table(out, "dvgo", table, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
