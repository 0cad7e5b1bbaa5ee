"""Config-driven fitting of a `grid.VoxelGrid` to a target field.

    python -m train --config configs/default.toml [--set key=value ...] [--out DIR]

Modules: `config` (schema, parsing, validation), `targets` (fields), `loop` (the
loop and checkpoints), `metrics` (PSNR, metrics.jsonl), `pictures` (PNG output).
`train.loop` imports `grid`, which builds the native ops on first use; the config
modules do not, so config errors come back at once.
"""

from .config import Config, ConfigError, load_config

__all__ = ["Config", "ConfigError", "load_config"]
