"""Loads the native operators: the installed `grid._C`, or a JIT build of `csrc/`.

There is no pure-Python fallback. If the extension is missing and cannot be
compiled, importing `grid` fails with the compiler's output.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import torch

_ROOT = Path(__file__).resolve().parent.parent
_CSRC = _ROOT / "csrc"

#: How the native ops were obtained: "installed" (grid._C) or "jit" (built on first use).
source = ""
#: Whether the loaded build contains the CUDA kernels.
has_cuda_kernels = False


def cuda_wanted() -> bool:
    """Build CUDA kernels when torch has CUDA, unless GRID_NO_CUDA=1 turns them off."""
    if os.environ.get("GRID_NO_CUDA", "0") not in ("", "0"):
        return False
    from torch.utils.cpp_extension import CUDA_HOME

    return torch.version.cuda is not None and CUDA_HOME is not None


def sources(with_cuda: bool) -> list[str]:
    """The C++ (and, with CUDA, .cu) files that make up grid._C."""
    files = [_CSRC / "ops.cpp", _CSRC / "autograd.cpp", *sorted((_CSRC / "cpu").glob("*.cpp"))]
    if with_cuda:
        files += sorted((_CSRC / "cuda").glob("*.cu"))
    return [str(f) for f in files]


def native_files() -> list[str]:
    """Every file of csrc/, headers included: what a build of grid._C depends on."""
    return [str(f) for f in sorted(_CSRC.rglob("*")) if f.is_file()]


# -fno-math-errno (as torch's own build): math functions need not set errno, so that loops
# with a square root (csrc/cpu/masked_adam.cpp) vectorise; no result changes.
# -ffp-contract=off: a point's cell is located in two places (csrc/cpu/corner_scatter.h routes
# points to bands, then each band locates them again); where the compiler may fuse a multiply
# and an add (aarch64), both must round alike.
CXX_FLAGS = ["-O3", "-fno-math-errno", "-ffp-contract=off", "-Wno-unknown-pragmas"]
NVCC_FLAGS = ["-O3", "-lineinfo"]
# Share torch's C++ runtime: a toolchain whose search path holds only libstdc++.a would
# otherwise embed a second copy, and formatting any error message then crashes.
LINK_FLAGS = ["-l:libstdc++.so.6"] if sys.platform.startswith("linux") else []
# OpenMP as torch itself uses it: at::parallel_for (ATen/ParallelOpenMP.h, inlined into our
# kernels) parallelises only when compiled with _OPENMP; without it every CPU op ran on one
# thread. Linux wheels of torch ship GNU OpenMP as libgomp.so.1 and load it before grid._C;
# ours needs the same soname, so the loader reuses torch's copy (one runtime, one thread pool,
# torch.set_num_threads governs both). tests/test_layout.py checks both.
if sys.platform.startswith("linux") and torch.backends.openmp.is_available():
    CXX_FLAGS.append("-fopenmp")
    LINK_FLAGS.append("-fopenmp")


def _jit_build() -> None:
    from torch.utils import cpp_extension

    with_cuda = cuda_wanted()
    if with_cuda and not os.environ.get("TORCH_CUDA_ARCH_LIST"):
        major, minor = torch.cuda.get_device_capability() if torch.cuda.is_available() else (9, 0)
        os.environ["TORCH_CUDA_ARCH_LIST"] = f"{major}.{minor}"
    kind = "CPU+CUDA" if with_cuda else "CPU"
    name = "grid_C_cuda" if with_cuda else "grid_C_cpu"
    build_dir = Path(cpp_extension._get_build_directory(name, verbose=False))
    if not (build_dir / f"{name}.so").exists():
        print(
            f"grid: compiling the native {kind} ops from {_CSRC} (first use only, then cached "
            f"in {build_dir}; about a minute)...",
            file=sys.stderr,
            flush=True,
        )
    cpp_extension.load(
        name=name,
        sources=sources(with_cuda),
        extra_include_paths=[str(_CSRC)],
        extra_cflags=CXX_FLAGS,
        extra_cuda_cflags=NVCC_FLAGS,
        extra_ldflags=LINK_FLAGS,
        is_python_module=False,
        verbose=os.environ.get("GRID_VERBOSE_BUILD", "0") not in ("", "0"),
    )


def _installed_here() -> bool:
    """Whether a built grid._C sits next to this file. An editable install of another
    checkout can resolve `grid._C` to that checkout's library, built from other sources."""
    spec = importlib.util.find_spec("grid._C")
    return (
        spec is not None and spec.origin is not None and Path(spec.origin).parent == _ROOT / "grid"
    )


def load() -> None:
    """Register the `torch.ops.grid.*` operators (idempotent)."""
    global source, has_cuda_kernels
    if source:
        return
    if _installed_here():
        # An installed build that fails to load is an error, not a reason to rebuild.
        import grid._C  # noqa: F401

        source = "installed"
    else:
        _jit_build()
        source = "jit"
    has_cuda_kernels = torch._C._dispatch_has_kernel_for_dispatch_key("grid::sample", "CUDA")


def library_path() -> str | None:
    """Path of the loaded native library (Linux only), e.g. to inspect how it was linked."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split()[-1]
                if path.endswith(".so") and ("grid_C_" in path or "/grid/_C" in path):
                    return path
    except OSError:
        pass
    return None
