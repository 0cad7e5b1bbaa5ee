"""bench/training/bench_nerf.py on the CPU: --profile-loop profiles the training loop's own step
(the native ops, from a checkpoint's step on) and prints a table whose shares add up; a
multires config is timed without a grid_sample twin."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # bench/ is a package of the checkout

from bench.training import bench_nerf  # noqa: E402
from train.loop import run as train_run  # noqa: E402

SMALL = [
    "data.scene_size=16",
    "data.scene_train_views=4",
    "data.scene_test_views=1",
    "train.batch_size=128",
    "device=cpu",
]


def test_profile_loop_from_a_checkpoint(tmp_path, capsys):
    overrides = [f"data.path={tmp_path / 'scene'}", "data.generate=true", *SMALL]
    config = ROOT / "configs" / "nerf_realistic_gpu.toml"
    sets = [arg for o in overrides for arg in ("--set", o)]
    argv = ["--config", str(config), *sets, "--warmup", "2", "--profile-loop"]
    assert bench_nerf.main(argv) == 0
    head = capsys.readouterr().out
    assert "from step 2:" in head

    # from a checkpoint: the loop goes on from its step
    run = tmp_path / "run"
    more = [
        "train.steps=10",
        "train.upsample_steps=[5, 8]",
        "output.pictures=false",
        "output.progress=false",
    ]
    train_run(bench_nerf.load_config(str(config), [*overrides, *more]), run, stop_at=3)
    checkpoint = torch.load(run / "checkpoint.pt", map_location="cpu", weights_only=True)
    assert checkpoint["step"] == 3
    argv[-1:-1] = ["--checkpoint", str(run / "checkpoint.pt")]
    assert bench_nerf.main(argv) == 0
    out = capsys.readouterr().out
    first = re.search(r"20 steps from step (\d+): ([0-9.]+) ms of CPU time a step", out)
    assert first is not None and int(first[1]) == 3 + 2 and float(first[2]) > 0
    rows = re.findall(r"^ +([0-9.]+) ms +([0-9.]+)% +[0-9.]+x +(\S+)", out, re.MULTILINE)
    assert sum(float(share) for _, share, _ in rows) <= 100.5
    names = {name for _, _, name in rows}
    assert {"grid::sample", "grid::sample_backward", "grid::march_rays_fill"} & names


def test_profile_eval_times_an_evaluation_and_says_where_it_goes(tmp_path, capsys):
    overrides = [f"data.path={tmp_path / 'scene'}", "data.generate=true", *SMALL]
    config = ROOT / "configs" / "nerf_realistic_gpu.toml"
    sets = [arg for o in overrides for arg in ("--set", o)]
    assert bench_nerf.main(["--config", str(config), *sets, "--profile-eval"]) == 0
    out = capsys.readouterr().out
    timed = re.search(
        r"evaluation: test views 1 of 16x16, 256 rays in ([0-9.]+) s: ([0-9.]+) us", out
    )
    assert timed is not None and float(timed[1]) > 0
    assert float(timed[2]) == pytest.approx(1e6 * float(timed[1]) / 256, rel=0.01, abs=1e-3)
    assert "; 1 renders (chunks and retries), at most 256 rays" in out  # one chunk a view
    assert re.search(r"profile, one evaluation: [0-9.]+ ms of CPU time in all", out)
    rows = re.findall(r"^ +([0-9.]+) ms +([0-9.]+)% +[0-9.]+x +(\S+)", out, re.MULTILINE)
    assert sum(float(share) for _, share, _ in rows) <= 100.5
    assert "grid::march_rays_fill" in {name for _, _, name in rows}  # the render, profiled


def test_a_multires_config_times_both_renderers_and_no_grid_sample_twin(tmp_path, capsys):
    """A multires model has no F.grid_sample twin: the N1 rows time the fused and torch
    renderers with the experiment's optimiser, the grid_sample cells read "-", and the
    JSON says None (it crashed on the missing dense grids before)."""
    import json

    overrides = [f"data.path={tmp_path / 'scene'}", "data.generate=true", *SMALL]
    overrides += ["multires.levels=4", "multires.log2_table_size=10"]
    overrides += ["multires.finest_resolution=32"]
    sets = [arg for o in overrides for arg in ("--set", o)]
    config = ROOT / "configs" / "nerf_multires.toml"
    out = tmp_path / "bench.json"
    argv = ["--config", str(config), *sets, "--warmup", "1", "--reps", "2", "--json", str(out)]
    assert bench_nerf.main([*argv, "--profile"]) == 0
    printed = capsys.readouterr().out
    assert "profile, native_torch" in printed and "profile, grid_sample" not in printed
    rows = json.loads(out.read_text())["rows"]
    for row in rows[:2]:  # trained, dense
        assert row["grid_sample"] is None and row["rgb_max_abs_diff"] is None
        assert row["native"]["synced"]["median"] > 0 and row["native_torch"]["queued"]
        assert row["rgb_max_abs_diff_torch_renderer"] < 1e-4
    loop = rows[2]
    assert loop["grid_sample"] is None and loop["native"]["synced"]["median"] > 0
    assert "| N1 | trained | " in printed and "| grid_sample | - | - | - | - |" in printed
