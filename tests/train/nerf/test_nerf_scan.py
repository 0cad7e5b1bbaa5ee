"""The scan scenes (train/nerf/scenes/scan.py): a mesh placed on the realistic scene's base,
sampled as a signed-distance grid, rendered in several looks; their scene.json and the
config's errors. A small lumpy ellipsoid stands in for a scan, on a coarse grid."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from train.config import load_config
from train.errors import ConfigError
from train.nerf.scene_path import ensure_scene as ensure_config_scene
from train.nerf.scenes import generate, realistic_shapes, scan, scan_mesh
from train.nerf.scenes.generate import (
    _to_png_bytes,
    camera_poses,
    ensure_scene,
    generate_scene,
    render_views,
    scene_metadata,
)
from train.nerf.scenes.scan_mesh import box_distance, place, read_mesh, upright

TINY = {"size": 16, "n_train": 1, "n_val": 1, "n_test": 1, "seed": 0, "scene": "scan"}
LOOKS = ("glossy", "mirror", "rough", "translucent", "large")


def lumpy_off(n: int = 12) -> str:
    """An OFF ellipsoid with bumps (closed, genus 0), 1.0 x 1.4 x 0.7, y up (as scans)."""
    rows = []
    for i in range(1, n):
        theta = math.pi * i / n
        for j in range(2 * n):
            phi = math.pi * j / n
            r = 1.0 + 0.08 * math.sin(3 * phi) * math.sin(2 * theta)
            rows.append(
                (
                    0.5 * r * math.sin(theta) * math.cos(phi),
                    0.7 * r * math.cos(theta),
                    0.35 * r * math.sin(theta) * math.sin(phi),
                )
            )
    top, bottom = len(rows), len(rows) + 1
    rows += [(0.0, 0.7, 0.0), (0.0, -0.7, 0.0)]
    faces = []
    for i in range(n - 2):
        for j in range(2 * n):
            a, b = i * 2 * n + j, i * 2 * n + (j + 1) % (2 * n)
            faces += [(a, b, b + 2 * n), (a, b + 2 * n, a + 2 * n)]
    last = (n - 2) * 2 * n
    for j in range(2 * n):
        faces += [(top, (j + 1) % (2 * n), j)]
        faces += [(bottom, last + j, last + (j + 1) % (2 * n))]
    lines = ["OFF", f"{len(rows)} {len(faces)} 0"]
    lines += [f"{x:.6f} {y:.6f} {z:.6f}" for x, y, z in rows]
    lines += [f"3 {a} {b} {c}" for a, b, c in faces]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module", autouse=True)
def coarse():
    """A coarse grid with a thin band: a second or two for the mesh's grid."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(scan, "SDF_RESOLUTION", 32)
        patch.setattr(scan, "LARGE_RESOLUTION", 32)
        patch.setattr(scan_mesh, "BAND", 2.0)
        yield


@pytest.fixture(scope="module")
def mesh_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("mesh") / "lumpy.off"
    path.write_text(lumpy_off())
    return path


def pose_render(mesh, look: str, size: int = 16) -> torch.Tensor:
    """The first training view [size, size, 4] (straight RGBA) of the mesh in `look`."""
    c2w = camera_poses(1, 1, 1, seed=0)["train"]
    spec = {"mesh": str(mesh), "look": look}
    return render_views(c2w, size, scene="scan", scan=spec)[0]


@pytest.fixture(scope="module")
def renders(mesh_file) -> dict[str, torch.Tensor]:
    return {look: pose_render(mesh_file, look) for look in LOOKS}


def test_mesh_reads_and_stands_on_the_base(mesh_file):
    mesh = read_mesh(mesh_file)
    assert mesh.faces.shape == (2 * 24 * 10 + 2 * 24, 3)
    top = realistic_shapes.BASE["centre"][2] + realistic_shapes.BASE["half"]
    placed = place(mesh, "+y", scan.STANDING_SIZE, top - scan.SINK)
    v = placed.vertices
    assert v[:, 2].min() == pytest.approx(top - scan.SINK)
    assert np.ptp(v, axis=0).max() == pytest.approx(scan.STANDING_SIZE)
    assert np.ptp(v[:, 2]) == pytest.approx(scan.STANDING_SIZE)  # y was up: now z
    assert np.hypot(v[:, 0], v[:, 1]).max() < realistic_shapes.BASE["radius"]
    assert np.abs(v).max() < 1.5  # inside the box
    large = place(mesh, "+y", scan.LARGE_SIZE, None).vertices
    assert np.abs(large.max(0) + large.min(0)).max() < 1e-9  # centred
    assert np.abs(large).max() == pytest.approx(scan.LARGE_SIZE / 2)
    turned = upright(np.eye(3), "-x")
    assert np.linalg.det(turned) == pytest.approx(1.0)  # a rotation, not a mirror
    assert turned[0, 2] == -1.0  # +x points down


def test_sdf_grid_is_a_bound(mesh_file):
    grid = scan.ScanScene(mesh_file).grid()
    assert 1.0 < grid.lipschitz <= math.sqrt(3) * 1.01
    mesh = place(read_mesh(mesh_file), "+y", scan.STANDING_SIZE, -0.9)
    at_vertices = grid(torch.from_numpy(mesh.vertices).float())
    assert at_vertices.abs().max() < 0.5 * grid.h  # the zero set follows the mesh
    gen = torch.Generator().manual_seed(0)
    lo, hi = torch.tensor(grid.box[0]), torch.tensor(grid.box[1])
    p = lo + (hi - lo) * torch.rand(4000, 3, generator=gen)
    q = p + 0.05 * torch.randn(4000, 3, generator=gen)
    q = torch.maximum(torch.minimum(q, hi), lo)
    change = (grid(p) - grid(q)).abs()
    assert (change <= grid.lipschitz * (p - q).norm(dim=-1) + 1e-5).all()
    assert grid(torch.tensor([[0.0, 0.0, -0.3]])) < 0  # inside the body
    outside = lo - 0.01
    assert box_distance(outside[None], grid.box) == pytest.approx(0.01 * math.sqrt(3), rel=1e-5)


def test_scan_scene_generates_deterministically(tmp_path, mesh_file, renders):
    spec = {"mesh": str(mesh_file), "look": "glossy"}
    out = generate_scene(tmp_path / "a", **TINY, scan=spec)
    meta = json.loads((out / "scene.json").read_text())
    assert meta["scene"] == "scan" and meta["mesh"] == "lumpy.off" and meta["look"] == "glossy"
    from PIL import Image

    pixels = np.asarray(Image.open(out / "train" / "r_0.png"))
    again = _to_png_bytes(renders["glossy"])  # the same pose rendered again, elsewhere
    assert np.array_equal(pixels, again)
    written = (out / "train" / "r_0.png").stat().st_mtime_ns
    assert ensure_scene(out, **TINY, scan=spec) == out  # current: not generated again
    assert (out / "train" / "r_0.png").stat().st_mtime_ns == written
    rgba = pixels.astype(float) / 255
    covered = rgba[..., 3] > 0.5
    assert 0.15 < covered.mean() < 0.9  # the object and its base, and background
    assert rgba[covered, :3].std(axis=0).min() > 0.05  # shaded and textured, not flat


def test_looks_differ_and_translucent_is_see_through(renders):
    for i, x in enumerate(LOOKS):
        for y in LOOKS[i + 1 :]:
            diff = (renders[x][..., :3] - renders[y][..., :3]).abs().mean()
            assert diff > 0.01, (x, y, float(diff))
    solid, glass = renders["glossy"][..., 3], renders["translucent"][..., 3]
    # the object's pixels (opaque when glossy) that miss the base: the glass lets light through
    body = (solid > 0.99) & (glass < 0.99)
    assert body.sum() > 5
    assert glass[body].mean() < 0.9
    mirror = renders["mirror"][..., :3][solid > 0.99]
    assert mirror.amax(-1).max() > 0.9  # the sun and windows reflected


def test_large_fills_the_box_without_a_base(mesh_file, renders):
    assert renders["large"][..., 3].gt(0.5).float().mean() > 0.25
    assert renders["large"][..., 3].gt(0.5).sum() > renders["glossy"][..., 3].gt(0.5).sum() * 0.8
    parts = scan.ScanScene(mesh_file, "large").parts(torch.device("cpu"))
    assert len(parts.sigma) == 1  # the mesh alone


def test_metadata_follows_the_mesh_and_look(tmp_path, mesh_file):
    args = (24, 2, 1, 1, 1, "scan")
    spec = {"mesh": str(mesh_file), "look": "glossy"}
    first = scene_metadata(*args, spec)
    assert scene_metadata(*args, dict(spec)) == first
    assert scene_metadata(*args, {**spec, "look": "mirror"}) != first
    assert scene_metadata(*args, {**spec, "up": "+z"}) != first
    changed = tmp_path / "lumpy.off"  # same name, other content: another hash
    changed.write_text(lumpy_off(10))
    other = scene_metadata(*args, {**spec, "mesh": str(changed)})
    assert other["mesh"] == first["mesh"] and other["mesh_sha256"] != first["mesh_sha256"]
    assert first["scan_version"] == scan.VERSION and first["version"] == generate.SCENES["scan"]


def _config(tmp_path, mesh: str, *more: str):
    sets = ["data.scene=scan", f"data.scene_mesh={json.dumps(mesh)}", "data.scene_size=8"]
    sets += [f"data.path={json.dumps(str(tmp_path / 'scene'))}", "data.scene_train_views=1"]
    sets += ["data.generate=true"]
    sets += ["data.scene_test_views=1", "grid.backend=grid_sample", *more]
    return load_config("configs/nerf_realistic.toml", sets)


def test_bad_scene_mesh_is_one_line(tmp_path, mesh_file):
    for mesh, words in (
        ("", "required"),
        (str(tmp_path / "missing.off"), "no such file"),
        (str(tmp_path / "x.obj"), ".off or .ply"),
    ):
        with pytest.raises(ConfigError) as caught:
            _config(tmp_path, mesh)
        message = str(caught.value)
        assert message.startswith("data.scene_mesh:") and words in message
        assert "\n" not in message
    with pytest.raises(ConfigError, match="data.scene_look"):
        _config(tmp_path, str(mesh_file), "data.scene_look=velvet")
    with pytest.raises(ConfigError, match="data.scene_up"):
        _config(tmp_path, str(mesh_file), "data.scene_up=y")
    garbage = tmp_path / "garbage.off"
    garbage.write_text("OFF\n3 1 0\n0 0 0\n1 0\n")  # truncated
    config = _config(tmp_path, str(garbage))
    with pytest.raises(ConfigError) as caught:
        ensure_config_scene(config, torch.device("cpu"))
    message = str(caught.value)
    assert message.startswith("data.scene_mesh:") and "garbage.off" in message
    assert "\n" not in message
    assert not (tmp_path / "scene").exists()
