"""Variants of one config trained side by side at the same step count: which change pays in
quality. Usage:

    python bench/training/nerf_variants.py --config configs/nerf_realistic_gpu.toml --steps 12000 \
        --variant base --variant "aux: nerf.sample_color_weight=0.01 nerf.entropy_weight=0.001" \
        [--set KEY=VALUE ...] [--parallel K] [--out DIR] [--json FILE]

A variant is `NAME` or `NAME: KEY=VALUE KEY=VALUE ...` (--set options of `python -m train`,
on top of the shared --set). Up to --parallel runs at once (default all): on one GPU they share
it, so their seconds and steps/s say nothing about speed; only the step-for-step quality
(test PSNR, SSIM, background opacity at the last evaluation) is compared. The scene is
generated before the runs start (one process writes it). Writes DIR/<name>/ per run and a
markdown table plus JSON (--json, default DIR/variants.json).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def parse_variant(text: str) -> tuple[str, list[str]]:
    """ "name: k=v k=v" -> (name, ["k=v", "k=v"]); a bare name has no overrides."""
    name, _, rest = text.partition(":")
    name = name.strip()
    if not name or "/" in name or " " in name:
        raise SystemExit(f"--variant: expected 'NAME' or 'NAME: KEY=VALUE ...', got {text!r}")
    sets = rest.split()
    for s in sets:
        if "=" not in s:
            raise SystemExit(f"--variant {name}: expected KEY=VALUE, got {s!r}")
    return name, sets


def command(config: str, out: Path, sets: list[str]) -> list[str]:
    # through bench/ops/cuda_peak.py: the run's CUDA memory peaks end its log
    peak = str(ROOT / "bench" / "ops" / "cuda_peak.py")
    args = [
        sys.executable,
        peak,
        "-m",
        "train",
        "--config",
        config,
        "--out",
        str(out),
        "--overwrite",
    ]
    for s in sets:
        args += ["--set", s]
    return args


def ensure_scene(config: str, shared: list[str]) -> None:
    """Generate the config's scene once, before concurrent runs would each start writing it."""
    sys.path.insert(0, str(ROOT))
    from train.config import load_config
    from train.loop import select_device
    from train.nerf.experiment import ensure_scene as ensure

    c = load_config(config, shared)
    device = select_device(c.device)
    ensure(c, device)
    if device.type == "cuda":  # the runs are other processes: leave them the memory
        import torch

        torch.cuda.empty_cache()


def last_evaluation(run: Path) -> dict:
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    scored = [r for r in records if "psnr" in r]
    return scored[-1] if scored else {}


def peak_gib(log: Path) -> float | None:
    """The peak allocated CUDA memory (GiB) the run's log ends with (bench/ops/cuda_peak.py)."""
    for line in reversed(log.read_text().splitlines()):
        if line.startswith("CUDA_PEAK allocated"):
            return int(line.split()[2]) / 2**30
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True)
    parser.add_argument("--steps", type=int, required=True, help="train.steps of every run")
    parser.add_argument("--variant", action="append", required=True, help="NAME[: KEY=VALUE ...]")
    parser.add_argument("--set", action="append", default=[], help="KEY=VALUE for every run")
    parser.add_argument("--parallel", type=int, default=0, help="runs at once (0: all)")
    parser.add_argument("--out", type=Path, default=Path("/tmp/nerf_variants"))
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.steps < 1:
        raise SystemExit(f"--steps: expected an integer >= 1, got {args.steps}")
    variants = [parse_variant(v) for v in args.variant]
    names = [n for n, _ in variants]
    if len(set(names)) != len(names):
        raise SystemExit(f"--variant: names must differ, got {names}")
    shared = [
        *args.set,
        f"train.steps={args.steps}",
        f"eval.every={args.steps}",
        "output.progress=false",
        "output.pictures=false",
        "output.checkpoint_every=0",
    ]
    ensure_scene(args.config, shared)
    args.out.mkdir(parents=True, exist_ok=True)
    parallel = args.parallel or len(variants)
    pending, running, results = list(variants), [], {}
    start = time.perf_counter()
    while pending or running:
        while pending and len(running) < parallel:
            name, sets = pending.pop(0)
            log = open(args.out / f"{name}.log", "w")
            cmd = command(args.config, args.out / name, [*shared, *sets])
            running.append((name, sets, subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=log)))
        time.sleep(1)
        for item in [r for r in running if r[2].poll() is not None]:
            running.remove(item)
            name, sets, proc = item
            record = last_evaluation(args.out / name) if proc.returncode == 0 else {}
            peak = peak_gib(args.out / f"{name}.log")
            results[name] = {
                "sets": sets,
                "returncode": proc.returncode,
                "peak_gib": peak,
                **record,
            }
            print(f"{name}: exit {proc.returncode}, psnr {record.get('psnr')}", flush=True)
    rows = [
        "| variant | overrides | step | PSNR | SSIM | background opacity | peak GiB |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name in names:
        r = results[name]
        cells = [
            "-" if r.get(k) is None else f"{r[k]:{fmt}}"
            for k, fmt in (("psnr", ".4f"), ("ssim", ".4f"), ("background_opacity", ".4f"))
        ]
        peak = "-" if r["peak_gib"] is None else f"{r['peak_gib']:.2f}"
        rows.append(
            f"| {name} | {' '.join(r['sets']) or '-'} | {r.get('step', 'failed')} | "
            f"{' | '.join(cells)} | {peak} |"
        )
    table = "\n".join(rows)
    print(
        f"{args.config}, {args.steps} steps, {parallel} at once, "
        f"{time.perf_counter() - start:.0f} s\n{table}"
    )
    out = args.json or args.out / "variants.json"
    meta = {"config": args.config, "steps": args.steps, "shared": args.set, "parallel": parallel}
    out.write_text(json.dumps({**meta, "variants": results}, indent=2))
    out.with_suffix(".md").write_text(table + "\n")
    return 0 if all(r["returncode"] == 0 for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
