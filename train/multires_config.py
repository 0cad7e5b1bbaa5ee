"""The `[multires]` table: a multiresolution (dense + hashed) feature grid, `grid.MultiresGrid`.

Its own section, named by no experiment, so that every experiment that can encode its
points with a `MultiresGrid` (sdf: `sdf.encoding = "multires"`) reads the same keys with
the same meanings: L levels from `base_resolution` to `finest_resolution` cells per axis
over the box, F features per level, 2^`log2_table_size` rows per level, trained at `lr`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .errors import ConfigError
from .schema import doc, positive

#: grid.MultiresGrid's limits: levels, and cells per axis of a level.
MAX_LEVELS = 32
MAX_RESOLUTION = 1 << 24
#: Rows per level: 2^log2_table_size < 2^31.
MAX_LOG2_TABLE_SIZE = 30


@dataclass
class MultiresConfig:
    levels: int = doc(
        'sdf with `sdf.encoding = "multires"`: L, the levels of the multiresolution grid '
        "(1 to 32).",
        16,
    )
    features: int = doc("sdf, multires: F, features per level (the encoding has L * F).", 2)
    log2_table_size: int = doc(
        "sdf, multires: each level's table has 2^this rows (1 to 30); a level whose vertices "
        "fit is stored densely, a finer one hashed into them (instant-ngp). Memory: L x "
        "2^this x F floats (16 x 2^19 x 2 = 16.8M, a 256^3 grid's).",
        19,
    )
    base_resolution: int = doc(
        "sdf, multires: cells per axis of the coarsest level over the box.", 16
    )
    finest_resolution: int = doc(
        "sdf, multires: cells per axis of the finest level over the box (>= "
        "base_resolution); each level is (finest / base)^(1 / (L - 1)) times finer than the "
        "last.",
        2048,
    )
    lr: float = doc(
        "sdf, multires: Adam learning rate of the table and the decoder at step 0 (betas "
        "`train.betas`, eps 1e-15); it decays as `train.lr` does (to `train.lr_final` / "
        "`train.lr` of it).",
        0.01,
    )


def growth_factor(m: Any) -> float:
    """The scale between consecutive levels, (finest / base)^(1 / (L - 1)) (1 for one
    level), nudged up where floating point would leave the finest level one cell short
    (`grid.multires_grid.level_resolutions` floors base * b^l)."""
    if m.levels == 1:
        return 1.0
    b = (m.finest_resolution / m.base_resolution) ** (1 / (m.levels - 1))
    while math.floor(m.base_resolution * b ** (m.levels - 1)) < m.finest_resolution:
        b = math.nextafter(b, math.inf)
    return b


def table_entries(m: Any) -> int:
    """L x 2^log2_table_size x F: the floats of the table."""
    return m.levels * (1 << m.log2_table_size) * m.features


def validate_multires(m: Any) -> None:
    """ConfigError naming the first key of `[multires]` with an impossible value."""
    for key, low, high in (
        ("levels", 1, MAX_LEVELS),
        ("features", 1, None),
        ("log2_table_size", 1, MAX_LOG2_TABLE_SIZE),
        ("base_resolution", 1, MAX_RESOLUTION),
        ("finest_resolution", 1, MAX_RESOLUTION),
    ):
        value = getattr(m, key)
        if value < low or (high is not None and value > high):
            span = f"in [{low}, {high}]" if high is not None else f">= {low}"
            raise ConfigError(f"multires.{key}: expected an integer {span}, got {value}")
    if m.finest_resolution < m.base_resolution:
        raise ConfigError(
            f"multires.finest_resolution: expected at least multires.base_resolution = "
            f"{m.base_resolution}, got {m.finest_resolution}"
        )
    if m.levels == 1 and m.finest_resolution != m.base_resolution:
        raise ConfigError(
            f"multires.finest_resolution: with multires.levels = 1 it must equal "
            f"multires.base_resolution = {m.base_resolution}, got {m.finest_resolution}"
        )
    positive(m.lr, "multires.lr")
