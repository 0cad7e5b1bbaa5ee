"""The NeRF experiment's optional losses (train/nerf/model/losses.py) on both renderers' per-sample
outputs, and the colour MLP in bfloat16 (`nerf.mlp_dtype`)."""

from __future__ import annotations

import math

import pytest
import torch

from tests.train.nerf.test_nerf_fused import pair
from tests.train.nerf.test_nerf_model_parity import model, rays
from train.config import load_config
from train.errors import ConfigError
from train.nerf.model.encoding import positional_encoding
from train.nerf.model.losses import (
    auxiliary_losses,
    priors_on,
    sample_color_loss,
    transmittance_entropy,
    view_consistency_loss,
)
from train.nerf.model.reflection import reflect


def loop_sample_loss(m, origins, directions, target) -> float:
    """The per-sample colour loss from the plain renderer's samples, ray by ray."""
    total = 0.0
    for r in range(origins.shape[0]):
        out = m.render(origins[r : r + 1], directions[r : r + 1], torch.ones(3, dtype=target.dtype))
        error = (out["sample_rgb"] - target[r]).square().sum(-1)
        total += float((out["sample_weight"] * error).sum().detach())
    return total / origins.shape[0]


def test_sample_color_loss_is_the_weighted_error_of_each_coloured_sample():
    torch_model, fused = pair()
    origins, directions = (x.double() for x in rays(40, seed=11))
    target = torch.rand(40, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    background = torch.ones(3, dtype=torch.float64)
    want = loop_sample_loss(torch_model, origins, directions, target)
    assert want > 0
    for m in (torch_model, fused):
        out = m.render(origins, directions, background)
        assert out["sample_rgb"].shape[0] == out["sample_weight"].shape[0] > 50
        assert not out["sample_weight"].requires_grad  # DirectVoxGO: weights without gradient
        assert math.isclose(sample_color_loss(out, target).item(), want, rel_tol=1e-9)


def test_planned_padding_adds_nothing_to_the_sample_loss():
    _, fused = pair(torch.float32)
    fused.sizing = "planned"
    origins, directions = rays(128, seed=12)
    target = torch.rand(128, 3, generator=torch.Generator().manual_seed(2))
    exact = fused.render(origins, directions, torch.ones(3), exact=True)
    fused.render(origins, directions, torch.ones(3))  # measures the counts
    planned = fused.render(origins, directions, torch.ones(3))  # padded buffers
    assert planned["sample_rgb"].shape[0] > exact["sample_rgb"].shape[0]  # padding rows
    assert int(planned["sample_ray"].max()) == 128  # padding rows name ray R, weight 0
    torch.testing.assert_close(
        sample_color_loss(planned, target), sample_color_loss(exact, target), rtol=1e-5, atol=0
    )


def test_sample_loss_moves_the_colour_grid_and_mlp_only():
    m = model(occupancy_threshold=1e-3)
    m.update_occupancy()
    origins, directions = rays(64, seed=13)
    out = m.render(origins, directions, torch.ones(3))
    loss = sample_color_loss(out, torch.rand(64, 3, generator=torch.Generator().manual_seed(3)))
    density, color = torch.autograd.grad(
        loss, [m.density.features, m.color.features], allow_unused=True
    )
    assert density is None or density.abs().max() == 0  # weights carry no gradient
    assert color.abs().max() > 0


def test_transmittance_entropy():
    acc = torch.tensor([0.0, 1.0, 0.5, 0.9], requires_grad=True)
    h = transmittance_entropy(acc)
    p = torch.tensor([1 - 1e-6, 1e-6, 0.5, 0.1])
    want = -(p * p.log() + (1 - p) * (1 - p).log()).mean()
    torch.testing.assert_close(h, want)
    (g,) = torch.autograd.grad(h, acc)
    assert g[2] == 0 and g[3] < 0  # 0.5 is the maximum; descent moves opacity 0.9 up to 1


def test_auxiliary_losses_follow_the_config():
    weights = ["nerf.sample_color_weight=0.5", "nerf.entropy_weight=0.25"]
    view = ["nerf.view_consistency_weight=2", "nerf.view_consistency_stride=3"]
    c = load_config(None, ["experiment=nerf", *weights, *view])
    m = model(occupancy_threshold=1e-3)
    m.update_occupancy()
    origins, directions = rays(32, seed=14)
    out = m.render(origins, directions, torch.ones(3))
    target = torch.rand(32, 3, generator=torch.Generator().manual_seed(4))
    want = 0.5 * sample_color_loss(out, target) + 0.25 * transmittance_entropy(out["acc"])
    want = want + 2 * view_consistency_loss(m, out, directions, stride=3)
    torch.testing.assert_close(auxiliary_losses(c.nerf, m, out, directions, target), want)
    off = load_config(None, ["experiment=nerf"]).nerf
    assert auxiliary_losses(off, m, out, directions, target) == 0.0
    # past nerf.priors_until: DirectVoxGO's two are off, the view-consistency term stays
    view_only = 2 * view_consistency_loss(m, out, directions, stride=3)
    got = auxiliary_losses(c.nerf, m, out, directions, target, priors=False)
    torch.testing.assert_close(got, view_only)


def test_priors_until_turns_both_priors_off_from_its_step():
    on = ["experiment=nerf", "nerf.sample_color_weight=0.01", "nerf.entropy_weight=0.001"]
    n = load_config(None, [*on, "nerf.priors_until=30"]).nerf
    assert [priors_on(n, s) for s in (0, 29, 30, 31, 1000)] == [True, True, False, False, False]
    whole = load_config(None, on).nerf  # 0: the whole run
    assert all(priors_on(whole, s) for s in (0, 30, 10**6))


@pytest.mark.parametrize(
    "sets, message",
    [
        (["nerf.priors_until=-1"], r"nerf.priors_until: expected an integer >= 0, got -1"),
        (
            ["nerf.priors_until=10", "nerf.sample_color_weight=0", "nerf.entropy_weight=0"],
            r"nerf.priors_until: .* but both are 0",
        ),
    ],
)
def test_bad_priors_until_is_refused(sets, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, ["experiment=nerf", "nerf.entropy_weight=0.001", *sets])


def loop_view_terms(m, origins, directions) -> list[float]:
    """The view-consistency loss's per-sample terms from the plain renderer, ray by ray (so
    in ray order): each ray's coloured samples coloured again along the previous ray's
    direction, weight x squared difference."""
    terms, background = [], torch.ones(3, dtype=directions.dtype)
    for r in range(origins.shape[0]):
        out = m.render(origins[r : r + 1], directions[r : r + 1], background)
        other = directions[r - 1].expand(out["sample_rgb"].shape[0], 3)  # [V, 3]
        views = positional_encoding(other, m.views.frequencies)  # [V, E]
        if m.views.normals is not None:  # nerf.reflected_views: about the sample's normal
            mirrored, cos = reflect(other, m.views.normals(out["sample_points"]))
            views = torch.cat([views, positional_encoding(mirrored, m.views.frequencies), cos], -1)
        rgb = m.shade(out["sample_features"], views)
        error = (out["sample_rgb"] - rgb).square().sum(-1)
        terms += (out["sample_weight"] * error).detach().tolist()
    return terms


@pytest.mark.parametrize("stride, reflected", [(1, False), (3, False), (3, True)])
def test_view_consistency_loss_is_the_weighted_colour_change_with_another_rays_direction(
    stride, reflected
):
    """Every coloured sample (stride 1), or every third of the batch's list, three times
    over; padding rows of a planned render add nothing either way. With reflected views the
    other direction is mirrored about each sample's own normal."""
    torch_model, fused = pair(reflected_views=reflected)
    origins, directions = (x.double() for x in rays(40, seed=16))
    terms = loop_view_terms(torch_model, origins, directions)
    want = stride * sum(terms[::stride]) / 40
    assert want > 0 and len(terms) > 50
    for m in (torch_model, fused):
        out = m.render(origins, directions, torch.ones(3, dtype=torch.float64))
        got = view_consistency_loss(m, out, directions, stride).item()
        assert math.isclose(got, want, rel_tol=1e-9)
    fused.sizing = "planned"
    fused.render(origins, directions, torch.ones(3, dtype=torch.float64))  # measures the counts
    planned = fused.render(origins, directions, torch.ones(3, dtype=torch.float64))
    assert int(planned["sample_ray"].max()) == 40
    got = view_consistency_loss(fused, planned, directions, stride).item()
    assert math.isclose(got, want, rel_tol=1e-9)


def test_view_consistency_loss_is_zero_for_a_colour_blind_to_the_view():
    m = model(occupancy_threshold=1e-3)
    m.update_occupancy()
    origins, directions = rays(64, seed=17)
    out = m.render(origins, directions, torch.ones(3))
    loss = view_consistency_loss(m, out, directions)
    view_dims = 3 * (1 + 2 * m.views.frequencies)  # the first layer's last inputs
    (grad,) = torch.autograd.grad(loss, [m.mlp[0].weight])
    assert loss > 0 and grad[:, -view_dims:].abs().max() > 0
    with torch.no_grad():
        m.mlp[0].weight[:, -view_dims:] = 0  # the MLP ignores the view direction
    out = m.render(origins, directions, torch.ones(3))
    assert view_consistency_loss(m, out, directions) == 0


@pytest.mark.parametrize(
    "key", ["nerf.sample_color_weight", "nerf.entropy_weight", "nerf.view_consistency_weight"]
)
def test_negative_weights_are_refused(key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config(None, ["experiment=nerf", f"{key}=-0.1"])


@pytest.mark.parametrize("value", ["0", "-2", "1.5"])
def test_a_view_consistency_stride_below_one_or_fractional_is_refused(value):
    with pytest.raises(ConfigError, match=r"nerf\.view_consistency_stride"):
        load_config(None, ["experiment=nerf", f"nerf.view_consistency_stride={value}"])


def test_bfloat16_mlp_renders_close_to_float32_with_float32_gradients():
    full = model(occupancy_threshold=1e-3)
    half = model(occupancy_threshold=1e-3, mlp_dtype="bfloat16")
    half.load_state_dict(full.state_dict())
    for m in (full, half):
        m.update_occupancy()
    origins, directions = rays(200, seed=15)
    want = full.render(origins, directions, torch.ones(3))
    got = half.render(origins, directions, torch.ones(3))
    assert got["rgb"].dtype == got["sample_rgb"].dtype == torch.float32
    torch.testing.assert_close(got["rgb"], want["rgb"], rtol=0, atol=2e-2)
    assert (got["rgb"] - want["rgb"]).abs().max() > 0  # bfloat16 products did run
    (grad,) = torch.autograd.grad(got["rgb"].square().sum(), [half.color.features])
    assert grad.dtype == torch.float32 and grad.abs().max() > 0
    with pytest.raises(ValueError, match="mlp_dtype"):
        model(mlp_dtype="float16")
    with pytest.raises(ConfigError, match=r"nerf\.mlp_dtype"):
        load_config(None, ["experiment=nerf", "nerf.mlp_dtype=half"])
