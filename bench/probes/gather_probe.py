"""How fast could any S1 forward be in the order its points come? (CUDA only.)

Times `bench/probes/gather_probe.cu`, which makes the loads and stores of grid.sample's CUDA
forward on S1's inputs with the cell computation done beforehand (outside the timing),
next to grid.sample and F.grid_sample, with the benchmark's own timing. The probe's speed-up
over F.grid_sample bounds what a kernel visiting the points in this order can show.

    python bench/probes/gather_probe.py [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from torch.utils.cpp_extension import load

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: bench, grid, train
import grid  # noqa: E402
from bench.harness import ROOT, Ctx, rel_err  # noqa: E402
from bench.ops.bench_ops import parse_args  # noqa: E402
from bench.ops.ops_sample import SampleCase  # noqa: E402
from bench.ops.workloads import FULL, grid_sample, seed_of  # noqa: E402
from grid import _backend  # noqa: E402

VARIANTS = ((1, 5), (1, 8), (2, 2), (2, 3))  # (16-byte vectors per thread, blocks per SM)


def precomputed_cells(features: torch.Tensor, points: torch.Tensor) -> torch.Tensor:
    """[N, 4] int32: corner-0 element offset and the fractions' bits (align_corners=True),
    the cell clamped into the grid."""
    r, f = features.shape[0], features.shape[3]
    index = (points.reshape(-1, 3) + 1) / 2 * (r - 1)
    low = index.floor().clamp(0, r - 2)
    frac = (index - low).clamp(0, 1)
    low = low.long()
    offset = ((low[:, 0] * r + low[:, 1]) * r + low[:, 2]) * f
    bits = [frac[:, a].contiguous().view(torch.int32) for a in range(3)]
    return torch.stack([offset.int(), *bits], 1).contiguous()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=str(ROOT / "bench" / "results" / "gather_probe.json"))
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("gather_probe: needs a CUDA device", file=sys.stderr)
        return 1
    probe = load(
        name="grid_gather_probe",
        sources=[str(Path(__file__).with_name("gather_probe.cu"))],
        extra_include_paths=[str(ROOT / "csrc")],
        extra_cuda_cflags=_backend.NVCC_FLAGS,
        extra_ldflags=_backend.LINK_FLAGS,
    )
    device = torch.device("cuda")
    ctx = Ctx(parse_args(["--device", "cuda", "--only", "S1"]), device)
    seed = seed_of("S1")  # the benchmark's S1 inputs
    torch.manual_seed(seed)
    case = SampleCase(ctx, FULL["S1"], seed, device)
    features, points = case.features, case.points
    cells = precomputed_cells(features, points)
    ours = grid.sample(features, points)
    cf = features.permute(3, 2, 1, 0)[None].contiguous()
    p5 = points.reshape(1, 1, 1, -1, 3)
    result = {
        "device": torch.cuda.get_device_name(device),
        "torch": torch.__version__,
        "note": case.note,
        "F.grid_sample": ctx.time(lambda: grid_sample(cf, p5), device),
        "grid.sample": ctx.time(lambda: grid.sample(features, points), device),
    }
    for per, blocks in VARIANTS:

        def run(per=per, blocks=blocks):
            return probe.gather_probe(features, cells, per, blocks)

        result[f"probe {per} vector(s)/thread, {blocks} blocks/SM"] = {
            **ctx.time(run, device),
            "rel_err_vs_grid.sample": rel_err(run(), ours.reshape(cells.shape[0], -1)),
        }
    base = result["F.grid_sample"]["median"]
    print(f"{result['device']} | torch {result['torch']} | {case.note}")
    for name, stats in result.items():
        if isinstance(stats, dict):
            ms = stats["median"]
            print(f"  {name:38s} {ms:.4f} ms  {base / ms:5.2f}x F.grid_sample")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(result, indent=1))
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
