"""The table of bench/training/bench_scenes.py: per scene a row per system (PSNR, SSIM,
training seconds, peak memory; ours against DirectVoxGO), each system's means per half of
the scene set, and scenes.json / scenes.md (`save`, `load_results`)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: bench, grid, train

from bench.compare.dvgo.dvgo_table import GIB  # noqa: E402
from bench.training.scene_set import NAMES, split_of  # noqa: E402

METRICS = ("psnr", "ssim", "train_seconds", "peak_allocated")


def systems(results: dict[str, dict]) -> list[str]:
    """DirectVoxGO first, then each of ours' labels in the order first met."""
    found: list[str] = []
    for entry in results.values():
        found += [k for k, v in entry.items() if isinstance(v, dict) and k not in found]
    return ["dvgo"] * ("dvgo" in found) + [k for k in found if k != "dvgo"]


def means(results: dict[str, dict], system: str) -> dict[str, Any]:
    """Mean of each of METRICS over the scenes where `system` has a value; `scenes`: how
    many scenes have its PSNR."""
    out: dict[str, Any] = {}
    for key in METRICS:
        values = [r[system].get(key) for r in results.values() if r.get(system)]
        values = [v for v in values if v is not None]
        out[key] = sum(values) / len(values) if values else None
        if key == "psnr":
            out["scenes"] = len(values)
    return out


def against_dvgo(ours: dict, dvgo: dict | None) -> dict[str, Any]:
    """One scene, one of ours' systems against DirectVoxGO: `delta` (end PSNR less its),
    `at_time` (our PSNR at the first evaluation at or after its training time; None when
    ours ended before), `reach` (our first training seconds at or above its PSNR, over its
    training seconds; None when never)."""
    if not dvgo or None in (ours.get("psnr"), dvgo.get("psnr")):
        return {"delta": None, "at_time": None, "reach": None}
    level, seconds = dvgo["psnr"], dvgo.get("train_seconds")
    curve = ours.get("curve") or []
    at_time = next((p for t, p in curve if seconds and t >= seconds), None)
    reach = next((t / seconds for t, p in curve if p >= level), None) if seconds else None
    return {"delta": ours["psnr"] - level, "at_time": at_time, "reach": reach}


def versus(results: dict[str, dict], system: str) -> list[dict[str, Any]]:
    """`against_dvgo` of `system` on each scene where it ran."""
    return [against_dvgo(r[system], r.get("dvgo")) for r in results.values() if r.get(system)]


def difference(results: dict[str, dict], system: str = "ours") -> tuple[float | None, int]:
    """Mean of `system`'s PSNR less DirectVoxGO's over the scenes that have both, and how
    many."""
    both = [v["delta"] for v in versus(results, system) if v["delta"] is not None]
    return (sum(both) / len(both) if both else None), len(both)


def mean_reach(results: dict[str, dict], system: str) -> tuple[float, float] | None:
    """Where `system`'s mean curve over the scenes that have DirectVoxGO too first reaches
    DirectVoxGO's mean PSNR: (our mean training seconds there, that over DirectVoxGO's mean
    seconds). The curves are averaged evaluation by evaluation (one config's runs share
    their evaluation steps). None: never, or no scene with both."""
    both = [r for r in results.values() if (r.get(system) or {}).get("curve") and r.get("dvgo")]
    both = [r for r in both if None not in (r["dvgo"].get("psnr"), r["dvgo"].get("train_seconds"))]
    if not both:
        return None
    level = sum(r["dvgo"]["psnr"] for r in both) / len(both)
    seconds = sum(r["dvgo"]["train_seconds"] for r in both) / len(both)
    # up to the shortest curve: [scenes] of (seconds, psnr) per evaluation
    for points in zip(*(r[system]["curve"] for r in both), strict=False):
        if sum(p for _, p in points) / len(points) >= level:
            t = sum(t for t, _ in points) / len(points)
            return t, t / seconds
    return None


def _number(value, fmt: str) -> str:
    missing = value is None or (isinstance(value, float) and math.isnan(value))
    return "-" if missing else fmt.format(value)


def _cells(entry: dict | None, dvgo: dict | None) -> list[str]:
    entry = entry or {}
    peak = entry.get("peak_allocated")
    versus = against_dvgo(entry, dvgo) if entry is not dvgo else {}
    return [
        _number(entry.get("psnr"), "{:.2f}"),
        _number(entry.get("ssim"), "{:.4f}"),
        _number(entry.get("train_seconds"), "{:.1f}"),
        "-" if peak is None else f"{peak / GIB:.2f}",
        _number(versus.get("delta"), "{:+.2f}"),
        _number(versus.get("at_time"), "{:.2f}"),
        _number(versus.get("reach"), "{:.2f}"),
    ]


def summary_line(results: dict[str, dict], system: str) -> str:
    """One system's means over the scenes, and against DirectVoxGO where it ran."""
    mean = means(results, system)
    both = [v for v in versus(results, system) if v["delta"] is not None]
    deltas = [v["delta"] for v in both]
    text = f"- {system}: mean PSNR {_number(mean['psnr'], '{:.2f}')} dB over {mean['scenes']}"
    text += f" scenes, mean training {_number(mean['train_seconds'], '{:.1f}')} s"
    if system != "dvgo" and deltas:
        reached = [v["reach"] for v in both if v["reach"] is not None]
        text += (
            f"; against DirectVoxGO on {len(deltas)}: mean {sum(deltas) / len(deltas):+.2f} dB, "
            f"{sum(d < 0 for d in deltas)} below it, its PSNR reached on {len(reached)}"
        )
        text += f" (by {max(reached):.2f} of its time at worst)" if reached else ""
        crossing = mean_reach(results, system)
        text += (
            "; its mean PSNR never reached by the mean curve"
            if crossing is None
            else f"; the mean curve at its mean PSNR at {crossing[0]:.1f} s, "
            f"{crossing[1]:.2f} of its mean time"
        )
    return text + "."


def by_split(results: dict[str, dict]) -> list[tuple[str, dict[str, dict]]]:
    """(heading, results) of each half that has scenes, then of all when both have: the
    table's means per split (a scene not in SCENES counts in "all" only)."""
    halves = [
        (title, {n: r for n, r in results.items() if split_of(n) == split})
        for split, title in (("tune", "tuning half"), ("held_out", "held-out half"))
    ]
    halves = [(t, h) for t, h in halves if h]
    if len(halves) == 1 and len(halves[0][1]) == len(results):
        return halves
    return [*halves, ("all scenes", results)]


def markdown(results: dict[str, dict], meta: dict) -> str:
    """The table: per scene (SCENES' order) a row per system, then each system's means,
    per split (the tuning half, the held-out half, all)."""
    head = ["scene", "split", "size", "system", "PSNR", "SSIM", "train s", "GiB"]
    head += ["- DVGO dB", "PSNR at DVGO's s", "DVGO's PSNR at x its s"]
    lines = [
        f"{meta['device_name']} | torch {meta['torch']} | {meta['date']} | {meta['config']}",
        "",
        "| " + " | ".join(head) + " |",
        "| --- | --- | ---: | --- | " + " | ".join(["---:"] * 7) + " |",
    ]
    order = [n for n in NAMES if n in results] + [n for n in results if n not in NAMES]
    names = systems(results)
    for name in order:
        r = results[name]
        for system in (s for s in names if r.get(s)):
            size = f"{r['size']}x{r['size']}"
            cells = [name, split_of(name) or "-", size, system]
            lines.append("| " + " | ".join([*cells, *_cells(r[system], r.get("dvgo"))]) + " |")
    for title, half in by_split(results):
        lines += ["", f"Means, {title} ({len(half)} scenes):"]
        lines += [summary_line(half, s) for s in systems(half)]
    lines += [
        "",
        "PSNR and SSIM: mean over each scene's test views (DirectVoxGO: its 8-bit renders "
        "scored here when they were still on disk, else its own float numbers). Training "
        "seconds: ours the steps alone, DirectVoxGO its coarse + fine stages. GiB: peak "
        "torch.cuda.max_memory_allocated. PSNR at DVGO's s: ours at its first evaluation at "
        "or after DirectVoxGO's training seconds (- when ours ended before); DVGO's PSNR at: "
        "ours' first training seconds at or above DirectVoxGO's final PSNR, as a fraction of "
        "DirectVoxGO's seconds (- never). The mean curve: ours' curves averaged evaluation by "
        "evaluation over the scenes DirectVoxGO ran too, first at or above its mean PSNR. "
        "Generation seconds per scene are in scenes.json.",
    ]
    return "\n".join(lines)


def load_results(path: Path) -> dict[str, dict]:
    """The per-scene results of earlier calls (scenes.json), or {}."""
    try:
        return json.loads(path.read_text())["scenes"]
    except (OSError, ValueError, KeyError):
        return {}


def save(out: Path, results: dict[str, dict], meta: dict) -> str:
    table = markdown(results, meta)
    names = systems(results)
    means_ = {s: means(results, s) for s in names}
    minus = {s: difference(results, s) for s in names if s != "dvgo"}
    doc = {**meta, "scenes": results, "means": means_, "minus_dvgo": minus}
    doc["means_by_split"] = {
        title: {s: means(half, s) for s in systems(half)} for title, half in by_split(results)
    }
    (out / "scenes.json").write_text(json.dumps(doc, indent=2, default=str) + "\n")
    (out / "scenes.md").write_text(table + "\n")
    return table
