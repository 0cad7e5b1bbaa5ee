"""bench/compare/dvgo/dvgo_unbounded.py and bench/compare/dvgo/dvgo_v2_shims.py on the CPU: the
distortion loss against its O(N^2) definition, and whole runs against a stand-in for DirectVoxGO (a
script that reads the LLFF folder as DirectVoxGO's llffhold does, prints what it prints and writes
8-bit renders of the views it holds out), in one call, in two, and detached."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # bench/ is a package of the checkout

from bench.compare.dvgo import dvgo_unbounded, dvgo_v2_shims  # noqa: E402
from train.config import load_config  # noqa: E402
from train.metrics import psnr  # noqa: E402
from train.nerf.data.blender import load_blender  # noqa: E402


def random_rays(lengths: list[int], dtype: torch.dtype, seed: int = 0):
    """Flattened samples of rays with `lengths` samples each (0: a ray without samples),
    s sorted along each ray: (w [N], s [N], ray_id [N])."""
    gen = torch.Generator().manual_seed(seed)
    ray_id = torch.cat([torch.full((n,), r) for r, n in enumerate(lengths)])
    s = torch.cat([torch.rand(n, generator=gen, dtype=dtype).sort().values for n in lengths])
    w = torch.rand(len(s), generator=gen, dtype=dtype) / 4
    return w, s, ray_id


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_distortion_loss_is_its_definition(dtype):
    lengths = [5, 0, 1, 33, 2, 0, 120, 7]  # empty rays count (ray_id.max() + 1 rays)
    w, s, ray_id = random_rays(lengths, dtype)
    fast, slow = w.clone().requires_grad_(), w.clone().requires_grad_()
    loss = dvgo_v2_shims.flatten_eff_distloss(fast, s, 1 / 256, ray_id)
    truth = dvgo_v2_shims.brute_force_distloss(slow, s, 1 / 256, ray_id)
    loss.backward()
    truth.backward()
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    assert loss.dtype == dtype and loss.item() == pytest.approx(truth.item(), rel=tol)
    torch.testing.assert_close(fast.grad, slow.grad, rtol=tol, atol=tol)
    # the per-sample interval as a tensor, as the package accepts it
    same = dvgo_v2_shims.flatten_eff_distloss(w, s, torch.full_like(w, 1 / 256), ray_id)
    assert same.item() == pytest.approx(loss.item(), rel=tol)
    # one ray of two samples by hand: 2 w0 w1 |s0 - s1| + (w0^2 + w1^2) / 3 x interval
    by_hand = 2 * 0.5 * 0.25 * 0.5 + (0.25 + 0.0625) / 3 * 0.1
    two = dvgo_v2_shims.flatten_eff_distloss(
        torch.tensor([0.5, 0.25]), torch.tensor([0.2, 0.7]), 0.1, torch.tensor([0, 0])
    )
    assert two.item() == pytest.approx(by_hand)
    assert dvgo_v2_shims.flatten_eff_distloss(w[:0], s[:0], 0.1, ray_id[:0]).item() == 0


def test_distortion_loss_is_linear_time():
    """A batch as DirectVoxGO's (4096 rays, ~100 samples each) in well under a second."""
    w, s, ray_id = random_rays([100] * 4096, torch.float32, seed=1)
    w.requires_grad_()
    dvgo_v2_shims.flatten_eff_distloss(w, s, 1 / 1068, ray_id).backward()
    assert torch.isfinite(w.grad).all()


FAKE_DVGO = """\
import os, sys
import numpy as np
from PIL import Image
from torch_efficient_distloss import flatten_eff_distloss  # the stand-in, not the shim
import torch

args = sys.argv[1:]
for flag in ("--render_test", "--dump_images", "--eval_ssim"):
    assert flag in args, flag
ns = {}
exec(open(args[args.index("--config") + 1]).read(), ns)
assert ns["_base_"].endswith("nerf_unbounded_default.py") and os.path.isfile(ns["_base_"])
assert ns["data"]["factor"] == 1
llff = ns["data"]["datadir"]
names = sorted(os.listdir(os.path.join(llff, "images")))
assert len(np.load(os.path.join(llff, "poses_bounds.npy"))) == len(names)
out = os.path.join(ns["basedir"], ns["expname"], "render_test_fine_last")
os.makedirs(out, exist_ok=True)
for i, name in enumerate(names[::8]):  # llffhold = 8
    rgb = np.asarray(Image.open(os.path.join(llff, "images", name))) / 255.0
    rgb = np.clip(rgb * 0.9 + 0.05, 0, 1)  # a render that is not quite right
    Image.fromarray((rgb * 255 + 0.5).astype(np.uint8)).save(os.path.join(out, f"{i:03d}.png"))
w = torch.tensor([0.5, 0.25], requires_grad=True)
loss = flatten_eff_distloss(w, torch.tensor([0.2, 0.7]), 0.1, torch.tensor([0, 0]))
loss.backward()
print("distortion loss", float(loss), "from", flatten_eff_distloss.__module__)
print("train: skip coarse geometry searching")
print("train: fine detail reconstruction in 00:00:03")
print("All results are dumped into", out)
print("Testing psnr 24.5 (avg)")
print("Testing ssim 0.8 (avg)")
"""


def fake_dvgo(tmp_path: Path) -> Path:
    fake = tmp_path / "dvgo"
    (fake / "configs" / "nerf_unbounded").mkdir(parents=True)
    (fake / "configs" / "default.py").write_text("coarse_train = dict(N_iters=5000)\n")
    (fake / "configs" / "nerf_unbounded" / "nerf_unbounded_default.py").write_text("")
    (fake / "run_dvgo.py").write_text(FAKE_DVGO)
    return fake


def tiny_argv(tmp_path: Path, out: Path) -> list[str]:
    sets = [
        f"data.path={tmp_path / 'scene'}",
        "data.generate=true",
        "data.scene_size=16",
        "data.scene_train_views=14",
        "data.scene_test_views=2",
        "grid.resolution=12",
        "train.upsample_steps=[]",
        "train.upsample_resolutions=[]",
        "train.batch_size=256",
        "nerf.hidden=16",
        "output.pictures=false",
        "device=cpu",
    ]
    argv = ["--dvgo", str(fake_dvgo(tmp_path)), "--out", str(out)]
    argv += ["--work", str(tmp_path / "work"), "--ours-steps", "6"]
    return argv + [x for s in sets for x in ("--set", s)]


def expected_psnr(scene: Path) -> float:
    """The stand-in's renders (0.9 x + 0.05 of the held-out images) scored as here."""
    test = load_blender(scene, "test").images.double()
    renders = ((test * 0.9 + 0.05).clamp(0, 1) * 255 + 0.5).floor() / 255
    return float(
        np.mean(
            [psnr(float((r - t).square().mean()), 1.0) for r, t in zip(renders, test, strict=True)]
        )
    )


def test_whole_run_against_a_stand_in(tmp_path):
    out, work = tmp_path / "out", tmp_path / "work"
    argv = tiny_argv(tmp_path, out)
    assert dvgo_unbounded.main(argv) == 0
    result = json.loads((out / "dvgo_unbounded.json").read_text())
    dvgo, scored = result["dvgo"], result["dvgo_scored"]
    assert dvgo["train_seconds"] == 3 and dvgo["coarse_seconds"] == 0
    assert dvgo["psnr"] == 24.5 and dvgo["peak_allocated"] is None
    # its renders are of our test views, in order: the llffhold split picked exactly them
    assert scored["views"] == 2 and scored["psnr"] == pytest.approx(
        expected_psnr(tmp_path / "scene")
    )
    assert scored["background_mse"] is None  # opaque images: no background
    assert result["llff"]["train_views"] == 14 and result["llff"]["near_min"] > 0
    records = result["ours"]["records"]
    assert records[-1]["step"] == 6
    rows = result["rows"]
    assert [r["system"] for r in rows][:2] == ["DirectVoxGO v2"] * 2
    assert {r["system"] for r in rows[2:]} == {"ours"} and 4 <= len(rows) <= 5
    assert "at T/2" in rows[2]["moment"] or "T/2 not reached" in rows[2]["moment"]
    table = (out / "dvgo_unbounded.md").read_text()
    assert "| ours |" in table and "llffhold 8" in table
    assert ("Ours reached DirectVoxGO's 24.50 dB" in table) == any(
        r["psnr"] >= 24.5 for r in records
    )
    log = (out / "dvgo.log").read_text()
    assert "dvgo_v2_shims: torch_efficient_distloss.flatten_eff_distloss" in log
    assert "CUDA_PEAK none" in log
    assert "distortion loss 0.13541665" in log  # the stand-in's hand-made ray, through ours
    assert (out / "dvgo_test_000.png").is_file() and (out / "ours" / "metrics.jsonl").is_file()
    # in two calls: DirectVoxGO alone, then ours reading its output
    first, again = tmp_path / "first", tmp_path / "again"
    assert dvgo_unbounded.main([*argv, "--dvgo-only", "--out", str(first)]) == 0
    assert not (first / "ours").exists()
    assert json.loads((first / "dvgo_unbounded.json").read_text())["dvgo_scored"] == scored
    argv2 = [*argv, "--out", str(again), "--dvgo-log", str(work / "dvgo.log")]
    assert dvgo_unbounded.main(argv2) == 0
    assert json.loads((again / "dvgo_unbounded.json").read_text())["dvgo_scored"] == scored


def test_detached_run_and_wait(tmp_path, capsys):
    """--detach returns at once; --wait then finds it running (3) or done, and copies its
    files into its own --out once it has ended."""
    out = tmp_path / "out"
    argv = [*tiny_argv(tmp_path, out), "--dvgo-only", "--detach"]
    work = ["--work", str(tmp_path / "work")]
    assert dvgo_unbounded.main(argv) == 0
    assert "detached (pid" in capsys.readouterr().out
    assert dvgo_unbounded.main(argv) == 2  # one detached run at a time
    assert "still going" in capsys.readouterr().err
    early = dvgo_unbounded.main([*work, "--out", str(out), "--wait", "0"])
    assert early in (0, dvgo_unbounded.STILL_RUNNING)
    assert dvgo_unbounded.main([*work, "--out", str(out), "--wait", "300"]) == 0
    assert "the detached run exited 0" in capsys.readouterr().out
    result = json.loads((out / "dvgo_unbounded.json").read_text())
    assert result["dvgo"]["train_seconds"] == 3 and result["dvgo_scored"]["views"] == 2
    assert (out / "dvgo.log").is_file() and not (out / "ours").exists()
    assert "DirectVoxGO only" in (tmp_path / "work" / "detached.log").read_text()
    no_run = ["--work", str(tmp_path / "nothing"), "--out", str(out), "--wait", "1"]
    assert dvgo_unbounded.main(no_run) == 2


def test_scene_picks_a_half_of_the_unbounded_and_forward_scenes(tmp_path):
    halves = {name: wide.split for name, wide in dvgo_unbounded.SCENES.items()}
    assert [n for n, s in halves.items() if s == "tune"] == ["unbounded", "forward"]
    held = [dvgo_unbounded.SCENES[n] for n, s in halves.items() if s == "held_out"]
    assert sum(w.scene == "unbounded" for w in held) >= 2 and any(
        w.scene == "forward" for w in held
    )
    assert all(w.variant > 0 for w in held)  # other worlds, not today's
    args = dvgo_unbounded.parse_args(["--scene", "forward_v1"])
    sets = dvgo_unbounded.pick_scene(args)
    assert args.setting == "llff" and args.config.endswith("nerf_forward_gpu.toml")
    config = load_config(args.config, sets)
    assert (config.data.scene, config.data.scene_variant) == ("forward", 1)
    assert config.data.path.endswith("nerf_forward_v1_400")  # not the tuning scene's folder
    args = dvgo_unbounded.parse_args(["--scene", "unbounded", "--setting", "llff"])
    assert dvgo_unbounded.pick_scene(args) == [] and args.setting == "llff"
    args = dvgo_unbounded.parse_args([])
    assert dvgo_unbounded.pick_scene(args) == [] and args.setting == "unbounded"
    for argv, message in (
        (["--scene", "garden"], "--scene: unknown 'garden'; expected unbounded, "),
        (["--scene", "unbounded_v1", "--capture", str(tmp_path)], "--scene and --capture"),
    ):
        with pytest.raises(dvgo_unbounded.BenchError, match=message):
            dvgo_unbounded.pick_scene(dvgo_unbounded.parse_args(argv))


def test_llff_bounds_come_from_the_variants_world(tmp_path):
    from bench.compare.dvgo.dvgo_llff import write_llff
    from train.nerf.scenes import generate

    scene = generate.generate_scene(
        tmp_path / "s", size=16, n_train=7, n_val=1, n_test=1, scene="unbounded", variant=2
    )
    info = write_llff(scene, tmp_path / "llff")
    assert info["near_min"] > 0 and len(info["rows"]) == 8
