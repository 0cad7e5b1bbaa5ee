"""`nerf.density_encoding` / `nerf.color_encoding` = "multires": instant-ngp's density MLP over a
`grid.MultiresGrid` (train/nerf/model/multires_fields.py), its geometry features for the colour
MLP, the `[multires]` table; the dense default as before."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import Tensor

from grid import MultiresGrid, VoxelGrid, lattice
from train.__main__ import main
from train.config import ConfigError, load_config
from train.export import main as export_main
from train.nerf.experiment import NerfExperiment
from train.nerf.model.multires_fields import MultiresDensity

from .test_nerf import SHORT, sets

# A small table: 6 levels of 2^12 rows x 2 features, 8^3 to 64^3 cells.
SMALL_TABLE = [
    "multires.levels=6",
    "multires.log2_table_size=12",
    "multires.base_resolution=8",
    "multires.finest_resolution=64",
    "nerf.density_hidden=16",
    "nerf.geometry_features=7",
    "train.tv_weight=0",
]
BOTH = ["nerf.density_encoding=multires", "nerf.color_encoding=multires", *SMALL_TABLE]


@pytest.fixture(scope="module")
def scene(tmp_path_factory) -> Path:
    """The shipped scene at a tiny size, generated once for this module."""
    from train.nerf.scenes.generate import generate_scene

    return generate_scene(tmp_path_factory.mktemp("scene") / "scene", size=24, n_train=12, n_test=2)


def experiment(scene: Path, *extra: str) -> NerfExperiment:
    config = load_config(None, [*SHORT, f"data.path={scene}", *extra])
    return NerfExperiment(config, torch.device("cpu"), torch.Generator().manual_seed(0), None)


def test_the_default_is_the_dense_model_and_optimiser():
    """Both encodings default to dense: the same modules, state dict and Adam groups as
    before the choice existed (the dense path's numbers are pinned by test_nerf.py)."""
    config = load_config(None, ["experiment=nerf"])
    assert (config.nerf.density_encoding, config.nerf.color_encoding) == ("dense", "dense")
    from train.nerf.experiment import make_model
    from train.nerf.optimizer import make_optimizer

    m = make_model(config, (8, 8, 8), (8, 8, 8), backend="native", device="cpu")
    assert isinstance(m.density, VoxelGrid) and isinstance(m.color, VoxelGrid)
    keys = {"density.features", "density.bounds", "color.features", "color.bounds"}
    keys |= {"occupancy_grid.flags", *(f"mlp.{k}" for k in m.mlp.state_dict())}
    assert set(m.state_dict()) == keys
    groups = make_optimizer(config, m, None, False, torch.device("cpu")).param_groups
    n = config.nerf
    assert [g["params"] for g in groups] == [
        [m.density.features],
        [m.color.features],
        list(m.mlp.parameters()),
    ]
    assert [g["lr"] for g in groups] == [n.lr_density, n.lr_color, n.lr_mlp]
    assert all(g["eps"] == 1e-8 and g["betas"] == tuple(config.train.betas) for g in groups)


def test_multires_density_and_colour_train_on_the_cpu(scene):
    exp = experiment(scene, *BOTH, "nerf.occupancy_start=1000")
    m = exp.model
    assert isinstance(m.density, MultiresDensity) and m.color is None
    assert m.density.encoding.table.shape == (6, 2**12, 2)
    assert m.mlp[0].in_features == 7 + 3 * (1 + 2 * 4)  # geometry + PE(view)
    ngp = [g for g in exp.optimizer.param_groups if g["eps"] == 1e-15]
    assert [g["params"] for g in ngp] == [
        [m.density.encoding.table],
        list(m.density.decoder.parameters()),
    ]
    assert all(g["betas"] == (0.9, 0.99) and g["lr"] == 0.01 for g in ngp)
    losses = []
    for step in range(40):
        exp.begin_step(step)
        loss, mse = exp.loss()
        exp.optimizer.zero_grad()
        loss.backward()
        exp.optimizer.step()
        losses.append(mse.item())
    assert m.density.encoding.table.grad.abs().sum() > 0  # both MLPs reach the table
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < 0.6 * first, losses


@pytest.mark.parametrize(
    "density, color", [("dense", "multires"), ("multires", "dense"), ("multires", "multires")]
)
def test_each_choice_runs_with_fit_box_and_exports(scene, tmp_path, density, color):
    out = tmp_path / "run"
    extra = (f"nerf.density_encoding={density}", f"nerf.color_encoding={color}", *SMALL_TABLE)
    extra += ("nerf.fit_box=true", "train.steps=50", "train.upsample_steps=[25]")
    extra += ("train.batch_size=512", "eval.every=50", "output.checkpoint_every=0")
    assert main(["--out", str(out), *sets(*SHORT, f"data.path={scene}", *extra)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    # The untrained model scores 9.2 dB on this scene; measured 11.4-11.6 dB after these steps.
    assert summary["psnr"] > 10.5, summary
    checkpoint = torch.load(out / "checkpoint.pt", weights_only=True)
    model = checkpoint["model"]
    own_table = (density, color) == ("dense", "multires")  # else none, or the density's
    assert ("color.table" in model) == own_table
    if density == "multires":
        # fit_box moved the box rays are marched in, never the table's
        box = model["density.bounds"]
        assert (box[0] > -1.5).any() and (box[1] < 1.5).any()
        assert model["density.encoding.bounds"].tolist() == [[-1.5] * 3, [1.5] * 3]
        assert model["density._extra_state"]["resolution"] == summary["resolution"]
    assert export_main(["--out", str(out), "--colors"]) == 0
    assert (out / "mesh.ply").stat().st_size > 0


@pytest.mark.parametrize("optimizer", ["adam", "masked_adam"])
def test_resume_continues_exactly(scene, tmp_path, optimizer):
    """A checkpoint holds the multires model whole (table, decoder, fitted box, virtual
    resolution) and the optimiser's moments: a resumed run ends as the uninterrupted one."""
    whole, split = tmp_path / "whole", tmp_path / "split"
    extra = ("train.steps=40", "output.checkpoint_every=0", f"nerf.optimizer={optimizer}")
    extra += ("nerf.fit_box=true", "train.upsample_steps=[20]", "train.batch_size=512", *BOTH)
    args = sets(*SHORT, f"data.path={scene}", *extra)
    assert main(["--out", str(whole), *args]) == 0
    assert main(["--out", str(split), *args, "--stop-at", "30"]) == 0  # past the upsample
    assert main(["--out", str(split), "--resume"]) == 0
    a, b = (torch.load(d / "checkpoint.pt", weights_only=True) for d in (whole, split))
    assert a["resolution"] == b["resolution"] == a["model"]["density._extra_state"]["resolution"]
    for key, value in a["model"].items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(value, b["model"][key]), key
    for i, state in a["optimizer"]["state"].items():
        assert all(torch.equal(v, b["optimizer"]["state"][i][k]) for k, v in state.items())
    sa, sb = (json.loads((d / "summary.json").read_text()) for d in (whole, split))
    assert sa["psnr"] == sb["psnr"]


def test_occupancy_follows_a_multires_density(scene):
    """The occupancy update evaluates the field at the occupancy grid's cells (the vertices of
    the virtual grid), without gradient; an upsample and fit_box change them, not the table."""
    exp = experiment(scene, *BOTH)
    m = exp.model
    values = m.density_values()
    assert values.shape == m.occupancy.shape == (16, 16, 16) and not values.requires_grad
    points = lattice(m.density.bounds, m.resolution)
    assert torch.allclose(values, m.density(points)[..., 0])
    bias = m.density.decoder[-1].bias
    with torch.no_grad():
        bias[0] = -30.0  # empty everywhere
    assert m.update_occupancy() == 0.0
    with torch.no_grad():
        bias[0] = 10.0
    assert m.update_occupancy() == 1.0
    table = m.density.encoding.table.detach().clone()
    exp.upsample((20, 20, 20))
    assert m.resolution == (20, 20, 20) and m.density_values().shape == (20, 20, 20)
    assert torch.equal(m.density.encoding.table, table)
    m.fit_box([[-1.0, -1.0, -1.0], [1.0, 1.0, 1.0]], (12, 12, 12))
    assert m.bounds_list == [[-1.0] * 3, [1.0] * 3] and m.occupancy.shape == (12, 12, 12)
    assert m.occupancy_grid.bounds.tolist() == m.bounds_list
    assert torch.equal(m.density.encoding.table, table)


def test_shift_decay_lowers_a_multires_density(scene):
    exp = experiment(scene, *BOTH, "nerf.shift_decay=1.0")
    before = exp.model.density_values()
    exp.upsample((16, 16, 16))
    assert torch.allclose(exp.model.density_values(), before - 1.0, atol=1e-5)


def test_dense_density_with_its_own_multires_colour(scene):
    exp = experiment(scene, "nerf.color_encoding=multires", *SMALL_TABLE)
    m = exp.model
    assert isinstance(m.density, VoxelGrid) and isinstance(m.color, MultiresGrid)
    assert m.mlp[0].in_features == 6 * 2 + 27
    assert m.color_input(torch.zeros(5, 3)).shape == (5, 12)


@pytest.mark.parametrize(
    "overrides, key",
    [
        (["nerf.density_encoding=hash"], "nerf.density_encoding"),
        (["nerf.color_encoding=sparse"], "nerf.color_encoding"),
        (["nerf.density_hidden=0"], "nerf.density_hidden"),
        (["nerf.geometry_features=0"], "nerf.geometry_features"),
        (["multires.levels=0"], "multires.levels"),
        (["multires.levels=33"], "multires.levels"),
        (["multires.features=0"], "multires.features"),
        (["multires.log2_table_size=31"], "multires.log2_table_size"),
        (["multires.base_resolution=0"], "multires.base_resolution"),
        (["multires.finest_resolution=8"], "multires.finest_resolution"),
        (["multires.levels=1", "multires.finest_resolution=32"], "multires.finest_resolution"),
        (["multires.lr=0"], "multires.lr"),
        (["multires.lr=fast"], "multires.lr"),
        (["nerf.density_encoding=multires", "train.tv_weight=1e-5"], "train.tv_weight"),
        (["multires.start_levels=17"], "multires.start_levels"),
        (["multires.start_levels=0"], "multires.start_levels"),
        (["multires.level_every=-1"], "multires.level_every"),
        (["nerf.density_activation=relu"], "nerf.density_activation"),
        (["nerf.mlp_weight_decay=-1e-6"], "nerf.mlp_weight_decay"),
    ],
)
def test_bad_values_name_the_key(overrides, key):
    with pytest.raises(ConfigError) as error:
        load_config(None, ["experiment=nerf", *overrides])
    assert str(error.value).startswith(f"{key}: "), str(error.value)


def test_levels_switch_on_coarse_to_fine(scene):
    """multires.start_levels = 2, level_every = 5: two levels give features at step 0, one
    more every 5 steps; the finer levels' rows get no gradient until theirs."""
    exp = experiment(scene, *BOTH, "multires.start_levels=2", "multires.level_every=5")
    encoding = exp.model.density.encoding
    seen = []
    for step in range(25):
        exp.begin_step(step)
        seen.append(encoding.active_levels)
        loss, _ = exp.loss()
        exp.optimizer.zero_grad()
        loss.backward()
        if step == 0:
            grad = encoding.table.grad
            assert grad[:2].abs().sum() > 0 and grad[2:].abs().sum() == 0
        exp.optimizer.step()
    assert seen == [min(6, 2 + s // 5) for s in range(25)]


@pytest.mark.parametrize("density", ["dense", "multires"])
def test_exp_activation_starts_at_alpha_init_and_exports(scene, tmp_path, density):
    """nerf.density_activation = exp (instant-ngp's trunc_exp): an untrained field has
    alpha_init over one final voxel, as softplus gives, and raw_for inverts it."""
    extra = [f"nerf.density_encoding={density}", *SMALL_TABLE, "nerf.density_activation=exp"]
    m = experiment(scene, *extra).model
    raw = torch.zeros(5)
    for activation in ("softplus", "exp"):
        m.density_activation = activation
        m.shift = make_shift(activation, 0.01)
        alpha = -torch.expm1(-m.activate(raw))  # interval 1: one final voxel
        torch.testing.assert_close(alpha, torch.full((5,), 0.01))
        torch.testing.assert_close(m.activate(torch.tensor(m.raw_for(2.5))), torch.tensor(2.5))
    out = tmp_path / "run"
    extra += ["train.steps=30", "train.upsample_steps=[15]", "train.batch_size=256"]
    assert main(["--out", str(out), *sets(*SHORT, f"data.path={scene}", *extra)]) == 0
    assert export_main(["--out", str(out)]) == 0


def make_shift(activation: str, alpha_init: float) -> float:
    from train.nerf.model.voxel_nerf import VoxelNeRF

    box = [[-1.0] * 3, [1.0] * 3]
    return VoxelNeRF(box, 4, 4, alpha_init=alpha_init, density_activation=activation).shift


def test_trunc_exp_caps_the_gradient_not_the_value():
    from train.nerf.model.density_activation import trunc_exp

    x = torch.tensor([-2.0, 0.0, 10.0, 20.0, 40.0], requires_grad=True)
    y = trunc_exp(x)
    torch.testing.assert_close(y, torch.exp(x.detach().clamp(max=30)))
    y.sum().backward()
    torch.testing.assert_close(x.grad, torch.exp(x.detach().clamp(max=15)))
    assert torch.isfinite(trunc_exp(torch.tensor([1e4]))).all()


def test_mlp_weight_decay_reaches_the_mlp_groups_only(scene):
    exp = experiment(scene, *BOTH, "nerf.mlp_weight_decay=1e-6")
    m = exp.model
    decays = {id(p): g["weight_decay"] for g in exp.optimizer.param_groups for p in g["params"]}
    assert decays[id(m.density.encoding.table)] == 0
    assert all(decays[id(p)] == 1e-6 for p in m.density.decoder.parameters())
    assert all(decays[id(p)] == 1e-6 for p in m.mlp.parameters())


def test_the_multires_table_is_read_by_nerf_alone():
    with pytest.raises(ConfigError, match="^multires: not read by experiment = 'field'"):
        load_config(None, ["multires.levels=8"])


@pytest.mark.parametrize("renderer", ["fused", "torch"])
def test_rays_that_miss_the_box_render_the_background(renderer):
    """No sample at all: the multires density and colour see empty batches [0, 3]."""
    from train.nerf.model.voxel_nerf import VoxelNeRF

    options = dict(levels=4, features=2, table_size=2**10, base_resolution=4, growth_factor=1.5)
    model = VoxelNeRF(
        [[-1.0] * 3, [1.0] * 3],
        8,
        8,
        hidden=8,
        renderer=renderer,
        density_encoding="multires",
        color_encoding="multires",
        multires=options,
    )
    origins = torch.tensor([[0.0, 0.0, 5.0]]).repeat(4, 1)
    directions = torch.tensor([[0.0, 0.0, 1.0]]).repeat(4, 1)  # away from the box
    background = torch.tensor([0.2, 0.4, 0.6])
    out = model.render(origins, directions, background, exact=True)
    assert torch.allclose(out["rgb"], background.expand(4, 3))
    out["rgb"].sum().backward()  # no sample: zero gradients, no error
    assert out["sample_features"].shape == (0, 15)


@pytest.mark.parametrize(
    "renderer, exact, contraction",
    [
        ("fused", True, "none"),
        ("fused", False, "none"),
        ("torch", True, "none"),
        ("fused", True, "sphere"),
        ("torch", True, "sphere"),
    ],
)
def test_the_colour_reads_the_density_pass_geometry_features(renderer, exact, contraction):
    """With both encodings multires, a render takes the colour MLP's geometry features from
    its density pass (`VoxelNeRF.fields`): the same colours and table gradients as running
    the density MLP again on the coloured samples (`color_input`), and one encoding pass."""
    from train.nerf.model.encoding import positional_encoding
    from train.nerf.model.voxel_nerf import VoxelNeRF

    torch.manual_seed(0)
    options = dict(levels=4, features=2, table_size=2**10, base_resolution=4, growth_factor=2.0)
    model = VoxelNeRF(
        [[-1.0] * 3, [1.0] * 3],
        16,
        16,
        density_encoding="multires",
        color_encoding="multires",
        multires=options,
        density_hidden=16,
        geometry_features=5,
        renderer=renderer,
        contraction=contraction,
    )
    model.density.encoding.table.data.uniform_(-1, 1)
    model.density.add_(2.0)  # opaque enough that many samples are coloured
    origins = torch.tensor([[0.0, 0.0, -3.0]]).repeat(64, 1) + torch.randn(64, 3) * 0.3
    directions = torch.nn.functional.normalize(
        torch.randn(64, 3) * 0.2 + torch.tensor([0, 0, 1.0]), dim=-1
    )
    background = torch.ones(3)

    def render() -> tuple[Tensor, Tensor, int]:
        calls = []
        hook = model.density.encoding.register_forward_hook(lambda *a: calls.append(1))
        model.zero_grad()
        if not exact:  # planned buffers, with padding samples: a first render plans them
            model.render(origins, directions, background, exact=False)
        out = model.render(origins, directions, background, exact=exact)
        (out["rgb"] * torch.linspace(0.5, 1.5, 3)).sum().backward()
        hook.remove()
        assert out["sample_features"].shape[0] > 20  # samples were coloured
        if not exact:
            assert (out["sample_ray"] == 64).any()  # padding samples were there
        return out["rgb"].detach(), model.density.encoding.table.grad.clone(), len(calls)

    shared, shared_grad, shared_passes = render()

    def fields_again(directions: Tensor):
        views = positional_encoding(directions, model.views.frequencies)
        views = torch.cat([views, views.new_zeros(1, views.shape[1])])

        def rgb_fn(points, rays, index):
            features = model.color_input(points)
            return model.shade(features, views[rays]), features

        return model.sigma, rgb_fn

    model.fields = fields_again
    again, again_grad, again_passes = render()
    passes = 2 if exact else 4  # a planning render first
    assert (shared_passes, again_passes) == (passes // 2, passes)
    torch.testing.assert_close(shared, again)
    torch.testing.assert_close(shared_grad, again_grad)
