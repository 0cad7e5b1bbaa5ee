"""Unbounded scenes: the contraction, samples spaced for it, the generated 360-degree scene,
a contracted VoxelNeRF that trains, and the config errors."""

from __future__ import annotations

import json
import math

import pytest
import torch

import grid
from grid.contraction import CONTRACTED_BOUNDS, KINDS
from train.__main__ import main
from train.config import ConfigError, load_config
from train.nerf.model.voxel_nerf import VoxelNeRF
from train.nerf.scenes import forward, generate, outdoor

LO, HI = (-1.0, -2.0, -0.5), (3.0, 2.0, 1.5)  # a box of unequal sides, off the origin
CENTRE = torch.tensor([1.0, 0.0, 0.5], dtype=torch.float64)
HALF = torch.tensor([2.0, 2.0, 1.0], dtype=torch.float64)


def _norm(x, kind):
    return x.norm(dim=-1) if kind == "sphere" else x.abs().amax(-1)


@pytest.mark.parametrize("kind", KINDS)
def test_contract_is_the_identity_inside_and_bounded_outside(kind):
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(4000, 3, generator=gen, dtype=torch.float64) * 2 - 1  # normalised
    inside = x[_norm(x, kind) <= 1]
    world = inside * HALF + CENTRE
    assert torch.allclose(grid.contract(world, LO, HI, kind), inside, atol=1e-12)
    far = torch.randn(4000, 3, generator=gen, dtype=torch.float64) * 10.0 ** torch.rand(
        4000, 1, generator=gen, dtype=torch.float64
    ).mul(6)
    c = grid.contract(far * HALF + CENTRE, LO, HI, kind)
    assert bool((_norm(c, kind) < 2).all())
    lo, hi = torch.tensor(CONTRACTED_BOUNDS, dtype=torch.float64)
    assert bool(((c >= lo) & (c <= hi)).all())
    back = grid.uncontract(c, LO, HI, kind)
    assert torch.allclose(back, far * HALF + CENTRE, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("kind", KINDS)
def test_contract_is_continuous_and_monotone_along_rays(kind):
    gen = torch.Generator().manual_seed(1)
    origins = torch.randn(64, 3, generator=gen, dtype=torch.float64) * 3
    directions = torch.nn.functional.normalize(
        torch.randn(64, 3, generator=gen, dtype=torch.float64), dim=-1
    )
    t = torch.linspace(0, 200, 20001, dtype=torch.float64)
    x = origins[:, None] + directions[:, None] * t[:, None]  # [R, T, 3] normalised
    c = grid.contract(x * HALF + CENTRE, LO, HI, kind)
    # continuous: neighbouring points 0.01 apart stay close (within 0.01 for the sphere,
    # whose Jacobian's norm is at most 1; the max-norm's may exceed 1 a little)
    bound = 0.01 if kind == "sphere" else 0.015
    assert float((c[:, 1:] - c[:, :-1]).norm(dim=-1).max()) <= bound + 1e-9
    # monotone: past its closest approach, the contracted norm never decreases
    n, nc = _norm(x, kind), _norm(c, kind)
    past = torch.arange(len(t)) >= n.argmin(1, keepdim=True)
    step = nc[:, 1:] - nc[:, :-1]
    assert float(step[past[:, :-1]].min()) >= -1e-12
    # radially: the contracted norm is 2 - 1/|x| outside
    out = n > 1
    assert torch.allclose(nc[out], 2 - 1 / n[out], atol=1e-12)


def test_samples_are_sorted_cover_near_to_far_and_are_disparity_linear_outside():
    origins = torch.tensor([[0.0, 0.0, 0.0], [0.2, -0.3, 0.1], [5.0, 0.0, 0.5]])
    directions = torch.nn.functional.normalize(
        torch.tensor([[1.0, 0.0, 0.0], [0.3, 1.0, -0.2], [-1.0, 0.1, 0.0]]), dim=-1
    )
    lo, hi = [-1.0] * 3, [1.0] * 3
    s = grid.sample_contracted(
        origins, directions, lo, hi, step=0.05, far=100.0, outer_samples=16, near=0.1
    )
    assert s.offsets.tolist()[0] == 0 and s.offsets[-1] == s.t.shape[0]
    assert bool((s.ray_indices[1:] >= s.ray_indices[:-1]).all())
    for r in range(3):
        t = s.t[s.offsets[r] : s.offsets[r + 1]]
        assert bool((t[1:] > t[:-1]).all()), r
        assert 0.1 < float(t[0]) <= 0.1 + 0.05
        assert 15.0 < float(t[-1]) < 100.0  # the middle (in 1 / r) of the last segment
    # ray 0 starts at the centre: uniform to the unit sphere, then evenly spaced in 1 / t
    t = s.t[: s.offsets[1]].double()
    inner, outer = t[:18], t[18:]  # ceil((1 - 0.1) / 0.05) steps to the unit sphere
    assert torch.allclose(inner[1:] - inner[:-1], torch.full_like(inner[1:], 0.05), atol=1e-5)
    assert outer.shape[0] == 16
    disparity = 1 / outer
    assert torch.allclose(
        disparity[1:] - disparity[:-1], (disparity[1] - disparity[0]).expand(15), rtol=1e-3
    )
    # its intervals: the step in the inner region, even outside (the contracted shell / 16)
    intervals = s.intervals[: s.offsets[1]].double()
    assert torch.allclose(intervals[: inner.shape[0]], torch.tensor(0.05).double(), atol=1e-5)
    assert torch.allclose(intervals[-16:], torch.tensor((1 - 1 / 100) / 16).double(), rtol=1e-3)
    assert bool((s.points.norm(dim=-1) < 2).all())


def test_samples_skip_empty_contracted_space_and_refuse_bad_arguments():
    occupancy = grid.OccupancyGrid(8, CONTRACTED_BOUNDS)
    occupancy.flags[:, :, 4:] = False  # the upper half of the contracted cube is empty
    o, d = torch.zeros(2, 3), torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.0, -1.0]])
    full = grid.sample_contracted(o, d, [-1] * 3, [1] * 3, step=0.1, far=50.0, outer_samples=8)
    kept = grid.sample_contracted(
        o, d, [-1] * 3, [1] * 3, step=0.1, far=50.0, outer_samples=8, occupancy=occupancy
    )
    assert full.offsets.tolist() == [0, 18, 36]
    assert kept.offsets[2] - kept.offsets[1] == 18 and kept.offsets[1] < 3
    args = dict(step=0.1, far=50.0, outer_samples=8)
    for bad, message in [
        (dict(kind="ball"), "kind: expected one of 'sphere', 'cube'"),
        (dict(far=0.05, near=0.1), "far: expected a number > near"),
        (dict(outer_samples=0), "outer_samples: expected an int >= 1"),
        (dict(step=0.0), "step: expected a finite number > 0"),
    ]:
        with pytest.raises(ValueError, match=message):
            grid.sample_contracted(o, d, [-1] * 3, [1] * 3, **{**args, **bad})
    with pytest.raises(ValueError, match="lo, hi: expected finite corners with lo < hi"):
        grid.contract(o, [1, 1, 1], [1, 2, 2])


def test_generated_unbounded_scene_is_deterministic_and_opaque(tmp_path):
    poses = outdoor.camera_poses(6, 2, 3, seed=4)
    again = outdoor.camera_poses(6, 2, 3, seed=4)
    assert all(torch.equal(poses[k], again[k]) for k in poses)
    assert [poses[k].shape for k in ("train", "val", "test")] == [(6, 4, 4), (2, 4, 4), (3, 4, 4)]
    position = poses["train"][:, :3, 3]
    radius = position[:, :2].norm(dim=-1)
    assert bool(
        (radius >= outdoor.CAMERA_RADII[0]).all() & (radius <= outdoor.CAMERA_RADII[1]).all()
    )
    assert float(position[:, 2].max() - position[:, 2].min()) > 0.1  # heights vary
    azimuths = torch.atan2(position[:, 1], position[:, 0]).sort().values
    gaps = torch.cat([azimuths.diff(), (azimuths[:1] + 2 * math.pi) - azimuths[-1:]])
    assert float(gaps.max()) < math.pi  # a full orbit, no half left out
    a = generate.generate_scene(
        tmp_path / "a", size=16, n_train=3, n_val=1, n_test=2, scene="unbounded"
    )
    b = generate.generate_scene(
        tmp_path / "b", size=16, n_train=3, n_val=1, n_test=2, scene="unbounded"
    )
    meta = json.loads((a / "transforms_train.json").read_text())
    assert math.isclose(meta["camera_angle_x"], outdoor.CAMERA_ANGLE_X)
    assert len(meta["frames"]) == 3
    for name in ("train/r_0.png", "test/r_1.png"):
        assert (a / name).read_bytes() == (b / name).read_bytes()
    import numpy as np
    from PIL import Image

    image = torch.from_numpy(np.asarray(Image.open(a / "train/r_0.png")).copy())  # [16, 16, 4]
    assert bool((image[..., 3] == 255).all())  # no background: every pixel is content
    assert int(image[:4, ..., 2].float().mean()) > int(
        image[-4:, ..., 2].float().mean()
    )  # sky blue above


def test_contracted_model_renders_with_both_renderers_alike():
    torch.manual_seed(0)
    bounds = [[-1.0, -1.0, -1.0], [1.0, 1.0, 1.0]]
    models = [
        VoxelNeRF(bounds, 12, 12, hidden=16, contraction="sphere", far=50.0, renderer=r)
        for r in ("fused", "torch")
    ]
    models[1].load_state_dict(models[0].state_dict())
    for m in models:
        m.density.features.data.normal_(generator=torch.Generator().manual_seed(1))
    assert models[0].bounds_list == [list(b) for b in CONTRACTED_BOUNDS]
    o = torch.tensor([[0.0, 0.0, 0.2], [3.0, 0.5, 0.5]])
    d = torch.nn.functional.normalize(torch.tensor([[1.0, 0.2, 0.1], [-1.0, 0.0, -0.1]]), dim=-1)
    out = [m.render(o, d, torch.ones(3)) for m in models]
    for key in ("rgb", "depth", "acc"):
        assert torch.allclose(out[0][key], out[1][key], atol=1e-5), key
    assert out[0]["samples"] == out[1]["samples"] > 0
    from train.nerf.model.render import TooManySamples

    for m in models:  # a whole image's chunks are kept within a sample budget this way
        limit = out[0]["samples"]
        assert m.render(o, d, torch.ones(3), max_samples=limit)["samples"] == limit
        with pytest.raises(TooManySamples, match=f"{limit} samples marched, at most {limit - 1}"):
            m.render(o, d, torch.ones(3), max_samples=limit - 1)
    with pytest.raises(ValueError, match="contraction: expected one of none, sphere, cube"):
        VoxelNeRF(bounds, 8, 8, contraction="ball")
    with pytest.raises(ValueError, match="fit_box: not with a contraction"):
        models[0].fit_box(bounds, 8)


TINY = [
    "device=cpu",
    "data.scene=unbounded",
    "data.scene_size=16",
    "data.scene_train_views=12",
    "data.scene_test_views=2",
    "nerf.contraction=sphere",
    "nerf.far=200",
    "nerf.hidden=16",
    "grid.resolution=16",
    "grid.bounds=[[-1.6, -1.6, -0.6], [1.6, 1.6, 1.6]]",
    "train.steps=180",
    "train.batch_size=512",
    "train.upsample_steps=[]",
    "train.upsample_resolutions=[]",
    "eval.every=60",
    "output.pictures=false",
    "output.checkpoint_every=0",
]


def _sets(*items: str) -> list[str]:
    return [arg for item in items for arg in ("--set", item)]


def test_tiny_contracted_run_improves(tmp_path):
    out = tmp_path / "run"
    args = ["--config", "configs/nerf_unbounded.toml", "--out", str(out)]
    assert (
        main([*args, *_sets(*TINY, f"data.path={tmp_path / 'scene'}", "data.generate=true")]) == 0
    )
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    psnrs = [r["psnr"] for r in records if "psnr" in r]
    assert len(psnrs) >= 2 and psnrs[-1] > psnrs[0] + 0.5, psnrs


@pytest.mark.parametrize(
    "sets, message",
    [
        (["nerf.contraction=ball"], "nerf.contraction: expected one of none, sphere, cube"),
        (["nerf.far=2"], "nerf.far: expected a distance well beyond the inner region"),
        (["nerf.far=-1"], "nerf.far"),
        (["nerf.outer_samples=-1"], "nerf.outer_samples: expected an integer >= 0"),
        (["nerf.fit_box=true"], "nerf.fit_box: not with nerf.contraction = 'sphere'"),
        (["nerf.jitter=true"], "nerf.jitter: not with nerf.contraction = 'sphere'"),
        (["train.cuda_graph=on"], "nerf.contraction = 'sphere' samples rays with PyTorch ops"),
    ],
)
def test_config_errors_name_the_key(sets, message):
    with pytest.raises(ConfigError, match=message):
        load_config("configs/nerf_unbounded.toml", sets)


def test_generated_forward_scene_faces_one_way_from_a_small_patch(tmp_path):
    poses = forward.camera_poses(9, 2, 4, seed=3)
    again = forward.camera_poses(9, 2, 4, seed=3)
    assert all(torch.equal(poses[k], again[k]) for k in poses)
    assert [poses[k].shape for k in ("train", "val", "test")] == [(9, 4, 4), (2, 4, 4), (4, 4, 4)]
    assert not torch.equal(poses["train"], forward.camera_poses(9, 2, 4, seed=4)["train"])
    want = torch.tensor(forward.FORWARD, dtype=torch.float64)
    centre = torch.tensor(forward.PATCH_CENTRE, dtype=torch.float64)
    train = poses["train"][:, :3, 3]
    for c2w in poses.values():
        looking = -c2w[:, :3, 2]  # OpenGL: the camera looks along its -z
        angle = torch.rad2deg(torch.acos((looking @ want).clamp(-1, 1)))
        assert float(angle.max()) <= forward.TURN + 1e-9  # all facing forward
        offset = c2w[:, :3, 3] - centre
        assert float((offset @ want).abs().max()) < 1e-9  # on the camera plane
        assert float(offset.norm(dim=-1).max()) <= 0.5 * math.hypot(*forward.PATCH) + 1e-9
    spread = (train.amax(0) - train.amin(0)).norm()
    assert 0.5 < float(spread) < 1.5  # a small baseline, but not a single point
    for split in ("val", "test"):  # held-out views lie within the training cameras' hull
        lo, hi = train.amin(0) - 1e-9, train.amax(0) + 1e-9
        assert bool(((poses[split][:, :3, 3] >= lo) & (poses[split][:, :3, 3] <= hi)).all())
    a = generate.generate_scene(
        tmp_path / "a", size=8, n_train=2, n_val=1, n_test=1, scene="forward"
    )
    b = generate.generate_scene(
        tmp_path / "b", size=8, n_train=2, n_val=1, n_test=1, scene="forward"
    )
    assert (a / "test/r_0.png").read_bytes() == (b / "test/r_0.png").read_bytes()
    assert json.loads((a / "scene.json").read_text())["scene"] == "forward"


def test_forward_config_loads():
    config = load_config("configs/nerf_forward.toml")
    assert config.data.scene == "forward" and config.nerf.contraction in KINDS
    assert (
        load_config("configs/nerf_forward.toml", ["nerf.contraction=none"]).nerf.contraction
        == "none"
    )


def test_variant_zero_is_the_scene_as_shipped():
    for scene, module in (("unbounded", outdoor), ("forward", forward)):
        assert generate.scene_module(scene, variant=0) is module
        meta = generate.scene_metadata(16, 3, 1, 2, 0, scene, variant=0)
        assert "variant" not in meta  # scene.json unchanged: nothing is regenerated
        assert meta == generate.scene_metadata(16, 3, 1, 2, 0, scene)
    assert outdoor.world(0) is outdoor.DEFAULT
    assert outdoor.DEFAULT.buildings == outdoor.BUILDINGS and outdoor.DEFAULT.sun == outdoor.SUN


def test_variants_are_other_worlds_under_the_same_cameras(tmp_path):
    one, two = outdoor.world(1), outdoor.world(2)
    assert one == outdoor.world(1) and one != two and one.sun != outdoor.SUN
    for w in (one, two):
        assert len(w.buildings) == len(outdoor.BUILDINGS)
        distance = [math.hypot(*b[0]) for b in w.buildings]
        assert 9.0 <= min(distance) and max(distance) <= 70.0 and max(distance) > 40.0
        assert all(2.0 <= b[2] <= 30.0 for b in w.buildings)
        elevation = math.degrees(math.asin(w.sun[2] / math.hypot(*w.sun)))
        assert 25.0 <= elevation <= 55.0
    scene = generate.scene_module("unbounded", variant=1)
    assert scene.METADATA["variant"] == 1
    shipped = outdoor.camera_poses(4, 1, 2, seed=3)
    assert all(torch.equal(shipped[k], scene.camera_poses(4, 1, 2, seed=3)[k]) for k in shipped)
    a = generate.generate_scene(
        tmp_path / "a", size=16, n_train=2, n_val=1, n_test=1, scene="unbounded"
    )
    b = generate.generate_scene(
        tmp_path / "b", size=16, n_train=2, n_val=1, n_test=1, scene="unbounded", variant=1
    )
    assert json.loads((b / "scene.json").read_text())["variant"] == 1
    assert (a / "train/r_0.png").read_bytes() != (b / "train/r_0.png").read_bytes()
    again = generate.ensure_scene(
        b, size=16, n_train=2, n_val=1, n_test=1, scene="unbounded", variant=1
    )
    assert again == b  # found in place, current


def test_a_forward_variant_turns_the_rig_about_the_vertical():
    scene = generate.scene_module("forward", variant=1)
    turn = forward.rig_turn(1)
    assert scene.turn == turn and abs(turn) > 1e-3 and forward.rig_turn(0) == 0.0
    shipped, turned = forward.camera_poses(9, 2, 4, seed=3), scene.camera_poses(9, 2, 4, seed=3)
    for k in shipped:
        a, b = shipped[k], turned[k]
        assert torch.allclose(a[:, 2, :], b[:, 2, :])  # heights and tilts kept
        assert torch.allclose(a[:, :3, 3][:, :2].norm(dim=-1), b[:, :3, 3][:, :2].norm(dim=-1))
        heading = lambda c: torch.atan2(-c[:, 1, 2], -c[:, 0, 2])  # noqa: E731
        delta = torch.remainder(heading(b) - heading(a) + math.pi, 2 * math.pi) - math.pi
        assert torch.allclose(delta, torch.full_like(delta, math.remainder(turn, 2 * math.pi)))
    sun = outdoor.world(1).sun
    facing = math.atan2(-turned["train"][0, 1, 2], -turned["train"][0, 0, 2])
    away = math.remainder(facing - math.atan2(sun[1], sun[0]) - math.pi, 2 * math.pi)
    assert abs(away) <= math.radians(60.0) + math.radians(forward.TURN) + 1e-6


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (["data.scene_variant=-1"], "data.scene_variant: expected an integer >= 0, got -1"),
        (
            ["data.scene=realistic", "data.scene_variant=1"],
            "data.scene_variant: only the unbounded and forward scenes have variants",
        ),
    ],
)
def test_variant_config_errors_name_the_key(sets, message):
    with pytest.raises(ConfigError, match=message):
        load_config("configs/nerf_unbounded.toml", sets)
    with pytest.raises(ValueError, match="only the unbounded and forward scenes"):
        generate.scene_module("procedural", variant=2)
