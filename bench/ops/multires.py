"""Multiresolution grid encoding: the fused `grid.multires` forward + backward against the
PyTorch reference of the same encoding and against L calls of `F.grid_sample` on dense levels,
with the bytes a step must move against the card's copy bandwidth; optionally torch-ngp's
`gridencoder` built from its source (`--ngp DIR`, bench-only, never imported by the library).

    python bench/ops/multires.py --out results/    # writes multires.json and multires.md
        [--points N ...] [--distribution uniform|rays] [--no-reference] [--ngp DIR]

Configuration (issue 61): L = 16 levels, F = 2, T = 2^19 rows per level, resolutions
floor(16 * b^l) with b = (2048 / 16)^(1 / 15) (instant-ngp's NeRF levels), 2^19, 2^20 and
2^22 points (uniform in the cube, or with `--distribution rays` 256 samples along each of
n / 256 random chords, in ray order, as a NeRF batch is); float32 table, gradients to the
table only (a NeRF's encoding step). Each row also times the forward alone (no graph).

`F.grid_sample` cannot hold the hashed levels densely (the finest, 2049^3 vertices x F x 4 B,
is 69 GB), so its baseline is the equal-memory one: L dense levels of 80^3 <= T vertices each,
timed beside `grid.multires` on the same all-dense levels ("dense" rows).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: bench, grid
import grid  # noqa: E402
from bench.harness import Ctx, free_memory, rel_err  # noqa: E402
from grid import reference  # noqa: E402

L, FEATURES, LOG2_T, BASE, FINEST = 16, 2, 19, 16, 2048


def hashed_resolutions() -> list[int]:
    growth = math.exp(math.log(FINEST / BASE) / (L - 1))
    return [math.floor(BASE * growth**level) for level in range(L)]


def dense_resolutions(table_size: int) -> list[int]:
    side = round(table_size ** (1 / 3))
    while side**3 > table_size:
        side -= 1
    return [side - 1] * L  # every level dense: side^3 <= T vertices


def touched_rows(points: torch.Tensor, resolutions: list[int], table_size: int) -> int:
    """Distinct table rows the points read (over all levels): the floor of a step's gathers."""
    total = 0
    offsets = torch.tensor(reference.CORNER_OFFSETS, device=points.device)
    unit = (points.clamp(-1, 1) + 1) / 2
    for R in resolutions:
        low = (unit * R).floor().clamp(max=R - 1).long()
        rows = torch.cat(
            [reference.multires_index(low[i : i + 2**20, None] + offsets, R, table_size).reshape(-1)
             for i in range(0, low.shape[0], 2**20)]
        )  # fmt: skip
        total += int(torch.unique(rows).numel())
    return total


def fwd_bwd(encode, table, points, grad_out):
    """One forward + backward to `table` (a tensor or a list of them) -> the gradients."""

    def step():
        return torch.autograd.grad(encode(table, points), table, grad_out)

    return step


def forward_only(encode, table, points):
    """One forward, no graph (the encoding's share of a step)."""

    def step():
        with torch.no_grad():
            return encode(table, points)

    return step


def ray_points(n: int, device: torch.device, gen: torch.Generator) -> torch.Tensor:
    """n points as n / 256 random chords of the cube, 256 evenly spaced samples along each, in
    ray order (a NeRF batch: neighbouring points share cells at the coarse levels)."""
    rays = max(1, n // 256)
    a = torch.rand(rays, 1, 3, device=device, generator=gen) * 2 - 1
    b = torch.rand(rays, 1, 3, device=device, generator=gen) * 2 - 1
    t = torch.linspace(0, 1, n // rays, device=device)[None, :, None]
    return (a + (b - a) * t).reshape(-1, 3)


def grid_sample_levels(levels: list[torch.Tensor], points: torch.Tensor) -> torch.Tensor:
    """L calls of F.grid_sample (align_corners=True) on dense [1, F, Z, Y, X] levels."""
    p = points.reshape(1, 1, 1, -1, 3)
    outs = [F.grid_sample(v, p, align_corners=True).reshape(v.shape[1], -1) for v in levels]
    return torch.cat(outs, 0).T  # [N, L F]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--points", type=int, nargs="+", default=[2**19, 2**20, 2**22])
    parser.add_argument("--out", type=Path, default=None, help="folder for multires.json / .md")
    parser.add_argument("--ngp", type=Path, default=None, help="torch-ngp's gridencoder folder")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--distribution", choices=("uniform", "rays"), default="uniform",
        help="points uniform in the cube, or 256 samples along each of n / 256 random chords",
    )  # fmt: skip
    parser.add_argument("--no-reference", action="store_true", help="skip the PyTorch reference")
    parser.add_argument("--warmup", type=int, default=None)
    parser.add_argument("--reps", type=int, default=None)
    args = parser.parse_args()
    device = torch.device(args.device)
    ctx = Ctx(args, device)
    bandwidth = ctx.gbps(device)
    T = 2**LOG2_T
    gen = torch.Generator(device=device).manual_seed(0)
    table = (torch.rand(L, T, FEATURES, device=device, generator=gen) * 2 - 1).requires_grad_()
    ngp = build_ngp(args.ngp, device) if args.ngp else None
    rows = []
    for n in args.points:
        if args.distribution == "rays":
            points = ray_points(n, device, gen)
        else:
            points = torch.rand(n, 3, device=device, generator=gen) * 2 - 1
        grad_out = torch.randn(n, L * FEATURES, device=device, generator=gen)
        for kind, res in (("hashed", hashed_resolutions()), ("dense", dense_resolutions(T))):
            ours = fwd_bwd(lambda t, p, res=res: grid.multires(t, p, res), table, points, grad_out)
            ref = fwd_bwd(
                lambda t, p, res=res: reference.multires(t, p, res), table, points, grad_out
            )
            err = rel_err(ours()[0], ref()[0])
            t_ours = ctx.time(ours, device)["median"]
            t_ref = None if args.no_reference else ctx.time(ref, device)["median"]
            encode = forward_only(lambda t, p, res=res: grid.multires(t, p, res), table, points)
            t_fw = ctx.time(encode, device)["median"]
            touched = touched_rows(points, res, T)
            # floor: points and grad_out read, out written, touched rows read (forward) and
            # read + written (backward's accumulation)
            nbytes = 4 * (3 * n + 2 * n * L * FEATURES + 3 * touched * FEATURES)
            row = {
                "points": n, "distribution": args.distribution, "levels": kind,
                "resolutions": res, "ours_ms": t_ours, "ours_forward_ms": t_fw,
                "rel_err_vs_reference": err, "touched_rows": touched, "floor_bytes": nbytes,
                "floor_ms": nbytes / (bandwidth * 1e9) * 1e3,
            }  # fmt: skip
            row["fraction_of_floor"] = row["floor_ms"] / t_ours
            if t_ref is not None:
                row["reference_ms"], row["speedup_vs_reference"] = t_ref, t_ref / t_ours
            if kind == "dense":  # the same levels as L separate dense grids
                side = res[0] + 1
                levels = [
                    table[level, : side**3].detach().T.reshape(1, FEATURES, side, side, side)
                    for level in range(L)
                ]
                levels = [v.contiguous().requires_grad_() for v in levels]
                gs = fwd_bwd(lambda t, p: grid_sample_levels(t, p), levels, points, grad_out)
                row["grid_sample_ms"] = ctx.time(gs, device)["median"]
                row["speedup_vs_grid_sample"] = row["grid_sample_ms"] / t_ours
                with torch.no_grad():
                    row["rel_err_vs_grid_sample"] = rel_err(
                        grid.multires(table, points, res), grid_sample_levels(levels, points)
                    )
            if ngp is not None and kind == "hashed":
                # torch-ngp maps [-bound, bound] (bound 1) onto its levels, as we map [-1, 1]
                step = fwd_bwd(lambda t, p: ngp(p), ngp.embeddings, points, grad_out)
                row["ngp_ms"] = ctx.time(step, device)["median"]
                row["ngp_forward_ms"] = ctx.time(forward_only(lambda t, p: ngp(p), None, points),
                                                 device)["median"]  # fmt: skip
                row["speedup_vs_ngp"] = row["ngp_ms"] / t_ours
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "resolutions"}), flush=True)
            free_memory()
    result = {"device": str(torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"),
              "copy_gbps": bandwidth, "L": L, "F": FEATURES, "T": T, "rows": rows}  # fmt: skip
    table_md = markdown(rows)
    print(table_md)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "multires.json").write_text(json.dumps(result, indent=1))
        (args.out / "multires.md").write_text(table_md)


def markdown(rows: list[dict]) -> str:
    lines = [
        "| points | levels | ours ms (forward) | reference ms (x) | grid_sample ms (x) "
        "| ngp ms (x) (forward) | floor ms (% of it) |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]

    def ratio(r: dict, key: str, speed: str) -> str:
        return f"{r[key]:.3f} ({r[speed]:.1f}x)" if key in r else "-"

    for r in rows:
        forward = f" ({r['ngp_forward_ms']:.3f})" if "ngp_forward_ms" in r else ""
        lines.append(
            f"| 2^{int(math.log2(r['points']))} | {r['levels']} | "
            f"{r['ours_ms']:.3f} ({r['ours_forward_ms']:.3f}) | "
            f"{ratio(r, 'reference_ms', 'speedup_vs_reference')} | "
            f"{ratio(r, 'grid_sample_ms', 'speedup_vs_grid_sample')} | "
            f"{ratio(r, 'ngp_ms', 'speedup_vs_ngp')}{forward} | "
            f"{r['floor_ms']:.3f} ({100 * r['fraction_of_floor']:.0f}%) |"
        )
    return "\n".join(lines) + "\n"


def build_ngp(folder: Path, device: torch.device, finest: int = FINEST):
    """torch-ngp's GridEncoder at the same configuration (the finest level `finest` cells a
    side), its CUDA source JIT-built here with C++17 (its own backend.py asks for C++14,
    which today's torch headers reject)."""
    from torch.utils.cpp_extension import load  # noqa: PLC0415

    src = folder / "src"
    flags = ["-O3", "-std=c++17"]
    half = ["-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__"]
    # gridencoder/grid.py imports a prebuilt `_gridencoder` first
    sys.modules["_gridencoder"] = load(
        name="_gridencoder",
        sources=[str(src / "gridencoder.cu"), str(src / "bindings.cpp")],
        extra_cflags=flags,
        extra_cuda_cflags=[*flags, *half, "-U__CUDA_NO_HALF2_OPERATORS__"],
    )
    sys.path.insert(0, str(folder.resolve().parent))
    from gridencoder import GridEncoder  # noqa: PLC0415  (bench-only, built on demand)

    return GridEncoder(
        input_dim=3, num_levels=L, level_dim=FEATURES, base_resolution=BASE,
        log2_hashmap_size=LOG2_T, desired_resolution=finest,
    ).to(device)  # fmt: skip


if __name__ == "__main__":
    main()
