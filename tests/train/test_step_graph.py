"""Training steps as CUDA graph replays (train/step_graph.py, `train.cuda_graph`): the mode
switch and its errors, optimiser state across modes, the fused density, and on CUDA a
captured step against the eager one."""

from __future__ import annotations

import json

import pytest
import torch

from tests._helpers import needs_cuda
from tests.train.sdf.test_sdf import SHORT
from tests.train.test_train import TINY, final_state, sets
from train.__main__ import main
from train.config import ConfigError, load_config
from train.distributed import SINGLE
from train.field.targets import Density
from train.grid_schedule import fit_optimizer, make_optimizer
from train.loop import make_experiment
from train.metrics import LaggedValues
from train.step_graph import GraphedStep, eager_step, use_graphs

CPU, CUDA = torch.device("cpu"), torch.device("cuda")


# ---- the switch ------------------------------------------------------------------------


def test_modes_resolve_per_device():
    for mode, on_cpu, on_cuda in (("auto", False, True), ("off", False, False)):
        config = load_config(None, ["device=cpu", f"train.cuda_graph={mode}"])
        assert use_graphs(config, CPU) is on_cpu and use_graphs(config, CUDA) is on_cuda
    on = load_config(None, ["device=cpu", "train.cuda_graph=on"])
    assert use_graphs(on, CUDA)
    with pytest.raises(ConfigError, match=r'train.cuda_graph: "on" .* needs a CUDA device'):
        use_graphs(on, CPU)


def test_on_without_cuda_stops_before_training_with_one_line(tmp_path, capsys):
    assert main(["--out", str(tmp_path / "run"), *sets(*TINY, "train.cuda_graph=on")]) == 2
    err = capsys.readouterr().err
    assert "train.cuda_graph" in err and "needs a CUDA device" in err
    assert not (tmp_path / "run" / "checkpoint.pt").exists()


def test_bad_values_are_refused():  # nerf configs that cannot: tests/train/nerf/test_nerf_graph.py
    with pytest.raises(ConfigError, match="train.cuda_graph"):
        load_config(None, ["train.cuda_graph=yes"])


def test_a_cpu_run_says_its_steps_were_eager(tmp_path):
    out = tmp_path / "run"
    assert main(["--out", str(out), *sets(*TINY)]) == 0
    assert json.loads((out / "summary.json").read_text())["cuda_graph"] is False


# ---- optimiser state across the modes ------------------------------------------------------


def trained_experiment(device: torch.device, graphed: bool):
    config = load_config(None, [*TINY[1:], f"device={device.type}"])
    gen = torch.Generator(device=device).manual_seed(0)
    exp = make_experiment(config, device, gen, None)
    exp.graphed = graphed
    exp.optimizer = make_optimizer(exp.model, config, graphed)
    for step in range(3):
        exp.begin_step(step)
        eager_step(exp, SINGLE)
    return exp


def test_fit_optimizer_keeps_an_eager_state_as_it_is():
    exp = trained_experiment(CPU, graphed=False)
    before = exp.optimizer.state_dict()
    fit_optimizer(exp.optimizer, graphed=False)
    after = exp.optimizer.state_dict()
    assert after["param_groups"] == before["param_groups"]
    for key in ("step", "exp_avg", "exp_avg_sq"):
        a, b = after["state"][0][key], before["state"][0][key]
        assert torch.equal(a, b) and a.device == b.device


def test_a_graph_checkpoints_optimiser_resumes_op_by_op_on_the_cpu():
    """What a captured CUDA run saves (fused, capturable, a tensor learning rate, float32
    step counters) loads into the CPU's op-by-op (fused) Adam and steps."""
    exp = trained_experiment(CPU, graphed=False)
    state = exp.optimizer.state_dict()
    for group in state["param_groups"]:
        group.update(lr=torch.tensor(group["lr"]), capturable=True, fused=True)
    other = trained_experiment(CPU, graphed=False)
    other.optimizer.load_state_dict(state)
    fit_optimizer(other.optimizer, graphed=False)
    group = other.optimizer.param_groups[0]
    assert isinstance(group["lr"], float)  # begin_step sets every step's value
    assert (group["capturable"], group["fused"], group["foreach"]) == (False, True, None)
    step = other.optimizer.state[other.model.features]["step"]
    assert step.device.type == "cpu" and step.dtype == torch.float32
    other.begin_step(3)
    eager_step(other, SINGLE)


def test_lagged_values_on_the_cpu_are_current():
    assert LaggedValues().read(torch.tensor([1.5, 2.0])) == [1.5, 2.0]


# ---- on CUDA -------------------------------------------------------------------------------


@needs_cuda
def test_fused_density_matches_the_formula():
    target = Density(24, 12.0, 0.35, 0.85, 0).to(CUDA)
    xyz = torch.rand(100_000, 3, device="cuda") * 2.2 - 1.1
    fused, formula = target(xyz), target.formula(xyz)
    torch.testing.assert_close(fused, formula, rtol=3e-4, atol=1e-5)  # the formula cancels
    assert fused.shape == (100_000,) and target(xyz[:0]).shape == (0,)


@needs_cuda
def test_graph_and_eager_checkpoints_resume_in_the_other_mode():
    for saved_graphed in (False, True):
        exp = trained_experiment(CUDA, saved_graphed)
        state = exp.optimizer.state_dict()
        other = trained_experiment(CUDA, not saved_graphed)
        other.optimizer.load_state_dict(state)
        fit_optimizer(other.optimizer, not saved_graphed)
        group = other.optimizer.param_groups[0]
        assert isinstance(group["lr"], torch.Tensor) is (not saved_graphed)
        assert group["capturable"] is (not saved_graphed)
        step = other.optimizer.state[other.model.features]["step"]
        assert step.device.type == "cuda" and group["fused"]  # fused in both modes
        other.begin_step(3)
        eager_step(other, SINGLE)  # the adapted optimiser steps


def field_config(*extra: str):
    return load_config(
        None,
        [
            *TINY[1:],
            "device=cuda",
            "grid.resolution=16",
            "train.batch_size=8192",
            "train.tv_weight=1e-4",
            "train.upsample_steps=[6]",
            "train.upsample_resolutions=[24]",
            *extra,
        ],
    )


def run_steps(config, captured: bool, steps: int):
    """(experiment, batch values, runner) after `steps` steps from the same start."""
    gen = torch.Generator(device=CUDA).manual_seed(config.seed)
    exp = make_experiment(config, CUDA, gen, None)
    assert exp.graphed
    runner = GraphedStep(exp, SINGLE) if captured else None
    values = []
    for step in range(steps):
        if step == 6:
            exp.upsample((24, 24, 24))
        exp.begin_step(step)
        value = runner.step() if runner else eager_step(exp, SINGLE)
        values.append(value.detach().clone())
    torch.cuda.synchronize()
    return exp, values, runner


@needs_cuda
def test_captured_field_steps_equal_eager_steps_bitwise():
    """Deterministic kernels (no atomics): every step's batch value, the grid, Adam's state
    and the generator equal the eager steps' bitwise, across an upsample (re-capture)."""
    config = field_config()
    torch.use_deterministic_algorithms(True)
    try:
        eager, eager_values, _ = run_steps(config, captured=False, steps=12)
        graph, graph_values, runner = run_steps(config, captured=True, steps=12)
    finally:
        torch.use_deterministic_algorithms(False)
    assert runner.captures == 2  # one per resolution
    for step, (a, b) in enumerate(zip(eager_values, graph_values, strict=True)):
        assert torch.equal(a, b), f"step {step}: eager {a.item()!r}, captured {b.item()!r}"
    assert torch.equal(eager.model.features, graph.model.features)
    sa, sb = (e.optimizer.state[e.model.features] for e in (eager, graph))
    for key in ("exp_avg", "exp_avg_sq", "step"):
        assert torch.equal(sa[key], sb[key])
    assert torch.equal(eager.gen.get_state(), graph.gen.get_state())


@needs_cuda
def test_captured_sdf_steps_match_eager_steps():
    """The eikonal double backward scatters with atomics, so to float rounding; with the
    surface term in voxel units (the voxel size changes at the upsample)."""
    config = load_config(
        None,
        [
            *SHORT[:1],
            *SHORT[2:],
            "device=cuda",
            "train.upsample_steps=[6]",
            "train.upsample_resolutions=[16]",
            "sdf.surface_units=voxel",
        ],
    )
    runs = []
    for captured in (False, True):
        gen = torch.Generator(device=CUDA).manual_seed(0)
        exp = make_experiment(config, CUDA, gen, None)
        runner = GraphedStep(exp, SINGLE) if captured else None
        for step in range(12):
            if step == 6:
                exp.upsample((16, 16, 16))
            exp.begin_step(step)
            runner.step() if runner else eager_step(exp, SINGLE)
        torch.cuda.synchronize()
        runs.append(exp)
    torch.testing.assert_close(runs[0].model.features, runs[1].model.features, rtol=1e-4, atol=1e-6)
    assert torch.equal(runs[0].gen.get_state(), runs[1].gen.get_state())


@needs_cuda
def test_re_captures_do_not_keep_the_released_graphs_memory():
    """A new capture (forced here every 3 steps through `graph_key`, as a NeRF's growing
    sample counts do) leaves the caching allocator holding what one captured step needs,
    not one more private pool per capture."""
    config = field_config("train.batch_size=262144")
    gen = torch.Generator(device=CUDA).manual_seed(0)
    exp = make_experiment(config, CUDA, gen, None)
    runner = GraphedStep(exp, SINGLE)
    torch.cuda.empty_cache()
    reserved = []
    for step in range(30):
        exp.graph_key = lambda step=step: (step // 3,)  # 2 warm-up steps, then a capture
        exp.begin_step(step)
        runner.step()
        torch.cuda.synchronize()
        reserved.append(torch.cuda.memory_reserved(CUDA))
    assert runner.captures == 10
    one_pool = reserved[2] - reserved[1]  # what the first capture added
    assert one_pool > 0
    assert reserved[-1] - reserved[5] < one_pool  # eight captures later; kept: 8 pools


@needs_cuda
@pytest.mark.parametrize("stop_at", [4, 9])
def test_graph_runs_resume_and_match_eager_runs(tmp_path, stop_at):
    """Whole runs through the loop: captured and eager reach the same PSNR; a captured run
    stopped and resumed (from before and after the upsample) ends where an uninterrupted one
    does, to the float rounding of the atomic grid gradient."""
    base = [*TINY[1:], "device=cuda", "train.upsample_steps=[6]", "train.upsample_resolutions=[12]"]
    eager, whole, split = (tmp_path / name for name in ("eager", "whole", "split"))
    assert main(["--out", str(eager), *sets(*base, "train.cuda_graph=off")]) == 0
    assert main(["--out", str(whole), *sets(*base)]) == 0
    assert main(["--out", str(split), *sets(*base), "--stop-at", str(stop_at)]) == 0
    assert main(["--out", str(split), "--resume"]) == 0
    se, sw, ss = (json.loads((d / "summary.json").read_text()) for d in (eager, whole, split))
    assert se["cuda_graph"] is False and sw["cuda_graph"] is True and ss["cuda_graph"] is True
    assert "graph_captures" not in se
    assert (sw["graph_captures"], sw["graph_eager_steps"]) == (2, 0)  # one per resolution
    assert sw["graph_capture_seconds"] > 0
    assert sw["psnr"] == pytest.approx(se["psnr"], abs=0.05)
    assert ss["psnr"] == pytest.approx(sw["psnr"], abs=0.01)
    a, b = final_state(whole), final_state(split)
    torch.testing.assert_close(a["model"]["features"], b["model"]["features"], rtol=1e-4, atol=1e-6)
    assert torch.equal(a["generator"], b["generator"])


class NegatingWorld:
    """Stands in for two ranks (`GraphedStep` then keeps the averaging between its two
    graphs) whose averaging negates the gradients: what the second graph's Adam steps with
    must be what the averaging made, whatever it made."""

    size = 2

    def average_gradients(self, params, support=None):
        for p in params:
            p.grad.neg_()


@needs_cuda
def test_captured_two_rank_steps_average_the_captured_gradients_after_op_by_op_steps():
    """Op-by-op steps between replays (the NeRF's measuring steps: `graph_key` None) give the
    parameters new `.grad` tensors; the averaging between the graphs must still act on the
    ones the graphs write and read. Before, it averaged the stale op-by-op gradients and
    each rank stepped with its own gradient (two GPUs: 34.1 against 35.1 dB)."""
    config = field_config()
    world = NegatingWorld()
    torch.use_deterministic_algorithms(True)
    try:
        runs = []
        for captured in (False, True):
            gen = torch.Generator(device=CUDA).manual_seed(config.seed)
            exp = make_experiment(config, CUDA, gen, None)
            runner = GraphedStep(exp, world) if captured else None
            start = exp.model.features.detach().clone()
            for step in range(12):
                # steps 5, 8 and 9 op by op, as the NeRF's measuring steps
                exp.graph_key = lambda measure=step in (5, 8, 9): None if measure else ()
                exp.begin_step(step)
                runner.step() if runner else eager_step(exp, world)
            torch.cuda.synchronize()
            runs.append((exp, runner, start))
    finally:
        torch.use_deterministic_algorithms(False)
    (eager, _, start), (graph, runner, _) = runs
    assert runner.captures == 1 and runner.eager_steps == 3 and len(runner.graphs) == 2
    assert not torch.equal(eager.model.features, start)  # it trained
    assert torch.equal(eager.model.features, graph.model.features)
    sa, sb = (e.optimizer.state[e.model.features] for e in (eager, graph))
    for key in ("exp_avg", "exp_avg_sq"):
        assert torch.equal(sa[key], sb[key])
