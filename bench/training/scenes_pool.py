"""D3 over every GPU of one host: bench/training/bench_scenes.py's scenes generated, DirectVoxGO and
ours' configs trained on each, one job per GPU at a time, into one table.

    python bench/training/scenes_pool.py --meshes DIR [--scenes a,b] [--split tune|held_out|all]
        [--dvgo DIR] [--no-dvgo | --dvgo-split tune|held_out|all]
        [--run "LABEL[@CONFIG][ on SCENE,...]: KEY=VALUE ..."]... [--gsplat [--gsplat-steps N]]
        [--ngp GRIDENCODER_DIR [--ngp-steps N] [--ngp-run "LABEL[ on SCENE,...]: OPTIONS"]...]
        [--gpus N] [--per-gpu K] [--out DIR] [--work DIR] [--data DIR] [--size N]

--split picks one half of the scenes (bench_scenes.py's SCENES: `tune`, the scenes every
config value is chosen on, or `held_out`, the scenes verdicts are reported on; default all).
Jobs, in this order: each scene generated (the largest first), DirectVoxGO on each scene
(unless --no-dvgo; with --dvgo-split on that half's scenes only; its CUDA extensions are
built first, on the CPU, while the GPUs run other jobs; a `<scene>.log` already in
--work/dvgo_logs is read instead), then scene by scene each --run (so a pool cut short
leaves whole scenes to compare; LABEL: its name in the table; CONFIG: default
configs/nerf_realistic_gpu.toml; `on SCENE,...`: only those of the pool's scenes; the
KEY=VALUE are --set options), then
with --gsplat Gaussian splatting on each scene (bench/compare/gsplat/gsplat_scene.py; gsplat's
kernels are JIT-built first, on the CPU, as DirectVoxGO's), then with --ngp the instant-ngp
anchor (bench_scenes.py --ngp-only; nerfacc's CUDA ops and torch-ngp's gridencoder from that
folder JIT-built first, on the CPU): as `ngp` on every scene, or as each --ngp-run says
(LABEL: `ngp` or `ngp_<word>`, its name in the table; OPTIONS: bench_nerfacc.py's, e.g.
`--ngp-samples 65536`, its recipe changed one thing at a time beside the anchor itself).
On one GPU the same jobs go scene by scene instead (a scene generated, its anchors, its runs,
then the next scene): a pool cut short there keeps whole scenes, each anchor beside ours.
A free GPU takes the first job whose scene is generated (and whose build is done): each
job is one `bench_scenes.py` process with CUDA_VISIBLE_DEVICES set to its GPU (the n-th of
the caller's CUDA_VISIBLE_DEVICES where that is set: two pools share a host that way), its output
in --work/logs/<job>.log, its numbers in --work/jobs/<job>/scenes.json. After every job the
numbers of all finished jobs are merged into --out/scenes.json and scenes.md
(bench_scenes.py's table), so a pool cut short keeps what finished, and a later pool with
the same --work keeps the jobs that wrote their scenes.json instead of running them again.
`--per-gpu K` runs K jobs at once on each GPU (for quality comparisons at equal steps on a
host with few GPUs: their seconds are then not each job's alone); the anchors' jobs
(DirectVoxGO, gsplat, ngp: host-bound, and their seconds are what ours are held against)
and the scenes' generation (host-bound too, and every other job waits for it) still run
alone on their GPU. The scenes are generated
with the first --run's config (every run must describe the same scenes). Jobs on different
GPUs share the host's CPUs: a job's seconds are its own GPU's with the other GPUs busy as
well (the table says how many GPUs ran); DirectVoxGO, whose steps wait on Python, measured
198 s on the bunny here against 162 s alone on one H200. A failed generation skips its
scene's other jobs; the exit status is 1 when any job failed or was skipped.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: bench, grid, train

from bench.harness import ROOT  # noqa: E402
from bench.training.bench_scenes import BenchError, check_label, check_ngp_label  # noqa: E402
from bench.training.scene_set import NAMES, SCENES, pick  # noqa: E402
from bench.training.scenes_table import load_results, save  # noqa: E402

HERE = Path(__file__).resolve().parent
DEFAULT_CONFIG = str(ROOT / "configs" / "nerf_realistic_gpu.toml")


def parse_run(text: str) -> tuple[str, str, list[str], list[str] | None]:
    """ "label@config on a,b: k=v k=v" -> (label, config, [k=v, ...], [a, b] or None: every
    scene of the pool); BenchError when malformed."""
    head, _, rest = text.partition(":")
    head, on, scenes = head.partition(" on ")
    label, _, config = head.strip().partition("@")
    check_label(label)
    only = scenes_on("--run", label, scenes) if on else None
    sets = rest.split()
    if any("=" not in s for s in sets):
        raise BenchError(f"--run {label}: expected KEY=VALUE after the ':', got {rest.strip()!r}")
    return label, config or DEFAULT_CONFIG, sets, only


def scenes_on(option: str, label: str, scenes: str) -> list[str]:
    """The scenes named after a run's 'on' (`option`'s run `label`); BenchError when none or
    an unknown one."""
    if not scenes.strip():
        raise BenchError(f"{option} {label}: expected scene names after 'on', got none")
    return [row[0] for row in pick(scenes, f"{option} {label} on")]


def check_on_pool(option: str, label: str, only: list[str] | None, names: set[str]) -> None:
    """BenchError when a run's 'on' scenes (`only`; None: every scene) are none of the
    pool's `names`."""
    if only is not None and not names.intersection(only):
        raise BenchError(
            f"{option} {label} on: none of {', '.join(only) or 'no scene'} is among the "
            f"pool's scenes ({', '.join(sorted(names))})"
        )


def parse_ngp_run(text: str) -> tuple[str, list[str], list[str] | None]:
    """ "ngp_x on a,b: --opt v" -> (ngp_x, [--opt, v], [a, b] or None: every scene of the
    pool); BenchError when malformed."""
    head, _, rest = text.partition(":")
    label, on, scenes = head.partition(" on ")
    label = label.strip()
    check_ngp_label(label)
    only = scenes_on("--ngp-run", label, scenes) if on else None
    options = shlex.split(rest)
    if options and not options[0].startswith("--"):
        raise BenchError(f"--ngp-run {label}: expected bench_nerfacc options, got {rest.strip()!r}")
    return label, options, only


def ngp_runs(args, names: set[str]) -> list[tuple[str, list[str], list[str] | None]]:
    """The anchor's runs: each --ngp-run parsed, or `ngp` on every scene where --ngp comes
    alone; none without --ngp. BenchError for a run on none of the pool's scenes, a label
    given twice, or --ngp-run without --ngp."""
    if args.ngp is None:
        if args.ngp_run:
            raise BenchError("--ngp-run: expected --ngp DIR (torch-ngp's gridencoder) as well")
        return []
    runs = [parse_ngp_run(r) for r in args.ngp_run] or [("ngp", [], None)]
    for label, _, only in runs:
        check_on_pool("--ngp-run", label, only, names)
    labels = [r[0] for r in runs]
    if len(set(labels)) < len(labels):
        raise BenchError(f"--ngp-run: expected each label once, got {', '.join(labels)}")
    return runs


def describe(label: str, config: str, sets: list[str], only: list[str] | None) -> str:
    """A run as the table's header names it: "label: config [on a,b] k=v ..."."""
    where = f" on {','.join(only)}" if only else ""
    return f"{label}: {config}{where} {' '.join(sets)}"


def make_jobs(args, rows: list[tuple]) -> list[dict]:
    """Every job of the pool: name, bench_scenes.py arguments, what it waits for, and
    whether it runs alone on its GPU (the scenes' generation and the anchors', whatever
    --per-gpu says)."""
    base = [sys.executable, str(HERE / "bench_scenes.py"), "--meshes", args.meshes]
    base += ["--data", str(args.data)] + (["--size", str(args.size)] if args.size else [])
    largest = sorted(rows, key=lambda r: -r[3])
    # generated with the first run's config: a later run that describes the scene otherwise
    # (data.*) would generate it again, while other jobs read it
    label, config, sets, _ = args.runs[0] if args.runs else ("", DEFAULT_CONFIG, [], None)
    same = ["--config", config, *(a for s in sets for a in ("--set", s))]

    def on(only: list[str] | None) -> list[tuple]:
        return [r for r in largest if only is None or r[0] in only]

    def job(name: str, scene: str, extra: list[str], needs: list[str], alone=False) -> dict:
        own = ["--scenes", scene, *extra]
        out = ["--out", str(args.work / "jobs" / name)]  # absolute: DirectVoxGO runs elsewhere
        return {
            "name": name,
            "scene": scene,
            "args": own,
            "command": [*base, *own, *out],
            "needs": needs,
            "alone": alone,
        }

    def anchor(name: str, scene: str, extra: list[str], build: str) -> dict:
        """An anchor's job waits for its extensions' build as well as the scene, and runs
        alone on its GPU: host-bound, and its seconds are the verdict's other side."""
        return job(name, scene, extra, [f"gen_{scene}", build], alone=True)

    # a scene's generation runs alone as well: its march reads counts back every step, and
    # each read waits out the other processes' turns on a shared GPU (H6: the realistic
    # scene took 447 s beside two training jobs), while every job of the scene waits for it
    jobs = [job(f"gen_{r[0]}", r[0], ["--generate-only", *same], [], True) for r in largest]
    if not args.no_dvgo:
        dvgo = ["--dvgo-only", "--dvgo", str(args.dvgo), "--dvgo-log", str(args.work / "dvgo_logs")]
        dvgo += ["--work", str(args.work / "dvgo_work")]
        halves = ("tune", "held_out") if args.dvgo_split == "all" else (args.dvgo_split,)
        jobs += [
            anchor(f"dvgo_{r[0]}", r[0], dvgo, "dvgo_build") for r in largest if r.split in halves
        ]
    # ours' runs scene by scene: a pool cut short (device time) leaves whole scenes to compare
    for r in largest:
        for label, config, sets, only in args.runs:
            if only is not None and r[0] not in only:
                continue
            extra = ["--ours-only", "--label", label, "--config", config]
            extra += ["--work", str(args.work / "runs" / label)]
            extra += [a for s in sets for a in ("--set", s)]
            jobs.append(job(f"{label}_{r[0]}", r[0], extra, [f"gen_{r[0]}"]))
    if args.gsplat:
        extra = ["--gsplat-only", "--gsplat-steps", str(args.gsplat_steps)]
        extra += ["--work", str(args.work / "gsplat_work")]
        jobs += [anchor(f"gsplat_{r[0]}", r[0], extra, "gsplat_build") for r in largest]
    for label, options, only in args.ngp_runs:
        extra = ["--ngp-only", "--ngp", str(args.ngp), "--ngp-steps", str(args.ngp_steps)]
        extra += ["--ngp-label", label, "--ngp-args", shlex.join(options)]
        extra += ["--work", str(args.work / "ngp_work")]
        jobs += [anchor(f"{label}_{r[0]}", r[0], extra, "ngp_build") for r in on(only)]
    return jobs


#: What each build runs: DirectVoxGO's CUDA extensions JIT-built in its folder (as `bash
#: bench/gpu.sh dvgo-build`), gsplat's by the first import of its kernels, the ngp anchor's
#: (nerfacc's ops, torch-ngp's gridencoder from the folder in argv[1]) as bench_nerfacc loads them.
DVGO_BUILD = "import sys; sys.path[:0] = ['shim', '.']\nfrom lib import utils, dvgo, dcvgo, dmpigo"
GSPLAT_BUILD = "from gsplat.cuda._backend import _C\nassert _C is not None, 'no gsplat kernels'"
NGP_BUILD = (
    "import sys, torch; from pathlib import Path; sys.path.insert(0, sys.argv[2])\n"
    "from nerfacc.cuda._backend import _C\nassert _C is not None, 'no nerfacc CUDA ops'\n"
    "from bench.ops.multires import build_ngp\nbuild_ngp(Path(sys.argv[1]), torch.device('cpu'))"
)


def scene_by_scene(jobs: list[dict]) -> list[dict]:
    """`jobs` reordered scene by scene (a scene's generation, anchors and runs before the next
    scene's), for a one-GPU pool: the total is the same in any order there, and a pool cut
    short by device time then leaves whole scenes, each with its anchor beside ours, rather
    than every anchor and only some of ours."""
    scenes = list(dict.fromkeys(j["scene"] for j in jobs))
    return sorted(jobs, key=lambda j: scenes.index(j["scene"]))  # stable: kinds keep their order


def start_build(
    code: str, log: Path, cwd: Path | None = None, argv: tuple[str, ...] = ()
) -> subprocess.Popen:
    """`python -c code *argv` in `cwd`, its output in `log`: a build on the CPU while the
    GPUs run other jobs, at the lowest CPU priority (niceness 19): it takes the cores the
    jobs leave idle. At normal priority DirectVoxGO's build (nvcc on every core, MAX_JOBS)
    slowed the quality config's runs beside it from ~100 s to 160-224 s (H7)."""
    with log.open("w") as out:
        # `nice`, not a preexec_fn: that is unsafe in a process with threads
        command = ["nice", "-n", "19", sys.executable, "-c", code, *argv]
        return subprocess.Popen(command, cwd=cwd, stdout=out, stderr=out)


def merge(work: Path, out: Path, meta: dict, finished: list[str]) -> None:
    """The finished jobs' scenes.json merged into out/scenes.json and scenes.md."""
    results: dict[str, dict] = {}
    for name in finished:
        for scene, entry in load_results(work / "jobs" / name / "scenes.json").items():
            if not name.startswith("gen_"):  # a scene found in place: not its generation
                entry.pop("generate_seconds", None)
            results.setdefault(scene, {}).update(entry)
    order = [n for n in NAMES if n in results]
    save(out, {n: results[n] for n in order}, meta)


def device_id(gpu: int) -> str:
    """The CUDA device of the pool's GPU `gpu`: the gpu-th of the caller's
    CUDA_VISIBLE_DEVICES where it is set (two pools can then share a host, each on its own
    GPUs), else `gpu` itself."""
    visible = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")]
    visible = [d for d in visible if d]
    return visible[gpu] if gpu < len(visible) else str(gpu)


def run_pool(args, jobs: list[dict], gpus: int, meta: dict) -> int:
    """Runs `jobs` over `gpus` GPUs, args.per_gpu at once on each; 0 when every job
    succeeded, else 1."""
    (args.work / "logs").mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    done: dict[str, int] = {}  # job -> exit status
    running: dict[int, tuple] = {}  # slot -> (job, process, its log, start); GPU slot % gpus
    builds: dict[str, tuple] = {}  # name -> (process, start): built on the CPU meanwhile
    if any(j["name"].startswith("dvgo_") for j in jobs):
        log = args.work / "logs" / "dvgo_build.log"
        builds["dvgo_build"] = (start_build(DVGO_BUILD, log, args.dvgo), time.perf_counter())
    if any(j["name"].startswith("gsplat_") for j in jobs):
        log = args.work / "logs" / "gsplat_build.log"
        builds["gsplat_build"] = (start_build(GSPLAT_BUILD, log), time.perf_counter())
    if any(j["name"].startswith("ngp_") for j in jobs):
        log = args.work / "logs" / "ngp_build.log"
        build = start_build(NGP_BUILD, log, argv=(str(args.ngp), str(ROOT)))
        builds["ngp_build"] = (build, time.perf_counter())
    finished = [
        j["name"] for j in jobs if (args.work / "jobs" / j["name"] / "scenes.json").is_file()
    ]
    done.update((name, 0) for name in finished)  # an earlier pool's: kept, not run again
    waiting = [j for j in jobs if j["name"] not in finished]
    while waiting or running:
        for name, (build, start) in list(builds.items()):
            if build.poll() is not None:
                done[name] = build.returncode
                say(f"{name} exited {build.returncode} after {time.perf_counter() - start:.0f} s")
                del builds[name]
        for slot, (job, process, log, start) in list(running.items()):
            if process.poll() is None:
                continue
            del running[slot]
            log.close()
            done[job["name"]] = process.returncode
            say(
                f"{job['name']} on GPU {slot % gpus} exited {process.returncode} after "
                f"{time.perf_counter() - start:.0f} s"
            )
            if process.returncode == 0:
                finished.append(job["name"])
                merge(args.work, args.out, meta, finished)
        for job in [j for j in waiting if any(done.get(n, 0) != 0 for n in j["needs"])]:
            waiting.remove(job)
            done[job["name"]] = 1
            say(
                f"{job['name']} skipped: {', '.join(n for n in job['needs'] if done.get(n))} failed"
            )
        for slot in (k for k in range(gpus * args.per_gpu) if k not in running):
            gpu = slot % gpus
            here = [j for k, (j, *_) in running.items() if k % gpus == gpu]
            if any(j["alone"] for j in here):
                continue
            ready = (j for j in waiting if all(done.get(n) == 0 for n in j["needs"]))
            job = next((j for j in ready if not (j["alone"] and here)), None)
            if job is None:
                continue  # another GPU may be empty, for an anchor
            waiting.remove(job)
            env = dict(os.environ, CUDA_VISIBLE_DEVICES=device_id(gpu))
            log = (args.work / "logs" / f"{job['name']}.log").open("w")
            say(f"{job['name']} on GPU {gpu}: {shlex.join(job['args'])}")
            process = subprocess.Popen(
                job["command"], env=env, stdout=log, stderr=subprocess.STDOUT
            )
            running[slot] = (job, process, log, time.perf_counter())
        time.sleep(1.0)
    failed = [n for n, code in done.items() if code != 0]
    say(
        f"pool done: {len(finished)} jobs finished"
        + (f", failed: {', '.join(failed)}" if failed else "")
    )
    return 1 if failed else 0


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] scenes_pool: {text}", flush=True)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--meshes", required=True, help="folder of the .off meshes")
    parser.add_argument("--scenes", default=None, help=f"comma-separated, of {', '.join(NAMES)}")
    parser.add_argument("--split", default="all", help="tune, held_out or all (SCENES' halves)")
    parser.add_argument(
        "--dvgo", type=Path, default=os.environ.get("DVGO_DIR", ROOT / ".anchors/dvgo")
    )
    parser.add_argument("--no-dvgo", action="store_true", help="ours' runs only")
    parser.add_argument(
        "--dvgo-split",
        default="all",
        choices=("tune", "held_out", "all"),
        help="DirectVoxGO on this half's scenes only (a verdict needs it on the held-out half)",
    )
    parser.add_argument("--gsplat", action="store_true", help="Gaussian splatting on each too")
    parser.add_argument("--gsplat-steps", type=int, default=30000)
    parser.add_argument("--ngp", type=Path, default=None, help="torch-ngp's gridencoder folder")
    parser.add_argument("--ngp-steps", type=int, default=20000, help="the ngp anchor's steps")
    parser.add_argument(
        "--ngp-run", action="append", default=[], help='"LABEL[ on SCENE,...]: OPTIONS"'
    )
    parser.add_argument(
        "--run", action="append", default=[], help='"LABEL[@CONFIG][ on SCENE,...]: KEY=VALUE ..."'
    )
    parser.add_argument("--gpus", type=int, default=None, help="default: every GPU of the host")
    parser.add_argument("--per-gpu", type=int, default=1, help="jobs at once on each GPU")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "scenes")
    parser.add_argument("--work", type=Path, default=ROOT / "bench" / "results" / "scenes_pool")
    parser.add_argument("--data", type=Path, default=ROOT / "data" / "scenes")
    parser.add_argument("--size", type=int, default=None, help="every scene's size (a check)")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    args.work, args.out, args.data = (p.resolve() for p in (args.work, args.out, args.data))
    try:
        rows = pick(args.scenes, split=args.split)
        args.runs = [parse_run(r) for r in args.run]
        names = {r[0] for r in rows}
        for label, _, _, only in args.runs:
            check_on_pool("--run", label, only, names)
        if not args.no_dvgo and not (args.dvgo / "run_dvgo.py").is_file():
            raise BenchError(f"--dvgo {args.dvgo}: no run_dvgo.py there (or pass --no-dvgo)")
        import torch

        gpus = args.gpus if args.gpus is not None else torch.cuda.device_count()
        if gpus < 1:
            raise BenchError(f"--gpus: expected at least 1 (CUDA devices here: {gpus})")
        if args.gsplat_steps < 1:
            raise BenchError(f"--gsplat-steps: expected at least 1, got {args.gsplat_steps}")
        if args.ngp is not None:
            args.ngp = args.ngp.resolve()
            if not (args.ngp / "src" / "gridencoder.cu").is_file():
                raise BenchError(f"--ngp {args.ngp}: no src/gridencoder.cu there (torch-ngp's)")
            if args.ngp_steps < 1:
                raise BenchError(f"--ngp-steps: expected at least 1, got {args.ngp_steps}")
        args.ngp_runs = ngp_runs(args, names)
        if args.per_gpu < 1:
            raise BenchError(f"--per-gpu: expected at least 1, got {args.per_gpu}")
        name = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "CPU"
        meta = {
            "device_name": f"{gpus} x {name}, {args.per_gpu} job(s) at once per GPU",
            "torch": torch.__version__,
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "config": "; ".join(describe(*run) for run in args.runs),
        }
        if args.ngp_runs:
            meta["ngp"] = "; ".join(
                f"{label}{' on ' + ','.join(only) if only else ''}: {shlex.join(options)}"
                for label, options, only in args.ngp_runs
            )
        jobs = make_jobs(args, rows)
        if gpus == 1:
            jobs = scene_by_scene(jobs)
    except BenchError as error:
        print(f"scenes_pool: {error}", file=sys.stderr)
        return 2
    say(
        f"{len(jobs)} jobs over {gpus} GPUs x {args.per_gpu} ({len(SCENES)} scenes known, "
        f"{len(rows)} asked for)"
    )
    return run_pool(args, jobs, gpus, meta)


if __name__ == "__main__":
    sys.exit(main())
