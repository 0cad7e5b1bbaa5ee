"""Sampling workloads of bench/ops/bench_ops.py: grid.sample against F.grid_sample.

S1-S3  forward and forward+backward (grads to features and points), float32
S4     S1 with bfloat16 features, vs our float32 S1 and vs F.grid_sample in bfloat16
S5     the small-F sweep on one set of rays, forward+backward to the grid only
C1     S1's measurement on the CPU (always), uniform points
D1     the backward op alone under torch.use_deterministic_algorithms(True), vs the
       default (atomic) backward, on S1's and S2's inputs and on S5's rays (F = 1, 2, 3, 4, 16,
       gradient to the grid only)
"""

from __future__ import annotations

import torch

import grid
from bench.harness import MB, Ctx, attach_check, attempt, free_memory, make_row, measure, rel_err
from bench.ops.workloads import generator, grid_sample, make_points, seed_of, touched_voxels

# ---- S / C: sample on a dense grid ------------------------------------------------


def sample_bytes(n: int, f: int, voxels: int, touched: int, elem: int) -> dict[str, int]:
    """Minimal bytes of forward and forward+backward; points are float32.

    forward: read the touched voxels once, the points; write the output.
    backward: read grad_out, the points and the touched voxels (for the grad to points);
    write the whole grad grid once (it is dense) and the grad to points.
    """
    fw = touched * f * elem + n * 3 * 4 + n * f * elem
    bw = n * f * elem + n * 3 * 4 + touched * f * elem + voxels * f * elem + n * 3 * 4
    return {"fw": fw, "fwbw": fw + bw}


class SampleCase:
    """One grid + points + grad_out, timed through grid.sample and F.grid_sample."""

    def __init__(self, ctx: Ctx, size: dict, seed: int, device: torch.device):
        gen = generator(device, seed)
        r, f = size["r"], size["f"]
        self.ctx, self.device, self.r, self.f = ctx, device, r, f
        self.features = torch.randn(r, r, r, f, device=device, generator=gen)
        self.points = make_points(size, device, gen)
        self.n = self.points.numel() // 3
        self.grad = torch.randn(*self.points.shape[:-1], f, device=device, generator=gen)
        self.touched = touched_voxels(self.points, r)
        kind = f"rays {size['rays'][0]}x{size['rays'][1]}" if "rays" in size else "uniform"
        self.note = f"R={r} F={f} N={self.n} {kind}, touches {self.touched / r**3:.0%} of voxels"

    def to(self, dtype) -> SampleCase:
        """The same case with features and grad_out in `dtype` (points stay float32)."""
        other = object.__new__(SampleCase)
        other.__dict__.update(self.__dict__)
        other.features, other.grad = self.features.to(dtype), self.grad.to(dtype)
        return other

    @property
    def grid_mb(self) -> float:
        return self.features.numel() * self.features.element_size() / MB

    @property
    def nbytes(self) -> dict[str, int]:
        elem = self.features.element_size()
        return sample_bytes(self.n, self.f, self.r**3, self.touched, elem)

    def ours(self, point_grad: bool = True) -> dict:
        """Forward, and forward+backward to the features (and the points if `point_grad`)."""
        feats, points, g, dev = self.features, self.points, self.grad, self.device
        fg, pg = feats.detach().requires_grad_(), points.detach().requires_grad_(point_grad)
        inputs = [fg, pg] if point_grad else [fg]

        def fwbw():
            return torch.autograd.grad(grid.sample(fg, pg), inputs, g)

        return {
            "fw": measure(self.ctx, lambda: grid.sample(feats, points), dev),
            "fwbw": measure(self.ctx, fwbw, dev, peak=True),
        }

    def baseline(self, point_grad: bool = True) -> dict:
        """F.grid_sample on the channels-first grid (points cast to the grid's dtype, as
        grid_sample requires one dtype). The permuted copy is made outside the timing."""
        f, dev = self.f, self.device
        cf = self.features.permute(3, 2, 1, 0)[None].contiguous()  # what its users store
        p5 = self.points.reshape(1, 1, 1, -1, 3).to(cf.dtype)
        g_cf = self.grad.reshape(-1, f).T.reshape(1, f, 1, 1, -1).contiguous()
        cfg, p5g = cf.detach().requires_grad_(), p5.detach().requires_grad_(point_grad)
        inputs = [cfg, p5g] if point_grad else [cfg]

        def fwbw():
            return torch.autograd.grad(grid_sample(cfg, p5g), inputs, g_cf)

        return {
            "fw": measure(self.ctx, lambda: grid_sample(cf, p5), dev),
            "fwbw": measure(self.ctx, fwbw, dev, peak=True),
        }

    def check(self) -> dict:
        """Relative max errors of grid.sample against float32 F.grid_sample (fw and grads)."""
        fg = self.features.detach().requires_grad_()
        pg = self.points.detach().requires_grad_()
        cf = self.features.float().permute(3, 2, 1, 0)[None].contiguous().requires_grad_()
        p5 = self.points.detach().reshape(1, 1, 1, -1, 3).requires_grad_()
        ours = grid.sample(fg, pg)
        base = grid_sample(cf, p5).reshape(self.f, -1).T.reshape(ours.shape)
        gf, gp = torch.autograd.grad(ours, [fg, pg], self.grad)
        gcf, gp5 = torch.autograd.grad(base, [cf, p5], self.grad.float())
        return {
            "fw_rel_err": rel_err(ours, base),
            "grad_features_rel_err": rel_err(gf, gcf[0].permute(3, 2, 1, 0)),
            "grad_points_rel_err": rel_err(gp.reshape(-1, 3), gp5.reshape(-1, 3)),
        }


def small_f_case(ctx: Ctx, size: dict, seed: int, f: int, points: torch.Tensor, touched: int):
    """A SampleCase with `f` channels on the given points (the S5 sweep shares its rays)."""
    case = object.__new__(SampleCase)
    gen = generator(ctx.device, seed + f)
    r = size["r"]
    case.ctx, case.device, case.r, case.f = ctx, ctx.device, r, f
    case.features = torch.randn(r, r, r, f, device=ctx.device, generator=gen)
    case.points, case.n, case.touched = points, points.numel() // 3, touched
    case.grad = torch.randn(*points.shape[:-1], f, device=ctx.device, generator=gen)
    n_rays, n_samples = size["rays"]
    case.note = (
        f"R={r} N={case.n} rays {n_rays}x{n_samples}, touches {touched / r**3:.0%} of voxels; "
        "fw+bw: gradient to the grid only"
    )
    return case


S5_FEATURES = (1, 2, 3, 4, 8, 12, 16, 32)


def bench_small_f(ctx: Ctx, name: str, size: dict, seed: int) -> list[dict]:
    """S5: the F sweep on one set of rays; fw+bw takes the gradient to the grid only (a
    density or colour grid sampled at fixed ray points)."""
    dev, r = ctx.device, size["r"]
    points = make_points(size, dev, generator(dev, seed))
    touched = touched_voxels(points, r)
    rows = []
    for f in S5_FEATURES:
        case = small_f_case(ctx, size, seed, f, points, touched)
        check = checked(case)
        ours, base = case.ours(point_grad=False), case.baseline(point_grad=False)
        elem = case.features.element_size()
        fw_bytes = case.nbytes["fw"]
        # backward to the grid: read grad_out and the points, write the dense grad grid
        nbytes = {"fw": fw_bytes, "fwbw": fw_bytes + case.n * (f * elem + 12) + r**3 * f * elem}
        for key in ("fw", "fwbw"):
            pass_ = f"{'fw' if key == 'fw' else 'fw+bw'} F={f}"
            rows.append(
                make_row(name, f"{key}_F{f}", pass_, ours[key], "F.grid_sample", base[key],
                         nbytes[key], ctx.gbps(dev), case.grid_mb, case.note)
            )  # fmt: skip
            rows[-1]["touched_voxels"] = touched
            rows[-1]["f"] = f
        attach_check(rows[-2:], check, 1e-4)
        del case, ours, base
        free_memory()
    return rows


class deterministic:
    """Context manager: torch.use_deterministic_algorithms(True) inside, restored after."""

    def __enter__(self):
        self.old = torch.are_deterministic_algorithms_enabled()
        torch.use_deterministic_algorithms(True)

    def __exit__(self, *exc):
        torch.use_deterministic_algorithms(self.old)


# D1's F sweep on S5's rays (gradient to the grid only, as S5's forward+backward)
D1_S5_FEATURES = (1, 2, 3, 4, 16)


def bench_deterministic(ctx: Ctx, name: str, size: dict, seed: int) -> list[dict]:
    """D1: the backward op alone (after one forward), with torch.use_deterministic_algorithms
    (True) against the default atomic path: on S1's and S2's inputs with grads to features and
    points, and on S5's rays for F in D1_S5_FEATURES with the grad to the grid only. Checks: two
    deterministic runs bitwise equal, agreement with the atomic gradient."""
    rows = []
    for source in ("S1", "S2"):
        # the seed S1 / S2 themselves use, so D1 times their inputs
        base_seed = seed - seed_of(name) + seed_of(source)
        case = SampleCase(ctx, size[source], base_seed, ctx.device)
        rows.append(deterministic_row(ctx, name, source, source, case, point_grad=True))
        del case
        free_memory()
    s5, s5_seed = size["S5"], seed - seed_of(name) + seed_of("S5")
    points = make_points(s5, ctx.device, generator(ctx.device, s5_seed))
    touched = touched_voxels(points, s5["r"])
    for f in D1_S5_FEATURES:
        case = small_f_case(ctx, s5, s5_seed, f, points, touched)  # S5's grid and grad_out
        rows.append(deterministic_row(ctx, name, f"S5_F{f}", f"S5 F={f}", case, point_grad=False))
        rows[-1]["f"] = f
        del case
        free_memory()
    return rows


def deterministic_row(
    ctx: Ctx, name: str, key: str, label: str, case: SampleCase, point_grad: bool
) -> dict:
    fg = case.features.detach().requires_grad_()
    pg = case.points.detach().requires_grad_(point_grad)
    inputs = [fg, pg] if point_grad else [fg]
    out = grid.sample(fg, pg)

    def bw():
        return torch.autograd.grad(out, inputs, case.grad, retain_graph=True)

    atomic = bw()
    with deterministic():
        first, second = bw(), bw()
        ours = measure(ctx, bw, ctx.device, peak=True)
    base = measure(ctx, bw, ctx.device, peak=True)
    mismatches = sum(int((a != b).sum()) for a, b in zip(first, second, strict=True))
    check = {
        "bitwise_repeat_mismatches": float(mismatches),
        "grad_features_rel_err": rel_err(first[0], atomic[0]),
    }
    tol = {"bitwise_repeat_mismatches": 0, "grad_features_rel_err": 1e-5}
    if point_grad:
        nbytes = case.nbytes["fwbw"] - case.nbytes["fw"]
        note = case.note + "; backward op alone, grads to features and points"
        check["grad_points_rel_err"] = rel_err(first[1], atomic[1])
        tol["grad_points_rel_err"] = 1e-5
    else:  # read grad_out and the points, write the dense grad grid (as S5)
        elem = case.features.element_size()
        nbytes = case.n * (case.f * elem + 12) + case.r**3 * case.f * elem
        note = f"F={case.f} " + case.note.replace("fw+bw: gradient", "backward op alone, gradient")
    row = make_row(name, f"bw_{key}", f"bw {label} deterministic", ours, "ours atomic bw",
                   base, nbytes, ctx.gbps(ctx.device), case.grid_mb, note)  # fmt: skip
    attach_check([row], check, tol)
    return row


def checked(case: SampleCase) -> dict:
    result, error = attempt(case.check)
    return result if error is None else {"error": error}


def sample_rows(name, case, ours, base_name, base, keys=("fw", "fwbw"), suffix="") -> list:
    bw = case.ctx.gbps(case.device)
    note = case.note
    if case.device.type == "cpu":
        note += f", {torch.get_num_threads()} CPU threads"
    rows = []
    for key in keys:
        pass_ = {"fw": "fw", "fwbw": "fw+bw"}[key]
        rows.append(
            make_row(name, key + suffix, pass_, ours[key], base_name, base[key],
                     case.nbytes[key], bw, case.grid_mb, note)
        )  # fmt: skip
        rows[-1]["touched_voxels"] = case.touched
    return rows


def bench_sample(ctx: Ctx, name: str, size: dict, seed: int, device=None) -> list[dict]:
    case = SampleCase(ctx, size, seed, device or ctx.device)
    check = checked(case)
    rows = sample_rows(name, case, case.ours(), "F.grid_sample", case.baseline())
    attach_check(rows, check, 1e-4)
    return rows


# bf16 storage rounds each value to 8 bits (~2^-8 relative). The grid gradient also
# accumulates in bf16 (as F.grid_sample's does): every atomic add rounds, and an S4 voxel takes
# up to 256 of them in an order that changes from run to run. Replayed add by add on the CPU
# (bench/probes/bf16_accumulation.py, 8 orders) that lands 0.018-0.037 from the exact sum, and the
# H100 measured 0.018-0.040, so 3e-2 failed at random; 1e-1 still catches the O(1) error of a
# wrong corner or weight.
BF16_TOLERANCE = {"fw_rel_err": 3e-2, "grad_features_rel_err": 1e-1, "grad_points_rel_err": 3e-2}


def bench_bf16(ctx: Ctx, name: str, size: dict, seed: int) -> list[dict]:
    fp32 = SampleCase(ctx, size, seed, ctx.device)
    bf16 = fp32.to(torch.bfloat16)
    bf16.note += ", bf16 features, fp32 points"
    check = checked(bf16)
    # float32 timed before and after bfloat16; the faster of the two is the reference, so a
    # disturbed float32 timing cannot make the ratio look better than it is.
    before = fp32.ours()
    ours16 = bf16.ours()
    after = fp32.ours()
    ours32 = {k: min(before[k], after[k], key=median_or_inf) for k in before}
    rows = sample_rows(name, bf16, ours16, "ours fp32 (S1)", ours32, suffix="_vs_fp32")
    rows += sample_rows(name, bf16, ours16, "F.grid_sample bf16", bf16.baseline())
    attach_check(rows, check, BF16_TOLERANCE)
    return rows


def median_or_inf(measured: dict) -> float:
    return measured["stats"]["median"] if measured["stats"] else float("inf")


def bench_cpu(ctx: Ctx, name: str, size: dict, seed: int) -> list[dict]:
    return bench_sample(ctx, name, size, seed, device=torch.device("cpu"))
