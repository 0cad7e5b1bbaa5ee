"""The `[multires]` table: the shape of a `grid.MultiresGrid` encoding (instant-ngp's hash
grid) and its Adam learning rate, for the experiments that can choose one instead of a dense
grid (nerf: `nerf.density_encoding`, `nerf.color_encoding`; sdf: `sdf.encoding`).

Its own table, read by the experiments that list it among their sections, so that each of
them reads the same keys with the same meanings. Imports neither torch nor grid.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .errors import ConfigError
from .schema import ADAM_COPIES, Need, doc, positive

#: Adam's settings for a multires table and its decoder (instant-ngp's): betas and eps.
NGP_BETAS = (0.9, 0.99)
NGP_EPS = 1e-15
#: grid.MultiresGrid's limits: levels, cells per axis of a level, rows of a table.
MAX_LEVELS = 32
MAX_RESOLUTION = 1 << 24
MAX_LOG2_TABLE_SIZE = 30


@dataclass
class MultiresConfig:
    STEP_KEYS = ("level_every",)  # counted in steps: train.short_runs scales it
    levels: int = doc(
        "Multiresolution encoding (`grid.MultiresGrid`: nerf.density_encoding, "
        "nerf.color_encoding or sdf.encoding = `multires`): L, its levels, each finer than "
        "the last by the same factor, in [1, 32].",
        16,
    )
    features: int = doc("Multiresolution encoding: F, features per level and vertex.", 2)
    log2_table_size: int = doc(
        "Multiresolution encoding: log2 of T, the rows of each level's table (a level whose "
        "vertices fit is stored densely, a finer one hashed into the T rows), in [1, 30]; "
        "the table holds L x 2^T x F parameters (16 x 2^19 x 2: 16.8M, 64 MiB in float32).",
        19,
    )
    base_resolution: int = doc(
        "Multiresolution encoding: cells per axis of the coarsest level over its box.", 16
    )
    finest_resolution: int = doc(
        "Multiresolution encoding: cells per axis of the finest level over its box, >= "
        "base_resolution; the levels grow by (finest / base)^(1 / (levels - 1)) each.",
        2048,
    )
    lr: float = doc(
        "Multiresolution encoding: Adam learning rate of the tables and of the MLP that "
        "decodes them (eps 1e-15; betas 0.9, 0.99 in nerf, as instant-ngp, train.betas in "
        "sdf), decaying as the experiment's other learning rates do.",
        0.01,
    )
    level_every: int = doc(
        "Multiresolution encoding, coarse to fine: steps between one level switched on and "
        "the next (grid.MultiresGrid.set_active_levels: the finer levels give zeros until "
        "then), from `start_levels` at the first step; 0: every level from the start.",
        0,
    )
    start_levels: int = doc(
        "Multiresolution encoding, with level_every > 0: the levels (the coarsest ones) that "
        "give features from the first step, in [1, levels].",
        1,
    )


def active_levels(m: MultiresConfig, step: int) -> int:
    """How many levels give features at `step` (`level_every`, `start_levels`)."""
    if m.level_every == 0:
        return m.levels
    return min(m.levels, m.start_levels + step // m.level_every)


def growth_factor(m: MultiresConfig) -> float:
    """The scale between consecutive levels, (finest / base)^(1 / (levels - 1)) (1 for one
    level), nudged up where floating point would leave the finest level one cell short
    (`grid.multires_grid.level_resolutions` floors base * b^l)."""
    if m.levels == 1:
        return 1.0
    b = (m.finest_resolution / m.base_resolution) ** (1 / (m.levels - 1))
    while math.floor(m.base_resolution * b ** (m.levels - 1)) < m.finest_resolution:
        b = math.nextafter(b, math.inf)
    return b


def table_entries(m: MultiresConfig) -> int:
    """L x 2^log2_table_size x F: the floats of one table."""
    return m.levels * (1 << m.log2_table_size) * m.features


def encoding_options(m: MultiresConfig) -> dict[str, Any]:
    """`grid.MultiresGrid`'s keyword arguments for the table (all but the box and device)."""
    return {
        "levels": m.levels,
        "features": m.features,
        "table_size": 2**m.log2_table_size,
        "base_resolution": m.base_resolution,
        "growth_factor": growth_factor(m),
    }


def validate_multires(m: MultiresConfig) -> None:
    """Check `[multires]`; ConfigError naming the key."""
    if not 1 <= m.levels <= MAX_LEVELS:
        raise ConfigError(
            f"multires.levels: expected an integer in [1, {MAX_LEVELS}], got {m.levels}"
        )
    if m.features < 1:
        raise ConfigError(f"multires.features: expected an integer >= 1, got {m.features}")
    if not 1 <= m.log2_table_size <= MAX_LOG2_TABLE_SIZE:
        raise ConfigError(
            f"multires.log2_table_size: expected an integer in [1, {MAX_LOG2_TABLE_SIZE}], "
            f"got {m.log2_table_size}"
        )
    if not 1 <= m.base_resolution <= MAX_RESOLUTION:
        raise ConfigError(
            f"multires.base_resolution: expected an integer in [1, {MAX_RESOLUTION}], "
            f"got {m.base_resolution}"
        )
    if not m.base_resolution <= m.finest_resolution <= MAX_RESOLUTION:
        raise ConfigError(
            f"multires.finest_resolution: expected an integer in [multires.base_resolution = "
            f"{m.base_resolution}, {MAX_RESOLUTION}], got {m.finest_resolution}"
        )
    if m.levels == 1 and m.finest_resolution != m.base_resolution:
        raise ConfigError(
            f"multires.finest_resolution: with multires.levels = 1 the only level is the "
            f"coarsest: expected {m.base_resolution} (multires.base_resolution), got "
            f"{m.finest_resolution}"
        )
    positive(m.lr, "multires.lr")
    if m.level_every < 0:
        raise ConfigError(
            f"multires.level_every: expected an integer >= 0 (0: every level from the start), "
            f"got {m.level_every}"
        )
    if not 1 <= m.start_levels <= m.levels:
        raise ConfigError(
            f"multires.start_levels: expected an integer in [1, multires.levels = {m.levels}], "
            f"got {m.start_levels}"
        )


def table_need(m: MultiresConfig, what: str) -> Need:
    """One multires table in float32 with its gradient and Adam's two moments."""
    size = table_entries(m)
    return Need(
        "multires.log2_table_size",
        f"the {what} of {m.levels} x 2^{m.log2_table_size} x {m.features} with its gradient "
        "and 2 Adam moments",
        size * 4 * ADAM_COPIES,
    )
