"""grid.total_variation and total_variation_add_grad_: value and gradient against the
reference, every dtype, determinism, opcheck, compile, errors."""

from __future__ import annotations

import pytest
import torch

import grid
from grid import reference
from tests._helpers import DEVICES, needs_cuda

TOLERANCE = {  # relative, against the float64 reference
    torch.float64: 1e-12,
    torch.float32: 1e-5,
    torch.float16: 2e-3,  # the gradient is rounded once to float16
    torch.bfloat16: 1e-2,
}


def reference_value_and_grad(features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    f = features.detach().double().requires_grad_()
    value = reference.total_variation(f)
    (grad,) = torch.autograd.grad(value, f)
    return value, grad


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).abs().max() / b.abs().max())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", list(TOLERANCE))
@pytest.mark.parametrize("shape", [(2, 2, 2, 1), (5, 6, 7, 3), (4, 3, 9, 8), (3, 5, 4, 16)])
def test_value_and_gradient(device, dtype, shape):
    features = torch.randn(shape, device=device, generator=None).to(dtype).requires_grad_()
    value = grid.total_variation(features)
    (grad,) = torch.autograd.grad(value, features)
    want_value, want_grad = reference_value_and_grad(features)
    assert value.shape == ()
    assert value.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)
    assert grad.dtype == dtype and grad.shape == features.shape
    assert rel(value, want_value) < TOLERANCE[dtype]
    assert rel(grad, want_grad) < TOLERANCE[dtype]


@pytest.mark.parametrize("device", DEVICES)
def test_matches_the_pytorch_definition_in_float32(device):
    """Same value and gradient as the plain PyTorch formula it replaces, in its own dtype."""
    features = torch.randn(6, 5, 7, 4, device=device, requires_grad=True)
    value = grid.total_variation(features)
    want = reference.total_variation(features)
    torch.testing.assert_close(value, want, rtol=1e-5, atol=0)
    torch.testing.assert_close(
        torch.autograd.grad(value, features)[0], torch.autograd.grad(want, features)[0]
    )


@pytest.mark.parametrize("device", DEVICES)
def test_non_contiguous_features(device):
    base = torch.randn(7, 5, 6, 4, device=device, dtype=torch.float64)
    features = base.permute(1, 0, 2, 3)[:, ::2].requires_grad_()  # [5, 4, 6, 4], strided
    value = grid.total_variation(features)
    (grad,) = torch.autograd.grad(value, features)
    want_value, want_grad = reference_value_and_grad(features)
    torch.testing.assert_close(value, want_value)
    torch.testing.assert_close(grad, want_grad)


@pytest.mark.parametrize("device", DEVICES)
def test_gradcheck(device):
    features = torch.randn(4, 3, 5, 2, device=device, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(grid.total_variation, (features,))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", list(TOLERANCE))
def test_add_grad(device, dtype):
    features = torch.randn(5, 4, 6, 8, device=device).to(dtype)
    start = torch.randn_like(features) * 1e-3  # the size of the added gradient
    grad = start.clone()
    assert grid.total_variation_add_grad_(grad, features, 0.25) is None
    want_value, want_grad = reference_value_and_grad(features)
    assert rel(grad, start.double() + 0.25 * want_grad) < TOLERANCE[dtype]
    grad = start.clone()
    value = grid.total_variation_add_grad_(grad, features, 0.25, compute_value=True)
    assert rel(value, want_value) < TOLERANCE[dtype]


@pytest.mark.parametrize("device", DEVICES)
def test_results_are_bitwise_reproducible(device):
    features = torch.randn(33, 17, 40, 4, device=device)
    values = [grid.total_variation(features) for _ in range(3)]
    grads = []
    for _ in range(3):
        g = torch.zeros_like(features)
        values.append(grid.total_variation_add_grad_(g, features, 1.0, compute_value=True))
        grads.append(g)
    assert all(torch.equal(v, values[0]) for v in values)
    assert all(torch.equal(g, grads[0]) for g in grads)


def test_cpu_result_independent_of_thread_count():
    features = torch.randn(9, 8, 7, 5, dtype=torch.float32)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = grid.total_variation(features)
        torch.set_num_threads(max(2, threads))
        many = grid.total_variation(features)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one, many)


@needs_cuda
@pytest.mark.parametrize("dtype", list(TOLERANCE))
def test_cuda_matches_cpu(dtype):
    features = torch.randn(20, 9, 11, 12).to(dtype)
    cpu, cuda = features.clone(), features.cuda()
    for f in (cpu, cuda):
        f.requires_grad_()
    gc, gg = (torch.autograd.grad(grid.total_variation(f), f)[0] for f in (cpu, cuda))
    assert rel(grid.total_variation(cuda).cpu(), grid.total_variation(cpu)) < TOLERANCE[dtype]
    assert rel(gg.cpu(), gc) < TOLERANCE[dtype]


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    ops = torch.ops.grid
    f = torch.randn(4, 3, 5, 6, device=device, dtype=torch.float64, requires_grad=True)
    torch.library.opcheck(ops.total_variation, (f,))
    fd = f.detach()
    g = torch.tensor(0.7, device=device, dtype=torch.float64)
    torch.library.opcheck(ops.total_variation_backward, (g, fd))
    for compute_value in (False, True):
        grad = torch.randn_like(fd)
        torch.library.opcheck(ops.total_variation_add_grad_, (grad, fd, 0.5, compute_value))


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph(device):
    torch._dynamo.reset()

    def loss(features, points):
        return grid.sample(features, points).square().mean() + 0.1 * grid.total_variation(features)

    features = torch.randn(5, 4, 6, 3, device=device, requires_grad=True)
    points = torch.rand(20, 3, device=device) * 2 - 1
    compiled = torch.compile(loss, fullgraph=True)
    got, want = compiled(features, points), loss(features, points)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(
        torch.autograd.grad(got, features)[0], torch.autograd.grad(want, features)[0]
    )


@pytest.mark.parametrize("device", DEVICES)
def test_double_backward_raises(device):
    features = torch.randn(3, 3, 3, 2, device=device, requires_grad=True)
    (g,) = torch.autograd.grad(grid.total_variation(features), features, create_graph=True)
    with pytest.raises(NotImplementedError, match="grid.total_variation: gradients of gradients"):
        g.sum().backward()


@pytest.mark.parametrize("device", DEVICES)
def test_bad_input(device):
    with pytest.raises(RuntimeError, match=r"features: expected X, Y, Z >= 2"):
        grid.total_variation(torch.randn(1, 4, 4, 2, device=device))
    with pytest.raises(RuntimeError, match=r"features: expected shape \[X, Y, Z, F\]"):
        grid.total_variation(torch.randn(4, 4, 4, device=device))
    with pytest.raises(RuntimeError, match="features: expected a floating-point"):
        grid.total_variation(torch.ones(3, 3, 3, 1, device=device, dtype=torch.int64))
    f = torch.randn(3, 4, 5, 2, device=device)
    with pytest.raises(RuntimeError, match="grad: expected shape"):
        grid.total_variation_add_grad_(torch.zeros(3, 4, 5, 1, device=device), f, 1.0)
    with pytest.raises(RuntimeError, match="grad: expected dtype"):
        grid.total_variation_add_grad_(torch.zeros_like(f, dtype=torch.float64), f, 1.0)
    with pytest.raises(RuntimeError, match="grad: expected a contiguous tensor"):
        grad = torch.zeros(5, 4, 3, 2, device=device).permute(2, 1, 0, 3)
        grid.total_variation_add_grad_(grad, f, 1.0)
    with pytest.raises(RuntimeError, match=r"grad_out: expected a scalar"):
        torch.ops.grid.total_variation_backward(torch.ones(1, device=device), f)
