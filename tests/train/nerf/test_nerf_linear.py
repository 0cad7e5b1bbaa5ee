"""train/nerf/model/linear.py: the colour MLP's Linear against nn.Linear (values, gradients,
autocast)."""

import pytest
import torch
from torch import nn

from tests._helpers import DEVICES
from train.nerf.model.linear import Linear


def pair(device, dtype=torch.float32):
    torch.manual_seed(3)
    ours = Linear(7, 5, device=device).to(dtype)
    theirs = nn.Linear(7, 5, device=device).to(dtype)
    theirs.load_state_dict(ours.state_dict())
    with torch.no_grad():
        ours.bias.uniform_(-1, 1)
        theirs.bias.copy_(ours.bias)
    return ours, theirs


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("input_grad", [True, False])
def test_matches_nn_linear(device, input_grad):
    ours, theirs = pair(device, torch.float64)
    x = torch.randn(300, 7, dtype=torch.float64, device=device, requires_grad=input_grad)
    g = torch.randn(300, 5, dtype=torch.float64, device=device)
    got, want = ours(x), theirs(x)
    torch.testing.assert_close(got, want)
    leaves = [x] if input_grad else []
    got_g = torch.autograd.grad(got, [*leaves, ours.weight, ours.bias], g)
    want_g = torch.autograd.grad(want, [*leaves, theirs.weight, theirs.bias], g)
    for a, b in zip(got_g, want_g, strict=True):
        torch.testing.assert_close(a, b)
    assert got_g[-1].abs().min() > 0  # a real bias gradient: the column sums of g


@pytest.mark.parametrize("device", DEVICES)
def test_autocast_bfloat16_as_nn_linear(device):
    ours, theirs = pair(device)
    x = torch.randn(500, 7, device=device, requires_grad=True)
    g = torch.randn(500, 5, device=device)
    outs, grads = [], []
    for layer in (ours, theirs):
        with torch.autocast(device, dtype=torch.bfloat16):
            y = layer(x)
        outs.append(y)
        grads.append(torch.autograd.grad(y, [x, layer.weight, layer.bias], g.to(y.dtype)))
    assert outs[0].dtype == outs[1].dtype == torch.bfloat16
    torch.testing.assert_close(outs[0], outs[1])
    for a, b in zip(*grads, strict=True):
        assert a.dtype == b.dtype
        torch.testing.assert_close(a, b, rtol=2e-2, atol=0.5)  # bf16 sums of 500 rows


@pytest.mark.parametrize("device", DEVICES)
def test_gradcheck(device):
    ours, _ = pair(device, torch.float64)
    x = torch.randn(20, 7, dtype=torch.float64, device=device, requires_grad=True)

    def fn(x, weight, bias):
        return torch.func.functional_call(ours, {"weight": weight, "bias": bias}, (x,))

    assert torch.autograd.gradcheck(fn, (x, ours.weight, ours.bias))


def test_bad_input_shape_names_x():
    with pytest.raises(ValueError, match=r"x: expected shape \[V, 7\]"):
        Linear(7, 5)(torch.zeros(2, 3, 7))
