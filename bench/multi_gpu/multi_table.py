"""The table of `bash bench/gpu.sh multi`: 1 against n processes, and the all-reduce's share.

    python bench/multi_gpu/multi_table.py RUNS OUT_JSON OUT_MD [ALLREDUCE_JSON...]

RUNS holds one run directory per config and process count, `<config>-<n>` (written by
`python -m train` / `torchrun --nproc_per_node=n -m train`); `<config>+<variant>-<n>` (e.g.
`density_256+weak-2`, train.scaling = weak) is compared with `<config>-1` by points per
second (its global batch is n times as large). Per config and process count: steps/s and
points/s (rays/s) over the whole training loop, speed-up and scaling efficiency (speed-up /
n) at equal global batch, the PSNR, the PSNR within the 1-process run's training time, the
training time per step over the last resolution's steps (from the evaluation records) and
the time bench/multi_gpu/bench_multi.py measured over n ranks (the ALLREDUCE_JSON with `ranks` n)
for averaging gradients of that model's size (A1), as a share of the n-process step.
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


def run_entry(run: Path) -> dict | None:
    """One run directory's numbers (None when it has no summary)."""
    summary_file = run / "summary.json"
    if not summary_file.exists():
        return None
    s = json.loads(summary_file.read_text())
    unit = "rays" if "rays_per_second" in s else "points"
    segment = last_segment_ms(run, s["batch_size"])
    return {
        "summary": {k: v for k, v in s.items() if k != "records"},
        "unit": unit,
        "steps_per_second": s["steps"] / s["train_seconds"],
        "per_second": s[f"{unit}_per_second"],
        "psnr": s["psnr"],
        "last_segment_from_step": segment[0] if segment else None,
        "last_segment_ms_per_step": segment[1] if segment else None,
        "gradient_mb_per_step": s.get("gradient_mb_averaged_per_step"),
        "batch_size": s.get("batch_size"),
        "records": [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()],
    }


def compare(e: dict, one: dict, weak: bool, n: int, allreduce: dict) -> None:
    """Speed-up, efficiency, PSNR at the 1-process time and the all-reduce's share, into e."""
    # equal global batch (strong): steps/s; weak scaling: points (rays) per second
    key = "per_second" if weak else "steps_per_second"
    e["speedup"] = e[key] / one[key]
    e["efficiency"] = e["speedup"] / n
    e["psnr_at_one_process_time"] = psnr_at(e, one["summary"])
    row = averaging_ms(allreduce.get(n, {}), e["summary"]["parameters"])
    if row and e["last_segment_ms_per_step"]:
        e["all_reduce_ms"] = row["fp32_ms"]
        e["all_reduce_share"] = row["fp32_ms"] / e["last_segment_ms_per_step"]


def row_text(config: str, n: int, e: dict) -> str:
    seg = e["last_segment_ms_per_step"]
    seg_text = f"{seg:.3f} (from step {e['last_segment_from_step']})" if seg else "-"
    share = "-"
    if "all_reduce_ms" in e:
        share = f"{e['all_reduce_ms']:.3f} ({100 * e['all_reduce_share']:.0f}%)"
    speed = f"{e['speedup']:.2f}x" if "speedup" in e else "1"
    eff = f"{100 * e['efficiency']:.0f}%" if "efficiency" in e else "-"
    at = e.get("psnr_at_one_process_time")
    mb = e["gradient_mb_per_step"]
    return (
        f"| {config} | {n} | {e['steps_per_second']:.1f} | "
        f"{e['per_second']:.3g} {e['unit']}/s | {speed} | {eff} | {e['psnr']:.2f} dB | "
        f"{f'{at:.2f} dB' if at is not None else '-'} | {seg_text} | {share} | "
        f"{f'{mb:.3g}' if mb is not None else '-'} |"
    )


def main(runs: Path, out_json: Path, out_md: Path, *allreduce_json: Path) -> None:
    allreduce = {}  # ranks -> bench_multi.py's result
    for path in allreduce_json:
        if path.exists():
            data = json.loads(path.read_text())
            allreduce[data["ranks"]] = data
    result = {}
    head = (
        "| config | processes | steps/s | rate | speed-up | efficiency | PSNR | PSNR at the "
        "1-process time | ms/step, last resolution | grad all-reduce ms (share) | MB averaged "
        "per step |"
    )
    lines = [head, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    names = {tuple(p.name.rsplit("-", 1)) for p in runs.iterdir() if p.is_dir()}
    for config in sorted({name for name, _ in names}):
        base = config.split("+")[0]  # "<config>+weak": n processes against <config>-1
        one = run_entry(runs / f"{base}-1")
        entry = {}
        for n in sorted(int(c) for name, c in names if name == config and c.isdigit()):
            e = one if n == 1 and config == base else run_entry(runs / f"{config}-{n}")
            if e is None:
                continue
            if n > 1 and one is not None:
                compare(e, one, config != base, n, allreduce)
            entry[n] = e
            lines.append(row_text(config, n, e))
        result[config] = entry
    out_json.write_text(json.dumps(result, indent=2) + "\n")
    out_md.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main(*map(Path, sys.argv[1:]))
