"""DirectVoxGO v2 (its unbounded path) with two run-time stand-ins for what the anchor copy lacks.

    python bench/compare/dvgo/dvgo_v2_shims.py DVGO_DIR/run_dvgo.py [run.py arguments...]

Runs DirectVoxGO's `run_dvgo.py` (its runner for current PyTorch) in this process after two
changes; DirectVoxGO's files are not touched and the project never imports them.
bench/compare/dvgo/dvgo_unbounded.py runs DirectVoxGO through this file.

* `torch_efficient_distloss`: DirectVoxGO v2's unbounded configs weigh mip-NeRF 360's
  distortion loss (0.01), which its run.py imports from that package
  (`flatten_eff_distloss`, a CUDA extension); the anchor's shim of it raises
  NotImplementedError. A module of that name holding `flatten_eff_distloss` below goes into
  `sys.modules` first, so run.py's import finds it, not the shim.
* `imageio.imread`: its LLFF loader reads PNGs with `imageio.imread(f, ignoregamma=True)`, a
  keyword of imageio's old PNG reader that the current Pillow plugin refuses (TypeError);
  the keyword is dropped. The PNGs bench/compare/dvgo/dvgo_llff.py writes carry no gamma chunk, so
  it changed nothing there.

The loss, for each ray with samples i sorted by their normalised distance s_i (weights w_i,
each sample an interval of length `interval` in s):

    L_ray = sum_{i,j} w_i w_j |s_i - s_j| + 1/3 sum_i w_i^2 interval

computed in O(N) with prefix sums over each ray's samples (for s sorted along the ray, the
double sum is 2 sum_i w_i (s_i W_<i - (ws)_<i), W_<i and (ws)_<i the sums over the ray's
earlier samples), and divided by the number of rays as the package does: ray_id.max() + 1,
rays without samples before the last one included. Autograd gives the gradient of w; s and
the interval get none (the package returns none for them either).
"""

from __future__ import annotations

import os
import runpy
import sys
import types

import imageio
import torch
from torch import Tensor


def segment_starts(ray_id: Tensor) -> Tensor:
    """ray_id: [N] non-decreasing -> [N] the index of the first sample of each sample's ray."""
    index = torch.arange(len(ray_id), device=ray_id.device)
    first = torch.ones_like(ray_id, dtype=torch.bool)
    first[1:] = ray_id[1:] != ray_id[:-1]
    return torch.cummax(torch.where(first, index, 0), dim=0).values


def exclusive_segment_cumsum(values: Tensor, starts: Tensor) -> Tensor:
    """values: [N] float64, starts: [N] (`segment_starts`) -> [N] the sum of the values of
    the same ray before each sample (0 at a ray's first sample)."""
    before = torch.cumsum(values, dim=0) - values  # over all earlier samples, any ray
    return before - before[starts]


def flatten_eff_distloss(w: Tensor, s: Tensor, interval: float | Tensor, ray_id: Tensor) -> Tensor:
    """The distortion loss over flattened samples, averaged over rays (module docstring).

    w: [N] compositing weights; s: [N] normalised distances, sorted within each ray;
    interval: a number or [N], each sample's length in s; ray_id: [N] int64 ray index,
    non-decreasing (each ray's samples together). Returns a scalar of w's dtype.
    """
    if w.numel() == 0:
        return w.sum()
    # float64 prefix sums: a batch's running sum of weights reaches thousands, against
    # single weights of 1e-4
    w64, s64 = w.double(), s.detach().double()
    starts = segment_starts(ray_id)
    w_before = exclusive_segment_cumsum(w64, starts)
    ws_before = exclusive_segment_cumsum(w64 * s64, starts)
    pairs = 2 * (w64 * (s64 * w_before - ws_before)).sum()
    interval = interval.detach().double() if torch.is_tensor(interval) else interval
    within = (interval * w64.square()).sum() / 3
    n_rays = ray_id.max() + 1
    return ((pairs + within) / n_rays).to(w.dtype)


def brute_force_distloss(w: Tensor, s: Tensor, interval: float, ray_id: Tensor) -> Tensor:
    """The O(N^2) definition, for tests: the double sum over each ray's samples."""
    same = ray_id[:, None] == ray_id[None, :]
    pairs = (w[:, None] * w[None, :] * (s[:, None] - s[None, :]).abs() * same).sum()
    within = (interval * w.square()).sum() / 3
    return (pairs + within) / (ray_id.max() + 1)


def install() -> None:
    """`torch_efficient_distloss` -> a module holding `flatten_eff_distloss` above;
    `imageio.imread` without `ignoregamma`."""
    module = types.ModuleType("torch_efficient_distloss")
    module.flatten_eff_distloss = flatten_eff_distloss
    module.__doc__ = "bench/compare/dvgo/dvgo_v2_shims.py: the distortion loss in plain PyTorch"
    sys.modules["torch_efficient_distloss"] = module
    read = imageio.imread

    def imread(uri, *args, ignoregamma=None, **kwargs):
        return read(uri, *args, **kwargs)

    imageio.imread = imread
    print(
        "dvgo_v2_shims: torch_efficient_distloss.flatten_eff_distloss -> plain PyTorch; "
        "imageio.imread without ignoregamma",
        flush=True,
    )


def main() -> None:
    if len(sys.argv) < 2 or not sys.argv[1].endswith("run_dvgo.py"):
        usage = "usage: python bench/compare/dvgo/dvgo_v2_shims.py DVGO_DIR/run_dvgo.py [ARGS...]"
        raise SystemExit(usage)
    runner = os.path.abspath(sys.argv[1])
    install()
    sys.argv = [runner, *sys.argv[2:]]
    runpy.run_path(runner, run_name="__main__")


if __name__ == "__main__":
    main()
