"""Data-parallel training (torchrun): two CPU processes over gloo against one process.

Two ranks are spawned once (torch.multiprocessing, the environment torchrun would set)
and run several commands through `train.__main__.main`; the single-process runs they are
compared with run in the test process. Checked: 2 ranks x half the batch give the
result of 1 process x the whole batch (to float rounding), for the field, the NeRF (dense
and multires encodings) and the sdf experiments; the ranks' parameters are identical
after training (upsampling included); resume with 2 processes and with 1; rank 0 alone
writes and prints; errors before training are one line from rank 0 and exit code 2 on
every rank; a batch that does not split into equal shares is refused naming
train.batch_size.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import socket
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

import train.loop
from tests.train.nerf.test_nerf import SHORT as NERF_SHORT
from tests.train.nerf.test_nerf_multires import BOTH as MULTIRES
from tests.train.sdf.test_sdf import SHORT as SDF_SHORT
from tests.train.test_train import TINY, sets
from train.__main__ import main
from train.rundir import RUN_FILES

RANKS = 2
needs_two_gpus = pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.device_count() < RANKS,
    reason=f"needs {RANKS} CUDA GPUs",
)
# torus SDF with near-surface points (the share boundary falls inside the uniform part
# on rank 0 and spans both parts on rank 1), total variation, an upsample at step 16
FIELD = sets(
    *TINY,
    "target.kind=torus",
    "train.surface_fraction=0.375",
    "train.tv_weight=1e-4",
    "train.upsample_steps=[16]",
    "train.upsample_resolutions=[[12, 10, 9]]",
)
# a table of 6 x 2^15 x 2 = 393k floats: averaged in place, its MLPs' layers together
MULTIRES_LARGE = (*MULTIRES, "multires.log2_table_size=15")
NERF_KEYS = ("train.steps=40", "eval.every=20", "output.checkpoint_every=0")
# the upsample at step 20 also fits the box (each rank finds one, the ranks average them)
NERF_CHANGES = (
    "train.upsample_steps=[20]",
    "nerf.occupancy_start=10",
    "nerf.occupancy_every=10",
    "nerf.fit_box=true",
)


def nerf_args(scene: Path) -> list[str]:
    return sets(*NERF_SHORT, *NERF_KEYS, *NERF_CHANGES, f"data.path={scene}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank: int, jobs: list[tuple[int, list[str]]], results: str) -> None:
    """One rank: run each job (a port, then main's arguments) as torchrun would."""
    torch.set_num_threads(1)
    os.environ.update(
        WORLD_SIZE=str(RANKS), RANK=str(rank), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1"
    )
    models = []
    make = train.loop.make_experiment

    def keep_model(*args, **kwargs):  # the experiment of every run, to compare its model
        exp = make(*args, **kwargs)
        models.append(exp.model)
        return exp

    train.loop.make_experiment = keep_model
    record = []
    for port, argv in jobs:
        os.environ["MASTER_PORT"] = str(port)
        out, err = io.StringIO(), io.StringIO()
        models.clear()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
        record.append({"code": code, "stdout": out.getvalue(), "stderr": err.getvalue()})
        state = {k: _cpu(v) for k, v in models[0].state_dict().items()} if models else {}
        torch.save(state, Path(results) / f"model_{len(record) - 1}_rank{rank}.pt")
    (Path(results) / f"rank{rank}.json").write_text(json.dumps(record))


def _cpu(value):
    """A state dict entry on the CPU: a tensor copied, other extra state as it is."""
    return value.detach().cpu().clone() if isinstance(value, torch.Tensor) else value


def final_state(out: Path) -> dict:
    return torch.load(out / "checkpoint.pt", map_location="cpu", weights_only=True)


def records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The two-rank commands, run once; returns (directory, per-rank records, models)."""
    from train.nerf.scenes.generate import generate_scene

    d = tmp_path_factory.mktemp("ddp")
    scene = generate_scene(d / "scene", size=24, n_train=12, n_test=2)
    jobs = [
        ["--out", str(d / "two"), *FIELD],
        ["--out", str(d / "two_split"), *FIELD, "--stop-at", "11"],
        ["--out", str(d / "two_split"), "--resume"],
        ["--out", str(d / "for_one"), *FIELD, "--stop-at", "20"],
        ["--out", str(d / "two"), *FIELD],  # refused: holds a run
        ["--out", str(d / "odd"), *FIELD, "--set", "train.batch_size=511"],
        ["--out", str(d / "nerf_two"), *nerf_args(scene), *sets("nerf.sparse_average=1")],
        ["--out", str(d / "sdf_two"), *sets(*SDF_SHORT)],
        ["--out", str(d / "weak"), *FIELD, *sets("train.scaling=weak", "train.batch_size=256")],
        ["--out", str(d / "multires_two"), *nerf_args(scene), *sets(*MULTIRES_LARGE)],
    ]
    ranks, models = spawn(d, jobs)
    return d, ranks, models, scene


def spawn(d: Path, jobs: list[list[str]]) -> tuple[list, list]:
    """Run the jobs on RANKS spawned ranks; (per-rank records, per-job per-rank models)."""
    jobs = [(free_port(), argv) for argv in jobs]
    mp.spawn(_rank, args=(jobs, str(d)), nprocs=RANKS, join=True)
    ranks = [json.loads((d / f"rank{r}.json").read_text()) for r in range(RANKS)]
    models = [
        [torch.load(d / f"model_{j}_rank{r}.pt", weights_only=True) for r in range(RANKS)]
        for j in range(len(jobs))
    ]
    return ranks, models


def assert_close_states(a: dict, b: dict, atol: float) -> None:
    assert a["step"] == b["step"] and a["resolution"] == b["resolution"]
    for key in a["model"]:
        torch.testing.assert_close(a["model"][key], b["model"][key], rtol=0, atol=atol)
    torch.testing.assert_close(a["generator"], b["generator"], rtol=0, atol=0)


def test_two_ranks_with_half_the_batch_each_equal_one_process(runs, tmp_path):
    d, ranks, _, _ = runs
    assert [r[0]["code"] for r in ranks] == [0, 0]
    assert main(["--out", str(tmp_path / "one"), *FIELD]) == 0
    one, two = final_state(tmp_path / "one"), final_state(d / "two")
    assert two["processes"] == RANKS and one["processes"] == 1
    assert_close_states(one, two, atol=1e-5)
    assert one["model"]["features"].abs().max() > 0.1  # it learned something
    a, b = records(tmp_path / "one"), records(d / "two")
    assert [r["step"] for r in a] == [r["step"] for r in b] == [8, 16, 24]
    for ra, rb in zip(a, b, strict=True):
        assert rb["psnr"] == pytest.approx(ra["psnr"], abs=1e-3)
        assert rb["train_mse"] == pytest.approx(ra["train_mse"], rel=1e-4)
        assert rb["points_per_second"] > 0
    summary = json.loads((d / "two" / "summary.json").read_text())
    assert summary["processes"] == RANKS and summary["batch_size"] == 512


def test_ranks_hold_identical_parameters_after_training(runs):
    _, _, models, _ = runs
    for job in (0, 2, 6):  # field, field resumed across its upsample, nerf
        rank0, rank1 = models[job]
        assert rank0.keys() == rank1.keys() and rank0
        for key in rank0:
            assert torch.equal(rank0[key], rank1[key]), (job, key)
    assert list(models[0][0]["features"].shape[:3]) == [12, 10, 9]


def test_resume_with_two_processes_continues_exactly(runs):
    d, ranks, _, _ = runs
    assert [r[j]["code"] for r in ranks for j in (1, 2)] == [0, 0, 0, 0]
    assert "stopped at step 11" in ranks[0][1]["stderr"]
    whole, split = final_state(d / "two"), final_state(d / "two_split")
    assert torch.equal(whole["model"]["features"], split["model"]["features"])
    assert torch.equal(whole["generator"], split["generator"])
    psnrs = [[r["psnr"] for r in records(d / name)] for name in ("two", "two_split")]
    assert psnrs[0] == psnrs[1]


def test_resume_with_one_process_continues_a_two_process_run(runs, tmp_path):
    d, ranks, _, _ = runs
    assert [r[3]["code"] for r in ranks] == [0, 0]
    assert final_state(d / "for_one")["step"] == 20
    assert main(["--out", str(d / "for_one"), "--resume"]) == 0
    resumed = final_state(d / "for_one")
    assert resumed["processes"] == 1
    # same batches, same steps: equal to the uninterrupted 2-process run to float rounding
    assert_close_states(final_state(d / "two"), resumed, atol=1e-5)


def test_rank_zero_alone_writes_and_prints(runs):
    d, ranks, _, _ = runs
    for name in ("two", "two_split", "nerf_two"):
        written = {p.name for p in (d / name).iterdir()}
        assert written <= set(RUN_FILES) and "summary.json" in written, written
        assert not (d / name / "checkpoint.pt.tmp").exists()
    for job in range(len(ranks[1])):
        assert ranks[1][job]["stdout"] == ranks[1][job]["stderr"] == "", job
    assert json.loads(ranks[0][0]["stdout"].split("\nwrote")[0])["processes"] == RANKS


def test_errors_before_training_are_one_line_from_rank_zero(runs):
    d, ranks, _, _ = runs
    refused, odd = 4, 5
    assert [r[refused]["code"] for r in ranks] == [2, 2]
    err = ranks[0][refused]["stderr"]
    assert err.count("\n") == 1 and "already holds a run" in err, err
    assert [r[odd]["code"] for r in ranks] == [2, 2]
    err = ranks[0][odd]["stderr"]
    assert err.startswith("grid-train: config error: train.batch_size: 511 points"), err
    assert err.count("\n") == 1 and not (d / "odd").exists()


def test_nerf_two_ranks_equal_one_process(runs, tmp_path):
    d, ranks, models, scene = runs
    assert [r[6]["code"] for r in ranks] == [0, 0]
    assert main(["--out", str(tmp_path / "nerf_one"), *nerf_args(scene)]) == 0
    one, two = final_state(tmp_path / "nerf_one"), final_state(d / "nerf_two")
    assert one["step"] == two["step"] and one["resolution"] == two["resolution"]
    box = two["model"]["density.bounds"]
    assert (box[1] - box[0] < 3.0 - 1e-3).all(), box  # nerf.fit_box moved the grids
    # Rounding can move a sample across the occupancy or weight threshold, and Adam turns
    # a rounding-sized gradient into a full step: a few voxels differ, the fields agree.
    for key, a in one["model"].items():
        b = two["model"][key]
        if a.is_floating_point():
            assert (a - b).norm() <= 1e-3 * a.norm(), key  # measured: 2e-5
        else:
            assert (a != b).float().mean() < 1e-3, key
    # the colour grid's gradient averaged near occupied voxels alone (gradient_support)
    dense = sum(
        t.numel() * t.element_size() for t in models[6][0].values() if t.is_floating_point()
    )
    averaged = json.loads((d / "nerf_two" / "summary.json").read_text())
    assert 0 < averaged["gradient_mb_averaged_per_step"] * 2**20 < 0.9 * dense, (averaged, dense)
    a, b = records(tmp_path / "nerf_one"), records(d / "nerf_two")
    for ra, rb in zip(a, b, strict=True):
        assert rb["psnr"] == pytest.approx(ra["psnr"], abs=1e-3)
        assert rb["view_psnr"] == pytest.approx(ra["view_psnr"], abs=1e-3)
        assert rb["samples_per_ray"] == pytest.approx(ra["samples_per_ray"], rel=1e-3)


def test_multires_nerf_two_ranks_equal_one_process(runs, tmp_path):
    """Both encodings multires (the table and both MLPs averaged whole): 2 ranks x half
    the batch give one process's table, MLPs and PSNR, and identical parameters on both."""
    d, ranks, models, scene = runs
    assert [r[9]["code"] for r in ranks] == [0, 0], ranks[0][9]["stderr"][-2000:]
    for key, value in models[9][0].items():
        other = models[9][1][key]
        assert torch.equal(value, other) if isinstance(value, torch.Tensor) else value == other
    assert any("table" in key for key in models[9][0]), list(models[9][0])
    args = [*nerf_args(scene), *sets(*MULTIRES_LARGE)]
    assert main(["--out", str(tmp_path / "multires_one"), *args]) == 0
    one, two = final_state(tmp_path / "multires_one"), final_state(d / "multires_two")
    assert one["step"] == two["step"]
    for key, a in one["model"].items():
        b = two["model"][key]
        if not isinstance(a, torch.Tensor):
            assert a == b, key
        elif a.is_floating_point():
            assert (a - b).norm() <= 1e-3 * a.norm(), key
        else:
            assert (a != b).float().mean() < 1e-3, key
    # the table in place, the two MLPs' layers' gradients together in one flat buffer
    summary = json.loads((d / "multires_two" / "summary.json").read_text())
    assert summary["gradient_all_reduces_per_step"] == 2, summary
    a, b = records(tmp_path / "multires_one"), records(d / "multires_two")
    assert len(a) == len(b) >= 2
    for ra, rb in zip(a, b, strict=True):
        assert rb["psnr"] == pytest.approx(ra["psnr"], abs=1e-3)


def test_sdf_two_ranks_equal_one_process(runs, tmp_path):
    d, ranks, models, _ = runs
    assert [r[7]["code"] for r in ranks] == [0, 0]
    for key in models[7][0]:
        assert torch.equal(models[7][0][key], models[7][1][key]), key
    assert main(["--out", str(tmp_path / "sdf_one"), *sets(*SDF_SHORT)]) == 0
    one, two = final_state(tmp_path / "sdf_one"), final_state(d / "sdf_two")
    assert_close_states(one, two, atol=1e-5)
    a, b = records(tmp_path / "sdf_one"), records(d / "sdf_two")
    assert len(a) == len(b) >= 3
    for ra, rb in zip(a, b, strict=True):
        assert rb["train_loss"] == pytest.approx(ra["train_loss"], rel=1e-4)


def test_weak_scaling_gives_each_rank_its_own_batch(runs, tmp_path):
    """2 ranks x train.batch_size 256 with train.scaling = weak train as 1 process x 512; the
    run directory keeps the config as given (a resume scales it again)."""
    d, ranks, _, _ = runs
    assert [r[8]["code"] for r in ranks] == [0, 0]
    assert main(["--out", str(tmp_path / "one"), *FIELD]) == 0
    one, weak = final_state(tmp_path / "one"), final_state(d / "weak")
    assert_close_states(one, weak, atol=1e-5)
    summary = json.loads((d / "weak" / "summary.json").read_text())
    assert summary["batch_size"] == 512 and summary["processes"] == RANKS
    written = (d / "weak" / "config.toml").read_text()
    assert "batch_size = 256" in written and 'scaling = "weak"' in written


def test_bad_scaling_and_sparse_average_are_refused():
    from train.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="train.scaling: expected one of"):
        load_config(None, ["train.scaling=linear"])
    for value in ("-0.1", "1.5"):
        with pytest.raises(
            ConfigError, match=r"nerf.sparse_average: expected a number in \[0, 1\]"
        ):
            load_config(
                None,
                [*NERF_SHORT, "data.path=x", "data.generate=true", f"nerf.sparse_average={value}"],
            )


# ---- two GPUs: NCCL, the steps captured as CUDA graphs --------------------------------------

CUDA_SETS = ("device=cuda", "train.cuda_graph=auto")


@pytest.fixture(scope="module")
def cuda_runs(tmp_path_factory):
    """The NeRF (captured steps with op-by-op measuring steps between them), the field and
    the SDF on two GPUs, run once."""
    from train.nerf.scenes.generate import generate_scene

    d = tmp_path_factory.mktemp("ddp_cuda")
    scene = generate_scene(d / "scene", size=24, n_train=12, n_test=2)
    jobs = {
        "nerf": [*nerf_args(scene), *sets(*CUDA_SETS)],
        "field": [*FIELD, *sets(*CUDA_SETS)],
        "sdf": sets(*SDF_SHORT, *CUDA_SETS),
    }
    argvs = [["--out", str(d / name), *argv] for name, argv in jobs.items()]
    ranks, models = spawn(d, argvs)
    return d, {name: i for i, name in enumerate(jobs)}, jobs, ranks, models


def relative_difference(one: dict, two: dict) -> dict[str, float]:
    return {
        key: float((a.double() - two[key].double()).norm() / a.double().norm().clamp_min(1e-12))
        for key, a in one.items()
        if a.is_floating_point()
    }


@needs_two_gpus
@pytest.mark.parametrize("name", ["nerf", "field", "sdf"])
def test_two_gpus_with_captured_steps_equal_one_gpu(cuda_runs, tmp_path, name):
    """The ranks hold bitwise-identical parameters (the averaged gradient is the same on
    both), and two GPUs end where one does to the rounding of the atomic grid gradients."""
    d, index, jobs, ranks, models = cuda_runs
    job = index[name]
    assert [r[job]["code"] for r in ranks] == [0, 0], [r[job]["stderr"] for r in ranks]
    rank0, rank1 = models[job]
    for key in rank0:
        assert torch.equal(rank0[key], rank1[key]), (name, key)
    assert main(["--out", str(tmp_path / "one"), *jobs[name]]) == 0
    one, two = final_state(tmp_path / "one"), final_state(d / name)
    assert one["step"] == two["step"] and one["resolution"] == two["resolution"]
    differences = relative_difference(one["model"], two["model"])
    # measured on 2x H100: see the assertion message of a failing run
    assert max(differences.values()) < 1e-2, differences
    summaries = [json.loads((p / "summary.json").read_text()) for p in (tmp_path / "one", d / name)]
    assert summaries[0]["cuda_graph"] is True and summaries[1]["cuda_graph"] is True
    a, b = records(tmp_path / "one"), records(d / name)
    for ra, rb in zip(a, b, strict=True):
        if "psnr" in ra:
            assert rb["psnr"] == pytest.approx(ra["psnr"], abs=0.02), (ra, rb)
