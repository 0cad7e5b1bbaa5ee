"""The sdf experiment: point-cloud readers, config errors, a short run, exact resume,
missing packages, torchrun shares (the mesh and its distances: tests/train/mesh/test_mesh.py)."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.train.test_train import final_state, one_line_error, sets, without_timing
from train.__main__ import main
from train.config import ConfigError, load_config, to_dict
from train.errors import InputFileError
from train.rundir import RUN_FILES
from train.sdf.points import read_point_cloud, sample_surface

# A run of a couple of seconds on a CPU: a sphere from 4000 points, 12^3 -> 16^3.
SHORT = [
    "experiment=sdf",
    "device=cpu",
    "points.kind=sphere",
    "points.count=4000",
    "grid.resolution=12",
    "grid.init=points",
    "train.steps=60",
    "train.batch_size=1024",
    "train.eikonal_points=1024",
    "train.lr=0.01",
    "train.lr_final=0.001",
    "train.upsample_steps=[30]",
    "train.upsample_resolutions=[16]",
    "eval.every=20",
    "eval.points=2000",
    "output.checkpoint_every=20",
    "output.progress=false",
    "output.pictures=false",
]


# .ply files are read with plyfile (the `sdf` and `test` extras): skipped where it is absent.
HAS_PLYFILE = importlib.util.find_spec("plyfile") is not None
NEEDS_PLYFILE = pytest.mark.skipif(not HAS_PLYFILE, reason="plyfile is not installed")


def ply(*values):
    """A parameter whose case reads a .ply file."""
    return pytest.param(*values, marks=NEEDS_PLYFILE)


def sphere_rows(n: int = 50, seed: int = 0) -> np.ndarray:
    """[n, 6] rows x y z nx ny nz on a sphere of radius 0.5 (normals not unit: x2)."""
    gen = torch.Generator().manual_seed(seed)
    cloud = sample_surface("sphere", {"radius": 0.5, "center": [0, 0, 0]}, n, gen)
    return np.concatenate([cloud.points.numpy(), 2 * cloud.normals.numpy()], axis=1)


def write_ply(
    path: Path, rows: np.ndarray, *, ascii: bool, fields=("x", "y", "z", "nx", "ny", "nz")
):
    header = (
        f"ply\nformat {'ascii' if ascii else 'binary_little_endian'} 1.0\ncomment test\n"
        f"element vertex {len(rows)}\n"
        + "".join(f"property {'double' if f == 'x' else 'float'} {f}\n" for f in fields)
        + "element face 1\nproperty list uchar int vertex_indices\nend_header\n"
    )
    if ascii:
        body = "".join(" ".join(map(str, r[: len(fields)])) + "\n" for r in rows) + "3 0 1 2\n"
        path.write_text(header + body)
    else:
        dtype = [(f, "<f8" if f == "x" else "<f4") for f in fields]
        table = np.empty(len(rows), dtype=dtype)
        for i, f in enumerate(fields):
            table[f] = rows[:, i]
        face = np.array(
            [(3, 0, 1, 2)], dtype=[("n", "u1"), ("a", "<i4"), ("b", "<i4"), ("c", "<i4")]
        )
        path.write_bytes(header.encode() + table.tobytes() + face.tobytes())


# ---- readers -------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["npy", "structured", "xyz", ply("ply_ascii"), ply("ply_binary")])
def test_readers_read_points_and_normalise_normals(tmp_path, kind):
    rows = sphere_rows()
    if kind == "npy":
        path = tmp_path / "cloud.npy"
        np.save(path, rows)
    elif kind == "structured":
        path = tmp_path / "cloud.npy"
        table = np.empty(
            len(rows), dtype=[(f, "<f4") for f in ("nz", "x", "y", "z", "nx", "ny", "r")]
        )
        for i, f in enumerate(("x", "y", "z", "nx", "ny", "nz")):
            table[f] = rows[:, i]
        np.save(path, table)
    elif kind == "xyz":
        path = tmp_path / "cloud.xyz"
        lines = ["# x y z nx ny nz", ""] + [" ".join(map(repr, r.tolist())) for r in rows]
        path.write_text("\n".join(lines) + "\n")
    else:
        path = tmp_path / "cloud.ply"
        write_ply(path, rows, ascii=kind == "ply_ascii")
    cloud = read_point_cloud(path)
    assert len(cloud) == len(rows)
    torch.testing.assert_close(cloud.points, torch.tensor(rows[:, :3], dtype=torch.float32))
    expected = rows[:, 3:] / np.linalg.norm(rows[:, 3:], axis=1, keepdims=True)
    torch.testing.assert_close(cloud.normals, torch.tensor(expected, dtype=torch.float32))


def bad_file(tmp_path: Path, problem: str) -> Path:
    rows = sphere_rows(10)
    if problem == "no normals npy":
        np.save(tmp_path / "a.npy", rows[:, :3])
    elif problem == "columns npy":
        np.save(tmp_path / "a.npy", rows[:, :5])
    elif problem == "pickle npy":
        np.save(tmp_path / "a.npy", np.array([{"points": 1}], dtype=object), allow_pickle=True)
    elif problem == "nan npy":
        rows[3, 1] = np.nan
        np.save(tmp_path / "a.npy", rows)
    elif problem == "empty npy":
        np.save(tmp_path / "a.npy", np.zeros((0, 6)))
    elif problem == "zero normal npy":
        rows[4, 3:] = 0
        np.save(tmp_path / "a.npy", rows)
    elif problem == "no normals xyz":
        (tmp_path / "a.xyz").write_text("0 0 0 1 0 0\n0.1 0.2 0.3\n")
    elif problem == "text xyz":
        (tmp_path / "a.xyz").write_text("0 0 0 1 0 zero\n")
    elif problem == "empty xyz":
        (tmp_path / "a.xyz").write_text("# nothing\n")
    elif problem == "no normals ply":
        write_ply(tmp_path / "a.ply", rows, ascii=True, fields=("x", "y", "z"))
    elif problem == "truncated ply":
        write_ply(tmp_path / "a.ply", rows, ascii=False)
        data = (tmp_path / "a.ply").read_bytes()
        (tmp_path / "a.ply").write_bytes(data[:-60])
    elif problem == "not ply":
        (tmp_path / "a.ply").write_text("hello\n")
    return next(tmp_path.glob("a.*"))


@pytest.mark.parametrize(
    "problem, message",
    [
        ("no normals npy", "points without normals"),
        ("columns npy", "shape [10, 5]; expected [N, 6]"),
        ("pickle npy", "not a valid .npy array"),
        ("nan npy", "1 point has NaN or infinite values (the first: point 3)"),
        ("empty npy", "holds no points"),
        ("zero normal npy", "1 point has a zero-length normal (the first: point 4)"),
        ("no normals xyz", "line 2: points without normals"),
        ("text xyz", "line 1: not a number"),
        ("empty xyz", "holds no points"),
        ply("no normals ply", "lacks the properties nx, ny, nz (the points have no normals)"),
        ply("truncated ply", "not a valid .ply file"),
        ply("not ply", "not a valid .ply file"),
    ],
)
def test_bad_files_are_named_with_the_problem(tmp_path, problem, message):
    path = bad_file(tmp_path, problem)
    with pytest.raises(InputFileError) as error:
        read_point_cloud(path)
    assert str(error.value).startswith(f"points.path: {path}: "), str(error.value)
    assert message in str(error.value), str(error.value)


def test_shape_samples_lie_on_the_surface_with_exact_normals():
    from train.sdf.points import exact_sdf

    params = {
        "torus": {"major_radius": 0.55, "minor_radius": 0.2, "center": [0.1, 0, 0]},
        "sphere": {"radius": 0.6, "center": [0, 0.1, 0]},
        "box": {"half_size": [0.5, 0.35, 0.25], "center": [0, 0, -0.1]},
    }
    for kind, p in params.items():
        cloud = sample_surface(kind, p, 20000, torch.Generator().manual_seed(1))
        sdf = exact_sdf(kind, p)
        assert sdf(cloud.points).abs().max() < 1e-5, kind
        moved = cloud.points + 0.01 * cloud.normals  # outward: the distance grows by 0.01
        torch.testing.assert_close(sdf(moved), torch.full((20000,), 0.01), atol=2e-4, rtol=0)
        again = sample_surface(kind, p, 20000, torch.Generator().manual_seed(1))
        assert torch.equal(cloud.points, again.points)  # seeded
    # Uniform by area: the torus's outer half (cos v > 0) holds a share (1 + 2r / (pi R)) / 2
    # of its area (the area element is proportional to R + r cos v), so of the points.
    cloud = sample_surface("torus", params["torus"], 20000, torch.Generator().manual_seed(2))
    outer = (cloud.normals[:, :2] * (cloud.points[:, :2] - torch.tensor([0.1, 0]))).sum(1) > 0
    share = (1 + 2 * 0.2 / (math.pi * 0.55)) / 2
    assert abs(outer.float().mean().item() - share) < 0.015


# ---- config ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides, key",
    [
        (["points.kind=teapot"], "points.kind"),
        (["points.kind=file"], "points.path"),
        (["points.kind=file", "points.path=cloud.obj"], "points.path"),
        (["points.radius=0.3"], "points.radius"),  # torus does not read it
        (["points.minor_radius=0.6"], "points.minor_radius"),
        (["points.count=0"], "points.count"),
        (["train.normal_weight=-1"], "train.normal_weight"),
        (["train.eikonal_points=-5"], "train.eikonal_points"),
        (["train.surface_fraction=0.5"], "train.surface_fraction"),
        (["grid.interpolation=cubic"], "grid.interpolation"),
        (["eval.band=0"], "eval.band"),
        (["target.kind=torus"], "target"),  # the field's table
    ],
)
def test_config_errors_name_the_key(overrides, key):
    with pytest.raises(ConfigError) as error:
        load_config(None, ["experiment=sdf", *overrides])
    assert str(error.value).startswith(f"{key}: "), str(error.value)


def test_other_experiments_refuse_the_sdf_only_values():
    with pytest.raises(ConfigError, match=r"^points: not read by experiment = 'field'"):
        load_config(None, ["points.count=10"])
    with pytest.raises(ConfigError, match=r"^grid.init: 'points' is for the sdf experiment"):
        load_config(None, ["grid.init=points"])
    with pytest.raises(ConfigError, match=r"^grid.interpolation: the nerf experiment"):
        load_config(None, ["experiment=nerf", "grid.interpolation=smoothstep"])


def test_the_resolved_config_keeps_the_kinds_keys_and_an_absolute_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = load_config(None, ["experiment=sdf", "points.kind=file", "points.path=c.xyz"])
    data = to_dict(config)
    assert data["points"] == {
        "kind": "file",
        "path": str(tmp_path / "c.xyz"),
        "fit_box": False,
        "normals": "given",
        "normal_neighbours": 16,
        "denoise": 0,
    }
    assert "target" not in data and "nerf" not in data
    # switching the kind on the command line drops the file's keys of the old kind
    path = tmp_path / "sphere.toml"
    path.write_text("experiment = 'sdf'\n[points]\nkind = 'sphere'\nradius = 0.4\n")
    assert load_config(path, ["points.kind=torus"]).points.kind == "torus"


# ---- runs -------------------------------------------------------------------------------


def records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_short_run_writes_the_run_directory_and_improves(tmp_path):
    out = tmp_path / "run"
    assert main(["--out", str(out), *sets(*SHORT, "output.pictures=true")]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["reference"] == "exact" and summary["resolution"] == [16, 16, 16]
    assert summary["interpolation"] == "linear" and summary["point_count"] == 4000
    log = records(out)
    assert [r["step"] for r in log] == [20, 40, 60]
    first, last = log[0], log[-1]
    # Measured: |f - sdf| 5.4e-3 -> 2.9e-3, normals 4.75 -> 3.39 degrees, Chamfer 5.1e-3 -> 2.7e-3.
    assert last["sdf_error"] < 0.7 * first["sdf_error"], (first, last)
    assert last["normal_error"] < 0.8 * first["normal_error"], (first, last)
    assert last["normal_error"] < 5 and last["sdf_error_box"] < 0.005
    assert 0 < last["chamfer"] < 0.01
    assert summary["sdf_error"] == pytest.approx(last["sdf_error"])
    assert "train_loss" in last and last["train_loss"] < first["train_loss"]
    for picture in ("mesh.png", "curves.png"):
        assert (out / picture).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # mesh.ply: our writer, read back as an oriented point cloud; its vertices on the sphere
    assert (out / "mesh.ply").read_bytes().startswith(b"ply\nformat binary_little_endian 1.0\n")
    if HAS_PLYFILE:  # the reader's extra (installed with `test`)
        mesh = read_point_cloud(out / "mesh.ply")
        assert len(mesh) == summary["mesh_vertices"] > 100
        radius = mesh.points.norm(dim=1)
        assert (radius - 0.6).abs().mean() < 0.01
        assert ((mesh.normals * mesh.points / radius[:, None]).sum(1) > 0.95).all()  # outwards
    written = {p.name for p in out.iterdir()}
    assert written <= set(RUN_FILES), written - set(RUN_FILES)
    assert final_state(out)["kind"] == "sdf"


def test_a_point_cloud_file_is_measured_against_its_points(tmp_path):
    path = tmp_path / "sphere.npy"
    np.save(path, sphere_rows(4000))
    out = tmp_path / "run"
    args = [*SHORT, "points.kind=file", f"points.path={path}"]
    args = [a for a in args if not a.startswith("points.count")]
    assert main(["--out", str(out), *sets(*args)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["reference"] == "input points" and "sdf_error" not in summary
    assert summary["points"] == str(path)
    assert summary["surface_f"] < 0.01 and summary["normal_error"] < 6
    # Chamfer to the points: at least their spacing, at most a fraction of a voxel more
    assert 0.001 < summary["chamfer"] < 0.02


def test_points_outside_the_box_are_refused(tmp_path, capsys):
    rows = sphere_rows(100)
    rows[7, :3] = [1.5, 0.0, 0.0]
    path = tmp_path / "cloud.xyz"
    path.write_text("".join(" ".join(map(str, r)) + "\n" for r in rows))
    args = [*SHORT, "points.kind=file", f"points.path={path}"]
    args = [a for a in args if not a.startswith("points.count")]
    assert main(["--out", str(tmp_path / "run"), *sets(*args)]) == 2
    err = one_line_error(capsys)
    assert f"file error: points.path: {path}: 1 of the 100 points lies outside grid.bounds" in err
    assert "point 7 at (1.5, 0, 0)" in err and "set grid.bounds" in err
    assert not (tmp_path / "run").exists()
    args = [*SHORT, "points.center=[0.6, 0.0, 0.0]"]
    assert main(["--out", str(tmp_path / "run"), *sets(*args)]) == 2
    assert "config error: grid.bounds: " in one_line_error(capsys)


@pytest.mark.parametrize("stop_at", [25, 30])  # 30: exactly at the upsample
def test_resume_continues_exactly(tmp_path, stop_at):
    args = sets(*SHORT, "train.tv_weight=1e-4")
    whole, split = tmp_path / "whole", tmp_path / "split"
    assert main(["--out", str(whole), *args]) == 0
    assert main(["--out", str(split), *args, "--stop-at", str(stop_at)]) == 0
    assert final_state(split)["step"] == stop_at
    assert main(["--out", str(split), "--resume"]) == 0
    a, b = final_state(whole), final_state(split)
    assert torch.equal(a["model"]["features"], b["model"]["features"])
    for key in ("exp_avg", "exp_avg_sq"):
        assert torch.equal(a["optimizer"]["state"][0][key], b["optimizer"]["state"][0][key])
    assert without_timing(whole) == without_timing(split)


def test_a_checkpoint_of_another_kind_is_refused(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["--out", str(out), *sets(*SHORT), "--stop-at", "20"]) == 0
    state = final_state(out)
    state["kind"] = "field"
    torch.save(state, out / "checkpoint.pt")
    capsys.readouterr()
    assert main(["--out", str(out), "--resume"]) == 2
    assert "a checkpoint of a 'field' experiment, but this run is a 'sdf' one" in one_line_error(
        capsys
    )


def test_missing_scipy_is_found_before_training(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "scipy", None)  # `import scipy` fails
    out = tmp_path / "run"
    assert main(["--out", str(out), *sets(*SHORT)]) == 2
    err = one_line_error(capsys)
    assert err.startswith("grid-train: missing dependency: output.mesh: "), err
    assert "need scipy, which" in err and "pip install --no-build-isolation -e '.[sdf]'" in err
    assert "--set output.mesh=false" in err
    assert not out.exists()
    assert main(["--out", str(out), *sets(*SHORT, "output.mesh=false")]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert "chamfer" not in summary and not (out / "mesh.ply").exists()


def test_missing_plyfile_is_named_for_a_ply_input(tmp_path, capsys, monkeypatch):
    path = tmp_path / "cloud.ply"
    write_ply(path, sphere_rows(), ascii=True)
    monkeypatch.setitem(sys.modules, "plyfile", None)
    args = [*SHORT, "points.kind=file", f"points.path={path}"]
    args = [a for a in args if not a.startswith("points.count")]
    assert main(["--out", str(tmp_path / "run"), *sets(*args)]) == 2
    err = one_line_error(capsys)
    assert err.startswith("grid-train: missing dependency: points.path: .ply point clouds"), err


# ---- losses and torchrun shares -----------------------------------------------------------


def test_the_loss_terms_vanish_for_an_exact_plane():
    from grid import VoxelGrid
    from train.sdf.experiment import sdf_losses

    model = VoxelGrid(5, 1, init="zeros")
    lin = torch.linspace(-1, 1, 5)
    nodes = torch.stack(torch.meshgrid(lin, lin, lin, indexing="ij"), dim=-1)
    normal = torch.tensor([0.6, 0.0, 0.8])
    with torch.no_grad():
        model.features.copy_((nodes @ normal - 0.1)[..., None])  # linear: represented exactly
    surface = torch.rand(50, 3) * 1.6 - 0.8
    surface -= ((surface @ normal - 0.1)[:, None]) * normal  # onto the plane
    uniform = torch.rand(50, 3) * 2 - 1
    terms = sdf_losses(model, surface, normal.expand(50, 3), uniform)
    assert all(t.item() < 1e-10 for t in terms), terms
    terms = sdf_losses(model, surface, -normal.expand(50, 3), torch.zeros(0, 3))
    assert terms[1].item() == pytest.approx(4.0) and terms[2].item() == 0
    terms[1].backward()  # double backward reaches the grid
    assert model.features.grad.abs().sum() > 0
    # sdf.normal_robust = c^2: a turned normal (r^2 = 4) counts c^2 r^2 / (c^2 + r^2), and
    # pulls (c^2 / (c^2 + r^2))^2 as hard as with squares; a right one still counts 0
    plain = model.features.grad.clone()
    model.features.grad = None
    terms = sdf_losses(model, surface, -normal.expand(50, 3), torch.zeros(0, 3), robust=0.5)
    assert terms[1].item() == pytest.approx(0.5 * 4 / 4.5)
    terms[1].backward()
    assert torch.allclose(model.features.grad, plain * (0.5 / 4.5) ** 2, atol=1e-6)
    terms = sdf_losses(model, surface, normal.expand(50, 3), uniform, robust=0.5)
    assert terms[1].item() < 1e-10


def test_two_ranks_halves_average_to_the_whole_batch_gradient():
    from train.distributed import World
    from train.loop import make_experiment

    config = load_config(None, SHORT)
    grads, terms = [], []
    for world in (World(0, 1), World(0, 2), World(1, 2)):
        gen = torch.Generator().manual_seed(3)
        exp = make_experiment(config, torch.device("cpu"), gen, None, world)
        loss, _ = exp.loss()
        loss.backward()
        grads.append(exp.model.features.grad.clone())
        terms.append(gen.get_state())
    torch.testing.assert_close((grads[1] + grads[2]) / 2, grads[0], rtol=1e-4, atol=1e-9)
    assert not torch.equal(grads[1], grads[2])  # the ranks saw different rows
    assert torch.equal(terms[0], terms[1]) and torch.equal(terms[1], terms[2])


def test_points_per_voxel_counts_the_cells_the_points_occupy():
    from train.sdf.experiment import points_per_voxel

    bounds = [[-1.0, -1.0, -1.0], [1.0, 1.0, 1.0]]  # 4 nodes a side: 3 cells, 2/3 wide
    centres = torch.tensor([[-2 / 3, -2 / 3, -2 / 3], [0.0, 0.0, 0.0], [2 / 3, 0.0, 2 / 3]])
    assert points_per_voxel(centres, (4, 4, 4), bounds) == 1.0
    jitter = 0.3 * (torch.rand(4, 3, generator=torch.Generator().manual_seed(0)) - 0.5)
    four = (centres[:, None] + jitter).reshape(-1, 3)  # 4 points in each of the 3 cells
    assert points_per_voxel(four, (4, 4, 4), bounds) == 4.0
    # the box's far faces belong to the last cells, not to a cell past them
    assert (
        points_per_voxel(torch.tensor([[1.0, 1.0, 1.0], [0.9, 0.9, 0.9]]), (4, 4, 4), bounds) == 2.0
    )


def test_sparse_points_for_the_grid_are_noted(tmp_path, capsys):
    """4000 points on a sphere: several per voxel at 16^3, about one at 96^3."""
    out = tmp_path / "run"
    assert main(["--out", str(out), *sets(*SHORT)]) == 0
    assert "note:" not in capsys.readouterr().err
    dense = json.loads((out / "summary.json").read_text())["points_per_voxel"]
    fine = [a for a in SHORT if not a.startswith("train.upsample_resolutions")]
    assert (
        main(["--out", str(tmp_path / "fine"), *sets(*fine, "train.upsample_resolutions=[96]")])
        == 0
    )
    assert "per voxel they occupy at 96x96x96" in capsys.readouterr().err
    sparse = json.loads((tmp_path / "fine" / "summary.json").read_text())["points_per_voxel"]
    assert sparse < 2.0 < dense
