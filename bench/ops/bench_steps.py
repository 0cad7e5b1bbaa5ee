"""Training-step workloads of bench/ops/bench_ops.py (run them with
`python bench/ops/bench_ops.py --only T1,E1`).

    T1  one VoxelGrid training step (forward, MSE, backward, Adam); vs the same step on
        F.grid_sample
    E1  an eikonal training step (double backward), F = 1 and 8, linear and smoothstep; vs
        the same step on grid.reference.sample, and vs F.grid_sample where it has a double
        backward
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

import grid
from bench.harness import MB, Ctx, attach_check, make_row, measure, rel_err
from bench.ops.workloads import generator, grid_sample, touched_voxels, uniform_points
from grid import reference

# ---- T1: a training step -----------------------------------------------------------


def adam(params) -> tuple[torch.optim.Optimizer, str]:
    """Fused Adam, or foreach Adam where this torch/device has no fused kernel."""
    try:
        # Some versions only complain at the first step: try one on a scratch tensor.
        scratch = torch.zeros_like(params[0], requires_grad=True)
        scratch.grad = torch.zeros_like(scratch)
        torch.optim.Adam([scratch], lr=1e-2, fused=True).step()
        return torch.optim.Adam(params, lr=1e-2, fused=True), "Adam fused"
    except (RuntimeError, ValueError, TypeError) as error:
        print(f"    fused Adam unavailable ({error}); using foreach", file=sys.stderr)
        return torch.optim.Adam(params, lr=1e-2, foreach=True), "Adam foreach (fused n/a)"


def make_voxel_grid(r: int, f: int, init: torch.Tensor) -> tuple[torch.nn.Module, torch.Tensor]:
    """A VoxelGrid over [-1, 1]^3 holding `init` ([X, Y, Z, F]); returns it and its parameter."""
    from grid.voxel_grid import VoxelGrid  # also grid.VoxelGrid once exported

    cube = ((-1.0, -1.0, -1.0), (1.0, 1.0, 1.0))
    module = VoxelGrid(r, f, bounds=cube, init="zeros", device=init.device)
    params = dict(module.named_parameters())
    param = params["features"] if "features" in params else next(iter(params.values()))
    if len(params) != 1 or tuple(param.shape) != tuple(init.shape):
        shapes = {k: tuple(v.shape) for k, v in params.items()}
        raise RuntimeError(f"VoxelGrid: expected one [X, Y, Z, F] parameter, got {shapes}")
    with torch.no_grad():
        param.copy_(init)
    return module, param


def train_bytes(n: int, f: int, voxels: int, touched: int) -> int:
    """Minimal bytes of one step, op by op (float32 throughout)."""
    grid_bytes = voxels * f * 4
    fw = touched * f * 4 + n * 12 + n * f * 4  # read touched voxels, points; write out
    loss = 3 * n * f * 4  # read out and target, write grad_out (the scalar is free)
    backward = n * f * 4 + n * 12 + grid_bytes  # read grad_out, points; write the grad grid
    adam_bytes = 7 * grid_bytes  # read param, grad, exp_avg, exp_avg_sq; write three
    return fw + loss + backward + adam_bytes


def bench_train(ctx: Ctx, name: str, size: dict, seed: int) -> list[dict]:
    dev, r, f, n = ctx.device, size["r"], size["f"], size["n"]
    gen = generator(dev, seed)
    init = torch.randn(r, r, r, f, device=dev, generator=gen)
    points = uniform_points(n, dev, gen)
    target = torch.randn(n, f, device=dev, generator=gen)

    module, param = make_voxel_grid(r, f, init)
    opt, opt_name = adam([param])
    check = {"fw_rel_err": rel_err(module(points), reference.sample(init, points))}

    def step():
        opt.zero_grad(set_to_none=True)
        F.mse_loss(module(points), target).backward()
        opt.step()

    # The same step written for F.grid_sample: channels-first parameter, and the target
    # stored channels-first too so the loss needs no transpose (the baseline's best case).
    cf = torch.nn.Parameter(init.permute(3, 2, 1, 0)[None].contiguous())
    opt_b, _ = adam([cf])
    p5 = points.reshape(1, 1, 1, n, 3)
    target_cf = target.T.contiguous()

    def step_base():
        opt_b.zero_grad(set_to_none=True)
        F.mse_loss(grid_sample(cf, p5).reshape(f, n), target_cf).backward()
        opt_b.step()

    ours = measure(ctx, step, dev, peak=True)
    base = measure(ctx, step_base, dev, peak=True)
    nbytes = train_bytes(n, f, r**3, touched_voxels(points, r))
    note = f"R={r} F={f} N={n} uniform, {opt_name}"
    if dev.type == "cpu":
        note += f", {torch.get_num_threads()} CPU threads"
    row = make_row(name, "step", "train step", ours, "F.grid_sample step", base, nbytes,
                   ctx.gbps(dev), r**3 * f * 4 / MB, note)  # fmt: skip
    row["steps_per_s"] = 1e3 / row["ours_ms"] if row["ours_ms"] else None
    row["baseline_steps_per_s"] = 1e3 / row["baseline_ms"] if row["baseline_ms"] else None
    if row["steps_per_s"] and row["baseline_steps_per_s"]:
        row["note"] += f"; {row['steps_per_s']:.1f} vs {row['baseline_steps_per_s']:.1f} steps/s"
    row["optimizer"] = opt_name
    attach_check([row], check, 1e-4)
    return [row]


# ---- E1: an eikonal training step (double backward) ---------------------------------

E1_FEATURES = (1, 8)
E1_INTERPOLATIONS = ("linear", "smoothstep")


def eikonal_bytes(n: int, f: int, voxels: int, touched: int) -> int:
    """Minimal bytes of one eikonal step (float32): the forward, the point gradient and the
    double backward each read the touched voxels; the double backward writes the grid's
    gradient; Adam reads 4 and writes 3 grid-sized tensors."""
    grid_bytes = voxels * f * 4
    fw = touched * f * 4 + n * 12 + n * f * 4  # read voxels and points, write f
    grad_x = touched * f * 4 + n * f * 4 + n * 12  # read voxels and grad_out, write grad_x
    loss = 2 * n * 12  # read grad_x, write its gradient
    double = touched * f * 4 + n * f * 4 + 2 * n * 12 + grid_bytes  # + the grid gradient
    return fw + grad_x + loss + double + 7 * grid_bytes


def eikonal_step(sample_fn, param, points, opt):
    """One step of an eikonal loss on the field f = sum over channels of sample_fn."""

    def step():
        opt.zero_grad(set_to_none=True)
        f = sample_fn(param, points).sum(-1)
        (g,) = torch.autograd.grad(f.sum(), points, create_graph=True)
        loss = (g.norm(dim=-1) - 1).square().mean() + f.abs().mean()
        loss.backward(inputs=[param])
        opt.step()

    return step


def bench_eikonal(ctx: Ctx, name: str, size: dict, seed: int) -> list[dict]:
    dev, r, n = ctx.device, size["r"], size["n"]
    rows = []
    for f in E1_FEATURES:
        gen = generator(dev, seed + f)
        init = torch.randn(r, r, r, f, device=dev, generator=gen) * 0.1
        points = uniform_points(n, dev, gen).requires_grad_()
        nbytes = eikonal_bytes(n, f, r**3, touched_voxels(points.detach(), r))
        for interp in E1_INTERPOLATIONS:
            param = torch.nn.Parameter(init.clone())
            opt, opt_name = adam([param])
            ref_param = torch.nn.Parameter(init.clone())
            ref_opt, _ = adam([ref_param])
            ours_fn = lambda v, p, i=interp: grid.sample(v, p, interpolation=i)  # noqa: E731
            ref_fn = lambda v, p, i=interp: reference.sample(v, p, True, "zeros", i)  # noqa: E731
            check = {"grad_rel_err": eikonal_check(ours_fn, ref_fn, init, points.detach())}
            ours = measure(ctx, eikonal_step(ours_fn, param, points, opt), dev, peak=True)
            base = measure(ctx, eikonal_step(ref_fn, ref_param, points, ref_opt), dev, peak=True)
            note = f"R={r} F={f} N={n} uniform, {interp}, {opt_name}"
            row = make_row(name, f"step_F{f}_{interp}", f"eikonal step F={f} {interp}", ours,
                           "reference step", base, nbytes, ctx.gbps(dev), r**3 * f * 4 / MB,
                           note)  # fmt: skip
            rows.append(row)
            attach_check([row], check, 1e-4)
            if interp == "linear":
                rows.append(eikonal_grid_sample_row(ctx, name, f, init, points, ours, nbytes))
    return rows


def eikonal_check(ours_fn, ref_fn, init, points) -> float:
    """Relative error of the eikonal loss's feature gradient against the reference's."""
    grads = []
    for fn in (ours_fn, ref_fn):
        v = init.clone().requires_grad_()
        p = points.clone().requires_grad_()
        f = fn(v, p).sum(-1)
        (g,) = torch.autograd.grad(f.sum(), p, create_graph=True)
        loss = (g.norm(dim=-1) - 1).square().mean() + f.abs().mean()
        grads.append(torch.autograd.grad(loss, v)[0])
    return rel_err(*grads)


def eikonal_grid_sample_row(ctx, name, f, init, points, ours, nbytes) -> dict:
    """The linear step against F.grid_sample's double backward (recorded as an error where
    this PyTorch has none for 3-D grids on this device)."""
    dev, r, n = ctx.device, init.shape[0], points.shape[0]
    cf = torch.nn.Parameter(init.permute(3, 2, 1, 0)[None].contiguous())
    opt, _ = adam([cf])

    def gs(v, p):
        return grid_sample(v, p.reshape(1, 1, 1, -1, 3)).reshape(v.shape[1], -1).T

    base = measure(ctx, eikonal_step(gs, cf, points, opt), dev, peak=True)
    note = f"R={r} F={f} N={n} uniform, linear"
    return make_row(name, f"step_F{f}_linear_gs", f"eikonal step F={f} linear", ours,
                    "F.grid_sample step", base, nbytes, ctx.gbps(dev), r**3 * f * 4 / MB,
                    note)  # fmt: skip
