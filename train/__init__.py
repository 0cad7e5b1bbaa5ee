"""Config-driven training with `grid.VoxelGrid`: a grid fitted to a target field, or a
radiance field (NeRF) from posed images.

    python -m train --config configs/default.toml [--set key=value ...] [--out DIR]
    python -m train --config configs/nerf_scene.toml

Modules: `config` (schema, parsing, validation), `loop` (the loop skeleton, checkpoints),
one module per experiment: `field` (with `targets`, `pictures`) and `nerf` (with
`nerf_model`, the VoxelNeRF model; `nerf_pictures`; `blender`, the Blender-format reader;
`nerf_scene`, the shipped procedural scene), `metrics` (PSNR, metrics.jsonl), `errors`
(the one-line errors, exit code 2, and `read_input` for every file read), `rundir` (when
a run may start in a directory; what `--overwrite` deletes), `dependencies` (optional
packages checked at start-up).
`train.loop` imports `grid`, which builds the native ops on first use; the other
modules do not, so config, file, run-directory and dependency errors come back at once.
"""

from .config import Config, ConfigError, load_config

__all__ = ["Config", "ConfigError", "load_config"]
