"""Half-precision multiresolution tables under Adam: docs/multires.md's small field, three ways.

The field of docs/multires.md (a `grid.MultiresGrid` of 8 levels x 2^12 rows x 2 features,
base 4, growth 1.5, and an MLP 16 -> 32 -> 1) fitted to sin(3x) sin(3y) sin(3z) from 1024
random points a step with `grid.MaskedAdam` (lr 1e-2, betas (0.9, 0.99), eps 1e-15, instant-ngp's),
seed 0, with the table

- `float32`: stored and trained in float32;
- `float16`: stored and trained in float16 (Adam's moments then float16 as well);
- `cast`: stored float32, handed to the op as `table.half()` each step, the loss scaled by
  128 (tiny-cuda-nn's PyTorch module does both).

Prints each one's held-out MSE (4096 points), its largest table value and the median and
largest non-zero table gradient of the last step (unscaled).

    python bench/probes/multires_half.py [--steps 200] [--device cpu]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: bench, grid, train
import grid  # noqa: E402

MODES = ("float32", "float16", "cast")
LOSS_SCALE = 128.0


def target(xyz: torch.Tensor) -> torch.Tensor:
    """[..., 3] -> [..., 1]."""
    return torch.sin(3 * xyz).prod(dim=-1, keepdim=True)


def fit(mode: str, steps: int, device: str) -> dict[str, float]:
    torch.manual_seed(0)
    dtype = torch.float16 if mode == "float16" else torch.float32
    enc = grid.MultiresGrid(8, 2, 2**12, 4, 1.5, dtype=dtype, device=device)
    mlp = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)).to(device)
    groups = [{"params": enc.parameters()}, {"params": mlp.parameters(), "skip_zero_grad": False}]
    opt = grid.MaskedAdam(groups, lr=1e-2, betas=(0.9, 0.99), eps=1e-15)
    scale = LOSS_SCALE if mode == "cast" else 1.0
    for _ in range(steps):
        xyz = torch.rand(1024, 3, device=device) * 2 - 1
        if mode == "cast":
            features = grid.multires(enc.table.half(), enc.normalize(xyz), enc.resolutions)
        else:
            features = enc(xyz)
        loss = (mlp(features.float()) - target(xyz)).square().mean()
        opt.zero_grad()
        (loss * scale).backward()
        grad = enc.table.grad.float().abs() / scale
        opt.step()
    test = torch.rand(4096, 3, device=device) * 2 - 1
    with torch.no_grad():
        mse = (mlp(enc(test).float()) - target(test)).square().mean().item()
    touched = grad[grad > 0]
    return {
        "mse": mse,
        "max_table": enc.table.abs().max().item(),
        "median_grad": touched.median().item(),
        "max_grad": touched.max().item(),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    for mode in MODES:
        r = fit(mode, args.steps, args.device)
        print(
            f"{mode:8s} held-out MSE {r['mse']:.2e}  max |table| {r['max_table']:.3g}  "
            f"last step's non-zero |grad|: median {r['median_grad']:.2e}, max {r['max_grad']:.2e}"
        )


if __name__ == "__main__":
    main()
