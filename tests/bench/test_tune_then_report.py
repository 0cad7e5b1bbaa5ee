"""bench/training/tune_then_report.py: the choosing rule and the runs it derives."""

import json
from pathlib import Path

import pytest

import bench.training.tune_then_report as pipeline
from bench.training.bench_scenes import BenchError
from bench.training.scenes_pool import DEFAULT_CONFIG
from bench.training.tune_then_report import choose, config_steps, main


def test_the_highest_mean_over_the_tuning_scenes_wins():
    results = {
        "a": {"x": {"psnr": 30.0}, "y": {"psnr": 31.0}},
        "b": {"x": {"psnr": 34.0}, "y": {"psnr": 30.0}},
    }
    best, means = choose(results, ["x", "y"])
    assert best == "x" and means == {"x": 32.0, "y": 30.5}


def test_a_tie_goes_to_the_first_listed_and_an_incomplete_candidate_is_out():
    results = {"a": {"x": {"psnr": 30.0}, "y": {"psnr": 30.0}, "z": {"psnr": 99.0}}, "b": {}}
    results["b"] = {"x": {"psnr": 32.0}, "y": {"psnr": 32.0}}
    assert choose(results, ["y", "x", "z"])[0] == "y"
    with pytest.raises(BenchError, match="no candidate"):
        choose({"a": {}}, ["x"])


def test_seconds_within_keeps_only_candidates_near_the_baselines_seconds():
    results = {
        "a": {
            "base": {"psnr": 30.0, "train_seconds": 20.0},
            "slow": {"psnr": 33.0, "train_seconds": 25.0},
            "near": {"psnr": 31.0, "train_seconds": 21.0},
        },
        "b": {
            "base": {"psnr": 32.0, "train_seconds": 20.0},
            "slow": {"psnr": 35.0, "train_seconds": 23.0},
            "near": {"psnr": 32.0, "train_seconds": 20.0},
        },
    }
    labels = ["base", "slow", "near"]
    assert choose(results, labels)[0] == "slow"  # without the limit: the highest mean
    best, means = choose(results, labels, seconds_within=1.05)
    assert best == "near" and set(means) == {"base", "near"}  # slow: 24 s > 1.05 x 20
    assert choose(results, labels, seconds_within=1.2)[0] == "slow"
    results["a"]["near"]["psnr"] = 29.0  # no candidate above the baseline: it stays
    assert choose(results, labels, seconds_within=1.05)[0] == "base"
    del results["a"]["base"]["train_seconds"]
    with pytest.raises(BenchError, match="baseline base has no seconds"):
        choose(results, labels, seconds_within=1.05)


def test_steps_come_from_the_sets_else_the_config(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text("[train]\nsteps = 1234\n")
    assert config_steps(str(config), ["a=1"]) == 1234
    assert config_steps(str(config), ["train.steps=50"]) == 50


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--tune-scenes", "dragon_mirror"], "--tune-scenes"),
        (["--report-scenes", "realistic"], "--report-scenes"),
        (["--scale", "1"], "--scale"),
        (["--seconds-within", "0.9"], "--seconds-within: expected R >= 1"),
        (["--seconds-within", "1.05", "--tune-per-gpu", "2"], "needs --tune-per-gpu 1"),
    ],
)
def test_bad_arguments_are_refused_in_one_line(argv, message, capsys, tmp_path):
    base = ["--meshes", str(tmp_path), "--candidate", "x: a=1", "--work", str(tmp_path / "w")]
    assert main(base + argv) == 2
    assert message in capsys.readouterr().err


FAKE_POOL = """
import json, os, sys
from pathlib import Path
args = sys.argv[1:]
work = Path(args[args.index("--work") + 1])
out = Path(args[args.index("--out") + 1])
out.mkdir(parents=True, exist_ok=True)
with open(os.environ["CALLS"], "a") as f:
    f.write(json.dumps({"gpus": os.environ["CUDA_VISIBLE_DEVICES"], "args": args}) + "\\n")
scenes = args[args.index("--scenes") + 1].split(",")
runs = [args[i + 1].split("@")[0].split(":")[0] for i, a in enumerate(args) if a == "--run"]
psnr = {"x": 30.0, "y": 31.0}
results = {s: {r: {"psnr": psnr.get(r, 1.0)} for r in runs} for s in scenes}
(out / "scenes.json").write_text(json.dumps({"scenes": results}))
"""


def fake_pools(tmp_path, monkeypatch) -> Path:
    """FAKE_POOL in place of scenes_pool.py; returns the file its calls are written to."""
    fake = tmp_path / "pool.py"
    fake.write_text(FAKE_POOL)
    monkeypatch.setattr(pipeline, "POOL", fake)
    monkeypatch.setattr(pipeline, "load_results", lambda p: json.loads(p.read_text())["scenes"])
    calls = tmp_path / "calls.jsonl"
    monkeypatch.setenv("CALLS", str(calls))
    return calls


def test_the_pipeline_tunes_chooses_and_reports_on_the_other_half(tmp_path, monkeypatch):
    calls = fake_pools(tmp_path, monkeypatch)
    config = tmp_path / "c.toml"
    config.write_text("[train]\nsteps = 100\n")
    argv = ["--meshes", str(tmp_path), "--gpus", "4", "--work", str(tmp_path / "w")]
    argv += ["--candidate", f"x@{config}: a=1", "--candidate", f"y@{config}: a=2"]
    argv += ["--tune-scenes", "realistic,bunny_glossy", "--report-scenes", "dragon_mirror"]
    argv += ["--report-run", "fast: b=1"]
    assert pipeline.main(argv) == 0
    calls = [json.loads(line) for line in calls.read_text().splitlines()]
    assert len(calls) == 3
    # the first two run at once (either may write first); the held-out report comes last
    tune = next(c for c in calls[:2] if "--no-dvgo" in c["args"])
    held = next(c for c in calls[:2] if c is not tune)
    report = calls[2]
    assert held["gpus"] == "0,1,2" and "--run" not in held["args"]
    assert tune["gpus"] == "3" and "--no-dvgo" in tune["args"]
    assert report["gpus"] == "0,1,2,3" and "dragon_mirror" in report["args"]
    runs = [report["args"][i + 1] for i, a in enumerate(report["args"]) if a == "--run"]
    assert runs == [
        f"chosen_4x@{config}: a=2 train.steps=400",
        f"chosen_2x@{config}: a=2 train.steps=200",
        f"chosen@{config}: a=2",
        f"fast@{DEFAULT_CONFIG}: b=1",
    ]
    choice = json.loads((tmp_path / "w" / "choice.json").read_text())
    assert choice["chosen"] == "y" and choice["scenes"] == ["realistic", "bunny_glossy"]


def test_on_one_gpu_the_tuning_pool_runs_first_and_directvoxgo_joins_the_report(
    tmp_path, monkeypatch
):
    calls = fake_pools(tmp_path, monkeypatch)
    argv = ["--meshes", str(tmp_path), "--gpus", "1", "--work", str(tmp_path / "w")]
    argv += ["--candidate", "x: a=1", "--candidate", "y: a=2", "--scale", ""]
    argv += ["--tune-scenes", "realistic", "--report-scenes", "dragon_mirror,dino_mirror"]
    assert pipeline.main(argv) == 0
    tune, report = [json.loads(line) for line in calls.read_text().splitlines()]
    assert tune["gpus"] == "0" and "--no-dvgo" in tune["args"]
    assert tune["args"][tune["args"].index("--scenes") + 1] == "realistic"
    assert report["gpus"] == "0" and "--no-dvgo" not in report["args"]
    assert report["args"][report["args"].index("--scenes") + 1] == "dragon_mirror,dino_mirror"
    runs = [report["args"][i + 1] for i, a in enumerate(report["args"]) if a == "--run"]
    assert runs == [f"chosen@{DEFAULT_CONFIG}: a=2"]
    log = (tmp_path / "w" / "pipeline.log").read_text()
    assert "DirectVoxGO pool" not in log and "chosen: y" in log


def test_a_dvgo_gpu_count_that_leaves_no_gpu_to_tune_on_is_refused(tmp_path, capsys):
    argv = ["--meshes", str(tmp_path), "--candidate", "x: a=1", "--work", str(tmp_path / "w")]
    assert main(argv + ["--gpus", "2", "--dvgo-gpus", "2"]) == 2
    assert "--dvgo-gpus" in capsys.readouterr().err
