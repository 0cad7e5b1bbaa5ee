"""The sdf experiment on scans: nearest neighbours, estimated normals, the debris filter,
the surface term in voxels, the scores and the exact-SDF limit."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tests.train.sdf.test_sdf import SHORT
from tests.train.test_train import one_line_error, sets
from train.__main__ import main
from train.config import ConfigError, load_config
from train.sdf.points import sample_surface

TORUS = {"major_radius": 0.55, "minor_radius": 0.2, "center": [0.1, 0.0, 0.0]}


def uv_sphere(radius: float, n: int = 48, center=(0.0, 0.0, 0.0)):
    """A closed UV sphere mesh (train.mesh.triangles.Mesh) of 2n x n quads."""
    from train.mesh.triangles import Mesh

    u = np.linspace(0, 2 * math.pi, 2 * n, endpoint=False)
    v = np.linspace(0, math.pi, n + 1)[1:-1]
    uu, vv = np.meshgrid(u, v, indexing="ij")
    ring = np.stack([np.sin(vv) * np.cos(uu), np.sin(vv) * np.sin(uu), np.cos(vv)], -1)
    vertices = radius * np.concatenate([ring.reshape(-1, 3), [[0, 0, 1], [0, 0, -1]]])
    m = n - 1
    faces = []
    for i in range(2 * n):
        i2 = (i + 1) % (2 * n)
        for j in range(m - 1):
            a, b, c, d = i * m + j + 1, i2 * m + j + 1, i2 * m + j, i * m + j
            faces += [[a, b, c], [a, c, d]]
        faces += [[2 * n * m, i * m, i2 * m], [2 * n * m + 1, i2 * m + m - 1, i * m + m - 1]]
    vertices = vertices + np.array(center)
    return Mesh(vertices, np.array(faces), np.zeros_like(vertices))


# ---- neighbours and normals ---------------------------------------------------------------


def test_hash_knn_is_exact_on_uneven_clouds():
    from train.sdf.neighbours import hash_knn

    gen = torch.Generator().manual_seed(0)
    dense = sample_surface("torus", TORUS, 3000, gen).points
    sparse = dense[dense[:, 0] > 0.3][::10]  # a tenth of the density on one side
    points = torch.cat([dense[dense[:, 0] <= 0.3], sparse])
    index, distance = hash_knn(points, 8)
    exact = torch.cdist(points, points, compute_mode="donot_use_mm_for_euclid_dist")
    brute, _ = exact.topk(9, largest=False)
    torch.testing.assert_close(distance, brute[:, 1:], rtol=0, atol=1e-6)
    assert not (index == torch.arange(len(points))[:, None]).any()


@pytest.mark.parametrize("kind", ["sphere", "torus"])
def test_estimated_normals_are_accurate_and_outward(kind):
    from train.sdf.normals import estimate_normals, normal_agreement

    params = {"radius": 0.6, "center": [0.0, 0.1, 0.0]} if kind == "sphere" else TORUS
    cloud = sample_surface(kind, params, 20000, torch.Generator().manual_seed(1))
    normals, report = estimate_normals(cloud.points, [[-1, -1, -1], [1, 1, 1]], k=16)
    agreement = normal_agreement(normals, cloud.normals)
    # measured: sphere 0.37 degrees, torus 1.03 degrees, none flipped; 98% from outside
    assert agreement["normals_flipped"] == 0, (agreement, report)
    assert agreement["normals_error"] < 3, agreement
    assert report["oriented_from_outside"] > 0.9, report


def test_a_cloud_without_normals_needs_the_option_then_runs(tmp_path, capsys):
    cloud = sample_surface(
        "sphere", {"radius": 0.5, "center": [0, 0, 0]}, 3000, torch.Generator().manual_seed(0)
    )
    path = tmp_path / "points.xyz"
    path.write_text("".join(f"{x} {y} {z}\n" for x, y, z in cloud.points.tolist()))
    args = [*SHORT, "points.kind=file", f"points.path={path}"]
    args = [a for a in args if not a.startswith("points.count")]
    assert main(["--out", str(tmp_path / "a"), *sets(*args)]) == 2
    err = one_line_error(capsys)
    assert "points without normals" in err and 'points.normals = "estimate"' in err, err
    args = [*args, "points.normals=estimate", "output.progress=true"]
    assert main(["--out", str(tmp_path / "b"), *sets(*args)]) == 0
    assert 'points.normals = "estimate": 3000 normals' in capsys.readouterr().err


# ---- noisy points ---------------------------------------------------------------------------


def test_projection_shrinks_the_scatter_off_a_plane_and_measures_it():
    from train.sdf.denoise import project_to_surfaces
    from train.sdf.neighbours import knn

    gen = torch.Generator().manual_seed(0)
    flat = torch.cat([torch.rand(20000, 2, generator=gen) - 0.5, torch.zeros(20000, 1)], 1)
    sigma = 0.004  # a fifth of the mean spacing: neighbourhoods stay flat
    noisy = flat + torch.cat(
        [torch.zeros(20000, 2), sigma * torch.randn(20000, 1, generator=gen)], 1
    )
    moved, spread = project_to_surfaces(noisy, knn(noisy, 32)[0])
    # Gaussian scatter s drops to about s sqrt(6 / (k + 1)) = 0.43 s
    assert 0.3 * sigma < moved[:, 2].std() < 0.55 * sigma
    assert 0.7 * sigma < spread.median() < 1.1 * sigma
    still, none = project_to_surfaces(flat, knn(flat, 32)[0])
    assert torch.allclose(still, flat, atol=1e-6) and none.max() < 1e-6


def test_projection_follows_curvature_where_a_plane_would_cut_inside():
    from train.sdf.denoise import local_planes, project_to_surfaces
    from train.sdf.neighbours import knn

    gen = torch.Generator().manual_seed(0)
    sphere = sample_surface("sphere", {"radius": 0.5, "center": [0, 0, 0]}, 5000, gen).points
    index = knn(sphere, 32)[0]
    moved, _ = project_to_surfaces(sphere, index)
    centroid, normal, _ = local_planes(sphere, index)
    flat = sphere - ((sphere - centroid) * normal).sum(1, keepdim=True) * normal
    error_quadric = (moved.norm(dim=1) - 0.5).abs().mean()
    error_plane = (flat.norm(dim=1) - 0.5).abs().mean()
    assert error_quadric < 0.1 * error_plane, (error_quadric, error_plane)


def test_denoised_points_lie_nearer_their_surface(tmp_path):
    from tests.train.sdf.test_sdf import sphere_rows
    from train.sdf.experiment import load_points

    rows = sphere_rows(20000)
    rng = np.random.default_rng(0)
    sigma = 0.005
    rows[:, :3] += rng.normal(scale=sigma, size=(len(rows), 3))
    path = tmp_path / "noisy.npy"
    np.save(path, rows.astype(np.float32))
    base = ["experiment=sdf", "points.kind=file", f"points.path={path}"]
    off = load_points(load_config(None, base))
    on = load_points(load_config(None, [*base, "points.denoise=32"]))

    def error(cloud):
        return float((cloud.points.norm(dim=1) - 0.5).abs().mean())

    assert error(on) < 0.5 * error(off), (error(on), error(off))
    assert off.report is None
    assert 0.5 * sigma < on.report["points_spread_median"] < 1.2 * sigma
    assert 0 < on.report["points_moved_median"] < 3 * sigma
    assert torch.equal(on.normals, off.normals)  # the given normals stay


def test_scatter_cap_picks_the_last_resolution_coarse_enough():
    from train.sdf.experiment import scatter_cap

    sets = ["experiment=sdf", "grid.resolution=32", "train.steps=40"]
    sets += ["train.upsample_steps=[10,20,30]", "train.upsample_resolutions=[64,128,256]"]
    config = load_config(None, sets)  # box [-1, 1]^3: voxels 2/127 at 128^3, 2/255 at 256^3
    assert scatter_cap(config, 0.35 * 2 / 255) is None  # 256^3 is coarse enough
    assert scatter_cap(config, 0.36 * 2 / 255) == (128, 128, 128)
    assert scatter_cap(config, 0.35 * 2 / 63) == (64, 64, 64)
    assert scatter_cap(config, 1.0) == (32, 32, 32)  # never below the start
    assert scatter_cap(load_config(None, [*sets, "sdf.scatter_voxels=0"]), 1.0) is None


def test_noisy_points_stop_the_grid_where_it_would_follow_the_noise(tmp_path, capsys):
    from tests.train.sdf.test_sdf import sphere_rows
    from train.sdf.experiment import SdfExperiment

    rows = sphere_rows(20000)
    rows[:, :3] += np.random.default_rng(0).normal(scale=0.005, size=(len(rows), 3))
    path = tmp_path / "noisy.npy"
    np.save(path, rows.astype(np.float32))
    sets = ["experiment=sdf", "points.kind=file", f"points.path={path}", "points.denoise=32"]
    sets += ["grid.resolution=32", "grid.init=zeros", "train.steps=40"]
    sets += ["train.upsample_steps=[10,20]", "train.upsample_resolutions=[64,256]"]
    cpu = torch.device("cpu")
    exp = SdfExperiment(load_config(None, sets), cpu, torch.Generator().manual_seed(0), None)
    assert exp.cap == (64, 64, 64)  # a 0.005 scatter is ~0.6 voxels at 256^3
    assert "the grid stops at 64x64x64" in capsys.readouterr().err
    exp.upsample((64, 64, 64))
    exp.upsample((256, 256, 256))  # past the cap: skipped
    assert exp.model.resolution == (64, 64, 64)
    off = load_config(None, [*sets, "sdf.scatter_voxels=0"])
    assert SdfExperiment(off, cpu, torch.Generator().manual_seed(0), None).cap is None


# ---- the mesh: debris filter, scores, the limit -------------------------------------------


def test_unsupported_components_are_removed():
    from grid import VoxelGrid
    from train.mesh.distance import supported_components
    from train.mesh.level_set import zero_level_set
    from train.mesh.triangles import face_components

    n = 33
    lin = torch.linspace(-1, 1, n)
    x = torch.stack(torch.meshgrid(lin, lin, lin, indexing="ij"), -1)
    sphere = x.norm(dim=-1) - 0.5
    blob = (x - torch.tensor([0.8, 0.8, 0.8])).norm(dim=-1) - 0.1  # a spurious piece
    model = VoxelGrid(n, 1, init="zeros")
    with torch.no_grad():
        model.features.copy_(torch.minimum(sphere, blob)[..., None])
    mesh = zero_level_set(model, "linear")
    assert len(face_components(mesh.faces, len(mesh.vertices))[1]) == 2
    points = (
        sample_surface(
            "sphere", {"radius": 0.5, "center": [0, 0, 0]}, 4000, torch.Generator().manual_seed(0)
        )
        .points.double()
        .numpy()
    )
    kept, components, faces = supported_components(mesh, points, 3.0)
    assert components == 1 and faces > 0
    assert len(face_components(kept.faces, len(kept.vertices))[1]) == 1
    assert np.abs(np.linalg.norm(kept.vertices, axis=1) - 0.5).max() < 0.02


def test_sign_islands_below_the_size_are_filled():
    from grid import VoxelGrid
    from train.mesh.level_set import fill_sign_islands, zero_level_set
    from train.mesh.triangles import face_components

    n = 40
    lin = torch.linspace(-1, 1, n)
    x = torch.stack(torch.meshgrid(lin, lin, lin, indexing="ij"), -1)
    values = (x.norm(dim=-1) - 0.6).numpy()
    gen = np.random.default_rng(0)
    values += gen.uniform(-0.01, 0.01, values.shape)  # no exact zeros, not a clean field
    bubbles = [(20, 20, 20, 1), (6, 6, 6, -1), (30, 30, 8, -1)]  # single voxels
    for i, j, k, sign in bubbles:
        values[i, j, k] = sign * abs(values[i, j, k])  # inside: positive, outside: negative
    values[10:12, 20, 20] = 0.05  # a positive island of 2 voxels inside the sphere
    values[0:3, 0:3, 0:3] = -0.05  # an island of 27 voxels in the box's corner: kept
    values[34:38, 15:19, 15:19] = -0.05  # an outside island of 64 voxels: kept at min 8
    filled = fill_sign_islands(torch.from_numpy(values), 8).numpy()
    assert filled[20, 20, 20] < 0 and filled[6, 6, 6] > 0 and filled[30, 30, 8] > 0
    assert (filled[0:3, 0:3, 0:3] < 0).all() and (filled[34:38, 15:19, 15:19] < 0).all()
    assert np.array_equal(np.abs(filled), np.abs(values))  # only signs change
    changed = np.sign(filled) != np.sign(values)
    assert changed.sum() == 5 and (filled[10:12, 20, 20] < 0).all()
    assert np.array_equal(fill_sign_islands(torch.from_numpy(values), 1).numpy(), values)
    model = VoxelGrid(n, 1, init="zeros")
    with torch.no_grad():
        model.features.copy_(torch.from_numpy(values)[..., None])
    pieces = len(face_components(*_faces(zero_level_set(model, "linear")))[1])
    kept = len(face_components(*_faces(zero_level_set(model, "linear", 8)))[1])
    assert pieces >= 6 and kept == 3  # the sphere, the corner island, the 64-voxel island


def _faces(mesh):
    return mesh.faces, len(mesh.vertices)


def test_scores_of_two_concentric_spheres():
    from train.mesh.scoring import score_mesh

    inner, outer = uv_sphere(0.5), uv_sphere(0.52)
    s = score_mesh(outer, inner, box_size=2.0, samples=4000)
    assert s["chamfer"] == pytest.approx(0.02 / 2, rel=0.05)
    assert s["normal_consistency"] > 0.999
    assert s["fscore"] == 0  # 0.02 apart, tau = 0.5% of 2 = 0.01
    assert s["components"] == 1 and s["debris_faces"] == 0
    assert score_mesh(inner, inner, box_size=2.0, samples=4000)["chamfer"] < 1e-12
    assert score_mesh(outer, inner, 2.0, samples=4000, tau=0.015)["fscore"] == 1
    # a second, separate sphere in the reconstruction is debris: its faces counted
    two = uv_sphere(0.1, n=8, center=(0.8, 0.8, 0.8))
    both = type(outer)(
        np.concatenate([outer.vertices, two.vertices]),
        np.concatenate([outer.faces, two.faces + len(outer.vertices)]),
        np.zeros((len(outer.vertices) + len(two.vertices), 3)),
    )
    s = score_mesh(both, inner, box_size=2.0, samples=4000)
    assert s["components"] == 2 and s["debris_faces"] == len(two.faces)


def test_the_exact_grid_sdf_of_a_mesh():
    from train.mesh.signed_distance import grid_sdf
    from train.shapes import Sphere

    mesh = uv_sphere(0.6, n=64)
    n = 24
    values = grid_sdf(mesh, [[-1, -1, -1], [1, 1, 1]], (n, n, n), band=1.5)
    lin = torch.linspace(-1, 1, n, dtype=torch.float64)
    x = torch.stack(torch.meshgrid(lin, lin, lin, indexing="ij"), -1)
    exact = Sphere(0.6, [0, 0, 0])(x).double().numpy()
    voxel = 2 / (n - 1)
    band = np.abs(exact) < 1.4 * voxel
    assert np.abs(values[band] - exact[band]).max() < 2e-3  # the mesh is a polyhedron
    assert (np.sign(values) == np.sign(exact)).all()  # the sign everywhere


# ---- config errors --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("points.normals=guess", "points.normals"),
        ("points.normal_neighbours=2", "points.normal_neighbours"),
        ("points.denoise=5", "points.denoise"),
        ("points.denoise=-1", "points.denoise"),
        ("sdf.surface_units=mm", "sdf.surface_units"),
        ("sdf.keep=some", "sdf.keep"),
        ("sdf.support_ratio=0", "sdf.support_ratio"),
        ("sdf.min_island=-1", "sdf.min_island"),
        ("sdf.scatter_voxels=-0.1", "sdf.scatter_voxels"),
        ("sdf.relax=-1", "sdf.relax"),
        ("sdf.normal_robust=-0.5", "sdf.normal_robust"),
        ("sdf.suport_ratio=1", "sdf.suport_ratio"),
    ],
)
def test_new_keys_are_checked_and_named(override, key):
    with pytest.raises(ConfigError) as error:
        load_config(None, ["experiment=sdf", override])
    assert str(error.value).startswith(f"{key}:"), error.value


def test_the_sdf_table_is_refused_by_other_experiments():
    with pytest.raises(ConfigError, match="^sdf: not read by experiment = 'field'"):
        load_config(None, ["experiment=field", "sdf.keep=supported"])


def test_the_surface_term_in_voxels_is_f_over_the_voxel_size():
    from train.loop import make_experiment

    losses = []
    for units in ("world", "voxel"):
        config = load_config(
            None,
            [
                *SHORT,
                "train.normal_weight=0",
                "train.eikonal_weight=0",
                f"sdf.surface_units={units}",
            ],
        )
        exp = make_experiment(config, torch.device("cpu"), torch.Generator().manual_seed(0), None)
        losses.append(exp.loss()[0].item())
    voxel = 2 / (12 - 1)  # grid.resolution = 12 over [-1, 1]
    assert losses[1] == pytest.approx(losses[0] / voxel**2, rel=1e-5)
