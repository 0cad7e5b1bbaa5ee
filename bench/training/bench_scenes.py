"""D3: ours and DirectVoxGO over a set of generated scenes, so that a model change is
decided on the mean over scenes, not on the one scene it was tuned on.

    python bench/training/bench_scenes.py --meshes DIR [--scenes a,b] [--split tune|held_out|all]
        [--config FILE] [--out DIR]
        [--data DIR] [--set KEY=VALUE ...] [--size N] [--label NAME] [--generate-only |
        --ours-only | --dvgo-only | --gsplat-only]
        [--dvgo DIR] [--dvgo-log DIR] [--dvgo-iters C,F] [--gsplat-steps N]

The scenes (SCENES), in two halves (`split`): the tuning half, on which every config value
is chosen (the realistic scene, `data.scene = "realistic"`, and five scanned meshes in five
looks, `data.scene = "scan"`, train/nerf/scenes/scan.py), and the held-out half, on which
verdicts are reported and nothing is tuned (five other meshes, thin-legged or finely carved,
the looks mixed otherwise); 400x400, one of each half at 800x800; 100 training and 25 test
views each (the config's). --split picks a half (default all). The meshes are CGAL's
demo data: Debian's `libcgal-demo` package installs them
in /usr/share/doc/libcgal-dev/data.tar.gz (unpack it: `tar xzf ... data/meshes`); --meshes
names the folder holding the .off files (or its `data/meshes`). Nothing is downloaded.

For each scene: the scene generated into --data (once: scene.json says when it is current;
on the GPU when there is one), ours trained on it (--config, `data.*` set per scene, its
own schedule, through `train.loop.run`), and unless --ours-only DirectVoxGO (its default
schedule, bench/compare/dvgo/bench_dvgo.py's functions; a log `<scene>.log` already in --dvgo-log is
read instead of running it again, and a new run's log is kept there). Results accumulate
in --out/scenes.json (a call updates the scenes it ran), so scenes, systems and calls can
be split to fit a time limit (bench/training/scenes_pool.py spreads them over a host's GPUs);
--label names ours' system (one per config or schedule: `fast`, `quality`, ...).
scenes.md is the table of all of them: per scene (and its split) a row per system (PSNR,
SSIM, training seconds, peak memory; ours against DirectVoxGO: the end's difference, PSNR
at its training time, and when ours first reaches its PSNR as a fraction of its time),
then each system's means and how many scenes it is below DirectVoxGO on, per half and over all.
--generate-only generates the scenes and records their generation seconds.
--gsplat-only trains Gaussian splatting instead (bench/compare/gsplat/gsplat_scene.py, gsplat's
rasterizer in a program of its own; the system `gsplat` in the table, the upper anchor).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: bench, grid, train

from bench.compare.dvgo.bench_dvgo import (  # noqa: E402
    GIB,
    BenchError,
    dvgo_result,
    find_dvgo,
    run_dvgo,
    run_ours,
)
from bench.harness import ROOT  # noqa: E402
from train.config import load_config  # noqa: E402
from train.errors import ConfigError  # noqa: E402
from train.loop import select_device  # noqa: E402
from train.metrics import psnr  # noqa: E402
from train.nerf.experiment import ensure_scene  # noqa: E402


class Scene(NamedTuple):
    """One scene of the set: `name`; `mesh` (a file of --meshes; None: the realistic
    scene); `look` (train.nerf.scenes.scan's LOOKS, or "realistic"); `size` (pixels);
    `split`: "tune" (every config value was chosen on these) or "held_out" (verdicts only);
    `up`: the mesh's up axis."""

    name: str
    mesh: str | None
    look: str
    size: int
    split: str
    up: str = "+y"


#: The tuning half: the six scenes every config so far was tuned on. The held-out half:
#: meshes no config has seen (thin parts, fine carving), the looks mixed otherwise (two in
#: chrome, glass on a thin trunk, glaze at 800x800, none filling the box).
SCENES = (
    Scene("realistic", None, "realistic", 400, "tune"),
    Scene("bunny_glossy", "bunny00.off", "glossy", 400, "tune"),
    Scene("cow_mirror", "cow.off", "mirror", 400, "tune"),
    Scene("bull_rough", "bull.off", "rough", 400, "tune"),
    Scene("camel_translucent", "camel.off", "translucent", 400, "tune"),
    Scene("armadillo_large", "armadillo.off", "large", 800, "tune"),
    Scene("dragon_mirror", "ChineseDragon-10kv.off", "mirror", 400, "held_out"),
    Scene("elephant_translucent", "elephant.off", "translucent", 400, "held_out"),
    Scene("diplodocus_rough", "diplodocus.off", "rough", 400, "held_out"),
    Scene("dino_mirror", "dino.off", "mirror", 400, "held_out"),
    Scene("triceratops_glossy", "triceratops.off", "glossy", 800, "held_out"),
)
NAMES = tuple(s[0] for s in SCENES)
SPLITS = ("tune", "held_out")
METRICS = ("psnr", "ssim", "train_seconds", "peak_allocated")


def pick(names: str | None, option: str = "--scenes", split: str = "all") -> list[Scene]:
    """The SCENES rows named in "a,b,c" (all when None) that are in `split` ("tune",
    "held_out" or "all"); BenchError naming `option` on an unknown name, naming --split on
    an unknown split or when a named scene is not in it."""
    if split not in (*SPLITS, "all"):
        raise BenchError(f"--split: expected tune, held_out or all, got {split!r}")
    if not names:
        return [s for s in SCENES if split in ("all", s.split)]
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in NAMES]
    if unknown:
        raise BenchError(f"{option}: unknown {', '.join(unknown)}; expected {', '.join(NAMES)}")
    rows = [s for s in SCENES if s[0] in wanted]
    outside = [s.name for s in rows if split not in ("all", s.split)]
    if outside:
        raise BenchError(f"--split {split}: {', '.join(outside)} not in it")
    return rows


def split_of(name: str) -> str | None:
    """The split of the scene `name` (None: not one of SCENES)."""
    return next((s.split for s in SCENES if s.name == name), None)


def find_mesh(meshes: str | None, file: str) -> Path:
    """The mesh `file` in the folder --meshes (or its data/meshes); BenchError if absent."""
    if not meshes:
        raise BenchError(
            f"--meshes not given: a folder holding {file} (Debian's libcgal-demo: "
            "/usr/share/doc/libcgal-dev/data.tar.gz, unpacked)"
        )
    for path in (Path(meshes) / file, Path(meshes) / "data" / "meshes" / file):
        if path.is_file():
            return path.resolve()
    raise BenchError(f"--meshes {meshes}: no {file} there (nor in its data/meshes)")


def scene_overrides(
    row: tuple, meshes: str | None, data: Path, size: int | None = None
) -> list[str]:
    """The --set options that put scene `row` in the config's `data.*` (`size`: instead
    of the row's, a quick check)."""
    name, mesh, look, size = (*row[:3], size or row[3])
    up = getattr(row, "up", "+y")
    sets = [f"data.path={json.dumps(str(data / f'{name}_{size}'))}", f"data.scene_size={size}"]
    sets += ["data.generate=true"]
    if mesh is None:
        return sets + [f"data.scene={look}"]
    path = find_mesh(meshes, mesh)
    return sets + [
        "data.scene=scan",
        f"data.scene_mesh={json.dumps(str(path))}",
        f"data.scene_look={look}",
        f"data.scene_up={up}",
    ]


def ours_result(ours: dict[str, Any]) -> dict[str, Any]:
    """The numbers of a `run_ours` result that the table shows; `curve`: [train seconds,
    PSNR] at each evaluation (for PSNR at DirectVoxGO's time and the time to reach its);
    `train_psnr`: the training batches' PSNR since the evaluation before each (a test curve
    that levels off while this one climbs is the model fitting the training views)."""
    summary = ours["summary"] or {}
    evaluations = [r for r in ours["records"] if "psnr" in r]
    curve = [[r["train_seconds"], r["psnr"]] for r in evaluations]
    trained = all("train_mse" in r for r in evaluations)
    train_psnr = [psnr(r["train_mse"], 1.0) for r in evaluations] if trained else None
    return {
        "psnr": summary.get("psnr"),
        "ssim": summary.get("ssim"),
        "train_seconds": summary.get("train_seconds"),
        "steps": summary.get("steps"),
        "peak_allocated": ours["peak_allocated"],
        "peak_reserved": ours["peak_reserved"],
        "curve": curve,
        "train_psnr": train_psnr,
        # where a captured run's training time went besides its steps
        **{k: summary[k] for k in ("graph_captures", "graph_capture_seconds") if k in summary},
    }


def dvgo_summary(text: str, scene: Path) -> dict[str, Any]:
    """DirectVoxGO's numbers from its output; PSNR and SSIM of its 8-bit renders scored
    here (as ours) when they are still on disk, else its own."""
    result = dvgo_result(text, scene)
    scored = result["scored"]
    return {
        "psnr": scored["psnr"] if scored else result["psnr"],
        "ssim": scored["ssim"] if scored else result["ssim"],
        "scored_here": scored is not None,
        "own_psnr": result["psnr"],
        "own_ssim": result["ssim"],
        "train_seconds": result["train_seconds"],
        "peak_allocated": result["peak_allocated"],
        "peak_reserved": result["peak_reserved"],
    }


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


def one_scene(row: tuple, args, device: torch.device, entry: dict, dvgo_dir: Path | None) -> None:
    """Generates scene `row`, then trains the systems asked for; fills `entry`."""
    name = row[0]
    overrides = scene_overrides(row, args.meshes, args.data, args.size)
    sets = ["output.progress=false", *args.set, *overrides]
    base = load_config(args.config, sets)
    start = time.perf_counter()
    scene = ensure_scene(base, device).resolve()
    seconds = time.perf_counter() - start
    if seconds > 1.0 or "generate_seconds" not in entry:  # not merely found in place
        entry["generate_seconds"] = seconds
    print(f"bench_scenes: {name} ready in {seconds:.1f} s ({scene})", flush=True)
    if args.generate_only:
        return
    if args.gsplat_only:
        entry["gsplat"] = run_gsplat(scene, Path(args.work) / name / "gsplat", args.gsplat_steps)
        return
    if not args.ours_only:
        cached = Path(args.dvgo_log) / f"{name}.log" if args.dvgo_log else None
        if cached is not None and cached.is_file():
            text = cached.read_text()
        else:
            work = Path(args.work) / name
            log = cached or work / "dvgo.log"
            log.parent.mkdir(parents=True, exist_ok=True)
            text = run_dvgo(dvgo_dir, scene, work, log, iters=args.dvgo_iters)
        entry["dvgo"] = dvgo_summary(text, scene)
    if not args.dvgo_only:
        quiet = ["output.checkpoint_every=0", "output.turntable_frames=0"]
        config = load_config(args.config, [*sets, *quiet])
        run_dir = Path(args.work) / name / args.label
        entry[args.label] = ours_result(run_ours(config, run_dir, device))


def run_gsplat(scene: Path, work: Path, steps: int) -> dict[str, Any]:
    """bench/compare/gsplat/gsplat_scene.py on `scene` as a program of its own (its output on
    ours); its
    numbers (gsplat.json). BenchError when it fails."""
    script = ROOT / "bench" / "compare" / "gsplat" / "gsplat_scene.py"
    command = [sys.executable, str(script), str(scene), "--out", str(work)]
    if subprocess.run([*command, "--steps", str(steps)]).returncode != 0:
        raise BenchError(
            f"gsplat on {scene}: bench/compare/gsplat/gsplat_scene.py failed (its output above)"
        )
    return json.loads((work / "gsplat.json").read_text())


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--meshes", default=None, help="folder of the .off meshes")
    parser.add_argument("--scenes", default=None, help=f"comma-separated, of {', '.join(NAMES)}")
    parser.add_argument("--split", default="all", help="tune, held_out or all (SCENES' halves)")
    parser.add_argument("--config", default=str(ROOT / "configs" / "nerf_realistic_gpu.toml"))
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "scenes"))
    parser.add_argument("--data", type=Path, default=ROOT / "data" / "scenes")
    parser.add_argument("--work", default=str(ROOT / "bench" / "results" / "scenes_work"))
    parser.add_argument("--size", type=int, default=None, help="every scene's size (a check)")
    parser.add_argument("--generate-only", action="store_true", help="generate, train nothing")
    parser.add_argument("--ours-only", action="store_true", help="no DirectVoxGO")
    parser.add_argument("--label", default="ours", help="ours' name in the table (one per config)")
    parser.add_argument("--dvgo-only", action="store_true", help="DirectVoxGO alone")
    parser.add_argument("--dvgo", default=None, help="DirectVoxGO folder (default: $DVGO_DIR)")
    parser.add_argument("--dvgo-log", default=None, help="folder of <scene>.log outputs")
    parser.add_argument("--dvgo-iters", default=None, metavar="C,F", help="a quick check")
    parser.add_argument("--gsplat-only", action="store_true", help="Gaussian splatting alone")
    parser.add_argument("--gsplat-steps", type=int, default=30000, help="its training steps")
    return parser.parse_args(argv)


def main(argv=None, train=one_scene) -> int:
    args = parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = load_results(out / "scenes.json")
    meta = {
        "device_name": "CPU",
        "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "config": args.config,
        "overrides": args.set,
    }
    try:
        check_label(args.label)
        rows = pick(args.scenes, split=args.split)
        needs_dvgo = not (args.ours_only or args.generate_only or args.gsplat_only)
        dvgo_dir = find_dvgo(args.dvgo) if needs_dvgo and not _all_cached(args, rows) else None
        device = select_device(load_config(args.config, ["output.progress=false"]).device)
        if device.type == "cuda":
            meta["device_name"] = torch.cuda.get_device_name(device)
        for row in rows:
            entry = results.setdefault(row[0], {})
            entry.update(mesh=row[1], look=row[2], size=args.size or row[3], split=row.split)
            train(row, args, device, entry, dvgo_dir)
            save(out, results, meta)  # after every scene: a later failure keeps the others
    except (BenchError, ConfigError) as error:
        print(f"bench_scenes: {error}", file=sys.stderr)
        return 2
    table = save(out, results, meta)
    print(table)
    print(f"wrote {out / 'scenes.md'} and {out / 'scenes.json'}")
    return 0


def check_label(label: str) -> None:
    """--label names a system in the table: a word, not DirectVoxGO's nor a scene field."""
    taken = ("dvgo", "gsplat", "mesh", "look", "size", "split", "generate_seconds")
    if not label.replace("_", "").replace("-", "").isalnum() or label in taken:
        raise BenchError(
            f"--label: expected a word of letters, digits, - or _ other than "
            f"{', '.join(taken)}; got {label!r}"
        )


def _all_cached(args, rows: list[tuple]) -> bool:
    """Every scene's DirectVoxGO output is in --dvgo-log already (no DirectVoxGO needed)."""
    return bool(args.dvgo_log) and all(
        (Path(args.dvgo_log) / f"{row[0]}.log").is_file() for row in rows
    )


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
