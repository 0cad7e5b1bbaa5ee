"""bench/training/scenes_pool.py on the CPU: its jobs and their order, and the pool itself run with
stand-in jobs (a small Python program per job instead of bench_scenes.py): one job per
"GPU" at a time, a failed generation skips its scene's later jobs, the merged table."""

from __future__ import annotations

import itertools
import json
import os
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # bench/ is a package of the checkout

from bench.training import scenes_pool  # noqa: E402
from bench.training.bench_scenes import BenchError  # noqa: E402


def _args(tmp_path: Path, *extra: str):
    argv = ["--meshes", str(tmp_path), "--out", str(tmp_path / "out")]
    args = scenes_pool.parse_args([*argv, "--work", str(tmp_path / "work"), *extra])
    args.runs = [scenes_pool.parse_run(r) for r in args.run]
    args.ngp_runs = scenes_pool.ngp_runs(args, set(scenes_pool.NAMES))
    return args


def test_jobs_and_their_order(tmp_path):
    args = _args(tmp_path, "--run", "fast", "--run", "q@c.toml: train.steps=9 eval.every=3")
    rows = scenes_pool.pick("realistic,armadillo_large")
    jobs = scenes_pool.make_jobs(args, rows)
    names = [j["name"] for j in jobs]
    assert names == [
        "gen_armadillo_large",  # the largest scene first, in every kind of job
        "gen_realistic",
        "dvgo_armadillo_large",
        "dvgo_realistic",
        "fast_armadillo_large",  # ours' runs scene by scene: a pool cut short leaves pairs
        "q_armadillo_large",
        "fast_realistic",
        "q_realistic",
    ]
    assert jobs[2]["needs"] == ["gen_armadillo_large", "dvgo_build"]
    assert jobs[7]["needs"] == ["gen_realistic"]
    command = jobs[7]["command"]
    assert command[1].endswith("bench_scenes.py") and "--ours-only" in command
    assert command[command.index("--config") + 1] == "c.toml"
    assert command[command.index("--label") + 1] == "q"
    assert ["--set", "train.steps=9", "--set", "eval.every=3"] == command[-6:-2]
    assert command[-2:] == ["--out", str(tmp_path / "work" / "jobs" / "q_realistic")]
    fast = jobs[4]["command"]
    assert fast[fast.index("--config") + 1].endswith("configs/nerf_realistic_gpu.toml")
    assert [j["name"] for j in scenes_pool.make_jobs(_args(tmp_path, "--no-dvgo"), rows)] == [
        "gen_armadillo_large",
        "gen_realistic",
    ]
    mixed = scenes_pool.pick("realistic,dragon_mirror")  # one scene of each half
    held = scenes_pool.make_jobs(_args(tmp_path, "--dvgo-split", "held_out"), mixed)
    assert [j["name"] for j in held if j["name"].startswith("dvgo_")] == ["dvgo_dragon_mirror"]


def test_one_gpu_goes_scene_by_scene(tmp_path):
    args = _args(tmp_path, "--run", "fast", "--run", "q@c.toml on realistic: train.steps=9")
    jobs = scenes_pool.make_jobs(args, scenes_pool.pick("realistic,armadillo_large"))
    names = [j["name"] for j in scenes_pool.scene_by_scene(jobs)]
    assert names == [
        "gen_armadillo_large",
        "dvgo_armadillo_large",
        "fast_armadillo_large",
        "gen_realistic",
        "dvgo_realistic",
        "fast_realistic",
        "q_realistic",
    ]


def test_a_run_on_some_scenes_only(tmp_path):
    run = "long@c.toml on realistic, bull_rough: train.steps=9"
    args = _args(tmp_path, "--no-dvgo", "--run", "fast", "--run", run)
    assert args.runs[1] == ("long", "c.toml", ["train.steps=9"], ["realistic", "bull_rough"])
    assert (
        scenes_pool.describe(*args.runs[1]) == "long: c.toml on realistic,bull_rough train.steps=9"
    )
    rows = scenes_pool.pick("realistic,armadillo_large,bull_rough")
    names = [j["name"] for j in scenes_pool.make_jobs(args, rows)][3:]
    assert names == [
        "fast_armadillo_large",
        "fast_realistic",
        "long_realistic",
        "fast_bull_rough",
        "long_bull_rough",
    ]


@pytest.mark.parametrize("run", ["dvgo", "a b: x=1", "q: steps", "q on cube: x=1", "q on : x=1"])
def test_bad_runs_are_refused(run):
    with pytest.raises(BenchError, match="--(run|label)"):
        scenes_pool.parse_run(run)


def _stand_in(out: Path, scene: str, name: str, fail: bool) -> list[str]:
    """A job that records when it ran and writes bench_scenes.py's scenes.json."""
    label = name.split("_")[0]
    entry = {"mesh": None, "look": "x", "size": 400, "generate_seconds": 7.0}
    if label == "fast":
        entry["fast"] = {"psnr": 30.0, "ssim": 0.9, "train_seconds": 12.0, "curve": []}
    code = (
        "import json, pathlib, sys, time, os\n"
        f"out = pathlib.Path({str(out)!r}); out.mkdir(parents=True, exist_ok=True)\n"
        f"(out / 'ran').write_text(f'{{time.time()}} {{os.environ[\"CUDA_VISIBLE_DEVICES\"]}}')\n"
        "time.sleep(0.3)\n"
        f"sys.exit(3) if {fail} else None\n"
        f"(out / 'scenes.json').write_text(json.dumps({{'scenes': {{{scene!r}: {entry!r}}}}}))\n"
    )
    return [sys.executable, "-c", code]


def test_the_pool_runs_jobs_per_gpu_and_skips_after_a_failure(tmp_path, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)  # GPUs 0 and 1 of the host
    args = _args(tmp_path, "--no-dvgo", "--run", "fast")
    rows = scenes_pool.pick("realistic,bunny_glossy,cow_mirror")
    jobs = scenes_pool.make_jobs(args, rows)
    for job in jobs:
        scene = job["args"][1]
        out = args.work / "jobs" / job["name"]
        job["command"] = _stand_in(out, scene, job["name"], job["name"] == "gen_cow_mirror")
    meta = {"device_name": "2 x stand-in", "torch": "x", "date": "now", "config": "fast"}
    start = time.time()
    assert scenes_pool.run_pool(args, jobs, 2, meta) == 1  # one generation failed
    ran = {
        j["name"]: (args.work / "jobs" / j["name"] / "ran").read_text().split()
        for j in jobs
        if (args.work / "jobs" / j["name"] / "ran").is_file()
    }
    assert set(ran) == {
        "gen_realistic",
        "gen_bunny_glossy",
        "gen_cow_mirror",
        "fast_realistic",
        "fast_bunny_glossy",
    }  # fast_cow_mirror skipped: its scene failed
    assert {gpu for _, gpu in ran.values()} == {"0", "1"}
    assert all(float(t) >= start for t, _ in ran.values())
    for scene in ("realistic", "bunny_glossy"):  # after its scene's generation
        assert float(ran[f"fast_{scene}"][0]) > float(ran[f"gen_{scene}"][0])
    saved = json.loads((args.out / "scenes.json").read_text())["scenes"]
    assert set(saved) == {"realistic", "bunny_glossy"}
    assert (
        saved["realistic"]["generate_seconds"] == 7.0 and saved["realistic"]["fast"]["psnr"] == 30
    )
    assert "| realistic | tune | 400x400 | fast | 30.00" in (args.out / "scenes.md").read_text()
    log = (args.work / "logs" / "fast_realistic.log").read_text()
    assert log == ""  # each job's output goes to its own log


def test_per_gpu_runs_several_jobs_at_once_on_one_gpu(tmp_path, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)  # GPUs 0 and 1 of the host
    args = _args(tmp_path, "--no-dvgo", "--per-gpu", "2", "--run", "a", "--run", "b")
    jobs = scenes_pool.make_jobs(args, scenes_pool.pick("realistic"))
    for job in jobs:
        job["command"] = _stand_in(
            args.work / "jobs" / job["name"], job["args"][1], job["name"], False
        )
    meta = {"device_name": "1 x stand-in", "torch": "x", "date": "now", "config": ""}
    assert scenes_pool.run_pool(args, jobs, 1, meta) == 0
    ran = [(args.work / "jobs" / j["name"] / "ran").read_text().split() for j in jobs]
    assert [j["name"] for j in jobs] == ["gen_realistic", "a_realistic", "b_realistic"]
    assert [gpu for _, gpu in ran] == ["0", "0", "0"]
    (_, _), (a, _), (b, _) = ran
    assert abs(float(a) - float(b)) < 0.25  # both started before either's 0.3 s ended


def test_anchors_run_alone_on_their_gpu_whatever_per_gpu_says(tmp_path, monkeypatch):
    """With two jobs a GPU, an anchor's job or a scene's generation starts only on an idle
    GPU and nothing starts beside it; ours' jobs still share."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    ngp = ["--ngp", str(tmp_path / "gridencoder"), "--ngp-run", "ngp:", "--ngp-run", "ngp_a:"]
    args = _args(tmp_path, "--no-dvgo", "--per-gpu", "2", "--run", "a", "--run", "b", *ngp)
    jobs = scenes_pool.make_jobs(args, scenes_pool.pick("realistic"))
    alone = {j["name"]: j["alone"] for j in jobs}
    assert alone == {
        "gen_realistic": True,
        "a_realistic": False,
        "b_realistic": False,
        "ngp_realistic": True,
        "ngp_a_realistic": True,
    }
    for job in jobs:
        job["command"] = _stand_in(args.work / "jobs" / job["name"], "realistic", "x", False)
    monkeypatch.setattr(scenes_pool, "NGP_BUILD", "pass")
    meta = {"device_name": "1 x stand-in", "torch": "x", "date": "now", "config": ""}
    assert scenes_pool.run_pool(args, jobs, 1, meta) == 0
    start = {n: float((args.work / "jobs" / n / "ran").read_text().split()[0]) for n in alone}
    assert abs(start["a_realistic"] - start["b_realistic"]) < 0.25  # ours: two at once
    runs = sorted((start[n], start[n] + 0.3, n) for n in alone)  # each job sleeps 0.3 s
    for (_, end, first), (begin, _, second) in itertools.pairwise(runs):
        if alone[first] or alone[second]:
            assert begin >= end, (first, second)  # an anchor or a generation shares nothing


def test_per_gpu_below_one_is_refused(tmp_path, capsys):
    assert (
        scenes_pool.main(["--meshes", str(tmp_path), "--no-dvgo", "--gpus", "1", "--per-gpu", "0"])
        == 2
    )
    assert "--per-gpu: expected at least 1, got 0" in capsys.readouterr().err


def test_gsplat_jobs_wait_for_their_build_and_are_skipped_when_it_fails(tmp_path, monkeypatch):
    args = _args(tmp_path, "--no-dvgo", "--gsplat", "--gsplat-steps", "7")
    jobs = scenes_pool.make_jobs(args, scenes_pool.pick("realistic"))
    assert [j["name"] for j in jobs] == ["gen_realistic", "gsplat_realistic"]
    assert jobs[1]["needs"] == ["gen_realistic", "gsplat_build"]
    command = jobs[1]["command"]
    assert command[command.index("--gsplat-steps") + 1] == "7" and "--gsplat-only" in command
    jobs[0]["command"] = _stand_in(args.work / "jobs" / "gen_realistic", "realistic", "gen", False)
    monkeypatch.setattr(scenes_pool, "GSPLAT_BUILD", "raise SystemExit(1)")  # gsplat missing
    meta = {"device_name": "1 x stand-in", "torch": "x", "date": "now", "config": ""}
    assert scenes_pool.run_pool(args, jobs, 1, meta) == 1
    assert not (args.work / "jobs" / "gsplat_realistic").exists()  # skipped, never started


def test_gsplat_steps_below_one_are_refused(tmp_path, capsys):
    argv = [
        "--meshes",
        str(tmp_path),
        "--no-dvgo",
        "--gpus",
        "1",
        "--gsplat",
        "--gsplat-steps",
        "0",
    ]
    assert scenes_pool.main(argv) == 2
    assert "--gsplat-steps: expected at least 1, got 0" in capsys.readouterr().err


def test_ngp_runs_on_the_scenes_asked_wait_for_their_build(tmp_path, monkeypatch):
    ngp = ["--ngp", str(tmp_path / "gridencoder"), "--ngp-steps", "7"]
    ngp += ["--ngp-run", "ngp on realistic:", "--ngp-run", "ngp_rays: --ngp-samples 65536"]
    args = _args(tmp_path, "--no-dvgo", *ngp)
    jobs = scenes_pool.make_jobs(args, scenes_pool.pick("realistic,bull_rough"))
    names = ["gen_realistic", "gen_bull_rough", "ngp_realistic"]
    assert [j["name"] for j in jobs] == [*names, "ngp_rays_realistic", "ngp_rays_bull_rough"]
    assert jobs[2]["needs"] == ["gen_realistic", "ngp_build"]
    command = jobs[2]["command"]
    assert "--ngp-only" in command and command[command.index("--ngp-steps") + 1] == "7"
    assert command[command.index("--ngp") + 1] == str(tmp_path / "gridencoder")
    assert command[command.index("--ngp-label") + 1] == "ngp"
    rays = jobs[3]["command"]
    assert rays[rays.index("--ngp-label") + 1] == "ngp_rays"
    assert rays[rays.index("--ngp-args") + 1] == "--ngp-samples 65536"
    jobs = [jobs[0], jobs[2]]
    jobs[0]["command"] = _stand_in(args.work / "jobs" / "gen_realistic", "realistic", "gen", False)
    monkeypatch.setattr(scenes_pool, "NGP_BUILD", "raise SystemExit(1)")  # nerfacc missing
    meta = {"device_name": "1 x stand-in", "torch": "x", "date": "now", "config": ""}
    assert scenes_pool.run_pool(args, jobs, 1, meta) == 1
    assert not (args.work / "jobs" / "ngp_realistic").exists()  # skipped, never started


def test_ngp_alone_is_the_anchor_on_every_scene(tmp_path):
    args = _args(tmp_path, "--no-dvgo", "--ngp", str(tmp_path))
    assert scenes_pool.ngp_runs(args, {"realistic"}) == [("ngp", [], None)]
    assert scenes_pool.ngp_runs(_args(tmp_path, "--no-dvgo"), {"realistic"}) == []


@pytest.mark.parametrize(
    "extra, message",
    [
        ([], "no src/gridencoder.cu there"),
        (["--ngp-steps", "0"], "--ngp-steps: expected at least 1, got 0"),
        (["--ngp-run", "ngp on bull_rough:"], "--ngp-run ngp on: none of bull_rough is among"),
        (["--ngp-run", "fast: --ngp-step 0.01"], "--ngp-label: expected ngp or ngp_<"),
        (["--ngp-run", "ngp_a: 0.01"], "--ngp-run ngp_a: expected bench_nerfacc options"),
        (["--ngp-run", "ngp", "--ngp-run", "ngp"], "--ngp-run: expected each label once"),
    ],
)
def test_bad_ngp_arguments_are_refused(tmp_path, capsys, extra, message):
    folder = tmp_path / "gridencoder"
    if extra:
        (folder / "src").mkdir(parents=True)
        (folder / "src" / "gridencoder.cu").write_text("")
    argv = ["--meshes", str(tmp_path), "--no-dvgo", "--gpus", "1", "--scenes", "realistic"]
    assert scenes_pool.main([*argv, "--ngp", str(folder), *extra]) == 2
    assert message in capsys.readouterr().err


def test_ngp_run_without_ngp_is_refused(tmp_path, capsys):
    argv = ["--meshes", str(tmp_path), "--no-dvgo", "--gpus", "1", "--ngp-run", "ngp:"]
    assert scenes_pool.main(argv) == 2
    assert "--ngp-run: expected --ngp DIR" in capsys.readouterr().err


@pytest.mark.parametrize("on", ["bull_rough", ","])
def test_a_run_on_no_scene_of_the_pool_is_refused(tmp_path, capsys, on):
    argv = ["--meshes", str(tmp_path), "--no-dvgo", "--gpus", "1", "--scenes", "realistic"]
    assert scenes_pool.main([*argv, "--run", f"x on {on}: train.steps=9"]) == 2
    assert "--run x on: none of " in capsys.readouterr().err


def test_split_picks_one_half_of_the_scenes(tmp_path, capsys):
    args = _args(tmp_path, "--split", "held_out", "--no-dvgo")
    assert args.split == "held_out"
    rows = scenes_pool.pick(args.scenes, split=args.split)
    held = {s.name for s in scenes_pool.SCENES if s.split == "held_out"}
    names = {j["name"] for j in scenes_pool.make_jobs(args, rows)}
    assert names == {f"gen_{n}" for n in held} and len(held) >= 4
    argv = ["--meshes", str(tmp_path), "--no-dvgo", "--gpus", "1"]
    assert scenes_pool.main([*argv, "--split", "heldout"]) == 2
    assert "--split: expected tune, held_out or all, got 'heldout'" in capsys.readouterr().err
    assert scenes_pool.main([*argv, "--split", "tune", "--scenes", "dino_mirror"]) == 2
    assert "--split tune: dino_mirror not in it" in capsys.readouterr().err


def test_device_id_follows_the_callers_visible_devices(monkeypatch):
    from bench.training.scenes_pool import device_id

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert [device_id(g) for g in range(3)] == ["0", "1", "2"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3, 1")
    assert [device_id(g) for g in range(2)] == ["3", "1"]


def test_builds_run_at_the_lowest_cpu_priority(tmp_path):
    """An anchor's build takes only the CPU the measured jobs leave idle."""
    log = tmp_path / "build.log"
    build = scenes_pool.start_build("import os; print('nice', os.nice(0))", log)
    assert build.wait(timeout=60) == 0
    assert log.read_text().split() == ["nice", str(min(os.nice(0) + 19, 19))]
