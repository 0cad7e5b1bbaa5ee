"""NeRF training steps as CUDA graph replays (train/step_graph.py with the experiment's
`graph_key`): which configs can be captured, the buffer plan that keeps a graph valid, the
steps that stay op by op, and on CUDA captured runs against eager ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests._helpers import needs_cuda
from tests.train.nerf.test_nerf import SHORT, sets
from train.__main__ import main
from train.config import ConfigError, load_config
from train.distributed import SINGLE
from train.nerf.config import graph_problem
from train.nerf.experiment import NerfExperiment
from train.nerf.model.capacity import SampleCapacity
from train.step_graph import GraphedStep, eager_step

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def scene(tmp_path_factory) -> Path:
    from train.nerf.scenes.generate import generate_scene

    return generate_scene(tmp_path_factory.mktemp("scene") / "scene", size=24, n_train=12, n_test=2)


def nerf_config(scene: Path, *extra: str):
    return load_config(None, [*SHORT, f"data.path={scene}", *extra])


# ---- which configs ---------------------------------------------------------------------------


def test_on_is_refused_where_the_steps_cannot_be_captured():
    base = ["experiment=nerf", "train.cuda_graph=on"]
    for extra, reason in (
        ("grid.backend=grid_sample", "the torch renderer reads the sample counts back"),
        ("nerf.renderer=torch", "the torch renderer reads the sample counts back"),
    ):
        with pytest.raises(ConfigError, match=f"train.cuda_graph: 'on', .*{reason}"):
            load_config(None, [*base, extra])
        assert graph_problem(load_config(None, [*base[:1], extra])) is not None
    assert graph_problem(load_config(None, base)) is None  # the default nerf config can
    assert graph_problem(load_config(None, [*base, "nerf.optimizer=masked_adam"])) is None


# ---- the buffer plan -------------------------------------------------------------------------


def test_capacity_keeps_its_plan_while_a_new_one_is_a_little_smaller():
    cap, key = SampleCapacity(), ("flags", 0)
    assert cap.peek(key, 1000) is None  # nothing measured: exact
    cap.measured(key, 10_000, 3_000, 1000, CPU)
    plan = cap.peek(key, 1000)  # 1.05 x the counts, in granules of 1024
    assert plan == (11 * 1024, 4 * 1024) and cap.renders == 0  # peeking counts nothing
    assert cap.sizes(key, 1000) == plan and cap.renders == 1
    cap.measured(key, 9_000, 3_000, 1000, CPU)  # 9450 -> 10240 slots, 0.91x: kept
    assert cap.peek(key, 1000) == plan
    cap.measured(key, 12_000, 3_000, 1000, CPU)  # more than the plan holds: a new plan
    assert cap.peek(key, 1000) == (13 * 1024, 4 * 1024)
    cap.measured(key, 5_000, 3_000, 1000, CPU)  # far fewer: a new, smaller plan
    assert cap.peek(key, 1000) == (6 * 1024, 4 * 1024)
    assert cap.peek(("flags", 1), 1000) is None  # another state: measure again
    for _ in range(cap.every):
        assert cap.sizes(key, 1000) is not None
    assert cap.peek(key, 1000) is None  # `every` renders: measure again


def test_the_plan_is_made_again_from_a_planned_renders_counts_copied_before():
    """`lag` renders before the `every`-th, the counts the last planned render wrote on the
    device are copied; the `every`-th plans from them, with no exact render."""
    cap, key = SampleCapacity(), ("flags", 0)
    cap.measured(key, 10_000, 3_000, 1000, CPU)
    assert cap.seen.tolist() == [-1, -1]  # nothing planned in this state yet
    for k in range(1, cap.every + 1):
        assert cap.sizes(key, 1000) == (11 * 1024, 4 * 1024)
        late = k > cap.every - cap.lag  # rendered after the copy started: not read
        cap.observe(torch.tensor(20_000 if late else 12_000), torch.tensor(3_100), (11264, 4096))
    plan = cap.peek(key, 1000)  # from 12 000 and 3 100 samples over 1000 rays
    assert plan == (13 * 1024, 4 * 1024) and cap.renders == 0 and cap.copy is None
    assert cap.per_ray == (12.0, 3.1)


def test_with_no_planned_counts_the_every_th_render_is_exact():
    cap, key = SampleCapacity(), ("flags", 0)
    cap.measured(key, 10_000, 3_000, 1000, CPU)
    for _ in range(cap.every - cap.lag):
        cap.sizes(key, 1000)
    assert cap.copy is not None  # a copy of `seen`, which no planned render wrote
    cap.measured(key, 10_000, 3_000, 1000, CPU)  # a new measurement drops it
    assert cap.copy is None
    for _ in range(cap.every):
        cap.sizes(key, 1000)
    assert cap.peek(key, 1000) is None  # -1 copied: measure


def test_a_run_renders_exactly_only_when_its_state_changes(scene):
    """Planned renders (as on CUDA), occupancy refreshed every 100 steps: past the first
    render and the refresh, the renders of 40 steps never measure, though `every` is 8."""
    config = nerf_config(scene, "nerf.occupancy_start=2", "nerf.occupancy_every=100")
    exp = NerfExperiment(config, CPU, torch.Generator().manual_seed(0), None)
    exp.model.sizing = "planned"
    exp.model.capacity.every, exp.model.capacity.lag = 8, 3
    exact = []
    for step in range(40):
        exp.begin_step(step)
        if exp.graph_key() is None:
            exact.append(step)
        eager_step(exp, SINGLE)
    assert exact == [0, 2] and int(exp.model.capacity.dropped) >= 0


def test_dropped_samples_are_counted_in_place():
    cap = SampleCapacity()
    cap.measured(("k",), 10, 10, 1, CPU)
    counter = cap.dropped
    cap.observe(torch.tensor(13), torch.tensor(2), (10, 5))  # 3 samples did not fit
    cap.observe(torch.tensor(8), torch.tensor(9), (10, 5))  # 4 coloured ones did not
    assert cap.dropped is counter and int(counter) == 7  # a captured step adds to it too
    assert cap.seen.tolist() == [8, 9]


def test_graph_key_sends_measuring_steps_op_by_op(scene):
    """On the CPU the experiment runs eager, but its graph_key decides as on CUDA: None
    while the render would measure its buffers, the plan afterwards, None again after an
    occupancy refresh; `replayed` counts a render."""
    config = nerf_config(scene, "nerf.occupancy_start=2", "nerf.occupancy_every=100")
    exp = NerfExperiment(config, CPU, torch.Generator().manual_seed(0), None)
    assert not exp.graphed  # no CUDA
    exp.model.sizing = "planned"
    assert exp.graph_key() is None
    for step in range(2):
        exp.begin_step(step)
        eager_step(exp, SINGLE)  # the first measures, the second is planned
    key = exp.graph_key()
    assert key is not None and key[0] == exp.model.capacity.planned[1:]
    renders = exp.model.capacity.renders
    exp.replayed()
    assert exp.model.capacity.renders == renders + 1 and exp.graph_key() == key
    exp.begin_step(2)  # refreshes the occupancy grid: the next render measures
    assert exp.graph_key() is None


def test_priors_until_changes_the_loss_and_the_graph_key(scene):
    """From nerf.priors_until the step's loss leaves DirectVoxGO's two priors out (the same
    batch, the same MSE, a smaller loss), and a captured step is captured again: the switch
    is part of the graph's key."""
    priors = ["nerf.sample_color_weight=0.5", "nerf.entropy_weight=0.25", "nerf.priors_until=3"]
    config = nerf_config(scene, "nerf.occupancy_start=100", *priors)
    exp = NerfExperiment(config, CPU, torch.Generator().manual_seed(0), None)
    exp.model.sizing = "planned"
    for step in range(2):
        exp.begin_step(step)
        eager_step(exp, SINGLE)
    exp.begin_step(2)
    key, state = exp.graph_key(), exp.gen.get_state()
    with torch.no_grad():
        with_priors = exp.loss()
        exp.begin_step(3)
        exp.gen.set_state(state)
        without = exp.loss()
    assert exp.priors is False and key is not None and exp.graph_key()[:-1] == key[:-1]
    assert exp.graph_key()[-1] is False and key[-1] is True
    assert torch.equal(with_priors[1], without[1])  # the batch's MSE
    assert with_priors[0] > without[0]


# ---- on CUDA ---------------------------------------------------------------------------------


def run_steps(config, captured: bool, steps: int = 40):
    gen = torch.Generator(device="cuda").manual_seed(config.seed)
    exp = NerfExperiment(config, torch.device("cuda"), gen, None)
    assert exp.graphed
    runner = GraphedStep(exp, SINGLE) if captured else None
    values = []
    for step in range(steps):
        if step in config.train.upsample_steps:
            exp.upsample((24, 24, 24))
        exp.begin_step(step)
        value = runner.step() if runner is not None else eager_step(exp, SINGLE)
        values.append(float(value.detach()))
    torch.cuda.synchronize()
    return exp, values, runner


@needs_cuda
@pytest.mark.parametrize(
    "fit_box, optimizer", [(False, "adam"), (True, "adam"), (False, "masked_adam")]
)
def test_captured_nerf_steps_match_eager_steps(scene, fit_box, optimizer):
    """Same random batches, same updates: the captured steps (re-captured at the upsample)
    and the measuring steps between them follow the eager run to the float rounding of the
    atomic grid gradients."""
    config = nerf_config(
        scene,
        "device=cuda",
        f"nerf.optimizer={optimizer}",
        "nerf.occupancy_start=10",
        "nerf.occupancy_every=10",
        "train.upsample_steps=[20]",
        f"nerf.fit_box={str(fit_box).lower()}",
        "nerf.sample_color_weight=0.01",
        "nerf.entropy_weight=0.001",
        f"nerf.appearance={'affine' if fit_box else 'off'}",  # per-image codes captured too
        f"nerf.jitter={str(fit_box).lower()}",  # stratified samples: their draws captured too
        f"nerf.view_consistency_weight={0.1 if optimizer == 'adam' else 0}",  # 2nd MLP pass
        f"nerf.view_consistency_stride={4 if fit_box else 1}",  # ... on every 4th sample
        # normals refreshed in place, their box moved by the fit: read on the device
        f"nerf.reflected_views={str(fit_box).lower()}",
    )
    # The grid gradients' atomics add in a different order in each run, and Adam makes a
    # rounding difference of a near-zero gradient a step of the learning rate's size: over
    # 40 steps the runs drifted apart by chance (this test failed now and then on H100s and
    # H200s, up to 5% of the colour features apart). Deterministic kernels (warn only where
    # an op has none) leave the capture itself as the only difference.
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        eager, eager_values, _ = run_steps(config, captured=False)
        graph, graph_values, runner = run_steps(config, captured=True)
    finally:
        torch.use_deterministic_algorithms(False)
    assert runner.captures >= 2 and runner.eager_steps >= 4  # measuring steps op by op
    assert graph_values == pytest.approx(eager_values, rel=1e-5, abs=1e-7)
    if fit_box:
        assert graph.appearance.codes.abs().max() > 0
        torch.testing.assert_close(
            graph.appearance.codes, eager.appearance.codes, rtol=1e-4, atol=1e-6
        )
    for (name, a), b in zip(eager.model.named_parameters(), graph.model.parameters(), strict=True):
        a, b = a.detach(), b.detach()
        # deterministic, the runs came out bitwise equal in all three cases on an H200 (the
        # nondeterministic ones: up to 5% of the colour features apart): these limits leave
        # room for another card's library choices, not for a capture that drops an update
        apart = ~torch.isclose(a, b, rtol=1e-4, atol=1e-6)
        worst = float((a - b).abs().max())
        assert apart.float().mean() < 1e-4 and worst < 1e-3, (
            f"{name}: {int(apart.sum())} of {a.numel()} elements apart, the largest by {worst:.4g}"
        )
    assert torch.equal(eager.gen.get_state(), graph.gen.get_state())
    assert int(graph.model.capacity.dropped) == int(eager.model.capacity.dropped)
    group = graph.optimizer.param_groups[0]
    assert float(group["lr"]) == pytest.approx(eager.learning_rate(39))


@needs_cuda
def test_captured_nerf_runs_resume_and_match_eager_runs(scene, tmp_path):
    base = [*SHORT, f"data.path={scene}", "device=cuda"]
    eager, whole, split = (tmp_path / name for name in ("eager", "whole", "split"))
    assert main(["--out", str(eager), *sets(*base, "train.cuda_graph=off")]) == 0
    assert main(["--out", str(whole), *sets(*base, "train.cuda_graph=on")]) == 0
    assert main(["--out", str(split), *sets(*base), "--stop-at", "50"]) == 0
    assert main(["--out", str(split), "--resume", "--set", "train.cuda_graph=off"]) == 0
    se, sw, ss = (json.loads((d / "summary.json").read_text()) for d in (eager, whole, split))
    assert se["cuda_graph"] is False and sw["cuda_graph"] is True and ss["cuda_graph"] is False
    assert sw["graph_captures"] >= 1 and sw["graph_eager_steps"] >= 1  # the measuring renders
    assert sw["psnr"] == pytest.approx(se["psnr"], abs=0.3)
    assert ss["psnr"] == pytest.approx(sw["psnr"], abs=0.3)


def test_jitter_is_drawn_from_the_runs_generator(scene):
    """nerf.jitter's shifts come from the run's generator (which a captured step replays):
    the same seed gives the same loss, and the shifts move the samples."""
    values, states = [], []
    for jitter in ("false", "true", "true"):
        config = nerf_config(scene, f"nerf.jitter={jitter}")
        exp = NerfExperiment(config, CPU, torch.Generator().manual_seed(0), None)
        for step in range(4):  # trained a little: an untouched grid renders alike anywhere
            exp.begin_step(step)
            value = eager_step(exp, SINGLE)
        values.append(float(value))
        states.append(exp.gen.get_state())
    assert values[1] == values[2] and values[0] != values[1]
    assert torch.equal(states[1], states[2]) and not torch.equal(states[0], states[1])


@pytest.mark.parametrize("optimizer", ["adam", "masked_adam"])
def test_a_captured_runs_optimiser_resumes_op_by_op_on_the_cpu(scene, optimizer):
    """What a captured CUDA run saves (capturable, fused, device learning rates) loads into
    the CPU's optimiser (`fit_optimizer`) and steps."""
    config = nerf_config(scene, f"nerf.optimizer={optimizer}")
    runs = [NerfExperiment(config, CPU, torch.Generator().manual_seed(0), None) for _ in "ab"]
    for exp in runs:
        exp.begin_step(0)
        eager_step(exp, SINGLE)
    state = runs[0].optimizer.state_dict()
    for group in state["param_groups"]:
        group.update(lr=torch.tensor(group["lr"]), capturable=True, fused=True)
    other = runs[1]
    other.optimizer.load_state_dict(state)
    other.fit_optimizer()
    group = other.optimizer.param_groups[0]
    assert isinstance(group["lr"], float) and group["capturable"] is False
    other.begin_step(1)
    eager_step(other, SINGLE)
