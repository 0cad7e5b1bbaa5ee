"""Choose a config on the tuning scenes, then report it on held-out ones, in one pipeline over
one host's GPUs (bench/training/scenes_pool.py pools, bench/training/bench_scenes.py's scenes):

    python bench/training/tune_then_report.py --meshes DIR --dvgo DIR
        --candidate "LABEL[@CONFIG]: KEY=VALUE ..." [--candidate ...]
        [--tune-scenes a,b] [--report-scenes c,d] [--report-run "LABEL[@CONFIG]: ..."]...
        [--scale 2,4] [--dvgo-gpus K] [--tune-per-gpu K] [--seconds-within R] [--work DIR]
        [--ngp GRIDENCODER_DIR [--ngp-run "LABEL[ on a,b]: OPTIONS"]... [--ngp-steps N]]

1. At once, on the first K GPUs (--dvgo-gpus, default all but one): the held-out scenes
   generated and DirectVoxGO trained on each (pool `report`); on the other GPUs: every
   --candidate on every tuning scene, without DirectVoxGO (pool `tune`; --tune-per-gpu K
   runs K at once on each of its GPUs: equal steps compare, their seconds are shared).
   With K = 0 (the default on a host of one GPU) the tuning pool runs first on every GPU
   and DirectVoxGO joins the held-out pool of step 3 instead.
   With --ngp, the instant-ngp anchor trains on the held-out scenes (or as each --ngp-run
   says) in the same pool as DirectVoxGO (scenes_pool.py --ngp, --ngp-run).
2. The rule, fixed before any number is seen: the candidate with the highest mean test PSNR
   over the tuning scenes wins (the first listed on a tie). With --seconds-within R only the
   candidates whose mean training seconds are at most R times the first candidate's (the
   baseline: list the shipped config first) take part, for configs bound by their seconds;
   it needs --tune-per-gpu 1 (shared GPUs share the seconds). The choice is written to
   WORK/choice.json with every eligible candidate's means.
3. Once both pools are done, on every GPU: the winner on the held-out scenes as `chosen`,
   with its `train.steps` times each --scale as `chosen_2x`, ..., and each --report-run (e.g.
   the shipped dense config) beside DirectVoxGO's runs from step 1 (pool `report` again:
   its finished jobs are kept).

No config value is read from a held-out scene: the verdict in WORK/report/scenes.md is on
scenes the choice never saw. Progress goes to WORK/pipeline.log; the exit status is 1 when a
pool failed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import tomllib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: bench, grid, train

from bench.harness import ROOT  # noqa: E402
from bench.training.bench_scenes import BenchError  # noqa: E402
from bench.training.scene_set import pick  # noqa: E402
from bench.training.scenes_pool import parse_run  # noqa: E402
from bench.training.scenes_table import load_results  # noqa: E402

POOL = Path(__file__).resolve().parent / "scenes_pool.py"


def say(work: Path, text: str) -> None:
    line = f"[tune_then_report {time.strftime('%H:%M:%S')}] {text}"
    print(line, flush=True)
    with (work / "pipeline.log").open("a") as log:
        log.write(line + "\n")


def mean_of(results: dict, label: str, key: str) -> float | None:
    """`label`'s mean `key` over the scenes of `results` (bench_scenes' scenes.json: scene
    -> system -> numbers); None when a scene lacks it."""
    values = [entry.get(label, {}).get(key) for entry in results.values()]
    if values and all(isinstance(v, int | float) for v in values):
        return sum(values) / len(values)
    return None


def choose(
    results: dict, labels: list[str], seconds_within: float | None = None
) -> tuple[str, dict[str, float]]:
    """The label with the highest mean PSNR over the scenes of `results`, and every
    eligible label's mean; a label with a scene missing is out (BenchError when none is
    complete). With `seconds_within` R, so is a label whose mean training seconds exceed R
    times the first label's (the baseline, e.g. the shipped config: candidates compared at
    equal seconds, which is what a time-bound config is for)."""
    means = {label: mean_of(results, label, "psnr") for label in labels}
    means = {label: m for label, m in means.items() if m is not None}
    if not means:
        raise BenchError(f"no candidate finished every tuning scene ({', '.join(labels)})")
    if seconds_within is not None:
        limit = mean_of(results, labels[0], "train_seconds")
        if limit is None:
            raise BenchError(f"--seconds-within: the baseline {labels[0]} has no seconds")
        for label in list(means):
            seconds = mean_of(results, label, "train_seconds")
            if seconds is None or seconds > seconds_within * limit:
                del means[label]
    best = max(means, key=lambda label: (means[label], -labels.index(label)))
    return best, means


def half(names: str | None, option: str, split: str) -> list[str]:
    """The scenes named in `names` (all of the half when None), all of `split`'s half;
    BenchError naming `option` otherwise."""
    try:
        return [s[0] for s in pick(names, option, split=split)]
    except BenchError as error:
        raise BenchError(f"{option}: expected scenes of the {split} half ({error})") from None


def config_steps(config: str, sets: list[str]) -> int:
    """train.steps of a run: its --set, else its config file's."""
    for item in sets:
        key, _, value = item.partition("=")
        if key.strip() == "train.steps":
            return int(value)
    with open(config, "rb") as f:
        return int(tomllib.load(f)["train"]["steps"])


def run_text(label: str, config: str, sets: list[str]) -> str:
    return f"{label}@{config}: {' '.join(sets)}"


def pool(args, name: str, gpus: list[str], extra: list[str]) -> subprocess.Popen:
    """scenes_pool.py on `gpus` (their ids), its work folder WORK/<name>, output in its log."""
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=",".join(gpus))
    command = [sys.executable, str(POOL), "--meshes", args.meshes, "--gpus", str(len(gpus))]
    command += ["--work", str(args.work / name), "--out", str(args.work / name / "out")]
    command += ["--dvgo", str(args.dvgo), "--data", str(args.data), *extra]
    log = (args.work / f"{name}.log").open("a")
    return subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--meshes", required=True)
    parser.add_argument("--dvgo", type=Path, default=ROOT / ".anchors" / "dvgo")
    parser.add_argument("--candidate", action="append", default=[], required=True)
    parser.add_argument("--tune-scenes", default=None, help="default: the tuning half")
    parser.add_argument("--report-scenes", default=None, help="default: the held-out half")
    parser.add_argument("--report-run", action="append", default=[])
    parser.add_argument("--scale", default="2,4", help="multiples of the winner's steps")
    parser.add_argument("--gpus", type=int, default=None, help="default: every GPU")
    parser.add_argument(
        "--dvgo-gpus", type=int, default=None, help="default: all but one; 0: tune first"
    )
    parser.add_argument("--tune-per-gpu", type=int, default=1, help="tuning jobs at once a GPU")
    parser.add_argument(
        "--seconds-within",
        type=float,
        default=None,
        help="only candidates within R x the first candidate's mean training seconds",
    )
    parser.add_argument("--work", type=Path, default=ROOT / "bench" / "results" / "tune_report")
    parser.add_argument("--data", type=Path, default=ROOT / "data" / "scenes")
    parser.add_argument("--ngp", default=None, help="torch-ngp's gridencoder folder: the anchor")
    parser.add_argument("--ngp-run", action="append", default=[], help="scenes_pool.py's")
    parser.add_argument("--ngp-steps", type=int, default=20000)
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    args.work, args.data = args.work.resolve(), args.data.resolve()
    try:
        tune = half(args.tune_scenes, "--tune-scenes", "tune")
        report = half(args.report_scenes, "--report-scenes", "held_out")
        candidates = [parse_run(c) for c in args.candidate]
        report_runs = [parse_run(r) for r in args.report_run]
        scales = [int(s) for s in args.scale.split(",") if s.strip()]
        if args.seconds_within is not None:
            if not args.seconds_within >= 1.0:
                raise BenchError(f"--seconds-within: expected R >= 1, got {args.seconds_within}")
            if args.tune_per_gpu != 1:
                raise BenchError(
                    "--seconds-within: needs --tune-per-gpu 1 (jobs sharing a GPU share "
                    f"their seconds), got {args.tune_per_gpu}"
                )
        if any(s < 2 for s in scales):
            raise BenchError(f"--scale: expected integers >= 2, got {args.scale!r}")
        import torch

        count = args.gpus or torch.cuda.device_count()
        dvgo_gpus = args.dvgo_gpus if args.dvgo_gpus is not None else max(count - 1, 0)
        if count < 1 or not 0 <= dvgo_gpus < count:
            raise BenchError(f"--gpus, --dvgo-gpus: expected 0 <= {dvgo_gpus} < {count} GPUs")
    except (BenchError, ValueError) as error:
        print(f"tune_then_report: {error}", file=sys.stderr)
        return 2
    args.work.mkdir(parents=True, exist_ok=True)
    ids = [str(i) for i in range(count)]
    labels = [c[0] for c in candidates]
    say(
        args.work,
        f"tuning {', '.join(labels)} on {', '.join(tune)}; reporting on {', '.join(report)}",
    )
    # generation and DirectVoxGO only (the scenes with scenes_pool's default config's data.*;
    # bench_scenes sets each scene's own data.* over any config's)
    held_args = ["--scenes", ",".join(report)]
    if args.ngp:  # in both calls of the report pool: its table merges the jobs it is given
        held_args += ["--ngp", args.ngp, "--ngp-steps", str(args.ngp_steps)]
        held_args += [a for r in args.ngp_run for a in ("--ngp-run", r)]
    # on one GPU (dvgo_gpus 0) DirectVoxGO waits for the tuning pool, in the last pool
    held = pool(args, "report", ids[:dvgo_gpus], held_args) if dvgo_gpus else None
    runs = [a for c in args.candidate for a in ("--run", c)]
    runs += ["--per-gpu", str(args.tune_per_gpu)]
    tuning = pool(args, "tune", ids[dvgo_gpus:], ["--scenes", ",".join(tune), "--no-dvgo", *runs])
    status = tuning.wait()
    say(args.work, f"tuning pool exited {status}")
    try:
        results = load_results(args.work / "tune" / "out" / "scenes.json")
        best, means = choose(results, labels, args.seconds_within)
    except (BenchError, OSError, ValueError) as error:
        say(args.work, f"no choice: {error}")
        if held is not None:
            held.wait()
        return 1
    label, config, sets, _ = next(c for c in candidates if c[0] == best)
    choice = {"chosen": best, "config": config, "sets": sets, "tuning_means": means, "scenes": tune}
    choice["seconds_within"] = args.seconds_within
    (args.work / "choice.json").write_text(json.dumps(choice, indent=1))
    say(args.work, f"chosen: {best} ({means[best]:.3f} dB mean on the tuning scenes); {means}")
    steps = config_steps(config, sets)
    base = [s for s in sets if not s.startswith("train.steps=")]
    runs = [run_text(f"chosen_{k}x", config, [*base, f"train.steps={steps * k}"]) for k in scales]
    runs = runs[::-1] + [run_text("chosen", config, sets)]  # the longest first
    runs += [run_text(*r[:3]) for r in report_runs]
    status = 0
    if held is not None:
        status = held.wait()
        say(args.work, f"held-out DirectVoxGO pool exited {status}")
    final = pool(args, "report", ids, [*held_args, *(a for r in runs for a in ("--run", r))])
    status = final.wait() or status
    say(
        args.work,
        f"held-out pool exited {status}; table: {args.work / 'report' / 'out' / 'scenes.md'}",
    )
    return 1 if status else 0


if __name__ == "__main__":
    sys.exit(main())
