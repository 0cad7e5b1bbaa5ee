"""The fitting loop: config errors, a tiny run's outputs, exact resume, targets."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest
import torch

from tests._helpers import needs_cuda
from train.__main__ import main
from train.config import ConfigError, load_config, reference_table, to_dict, to_toml
from train.rundir import RUN_FILES

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
    with pytest.raises(ConfigError) as error:
        load_config(path)
    assert str(error.value) == (
        "grid.resolution: expected an integer or a list of integers, got '64' (string)"
    )
    path.write_text("[grid]\nbounds = [1, 2]\n")
    with pytest.raises(ConfigError, match=r"^grid.bounds: expected a list of lists of numbers"):
        load_config(path)


def test_main_prints_config_errors_and_exits_2(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["--out", str(out), *sets("train.steps=-1")]) == 2
    err = capsys.readouterr().err
    assert "train.steps: expected an integer >= 1" in err
    assert "Traceback" not in err
    assert not out.exists()  # nothing was started
    assert main(["--config", str(tmp_path / "missing.toml")]) == 2
    assert f"--config: {tmp_path / 'missing.toml'}: no such file" in capsys.readouterr().err
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
    for shipped in sorted(Path(__file__).resolve().parents[2].glob("configs/*.toml")):
        load_config(shipped, ["device=cpu"])
    assert "`train.steps`" in reference_table()
    # docs/config.md's reference is the generated table, every row of it
    page = (Path(__file__).resolve().parents[2] / "docs" / "config.md").read_text()
    missing = [row for row in reference_table().splitlines() if row not in page]
    assert not missing, f"docs/config.md's reference is out of date: {missing[:3]}"


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
    # where the command's time went, Python start to the last picture, also on stderr
    phases = summary["phases"]
    keys = ["start_up", "setup", "train", "evaluations_and_checkpoints", "final_evaluation"]
    assert list(phases) == [*keys, "files", "checkpoint", "pictures", "total"], phases
    assert all(v >= 0 for v in phases.values()) and phases["pictures"] > 0
    assert phases["train"] == pytest.approx(summary["train_seconds"])
    assert sum(phases[k] for k in keys + ["files", "pictures"]) <= phases["total"] * 1.01
    assert "phases: start_up" in capsys.readouterr().err
    # and their parts: the imports, the experiment's set-up, evaluations and checkpoints
    parts = summary["phase_parts"]
    assert list(parts["start_up"]) == ["import_torch", "import_grid"]
    assert sum(parts["start_up"].values()) <= phases["start_up"]
    assert 0 < parts["setup"]["experiment"] <= phases["setup"]
    inner = parts["evaluations_and_checkpoints"]
    assert 0 < inner["evaluations"] and 0 < inner["checkpoints"]
    assert sum(inner.values()) <= phases["evaluations_and_checkpoints"] * 1.01
    # --overwrite deletes RUN_FILES: it must list everything a run writes.
    written = {p.name for p in out.iterdir()}
    assert written <= set(RUN_FILES), written - set(RUN_FILES)


def final_state(out: Path) -> dict:
    return torch.load(out / "checkpoint.pt", map_location="cpu", weights_only=True)


def without_timing(out: Path) -> list[dict]:
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    for r in records:
        del r["seconds"], r["points_per_second"]
    return records


def test_progress_in_a_log_is_a_plain_line_every_few_percent(tmp_path, capsys):
    """stderr is not a terminal here (captured): no carriage returns, a line per step
    the bar reads (every 10 steps) once 5% more of the run is done, the bar's numbers."""
    args = sets(*TINY, "train.steps=100", "output.progress=true")
    assert main(["--out", str(tmp_path / "run"), *args]) == 0
    captured = capsys.readouterr()
    assert "\r" not in captured.err
    lines = [line for line in captured.err.splitlines() if ": step " in line]
    assert [line.split(": step ")[1].split()[0] for line in lines] == [
        f"{n}/100" for n in range(10, 101, 10)
    ]
    assert all(" loss " in line and " psnr " in line and " pts_s " in line for line in lines)
    assert lines[0].startswith("density 8x8x8: step 10/100 (10%)")
    assert "step      8  held-out mse" in captured.out  # the evaluations' lines as before


# 16: exactly at the upsample step; 20: the checkpoint holds the upsampled grid, which the
# model, rebuilt from the config at its starting resolution, adopts when loading it.
@pytest.mark.parametrize("stop_at", [11, 16, 20])
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
    from train.field.targets import Volume

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
    from train.shapes import Box, Sphere, Torus

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


# ---- run directories, unusable files, missing packages: one line, exit 2 ------------------


def one_line_error(capsys) -> str:
    """The command's stderr, checked to be a single line without a traceback."""
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def test_a_new_run_refuses_a_directory_that_holds_a_run(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["--out", str(out), *sets(*TINY)]) == 0
    before = {name: (out / name).read_bytes() for name in ("metrics.jsonl", "checkpoint.pt")}
    capsys.readouterr()
    assert main(["--out", str(out), *sets(*TINY, "train.steps=16")]) == 2
    err = one_line_error(capsys)
    assert f"--out: {out} already holds a run" in err
    assert "--resume" in err and "--overwrite" in err
    assert {name: (out / name).read_bytes() for name in before} == before  # nothing lost
    # a config error comes first: fixing --out would only show it next
    assert main(["--out", str(out), *sets(*TINY, "train.steps=-1")]) == 2
    assert one_line_error(capsys).startswith("grid-train: config error: train.steps: ")


def test_overwrite_replaces_the_run_and_keeps_other_files(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["--out", str(out), *sets(*TINY, "output.pictures=true")]) == 0
    (out / "notes.txt").write_text("mine")
    args = ["--out", str(out), "--overwrite", *sets(*TINY, "train.steps=16")]
    assert main(args) == 0
    assert "--overwrite: deleted checkpoint.pt" in capsys.readouterr().err
    assert [r["step"] for r in without_timing(out)] == [8, 16]
    assert json.loads((out / "summary.json").read_text())["steps"] == 16
    assert not (out / "slices.png").exists()  # the old run's pictures went with it
    assert (out / "notes.txt").read_text() == "mine"
    assert main(["--out", str(out), "--resume", "--overwrite"]) == 2
    assert "--overwrite: not used with --resume" in one_line_error(capsys)


def test_the_default_out_follows_the_same_rule(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "exp.toml").write_text("")
    (tmp_path / "runs" / "exp").mkdir(parents=True)
    (tmp_path / "runs" / "exp" / "metrics.jsonl").write_text('{"step": 8}\n')
    assert main(["--config", "exp.toml", *sets(*TINY)]) == 2
    assert f"--out: {Path('runs') / 'exp'} already holds a run (metrics.jsonl)" in one_line_error(
        capsys
    )
    (tmp_path / "file").write_text("")
    assert main(["--out", "file", *sets(*TINY)]) == 2
    assert "--out: file is not a directory" in one_line_error(capsys)


def stopped_run(tmp_path: Path, stop_at: int = 8) -> Path:
    out = tmp_path / "run"
    assert main(["--out", str(out), *sets(*TINY), "--stop-at", str(stop_at)]) == 0
    return out


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty"])
def test_a_damaged_checkpoint_is_named_in_one_line(tmp_path, capsys, damage):
    out = stopped_run(tmp_path)
    path = out / "checkpoint.pt"
    data = path.read_bytes()
    path.write_bytes(
        {"truncated": data[: len(data) // 2], "garbage": b"x" * 100, "empty": b""}[damage]
    )
    capsys.readouterr()
    assert main(["--out", str(out), "--resume"]) == 2
    err = one_line_error(capsys)
    assert err.startswith(f"grid-train: file error: {path}: damaged (truncated or corrupt)"), err


@pytest.mark.parametrize(
    "change, message",
    [
        ({"kind": "nerf"}, "a checkpoint of a 'nerf' experiment, but this run is a 'field' one"),
        ({"format": 99}, "checkpoint format 99, but this version of grid-train reads formats 1 to"),
        ({"model": None, "step": None}, "not a grid-train checkpoint (it lacks 'step'"),
        (
            {"model": {"features": torch.ones(8, 8, 8, 2), "bounds": torch.ones(2, 3)}},
            "does not fit this run (Error(s) in loading state_dict for VoxelGrid: "
            "features: the saved grid has 2 features per voxel, this VoxelGrid 1",
        ),
    ],
)
def test_a_checkpoint_of_another_kind_or_version_is_refused(tmp_path, capsys, change, message):
    out = stopped_run(tmp_path)
    state = final_state(out)
    assert state["format"] == 2 and state["kind"] == "field"
    state.update(change)
    torch.save({k: v for k, v in state.items() if v is not None}, out / "checkpoint.pt")
    capsys.readouterr()
    assert main(["--out", str(out), "--resume"]) == 2
    assert f"{out / 'checkpoint.pt'}: {message}" in one_line_error(capsys)


def test_a_checkpoint_without_format_and_kind_resumes(tmp_path):
    # Checkpoints written before "format" and "kind" existed (format 1) still resume.
    out = stopped_run(tmp_path, stop_at=16)
    state = final_state(out)
    del state["format"], state["kind"]
    torch.save(state, out / "checkpoint.pt")
    assert main(["--out", str(out), "--resume"]) == 0
    assert final_state(out)["step"] == 24


def test_a_torn_last_metrics_line_is_dropped_and_a_damaged_one_named(tmp_path, capsys):
    out = stopped_run(tmp_path, stop_at=16)
    log = out / "metrics.jsonl"
    with log.open("a") as f:
        f.write('{"step": 24, "mse"')  # a crash in the middle of a write
    assert main(["--out", str(out), "--resume"]) == 0
    assert [r["step"] for r in without_timing(out)] == [8, 16, 24]

    out = stopped_run(tmp_path / "second", stop_at=16)
    log = out / "metrics.jsonl"
    log.write_text("not json\n" + log.read_text())
    capsys.readouterr()
    assert main(["--out", str(out), "--resume"]) == 2
    assert f"{log}: line 1 is not a metrics record" in one_line_error(capsys)


def test_unreadable_config_files_are_named_in_one_line(tmp_path, capsys):
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"\xff\xfe\x00 not text")
    for path, problem in [(tmp_path, "is a directory"), (binary, "not a valid TOML config")]:
        assert main(["--config", str(path), "--out", str(tmp_path / "run")]) == 2
        assert f"file error: --config: {path}: {problem}" in one_line_error(capsys)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("problem", ["nan", "truncated"])
def test_unusable_npy_files_are_named_in_one_line(tmp_path, capsys, problem):
    path = tmp_path / "volume.npy"
    volume = np.ones((4, 5, 6), dtype=np.float32)
    volume[1, 2, 3] = np.nan if problem == "nan" else 0
    np.save(path, volume)
    if problem == "truncated":
        path.write_bytes(path.read_bytes()[:-50])
    args = [*TINY, "target.kind=npy", f"target.path={path}"]
    assert main(["--out", str(tmp_path / "run"), *sets(*args)]) == 2
    err = one_line_error(capsys)
    expected = "1 value is NaN or infinite" if problem == "nan" else "not a valid .npy array"
    assert f"file error: target.path: {path}: {expected}" in err


def test_missing_matplotlib_is_found_before_training(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` fails
    out = tmp_path / "run"
    assert main(["--out", str(out), *sets(*TINY, "output.pictures=true")]) == 2
    err = one_line_error(capsys)
    assert err.startswith("grid-train: missing dependency: output.pictures: "), err
    assert (
        "pip install --no-build-isolation -e '.[train]'" in err
        and "--set output.pictures=false" in err
    )
    assert not out.exists()  # nothing was started
    assert main(["--out", str(out), *sets(*TINY)]) == 0  # pictures off: no matplotlib needed


def child_stdout(code: str, unset: tuple[str, ...], **given: str) -> str:
    """What `python -c code` prints, in an environment without the variables `unset`, plus
    those `given`."""
    env = {k: v for k, v in os.environ.items() if k not in unset} | given
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout


@pytest.mark.parametrize("given", [None, "300000"])
def test_train_sets_a_short_openmp_spin_before_torch_loads(given):
    """`import train` before torch sets GOMP_SPINCOUNT=1000 (libgomp reads it when torch
    loads it), and keeps a value the user gave."""
    code = "import sys, os, train; print(os.environ['GOMP_SPINCOUNT'], 'torch' in sys.modules)"
    user = {"GOMP_SPINCOUNT": given} if given else {}
    out = child_stdout(code, ("GOMP_SPINCOUNT",), **user).split()
    assert out[0] == (given or "1000")


ALLOC_CONF = ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF")


@pytest.mark.parametrize("given", [None, *ALLOC_CONF])
def test_train_asks_for_expandable_cuda_segments_unless_the_user_set_the_allocator(given):
    """`import train` sets PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True when neither of
    torch's allocator variables is set, and leaves a user's own setting alone."""
    user = {given: "max_split_size_mb:64"} if given else {}
    code = f"import os, train; print([os.environ.get(n, '-') for n in {ALLOC_CONF!r}])"
    expected = {
        None: ["-", "expandable_segments:True"],
        "PYTORCH_ALLOC_CONF": ["max_split_size_mb:64", "-"],
        "PYTORCH_CUDA_ALLOC_CONF": ["-", "max_split_size_mb:64"],
    }[given]
    assert child_stdout(code, ALLOC_CONF, **user).strip() == repr(expected)


@needs_cuda
def test_a_process_that_imports_train_first_allocates_expandable_segments():
    code = (
        "import train, torch; x = torch.empty(2**24, device='cuda'); "
        "print(all(s['is_expandable'] for s in torch.cuda.memory_snapshot()))"
    )
    assert child_stdout(code, ALLOC_CONF).strip() == "True"
