"""The NeRF experiment end to end (shortened): run directory, PSNR floor, exact resume, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from train.__main__ import main
from train.config import ConfigError, load_config, to_dict
from train.nerf.experiment import NerfExperiment
from train.rundir import RUN_FILES

# A few seconds on a CPU: a small generated scene and a 16^3 -> 24^3 model.
SHORT = [
    "experiment=nerf",
    "device=cpu",
    "data.scene_size=24",
    "data.scene_train_views=12",
    "data.scene_test_views=2",
    "grid.resolution=16",
    "grid.bounds=[[-1.5, -1.5, -1.5], [1.5, 1.5, 1.5]]",
    "nerf.hidden=32",
    "nerf.occupancy_threshold=1e-3",
    "nerf.occupancy_start=40",
    "nerf.occupancy_every=20",
    "train.steps=120",
    "train.batch_size=1024",
    "train.upsample_steps=[60]",
    "train.upsample_resolutions=[24]",
    "eval.every=40",
    "output.checkpoint_every=40",
    "output.progress=false",
    "output.pictures=false",
]


def sets(*pairs: str) -> list[str]:
    return [arg for pair in pairs for arg in ("--set", pair)]


@pytest.fixture(scope="module")
def scene(tmp_path_factory) -> Path:
    """The shipped scene at a tiny size, generated once for this module."""
    from train.nerf.scenes.generate import generate_scene

    return generate_scene(tmp_path_factory.mktemp("scene") / "scene", size=24, n_train=12, n_test=2)


def args_for(scene: Path, *extra: str) -> list[str]:
    return sets(*SHORT, f"data.path={scene}", *extra)


def test_short_run_writes_the_run_directory_and_learns(scene, tmp_path):
    out = tmp_path / "run"
    extra = ("output.pictures=true", "output.turntable_frames=3", "output.picture_views=2")
    assert main(["--out", str(out), *args_for(scene, *extra)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    for key in ("psnr", "train_seconds", "rays_per_second", "steps_per_second", "device"):
        assert key in summary
    assert summary["rays_per_pixel"] == pytest.approx(120 * 1024 / (24 * 24 * 12))
    assert summary["backend"] == "native" and summary["resolution"] == [24, 24, 24]
    # Measured 14.2 dB after these 120 steps; the untrained model scores 9.2 dB.
    assert summary["psnr"] > 12.5, summary
    assert summary["occupied"] < 1.0  # empty space was found and skipped
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [40, 80, 120]
    assert records[-1]["psnr"] == pytest.approx(summary["psnr"])
    assert 0 < records[0]["ssim"] < summary["ssim"] <= 1  # SSIM of the test views improves
    for picture in ("test_views.png", "curves.png"):
        assert (out / picture).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from PIL import Image

    with Image.open(out / "turntable.gif") as gif:
        assert gif.n_frames == 3 and gif.size == (24, 24)
    assert load_config(out / "config.toml").experiment == "nerf"
    # --overwrite deletes RUN_FILES: it must list everything a run writes.
    written = {p.name for p in out.iterdir()}
    assert written <= set(RUN_FILES), written - set(RUN_FILES)
    assert torch.load(out / "checkpoint.pt", weights_only=True)["kind"] == "nerf"


@pytest.mark.parametrize("optimizer", ["adam", "masked_adam"])
def test_resume_continues_exactly(scene, tmp_path, optimizer):
    whole, split = tmp_path / "whole", tmp_path / "split"
    args = args_for(
        scene, "train.steps=70", "output.checkpoint_every=0", f"nerf.optimizer={optimizer}"
    )
    assert main(["--out", str(whole), *args]) == 0
    assert main(["--out", str(split), *args, "--stop-at", "50"]) == 0  # between refreshes
    assert main(["--out", str(split), "--resume"]) == 0
    a, b = (torch.load(d / "checkpoint.pt", weights_only=True) for d in (whole, split))
    assert a["resolution"] == b["resolution"] == [24, 24, 24]
    for key, value in a["model"].items():
        assert torch.equal(value, b["model"][key]), key
    for i, state in a["optimizer"]["state"].items():  # the moments were saved and restored
        assert all(torch.equal(v, b["optimizer"]["state"][i][k]) for k, v in state.items())
    sa, sb = (json.loads((d / "summary.json").read_text()) for d in (whole, split))
    assert sa["psnr"] == sb["psnr"]


def test_a_fixed_decay_horizon_makes_a_longer_run_the_shorter_one_continued(scene, tmp_path):
    """nerf.lr_decay_steps: the first 50 steps of a 100-step run are the 50-step run's, bit
    for bit; with the default (the schedule stretches with train.steps) they are not."""
    models = {}
    for name, steps, horizon in (("short", 50, 49), ("long", 100, 49), ("stretched", 100, 0)):
        out = tmp_path / name
        extra = ("output.checkpoint_every=0", "train.upsample_steps=[30]")
        extra += (f"nerf.lr_decay_steps={horizon}",)
        args = args_for(scene, f"train.steps={steps}", *extra)
        assert main(["--out", str(out), *args, *(["--stop-at", "50"] if steps > 50 else [])]) == 0
        models[name] = torch.load(out / "checkpoint.pt", weights_only=True)["model"]
    for key, value in models["short"].items():
        assert torch.equal(value, models["long"][key]), key
    assert not torch.equal(models["short"]["color.features"], models["stretched"]["color.features"])
    from train.nerf.optimizer import lr_factor  # the schedule alone, past the horizon too

    config = load_config(None, ["experiment=nerf", "nerf.lr_decay_steps=10"])
    assert lr_factor(config, 10) == pytest.approx(0.1)
    assert lr_factor(config, 20) == pytest.approx(0.01)
    config = load_config(None, ["experiment=nerf", "nerf.lr_decay_steps=10", "train.steps=5"])
    assert lr_factor(config, 4) == pytest.approx(0.1)  # a shorter run still decays by its last step


def test_evaluations_leave_training_unchanged(scene, tmp_path):
    """How often a run evaluates is a reporting choice (the shipped fast config evaluates
    every 1000 steps, not 500, for the command's seconds): the weights at the end are the
    same bits whether the run evaluated 7 times or once."""
    models = {}
    for every in (10, 1000):
        out = tmp_path / f"every{every}"
        args = args_for(scene, "train.steps=70", "output.checkpoint_every=0", f"eval.every={every}")
        assert main(["--out", str(out), *args]) == 0
        records = (out / "metrics.jsonl").read_text().splitlines()
        assert len(records) == (7 if every == 10 else 1)
        models[every] = torch.load(out / "checkpoint.pt", weights_only=True)["model"]
    for key, value in models[10].items():
        assert torch.equal(value, models[1000][key]), key


def test_eval_seconds_evaluate_when_training_time_reaches_them(scene, tmp_path):
    out = tmp_path / "run"
    extra = ("train.steps=30", "train.upsample_steps=[]", "train.upsample_resolutions=[]")
    extra += ("eval.every=1000", "eval.seconds=[1e-6, 1e6]")
    assert main(["--out", str(out), *args_for(scene, *extra)]) == 0
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 30]  # the first step passes 1e-6 s; 1e6 never
    assert records[0]["train_seconds"] >= 1e-6


def test_grid_sample_backend_runs_the_same_model(scene, tmp_path):
    psnrs = {}
    for backend in ("native", "grid_sample"):
        out = tmp_path / backend
        args = args_for(scene, f"grid.backend={backend}", "train.steps=80", "eval.every=80")
        assert main(["--out", str(out), *args]) == 0
        psnrs[backend] = json.loads((out / "summary.json").read_text())["psnr"]
    assert abs(psnrs["native"] - psnrs["grid_sample"]) < 0.3, psnrs


def test_own_scene_is_read_without_generating(scene, tmp_path, capsys):
    out = tmp_path / "run"
    args = args_for(scene, "data.generate=false", "train.steps=2", "eval.every=2")
    args += sets("train.upsample_steps=[]", "train.upsample_resolutions=[]")
    assert main(["--out", str(out), *args]) == 0
    capsys.readouterr()
    missing = tmp_path / "nowhere"
    args = args_for(missing, "data.generate=false")
    assert main(["--out", str(tmp_path / "run2"), *args]) == 2
    assert f"file error: data.path: {missing}: no such directory" in capsys.readouterr().err
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "transforms_train.json").write_text("{not json")
    args = args_for(tmp_path / "broken", "data.generate=false")
    assert main(["--out", str(tmp_path / "run3"), *args]) == 2
    err = capsys.readouterr().err
    broken = tmp_path / "broken" / "transforms_train.json"
    assert f"file error: data.path: {broken}: malformed JSON" in err
    assert "Traceback" not in err
    # a failed start leaves no run behind
    assert not (tmp_path / "run2").exists() and not (tmp_path / "run3").exists()


def test_generate_refuses_a_directory_it_did_not_write(tmp_path, capsys):
    # data.generate = true never replaces a directory holding something else
    own = tmp_path / "own"
    own.mkdir()
    (own / "transforms_train.json").write_text("{}")
    assert main(["--out", str(tmp_path / "run"), *args_for(own, "data.generate=true")]) == 2
    err = capsys.readouterr().err
    assert f"config error: data.path: {own}: exists and is not a scene" in err
    assert "it holds a capture" in err and "data.generate = false" in err
    assert (own / "transforms_train.json").read_text() == "{}"


def test_generate_refuses_to_replace_another_generated_scene(scene, tmp_path, capsys):
    """A path naming another of the project's scenes (a slip, or another config's folder)
    is an error; the scene there stays (its settings alone differ: it is regenerated)."""
    stamp = (scene / "scene.json").stat().st_mtime_ns
    args = args_for(scene, "data.generate=true", "data.scene=realistic")
    assert main(["--out", str(tmp_path / "run"), *args]) == 2
    err = capsys.readouterr().err
    assert f"config error: data.path: {scene}: holds the generated scene 'procedural', " in err
    assert "not 'realistic'" in err and "data.generate = false" in err
    assert "generating" not in err and (scene / "scene.json").stat().st_mtime_ns == stamp


@pytest.mark.parametrize("generate", ["true", "false"])
def test_an_empty_folder_is_no_capture(tmp_path, capsys, generate):
    """A folder without a capture (a typo's, or one not copied yet) is an error naming the
    layouts looked for, never filled with a generated scene (issue 62, item 4)."""
    empty = tmp_path / "capture"
    empty.mkdir()
    args = args_for(empty, f"data.generate={generate}")
    assert main(["--out", str(tmp_path / "run"), *args]) == 2
    err = capsys.readouterr().err
    if generate == "true":
        assert f"config error: data.path: {empty}: exists and is not a scene written" in err
        assert "it holds no capture (looked for" in err
        assert "generating" not in err  # no line announcing what is then refused
    else:
        assert f"file error: data.path: {empty}: holds no capture: looked for" in err
    assert "transforms_train.json (Blender layout) or transforms.json (instant-ngp)" in err
    assert list(empty.iterdir()) == [] and not (tmp_path / "run").exists()


def test_a_typed_data_path_is_not_generated_into(tmp_path):
    """A data.path typed on the command line under a shipped config that generates its
    scene (or written in one's own config without `generate`) and holding no capture is an
    error naming it and the layouts looked for, before anything is written; set together
    with data.generate = true, or holding a capture, it is taken (issue 62)."""
    from train.errors import InputFileError
    from train.shipped_configs import resolve

    shipped = resolve(Path("nerf_scene.toml"))
    typo = tmp_path / "my_captrue"
    with pytest.raises(InputFileError) as caught:
        load_config(shipped, [f"data.path={typo}"])
    message = str(caught.value)
    assert message.startswith(f"data.path: {typo}: no such directory: looked for transforms")
    assert "data.generate = true" in message
    assert not typo.exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InputFileError, match="holds no capture"):
        load_config(shipped, [f"data.path={empty}"])
    # generation asked for beside the path, or the config's own path: taken
    assert load_config(shipped, [f"data.path={typo}", "data.generate=true"]).data.generate
    assert load_config(shipped).data.path == "data/nerf_scene"
    capture = tmp_path / "capture"
    capture.mkdir()
    (capture / "transforms.json").write_text("{}")
    assert load_config(shipped, [f"data.path={capture}"]).data.path == str(capture)
    # one's own config: a path without `generate` is no place to generate into
    own = tmp_path / "own.toml"
    own.write_text(f'experiment = "nerf"\n[data]\npath = "{typo}"\n')
    with pytest.raises(InputFileError, match="no such directory"):
        load_config(own)
    own.write_text(f'experiment = "nerf"\n[data]\npath = "{typo}"\ngenerate = true\n')
    assert load_config(own).data.generate


@pytest.mark.parametrize(
    "overrides, key",
    [
        (["experiment=nerf", "target.kind=torus"], "target"),
        (["data.path=x"], "data"),
        (["experiment=nerf", "grid.backend=cuda_magic"], "grid.backend"),
        (["grid.backend=grid_sample"], "grid.backend"),
        (["experiment=nerf", "data.background=[1, 1]"], "data.background"),
        (["experiment=nerf", "data.downscale=0"], "data.downscale"),
        (["experiment=nerf", "data.scene=lego"], "data.scene"),
        (["experiment=nerf", "eval.seconds=[10, -1]"], "eval.seconds"),
        (["experiment=nerf", "nerf.alpha_init=1.5"], "nerf.alpha_init"),
        (["experiment=nerf", "nerf.lr_mlp=0"], "nerf.lr_mlp"),
        (["experiment=nerf", "nerf.optimizer=sgd"], "nerf.optimizer"),
        (["experiment=nerf", "nerf.occupancy_grow_until=-1"], "nerf.occupancy_grow_until"),
        (["experiment=nerf", "nerf.lr_decay_steps=-5"], "nerf.lr_decay_steps"),
        (["experiment=nerf", "nerf.shift_decay=-1"], "nerf.shift_decay"),
        (["experiment=nerf", "train.upsample_moments=rescale"], "train.upsample_moments"),
        (["experiment=image"], "experiment"),
    ],
)
def test_config_errors_name_the_key(overrides, key):
    with pytest.raises(ConfigError) as error:
        load_config(None, overrides)
    assert str(error.value).startswith(f"{key}: "), str(error.value)


def test_shipped_nerf_configs_resolve_to_their_tables():
    root = Path(__file__).resolve().parents[3]
    names = ("nerf_scene", "nerf_scene_gpu", "nerf_realistic", "nerf_realistic_gpu")
    for name in (f"{n}.toml" for n in names):
        data = to_dict(load_config(root / "configs" / name, ["device=cpu"]))
        assert data["experiment"] == "nerf" and "target" not in data and "nerf" in data
    assert "data" not in to_dict(load_config(root / "configs" / "default.toml"))


@pytest.mark.parametrize("grow_until", [0, 2])
def test_occupancy_grows_back_only_before_grow_until(scene, grow_until):
    """A refresh from step `nerf.occupancy_grow_until` on keeps empty space empty, whatever
    the density does there; before it (and with 0, always) the grid follows the density."""
    extra = ("nerf.occupancy_start=1", "nerf.occupancy_every=1")
    config = load_config(
        None, [*SHORT, f"data.path={scene}", *extra, f"nerf.occupancy_grow_until={grow_until}"]
    )
    exp = NerfExperiment(config, torch.device("cpu"), torch.Generator().manual_seed(0), None)
    density = exp.model.density_values()  # [X, Y, Z], a view of the parameter
    with torch.no_grad():
        density[:6] = -30.0  # empty, and so are their neighbours: x < 5
        exp.begin_step(1)
        emptied = exp.model.occupancy.clone()
        assert not emptied[:5].any() and emptied[6:].all()
        density.fill_(10.0)  # opaque everywhere
        exp.begin_step(2)
    if grow_until:
        assert torch.equal(exp.model.occupancy, emptied)
    else:
        assert exp.model.occupancy.all()


@pytest.mark.parametrize("decay", [0.0, 1.0])
def test_shift_decay_lowers_the_density_at_each_upsample(scene, decay):
    """`nerf.shift_decay` lowers the raw density by itself at an upsample (a constant field
    resamples to itself)."""
    config = load_config(None, [*SHORT, f"data.path={scene}", f"nerf.shift_decay={decay}"])
    exp = NerfExperiment(config, torch.device("cpu"), torch.Generator().manual_seed(0), None)
    with torch.no_grad():
        exp.model.density_values().fill_(2.0)
    exp.upsample((20, 20, 20))
    assert torch.allclose(exp.model.density_values(), torch.full((20, 20, 20), 2.0 - decay))
