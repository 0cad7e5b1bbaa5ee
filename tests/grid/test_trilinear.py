"""grid.trilinear against the reference: corner order, values, gradients to both inputs."""

import pytest
import torch

import grid
from grid import reference
from tests._helpers import DEVICES, assert_close, needs_cuda


@pytest.mark.parametrize("device", DEVICES)
def test_corner_order(device):
    corners = torch.randn(8, 8, 5, device=device)
    for k in range(8):
        offset = torch.tensor(
            [(k >> 2) & 1, (k >> 1) & 1, k & 1], device=device, dtype=torch.float32
        )
        local = (offset * 2 - 1).expand(8, 3)
        assert_close(grid.trilinear(corners, local), corners[:, k])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("F", [1, 3, 16, 33, 256])
def test_forward_and_gradients(device, dtype, F):
    torch.manual_seed(F)
    corners = torch.randn(97, 8, F, device=device, dtype=dtype, requires_grad=True)
    local = (torch.rand(97, 3, device=device, dtype=dtype) * 2.4 - 1.2).requires_grad_()
    out = grid.trilinear(corners, local)
    ref = reference.trilinear(corners, local)
    tol = 1e-10 if dtype == torch.float64 else 1e-5
    assert out.shape == (97, F)
    assert_close(out, ref, rtol=tol, atol=tol)
    grad = torch.randn_like(out)
    for g, w in zip(
        torch.autograd.grad(out, (corners, local), grad),
        torch.autograd.grad(ref, (corners, local), grad),
        strict=True,
    ):
        assert_close(g, w, rtol=tol * 10, atol=tol * 10)


@pytest.mark.parametrize("device", DEVICES)
def test_gradcheck(device):
    corners = torch.randn(6, 8, 3, device=device, dtype=torch.float64, requires_grad=True)
    local = (torch.rand(6, 3, device=device, dtype=torch.float64) * 2 - 1).requires_grad_()
    torch.autograd.gradcheck(grid.trilinear, (corners, local))
    torch.autograd.gradcheck(lambda c: grid.trilinear(c, local.detach()), (corners,))


@pytest.mark.parametrize("device", DEVICES)
def test_empty_and_non_contiguous(device):
    out = grid.trilinear(torch.randn(0, 8, 4, device=device), torch.randn(0, 3, device=device))
    assert out.shape == (0, 4)
    corners = torch.randn(4, 8, 10, device=device).transpose(0, 2)  # [10, 8, 4] view
    local = torch.rand(3, 10, device=device).T * 2 - 1
    assert_close(grid.trilinear(corners, local), reference.trilinear(corners, local))


@pytest.mark.parametrize("device", DEVICES)
def test_half_precision(device):
    corners = torch.randn(200, 8, 16, device=device)
    local = torch.rand(200, 3, device=device) * 2 - 1
    want = reference.trilinear(corners.double(), local.double())
    for dtype in (torch.float16, torch.bfloat16):
        tol = 1e-2 if dtype == torch.float16 else 5e-2
        out = grid.trilinear(corners.to(dtype), local)
        assert out.dtype == dtype
        assert_close(out.double(), want, rtol=tol, atol=tol)


@needs_cuda
def test_large_64bit_offsets():
    """N * 8 * F > 2^31 elements."""
    if torch.cuda.get_device_properties(0).total_memory < 40 * 2**30:
        pytest.skip("needs 40 GiB of GPU memory")
    N, F = 2**25 + 7, 8  # 2.15e9 corner elements
    corners = torch.empty(N, 8, F, device="cuda", dtype=torch.float16)
    corners[-4:] = torch.randn(4, 8, F, device="cuda", dtype=torch.float16)
    local = torch.rand(N, 3, device="cuda") * 2 - 1
    out = grid.trilinear(corners, local)
    want = reference.trilinear(corners[-4:].float(), local[-4:])
    assert_close(out[-4:].float(), want, rtol=1e-2, atol=1e-2)
