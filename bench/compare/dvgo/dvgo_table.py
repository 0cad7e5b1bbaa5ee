"""The table of bench/compare/dvgo/bench_dvgo.py (and dvgo_unbounded.py): one row per system
and moment (DirectVoxGO's end; ours at a third, two thirds and all of its training time, and
its end), written as <stem>.md beside <stem>.json."""

from __future__ import annotations

import json
import math
from pathlib import Path

GIB = 2**30


def at_time(records: list[dict], seconds: float) -> tuple[dict, bool]:
    """The first record at or after `seconds` of training, and True; or the last record
    and False when training ended before."""
    for record in records:
        if record["train_seconds"] >= seconds:
            return record, True
    return records[-1], False


def dvgo_rows(dvgo: dict, scored: dict | None, system: str, moment: str) -> list[dict]:
    """DirectVoxGO's end as table rows: its own float renders' numbers (`moment`), then its
    8-bit renders scored here (`score_renders`) when there are some."""
    row = {"system": system, "moment": moment, "train_seconds": dvgo["train_seconds"]}
    rows = [row | {k: dvgo[k] for k in ("psnr", "ssim", "peak_allocated", "peak_reserved")}]
    if scored is not None:
        row = row | {"moment": "end, its 8-bit renders scored here"}
        rows.append(row | {k: scored.get(k) for k in ("psnr", "ssim", "background_mse")})
    return rows


def table_rows(
    dvgo: dict, scored: dict | None, ours: dict, shipped: dict | None = None
) -> list[dict]:
    """One row per (system, moment): training seconds, PSNR, SSIM, peaks. `shipped`: ours
    with the config's own schedule (--shipped), its end."""
    t = dvgo["train_seconds"]
    rows = dvgo_rows(dvgo, scored, "DirectVoxGO", "end (coarse + fine), its float renders")
    records = ours["records"]
    for label, k in (("T/3", 1), ("2T/3", 2), ("T (equal time)", 3)):
        record, reached = at_time(records, t * k / 3)
        moment = f"at {label}" if reached else f"{label} not reached: its end"
        rows.append(_ours_row(moment, record, ours))
    last = records[-1]
    if last is not at_time(records, t)[0]:
        rows.append(_ours_row(f"end ({last['step']} steps)", last, ours))
    if shipped is not None:
        last = shipped["records"][-1]
        rows.append(_ours_row("the config's own schedule, its end", last, shipped))
    return rows


def _ours_row(moment: str, record: dict, ours: dict) -> dict:
    return {
        "system": "ours",
        "moment": f"{moment}, step {record['step']}",
        "train_seconds": record["train_seconds"],
        "psnr": record["psnr"],
        "ssim": record.get("ssim"),
        "background_mse": record.get("background_mse"),
        "background_opacity": record.get("background_opacity"),
        "peak_allocated": ours["peak_allocated"],
        "peak_reserved": ours["peak_reserved"],
    }


def markdown(rows: list[dict], meta: dict) -> str:
    def number(value, fmt: str) -> str:
        return (
            "-"
            if value is None or (isinstance(value, float) and math.isnan(value))
            else fmt.format(value)
        )

    def memory(row: dict) -> str:
        a, r = row.get("peak_allocated"), row.get("peak_reserved")
        return "-" if a is None else f"{a / GIB:.2f} / {r / GIB:.2f}"

    views = f"{meta['train_views']} train / {meta['test_views']} test views"
    size = "" if "capture" in meta else f"{meta['size']}x{meta['size']}, "
    lines = [
        f"{meta['device_name']} | torch {meta['torch']} | {meta['date']} | {meta['config']} | "
        f"scene {meta['scene']} ({size}{views})",
        "",
        "| system | moment | training s | test PSNR (dB) | SSIM | background MSE | "
        "background opacity | peak GiB allocated / reserved |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r['system']} | {r['moment']} | {r['train_seconds']:.1f} | "
            f"{number(r['psnr'], '{:.2f}')} | {number(r.get('ssim'), '{:.4f}')} | "
            f"{number(r.get('background_mse'), '{:.2e}')} | "
            f"{number(r.get('background_opacity'), '{:.2e}')} | {memory(r)} |"
        )
    lines += [
        "",
        "Training seconds: DirectVoxGO's coarse + fine stage times as it prints them (whole "
        "seconds; data loading and testing excluded); ours, the training steps only. Peak "
        "memory: torch's max_memory_allocated / max_memory_reserved over the whole process "
        "(DirectVoxGO, through bench/ops/cuda_peak.py) or the whole run, evaluations included "
        "(ours); the CUDA context is not counted. Background (floaters): the test pixels the "
        "scene leaves transparent; colour MSE there (DirectVoxGO: its 8-bit renders) and ours' "
        "mean rendered opacity there.",
    ]
    return "\n".join(lines)


def write_table(out: Path, stem: str, table: str, result: dict) -> None:
    """out/<stem>.md (the table) and out/<stem>.json (every number), and a line saying so."""
    (out / f"{stem}.json").write_text(json.dumps(result, indent=2, default=str))
    (out / f"{stem}.md").write_text(table + "\n")
    print(f"wrote {out / f'{stem}.md'} and {out / f'{stem}.json'}")


# ---- main ----------------------------------------------------------------------------------
