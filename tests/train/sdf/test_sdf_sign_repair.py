"""Pockets of the wrong sign (train/sdf/sign_repair.py): a web filled in between two spheres
and a bubble left inside one are turned where they lie away from the points (on the CPU
and on CUDA), right voxels are left as they are, an exact field is left alone, and a fit
reports what it turned without drawing from the batches' random stream."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from tests.train.test_train import sets
from train.__main__ import main
from train.sdf.sign_repair import BAND_VOXELS, FAR_VOXELS, repair_signs
from train.sdf.winding import point_areas

RES = 64
BOUNDS = torch.tensor([[-1.0] * 3, [1.0] * 3])
H = 2 / (RES - 1)
CENTRES = torch.tensor([[-0.35, 0.0, 0.0], [0.35, 0.0, 0.0]])  # two spheres 0.1 apart
RADIUS = 0.3


def two_spheres(n: int = 8000, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """n points on each of the two spheres, and their outward normals: [2n, 3] each."""
    normals = torch.randn(2 * n, 3, generator=torch.Generator().manual_seed(seed))
    normals = normals / normals.norm(dim=1, keepdim=True)
    return CENTRES.repeat_interleave(n, 0) + RADIUS * normals, normals


def nodes() -> torch.Tensor:
    axis = torch.linspace(-1, 1, RES)
    return torch.stack(torch.meshgrid(axis, axis, axis, indexing="ij"), dim=-1)  # [R, R, R, 3]


def exact() -> torch.Tensor:
    """[R, R, R] the signed distance of the two spheres."""
    x = nodes()
    return torch.stack([(x - c).norm(dim=-1) - RADIUS for c in CENTRES]).min(dim=0).values


def repair(values: torch.Tensor) -> int:
    points, normals = (x.to(values.device) for x in two_spheres())
    subset = torch.randperm(len(points), generator=torch.Generator().manual_seed(0))[:4096]
    bounds, subset = BOUNDS.to(values.device), subset.to(values.device)
    return repair_signs(values, bounds, points, normals, point_areas(points), subset)


DEVICES = [
    "cpu",
    pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA")),
]


def test_an_exact_field_is_left_alone():
    values = exact()
    assert repair(values) == 0
    assert torch.equal(values, exact())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("pocket", ["web", "bubble"])
def test_a_pocket_of_the_wrong_sign_is_turned(pocket, device):
    true = exact()
    x = nodes()
    if pocket == "web":  # the gap between the spheres filled, as a coarse grid fills it
        box = (x[..., 0].abs() < 0.12) & (x[..., 1:].abs() < 0.25).all(dim=-1)
        region = box & (true > 0)
    else:  # a bubble of outside within one sphere, 0.15 below its surface
        region = (x - CENTRES[0]).norm(dim=-1) < 0.15
    values = torch.where(region, -true, true).to(device)
    assert repair(values) > 0
    values = values.cpu()
    wrong = (values < 0) != (true < 0)
    far = (true.abs() > FAR_VOXELS * H + 0.01) & (true.abs() < BAND_VOXELS * H)
    # every judged voxel of the pocket is right again; the ones by the points are the fit's
    assert (region & far).sum() > 100
    assert not (wrong & far).any(), int((wrong & far).sum())
    # what was right stays right, and keeps its value (the distance to the nearest point)
    assert torch.equal(values[~region], true[~region])
    turned = region & ~wrong
    assert (values[turned] - true[turned]).abs().max() < 0.01


def test_a_fit_reports_what_it_turned_and_draws_apart(tmp_path):
    points, normals = two_spheres(3000)
    path = tmp_path / "spheres.npy"
    np.save(path, torch.cat([points, normals], dim=1).numpy())
    common = [
        "experiment=sdf",
        "device=cpu",
        "points.kind=file",
        f"points.path={path}",
        "grid.init=points",
        "grid.resolution=16",
        "train.steps=60",
        "train.batch_size=2048",
        "train.eikonal_points=2048",
        "train.upsample_steps=[20, 40]",
        "train.upsample_resolutions=[32, 64]",
        "eval.every=60",
        "output.pictures=false",
    ]
    summaries = {}
    for repair_on in (True, False):
        out = tmp_path / f"run_{repair_on}"
        assert (
            main(["--out", str(out), *sets(*common, f"sdf.repair_signs={str(repair_on).lower()}")])
            == 0
        )
        summaries[repair_on] = json.loads((out / "summary.json").read_text())
    turned = summaries[True]["sign_repairs"]
    assert summaries[False]["sign_repairs"] == {}
    # the spheres' gap is open from the start: nothing to turn, and the check itself draws
    # nothing from the batches' random stream (the runs are the same)
    assert turned == {"32x32x32": 0, "64x64x64": 0}
    assert summaries[True]["chamfer"] == summaries[False]["chamfer"]
