"""DirectVoxGO with its dense grid swapped for ours, everything else its own.

    python bench/compare/dvgo/dvgo_grid.py DVGO_DIR/run_dvgo.py [run.py arguments...]

Runs DirectVoxGO's `run_dvgo.py` (its runner for current PyTorch) in this process after two
run-time changes to its already imported modules; its files are not touched and the project
never imports them:

* `lib.grid.DenseGrid` -> `VoxelDenseGrid`: the same interface (constructor, `grid` a
  `[1, C, X, Y, Z]` Parameter, `forward(xyz [..., 3]) -> [..., C]` (C = 1 squeezed),
  `scale_volume_grid`, `total_variation_add_grad`, `get_dense_grid`, `-=`), with the
  parameter stored channels last (`torch.channels_last_3d`) and sampled by `grid.sample`
  on `grid.channels_last(self.grid)`: no copy, no flip to (z, y, x). Its dvgo.py indexes,
  masks and checkpoints that Parameter as before.
* `lib.utils.MaskedAdam` -> `memory_order_adam(MaskedAdam)`: its own optimiser and CUDA
  kernels (per-voxel learning rate, masked update), given each tensor's memory-order view:
  the kernels are elementwise but refuse non-contiguous tensors, and a channels-last
  `[1, C, X, Y, Z]` grid with C > 1 is not `is_contiguous()`.

What differs: the total-variation gradient comes from `grid.total_variation_add_grad_` (the
gradient of the mean squared neighbour difference, scaled to DirectVoxGO's unclamped
gradient; its kernel clamps each difference to [-1, 1] and, in its sparse mode, skips voxels
with a zero gradient): DirectVoxGO's Blender configs use no total variation.
bench/compare/dvgo/bench_dvgo.py --grid ours runs DirectVoxGO through this file.
"""

from __future__ import annotations

import os
import runpy
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the checkout: bench, grid, train

import grid  # noqa: E402
from grid import _backend  # noqa: E402


class VoxelDenseGrid(nn.Module):
    """DirectVoxGO's `DenseGrid` on `grid.sample`.

    Args:
        channels: C.
        world_size: (X, Y, Z) voxels.
        xyz_min, xyz_max: [3] the box (voxel centres at its corners, align_corners=True).

    Attributes:
        grid: `nn.Parameter` [1, C, X, Y, Z] in `torch.channels_last_3d` memory.
        xyz_min, xyz_max: buffers [3].
    """

    def __init__(self, channels: int, world_size, xyz_min, xyz_max, **kwargs) -> None:
        super().__init__()
        if channels < 1:
            raise ValueError(f"channels: expected >= 1, got {channels}")
        self.channels = channels
        self.world_size = world_size
        self.register_buffer("xyz_min", torch.Tensor(xyz_min))
        self.register_buffer("xyz_max", torch.Tensor(xyz_max))
        self.grid = nn.Parameter(channels_last_zeros(channels, world_size))
        self._box = self._read_box()

    def _read_box(self) -> list[float]:
        # read once on the host, not at every call (a device synchronisation)
        return grid.ops.box_list(torch.stack([self.xyz_min, self.xyz_max]))

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs) -> None:
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        self._box = self._read_box()

    def forward(self, xyz: Tensor) -> Tensor:
        """xyz: [..., 3] world points -> [..., C] ([...] for C = 1)."""
        out = grid.sample(grid.channels_last(self.grid), xyz, bounds=self._box)
        return out.squeeze(-1) if self.channels == 1 else out

    def scale_volume_grid(self, new_world_size) -> None:
        volume = F.interpolate(
            self.grid.data, size=tuple(new_world_size), mode="trilinear", align_corners=True
        )
        self.grid = nn.Parameter(volume.contiguous(memory_format=torch.channels_last_3d))

    def total_variation_add_grad(self, wx: float, wy: float, wz: float, dense_mode: bool) -> None:
        """DirectVoxGO adds `w / 6 * (v - n)` per neighbour n (clamped); the mean squared
        difference over the 3 axes has `2 (v - n) / (3 D)` with D differences per axis."""
        if not wx == wy == wz:
            raise ValueError(f"total variation: expected equal weights, got {wx, wy, wz}")
        if self.grid.grad is None:
            self.grid.grad = torch.zeros_like(self.grid)
        x, y, z, c = grid.channels_last(self.grid).shape
        per_axis = c * x * y * z  # about (X - 1) Y Z C: the boundary terms are ignored
        weight = float(wx) / 6 * 3 * per_axis / 2
        grid.total_variation_add_grad_(
            grid.channels_last(self.grid.grad), grid.channels_last(self.grid), weight
        )

    def get_dense_grid(self) -> Tensor:
        return self.grid

    @torch.no_grad()
    def __isub__(self, val):
        self.grid.data -= val
        return self

    def extra_repr(self) -> str:
        size = [int(s) for s in self.world_size]
        return f"channels={self.channels}, world_size={size}, grid.sample, channels last"


def channels_last_zeros(channels: int, size: Sequence[int]) -> Tensor:
    """zeros [1, C, X, Y, Z] in channels-last memory (the default device and dtype)."""
    size = tuple(int(s) for s in size)
    return torch.zeros(1, channels, *size).contiguous(memory_format=torch.channels_last_3d)


def memory_order(t: Tensor) -> Tensor:
    """`t`'s dimensions permuted by decreasing stride: for a dense tensor, a contiguous
    view of its memory (which elementwise kernels may walk as they would `t.contiguous()`)."""
    order = sorted(range(t.dim()), key=lambda d: -t.stride(d))
    view = t.permute(order)
    if not view.is_contiguous():
        raise ValueError(f"a tensor with gaps or overlaps: strides {t.stride()}")
    return view


def memory_order_adam(base: type, kernels) -> type:
    """DirectVoxGO's MaskedAdam (`base`, its step and kernels `kernels`) stepping each
    parameter, gradient, moment and per-voxel rate through `memory_order` views."""

    class MemoryOrderAdam(base):
        @torch.no_grad()
        def step(self):
            for group in self.param_groups:
                beta1, beta2 = group["betas"]
                args = (beta1, beta2, group["lr"], group["eps"])
                for param in group["params"]:
                    if param.grad is None:
                        continue
                    state = self.state[param]
                    if len(state) == 0:
                        state["step"] = 0
                        state["exp_avg"] = torch.zeros_like(param)  # strides kept
                        state["exp_avg_sq"] = torch.zeros_like(param)
                    state["step"] += 1
                    views = [memory_order(t) for t in (param, param.grad)]
                    views += [memory_order(state[k]) for k in ("exp_avg", "exp_avg_sq")]
                    if self.per_lr is not None and param.shape == self.per_lr.shape:
                        rate = memory_order(self.per_lr)
                        kernels.adam_upd_with_perlr(*views, rate, state["step"], *args)
                    elif group["skip_zero_grad"]:
                        kernels.masked_adam_upd(*views, state["step"], *args)
                    else:
                        kernels.adam_upd(*views, state["step"], *args)

    return MemoryOrderAdam


def install(dvgo: str) -> None:
    """Imports DirectVoxGO's modules from the folder `dvgo` and swaps grid and optimiser."""
    sys.path[:0] = [os.path.join(dvgo, "shim"), dvgo]
    import lib.grid
    import lib.masked_adam
    import lib.utils

    lib.grid.DenseGrid = VoxelDenseGrid
    lib.utils.MaskedAdam = memory_order_adam(
        lib.masked_adam.MaskedAdam, lib.masked_adam.adam_upd_cuda
    )
    kind = "CUDA" if _backend.has_cuda_kernels else "CPU only"
    print(
        f"dvgo_grid: DenseGrid -> VoxelDenseGrid (grid.sample, native {kind} build "
        f"{_backend.source}), MaskedAdam on memory-order views",
        flush=True,
    )


def swap_table(rows: dict[str, dict], scene: str) -> str:
    """The markdown table of DirectVoxGO runs (bench/compare/dvgo/bench_dvgo.py --grid ours):
    `rows` maps a label to the numbers of one run's output (`bench_dvgo.dvgo_result`); the first row
    is
    the time base."""
    gib = 2**30
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU"
    lines = [
        f"{device} | torch {torch.__version__} | {time.strftime('%Y-%m-%d')} | scene {scene}",
        "",
        "| system | coarse s | fine s | training s | x its time | test PSNR (dB) | SSIM | "
        "PSNR of 8-bit renders | peak GiB allocated / reserved |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    base = next(iter(rows.values()))["train_seconds"]
    for name, r in rows.items():
        scored = r["scored"]["psnr"] if r["scored"] else float("nan")
        peak = "-"
        if r["peak_allocated"] is not None:
            peak = f"{r['peak_allocated'] / gib:.2f} / {r['peak_reserved'] / gib:.2f}"
        lines.append(
            f"| {name} | {r['coarse_seconds']:.0f} | {r['fine_seconds']:.0f} | "
            f"{r['train_seconds']:.0f} | {r['train_seconds'] / base:.2f} | {r['psnr']:.3f} | "
            f"{r['ssim'] or float('nan'):.4f} | {scored:.3f} | {peak} |"
        )
    lines += [
        "",
        "Both: DirectVoxGO's run.py and configs/default.py unchanged; 'on grid.sample' swaps "
        "lib.grid.DenseGrid for bench/compare/dvgo/dvgo_grid.py's VoxelDenseGrid "
        "(channels-last storage, "
        "grid.sample) and steps its MaskedAdam kernels on memory-order views. Seconds as "
        "DirectVoxGO prints them (whole seconds, training stages only).",
    ]
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) < 2 or not sys.argv[1].endswith("run_dvgo.py"):
        usage = "usage: python bench/compare/dvgo/dvgo_grid.py DVGO_DIR/run_dvgo.py [ARGS...]"
        raise SystemExit(usage)
    runner = os.path.abspath(sys.argv[1])
    install(os.path.dirname(runner))
    sys.argv = [runner, *sys.argv[2:]]
    runpy.run_path(runner, run_name="__main__")


if __name__ == "__main__":
    main()
