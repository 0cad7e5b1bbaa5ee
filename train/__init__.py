"""Config-driven fitting of a `grid.VoxelGrid` to a target field.

    python -m train --config configs/default.toml [--set key=value ...] [--out DIR]

Modules: `config` (schema, parsing, validation), `targets` (fields), `loop` (the
loop and checkpoints), `metrics` (PSNR, metrics.jsonl), `pictures` (PNG output),
`errors` (the one-line errors, exit code 2, and `read_input` for every file read),
`rundir` (when a run may start in a directory; what `--overwrite` deletes),
`dependencies` (optional packages checked at start-up).
`train.loop` imports `grid`, which builds the native ops on first use; the other
modules do not, so config, file, run-directory and dependency errors come back at once.
"""

from .config import Config, ConfigError, load_config

__all__ = ["Config", "ConfigError", "load_config"]
