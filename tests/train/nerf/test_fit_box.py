"""Grids moved onto a sub-box (`VoxelGrid.crop`, `OccupancyGrid.crop`, `VoxelNeRF.fit_box`) and
the NeRF experiment's `nerf.fit_box`; the test views' background (floater) metrics."""

from __future__ import annotations

import json
import math

import pytest
import torch

from grid import OccupancyGrid, VoxelGrid, lattice
from tests.train.nerf.test_nerf import args_for, scene  # noqa: F401  (its scene fixture)
from train.__main__ import main
from train.config import ConfigError, load_config
from train.nerf.evaluation import background_errors, background_metrics
from train.nerf.model.fit_box import box_resolution
from train.nerf.model.voxel_nerf import VoxelNeRF

BOX = ((-1.0, -1.0, -1.0), (1.0, 2.0, 1.0))
SUB = ((-0.5, 0.0, -0.2), (0.7, 1.5, 0.9))


def trained_grid() -> tuple[VoxelGrid, torch.optim.Adam]:
    torch.manual_seed(0)
    g = VoxelGrid((9, 10, 11), 3, BOX, init="normal", init_scale=1.0, dtype=torch.float64)
    opt = torch.optim.Adam(g.parameters())
    g(torch.rand(200, 3, dtype=torch.float64) * 2 - 1).square().sum().backward()
    opt.step()
    return g, opt


def test_crop_keeps_the_function_at_the_new_voxels_and_resamples_the_moments():
    g, opt = trained_grid()
    new = (7, 12, 8)
    positions = lattice(torch.tensor(SUB, dtype=torch.float64), new)  # [7, 12, 8, 3]
    before = g(positions)  # [7, 12, 8, 3]
    moments = {k: VoxelGrid(g.resolution, 3, BOX, dtype=torch.float64) for k in ("m", "v")}
    moments["m"].features.data = opt.state[g.features]["exp_avg"].clone()
    moments["v"].features.data = opt.state[g.features]["exp_avg_sq"].clone()
    param = g.features
    g.crop(SUB, new, opt)
    assert g.features is param and g.resolution == new
    assert g.bounds.tolist() == [list(SUB[0]), list(SUB[1])]
    torch.testing.assert_close(g.features.detach(), before.detach())
    state = opt.state[g.features]
    torch.testing.assert_close(state["exp_avg"], moments["m"](positions).detach())
    torch.testing.assert_close(state["exp_avg_sq"], moments["v"](positions).detach())
    assert (state["exp_avg_sq"] >= 0).all()
    g(positions).sum().backward()  # the optimiser goes on with the new shape
    opt.step()


def test_crop_refuses_a_box_outside_and_bad_arguments_before_any_change():
    g, opt = trained_grid()
    values = g.features.detach().clone()
    with pytest.raises(ValueError, match="bounds: expected a box inside the current one"):
        g.crop(((-1.5, 0, 0), (0.5, 1, 1)), 8)
    with pytest.raises(ValueError, match="bounds: expected min < max"):
        g.crop(((0.5, 0, 0), (0.5, 1, 1)), 8)
    with pytest.raises(ValueError, match="resolution: expected every size >= 2"):
        g.crop(SUB, (8, 1, 8))
    with pytest.raises(ValueError, match="optimizer: does not hold"):
        g.crop(SUB, 8, torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))]))
    assert torch.equal(g.features.detach(), values) and g.bounds.tolist()[0] == list(BOX[0])


def test_a_cropped_grid_loads_into_a_fresh_one_with_its_box():
    g, _ = trained_grid()
    g.crop(SUB, 6)
    fresh = VoxelGrid((9, 10, 11), 3, BOX, dtype=torch.float64)
    fresh.load_state_dict(g.state_dict())
    points = torch.rand(50, 3, dtype=torch.float64) * 0.5
    torch.testing.assert_close(fresh(points), g(points))


def test_occupancy_crop_is_conservative():
    torch.manual_seed(1)
    occ = OccupancyGrid((12, 14, 10), BOX)
    occ.flags = torch.rand(12, 14, 10) < 0.1
    points = lattice(torch.tensor(SUB), (20, 20, 20)).reshape(-1, 3)
    points = points + (torch.rand_like(points) - 0.5) * 0.05
    points = torch.maximum(torch.minimum(points, torch.tensor(SUB[1])), torch.tensor(SUB[0]))
    was = occ.query(points)
    occ.crop(SUB, (9, 17, 8))
    assert occ.resolution == (9, 17, 8) and occ.bounds.tolist()[1] == pytest.approx(SUB[1])
    assert occ.query(points)[was].all()  # nothing occupied before is skipped after
    with pytest.raises(ValueError, match="bounds: expected a box inside"):
        occ.crop(BOX, 8)


@pytest.mark.parametrize("backend", ["native", "grid_sample"])
def test_fit_box_moves_both_grids_and_a_reload_brings_the_box_back(backend):
    torch.manual_seed(2)
    bounds = ((-1.5,) * 3, (1.5,) * 3)
    model = VoxelNeRF(bounds, 12, 20, backend=backend, hidden=16)
    for p in (model.density.features, model.color.features):
        p.data.normal_()
    rays = torch.randn(64, 3)
    rays = rays / rays.norm(dim=-1, keepdim=True)
    origins = -2.5 * rays + 0.1 * torch.randn(64, 3)
    sub = ((-1.0, -0.9, -1.1), (1.1, 1.0, 0.8))
    model.fit_box(sub, (14, 13, 13))
    assert model.resolution == (14, 13, 13)
    assert torch.tensor(model.bounds_list).tolist() == torch.tensor(sub).tolist()
    assert model.occupancy_grid.bounds.tolist()[0] == pytest.approx(sub[0])
    assert model.interval() < 0.5 * 3 / 11 / (3 / 19)  # finer voxels, the same density scale
    out = model.render(origins, rays, torch.ones(3), exact=True)
    fresh = VoxelNeRF(bounds, model.resolution, 20, backend=backend, hidden=16)
    fresh.load_state_dict(model.state_dict())
    assert fresh.bounds_list == model.bounds_list
    again = fresh.render(origins, rays, torch.ones(3), exact=True)
    torch.testing.assert_close(again["rgb"], out["rgb"])


def test_box_resolution_keeps_the_cell_count_with_cubic_voxels():
    box = [[-1.0, -1.0, -0.5], [1.0, 1.0, 0.5]]  # 2 x 2 x 1
    x, y, z = box_resolution((81, 81, 81), box)
    assert x == y and abs((x - 1) / 2 - (z - 1) / 1) <= 1  # cubic voxels
    assert (x - 1) * (y - 1) * (z - 1) == pytest.approx(80**3, rel=0.05)


def test_background_metrics_over_transparent_pixels():
    error = torch.zeros(4, 5, 3, dtype=torch.float64)
    error[0, 0] = 0.3  # a floater's colour error on a background pixel
    error[3, 4] = 0.9  # an error on the object does not count
    acc = torch.zeros(4, 5)
    acc[0, 0] = 0.5
    background = torch.ones(4, 5, dtype=torch.bool)
    background[3] = False
    totals = background_errors(error, acc, background).tolist()
    metrics = background_metrics(*totals)
    assert metrics["background_mse"] == pytest.approx(0.3 / 15)
    assert metrics["background_opacity"] == pytest.approx(0.5 / 15)
    assert background_metrics(0.0, 0.0, 0.0) == {"background_mse": None, "background_opacity": None}


def test_fit_box_run_trains_on_the_object_and_resumes_exactly(scene, tmp_path):  # noqa: F811
    extra = ("nerf.fit_box=true", "train.steps=80", "output.checkpoint_every=0")
    whole, split = tmp_path / "whole", tmp_path / "split"
    assert main(["--out", str(whole), *args_for(scene, *extra)]) == 0
    summary = json.loads((whole / "summary.json").read_text())
    box = torch.load(whole / "checkpoint.pt", weights_only=True)["model"]["density.bounds"]
    assert (box[1] - box[0] < 3.0 - 1e-3).all(), box  # the scene's objects fill less of the box
    cells = math.prod(r - 1 for r in summary["resolution"])
    assert cells == pytest.approx(23**3, rel=0.1) and summary["psnr"] > 12.0
    assert 0 <= summary["background_opacity"] < 0.5 and summary["background_mse"] >= 0
    assert main(["--out", str(split), *args_for(scene, *extra), "--stop-at", "70"]) == 0
    assert main(["--out", str(split), "--resume"]) == 0
    a, b = (torch.load(d / "checkpoint.pt", weights_only=True) for d in (whole, split))
    for key, value in a["model"].items():
        assert torch.equal(value, b["model"][key]), key


def test_fit_box_needs_an_upsample_step():
    with pytest.raises(ConfigError, match="^nerf.fit_box: needs train.upsample_steps"):
        load_config(None, ["experiment=nerf", "nerf.fit_box=true"])
    with pytest.raises(ConfigError, match="^nerf.fit_box_margin: "):
        load_config(None, ["experiment=nerf", "nerf.fit_box_margin=-1"])
