"""bench/training/tune_then_report.py: the choosing rule and the runs it derives."""

import pytest

from bench.training.bench_scenes import BenchError
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
    ],
)
def test_bad_arguments_are_refused_in_one_line(argv, message, capsys, tmp_path):
    base = ["--meshes", str(tmp_path), "--candidate", "x: a=1", "--work", str(tmp_path / "w")]
    assert main(base + argv) == 2
    assert message in capsys.readouterr().err
