"""sdf.encoding = "multires": a coarse grid plus an MLP over a MultiresGrid
(train/sdf/multires_field.py); the dense default untouched by the [multires] keys."""

from __future__ import annotations

import json

import pytest
import torch

from grid.multires_grid import MultiresGrid, level_resolutions
from grid.voxel_grid import VoxelGrid
from tests.train.sdf.test_sdf import SHORT, records
from tests.train.test_train import final_state, sets, without_timing
from train.__main__ import main
from train.config import ConfigError, load_config
from train.multires_config import growth_factor
from train.sdf.experiment import sdf_losses
from train.sdf.multires_field import MultiresSdf, multires_optimizer, set_group_rates
from train.sdf.view import load_sdf_grid

# SHORT's sphere with a small multires field: 4 levels x 2^12 rows x 2 features, 4 to 32
# cells per axis, meshed on SHORT's final 16^3 lattice.
MULTIRES = [
    *SHORT,
    "sdf.encoding=multires",
    "multires.levels=4",
    "multires.features=2",
    "multires.log2_table_size=12",
    "multires.base_resolution=4",
    "multires.finest_resolution=32",
]


def small_field(seed: int = 0) -> MultiresSdf:
    torch.manual_seed(seed)
    base = VoxelGrid(8, 1, [[-1.0] * 3, [1.0] * 3], init="normal", init_scale=0.1)
    encoding = MultiresGrid(3, 2, 2**10, 4, 2.0, init_scale=0.1)
    return MultiresSdf(base, encoding, (16, 16, 16))


def test_the_default_is_dense_and_ignores_the_multires_keys(tmp_path):
    assert load_config(None, ["experiment=sdf"]).sdf.encoding == "dense"
    plain, other = tmp_path / "plain", tmp_path / "other"
    assert main(["--out", str(plain), *sets(*SHORT)]) == 0
    keys = ["multires.levels=3", "multires.log2_table_size=10", "multires.lr=0.5"]
    assert main(["--out", str(other), *sets(*SHORT, *keys)]) == 0
    a, b = final_state(plain), final_state(other)
    assert set(a["model"]) == {"features", "bounds"}  # one VoxelGrid, as before
    assert torch.equal(a["model"]["features"], b["model"]["features"])
    assert len(a["optimizer"]["param_groups"]) == 1
    assert without_timing(plain) == without_timing(other)
    summary = json.loads((plain / "summary.json").read_text())
    assert summary["encoding"] == "dense" and summary["parameters"] == 16**3


def test_a_short_multires_run_lowers_the_loss_and_writes_a_mesh(tmp_path):
    out = tmp_path / "run"
    assert main(["--out", str(out), *sets(*MULTIRES)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["encoding"] == "multires" and summary["resolution"] == [16, 16, 16]
    table = 4 * 2**12 * 2
    decoder = 8 * 64 + 64 + 64 + 1
    assert summary["parameters"] == 12**3 + table + decoder
    assert summary["sign_repairs"] == {}  # no upsample, no repair
    log = records(out)
    assert [r["step"] for r in log] == [20, 40, 60]
    first, last = log[0], log[-1]
    assert last["train_loss"] < first["train_loss"], (first, last)
    assert last["sdf_error"] < first["sdf_error"], (first, last)
    assert last["sdf_error_box"] < 0.005 and last["normal_error"] < 6
    assert summary["mesh_components"] == 1 and 0 < summary["chamfer"] < 0.01
    assert summary["mesh_vertices"] > 100
    assert (out / "mesh.ply").read_bytes().startswith(b"ply\n")
    state = final_state(out)
    assert state["model"]["encoding.table"].shape == (4, 2**12, 2)
    assert state["resolution"] == [16, 16, 16]
    # what `grid-train view` shows: the field sampled on the mesh's lattice
    grid = load_sdf_grid(out, load_config(out / "config.toml"), state, torch.device("cpu"))
    values = grid.features[..., 0]
    assert grid.resolution == (16, 16, 16) and values[8, 8, 8] < 0 < values[0, 0, 0]
    inside = (values < 0).sum().item() * (2 / 15) ** 3  # the sphere of radius 0.6: 0.905
    assert inside == pytest.approx(4 / 3 * torch.pi * 0.6**3, rel=0.15)


@pytest.mark.parametrize("stop_at", [25, 30])  # 30: at the (no-op) upsample step
def test_a_multires_run_resumes_exactly(tmp_path, stop_at):
    args = sets(*MULTIRES)
    whole, split = tmp_path / "whole", tmp_path / "split"
    assert main(["--out", str(whole), *args]) == 0
    assert main(["--out", str(split), *args, "--stop-at", str(stop_at)]) == 0
    assert final_state(split)["step"] == stop_at
    assert main(["--out", str(split), "--resume"]) == 0
    a, b = final_state(whole), final_state(split)
    assert a["model"].keys() == b["model"].keys()
    for key in a["model"]:
        assert torch.equal(a["model"][key], b["model"][key]), key
    assert len(a["optimizer"]["param_groups"]) == 2
    for index, state in a["optimizer"]["state"].items():
        for key in ("exp_avg", "exp_avg_sq"):
            assert torch.equal(state[key], b["optimizer"]["state"][index][key])
    assert without_timing(whole) == without_timing(split)


@pytest.mark.parametrize(
    "overrides, key",
    [
        (["sdf.encoding=sparse"], "sdf.encoding"),
        (["multires.levels=0"], "multires.levels"),
        (["multires.levels=33"], "multires.levels"),
        (["multires.features=0"], "multires.features"),
        (["multires.log2_table_size=31"], "multires.log2_table_size"),
        (["multires.base_resolution=0"], "multires.base_resolution"),
        (
            ["multires.finest_resolution=8", "multires.base_resolution=16"],
            "multires.finest_resolution",
        ),
        (["multires.levels=1", "multires.finest_resolution=32"], "multires.finest_resolution"),
        (["multires.lr=0"], "multires.lr"),
        (["multires.lr=-1e-3"], "multires.lr"),
        (["sdf.encoding=multires", "train.tv_weight=1e-4"], "train.tv_weight"),
        (["sdf.encoding=multires", "grid.interpolation=smoothstep"], "grid.interpolation"),
    ],
)
def test_bad_multires_values_name_the_key(overrides, key):
    with pytest.raises(ConfigError, match=rf"^{key}: "):
        load_config(None, ["experiment=sdf", *overrides])


def test_the_multires_table_is_refused_outside_the_sdf_experiment():
    with pytest.raises(ConfigError, match="^multires: not read by experiment = 'field'"):
        load_config(None, ["multires.levels=4"])


@pytest.mark.parametrize(
    "levels, base, finest", [(16, 16, 2048), (16, 16, 512), (5, 3, 7), (1, 8, 8)]
)
def test_the_growth_factor_reaches_the_finest_resolution(levels, base, finest):
    m = load_config(
        None,
        [
            "experiment=sdf",
            f"multires.levels={levels}",
            f"multires.base_resolution={base}",
            f"multires.finest_resolution={finest}",
        ],
    ).multires
    resolutions = level_resolutions(levels, base, growth_factor(m))
    assert resolutions[0] == base and resolutions[-1] == finest


def test_the_field_starts_as_its_base_grid():
    field = small_field()
    x = torch.rand(100, 3) * 2 - 1
    assert torch.equal(field(x), field.base(x))


def test_the_eikonal_term_alone_trains_the_table_through_the_decoder():
    """Double backward: the eikonal term's gradient reaches the table (through the op's
    double backward and the Softplus's second derivative) and the decoder's first layer."""
    field = small_field()
    with torch.no_grad():  # a decoder that reads the table (its last layer starts at zero)
        field.decoder[2].weight.normal_()
    surface = torch.zeros(0, 3)
    uniform = torch.rand(512, 3, generator=torch.Generator().manual_seed(1)) * 2 - 1
    _, _, eikonal = sdf_losses(field, surface, surface, uniform)
    eikonal.backward()
    table = field.encoding.table.grad
    assert table is not None and table.abs().sum() > 0
    assert field.decoder[0].weight.grad.abs().sum() > 0
    # and it is the eikonal term's: a step against it lowers it
    with torch.no_grad():
        for p in field.parameters():
            if p.grad is None:  # the last bias: no part in grad f
                continue
            p -= 1e-3 * p.grad / p.grad.abs().max().clamp_min(1e-30)
    _, _, after = sdf_losses(field, surface, surface, uniform)
    assert after < eikonal


def test_bake_samples_the_field_on_the_lattice():
    field = small_field()
    grid = field.bake(chunk=100)  # several x-slices per chunk, and one
    assert grid.resolution == (16, 16, 16)
    lin = torch.linspace(-1, 1, 16)
    nodes = torch.stack(torch.meshgrid(lin, lin, lin, indexing="ij"), dim=-1)
    with torch.no_grad():
        expected = field(nodes)[..., 0]
    torch.testing.assert_close(grid.features[..., 0], expected, rtol=1e-5, atol=1e-6)


def test_the_two_groups_learning_rates_are_set_apart():
    field = small_field()
    c = load_config(None, ["experiment=sdf"])
    optimizer = multires_optimizer(field, [0.5, 0.25], c)
    assert [g["lr"] for g in optimizer.param_groups] == [0.5, 0.25]
    assert optimizer.param_groups[0]["params"] == [field.base.features]
    assert optimizer.param_groups[1]["params"][0] is field.encoding.table
    assert optimizer.param_groups[0]["eps"] == 1e-15
    set_group_rates(optimizer, [0.1, 0.2])
    assert [g["lr"] for g in optimizer.param_groups] == [0.1, 0.2]
    with pytest.raises(ValueError, match="rates"):
        set_group_rates(optimizer, [0.1])
