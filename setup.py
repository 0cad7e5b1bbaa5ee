"""Builds `grid._C`: CPU kernels always, CUDA kernels when the installed torch has CUDA.

Everything else about the distribution (name, version, packages, dependencies, the
`grid-train` script) is in pyproject.toml. Build against the torch already installed
(never a second one):
    pip install --no-build-isolation -e .     # a checkout, for development
    pip wheel --no-build-isolation --no-deps -w dist .
Set GRID_NO_CUDA=1 to build the CPU kernels only; TORCH_CUDA_ARCH_LIST picks the GPU
targets (default "9.0", i.e. sm_90).

A build is cached per machine (grid/_build_cache.py): an install whose sources, flags and torch
were built before copies that library and compiles nothing. GRID_BUILD_CACHE=DIR puts the
cache elsewhere (default ~/.cache/densegrid), GRID_BUILD_CACHE=0 turns it off. `pip install -v`
shows the build's lines, one per file compiled.
"""

import os
import sys
import warnings
from pathlib import Path

from setuptools import setup

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "grid"))

# pip installs numpy, a dependency, after building: torch's warning about it means nothing here
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
try:
    from torch.utils.cpp_extension import CppExtension, CUDAExtension
except ImportError as error:  # pragma: no cover - message for a missing build dependency
    raise SystemExit(
        "grid: building needs torch installed first (e.g. `pip install torch==2.13.0`), "
        "then `pip install --no-build-isolation .` (without --no-build-isolation pip builds "
        "in an environment without torch)"
    ) from error

import _backend  # noqa: E402  (grid/_backend.py, loaded without importing the package)
from _build_cache import CachedBuildExtension  # noqa: E402  (grid/_build_cache.py, the same)

with_cuda = _backend.cuda_wanted()
os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0")
Extension = CUDAExtension if with_cuda else CppExtension
extra = {"cxx": _backend.CXX_FLAGS}
if with_cuda:
    extra["nvcc"] = _backend.NVCC_FLAGS

setup(
    ext_modules=[
        Extension(
            "grid._C",
            [os.path.relpath(s, ROOT) for s in _backend.sources(with_cuda)],
            include_dirs=[str(ROOT / "csrc")],
            # every header too: the build cache's key hashes these files' contents
            depends=[os.path.relpath(f, ROOT) for f in _backend.native_files()],
            extra_compile_args=extra,
            extra_link_args=_backend.LINK_FLAGS,
        )
    ],
    cmdclass={"build_ext": CachedBuildExtension},
)
