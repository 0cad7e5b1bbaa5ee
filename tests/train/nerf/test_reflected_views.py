"""`nerf.reflected_views`: the colour MLP reads the view mirrored about the density's normal
(train/nerf/model/reflection.py): the mirror's geometry, the normals of known densities on
both backends, refreshed in place (a captured step reads them) and after every change of the
grids, the same renders from both renderers, and the whole command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.train.nerf.test_nerf_fused import grads, pair
from tests.train.nerf.test_nerf_model_parity import rays
from train.__main__ import main
from train.config import ConfigError, load_config
from train.nerf.model.encoding import ViewInput
from train.nerf.model.reflection import FLAT, NormalField, density_gradient, reflect
from train.nerf.model.voxel_nerf import VoxelNeRF

from .test_nerf import SHORT, sets

BOX = ((-1.0, -1.0, -1.0), (1.0, 1.0, 1.0))


def unit(n: int, seed: int) -> torch.Tensor:
    d = torch.randn(n, 3, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return d / d.norm(dim=-1, keepdim=True)


def test_reflect_mirrors_about_the_normal_and_fades_with_it():
    d, n = unit(200, 0), unit(200, 1)
    r, cos = reflect(d, n)
    dot = (d * n).sum(-1)
    torch.testing.assert_close(r.norm(dim=-1), torch.ones(200, dtype=torch.float64))
    torch.testing.assert_close((r * n).sum(-1), -dot)  # the normal component flips
    tangent = d - dot[:, None] * n
    torch.testing.assert_close(r - (r * n).sum(-1, keepdim=True) * n, tangent)  # the rest stays
    torch.testing.assert_close(cos[:, 0], -dot)
    r0, cos0 = reflect(d, torch.zeros_like(n))  # no normal: the view itself
    torch.testing.assert_close(r0, d)
    assert torch.equal(cos0, torch.zeros(200, 1, dtype=torch.float64))
    rz, _ = reflect(torch.zeros_like(d), n)  # the fused renderer's padding rows stay finite
    assert torch.isfinite(rz).all()


@pytest.mark.parametrize("backend", ["native", "grid_sample"])
def test_normals_of_a_ramp_and_a_ball(backend):
    """A raw density rising along a: normals -a / |a| away from the border (the box average
    keeps a ramp), shortened softly by FLAT; a ball: outward normals between the voxels."""
    size = 17
    axis = torch.linspace(-1, 1, size, dtype=torch.float64)
    x, y, z = torch.meshgrid(axis, axis, axis, indexing="ij")  # [X, Y, Z] each
    field = NormalField(backend).double()
    bounds = torch.tensor(BOX, dtype=torch.float64)
    a = torch.tensor([0.3, -0.2, 0.1], dtype=torch.float64) * 4  # raw units per world unit
    field.refresh(a[0] * x + a[1] * y + a[2] * z, bounds)
    points = torch.rand(100, 3, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    got = field(points * 1.4 - 0.7)  # two voxels from the border: a whole 3^3 average
    g = a * (2 / (size - 1))  # per voxel
    want = (-g / (g.square().sum() + FLAT**2).sqrt()).expand(100, 3)
    torch.testing.assert_close(got, want)
    radius = (x.square() + y.square() + z.square()).sqrt()
    field.refresh(-20 * radius, bounds)
    p = unit(100, 3) * 0.6  # on a sphere between the grid's vertices
    normals = field(p)
    outward = (normals * p / 0.6).sum(-1) / normals.norm(dim=-1)
    assert outward.min() > 0.97 and normals.norm(dim=-1).min() > 0.9


def test_a_refresh_is_in_place_unless_the_shape_changes():
    m = VoxelNeRF(BOX, 8, 12, color_features=4, hidden=16, reflected_views=True)
    values = m.views.normals.values
    assert values.shape == (8, 8, 8, 3) and m.mlp[0].in_features == 4 + 27 + 27 + 1
    ptr = values.data_ptr()
    with torch.no_grad():
        m.density.features.normal_()
    m.update_occupancy()  # refreshes the normals: the same storage, new values
    assert m.views.normals.values.data_ptr() == ptr and m.views.normals.values.abs().sum() > 0
    torch.testing.assert_close(m.views.normals.values, density_gradient(m.density_values()))
    m.upsample(12)
    assert m.views.normals.values.shape == (12, 12, 12, 3)
    torch.testing.assert_close(m.views.normals.values, density_gradient(m.density_values()))
    m.fit_box([[-0.5, -0.5, -0.5], [0.5, 0.5, 0.5]], (10, 10, 10))
    torch.testing.assert_close(m.views.normals.bounds, m.occupancy_grid.bounds)
    assert m.views.normals.values.shape == (10, 10, 10, 3)
    fresh = VoxelNeRF(BOX, 8, 12, color_features=4, hidden=16, reflected_views=True)
    fresh.fit_box([[-0.5, -0.5, -0.5], [0.5, 0.5, 0.5]], (10, 10, 10))
    fresh.load_state_dict(m.state_dict())  # a reload recomputes them
    torch.testing.assert_close(fresh.views.normals.values, m.views.normals.values)
    assert not any("normals" in key for key in m.state_dict())


@pytest.mark.parametrize("kind", ["frequencies", "sh"])
@pytest.mark.parametrize("dtype", [None, torch.bfloat16])
def test_the_view_input_is_its_parts_concatenated_in_the_mlp_dtype(kind, dtype):
    """Each part written into one buffer of the colour MLP's dtype: bit for bit the float32
    concatenation cast after, from either entry (the reader's and the forward's)."""
    views = ViewInput(kind, 4, True, "native", dtype=dtype)
    raw = torch.randn(9, 9, 9, generator=torch.Generator().manual_seed(6))
    views.refresh(lambda: raw, torch.tensor(BOX))
    d = unit(300, 7).float()
    points = torch.rand(300, 3, generator=torch.Generator().manual_seed(8)) * 2 - 1
    reflected, cos = reflect(d, views.normals(points))
    want = torch.cat([views.encode(d), views.encode(reflected), cos], -1)
    want = want.to(dtype or torch.float32)
    assert views.width == want.shape[1] and views.encode(d).abs().max() > 0
    assert torch.equal(views(points, d), want)
    assert torch.equal(views(points, d, views.encode(d)), want)
    rays = torch.arange(300)
    read = views.reader(d)(points, rays)
    assert read.dtype == want.dtype and torch.equal(read, want)
    plain = ViewInput(kind, 4, False, "native", dtype=dtype)
    assert torch.equal(plain.reader(d)(points, rays), plain.encode(d).to(want.dtype))


def test_a_bfloat16_colour_mlp_reads_what_the_float32_concatenation_cast_gave():
    """`shade` casts the features alone and takes the view input as built: the colours and
    the features' gradient are bit for bit those of one float32 input cast to bfloat16."""
    m = VoxelNeRF(BOX, 8, 12, color_features=4, hidden=16, reflected_views=True)
    m.mlp_dtype = torch.bfloat16
    features = torch.randn(500, 4, generator=torch.Generator().manual_seed(9))
    features.requires_grad_(True)
    view = torch.rand(500, m.views.width, generator=torch.Generator().manual_seed(10))
    got = m.shade(features, view.to(torch.bfloat16))
    (grad,) = torch.autograd.grad(got.sum(), features)
    x = torch.cat([features, view], -1).to(torch.bfloat16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want = torch.sigmoid(m.mlp(x).float())
    (grad_want,) = torch.autograd.grad(want.sum(), features)
    assert torch.equal(got, want) and torch.equal(grad, grad_want) and grad.abs().max() > 0


def test_both_renderers_agree_with_reflected_views_in_float64():
    old, fused = pair(reflected_views=True)
    assert old.views.normals.values.abs().max() > 0
    origins, directions = (x.double() for x in rays(300, seed=5))
    background = torch.tensor([0.2, 0.5, 1.0], dtype=torch.float64)
    want = old.render(origins, directions, background)
    got = fused.render(origins, directions, background)
    assert got["samples"] == want["samples"] > 1000
    for key in ("rgb", "depth", "acc"):
        torch.testing.assert_close(got[key], want[key], rtol=1e-10, atol=1e-12)
    for a, b in zip(grads(fused, got), grads(old, want), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)
    plain, _ = pair()  # the reflection changes what the MLP reads, so the colours
    assert not torch.allclose(plain.render(origins, directions, background)["rgb"], want["rgb"])


def test_a_multires_density_gives_normals_and_both_renderers_agree():
    """The colour MLP reading the density's geometry features (`shared_fields`) takes the
    reflected views too; its normals come from the density evaluated on the occupancy grid."""
    table = dict(levels=4, features=2, table_size=2**10, base_resolution=4, growth_factor=2.0)
    models = []
    for renderer in ("torch", "fused"):
        torch.manual_seed(0)
        kwargs = dict(density_encoding="multires", color_encoding="multires", multires=table)
        m = VoxelNeRF(BOX, 12, 12, hidden=16, reflected_views=True, renderer=renderer, **kwargs)
        models.append(m)
    for m in models:
        with torch.no_grad():
            for p in m.density.parameters():
                p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(3)))
        m.update_occupancy()
    assert models[0].views.normals.values.shape == (12, 12, 12, 3)
    assert models[0].views.normals.values.abs().max() > 0
    origins, directions = rays(200, seed=6)
    want, got = (m.render(origins, directions, torch.tensor([0.2, 0.5, 1.0])) for m in models)
    assert got["samples"] == want["samples"] > 100
    torch.testing.assert_close(got["rgb"], want["rgb"], rtol=1e-4, atol=1e-5)


def test_a_contraction_is_ruled_out_naming_the_key():
    extra = ["nerf.contraction=sphere", "nerf.far=100", "nerf.fit_box=false"]
    message = r"nerf.reflected_views: not with nerf.contraction = 'sphere'"
    with pytest.raises(ConfigError, match=message):
        load_config(None, ["experiment=nerf", "nerf.reflected_views=true", *extra])
    with pytest.raises(ValueError, match="reflected_views: not with a contraction"):
        VoxelNeRF(BOX, 8, 8, contraction="sphere", reflected_views=True)


@pytest.fixture(scope="module")
def scene(tmp_path_factory) -> Path:
    from train.nerf.scenes.generate import generate_scene

    return generate_scene(tmp_path_factory.mktemp("scene") / "scene", size=24, n_train=12, n_test=2)


def test_a_run_with_reflected_views_trains_resumes_and_exports(scene, tmp_path):
    """The whole command: the checkpoint restores the option (the MLP's width) and the
    normals, and the export's vertex colours read them too."""
    from train.export import main as export_main

    out = tmp_path / "run"
    extra = [f"data.path={scene}", "nerf.reflected_views=true", "train.steps=30"]
    extra += ["train.upsample_steps=[15]", "train.batch_size=256"]
    assert main(["--out", str(out), "--stop-at", "20", *sets(*SHORT, *extra)]) == 0
    assert main(["--out", str(out), "--resume"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 30 and summary["psnr"] > 10
    assert "reflected_views = true" in (out / "config.toml").read_text()
    assert export_main(["--out", str(out)]) == 0
