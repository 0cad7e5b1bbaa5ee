"""The other op workloads of bench/ops/bench_ops.py.

P1, P2  grid.trilinear on pre-gathered corners: forward, backward, backward to the
        corners only; vs grid.reference.trilinear
O1      per-call host cost on tiny inputs (many calls, then one synchronize); vs
        F.grid_sample, on the bench's device and on the CPU with one thread
V1      total variation: grid.total_variation forward+backward and
        total_variation_add_grad_; vs grid.reference.total_variation
U1      one grid.MaskedAdam step over a 160^3 x 12 grid with 5%, 50% and 100% of the voxels
        holding a gradient; vs torch.optim.Adam fused and foreach
"""

from __future__ import annotations

import torch

import grid
from bench.harness import (
    MB,
    Ctx,
    attach_check,
    attempt,
    free_memory,
    host_times,
    make_row,
    measure,
    rel_err,
    statistics,
)
from bench.ops.bench_steps import make_voxel_grid
from bench.ops.workloads import generator, grid_sample, uniform_points
from grid import reference

# ---- P: trilinear on pre-gathered corners -----------------------------------------


def trilinear_bytes(n: int, f: int, e: int = 4) -> dict[str, int]:
    return {
        "fw": n * 8 * f * e + n * 3 * e + n * f * e,  # read corners, local; write out
        # read grad_out, corners, local; write grad_corners, grad_local
        "bw": n * f * e + 2 * n * 8 * f * e + 2 * n * 3 * e,
        # read grad_out, local; write grad_corners (corner values are not needed)
        "bw_corners": n * f * e + n * 3 * e + n * 8 * f * e,
    }


def bench_trilinear(ctx: Ctx, name: str, size: dict, seed: int) -> list[dict]:
    dev, n, f = ctx.device, size["n"], size["f"]
    gen = generator(dev, seed)
    corners = torch.randn(n, 8, f, device=dev, generator=gen)
    local = uniform_points(n, dev, gen)
    g = torch.randn(n, f, device=dev, generator=gen)
    c, lo = corners.detach().requires_grad_(), local.detach().requires_grad_()

    out, ref = grid.trilinear(c, lo), reference.trilinear(c, lo)
    check = {"fw_rel_err": rel_err(out, ref)}
    grads, ref_grads = torch.autograd.grad(out, [c, lo], g), torch.autograd.grad(ref, [c, lo], g)
    check["grad_corners_rel_err"] = rel_err(grads[0], ref_grads[0])
    check["grad_local_rel_err"] = rel_err(grads[1], ref_grads[1])
    del out, ref, grads, ref_grads

    def backward(op, local_in):
        """Time the backward alone: one forward, then autograd.grad with retain_graph.
        For the corners-only pass `local` must not require grad (else both are computed)."""
        inputs = [c, local_in] if local_in.requires_grad else [c]
        held = [op(c, local_in)]  # the graph, freed before the forward+backward peak
        stats = measure(
            ctx, lambda: torch.autograd.grad(held[0], inputs, g, retain_graph=True), dev
        )
        held.clear()
        fwbw = measure(ctx, lambda: torch.autograd.grad(op(c, local_in), inputs, g), dev, peak=True)
        stats["peak_mb"] = fwbw["peak_mb"]  # peak of forward+backward, above the inputs
        stats["fwbw"] = fwbw["stats"]
        return stats

    ours = {
        "fw": measure(ctx, lambda: grid.trilinear(corners, local), dev),
        "bw": backward(grid.trilinear, lo),
        "bw_corners": backward(grid.trilinear, local),
    }
    base = {
        "fw": measure(ctx, lambda: reference.trilinear(corners, local), dev),
        "bw": backward(reference.trilinear, lo),
        "bw_corners": backward(reference.trilinear, local),
    }
    nbytes, bw = trilinear_bytes(n, f), ctx.gbps(dev)
    note = f"N={n} F={f}; grid MB = the corners tensor"
    passes = {"fw": "fw", "bw": "bw (corners+local)", "bw_corners": "bw (corners)"}
    rows = []
    for key, pass_ in passes.items():
        rows.append(
            make_row(name, key, pass_, ours[key], "PyTorch (reference)", base[key],
                     nbytes[key], bw, corners.numel() * 4 / MB, note)
        )  # fmt: skip
        rows[-1]["ours_fwbw"] = ours[key].get("fwbw")
        rows[-1]["baseline_fwbw"] = base[key].get("fwbw")
    attach_check(rows, check, 1e-4)
    return rows


# ---- O1: per-call host cost ---------------------------------------------------------


def per_call(fn, device: torch.device, calls: int, reps: int) -> dict:
    """Milliseconds per call of `fn` issued `calls` times back to back, then one synchronize
    (what a loop of small steps pays, host work included); median and spread over `reps`."""
    warmup = max(1, calls // 4)
    for _ in range(warmup):
        fn()
    times = host_times(fn, device, reps, calls)
    return {**statistics(times), "reps": reps, "warmup": warmup, "calls": calls,
            "device": device.type}  # fmt: skip


def overhead_rows(ctx: Ctx, name: str, size: dict, seed: int, device: torch.device) -> list:
    gen = generator(device, seed)
    r, f, n, calls = size["r"], size["f"], size["n"], size["calls"]
    feats = torch.randn(r, r, r, f, device=device, generator=gen)
    points = uniform_points(n, device, gen)
    g = torch.randn(n, f, device=device, generator=gen)
    fg, pg = feats.detach().requires_grad_(), points.detach().requires_grad_()
    cf = feats.permute(3, 2, 1, 0)[None].contiguous()
    p5 = points.reshape(1, 1, 1, n, 3)
    g_cf = g.T.reshape(1, f, 1, 1, n).contiguous()
    cfg, p5g = cf.detach().requires_grad_(), p5.detach().requires_grad_()
    module, _ = make_voxel_grid(r, f, feats)
    empty = points[:0]
    reps = 7 if ctx.quick else 15

    def timed(fn):
        stats, error = attempt(lambda: per_call(fn, device, calls, reps))
        return {"stats": stats, "error": error, "peak_mb": None}

    with torch.no_grad():
        check = {"fw_rel_err": rel_err(grid.sample(feats, points), reference.sample(feats, points))}
    base_fw = timed(lambda: grid_sample(cf, p5))
    base_fwbw = timed(lambda: torch.autograd.grad(grid_sample(cfg, p5g), [cfg, p5g], g_cf))
    cases = [
        ("fw", "fw", lambda: grid.sample(feats, points), base_fw),
        ("fwbw", "fw+bw", lambda: torch.autograd.grad(grid.sample(fg, pg), [fg, pg], g), base_fwbw),
        ("fw_grad", "fw, grid requires grad", lambda: grid.sample(fg, points), base_fw),
        ("fw_module", "VoxelGrid fw", lambda: module(points), base_fw),
        ("fw_empty", "fw, 0 points", lambda: grid.sample(feats, empty), base_fw),
    ]
    suffix = "_cpu" if device.type == "cpu" else ""
    note = f"[{r},{r},{r},{f}] grid, {n} points, {calls} calls then one sync"
    if device.type == "cpu":
        note += f", {torch.get_num_threads()} CPU thread(s)"
    rows, measured = [], {}
    for key, pass_, fn, base in cases:
        ours = measured[key] = timed(fn)
        label = pass_ + (" (CPU)" if suffix else "")
        row = make_row(name, key + suffix, label, ours, "F.grid_sample" + (
            " fw+bw" if key == "fwbw" else " fw"), base, 0, None, None, note)  # fmt: skip
        rows.append(row)
    # VoxelGrid's wrapper (box map, checks, Module call) against the op it calls: the same
    # timings, read as ours / op (issue 21's goal: <= 1.3x)
    for key, op in (("module_vs_fw", "fw"), ("module_vs_fw_grad", "fw_grad")):
        label = f"VoxelGrid fw / {op}" + (" (CPU)" if suffix else "")
        rows.append(make_row(name, key + suffix, label, measured["fw_module"],
                             f"grid.sample {op}", measured[op], 0, None, None, note))  # fmt: skip
    for row in rows:
        row["us_per_call"] = row["ours_ms"] * 1e3 if row["ours_ms"] else None
        row["baseline_us_per_call"] = row["baseline_ms"] * 1e3 if row["baseline_ms"] else None
    us = ", ".join(
        f"{r['pass']} {r['us_per_call']:.1f} vs {r['baseline_us_per_call']:.1f} us"
        for r in rows
        if r["us_per_call"] and r["baseline_us_per_call"] and "/" not in r["pass"]
    )
    for row in rows:
        row["note"] = note + "; " + us
    attach_check(rows, check, 1e-5)
    return rows


def bench_overhead(ctx: Ctx, name: str, size: dict, seed: int) -> list[dict]:
    """O1 on the bench's device and, always, on the CPU with one thread."""
    rows = []
    if ctx.device.type == "cuda":
        rows += overhead_rows(ctx, name, size, seed, ctx.device)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        rows += overhead_rows(ctx, name, size, seed, torch.device("cpu"))
    finally:
        torch.set_num_threads(threads)
    return rows


# ---- V1: total variation ----------------------------------------------------------------


def bench_total_variation(ctx: Ctx, name: str, size: dict, seed: int) -> list[dict]:
    """Floor: read the grid once, read and write its gradient once (3 x grid bytes)."""
    dev, r, f = ctx.device, size["r"], size["f"]
    gen = generator(dev, seed)
    feats = torch.randn(r, r, r, f, device=dev, generator=gen)
    fg = feats.detach().requires_grad_()
    grad = torch.zeros_like(feats)

    def ours_fwbw():
        return torch.autograd.grad(grid.total_variation(fg), fg)

    def base_fwbw():
        return torch.autograd.grad(reference.total_variation(fg), fg)

    def ours_add():
        grid.total_variation_add_grad_(grad, feats, 1e-3)

    value, (gf,) = grid.total_variation(fg), ours_fwbw()
    ref_value, (ref_grad,) = reference.total_variation(fg), base_fwbw()
    added = torch.zeros_like(feats)
    grid.total_variation_add_grad_(added, feats, 1.0)
    check = {
        "value_rel_err": rel_err(value, ref_value),
        "grad_rel_err": rel_err(gf, ref_grad),
        "add_grad_rel_err": rel_err(added, ref_grad),
    }
    del gf, ref_grad, added
    free_memory()
    grid_bytes = feats.numel() * feats.element_size()
    base = measure(ctx, base_fwbw, dev, peak=True)
    note = f"R={r} F={f} float32, floor 3 x {grid_bytes / MB:.0f} MB"
    if dev.type == "cpu":
        note += f", {torch.get_num_threads()} CPU threads"
    rows = [
        make_row(name, "fwbw", "fw+bw", measure(ctx, ours_fwbw, dev, peak=True),
                 "PyTorch fw+bw", base, 3 * grid_bytes, ctx.gbps(dev), grid_bytes / MB, note),
        make_row(name, "add_grad", "add-grad", measure(ctx, ours_add, dev, peak=True),
                 "PyTorch fw+bw", base, 3 * grid_bytes, ctx.gbps(dev), grid_bytes / MB, note),
    ]  # fmt: skip
    attach_check(rows, check, 1e-4)
    return rows


# ---- U1: masked Adam over a voxel grid ----------------------------------------------------


def voxel_mask_grad(r: int, f: int, fraction: float, device, gen) -> torch.Tensor:
    """[r, r, r, f] float32: random values in a random `fraction` of the voxels (all f
    channels of a chosen voxel), zeros elsewhere: where samples touched a grid, scattered as
    badly as possible (no two touched voxels need be neighbours)."""
    keep = torch.rand(r, r, r, 1, device=device, generator=gen) < fraction
    values = torch.randn(r, r, r, f, device=device, generator=gen)
    return torch.where(keep & (values != 0), values, 0.0)


def touched_granules(grad: torch.Tensor, granule_bytes: int) -> int:
    """Granules (64-byte lines on the CPU, 32-byte sectors on CUDA) of a flat float32 array
    holding at least one non-zero gradient: the least state data a masked update must move."""
    per = granule_bytes // grad.element_size()
    flat = grad.reshape(-1)
    pad = (-flat.numel()) % per
    flat = torch.cat([flat, flat.new_zeros(pad)]) if pad else flat
    return int((flat.reshape(-1, per) != 0).any(dim=1).sum())


def stepper(start: torch.Tensor, grad: torch.Tensor, cls, **options):
    """The `step` of an optimizer `cls` (lr 0.01) over a copy of `start` whose gradient is
    `grad`, after one step (its state exists before any timing)."""
    p = torch.nn.Parameter(start.clone())
    p.grad = grad
    opt = cls([p], lr=1e-2, **options)
    opt.step()
    return opt.step


def bench_masked_adam(ctx: Ctx, name: str, size: dict, seed: int) -> list[dict]:
    """One optimizer step over a [R, R, R, F] float32 grid whose gradient is non-zero in a
    given share of the voxels: grid.MaskedAdam vs torch.optim.Adam fused and foreach (which
    update every voxel). Floor of ours: read the gradient once, read and write param,
    exp_avg and exp_avg_sq in the granules that hold a non-zero gradient."""
    dev, r, f = ctx.device, size["r"], size["f"]
    gen = generator(dev, seed)
    start = torch.randn(r, r, r, f, device=dev, generator=gen)
    grid_bytes = start.numel() * start.element_size()
    granule = 32 if dev.type == "cuda" else 64
    rows = []
    for fraction in size["fractions"]:
        grad = voxel_mask_grad(r, f, fraction, dev, gen)
        touched = touched_granules(grad, granule)

        ours = measure(ctx, stepper(start, grad, grid.MaskedAdam), dev, peak=True)
        baselines = {
            key: measure(ctx, stepper(start, grad, torch.optim.Adam, **{key: True}), dev, peak=True)
            for key in ("fused", "foreach")
        }
        # check: one step from the same state against the reference
        p = torch.nn.Parameter(start.clone())
        p.grad = grad
        check_opt = grid.MaskedAdam([p], lr=1e-2)
        check_opt.step()
        want = [start.clone(), torch.zeros_like(start), torch.zeros_like(start)]
        reference.masked_adam_(*want, grad, lr=1e-2, beta1=0.9, beta2=0.999, eps=1e-8, step=1)
        state = check_opt.state[p]
        check = {
            "param_rel_err": rel_err(p.detach(), want[0]),
            "exp_avg_rel_err": rel_err(state["exp_avg"], want[1]),
            "exp_avg_sq_rel_err": rel_err(state["exp_avg_sq"], want[2]),
        }
        del p, check_opt, state, want
        nbytes = grid_bytes + 6 * touched * granule
        pct = round(fraction * 100)
        note = (
            f"R={r} F={f} float32 ({grid_bytes / MB:.0f} MB per tensor); non-zero gradient in "
            f"a random {pct}% of the voxels = {touched / (grid_bytes / granule):.1%} of the "
            f"{granule}-byte granules; floor = grad + 6 x touched granules"
        )
        if dev.type == "cpu":
            note += f", {torch.get_num_threads()} CPU threads"
        part = []
        for key, base in baselines.items():
            part.append(
                make_row(name, f"p{pct}_{key}", f"step, {pct}% voxels", ours, f"Adam {key}",
                         base, nbytes, ctx.gbps(dev), grid_bytes / MB, note)
            )  # fmt: skip
        attach_check(part, check, 1e-5)
        rows += part
        del grad
        free_memory()
    return rows
