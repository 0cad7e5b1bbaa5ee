"""The fitting loop: config errors, a tiny run's outputs, exact resume, targets."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import numpy as np
import pytest
import torch

from train.__main__ import main
from train.config import ConfigError, load_config, reference_table, to_dict, to_toml

# A run small enough for a second or two on a CPU.
TINY = [
    "device=cpu",
    "grid.resolution=8",
    "train.steps=24",
    "train.batch_size=512",
    "train.lr=0.1",
    "train.lr_final=0.01",
    "eval.every=8",
    "eval.points=2000",
    "output.checkpoint_every=8",
    "output.slice_resolution=24",
    "output.progress=false",
    "output.pictures=false",
]


def sets(*pairs: str) -> list[str]:
    return [arg for pair in pairs for arg in ("--set", pair)]


# ---- config errors -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides, key",
    [
        (["train.stepz=10"], "train.stepz"),
        (["trian.steps=10"], "trian"),
        (["train.steps=many"], "train.steps"),
        (["train.steps=10.5"], "train.steps"),
        (["train.lr=fast"], "train.lr"),
        (["output.pictures=1"], "output.pictures"),
        (["grid.resolution=-4"], "grid.resolution"),
        (["grid.resolution=[8, 0, 8]"], "grid.resolution"),
        (["grid.resolution=[8, 8]"], "grid.resolution"),
        (["grid.bounds=[[0, 0, 0], [1, 0, 1]]"], "grid.bounds"),
        (["target.kind=npy", "target.path=/nonexistent/volume.npy"], "target.path"),
        (["target.kind=npy"], "target.path"),
        (["target.kind=teapot"], "target.kind"),
        (["target.kind=torus", "target.radius=0.3"], "target.radius"),
        (["train.surface_fraction=0.5"], "train.surface_fraction"),
        (["train.upsample_steps=[10]"], "train.upsample_resolutions"),
        (
            ["train.upsample_steps=[10]", "train.upsample_resolutions=[4]"],
            "train.upsample_resolutions[0]",
        ),
        (
            ["train.upsample_steps=[5000]", "train.upsample_resolutions=[128]"],
            "train.upsample_steps",
        ),
        (["eval.every=0"], "eval.every"),
        (["device=tpu"], "device"),
        (["seed"], "--set"),
    ],
)
def test_config_errors_name_the_key(overrides, key):
    with pytest.raises(ConfigError) as error:
        load_config(None, overrides)
    assert str(error.value).startswith(f"{key}: "), str(error.value)


def test_config_error_in_a_file(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("[train]\nsteps = 10\nbatch = 4\n")
    with pytest.raises(ConfigError, match=r"^train.batch: unknown key; did you mean 'batch_size'"):
        load_config(path)
    path.write_text("[grid]\nresolution = '64'\n")
    with pytest.raises(ConfigError, match=r"^grid.resolution: expected an integer or a list"):
        load_config(path)


def test_main_prints_config_errors_and_exits_2(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["--out", str(out), *sets("train.steps=-1")]) == 2
    err = capsys.readouterr().err
    assert "train.steps: expected an integer >= 1" in err
    assert "Traceback" not in err
    assert not out.exists()  # nothing was started
    assert main(["--config", str(tmp_path / "missing.toml")]) == 2
    assert "--config: no such file" in capsys.readouterr().err
    assert main(["--resume"]) == 2
    assert "--resume: needs --out" in capsys.readouterr().err


def test_overrides_parse_toml_values():
    config = load_config(
        None, ["grid.resolution=[4, 5, 6]", "train.lr=1e-2", "target.kind=torus", "seed=7"]
    )
    assert config.grid.resolution == [4, 5, 6]
    assert config.train.lr == 0.01 and config.seed == 7
    assert config.target.kind == "torus"


def test_switching_kind_on_the_command_line_drops_the_files_keys(tmp_path):
    path = tmp_path / "density.toml"
    path.write_text("[target]\nkind = 'density'\nfrequency = 2.0\n")
    assert load_config(path, ["target.kind=sphere"]).target.kind == "sphere"


def test_resolved_config_round_trips_and_shipped_configs_load(tmp_path):
    config = load_config(None, ["target.kind=box", "grid.resolution=[4, 5, 6]"])
    path = tmp_path / "config.toml"
    path.write_text(to_toml(config))
    assert "radius" not in tomllib.loads(path.read_text())["target"]  # box keys only
    assert to_dict(load_config(path)) == to_dict(config)
    for shipped in sorted(Path(__file__).parent.parent.glob("configs/*.toml")):
        load_config(shipped, ["device=cpu"])
    assert "`train.steps`" in reference_table()


# ---- runs ----------------------------------------------------------------------------------


def test_tiny_run_writes_the_run_directory(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["--out", str(out), *sets(*TINY, "output.pictures=true")]) == 0
    summary = json.loads((out / "summary.json").read_text())
    for key in ("psnr", "mse", "steps", "seconds", "points_per_second", "device"):
        assert key in summary
    assert summary["steps"] == 24 and summary["device"].startswith("cpu")
    assert summary["points_per_second"] > 0 and summary["psnr"] > 5
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [8, 16, 24]
    assert records[-1]["psnr"] == pytest.approx(summary["psnr"])
    assert (out / "checkpoint.pt").is_file() and not (out / "checkpoint.pt.tmp").exists()
    for picture in ("slices.png", "curves.png"):
        assert (out / picture).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    saved = load_config(out / "config.toml")
    assert saved.train.steps == 24 and saved.grid.resolution == 8


def final_state(out: Path) -> dict:
    return torch.load(out / "checkpoint.pt", map_location="cpu", weights_only=True)


def without_timing(out: Path) -> list[dict]:
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    for r in records:
        del r["seconds"], r["points_per_second"]
    return records


@pytest.mark.parametrize("stop_at", [11, 16])  # 16: exactly at the upsample step
def test_resume_continues_exactly(tmp_path, stop_at):
    args = sets(
        *TINY,
        "target.kind=torus",
        "train.surface_fraction=0.25",
        "train.tv_weight=1e-4",
        "train.upsample_steps=[16]",
        "train.upsample_resolutions=[[12, 10, 9]]",
    )
    whole, split = tmp_path / "whole", tmp_path / "split"
    assert main(["--out", str(whole), *args]) == 0
    assert main(["--out", str(split), *args, "--stop-at", str(stop_at)]) == 0
    assert not (split / "summary.json").exists()
    assert final_state(split)["step"] == stop_at
    assert main(["--out", str(split), "--resume"]) == 0

    a, b = final_state(whole), final_state(split)
    assert a["step"] == b["step"] == 24 and a["resolution"] == b["resolution"] == [12, 10, 9]
    assert torch.equal(a["model"]["features"], b["model"]["features"])
    for key in ("exp_avg", "exp_avg_sq", "step"):
        assert torch.equal(a["optimizer"]["state"][0][key], b["optimizer"]["state"][0][key])
    assert torch.equal(a["generator"], b["generator"])
    assert without_timing(whole) == without_timing(split)
    sa, sb = (json.loads((d / "summary.json").read_text()) for d in (whole, split))
    assert sa["psnr"] == sb["psnr"] and sa["mse"] == sb["mse"]


def test_resume_without_checkpoint_is_a_config_error(tmp_path, capsys):
    assert main(["--out", str(tmp_path), "--resume"]) == 2
    assert "--resume: no checkpoint.pt" in capsys.readouterr().err


@pytest.mark.parametrize("axes", ["xyz", "zyx"])
def test_npy_target(tmp_path, axes):
    # A linear field is represented exactly by a grid whose voxels match the array's.
    x, y, z = np.meshgrid(*(np.linspace(-1, 1, n) for n in (5, 6, 7)), indexing="ij")
    field = (0.5 * x - 0.25 * y + z).astype(np.float32)  # [X, Y, Z]
    path = tmp_path / "volume.npy"
    np.save(path, field if axes == "xyz" else field.transpose(2, 1, 0))
    out = tmp_path / "run"
    args = [*TINY, "target.kind=npy", f"target.path={path}", f"target.axes={axes}"]
    args += ["grid.resolution=[5, 6, 7]", "train.steps=200", "eval.every=200"]
    args += ["train.batch_size=2048"]
    assert main(["--out", str(out), *sets(*args)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["psnr"] > 35, summary


def test_npy_target_values_follow_the_axis_order(tmp_path):
    from train.targets import Volume

    field = np.random.default_rng(0).random((3, 4, 5)).astype(np.float32)  # [X, Y, Z]
    np.save(tmp_path / "xyz.npy", field)
    np.save(tmp_path / "zyx.npy", field.transpose(2, 1, 0))
    bounds = [[0.0, -1.0, 2.0], [2.0, 1.0, 6.0]]
    a = Volume(str(tmp_path / "xyz.npy"), "xyz", bounds)
    b = Volume(str(tmp_path / "zyx.npy"), "zyx", bounds)
    # Sample [i, j, k] sits at lo + (hi - lo) * (i, j, k) / (shape - 1).
    voxel = torch.tensor([[1.0, 1.0, 4.0]])  # i, j, k = 1, 3, 2
    assert a(voxel).item() == pytest.approx(field[1, 3, 2])
    pts = torch.rand(100, 3) * torch.tensor([2.0, 2.0, 4.0]) + torch.tensor([0.0, -1.0, 2.0])
    torch.testing.assert_close(a(pts), b(pts))


def test_sdf_targets_and_surface_sampling():
    from train.targets import Box, Sphere, Torus

    lo, hi = torch.full((3,), -1.0), torch.full((3,), 1.0)
    sphere = Sphere(0.5, [0.1, 0.0, 0.0])
    assert sphere(torch.tensor([0.1, 0.0, 0.9])).item() == pytest.approx(0.4)
    torus = Torus(0.5, 0.2, [0.0, 0.0, 0.0])
    assert torus(torch.tensor([0.5, 0.0, 0.0])).item() == pytest.approx(-0.2)
    box = Box([0.5, 0.3, 0.2], [0.0, 0.0, 0.0])
    assert box(torch.tensor([0.0, 0.0, 0.0])).item() == pytest.approx(-0.2)
    assert box(torch.tensor([0.8, 0.7, 0.0])).item() == pytest.approx(0.5)
    gen = torch.Generator().manual_seed(0)
    for target in (sphere, torus, box):
        near = target.surface_points(500, 0.0, lo, hi, gen)
        assert near.shape == (500, 3)
        assert target(near).abs().max().item() < 1e-4
