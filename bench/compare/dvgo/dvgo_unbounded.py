"""D2: DirectVoxGO v2 and ours on the project's unbounded 360-degree scene, side by side: test
PSNR and SSIM against training seconds, at DirectVoxGO's end and at equal time, peak memory.

    python bench/compare/dvgo/dvgo_unbounded.py --dvgo DIR
        [--scene NAME | --capture PATH] [--config configs/nerf_unbounded_gpu.toml]
        [--setting unbounded | llff] [--out DIR] [--work DIR]
        [--ours-steps N | --ours-rate STEPS_PER_S]
        [--dvgo-only | --dvgo-log FILE] [--set KEY=VALUE ...] [--dvgo-iters N]
        [--detach | --wait SECONDS]

1. The scene: --config's (`data.*`: the unbounded scene at 400x400, 175 training and 25 test
   views), generated on the GPU unless already in `data.path`. --scene NAME picks one of
   SCENES instead (the tuning scenes `unbounded` and `forward`, the held-out variants
   `unbounded_v1`, `unbounded_v2`, `forward_v1`, `forward_v2`: its config, setting and
   `data.scene_variant`, generated into data/nerf_NAME_400). --capture PATH trains both on
   a capture of one's own (any layout the project reads: Blender, instant-ngp / nerfstudio,
   LLFF, COLMAP; bench/compare/dvgo/dvgo_capture.py writes it in LLFF's layout for
   DirectVoxGO, near and far from the capture; ours reads it as it is, `grid.bounds` and
   the contraction from --config and --set).
2. The scene in LLFF's layout in --work/llff (bench/compare/dvgo/dvgo_llff.py): the training
   and test views interleaved so that DirectVoxGO's llffhold = 8 holds out exactly our test views;
   near and far per image from the scene's geometry, as LLFF records them.
3. DirectVoxGO v2 with its own unbounded settings (`configs/nerf_unbounded/
   nerf_unbounded_default.py`: no coarse stage, 40000 iterations of 4096 rays, a contracted
   320^3 grid, distortion loss 0.01) on that folder, `factor = 1` (the images are already the
   size to train at): `run_dvgo.py --render_test --dump_images --eval_ssim` through
   bench/ops/cuda_peak.py (its peak memory) and bench/compare/dvgo/dvgo_v2_shims.py (the distortion
   loss in plain PyTorch, imageio's PNG reader), in a subprocess, its output in --work/dvgo.log. Its
   8-bit test renders are scored again here (`train.metrics`) against our test images.
   --dvgo-only stops there; --dvgo-log reuses such an output (and its renders, if still there).
   `--setting llff` (with --config configs/nerf_forward_gpu.toml, the forward-facing scene)
   trains DirectVoxGO's LLFF setting instead (`configs/llff/llff_default.py`: NDC rays, a
   256^3 multi-plane grid, 30000 iterations of 4096 rays), the comparison issue 32 asks for
   forward-facing captures.
4. Ours: --config trained for `train.steps` such that training ends near DirectVoxGO's
   training time T (--ours-steps, or T x --ours-rate), evaluated at T/2 and T
   (`eval.seconds`) and every steps/10; peak memory as bench/compare/dvgo/bench_dvgo.py measures it.

--detach starts this very command (without --detach) in its own session, its output in
--work/detached.log and its files in --work/detached_out, and returns at once: a run longer
than one call goes on in the background (DirectVoxGO v2's 40000 iterations, or ours trained
as long). A later `--wait SECONDS` (the same --work) waits up to SECONDS for it, prints the
end of its output, copies its files into --out and exits with its exit status; 3 when it is
still running (call again). Nothing else should use the GPU meanwhile: both measure time.

Writes to --out: dvgo_unbounded.md (the table), dvgo_unbounded.json (all numbers, ours'
whole curve), dvgo.log, dvgo_test_000.png (DirectVoxGO's first test render), ours/ (the run).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the checkout: bench, grid, train

from bench.compare.dvgo.bench_dvgo import (  # noqa: E402
    BenchError,
    common_args,
    find_dvgo,
    launch_dvgo,
    parse_dvgo_log,
    run_ours,
    score_renders,
)
from bench.compare.dvgo.dvgo_capture import CaptureError, capture_meta, capture_scene  # noqa: E402
from bench.compare.dvgo.dvgo_llff import LlffError, write_llff  # noqa: E402
from bench.compare.dvgo.dvgo_table import (  # noqa: E402
    _ours_row,
    at_time,
    dvgo_rows,
    markdown,
    write_table,
)
from bench.harness import ROOT, nerf_run_meta  # noqa: E402
from train.config import load_config  # noqa: E402
from train.errors import ConfigError  # noqa: E402
from train.loop import select_device  # noqa: E402
from train.nerf.scene_path import ensure_scene  # noqa: E402

# A guess, not a measurement: the unbounded scene ran 136 steps/s on an H100 at 128^3 with a
# 32-wide MLP and 1-voxel steps (bench/NOTES.md U1); this config's grids and MLP are larger.
DEFAULT_RATE = 80.0
#: --setting -> DirectVoxGO's own config for it: v2's unbounded default (a contracted grid),
#: or its LLFF default for forward-facing captures (NDC rays, a multi-plane grid; its
#: width/height pick a resized copy made with mogrify: None reads `images/` as written).
SETTINGS = {
    "unbounded": ("configs/nerf_unbounded/nerf_unbounded_default.py", ""),
    "llff": ("configs/llff/llff_default.py", "width=None, height=None, "),
}
STILL_RUNNING = 3


class Wide(NamedTuple):
    """An unbounded or forward-facing scene of the set: the generated `scene`, its
    `variant`, its `split` (as bench/training/bench_scenes.py's), ours' `config` and
    DirectVoxGO's `setting`."""

    scene: str
    variant: int
    split: str
    config: str
    setting: str


#: The unbounded and forward-facing scenes: today's two are the tuning half (every config
#: value of nerf_unbounded_gpu.toml and nerf_forward_gpu.toml was chosen on them), their
#: variants (other buildings, sun, ground and paint; the forward rig turned) the held-out half.
SCENES = {
    "unbounded": Wide("unbounded", 0, "tune", "nerf_unbounded_gpu.toml", "unbounded"),
    "unbounded_v1": Wide("unbounded", 1, "held_out", "nerf_unbounded_gpu.toml", "unbounded"),
    "unbounded_v2": Wide("unbounded", 2, "held_out", "nerf_unbounded_gpu.toml", "unbounded"),
    "forward": Wide("forward", 0, "tune", "nerf_forward_gpu.toml", "llff"),
    "forward_v1": Wide("forward", 1, "held_out", "nerf_forward_gpu.toml", "llff"),
    "forward_v2": Wide("forward", 2, "held_out", "nerf_forward_gpu.toml", "llff"),
}


def pick_scene(args) -> list[str]:
    """--scene: its config and setting where not given, and the --set options of its
    variant (its own data.path); BenchError for an unknown name or with --capture."""
    if args.scene is None:
        args.config = args.config or str(ROOT / "configs" / "nerf_unbounded_gpu.toml")
        args.setting = args.setting or "unbounded"
        return []
    if args.scene not in SCENES:
        raise BenchError(f"--scene: unknown {args.scene!r}; expected {', '.join(SCENES)}")
    if args.capture:
        raise BenchError("--scene and --capture: give one (a generated scene or your own)")
    wide = SCENES[args.scene]
    args.config = args.config or str(ROOT / "configs" / wide.config)
    args.setting = args.setting or wide.setting
    if wide.variant == 0:
        return []
    path = ROOT / "data" / f"nerf_{args.scene}_400"
    return [
        f"data.scene_variant={wide.variant}",
        f"data.path={json.dumps(str(path))}",
        "data.generate=true",  # generated into that path on purpose (a typed path is not)
    ]


# ---- DirectVoxGO ---------------------------------------------------------------------------


def write_unbounded_config(
    work: Path, dvgo: Path, llff: Path, iters: int | None = None, setting: str = "unbounded"
) -> Path:
    """A DirectVoxGO config in `work`: its defaults for `setting` (SETTINGS) on the LLFF
    folder `llff`, read at full size (factor 1: `images/` itself, no downscaled copy made
    with mogrify). `iters` shortens its iterations (40000 unbounded, 30000 LLFF; a quick
    check of the setup), the progressive scaling and total-variation schedule at the same
    fractions."""
    base, size = SETTINGS[setting]
    path = work / "dvgo_config.py"
    text = (
        f"_base_ = {str(dvgo / base)!r}\n"
        f"expname = 'bench_{setting}'\n"
        f"basedir = {str(work / 'dvgo_logs')!r}\n"
        f"data = dict(datadir={str(llff)!r}, {size}factor=1)\n"
    )
    if iters and setting == "unbounded":
        scales = [iters * k // 20 for k in range(1, 9)]  # its 2000, ..., 16000 of 40000
        text += (
            f"fine_train = dict(N_iters={iters}, pg_scale={scales}, "
            f"tv_before={iters // 2}, tv_dense_before={iters // 2})\n"
        )
    elif iters:
        scales = [iters * k // 15 for k in range(1, 5)]  # its 2000, ..., 8000 of 30000
        text += (
            f"fine_train = dict(N_iters={iters}, pg_scale={scales}, tv_dense_before={iters // 3})\n"
        )
    path.write_text(text)
    return path


def run_dvgo(dvgo: Path, config: Path, log: Path) -> str:
    """Runs DirectVoxGO on `config` (its log folder emptied first: it would resume from a
    checkpoint there) with the v2 shims; returns its output, also in `log`."""
    shutil.rmtree(config.parent / "dvgo_logs", ignore_errors=True)
    return launch_dvgo(dvgo, config, log, ["dvgo_v2_shims.py"], "dvgo_unbounded")


def dvgo_side(
    args, scene: Path, work: Path, out: Path, capture: dict | None = None
) -> tuple[dict, dict | None, dict | None]:
    """DirectVoxGO's numbers (run now on the LLFF folder, or --dvgo-log), its renders
    scored here, and the LLFF folder's description (None if there is none). `capture`:
    --capture's conversion (its LLFF folder already written; `scene` its Blender copy)."""
    llff = Path(capture["llff"]) if capture else work / "llff"
    if args.dvgo_log:
        text = Path(args.dvgo_log).read_text()
    else:
        dvgo_dir = find_dvgo(args.dvgo)
        info = capture or write_llff(scene, llff)
        print(
            f"dvgo_unbounded: {llff}: {info['train_views'] + info['test_views']} images, near >= "
            f"{info['near_min']:.3f}, far <= {info['far_max']:.1f}",
            flush=True,
        )
        config = write_unbounded_config(work, dvgo_dir, llff, args.dvgo_iters, args.setting)
        text = run_dvgo(dvgo_dir, config, work / "dvgo.log")
    (out / "dvgo.log").write_text(text)
    dvgo = parse_dvgo_log(text)
    if "dvgo_v2_shims:" not in text:
        shims = "bench/compare/dvgo/dvgo_v2_shims.py"
        print(f"dvgo_unbounded: the output does not show {shims}'s stand-ins")
    scored = None
    renders = Path(dvgo["render_dir"]) if dvgo["render_dir"] else None
    if renders is not None and renders.is_dir():
        scored = score_renders(renders, scene)
        shutil.copy(renders / "000.png", out / "dvgo_test_000.png")
    else:
        print(f"dvgo_unbounded: no DirectVoxGO renders at {renders}: its own numbers only")
    views = llff / "llff_views.json"
    info = json.loads(views.read_text()) if views.is_file() else None
    if capture:
        info = capture | {"hold": 8, "bounds": "from the capture (frames' near/far or points)"}
    return dvgo, scored, info


# ---- ours and the table --------------------------------------------------------------------


def ours_overrides(seconds: float, steps: int) -> list[str]:
    """ours' --set options: `steps` steps, evaluated at T/2 and T and every steps/10, no
    progress bar, no checkpoint, pictures without the turntable."""
    return [
        f"train.steps={steps}",
        f"eval.every={max(1, steps // 10)}",
        f"eval.seconds=[{seconds / 2:.3f}, {seconds:.3f}]",
        "output.progress=false",
        "output.checkpoint_every=0",
        "output.turntable_frames=0",
    ]


def reached(records: list[dict], psnr: float) -> dict | None:
    """The first evaluation at or above `psnr` (None if none)."""
    return next((r for r in records if r["psnr"] >= psnr), None)


def table_rows(dvgo: dict, scored: dict | None, ours: dict) -> list[dict]:
    """One row per (system, moment), bench_dvgo's columns: DirectVoxGO's end (its float
    renders, then its 8-bit renders scored here), ours at T/2 and T, and ours' end."""
    t = dvgo["train_seconds"]
    rows = dvgo_rows(dvgo, scored, "DirectVoxGO v2", "end (no coarse stage), its float renders")
    records = ours["records"]
    for label, fraction in (("T/2", 0.5), ("T (equal time)", 1.0)):
        record, on_time = at_time(records, t * fraction)
        moment = f"at {label}" if on_time else f"{label} not reached: its end"
        rows.append(_ours_row(moment, record, ours))
    last = records[-1]
    if last is not at_time(records, t)[0]:
        rows.append(_ours_row(f"end ({last['step']} steps)", last, ours))
    return rows


def notes(dvgo: dict, records: list[dict], info: dict | None, steps: int) -> list[str]:
    """The lines under the table: ours' time to DirectVoxGO's PSNR, the LLFF conversion."""
    hit = reached(records, dvgo["psnr"])
    lines = [""]
    if hit is None:
        best = max(r["psnr"] for r in records)
        lines.append(
            f"Ours did not reach DirectVoxGO's {dvgo['psnr']:.2f} dB in {steps} steps (best "
            f"{best:.2f} dB)."
        )
    else:
        lines.append(
            f"Ours reached DirectVoxGO's {dvgo['psnr']:.2f} dB (its float renders) at step "
            f"{hit['step']}, {hit['train_seconds']:.1f} s of training "
            f"({hit['train_seconds'] / dvgo['train_seconds']:.2f} T; the first evaluation at "
            f"or above it, evaluations every {max(1, steps // 10)} steps)."
        )
    if info is not None:
        lines.append(
            f"DirectVoxGO read the scene in LLFF's layout: {info['train_views']} training and "
            f"{info['test_views']} test views interleaved (llffhold {info['hold']}), near "
            f"{info['near_min']:.3f} to far {info['far_max']:.1f} world units ({info['bounds']})."
        )
    return lines


# ---- detached runs -------------------------------------------------------------------------


def detach(argv: list[str], work: Path) -> int:
    """Starts `argv` (this script's arguments, less --detach) in its own session with --out
    = work/detached_out; its output and exit status go to work/detached.log and .rc."""
    work.mkdir(parents=True, exist_ok=True)
    pid_file, rc_file = work / "detached.pid", work / "detached.rc"
    if pid_file.is_file() and not rc_file.is_file() and alive(int(pid_file.read_text())):
        raise BenchError(f"a detached run is still going ({pid_file}): --wait for it first")
    rc_file.unlink(missing_ok=True)
    shutil.rmtree(work / "detached_out", ignore_errors=True)
    args = [a for a in argv if a != "--detach"]
    args += ["--out", str(work / "detached_out"), "--work", str(work)]
    inner = shlex.join([sys.executable, str(Path(__file__).resolve()), *args])
    log = shlex.quote(str(work / "detached.log"))
    script = f"{inner} > {log} 2>&1; echo $? > {shlex.quote(str(rc_file))}"
    process = subprocess.Popen(
        ["sh", "-c", script],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # outlives this call, as under nohup
    )
    pid_file.write_text(str(process.pid))
    print(f"dvgo_unbounded: detached (pid {process.pid}): {inner}")
    print(f"dvgo_unbounded: its output is {work / 'detached.log'}; then --wait SECONDS")
    return 0


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def wait(work: Path, out: Path, seconds: float) -> int:
    """Waits up to `seconds` for the detached run of `work`: its exit status (its files
    copied into `out`), or STILL_RUNNING."""
    rc_file, pid_file, log = work / "detached.rc", work / "detached.pid", work / "detached.log"
    if not pid_file.is_file():
        raise BenchError(f"no detached run in {work} (start one with --detach)")
    deadline = time.monotonic() + seconds
    while not rc_file.is_file() and time.monotonic() < deadline:
        if not alive(int(pid_file.read_text())) and not rc_file.is_file():
            time.sleep(1)  # the shell writes the status as it exits
            if not rc_file.is_file():
                raise BenchError(f"the detached run ({pid_file}) ended without a status")
        time.sleep(min(5.0, max(0.1, deadline - time.monotonic())))
    for path in (work / "dvgo.log", log):
        if path.is_file():
            tail = path.read_text().strip().splitlines()[-6:]
            print(f"---- {path} (end)", *tail, sep="\n")
    if not rc_file.is_file():
        print(f"dvgo_unbounded: still running after {seconds:.0f} s: call --wait again")
        return STILL_RUNNING
    if (work / "detached_out").is_dir():
        shutil.copytree(work / "detached_out", out, dirs_exist_ok=True)
    code = int(rc_file.read_text().strip() or 1)
    print(f"dvgo_unbounded: the detached run exited {code}; its files are in {out}")
    return code


# ---- main ----------------------------------------------------------------------------------


def parse_args(argv=None):
    parser = common_args(
        __doc__.split("\n\n")[0],
        "nerf_unbounded_gpu.toml",
        "dvgo_unbounded_work",
        "the LLFF folder, DirectVoxGO's config, output, logs and renders, detached runs",
    )
    parser.add_argument(
        "--dvgo-iters", type=int, default=None, help="DirectVoxGO's iterations (its 40000)"
    )
    parser.add_argument(
        "--setting",
        choices=sorted(SETTINGS),
        default=None,
        help="DirectVoxGO's setting: unbounded (v2, contracted; the default) or llff "
        "(forward-facing, NDC; --scene forward*'s)",
    )
    parser.add_argument(
        "--scene", default=None, help=f"one of {', '.join(SCENES)} (default: --config's scene)"
    )
    parser.set_defaults(config=None)  # --scene's, else nerf_unbounded_gpu.toml
    parser.add_argument("--ours-steps", type=int, default=None, help="ours' train.steps")
    parser.add_argument(
        "--ours-rate", type=float, default=DEFAULT_RATE, help="ours' steps/s, for its steps"
    )
    parser.add_argument(
        "--detach", action="store_true", help="run this command in the background; --wait"
    )
    parser.add_argument(
        "--wait", type=float, default=None, metavar="SECONDS", help="wait for a --detach run"
    )
    return parser.parse_args(argv)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    out, work = Path(args.out), Path(args.work).resolve()
    out.mkdir(parents=True, exist_ok=True)
    try:
        if args.wait is not None:
            return wait(work, out, args.wait)
        if args.detach:
            return detach(argv, work)
        work.mkdir(parents=True, exist_ok=True)
        args.set = [*pick_scene(args), *args.set]
        base = load_config(args.config, ["output.progress=false", *args.set])
        capture = None
        if args.capture:
            capture_sets, capture = capture_scene(args, base, work, "llff")
            args.set = [*args.set, *capture_sets]
            base = load_config(args.config, ["output.progress=false", *args.set])
        device = select_device(base.device)
        start = time.perf_counter()
        scene = Path(capture["blender"]) if capture else ensure_scene(base, device).resolve()
        generated = time.perf_counter() - start
        print(f"dvgo_unbounded: scene {scene} ready in {generated:.1f} s", flush=True)
        dvgo, scored, info = dvgo_side(args, scene, work, out, capture)
        if args.dvgo_only:
            result = {"dvgo": dvgo, "dvgo_scored": scored, "llff": info}
            (out / "dvgo_unbounded.json").write_text(json.dumps(result, indent=2))
            print(f"dvgo_unbounded: DirectVoxGO only: {dvgo}; its output is {out / 'dvgo.log'}")
            return 0
        t = dvgo["train_seconds"]
        steps = args.ours_steps or max(1, round(t * args.ours_rate))
        print(f"dvgo_unbounded: DirectVoxGO trained {t:.0f} s; ours: {steps} steps", flush=True)
        sets = ["output.progress=false", *args.set, *ours_overrides(t, steps)]
        config = load_config(args.config, sets)
        ours = run_ours(config, out / "ours", device)
    except (BenchError, ConfigError, LlffError, CaptureError) as error:
        print(f"dvgo_unbounded: {error}", file=sys.stderr)
        return 2
    meta = nerf_run_meta(config, args.config, args.set, device, generated, steps)
    meta = capture_meta(meta, capture) if capture else meta
    if args.scene:
        meta |= {"scene": args.scene, "split": SCENES[args.scene].split}
    rows = table_rows(dvgo, scored, ours)
    table = "\n".join([markdown(rows, meta), *notes(dvgo, ours["records"], info, steps)])
    print(table)
    result = {**meta, "rows": rows, "dvgo": dvgo, "dvgo_scored": scored, "llff": info}
    result["ours"] = ours
    write_table(out, "dvgo_unbounded", table, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
