"""A diverging run stops: the first non-finite loss or gradient ends it with one line, exit
code 2, the last finite checkpoint kept and resumable; run files stay strict JSON; a loss
that grows by orders of magnitude gets a warning (train/divergence.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

import train.loop
from tests.train.nerf.test_nerf import SHORT as NERF_SHORT
from tests.train.sdf.test_sdf import SHORT as SDF_SHORT
from tests.train.test_train import TINY, final_state, one_line_error, sets
from train.__main__ import main
from train.divergence import DivergenceWatch
from train.metrics import json_text

# Each experiment's short run (the nerf's shortened further), the step of its first
# checkpoint, and learning rates that make it diverge at once.
NERF = [*NERF_SHORT, "train.steps=50", "train.upsample_steps=[30]", "eval.every=20"]
RUNS = {
    "field": (TINY, 8, ["train.lr=1e38", "train.lr_final=1e38"]),
    "sdf": (SDF_SHORT, 20, ["train.lr=1e38", "train.lr_final=1e38"]),
    "nerf": (
        [*NERF, "output.checkpoint_every=20"],
        20,
        [f"nerf.lr_{k}=1e38" for k in ("density", "color", "mlp")],
    ),
}


def poison(monkeypatch, from_step: int) -> None:
    """The loss of every experiment the loop makes turns NaN from its `from_step`-th step
    (counted in this process) on."""
    make = train.loop.make_experiment

    def make_poisoned(*args, **kwargs):
        exp = make(*args, **kwargs)
        loss, count = exp.loss, [0]

        def poisoned():
            count[0] += 1
            value, batch = loss()
            return (value * math.nan, batch) if count[0] >= from_step else (value, batch)

        exp.loss = poisoned
        return exp

    monkeypatch.setattr(train.loop, "make_experiment", make_poisoned)


def strict_json(text: str) -> object:
    """json.loads that refuses NaN and Infinity, as strict JSON readers do."""

    def refuse(name: str) -> None:
        raise ValueError(f"not JSON: {name}")

    return json.loads(text, parse_constant=refuse)


def records(out: Path) -> list[dict]:
    return [strict_json(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def scene(tmp_path_factory) -> Path:
    from train.nerf.scenes.generate import generate_scene

    return generate_scene(tmp_path_factory.mktemp("scene") / "scene", size=24, n_train=12, n_test=2)


def base_args(experiment: str, scene: Path) -> list[str]:
    short = RUNS[experiment][0]
    return [*short, f"data.path={scene}"] if experiment == "nerf" else list(short)


@pytest.mark.parametrize("experiment", RUNS)
def test_a_diverging_run_stops_keeps_the_last_checkpoint_and_resumes(
    experiment, scene, tmp_path, capsys, monkeypatch
):
    saved, base = RUNS[experiment][1], base_args(experiment, scene)
    whole, out = tmp_path / "whole", tmp_path / "run"
    assert main(["--out", str(whole), *sets(*base)]) == 0
    assert main(["--out", str(out), *sets(*base), "--stop-at", str(saved)]) == 0
    capsys.readouterr()

    # the loss turns NaN at the 5th step after the checkpoint: stopped, one line, exit 2
    with monkeypatch.context() as patch:
        poison(patch, 5)
        assert main(["--out", str(out), "--resume"]) == 2
    err = one_line_error(capsys)
    assert f"diverged: step {saved + 5}: the loss is not finite; try a lower learning rate" in err
    assert f"checkpoint.pt of step {saved} is intact" in err and "--resume" in err
    state = final_state(out)
    assert state["step"] == saved
    assert all(torch.isfinite(t).all() for t in state["model"].values())
    assert not (out / "summary.json").exists()
    steps = [r["step"] for r in records(out)]
    assert steps == [r["step"] for r in records(whole) if r["step"] <= saved]

    # resumed: the uninterrupted run's result
    assert main(["--out", str(out), "--resume"]) == 0
    for key, value in final_state(whole)["model"].items():
        assert torch.equal(final_state(out)["model"][key], value), key
    strict_json((out / "summary.json").read_text())
    assert len(records(out)) == len(records(whole))


@pytest.mark.parametrize("experiment", RUNS)
def test_huge_learning_rates_stop_the_run_with_one_line(experiment, scene, tmp_path, capsys):
    out = tmp_path / "run"
    huge = RUNS[experiment][2]
    assert main(["--out", str(out), *sets(*base_args(experiment, scene), *huge)]) == 2
    err = one_line_error(capsys)
    assert "diverged: step " in err and "is not finite; try a lower learning rate" in err
    assert not (out / "summary.json").exists()
    records(out)  # strict JSON


def test_a_run_diverging_from_the_start_says_so_before_any_checkpoint(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["--out", str(out), *sets(*SDF_SHORT, *RUNS["sdf"][2])]) == 2
    err = one_line_error(capsys)
    assert "diverged: step 2: the loss (its surface, normal and eikonal terms) is not finite" in err
    assert "no checkpoint was written yet" in err
    assert not (out / "checkpoint.pt").exists() and records(out) == []


def test_a_loss_growing_by_orders_of_magnitude_gets_a_warning(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["--out", str(out), *sets(*TINY, "train.lr=1e12", "train.lr_final=1e12")]) == 0
    err = capsys.readouterr().err
    assert err.count("warning: train_mse") == 1 and "times its best" in err, err
    assert "lower learning rate" in err
    strict_json((out / "summary.json").read_text())


def test_a_healthy_run_gets_no_warning(tmp_path, capsys):
    assert main(["--out", str(tmp_path / "run"), *sets(*TINY)]) == 0
    assert "warning" not in capsys.readouterr().err


def test_the_watch_flags_the_first_non_finite_step_and_what_it_was():
    watch = DivergenceWatch(torch.device("cpu"), ["surface", "eikonal"])
    one, grads = torch.tensor(1.0), [torch.randn(4, 4), None, torch.randn(3)]
    watch.observe(one, one, grads, [one, one])
    assert int(watch.first) == 0 and (float(watch.best), int(watch.best_at)) == (1.0, 1)
    grads[2][1] = -math.inf  # a gradient, the loss finite
    watch.observe(one, torch.tensor(0.5), grads, [one, one])
    assert int(watch.first) == 2 and watch.what() == "a gradient (the loss was finite)"
    assert (float(watch.best), int(watch.best_at)) == (0.5, 2)
    nan = torch.tensor(math.nan)
    watch.observe(nan, nan, grads, [one, nan])  # later steps do not change the first
    assert int(watch.first) == 2 and watch.what() == "a gradient (the loss was finite)"
    other = DivergenceWatch(torch.device("cpu"), ["surface", "eikonal"])
    other.observe(nan, nan, [torch.ones(2)], [one, nan])
    assert int(other.first) == 1 and other.what() == "the loss (its eikonal term)"


def test_run_files_are_strict_json():
    assert json_text({"psnr": math.inf, "a": [1.5, math.nan], "b": {"c": -math.inf}}) == (
        '{"psnr": null, "a": [1.5, null], "b": {"c": null}}'
    )
