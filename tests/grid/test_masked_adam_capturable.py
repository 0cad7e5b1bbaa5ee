"""grid.masked_adam_ with tensor lr / step (grid::masked_adam_.tensor) and
grid.MaskedAdam(capturable=True): the same update as with numbers, opcheck, compile, errors,
and on CUDA a captured optimiser step replayed against eager steps."""

from __future__ import annotations

import pytest
import torch

import grid
from tests._helpers import DEVICES, needs_cuda
from tests.grid.test_masked_adam import sparse_randn

HYPER = dict(beta1=0.9, beta2=0.99, eps=1e-8)


def state_of(numel: int, device, gen: torch.Generator) -> list[torch.Tensor]:
    p = torch.randn(numel, generator=gen).to(device)
    return [p, (torch.randn(numel, generator=gen) * 0.1).to(device), torch.rand(numel).to(device)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])  # of the lr / step tensors
@pytest.mark.parametrize("decay", [dict(), dict(weight_decay=0.1, decoupled_weight_decay=True)])
def test_tensor_arguments_give_the_update_of_the_numbers(device, dtype, decay):
    """Bitwise: the kernel derives the step's coefficients in float64 from either."""
    gen = torch.Generator().manual_seed(0)
    numbers = state_of(5000, device, gen)
    tensors = [t.clone() for t in numbers]
    for step in (1, 2, 7):
        g = sparse_randn(5000, 0.3, device, generator=gen)
        lr_t = torch.tensor(0.03, dtype=dtype, device=device)
        step_t = torch.tensor(float(step), dtype=dtype, device=device)
        grid.masked_adam_(*numbers, g, lr=float(lr_t), step=step, **HYPER, **decay)
        grid.masked_adam_(*tensors, g, lr=lr_t, step=step_t, **HYPER, **decay)
        for a, b in zip(numbers, tensors, strict=True):
            assert torch.equal(a, b)
    # a number beside a tensor is made a tensor
    g = sparse_randn(5000, 0.3, device, generator=gen)
    step_t = torch.tensor(8.0, device=device)
    grid.masked_adam_(*numbers, g, lr=0.02, step=8, **HYPER)
    grid.masked_adam_(*tensors, g, lr=0.02, step=step_t, **HYPER)
    assert all(torch.equal(a, b) for a, b in zip(numbers, tensors, strict=True))


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck_and_compile(device):
    gen = torch.Generator().manual_seed(1)
    p = torch.randn(3, 4, 5, 2, generator=gen).to(device)
    m, v = torch.zeros_like(p), torch.zeros_like(p)
    g = sparse_randn(p.shape, 0.5, device, generator=gen)
    lr, step = torch.tensor(0.01, device=device), torch.tensor(2.0, device=device)
    args = (p, m, v, g, lr, 0.9, 0.999, 1e-8, 0.1, False, step)
    torch.library.opcheck(torch.ops.grid.masked_adam_.tensor, args)

    torch._dynamo.reset()

    def update(p, m, v, g, lr, step):
        step += 1
        grid.masked_adam_(p, m, v, g, lr=lr, step=step, **HYPER)
        return p.sum()

    eager = [p.clone(), m.clone(), v.clone(), g, lr, step.clone()]
    compiled = [p.clone(), m.clone(), v.clone(), g, lr, step.clone()]
    want = update(*eager)
    got = torch.compile(update, fullgraph=True)(*compiled)
    torch.testing.assert_close(got, want)
    for a, b in zip(compiled, eager, strict=True):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("device", DEVICES)
def test_bad_tensor_arguments(device):
    p = torch.zeros(4, 3, device=device)
    state = [p, torch.zeros_like(p), torch.zeros_like(p), torch.ones_like(p)]
    one = torch.tensor(1.0, device=device)
    for kwargs, message in (
        (dict(lr=torch.ones(2, device=device), step=one), r"lr: expected a tensor of one value"),
        (dict(lr=one, step=torch.tensor(1, device=device)), r"step: expected a float32 or float64"),
        (dict(lr=one.half(), step=one), r"lr: expected a float32 or float64 tensor, got Half"),
    ):
        with pytest.raises(RuntimeError, match=message):
            grid.masked_adam_(*state, **kwargs, **HYPER)
    if device == "cpu":  # read on the host there, so checked
        with pytest.raises(RuntimeError, match=r"step: expected a number >= 1"):
            grid.masked_adam_(*state, lr=one, step=torch.tensor(0.0), **HYPER)
        with pytest.raises(RuntimeError, match=r"lr: expected a number >= 0"):
            grid.masked_adam_(*state, lr=-one, step=one, **HYPER)
    else:
        with pytest.raises(RuntimeError, match=r"lr: expected a tensor on cuda:0 like param"):
            grid.masked_adam_(*state, lr=torch.tensor(0.1), step=one, **HYPER)
    with pytest.raises(ValueError, match=r"MaskedAdam: lr: expected a number or a one-value"):
        grid.MaskedAdam([torch.nn.Parameter(p)], lr=torch.ones(2))
    with pytest.raises(ValueError, match=r"MaskedAdam: capturable: expected True or False"):
        grid.MaskedAdam([torch.nn.Parameter(p)], capturable=1)


def make_params(device, gen):
    grid_param = torch.nn.Parameter(torch.randn(6, 5, 4, 3, generator=gen).to(device))
    mlp = torch.nn.Parameter(torch.randn(20, generator=gen).to(device))
    return [grid_param, mlp]


def make_optimizer(params, capturable: bool, lr):
    return grid.MaskedAdam(
        [{"params": params[:1]}, {"params": params[1:], "skip_zero_grad": False, "lr": 0.01}],
        lr=lr,
        weight_decay=0.01,
        capturable=capturable,
    )


def assert_same_steps(ours: list[torch.Tensor], others: list[torch.Tensor]) -> None:
    """The masked grid as tight as its float32 lr allows; the dense group is torch's Adam,
    whose capturable form derives its bias corrections in float32 on the device (measured
    on an H100: 4e-7 apart after 5 steps)."""
    torch.testing.assert_close(ours[0], others[0], rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(ours[1], others[1], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_capturable_steps_equal_the_others_and_resume_either_way(device):
    """Masked and dense groups, a tensor learning rate filled in place; the state of one mode
    loads into the other (the step counts move to where that mode keeps them)."""
    gen = torch.Generator().manual_seed(2)
    start = make_params(device, gen)
    runs = []
    for capturable in (False, True):
        params = [torch.nn.Parameter(t.detach().clone()) for t in start]
        lr = torch.tensor(0.1, device=device) if capturable else 0.1
        runs.append((params, make_optimizer(params, capturable, lr)))
    for step in range(5):
        grads = [sparse_randn(t.shape, 0.4, device, generator=gen) for t in start]
        for params, opt in runs:
            for p, g in zip(params, grads, strict=True):
                p.grad = g.clone()
            if isinstance(opt.param_groups[0]["lr"], torch.Tensor):
                opt.param_groups[0]["lr"].fill_(0.1 * 0.9**step)
            else:
                opt.param_groups[0]["lr"] = 0.1 * 0.9**step
            opt.step()
    (a, opt_a), (b, opt_b) = runs
    assert_same_steps(a, b)
    assert opt_b.state[b[0]]["step"].device == b[0].device
    assert opt_a.state[a[0]]["step"].device == torch.device("cpu")
    # capturable's state into an op-by-op optimiser, and back
    other = make_optimizer(b, False, 0.1)
    other.load_state_dict(opt_b.state_dict())
    other.param_groups[0]["capturable"] = other.param_groups[1]["capturable"] = False
    for p in b:
        p.grad = torch.ones_like(p)
    other.step()
    assert other.state[b[0]]["step"].device == torch.device("cpu")
    assert other.state[b[0]]["step"].item() == 6
    back = make_optimizer(b, True, torch.tensor(0.1, device=device))
    back.load_state_dict(other.state_dict())
    back.param_groups[0]["capturable"] = back.param_groups[1]["capturable"] = True
    back.step()
    assert back.state[b[0]]["step"].device == b[0].device
    assert back.state[b[0]]["step"].item() == 7


@needs_cuda
def test_captured_step_replays_like_eager_steps():
    """One `step()` captured in a CUDA graph, replayed with new gradients and learning rates
    (copied / filled in place), against the same steps taken op by op."""
    gen = torch.Generator().manual_seed(3)
    start = make_params("cuda", gen)
    eager = [torch.nn.Parameter(t.detach().clone()) for t in start]
    graphed = [torch.nn.Parameter(t.detach().clone()) for t in start]
    opt_eager = make_optimizer(eager, False, 0.1)
    lr = torch.tensor(0.1, device="cuda")
    opt_graph = make_optimizer(graphed, True, lr)
    steps = [[sparse_randn(t.shape, 0.4, "cuda", generator=gen) for t in start] for _ in range(6)]

    for p, g in zip(eager, steps[0], strict=True):
        p.grad = g.clone()
    opt_eager.step()
    for p, g in zip(graphed, steps[0], strict=True):
        p.grad = g.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        opt_graph.step()  # warm-up, op by op: the state is made here
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        opt_graph.step()
    # the capture itself did not run: replay it for each step from the second on
    for i, grads in enumerate(steps[1:], start=1):
        rate = 0.1 * 0.8**i
        opt_eager.param_groups[0]["lr"] = rate
        lr.fill_(rate)
        for p, q, g in zip(eager, graphed, grads, strict=True):
            p.grad = g.clone()
            q.grad.copy_(g)
        opt_eager.step()
        graph.replay()
    torch.cuda.synchronize()
    assert_same_steps(eager, graphed)
    assert opt_graph.state[graphed[0]]["step"].item() == len(steps)
    assert opt_eager.state[eager[0]]["step"].item() == len(steps)
