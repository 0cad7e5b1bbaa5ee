"""The table of `bash bench/gpu.sh multi`: 1 against 2 processes, and the all-reduce's share.

    python bench/multi_table.py RUNS ALLREDUCE_JSON OUT_JSON OUT_MD

RUNS holds one run directory per config and process count, `<config>-<n>` (written by
`python -m train` / `torchrun --nproc_per_node=n -m train`); `<config>+<variant>-2` (e.g.
`density_256+weak-2`, train.scaling = weak) is compared with `<config>-1` by points per
second (its global batch is twice as large). Per config: steps/s and
points/s (rays/s) over the whole training loop, speed-up and scaling efficiency (speed-up /
n) at equal global batch, the PSNR of both runs, the training time per step over the last
resolution's steps (from the evaluation records) and the time bench/bench_multi.py
measured for averaging gradients of that model's size (A1), as a share of the 2-process
step.
"""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path


def train_seconds(record: dict, batch: int) -> float:
    """Training-loop seconds up to a record (nerf logs them; field logs the rate)."""
    if "train_seconds" in record:
        return record["train_seconds"]
    return record["step"] * batch / record["points_per_second"]


def last_segment_ms(run: Path, batch: int) -> tuple[int, float] | None:
    """(first step, ms per step) over the steps after the last upsample (all steps if none);
    `batch`: the global batch (the summary's: with train.scaling = weak it is not the
    config's)."""
    config = tomllib.loads((run / "config.toml").read_text())
    train = config.get("train", {})
    first = (train.get("upsample_steps") or [0])[-1]
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    start = [r for r in records if r["step"] == first]
    if not records or (first and not start):
        return None
    begin = train_seconds(start[0], batch) if first else 0.0
    end = records[-1]
    return first, (train_seconds(end, batch) - begin) / max(end["step"] - first, 1) * 1e3


def psnr_at(entry: dict, one: dict) -> float | None:
    """The PSNR of the last evaluation within the 1-process run's training time."""
    batch = entry["batch_size"] or 0
    within = [
        r
        for r in entry["records"]
        if "psnr" in r and train_seconds(r, batch) <= one["train_seconds"] * 1.0001
    ]
    return within[-1]["psnr"] if within else None


def averaging_ms(allreduce: dict, parameters: int) -> dict | None:
    """The A1 row whose gradient size is within 5% of the model's parameter count."""
    rows = [r for r in allreduce.get("averaging", []) if abs(r["numel"] / parameters - 1) < 0.05]
    return rows[0] if rows else None


def main(runs: Path, allreduce_json: Path, out_json: Path, out_md: Path) -> None:
    allreduce = json.loads(allreduce_json.read_text()) if allreduce_json.exists() else {}
    result, lines = {}, []
    configs = sorted({p.name.rsplit("-", 1)[0] for p in runs.iterdir() if p.is_dir()})
    for config in configs:
        entry = {}
        base = config.split("+")[0]  # "<config>+weak": 2 processes against <config>-1
        for n in (1, 2):
            run = runs / f"{config if n == 2 else base}-{n}"
            summary_file = run / "summary.json"
            if not summary_file.exists():
                continue
            s = json.loads(summary_file.read_text())
            unit = "rays" if "rays_per_second" in s else "points"
            segment = last_segment_ms(run, s["batch_size"])
            entry[n] = {
                "summary": {k: v for k, v in s.items() if k != "records"},
                "unit": unit,
                "steps_per_second": s["steps"] / s["train_seconds"],
                "per_second": s[f"{unit}_per_second"],
                "psnr": s["psnr"],
                "last_segment_from_step": segment[0] if segment else None,
                "last_segment_ms_per_step": segment[1] if segment else None,
                "gradient_mb_per_step": s.get("gradient_mb_averaged_per_step"),
                "batch_size": s.get("batch_size"),
                "records": [
                    json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()
                ],
            }
        if 1 in entry and 2 in entry:
            # equal global batch (strong): steps/s; weak scaling: points (rays) per second
            key = "steps_per_second" if config == base else "per_second"
            speedup = entry[2][key] / entry[1][key]
            entry["speedup"], entry["efficiency"] = speedup, speedup / 2
            entry["psnr_at_one_process_time"] = psnr_at(entry[2], entry[1]["summary"])
            row = averaging_ms(allreduce, entry[2]["summary"]["parameters"])
            if row and entry[2]["last_segment_ms_per_step"]:
                entry["all_reduce_ms"] = row["fp32_ms"]
                entry["all_reduce_share"] = row["fp32_ms"] / entry[2]["last_segment_ms_per_step"]
        result[config] = entry
    head = (
        "| config | processes | steps/s | rate | speed-up | efficiency | PSNR | PSNR at the "
        "1-process time | ms/step, last resolution | grad all-reduce ms (share) | MB averaged "
        "per step |"
    )
    lines = [head, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for config, entry in result.items():
        for n in (1, 2):
            if n not in entry:
                continue
            e = entry[n]
            seg = e["last_segment_ms_per_step"]
            seg_text = f"{seg:.3f} (from step {e['last_segment_from_step']})" if seg else "-"
            share = "-"
            if n == 2 and "all_reduce_ms" in entry:
                share = f"{entry['all_reduce_ms']:.3f} ({100 * entry['all_reduce_share']:.0f}%)"
            speed = f"{entry['speedup']:.2f}x" if n == 2 and "speedup" in entry else "1"
            eff = f"{100 * entry['efficiency']:.0f}%" if n == 2 and "efficiency" in entry else "-"
            at = entry.get("psnr_at_one_process_time") if n == 2 else None
            mb = e["gradient_mb_per_step"]
            lines.append(
                f"| {config} | {n} | {e['steps_per_second']:.1f} | "
                f"{e['per_second']:.3g} {e['unit']}/s | {speed} | {eff} | {e['psnr']:.2f} dB | "
                f"{f'{at:.2f} dB' if at is not None else '-'} | {seg_text} | {share} | "
                f"{f'{mb:.3g}' if mb is not None else '-'} |"
            )
    out_json.write_text(json.dumps(result, indent=2) + "\n")
    out_md.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main(*map(Path, sys.argv[1:5]))
