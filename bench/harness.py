"""The benchmarks' shared harness: timing, statistics, peak memory, result rows and their
correctness checks, targets and verdicts, the printed and markdown tables, the JSON output.

Every time is a median over repetitions. On the GPU `timeit` takes two timings: queued (CUDA
events around kernels enqueued back to back behind a GPU sleep: the kernels' time) and
synchronised (host clock around each repetition plus a device synchronise: what a step loop
sees, host cost included); on the CPU perf_counter (both the same).

Import it as `bench.harness` (scripts under bench/ put the checkout first on sys.path: see
bench/README.md). Importing it also puts the checkout on sys.path (ROOT), so that `import
grid` and `import train` find this checkout even where it was reached some other way.
"""

from __future__ import annotations

import gc
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

MB = 2**20

# ---- timing -----------------------------------------------------------------------


class Ctx:
    """What every workload needs: devices, repetition counts, copy bandwidths (GB/s)."""

    def __init__(self, args, device: torch.device):
        self.device = device
        self.quick = args.quick
        cuda = device.type == "cuda"
        self.warmup = {"cuda": 3 if args.quick else 10, "cpu": 1 if args.quick else 2}
        self.reps = {"cuda": 10 if args.quick else 30, "cpu": 5}
        if args.warmup is not None:
            self.warmup = dict.fromkeys(self.warmup, args.warmup)
        if args.reps is not None:
            self.reps = dict.fromkeys(self.reps, args.reps)
        # 256 MiB on the CPU: smaller copies measured unstable (cache, page effects).
        self.copy_bytes = {"cuda": 2**28 if args.quick else 2**30, "cpu": 2**28}
        self.bandwidth: dict[str, float] = {}
        self.bandwidth_stats: dict[str, dict] = {}
        if cuda:
            self.gbps(device)

    def gbps(self, device: torch.device) -> float:
        """Copy bandwidth of `device` in GB/s (bytes read + written), measured once."""
        kind = device.type
        if kind not in self.bandwidth:
            n = self.copy_bytes[kind] // 4
            src = torch.rand(n, device=device)
            dst = torch.empty_like(src)
            t = timeit(lambda: dst.copy_(src), device, self.warmup[kind], self.reps[kind])
            self.bandwidth[kind] = 2 * n * 4 / (t["median"] * 1e-3) / 1e9
            self.bandwidth_stats[kind] = {"bytes_copied": n * 4, **t}
            del src, dst
            free_memory()
        return self.bandwidth[kind]

    def time(self, fn, device: torch.device) -> dict:
        return timeit(fn, device, self.warmup[device.type], self.reps[device.type])


def timeit(fn, device: torch.device, warmup: int, reps: int) -> dict:
    """Median (and spread) in ms of `fn()`.

    On the GPU two timings: the top-level keys are the *queued* one (CUDA events per
    repetition around work that waits in the queue, see `queue_behind_sleep`: the kernels
    back to back, host cost hidden), and `synced` holds the *synchronised* one (the host
    clock around `fn()` plus a device synchronise, each repetition on an idle GPU, as a
    training loop of small steps sees it: host cost counts). On the CPU both are the same
    perf_counter timing. Callers that only read the top-level keys get what they got before.
    """
    for _ in range(warmup):
        fn()
    if device.type != "cuda":
        times = host_times(fn, device, reps)
        return {**statistics(times), "reps": reps, "warmup": warmup, "synced": statistics(times)}
    synced = host_times(fn, device, reps)
    one_ms = statistics(synced)["median"]  # host and GPU time of one repetition
    events = [
        (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
        for _ in range(reps)
    ]
    sleep_ms = queue_behind_sleep(device, min(2 * one_ms * reps, MAX_SLEEP_MS))
    t0 = time.perf_counter()
    for start, end in events:
        start.record()
        fn()
        end.record()
    enqueue_ms = (time.perf_counter() - t0) * 1e3
    torch.cuda.synchronize(device)
    times = [start.elapsed_time(end) for start, end in events]
    # queued: every repetition was enqueued before the GPU finished sleeping
    extra = {
        "host_ms": enqueue_ms / reps,
        "queued": enqueue_ms < sleep_ms,
        "synced": statistics(synced),
    }
    return {**statistics(times), "reps": reps, "warmup": warmup, **extra}


def timeit_synced(fn, device: torch.device, warmup: int, reps: int) -> dict:
    """`timeit`'s synchronised timing alone, with its own warm-up: median (and spread) in ms
    of `fn()` timed one call at a time from an idle device to a device synchronise."""
    for _ in range(warmup):
        fn()
    return {**statistics(host_times(fn, device, reps)), "reps": reps, "warmup": warmup}


def host_times(fn, device: torch.device, reps: int, calls: int = 1) -> list[float]:
    """Milliseconds per call of `fn`: `reps` repetitions of `calls` calls back to back, each
    repetition timed by the host clock from an idle device to a device synchronise after its
    last call (on the CPU, the host clock alone)."""
    cuda = device.type == "cuda"
    times = []
    for _ in range(reps):
        if cuda:
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        if cuda:
            torch.cuda.synchronize(device)
        times.append((time.perf_counter() - t0) * 1e3 / calls)
    return times


def statistics(times: list[float]) -> dict:
    """Median, min, max, 20th and 80th percentile of `times`."""
    s = sorted(times)

    def q(p: float) -> float:
        return s[round(p * (len(s) - 1))]

    return {"median": q(0.5), "min": s[0], "max": s[-1], "p20": q(0.2), "p80": q(0.8)}


def synced_median(stats: dict | None) -> float | None:
    """The synchronised median of a `timeit` result (None for a failed measurement)."""
    return stats["synced"]["median"] if stats and "synced" in stats else None


# Enqueueing one fw+bw (Python, autograd's device thread, launches) took 0.2-0.6 ms on the
# H100's host, varying from run to run: as long as the GPU work it enqueues. Events around
# work launched while the GPU waits would time the host. So the GPU first sleeps while every
# repetition is enqueued; the events then time the kernels back to back, for us and the
# baseline alike.
MAX_SLEEP_MS = 2000.0
_cycles_per_ms: dict[int, float] = {}


def queue_behind_sleep(device: torch.device, ms: float) -> float:
    """Enqueue a GPU spin of about `ms` milliseconds on the current stream; returns `ms`."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _cycles_per_ms:  # calibrate the spin against events once
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        cycles = 20_000_000
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
        _cycles_per_ms[index] = cycles / start.elapsed_time(end)
    torch.cuda._sleep(int(ms * _cycles_per_ms[index]))
    return ms


def peak_mb(fn, device: torch.device) -> float | None:
    """Peak CUDA memory of one `fn()` above what was allocated before it, in MB."""
    if device.type != "cuda":
        return None
    gc.collect()
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    result = fn()
    torch.cuda.synchronize(device)
    del result
    return (torch.cuda.max_memory_allocated(device) - before) / MB


def free_memory() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def attempt(fn):
    """(fn(), None), or (None, 'ErrorType: message') if it raises."""
    try:
        return fn(), None
    except Exception as error:  # noqa: BLE001 - a failing baseline must not lose the row
        return None, f"{type(error).__name__}: {str(error).strip().splitlines()[0][:200]}"


# ---- checks -----------------------------------------------------------------------


@torch.no_grad()
def rel_err(ours: torch.Tensor, base: torch.Tensor) -> float:
    """max |ours - base| / max |base|."""
    ours, base = ours.double(), base.double()
    return float((ours - base).abs().max() / base.abs().max().clamp(min=1e-30))


def attach_check(rows: list[dict], check: dict, tol: float | dict[str, float]) -> None:
    """Record the correctness check on every row: a fast wrong kernel must not pass.
    `tol`: one tolerance for every quantity, or one per key of `check`."""
    limit = tol if isinstance(tol, dict) else dict.fromkeys(check, tol)
    ok = None if "error" in check else all(v <= limit[k] for k, v in check.items())
    for row in rows:
        row.update(check=check, check_tol=tol, check_ok=ok)


# ---- rows -------------------------------------------------------------------------


def measure(ctx: Ctx, fn, device: torch.device, *, peak: bool = False) -> dict:
    """Time `fn` (and its peak memory); an error is recorded, not raised."""
    stats, error = attempt(lambda: ctx.time(fn, device))
    mb = attempt(lambda: peak_mb(fn, device))[0] if peak and stats else None
    return {"stats": stats, "error": error, "peak_mb": mb}


def make_row(name, key, pass_, ours, base_name, base, nbytes, bandwidth, grid_mb, note):
    """One table row; `ours`/`base` come from measure(), bandwidth is in GB/s."""
    ours_ms = ours["stats"]["median"] if ours["stats"] else None
    base_ms = base["stats"]["median"] if base and base["stats"] else None
    ours_sync, base_sync = synced_median(ours["stats"]), synced_median(base and base["stats"])
    floor_ms = nbytes / (bandwidth * 1e9) * 1e3 if nbytes and bandwidth else None
    return {
        "workload": name,
        "key": key,
        "pass": pass_,
        "ours_ms": ours_ms,
        "ours": ours["stats"],
        "ours_error": ours["error"],
        "peak_mb": ours["peak_mb"],
        "baseline": base_name,
        "baseline_ms": base_ms,
        "baseline_stats": base and base["stats"],
        "baseline_error": base and base["error"],
        "baseline_peak_mb": base and base["peak_mb"],
        "speedup": base_ms / ours_ms if ours_ms and base_ms else None,
        "ours_sync_ms": ours_sync,
        "baseline_sync_ms": base_sync,
        "speedup_sync": base_sync / ours_sync if ours_sync and base_sync else None,
        "bytes": nbytes,
        "bandwidth_gbps": bandwidth,
        "floor_ms": floor_ms,
        "pct_ceiling": floor_ms / ours_ms if floor_ms and ours_ms else None,
        "achieved_gbps": nbytes / (ours_ms * 1e-3) / 1e9 if nbytes and ours_ms else None,
        "grid_mb": grid_mb,
        "note": note,
    }


# ---- targets ---------------------------------------------------------------------


def find(rows, workload, key):
    for row in rows:
        if row["workload"] == workload and row.get("key") == key:
            return row
    return None


# A timing whose 80th percentile exceeds its 20th by more than this was disturbed (seen
# once on the H100: a float32 S4 reference at p20 0.76 ms, p80 1.95 ms against a steady
# 0.51 ms elsewhere in the run); a verdict built on it would be noise.
NOISY_SPREAD = 1.25


def noisy(stats: dict | None) -> bool:
    return bool(stats) and stats["p80"] > NOISY_SPREAD * stats["p20"]


def host_bound(stats: dict | None) -> bool:
    """The GPU's sleep ended before every repetition was enqueued: some were timed while the
    GPU waited on the host."""
    return bool(stats) and stats.get("queued") is False


def targets(rows: list[dict], specs: list[tuple], synced_verdicts: set) -> list[dict]:
    """Every target of the workloads that ran, with its measured value and verdict
    (an errored measurement counts as missed; a noisy one is not counted as met).

    `specs`: (workload, key, kind, threshold, text) of every target, kind "pct" (share of the
    byte floor), "speedup" (baseline / ours) or "ratio" (ours / baseline, smaller is better);
    `synced_verdicts`: the (workload, key) whose verdict reads the synchronised timing."""
    result = []
    for w, key, kind, threshold, text in specs:
        row = find(rows, w, key)
        if row is None:
            continue
        timing = "synced" if (w, key) in synced_verdicts else "queued"
        ours = row.get("ours") or {}
        on_gpu = "host_ms" in ours or ours.get("device") == "cuda"
        mode = timing if on_gpu else "CPU"  # on the CPU both timings are the same
        if "calls" in ours:  # O1: many calls back to back, then one synchronize
            mode = f"{'CUDA' if on_gpu else 'CPU'}, per call"
        speedup = row["speedup_sync"] if timing == "synced" else row["speedup"]
        if kind == "pct":
            value = row["pct_ceiling"]
            shown = f"{value:.1%}" if value is not None else "error"
        elif kind == "speedup":
            value = speedup
            shown = f"{value:.2f}x" if value is not None else "error"
        else:  # ours / baseline time, smaller is better
            value = 1 / speedup if speedup else None
            shown = f"{value:.2f}x" if value is not None else "error"
        if value is None:
            met = False
        else:
            met = value <= threshold if kind == "ratio" else value >= threshold
        # the timings the verdict uses: a bandwidth target does not depend on the baseline
        used = [row.get("ours")] + ([] if kind == "pct" else [row.get("baseline_stats")])
        if timing == "synced":
            used = [t and t.get("synced") for t in used]
        if row.get("check_ok") is False:
            met, shown = False, shown + " (WRONG RESULTS)"
        elif any(noisy(t) for t in used):
            met, shown = False, shown + " (NOISY: re-run)"
        elif timing == "queued" and any(host_bound(t) for t in used):
            met, shown = False, shown + " (HOST-BOUND: GPU idled between kernels)"
        result.append(
            {
                "workload": w,
                "pass": row["pass"],
                "target": f"{w} {row['pass']}: {text} ({mode})",
                "threshold": threshold,
                "value": value,
                "timing": timing,
                "shown": shown,
                "met": met,
            }
        )
    return result


# ---- output ------------------------------------------------------------------------

# "ms" and "x": queued timing (kernels back to back); "sync": synchronised timing (each
# repetition waits for the GPU, host cost included). See `timeit`.
COLUMNS = (
    "workload",
    "pass",
    "ours ms",
    "ours sync",
    "baseline",
    "base ms",
    "base sync",
    "speed-up",
    "x sync",
    "floor ms",
    "% ceil",
    "peak MB",
    "base MB",
    "grid MB",
)


def fmt_ms(x) -> str:
    if x is None:
        return "-"
    return f"{x:.4f}" if x < 1 else f"{x:.3f}" if x < 100 else f"{x:.1f}"


def table_cells(row: dict) -> list[str]:
    def num(x, spec):
        return "-" if x is None else format(x, spec)

    ours = fmt_ms(row["ours_ms"]) if not row.get("ours_error") else "ERROR"
    if row.get("check_ok") is False:
        ours += " (!)"
    base = fmt_ms(row["baseline_ms"]) if not row.get("baseline_error") else "ERROR"

    def ratio(x):
        return "-" if x is None else f"{x:.2f}x"

    return [
        row["workload"],
        row["pass"],
        ours,
        fmt_ms(row.get("ours_sync_ms")),
        row["baseline"] or "-",
        base,
        fmt_ms(row.get("baseline_sync_ms")),
        ratio(row["speedup"]),
        ratio(row.get("speedup_sync")),
        fmt_ms(row["floor_ms"]),
        "-" if row["pct_ceiling"] is None else f"{row['pct_ceiling']:.0%}",
        num(row["peak_mb"], ".1f"),
        num(row["baseline_peak_mb"], ".1f"),
        num(row["grid_mb"], ".1f"),
    ]


def text_table(rows: list[dict]) -> str:
    cells = [list(COLUMNS)] + [table_cells(r) for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(COLUMNS))]
    left = {0, 1, 4}

    def line(c):
        return "  ".join(
            x.ljust(w) if i in left else x.rjust(w)
            for i, (x, w) in enumerate(zip(c, widths, strict=True))
        )

    return "\n".join(
        [line(cells[0]), "  ".join("-" * w for w in widths)] + [line(c) for c in cells[1:]]
    )


def markdown_table(rows: list[dict]) -> str:
    head = "| " + " | ".join(COLUMNS) + " |"
    align = (
        "| " + " | ".join("---" if i in (0, 1, 4) else "---:" for i in range(len(COLUMNS))) + " |"
    )
    body = ["| " + " | ".join(table_cells(r)) + " |" for r in rows]
    return "\n".join([head, align, *body])


def header(meta: dict) -> str:
    bw = ", ".join(f"{k} copy {v:.0f} GB/s" for k, v in meta["copy_bandwidth_gbps"].items())
    bw = bw or "copy bandwidth not measured"
    return (
        f"{meta['device_name']} | torch {meta['torch']} | {meta['date']} | {bw} | "
        f"CPU threads {meta['cpu_threads']} | grid ops: {meta['grid_ops']}"
        + (" | QUICK sizes" if meta["quick"] else "")
    )


VERDICT = {True: "met", False: "MISSED", None: "-"}


def targets_text(result: list[dict]) -> str:
    if not result:
        return "  (no workload with a target ran)"
    width = max(len(t["target"]) for t in result)
    lines = []
    for t in result:
        lines.append(f"{t['target'].ljust(width)}  {t['shown']:>9}  {VERDICT[t['met']]}")
    return "\n".join(lines)


def failures(rows: list[dict], errors: dict[str, str]) -> list[str]:
    """One line per failed workload, failed measurement and wrong result."""
    cells = [
        f"  {r['workload']} {r['pass']} {who}: {r[key]}"
        for r in rows
        if r["key"] != "error"
        for who, key in (("ours", "ours_error"), (r["baseline"], "baseline_error"))
        if r[key]
    ]
    wrong = {
        r["workload"]: f"  {r['workload']}: (!) results differ from the reference beyond "
        f"{r['check_tol']}: {r['check']}"
        for r in rows
        if r.get("check_ok") is False
    }
    return [f"  {w}: {e}" for w, e in errors.items()] + cells + list(wrong.values())


def write_results(path: Path, result: dict, top: str, rows: list[dict], met: list[dict]) -> Path:
    """`result` as JSON at `path`, and next to it (.md) the header, the table and the targets
    in markdown; returns the markdown file's path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2, default=str))
    md = path.with_suffix(".md")
    md_targets = [f"| {t['target']} | {t['shown']} | {VERDICT[t['met']]} |" for t in met]
    md_head = ["| target | measured | |", "| --- | ---: | --- |"]
    md.write_text("\n\n".join([top, markdown_table(rows), "\n".join(md_head + md_targets)]) + "\n")
    return md


def nerf_run_meta(config, path: str, overrides: list[str], device, scene_s: float, steps: int):
    """What a NeRF benchmark against DirectVoxGO records of its run: the device, torch, the
    date, the config (`path` with `overrides`), its generated scene and ours' steps."""
    d = config.data
    return {
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU",
        "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "config": path,
        "overrides": overrides,
        "scene": d.scene,
        "size": d.scene_size,
        "train_views": d.scene_train_views,
        "test_views": d.scene_test_views,
        "scene_seconds": scene_s,
        "ours_steps": steps,
    }
