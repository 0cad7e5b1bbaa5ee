"""Short runs just work: `--set train.steps=20` runs every shipped config, its schedule
scaled to the run (train/short_runs.py); a full-length run's config is untouched."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.train.test_train import sets
from train.__main__ import main
from train.config import ConfigError, load_config, to_dict

CONFIGS = sorted(Path(__file__).resolve().parents[2].glob("configs/*.toml"))
CPU_CONFIGS = [p for p in CONFIGS if not p.stem.endswith("_gpu")]

# Small data and grids, so that 20 steps of each config take a few seconds on a CPU; the
# schedule keys (upsample steps, cadences, occupancy steps) are left to the scaling.
SMALL = {
    "field": [
        "grid.resolution=8",
        "train.upsample_resolutions=[10, 12]",
        "train.batch_size=512",
        "eval.points=2000",
    ],
    "sdf": [
        "points.count=2000",
        "train.batch_size=1024",
        "train.eikonal_points=1024",
        "eval.points=1000",
        "output.mesh=false",
    ],
    "nerf": [
        "data.scene_size=12",
        "data.scene_train_views=3",
        "data.scene_test_views=1",
        "train.batch_size=256",
        "nerf.hidden=8",
        "output.turntable_frames=0",
    ],
}


def sphere_points(path: Path, n: int = 2000) -> Path:
    """[n, 6] points and outward normals of a sphere of radius 0.5, as .npy."""
    normals = np.random.default_rng(0).normal(size=(n, 3))
    normals /= np.linalg.norm(normals, axis=1, keepdims=True)
    np.save(path, np.concatenate([0.5 * normals, normals], axis=1).astype(np.float32))
    return path


def small_args(config: Path, tmp_path: Path) -> list[str]:
    """The config's experiment made small, its data in tmp_path."""
    c = load_config(config)
    args = [*SMALL[c.experiment], "device=cpu", "output.pictures=false", "output.progress=false"]
    if c.experiment == "field" and not c.train.upsample_steps:
        args = [a for a in args if not a.startswith("train.upsample_resolutions")]
    if c.experiment == "sdf" and c.points.kind == "file":
        args = [a for a in args if not a.startswith("points.count")]
        args.append(f"points.path={sphere_points(tmp_path / 'points.npy')}")
    if c.experiment == "sdf" and c.train.upsample_steps:
        args.append(
            f"train.upsample_resolutions={[12 + 4 * i for i in range(len(c.train.upsample_steps))]}"
        )
        args.append("grid.resolution=8")
    if c.experiment == "nerf":
        args += [f"data.path={tmp_path / 'scene'}", "data.generate=true"]
        grown = [16 + 4 * i for i in range(len(c.train.upsample_steps))]
        args += ["grid.resolution=12", f"train.upsample_resolutions={grown}"]
    return args


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.stem)
def test_every_shipped_config_loads_with_twenty_steps(config, capsys):
    c = load_config(config, ["train.steps=20"])
    assert all(0 < s < 20 for s in c.train.upsample_steps)
    assert c.eval.every == max(
        1, round(load_config(config).eval.every * 20 / load_config(config).train.steps)
    )
    full = load_config(config)
    if full.eval.every >= 20 or any(s >= 20 for s in full.train.upsample_steps):
        assert "train.steps = 20 is shorter than" in capsys.readouterr().err


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.stem)
def test_a_full_length_run_is_unchanged(config, capsys):
    full = load_config(config)
    again = load_config(config, [f"train.steps={full.train.steps}"])
    longer = load_config(config, [f"train.steps={full.train.steps + 1}"])
    assert to_dict(again) == to_dict(full)
    assert to_dict(longer) == {
        **to_dict(full),
        "train": {**to_dict(full)["train"], "steps": full.train.steps + 1},
    }
    assert "shorter" not in capsys.readouterr().err


def test_the_schedule_scales_in_proportion_and_says_so(capsys):
    c = load_config(CONFIGS[0].parent / "nerf_scene.toml", ["train.steps=100"])
    # written for 1000 steps: upsample at [150, 400], eval every 200, occupancy 50 / 50
    assert c.train.upsample_steps == [15, 40]
    assert (c.eval.every, c.nerf.occupancy_start, c.nerf.occupancy_every) == (20, 5, 5)
    assert c.output.checkpoint_every == 0  # off stays off
    err = capsys.readouterr().err
    assert "scaled by 100/1000" in err and "train.upsample_steps [150, 400] -> [15, 40]" in err


def test_keys_given_on_the_command_line_are_not_scaled():
    sdf = CONFIGS[0].parent / "sdf_points_sphere.toml"
    c = load_config(sdf, ["train.steps=100", "eval.every=7"])
    assert c.eval.every == 7 and c.train.upsample_steps == [15, 40]
    with pytest.raises(ConfigError, match="train.upsample_steps"):
        load_config(sdf, ["train.steps=100", "train.upsample_steps=[150, 400]"])


def test_upsample_steps_stay_increasing_inside_a_very_short_run():
    sdf = CONFIGS[0].parent / "sdf_scan_gpu.toml"  # upsample at [150, 400, 600] of 1000
    assert load_config(sdf, ["train.steps=4"]).train.upsample_steps == [1, 2, 3]


@pytest.mark.parametrize("config", CPU_CONFIGS, ids=lambda p: p.stem)
def test_twenty_steps_of_every_cpu_config_run(config, tmp_path):
    out = tmp_path / "run"
    args = ["--config", str(config), "--out", str(out)]
    overrides = ["train.steps=20", *small_args(config, tmp_path)]
    assert main([*args, *sets(*overrides)]) == 0
    assert json.loads((out / "summary.json").read_text())["steps"] == 20
    every = load_config(config, overrides).eval.every  # scaled
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == sorted({*range(every, 21, every), 20})
