"""`MultiresGrid.from_tcnn_config`: tiny-cuda-nn grid encoding configs mapped onto our levels,
features, table size and resolutions (the closest our floor(base * growth^l) formula allows to
tiny-cuda-nn's base * per_level_scale^l - 1 cells), its defaults, and bad configs raising with
the key named."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

import grid
from grid import reference
from grid.multires_grid import level_resolutions, tcnn_level_scales

# instant-ngp's NeRF encoding as nerfstudio and most ports write it: 16 levels from 16 to
# 2048 vertices, per_level_scale = exp(log(2048 / 16) / 15).
NGP = {
    "otype": "HashGrid",
    "n_levels": 16,
    "n_features_per_level": 2,
    "log2_hashmap_size": 19,
    "base_resolution": 16,
    "per_level_scale": 1.3819,
}


def _worst(resolutions, scales):
    """The largest |log(ours / theirs)| over the levels."""
    return max(abs(math.log(r / s)) for r, s in zip(resolutions, scales, strict=True))


def test_tcnn_scales_are_its_grid_scale():
    """tiny-cuda-nn's grid_scale(l) = base * per_level_scale^l - 1, written out by hand."""
    assert tcnn_level_scales(3, 16, 2.0) == [15.0, 31.0, 63.0]
    assert tcnn_level_scales(2, 16, 1.5) == [15.0, 23.0]


def test_instant_ngp_config_maps_to_its_levels():
    enc = grid.MultiresGrid.from_tcnn_config(NGP, device="meta")  # shapes only, no memory
    assert enc.table.shape == (16, 2**19, 2) and enc.get_out_dim() == 32
    assert enc.resolutions[0] == 15  # tiny-cuda-nn's level 0 spans 16 - 1 cells
    scales = [16 * 1.3819**level - 1 for level in range(16)]
    assert _worst(enc.resolutions, scales) < math.log(1.06)
    assert enc.resolutions == sorted(enc.resolutions) and enc.resolutions[-1] > 2000
    # tiny-cuda-nn stores a level densely when its (ceil(scale) + 1)^3 vertices fit 2^19 rows;
    # ours when (R + 1)^3 do: the same levels, give or take the one at the boundary.
    tcnn_dense = sum((math.ceil(s) + 1) ** 3 <= 2**19 for s in scales)
    assert tcnn_dense == 5 and abs(enc.dense_levels - tcnn_dense) <= 1


@pytest.mark.parametrize("per_level_scale", [1.26, 1.3819, 1.5, 2.0])
def test_resolutions_are_the_closest_our_formula_allows(per_level_scale):
    """No base near tiny-cuda-nn's and no growth factor on a fine scan does better than the
    mapping's choice (the largest ratio between a level's cells and tiny-cuda-nn's)."""
    config = dict(NGP, per_level_scale=per_level_scale)
    enc = grid.MultiresGrid.from_tcnn_config(config, device="meta")
    scales = tcnn_level_scales(16, 16, per_level_scale)
    chosen = _worst(enc.resolutions, scales)
    growths = torch.linspace(per_level_scale * 0.98, per_level_scale * 1.02, 801).tolist()
    scanned = min(
        _worst(level_resolutions(16, base, g), scales) for base in (14, 15, 16, 17) for g in growths
    )
    assert chosen <= scanned + 1e-12
    assert chosen < math.log(1.06)


def test_defaults_are_tcnns():
    """A bare HashGrid: 16 levels of 2 features, 2^19 rows, base 16, per_level_scale 2."""
    enc = grid.MultiresGrid.from_tcnn_config({"otype": "HashGrid"}, device="meta")
    assert enc.table.shape == (16, 2**19, 2)
    assert _worst(enc.resolutions, tcnn_level_scales(16, 16, 2.0)) < math.log(1.06)


def test_grid_otype_names_and_n_features():
    """otype "Grid" (case-insensitive) is a hash grid; n_features counts all levels' features."""
    config = {"otype": "grid", "n_features": 8, "n_features_per_level": 4, "base_resolution": 4}
    enc = grid.MultiresGrid.from_tcnn_config(config)
    assert enc.table.shape == (2, 2**19, 4) and enc.resolutions[0] == 3
    assert enc.bounds.tolist() == [[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]]  # tcnn's unit cube


def test_dense_grid_is_dense_at_every_level():
    config = {"otype": "DenseGrid", "n_levels": 3, "base_resolution": 4, "per_level_scale": 2}
    enc = grid.MultiresGrid.from_tcnn_config(config)
    # tcnn's 4 * 2^l - 1 = 3, 7, 15 is not geometric: 3 * g^l can hit 3 and 7, then 16 at best
    assert enc.resolutions == [3, 7, 16]
    assert enc.table.shape == (3, 17**3, 2) and enc.dense_levels == 3
    # Without per_level_scale, tcnn's DenseGrid reaches 256 cells at its finest level.
    enc = grid.MultiresGrid.from_tcnn_config({"otype": "DenseGrid", "n_levels": 2}, device="meta")
    assert enc.resolutions == [15, 255] and enc.dense_levels == 2


def test_bounds_and_options_pass_through():
    """The box plays tcnn's unit cube; init_scale and dtype go to the constructor."""
    bounds = ((-2.0, -1.0, 0.0), (2.0, 1.0, 1.0))
    config = {"otype": "HashGrid", "n_levels": 4, "log2_hashmap_size": 10, "base_resolution": 4}
    enc = grid.MultiresGrid.from_tcnn_config(config, bounds, init_scale=0.5, dtype=torch.float64)
    assert enc.table.dtype == torch.float64 and 0.1 < enc.table.abs().max() <= 0.5
    lo, hi = torch.tensor(bounds, dtype=torch.float64)
    xyz = lo + torch.rand(20, 3, dtype=torch.float64) * (hi - lo)
    want = reference.multires(enc.table, (xyz - lo) / (hi - lo) * 2 - 1, enc.resolutions)
    assert_close(enc(xyz), want)


@pytest.mark.parametrize(
    "config, message",
    [
        ({"n_levels": 16}, "otype: missing"),
        ({"otype": "TiledGrid"}, "otype: expected one of"),
        ({"otype": "Frequency"}, "otype: expected one of"),
        ({"otype": "Grid", "type": "Tiled"}, "type: expected one of"),
        ({"otype": "HashGrid", "interpolation": "Smoothstep"}, "interpolation: expected one of"),
        ({"otype": "HashGrid", "hash": "Prime"}, "hash: expected one of"),
        ({"otype": "HashGrid", "stochastic_interpolation": True}, "stochastic_interpolation:"),
        ({"otype": "HashGrid", "n_dims_to_encode": 2}, "n_dims_to_encode: expected 3"),
        ({"otype": "HashGrid", "n_levels": 33}, r"n_levels: expected an int in \[1, 32\]"),
        ({"otype": "HashGrid", "n_levels": 8, "n_features": 16}, "n_levels: give n_levels"),
        ({"otype": "HashGrid", "n_features": 7}, "n_features: expected a multiple of"),
        ({"otype": "HashGrid", "n_features_per_level": 0}, "n_features_per_level: expected"),
        ({"otype": "HashGrid", "log2_hashmap_size": 31}, "log2_hashmap_size: expected an int"),
        ({"otype": "HashGrid", "base_resolution": 1}, "base_resolution: expected an int >= 2"),
        ({"otype": "HashGrid", "base_resolution": 16.0}, "base_resolution: expected an int"),
        ({"otype": "HashGrid", "per_level_scale": 0.5}, "per_level_scale: expected a number"),
        ({"otype": "HashGrid", "per_level_scale": 4.0}, "per_level_scale: the finest level"),
        ({"otype": "DenseGrid", "per_level_scale": 1.5}, "per_level_scale: a dense finest"),
        ({"otype": "HashGrid", "n_level": 16}, "n_level: not a key"),
    ],
)
def test_bad_configs_name_the_key(config, message):
    with pytest.raises(ValueError, match=message):
        grid.MultiresGrid.from_tcnn_config(config, device="meta")


def test_config_must_be_a_dict():
    with pytest.raises(ValueError, match="config: expected a dict"):
        grid.MultiresGrid.from_tcnn_config([("otype", "HashGrid")])
