"""Config-driven training with `grid.VoxelGrid`: a grid fitted to a target field, a signed
distance grid fitted to points, or a radiance field (NeRF) from posed images.

    python -m train --config configs/default.toml [--set key=value ...] [--out DIR]
    python -m train --config configs/nerf_scene.toml

Shared machinery (knows no experiment by name): `loop` (the loop skeleton), `checkpoint`
(checkpoint.pt: atomic writes, resume), `interrupt` (SIGINT/SIGTERM, timed checkpoints),
`memory` (the estimate before allocating, out-of-memory errors), `config` (the whole
schema, parsing, validation, writing), `schema` (the vocabulary of tables and
`ExperimentSpec`), `experiments` (the registry: name -> package), `errors` (the one-line
errors, exit code 2, `read_input` for every file read, `writing` for every run file
written), `rundir` (when a run may start in a directory; what `--overwrite` deletes),
`dependencies` (optional packages checked at start-up), `distributed` (torchrun),
`metrics` (PSNR, metrics.jsonl), `pictures` (common plotting), `grid_schedule` (learning
rate and upsampling of one grid), `shapes` (analytic signed distances).
One package per experiment, each holding its tables, data, model, evaluation and pictures:
`field/`, `sdf/`, `nerf/`.
`train.loop` imports `grid`, which builds the native ops on first use; the config, file,
run-directory and dependency checks do not, so their errors come back at once.
"""

import os
import time

from .lazy import lazy_getattr

STARTED = time.perf_counter()  # before torch is imported: the run's phases count from here

# libgomp (torch's CPU threads and grid's) spins 300k iterations before a waiting thread
# sleeps; when other processes share the cores, the spinning takes the time the working
# threads need. 1000 iterations: the same speed alone, two fits on 2 shared cores 40 ->
# 22 s each (bench/NOTES.md). Read once, when torch loads libgomp: so before torch.
os.environ.setdefault("GOMP_SPINCOUNT", "1000")

# The nerf experiment's PyTorch sampling (contracted scenes) allocates buffers of a new size
# every step; in fixed-size segments the caching allocator reserved 29 GiB for 3.4 GiB of
# tensors (configs/nerf_unbounded_gpu.toml, H100), in expandable segments 3.9 GiB, at the
# same speed (bench/NOTES.md, U3). Read when CUDA's allocator starts; the user's setting wins.
if not {"PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"} & set(os.environ):
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"

__all__ = ["Config", "ConfigError", "load_config"]


# `train.config` imports torch: not for `grid-train --help`
__getattr__ = lazy_getattr(__name__, __name__, dict.fromkeys(__all__, ".config"))
