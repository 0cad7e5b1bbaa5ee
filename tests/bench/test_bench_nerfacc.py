"""bench/compare/nerfacc/bench_nerfacc.py on the CPU: the field's two backends agree (outputs and
gradients on the same parameters), the CPU stand-in composites as nerfacc does, and a whole tiny run
writes its table. nerfacc itself is optional: the tests that need it skip without it."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # bench/ is a package of the checkout

from bench.compare.nerfacc import bench_nerfacc, nerfacc_run  # noqa: E402
from bench.compare.nerfacc.nerfacc_field import copy_field, grid_values, make_field  # noqa: E402

BOUNDS = [[-1.5, -1.0, -0.5], [1.5, 1.0, 1.5]]  # not a cube: the axes cannot be swapped


def fields(resolution: int = 9, **options):
    """Both backends with the same random parameters (the grids not zero)."""
    ours = make_field("ours", BOUNDS, resolution, 0, "cpu", **options)
    torch.manual_seed(1)
    with torch.no_grad():
        for grid in (ours.density, ours.color):
            grid_values(grid).normal_()
    other = make_field("grid_sample", BOUNDS, resolution, 0, "cpu", **options)
    copy_field(ours, other)
    return ours, other


def test_make_field_same_seed_same_mlp():
    a = make_field("ours", BOUNDS, 5, 3, "cpu")
    b = make_field("grid_sample", BOUNDS, 5, 3, "cpu")
    for pa, pb in zip(a.mlp.parameters(), b.mlp.parameters(), strict=True):
        assert torch.equal(pa, pb)
    assert b.color.volume.shape == (1, 12, 5, 5, 5) and a.color.features.shape == (5, 5, 5, 12)


def test_backends_agree_outputs_and_gradients():
    ours, other = fields()
    g = torch.Generator().manual_seed(2)
    lo, hi = torch.tensor(BOUNDS)
    x = lo + (hi - lo) * (torch.rand(4000, 3, generator=g) * 1.1 - 0.05)  # some outside
    d = torch.nn.functional.normalize(torch.randn(4000, 3, generator=g), dim=-1)
    outputs = []
    for model in (ours, other):
        rgb, sigma = model(x, d)
        (rgb.square().sum() + (sigma * torch.linspace(0, 1, 4000)[:, None]).sum()).backward()
        outputs.append((rgb, sigma))
    torch.testing.assert_close(outputs[0][0], outputs[1][0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(outputs[0][1], outputs[1][1], rtol=1e-5, atol=1e-5)
    for name in ("density", "color"):
        a = grid_values(getattr(ours, name), grad=True)
        b = grid_values(getattr(other, name), grad=True)  # [1, C, X, Y, Z], permuted
        assert a.abs().max() > 0
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4 * b.abs().max().item())
    for pa, pb in zip(ours.mlp.parameters(), other.mlp.parameters(), strict=True):
        torch.testing.assert_close(pa.grad, pb.grad, rtol=1e-4, atol=1e-4 * pb.grad.abs().max())


def test_untrained_alpha_is_alpha_init_per_voxel():
    model = make_field("ours", BOUNDS, 9, 0, "cpu", alpha_init=0.01)
    sigma = model.query_density(torch.zeros(1, 3))
    assert (1 - torch.exp(-sigma * model.voxel)).item() == pytest.approx(0.01, rel=1e-5)


def test_stand_in_transmittance_is_a_per_ray_product():
    pytest.importorskip("nerfacc")
    from bench.compare.nerfacc.nerfacc_cpu import transmittance

    ray = torch.tensor([0, 0, 0, 2, 2, 3])
    t0 = torch.tensor([0.0, 0.1, 0.3, 0.0, 0.2, 0.5])
    t1 = t0 + torch.tensor([0.1, 0.2, 0.1, 0.2, 0.1, 0.3])
    sigma = torch.tensor([1.0, 2.0, 3.0, 0.5, 4.0, 1.0])
    trans, alpha = transmittance(t0, t1, sigma, ray, 5)
    expected = []
    for r in ray.unique():
        a = 1 - torch.exp(-(sigma * (t1 - t0))[ray == r])
        expected.append(torch.cat([torch.ones(1), torch.cumprod(1 - a, 0)[:-1]]))
    torch.testing.assert_close(trans, torch.cat(expected))
    torch.testing.assert_close(alpha, 1 - torch.exp(-sigma * (t1 - t0)))


def test_stand_in_samples_lie_in_the_box_and_in_occupied_cells():
    pytest.importorskip("nerfacc")
    from bench.compare.nerfacc.nerfacc_cpu import CpuStandInEstimator

    est = CpuStandInEstimator(roi_aabb=[-1, -1, -1, 1, 1, 1], resolution=4)
    est.binaries[0, :2] = True  # the x < 0 half
    o = torch.tensor([[-3.0, 0.1, 0.2], [0.1, 3.0, 0.3], [5.0, 5.0, 5.0]])
    d = torch.nn.functional.normalize(torch.tensor([[1.0, 0, 0], [0, -1.0, 0], [1.0, 0, 0]]))
    ray, t0, t1 = est.sampling(o, d, render_step_size=0.1)
    x = o[ray] + d[ray] * ((t0 + t1) / 2)[:, None]
    assert set(ray.tolist()) == {0}  # ray 1 crosses x > 0 only, ray 2 misses the box
    assert (x[:, 0] < 0).all() and (x.abs() <= 1).all() and len(ray) == 10


def write_scene(path: Path, size: int = 8) -> Path:
    """A minimal Blender-layout scene: 2 training views, 1 test view, flat colours."""
    from PIL import Image

    poses = [np.eye(4), np.array([[0, 0, 1, 0], [0, 1, 0, 0], [-1, 0, 0, 0], [0, 0, 0, 1.0]])]
    poses[0][2, 3], poses[1][0, 3] = 4.0, 4.0  # at z = 4 and x = 4, looking at the origin
    for split, views in (("train", poses), ("test", poses[:1])):
        (path / split).mkdir(parents=True)
        frames = []
        for i, pose in enumerate(views):
            rgba = np.full((size, size, 4), 255, np.uint8)
            rgba[size // 4 : -size // 4, size // 4 : -size // 4, :3] = (200, 60, 30)
            Image.fromarray(rgba).save(path / split / f"r_{i}.png")
            frames.append({"file_path": f"./{split}/r_{i}", "transform_matrix": pose.tolist()})
        meta = {"camera_angle_x": 0.69, "frames": frames}
        (path / f"transforms_{split}.json").write_text(json.dumps(meta))
    return path


def test_tiny_run_writes_the_table(tmp_path, capsys):
    pytest.importorskip("nerfacc")
    scene = write_scene(tmp_path / "scene")
    argv = ["--device", "cpu", "--data", str(scene), "--out", str(tmp_path / "out")]
    argv += ["--steps", "6", "--warmup", "1", "--batch", "64", "--resolution", "8"]
    argv += ["--occ-resolution", "8", "--hidden", "16", "--progress", "3"]
    assert bench_nerfacc.main(argv) == 0
    result = json.loads((tmp_path / "out" / "nerfacc.json").read_text())
    assert result["meta"]["sampler"].startswith("CPU stand-in")
    runs = result["runs"]
    assert list(runs) == ["ours", "grid_sample"]
    for run in runs.values():
        assert run["steps"] == 6 and run["timed_steps"] == 5 and run["skipped_steps"] == 0
        assert math.isfinite(run["psnr"]) and run["samples_per_ray"] > 0
    assert runs["ours"]["psnr"] == pytest.approx(runs["grid_sample"]["psnr"], abs=1e-3)
    assert set(result["summary"]) == {"ratio", "psnr_delta", "target_met"}
    table = (tmp_path / "out" / "nerfacc.md").read_text()
    assert "CPU stand-in" in table and "| ours |" in table and "| grid_sample |" in table


def test_refusals(monkeypatch, capsys, tmp_path):
    if not torch.cuda.is_available():
        assert bench_nerfacc.main(["--device", "cuda", "--out", str(tmp_path)]) == 2
        assert "no CUDA device" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "nerfacc", None)  # as if not installed
    with pytest.raises(bench_nerfacc.BenchError, match="nerfacc is not installed"):
        bench_nerfacc.nerfacc_kit(torch.device("cpu"))
    with pytest.raises(SystemExit):
        bench_nerfacc.parse_args(["--backends", "ours,jax"])


# ---- the instant-ngp anchor (bench/compare/nerfacc/ngp_field.py) ----------------------


def test_spherical_harmonics_are_orthonormal_on_the_sphere():
    """The 16 real SH values: the mean of Y_i Y_j over uniform directions is delta_ij / 4 pi."""
    from bench.compare.nerfacc.ngp_field import spherical_harmonics

    gen = torch.Generator().manual_seed(0)
    d = torch.nn.functional.normalize(torch.randn(400_000, 3, generator=gen, dtype=torch.float64))
    y = spherical_harmonics(d)
    gram = y.T @ y / len(d) * 4 * math.pi
    torch.testing.assert_close(gram, torch.eye(16, dtype=torch.float64), atol=0.02, rtol=0)


def test_ngp_schedule_warms_up_then_steps_down():
    from bench.compare.nerfacc.nerfacc_run import ngp_rate as rate

    assert rate(0, 1000) == pytest.approx(0.01) and rate(100, 1000) == pytest.approx(1.0)
    assert rate(499, 1000) == 1.0 and rate(500, 1000) == pytest.approx(0.33)
    assert rate(750, 1000) == pytest.approx(0.33**2) and rate(999, 1000) == pytest.approx(0.33**3)


def test_ngp_field_density_zero_outside_and_gradients_reach_the_table():
    from bench.compare.nerfacc.ngp_field import NgpRadianceField, ReferenceHashEncoding

    torch.manual_seed(0)
    field = NgpRadianceField([*BOUNDS[0], *BOUNDS[1]], ReferenceHashEncoding(64, 10))
    x = torch.tensor([[0.0, 0.0, 0.5], [1.4, -0.9, 1.4], [2.0, 0.0, 0.5], [0.0, 0.0, -0.6]])
    d = torch.nn.functional.normalize(torch.randn(4, 3))
    rgb, density = field(x, d)
    assert rgb.shape == (4, 3) and density.shape == (4, 1)
    assert ((rgb > 0) & (rgb < 1)).all()
    assert (density[:2] > 0).all() and (density[2:] == 0).all()  # the last two outside
    density.sum().backward()
    grad = field.encoder.embeddings.grad
    assert grad is not None and grad.abs().sum() > 0


def test_ngp_on_cuda_needs_torch_ngps_folder():
    args = bench_nerfacc.parse_args(["--backends", "ngp"])
    with pytest.raises(nerfacc_run.BenchError, match="--ngp DIR"):
        nerfacc_run.ngp_encoder(args, torch.device("cuda"))


def test_tiny_ngp_run_adapts_its_batch(tmp_path):
    pytest.importorskip("nerfacc")
    scene = write_scene(tmp_path / "scene")
    argv = ["--device", "cpu", "--data", str(scene), "--out", str(tmp_path / "out")]
    argv += ["--backends", "ngp", "--steps", "4", "--warmup", "1", "--occ-resolution", "8"]
    argv += ["--ngp-max-resolution", "32", "--ngp-log2-table", "10", "--ngp-samples", "4096"]
    argv += ["--ngp-step", "0.05", "--progress", "0"]
    assert bench_nerfacc.main(argv) == 0
    result = json.loads((tmp_path / "out" / "nerfacc.json").read_text())
    run = result["runs"]["ngp"]
    assert math.isfinite(run["psnr"]) and run["skipped_steps"] == 0
    assert run["rays_per_step"] != 1024  # adapted after the first step
    assert "stand-in" in run["field"]
    table = (tmp_path / "out" / "nerfacc.md").read_text()
    assert "| ngp |" in table and "an anchor, not our grid" in table
