"""grid.masked_adam_ and grid.MaskedAdam: torch.optim.Adam's step where every gradient is
non-zero, untouched elements where it is zero, against the reference in every dtype, opcheck,
compile, state_dict, per-group options, errors."""

from __future__ import annotations

import copy
import io

import pytest
import torch

import grid
from grid import reference
from tests._helpers import DEVICES, needs_cuda

OPTIONS = [  # lr, betas, eps, weight_decay, decoupled_weight_decay
    dict(lr=1e-3),
    dict(lr=0.1, betas=(0.8, 0.99), eps=1e-6),
    dict(lr=0.05, betas=(0.5, 0.9), eps=1e-3),  # 1 - beta1 = 0.5: lerp's other form
    dict(lr=0.02, betas=(0.0, 0.0)),
    dict(lr=0.01, weight_decay=0.1),
    dict(lr=0.01, weight_decay=0.1, decoupled_weight_decay=True),
]
# after 5 steps, against torch.optim.Adam (float32: a few roundings apart per step)
ADAM_TOLERANCE = {
    torch.float64: dict(rtol=1e-12, atol=1e-13),
    torch.float32: dict(rtol=2e-6, atol=2e-6),
}


def nonzero_randn(*shape, device="cpu", dtype=torch.float32, generator=None) -> torch.Tensor:
    g = torch.randn(*shape, generator=generator).to(device=device, dtype=dtype)
    return torch.where(g == 0, torch.ones_like(g), g)


def sparse_randn(shape, fraction, device="cpu", dtype=torch.float32, generator=None):
    """Random values where a uniform draw is below `fraction`, +0 or -0 elsewhere."""
    g = torch.randn(shape, generator=generator)
    keep = torch.rand(shape, generator=generator) < fraction
    zero = torch.where(torch.rand(shape, generator=generator) < 0.5, 0.0, -0.0)
    return torch.where(keep & (g != 0), g, zero).to(device=device, dtype=dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize(
    "options", OPTIONS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items())
)
def test_equals_torch_adam_when_every_gradient_is_nonzero(device, dtype, options):
    gen = torch.Generator().manual_seed(0)
    start = [torch.randn(6, 5, 7, 3, generator=gen), torch.randn(1001, generator=gen)]
    ours = [torch.nn.Parameter(t.to(device, dtype, copy=True)) for t in start]
    theirs = [torch.nn.Parameter(t.to(device, dtype, copy=True)) for t in start]
    opt = grid.MaskedAdam(ours, **options)
    adam = torch.optim.Adam(theirs, foreach=False, **options)
    for _ in range(5):
        for a, b in zip(ours, theirs, strict=True):
            a.grad = nonzero_randn(*a.shape, device=device, dtype=dtype, generator=gen)
            b.grad = a.grad.clone()
        opt.step()
        adam.step()
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a, b, **ADAM_TOLERANCE[dtype])
        for key in ("exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(
                opt.state[a][key], adam.state[b][key], **ADAM_TOLERANCE[dtype]
            )
        assert opt.state[a]["step"].item() == adam.state[b]["step"].item() == 5


@pytest.mark.parametrize("device", DEVICES)
def test_half_precision_matches_torch_fused_adam(device):
    """bfloat16 / float16 parameters keep moments in their dtype and compute in float32, as
    torch's fused Adam: the same values up to a rounding of the stored dtype."""
    gen = torch.Generator().manual_seed(1)
    for dtype in (torch.bfloat16, torch.float16):
        start = torch.randn(4, 5, 6, 8, generator=gen)
        ours = torch.nn.Parameter(start.to(device, dtype, copy=True))
        theirs = torch.nn.Parameter(start.to(device, dtype, copy=True))
        opt = grid.MaskedAdam([ours], lr=0.01)
        adam = torch.optim.Adam([theirs], lr=0.01, fused=True)
        for _ in range(3):
            ours.grad = nonzero_randn(*start.shape, device=device, dtype=dtype, generator=gen)
            theirs.grad = ours.grad.clone()
            opt.step()
            adam.step()
        ulp = 2**-7 if dtype == torch.bfloat16 else 2**-10
        torch.testing.assert_close(ours.float(), theirs.float(), rtol=2 * ulp, atol=1e-3)
        assert opt.state[ours]["exp_avg"].dtype == dtype


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "dtype, tol",
    [(torch.float64, 1e-14), (torch.float32, 1e-6), (torch.bfloat16, 1e-2), (torch.float16, 2e-3)],
)
@pytest.mark.parametrize("numel", [1, 7, 100, 4099, 2 * 16384 + 5])
@pytest.mark.parametrize("fraction", [0.0, 0.05, 0.5, 1.0])
def test_op_matches_reference(device, dtype, tol, numel, fraction):
    """Every size (whole and partial 16-byte vectors, 64-byte lines and chunks), dtype and
    share of non-zero gradients; elements with a zero gradient are bitwise unchanged."""
    gen = torch.Generator().manual_seed(numel)
    p = torch.randn(numel, generator=gen).to(device, dtype)
    m = (torch.randn(numel, generator=gen) * 0.1).to(device, dtype)
    v = torch.rand(numel, generator=gen).to(device, dtype) * 0.01
    state = [p, m, v]
    want = [t.clone() for t in state]
    for step, options in enumerate(OPTIONS, start=3):
        g = sparse_randn(numel, fraction, device, dtype, gen)
        before = [t.clone() for t in state]
        o = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8) | options
        kwargs = dict(lr=o["lr"], beta1=o["betas"][0], beta2=o["betas"][1], eps=o["eps"])
        kwargs |= dict(weight_decay=o.get("weight_decay", 0.0), step=step)
        kwargs |= dict(decoupled_weight_decay=o.get("decoupled_weight_decay", False))
        grid.masked_adam_(*state, g, **kwargs)
        reference.masked_adam_(*want, g, **kwargs)
        zero = g == 0
        for t, w, b in zip(state, want, before, strict=True):
            scale = w.double().abs().max().clamp_min(1e-30)
            assert float((t.double() - w.double()).abs().max() / scale) <= tol
            assert torch.equal(t[zero], b[zero])  # bitwise: not even rewritten differently


@pytest.mark.parametrize("device", DEVICES)
def test_dense_layouts_other_than_contiguous(device):
    """A channels-last-like permuted parameter (dense, not contiguous) and its moments."""
    base = torch.randn(5, 6, 7, 4, dtype=torch.float64, device=device)
    param = base.permute(3, 0, 1, 2)  # dense, strides (1, 168, 28, 4)
    m, v = torch.zeros_like(param), torch.zeros_like(param)
    assert not param.is_contiguous() and m.stride() == param.stride()
    g = torch.empty_like(param).copy_(sparse_randn(param.shape, 0.5, device, torch.float64))
    want = [param.clone(), m.clone(), v.clone()]
    args = dict(lr=0.1, beta1=0.9, beta2=0.99, eps=1e-8, step=1)
    grid.masked_adam_(param, m, v, g, **args)
    reference.masked_adam_(*want, g, **args)
    for t, w in zip((param, m, v), want, strict=True):
        torch.testing.assert_close(t, w, rtol=1e-14, atol=1e-14)


def test_result_independent_of_thread_count():
    gen = torch.Generator().manual_seed(3)
    g = sparse_randn(300_000, 0.3, generator=gen)
    start = torch.randn(300_000, generator=gen)
    results = []
    threads = torch.get_num_threads()
    try:
        for n in (1, max(2, threads)):
            torch.set_num_threads(n)
            state = [start.clone(), torch.zeros_like(start), torch.zeros_like(start)]
            for step in range(1, 4):
                grid.masked_adam_(*state, g, lr=0.1, beta1=0.9, beta2=0.999, eps=1e-8, step=step)
            results.append(state)
    finally:
        torch.set_num_threads(threads)
    assert all(torch.equal(a, b) for a, b in zip(*results, strict=True))


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("offset", [0, 1])  # 1: storage not 16-byte aligned, scalar path
def test_cuda_matches_cpu(dtype, offset):
    gen = torch.Generator().manual_seed(4)
    n = 50_000
    raw = [torch.randn(n + offset, generator=gen).to(dtype) for _ in range(3)]
    raw[2] = raw[2].abs()
    g = sparse_randn(n, 0.2, dtype=dtype, generator=gen)
    cpu = [t.clone()[offset:] for t in raw]
    cuda = [t.cuda()[offset:] for t in raw]
    for step in (1, 2):
        args = dict(lr=0.01, beta1=0.9, beta2=0.999, eps=1e-8, step=step)
        grid.masked_adam_(*cpu, g, **args)
        grid.masked_adam_(*cuda, g.cuda(), **args)
    tol = {torch.float64: 1e-12, torch.float32: 1e-5, torch.bfloat16: 1e-2}[dtype]
    for a, b in zip(cpu, cuda, strict=True):
        torch.testing.assert_close(b.cpu(), a, rtol=tol, atol=tol)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_opcheck(device, dtype):
    gen = torch.Generator().manual_seed(5)
    p = torch.randn(3, 4, 5, 2, generator=gen).to(device, dtype)
    m, v = torch.zeros_like(p), torch.zeros_like(p)
    g = sparse_randn(p.shape, 0.5, device, dtype, gen)
    for decoupled in (False, True):
        args = (p, m, v, g, 0.01, 0.9, 0.999, 1e-8, 0.1, decoupled, 2)
        torch.library.opcheck(torch.ops.grid.masked_adam_.default, args)


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph(device):
    torch._dynamo.reset()

    def update(p, m, v, g):
        grid.masked_adam_(p, m, v, g, lr=0.1, beta1=0.9, beta2=0.99, eps=1e-8, step=3)
        return p.sum()

    gen = torch.Generator().manual_seed(6)
    start = torch.randn(4, 5, 6, 3, generator=gen).to(device)
    g = sparse_randn(start.shape, 0.5, device, generator=gen)
    eager = [start.clone(), torch.zeros_like(start), torch.zeros_like(start)]
    compiled = [t.clone() for t in eager]
    want = update(*eager, g)
    got = torch.compile(update, fullgraph=True)(*compiled, g)
    torch.testing.assert_close(got, want)
    for a, b in zip(compiled, eager, strict=True):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("device", DEVICES)
def test_state_dict_round_trip_resumes_exactly(device):
    gen = torch.Generator().manual_seed(7)
    start = [torch.randn(4, 4, 4, 3, generator=gen), torch.randn(17, generator=gen)]
    grads = [[sparse_randn(t.shape, 0.4, device, generator=gen) for t in start] for _ in range(6)]

    def make(params):
        return grid.MaskedAdam(
            [{"params": params[:1], "lr": 0.1}, {"params": params[1:], "lr": 0.01, "eps": 1e-6}],
            betas=(0.8, 0.99),
        )

    def train(params, opt, steps):
        for gs in steps:
            for p, g in zip(params, gs, strict=True):
                p.grad = g.clone()
            opt.step()

    straight = [torch.nn.Parameter(t.to(device, copy=True)) for t in start]
    opt = make(straight)
    train(straight, opt, grads)

    resumed = [torch.nn.Parameter(t.to(device, copy=True)) for t in start]
    first = make(resumed)
    train(resumed, first, grads[:3])
    buffer = io.BytesIO()
    torch.save({"params": [p.detach() for p in resumed], "opt": first.state_dict()}, buffer)
    buffer.seek(0)
    saved = torch.load(buffer, weights_only=True)
    resumed = [torch.nn.Parameter(t) for t in saved["params"]]
    second = make(resumed)
    second.load_state_dict(saved["opt"])
    assert second.param_groups[1]["eps"] == 1e-6 and second.param_groups[0]["lr"] == 0.1
    train(resumed, second, grads[3:])
    for a, b in zip(straight, resumed, strict=True):
        assert torch.equal(a, b)
    for a, b in zip(straight, resumed, strict=True):
        for key in ("step", "exp_avg", "exp_avg_sq"):
            assert torch.equal(opt.state[a][key], second.state[b][key])


def test_per_group_learning_rates_and_closure():
    gen = torch.Generator().manual_seed(8)
    start = [torch.randn(10, generator=gen), torch.randn(10, generator=gen)]
    ours = [torch.nn.Parameter(t.clone()) for t in start]
    theirs = [torch.nn.Parameter(t.clone()) for t in start]
    groups = lambda ps: [{"params": [ps[0]], "lr": 0.5}, {"params": [ps[1]]}]  # noqa: E731
    opt = grid.MaskedAdam(groups(ours), lr=0.01)
    adam = torch.optim.Adam(groups(theirs), lr=0.01, foreach=False)
    for _ in range(3):

        def closure(ps=ours):
            for p in ps:
                p.grad = None
            loss = sum((p * torch.arange(1.0, 11.0)).sum() for p in ps)
            loss.backward()
            return loss

        assert opt.step(closure) is not None
        adam.step(lambda: closure(theirs))
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("device", DEVICES)
def test_groups_that_update_every_element_are_torch_adam(device):
    """skip_zero_grad=False (a dense MLP beside the grids): torch.optim.Adam's own step, zero
    gradients included; the other group stays masked."""
    gen = torch.Generator().manual_seed(9)
    start = [torch.randn(40, generator=gen).to(device) for _ in range(3)]
    ours = [torch.nn.Parameter(t.clone()) for t in start]
    theirs = [torch.nn.Parameter(t.clone()) for t in start[1:]]
    opt = grid.MaskedAdam(
        [{"params": ours[:1]}, {"params": ours[1:], "skip_zero_grad": False, "lr": 0.05}],
        lr=0.1,
        weight_decay=0.01,
    )
    adam = torch.optim.Adam(theirs, lr=0.05, weight_decay=0.01)
    for _ in range(4):
        grads = [sparse_randn(40, 0.5, device, generator=gen) for _ in range(3)]
        for p, g in zip(ours, grads, strict=True):
            p.grad = g
        for p, g in zip(theirs, grads[1:], strict=True):
            p.grad = g.clone()
        before = ours[0].detach().clone()
        opt.step()
        adam.step()
        zero = grads[0] == 0
        assert torch.equal(ours[0][zero], before[zero])
    for a, b in zip(ours[1:], theirs, strict=True):
        assert torch.equal(a, b)
        assert torch.equal(opt.state[a]["exp_avg_sq"], adam.state[b]["exp_avg_sq"])
        assert opt.state[a]["step"].item() == 4


def test_loads_a_torch_adam_state_dict():
    """Adam's state (same keys) carries over: a run can switch to MaskedAdam on resume."""
    gen = torch.Generator().manual_seed(10)
    start = torch.randn(30, generator=gen)
    a, b = torch.nn.Parameter(start.clone()), torch.nn.Parameter(start.clone())
    adam, other = torch.optim.Adam([a], lr=0.1), torch.optim.Adam([b], lr=0.1)
    for _ in range(2):
        a.grad = nonzero_randn(30, generator=gen)
        b.grad = a.grad.clone()
        adam.step()
        other.step()
    masked = grid.MaskedAdam([b], lr=0.1)
    masked.load_state_dict(other.state_dict())
    assert masked.param_groups[0]["skip_zero_grad"] is True
    a.grad = nonzero_randn(30, generator=gen)
    b.grad = a.grad.clone()
    adam.step()
    masked.step()
    torch.testing.assert_close(a, b, rtol=2e-6, atol=2e-6)


def test_parameters_without_gradient_are_skipped():
    a, b = torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.ones(3))
    opt = grid.MaskedAdam([a, b], lr=0.1)
    a.grad = torch.ones(3)
    opt.step()
    assert b not in opt.state and torch.equal(b, torch.ones(3))
    assert opt.state[a]["step"].item() == 1


def test_a_zero_gradient_still_counts_the_step():
    """The step count is per parameter (the bias corrections of the global step), not per
    element: an element first touched at step 3 gets step 3's corrections."""
    p = torch.nn.Parameter(torch.zeros(2))
    opt = grid.MaskedAdam([p], lr=0.1)
    for g in ([1.0, 0.0], [1.0, 0.0], [1.0, 1.0]):
        p.grad = torch.tensor(g)
        opt.step()
    want = [torch.zeros(2), torch.zeros(2), torch.zeros(2)]
    for step, g in enumerate(([1.0, 0.0], [1.0, 0.0], [1.0, 1.0]), start=1):
        reference.masked_adam_(
            *want, torch.tensor(g), lr=0.1, beta1=0.9, beta2=0.999, eps=1e-8, step=step
        )
    torch.testing.assert_close(p.detach(), want[0])
    assert opt.state[p]["step"].item() == 3


def test_voxel_grid_upsample_carries_the_moments():
    vg = grid.VoxelGrid(4, 2, init="normal", init_scale=0.1)
    opt = grid.MaskedAdam(vg.parameters(), lr=0.1)
    vg(torch.rand(50, 3) * 2 - 1).square().sum().backward()
    opt.step()
    vg.upsample(7, optimizer=opt)
    state = opt.state[vg.features]
    assert state["exp_avg"].shape == (7, 7, 7, 2) and state["step"].item() == 1
    opt.zero_grad()
    vg(torch.rand(50, 3) * 2 - 1).square().sum().backward()
    opt.step()
    assert state["step"].item() == 2


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(lr=-0.1), r"lr: expected a number >= 0"),
        (dict(betas=(1.0, 0.9)), r"betas\[0\]: expected a number in \[0, 1\)"),
        (dict(betas=(0.9, -0.1)), r"betas\[1\]: expected a number in \[0, 1\)"),
        (dict(betas=(0.9,)), r"betas: expected \(beta1, beta2\)"),
        (dict(eps=0.0), r"eps: expected a number > 0"),
        (dict(weight_decay=-1.0), r"weight_decay: expected a number >= 0"),
        (dict(lr="fast"), r"lr: expected a number"),
        (dict(skip_zero_grad=1), r"skip_zero_grad: expected True or False"),
    ],
)
def test_bad_options(options, message):
    p = torch.nn.Parameter(torch.zeros(3))
    with pytest.raises(ValueError, match=message):
        grid.MaskedAdam([p], **options)
    opt = grid.MaskedAdam([p])
    with pytest.raises(ValueError, match=message):  # a group of its own, checked too
        opt.add_param_group({"params": [torch.nn.Parameter(torch.zeros(2))], **options})


def test_bad_parameters_and_gradients():
    cpu = torch.nn.Parameter(torch.zeros(3))
    meta = torch.nn.Parameter(torch.zeros(3, device="meta"))
    with pytest.raises(ValueError, match=r"params: expected every parameter on one device"):
        grid.MaskedAdam([cpu, meta])
    with pytest.raises(ValueError, match=r"params: expected floating-point parameters"):
        grid.MaskedAdam(
            [torch.nn.Parameter(torch.zeros(3, dtype=torch.int64), requires_grad=False)]
        )
    opt = grid.MaskedAdam([cpu])
    cpu.grad = torch.zeros(3).to_sparse()
    with pytest.raises(RuntimeError, match="sparse gradients are not supported"):
        opt.step()
    cpu.grad = None
    emb = torch.nn.Embedding(5, 2, sparse=True)
    emb(torch.tensor([1])).sum().backward()
    with pytest.raises(RuntimeError, match="sparse gradients are not supported"):
        grid.MaskedAdam(emb.parameters()).step()


@pytest.mark.parametrize("device", DEVICES)
def test_bad_op_arguments(device):
    p = torch.zeros(4, 3, device=device)

    def call(param=p, m=None, v=None, g=None, **kwargs):
        m = torch.zeros_like(param) if m is None else m
        v = torch.zeros_like(param) if v is None else v
        g = torch.ones_like(param) if g is None else g
        args = dict(lr=0.1, beta1=0.9, beta2=0.999, eps=1e-8, step=1) | kwargs
        grid.masked_adam_(param, m, v, g, **args)

    with pytest.raises(RuntimeError, match=r"grad: expected shape \[4, 3\] like param"):
        call(g=torch.ones(3, 4, device=device))
    with pytest.raises(RuntimeError, match=r"exp_avg: expected dtype Float like param"):
        call(m=torch.zeros(4, 3, device=device, dtype=torch.float64))
    with pytest.raises(RuntimeError, match=r"exp_avg_sq: expected the strides of param"):
        call(v=torch.zeros(3, 4, device=device).T)
    with pytest.raises(RuntimeError, match=r"param: expected a dense tensor"):
        call(param=torch.zeros(4, 6, device=device)[:, ::2])
    with pytest.raises(RuntimeError, match=r"param: expected a floating-point tensor"):
        call(param=torch.zeros(4, 3, device=device, dtype=torch.int32))
    with pytest.raises(RuntimeError, match=r"step: expected a number >= 1"):
        call(step=0)
    with pytest.raises(RuntimeError, match=r"eps: expected a number > 0"):
        call(eps=0.0)
    with pytest.raises(RuntimeError, match=r"beta2: expected a number in \[0, 1\)"):
        call(beta2=1.0)
    with pytest.raises(RuntimeError, match=r"lr: expected a number >= 0"):
        call(lr=-1.0)


@needs_cuda
def test_op_refuses_mixed_devices():
    p = torch.zeros(4, 3, device="cuda")
    with pytest.raises(RuntimeError, match=r"exp_avg: expected device cuda:0 like param"):
        grid.masked_adam_(
            p, torch.zeros(4, 3), torch.zeros_like(p), torch.ones_like(p),
            lr=0.1, beta1=0.9, beta2=0.999, eps=1e-8, step=1,
        )  # fmt: skip


def test_copy_of_optimizer_is_independent():
    """deepcopy (as some training loops do for EMA / rollback) keeps working."""
    p = torch.nn.Parameter(torch.ones(3))
    opt = grid.MaskedAdam([p], lr=0.1)
    p.grad = torch.ones(3)
    opt.step()
    clone = copy.deepcopy(opt)
    assert clone.state_dict()["state"][0]["step"].item() == 1
