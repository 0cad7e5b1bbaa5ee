"""The operator contract: native kernels in use, opcheck, torch.compile, and input errors."""

import re
import shutil
import subprocess
import sys

import pytest
import torch

import grid
from grid import _backend
from tests._helpers import DEVICES, Record, assert_close, needs_cuda, random_points

OPS = ["trilinear", "trilinear_backward", "sample", "sample_backward"]
DOUBLE_BACKWARD_OPS = ["trilinear_double_backward", "sample_double_backward"]
TV_OPS = ["total_variation", "total_variation_backward", "total_variation_add_grad_"]


@pytest.mark.parametrize("op", OPS + DOUBLE_BACKWARD_OPS + TV_OPS)
def test_native_kernels_registered(op):
    assert _backend.source in ("installed", "jit")
    assert torch._C._dispatch_has_kernel_for_dispatch_key(f"grid::{op}", "CPU")
    if torch.cuda.is_available():
        assert torch._C._dispatch_has_kernel_for_dispatch_key(f"grid::{op}", "CUDA"), (
            "torch has CUDA but grid was built without the CUDA kernels"
        )


@pytest.mark.parametrize("op", OPS + TV_OPS[:2])
def test_autograd_is_registered_in_cpp(op):
    """The Autograd kernel of every differentiable op (and of its backward op, which holds the
    double-backward rule) is the C++ one from csrc/autograd.cpp, not a Python rule."""
    dump = torch._C._dispatch_dump(f"grid::{op}")
    line = [x for x in dump.splitlines() if x.startswith("Autograd[alias]:")]
    assert len(line) == 1, dump
    assert re.search(r"autograd\.cpp:\d+ ", line[0]), line[0]
    assert "[ boxed unboxed ]" in line[0], line[0]  # a C++ function, not a Python callable


@pytest.mark.parametrize("device", DEVICES)
def test_gradcheck_through_the_cpp_autograd(device):
    """Every gradient combination, so the needs_input_grad masks are exercised."""
    f, p, _, c = _op_samples(device)
    for a, b in ((f, p), (f, p.detach()), (f.detach(), p)):
        assert torch.autograd.gradcheck(lambda x, y: grid.sample(x, y, padding="border"), (a, b))
    assert torch.autograd.gradcheck(grid.trilinear, (c, p))
    assert torch.autograd.gradcheck(lambda x: grid.trilinear(x, p.detach()), (c,))


def test_no_grad_forward_builds_no_graph():
    f, p, _, c = _op_samples("cpu")
    with torch.no_grad():
        out = grid.sample(f, p)
    assert out.grad_fn is None and not out.requires_grad
    assert grid.sample(f, p).grad_fn is not None


@pytest.mark.skipif(shutil.which("ldd") is None, reason="needs ldd (Linux)")
def test_native_library_shares_the_cxx_runtime():
    """A private static libstdc++ in the extension crashes when it formats an error message."""
    path = _backend.library_path()
    assert path is not None
    deps = subprocess.run(["ldd", path], capture_output=True, text=True, check=True).stdout
    assert "libstdc++.so" in deps, deps


@pytest.mark.skipif(
    not (sys.platform.startswith("linux") and torch.backends.openmp.is_available())
    or shutil.which("nm") is None,
    reason="needs Linux, a torch with OpenMP and nm",
)
def test_cpu_kernels_run_on_torchs_openmp_runtime():
    """Built with OpenMP (else at::parallel_for runs every CPU kernel on one thread), and the
    process holds one OpenMP runtime, torch's (so torch.set_num_threads governs ours too)."""
    path = _backend.library_path()
    assert path is not None
    symbols = subprocess.run(["nm", "-D", path], capture_output=True, text=True, check=True)
    assert "GOMP_parallel" in symbols.stdout
    # In a fresh process: another package a test imported earlier (pycolmap) may bring its own.
    code = (
        "import torch, grid\n"
        "torch.ones(1 << 16).sum(); grid.sample(torch.rand(4, 4, 4, 2), torch.rand(9, 3) * 2 - 1)\n"
        "maps = open('/proc/self/maps').read().splitlines()\n"
        "print('\\n'.join({l.split()[-1] for l in maps if 'libgomp' in l or 'libomp' in l}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    runtimes = set(out.stdout.split())
    assert len(runtimes) == 1, runtimes


def test_public_api_calls_the_native_ops():
    features = torch.randn(3, 3, 3, 2, requires_grad=True)
    points = random_points((5,), "cpu").requires_grad_()
    corners = torch.randn(5, 8, 2, requires_grad=True)
    with Record() as rec:
        grid.sample(features, points).sum().backward()
        grid.trilinear(corners, points).sum().backward()
    for op in OPS:
        assert f"grid.{op}.default" in rec.ops, rec.ops


def _op_samples(device):
    f = torch.randn(4, 3, 5, 6, device=device, dtype=torch.float64, requires_grad=True)
    p = random_points((7,), device, torch.float64).requires_grad_()
    g = torch.randn(7, 6, device=device, dtype=torch.float64)
    c = torch.randn(7, 8, 6, device=device, dtype=torch.float64, requires_grad=True)
    return f, p, g, c


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    f, p, g, c = _op_samples(device)
    ops = torch.ops.grid
    # The backward ops get inputs that need no gradient: their own backward is the double
    # backward op, checked in test_double_backward.py.
    fd, pd, cd = f.detach(), p.detach(), c.detach()
    for align_corners, padding, interpolation in (
        (True, "zeros", "linear"),
        (False, "border", "smoothstep"),
    ):
        torch.library.opcheck(ops.sample, (f, p, align_corners, padding, interpolation))
        for mask in ([True, True], [False, True]):
            torch.library.opcheck(
                ops.sample_backward, (g, fd, pd, align_corners, padding, interpolation, mask)
            )
    torch.library.opcheck(ops.sample, (f, p, True, "zeros"))  # the schema's default: linear
    torch.library.opcheck(ops.trilinear, (c, p))
    torch.library.opcheck(ops.trilinear_backward, (g, cd, pd, [True, True]))
    torch.library.opcheck(ops.trilinear_backward, (g, cd, pd, [True, False]))


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph(device):
    torch._dynamo.reset()

    def model(features, points, corners):
        a = grid.sample(features, points, align_corners=False, padding="border")
        b = grid.trilinear(corners, points.reshape(-1, 3).clamp(-1, 1))
        return (a.reshape(-1, a.shape[-1]) * b).sum() + a.square().mean()

    f32 = torch.float32
    features = torch.randn(5, 4, 6, 8, device=device, dtype=f32, requires_grad=True)
    points = random_points((3, 10), device).requires_grad_()
    corners = torch.randn(30, 8, 8, device=device, requires_grad=True)
    compiled = torch.compile(model, fullgraph=True)
    want = model(features, points, corners)
    got = compiled(features, points, corners)
    assert_close(got, want)
    for a, b in zip(
        torch.autograd.grad(got, (features, points, corners)),
        torch.autograd.grad(want, (features, points, corners)),
        strict=True,
    ):
        assert_close(a, b)


# ---- bad input ------------------------------------------------------------------------


BAD_SAMPLE = [
    (
        lambda d: (torch.randn(4, 4, 4, device=d), torch.zeros(2, 3, device=d)),
        "features: expected shape",
    ),
    (
        lambda d: (torch.randn(4, 4, 4, 2, 1, device=d), torch.zeros(2, 3, device=d)),
        "features: expected shape",
    ),
    (
        lambda d: (torch.randn(4, 0, 4, 2, device=d), torch.zeros(2, 3, device=d)),
        "features: expected every axis",
    ),
    (
        lambda d: (torch.randn(4, 4, 4, 0, device=d), torch.zeros(2, 3, device=d)),
        "features: expected every axis",
    ),
    (
        lambda d: (torch.randn(4, 4, 4, 2, device=d), torch.zeros(2, 2, device=d)),
        r"points: expected shape \[\.\.\., 3\]",
    ),
    (
        lambda d: (torch.randn(4, 4, 4, 2, device=d), torch.zeros((), device=d)),
        r"points: expected shape \[\.\.\., 3\]",
    ),
    (
        lambda d: (
            torch.ones(4, 4, 4, 2, device=d, dtype=torch.int64),
            torch.zeros(2, 3, device=d),
        ),
        "features: expected a floating-point",
    ),
    (
        lambda d: (
            torch.randn(4, 4, 4, 2, device=d),
            torch.zeros(2, 3, device=d, dtype=torch.int32),
        ),
        "points: expected a floating-point",
    ),
    (
        lambda d: (
            torch.randn(4, 4, 4, 2, device=d, dtype=torch.float64),
            torch.zeros(2, 3, device=d),
        ),
        "points: expected dtype",
    ),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", range(len(BAD_SAMPLE)))
def test_sample_bad_input(device, case):
    make, message = BAD_SAMPLE[case]
    features, points = make(device)
    with pytest.raises(RuntimeError, match=message):
        grid.sample(features, points)


@pytest.mark.parametrize("device", DEVICES)
def test_sample_bad_padding(device):
    with pytest.raises(
        RuntimeError, match="padding: expected 'zeros' or 'border', got 'reflection'"
    ):
        grid.sample(
            torch.randn(2, 2, 2, 1, device=device),
            torch.zeros(1, 3, device=device),
            padding="reflection",
        )


@pytest.mark.parametrize("device", DEVICES)
def test_trilinear_bad_input(device):
    c, loc = torch.randn(5, 8, 2, device=device), torch.zeros(5, 3, device=device)
    with pytest.raises(RuntimeError, match=r"corners: expected shape \[N, 8, F\]"):
        grid.trilinear(torch.randn(5, 7, 2, device=device), loc)
    with pytest.raises(RuntimeError, match=r"local: expected shape \[N, 3\] with N = 5"):
        grid.trilinear(c, torch.zeros(4, 3, device=device))
    with pytest.raises(RuntimeError, match="corners: expected a floating-point"):
        grid.trilinear(c.long(), loc)


@needs_cuda
def test_mismatched_devices():
    with pytest.raises(
        RuntimeError, match="points: expected a tensor on the same device as features"
    ):
        grid.sample(torch.randn(2, 2, 2, 1, device="cuda"), torch.zeros(1, 3))
    with pytest.raises(
        RuntimeError, match="local: expected a tensor on the same device as corners"
    ):
        grid.trilinear(torch.randn(1, 8, 2, device="cuda"), torch.zeros(1, 3))


def test_fake_shapes_raise_the_same_errors():
    """Under torch.compile the shape rules run instead of the kernels; they name arguments too."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        with pytest.raises(RuntimeError, match="points: expected shape"):
            torch.ops.grid.sample(torch.randn(2, 2, 2, 1), torch.zeros(1, 2), True, "zeros")
        with pytest.raises(RuntimeError, match="padding: expected"):
            torch.ops.grid.sample(torch.randn(2, 2, 2, 1), torch.zeros(1, 3), True, "bogus")
        with pytest.raises(RuntimeError, match="interpolation: expected"):
            torch.ops.grid.sample(
                torch.randn(2, 2, 2, 1), torch.zeros(1, 3), True, "zeros", "bogus"
            )
