"""Builds `grid._C`: CPU kernels always, CUDA kernels when the installed torch has CUDA.

Build against the torch already installed (never a second one):
    pip install --no-build-isolation -e .
Set GRID_NO_CUDA=1 to build the CPU kernels only; TORCH_CUDA_ARCH_LIST picks the GPU
targets (default "9.0", i.e. sm_90).
"""

import os
import sys
from pathlib import Path

from setuptools import find_packages, setup

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "grid"))

try:
    from torch.utils.cpp_extension import BuildExtension, CppExtension, CUDAExtension
except ImportError as error:  # pragma: no cover - message for a missing build dependency
    raise SystemExit(
        "grid: building needs torch installed first (e.g. `pip install torch==2.13.0`), "
        "then `pip install --no-build-isolation -e .`"
    ) from error

import _backend  # noqa: E402  (grid/_backend.py, loaded without importing the package)

with_cuda = _backend.cuda_wanted()
os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0")
Extension = CUDAExtension if with_cuda else CppExtension
extra = {"cxx": _backend.CXX_FLAGS}
if with_cuda:
    extra["nvcc"] = _backend.NVCC_FLAGS

setup(
    name="grid",
    version="0.1.0",
    description="Dense voxel feature grids for PyTorch: fused trilinear ops on CPU and CUDA",
    packages=find_packages(include=["grid", "grid.*", "train", "train.*"]),
    python_requires=">=3.11",
    install_requires=["torch>=2.11", "numpy", "tqdm"],
    extras_require={
        "train": ["matplotlib"],
        # the sdf experiment: marching cubes (mesh.ply, mesh.png, Chamfer) and .ply inputs
        "sdf": ["matplotlib", "scikit-image", "plyfile"],
        # output.tensorboard: TensorBoard event files of a run
        "tensorboard": ["tensorboard"],
        "test": ["pytest", "matplotlib", "ninja", "scikit-image", "plyfile", "tensorboard"],
    },
    entry_points={"console_scripts": ["grid-train=train.__main__:main"]},
    ext_modules=[
        Extension(
            "grid._C",
            [os.path.relpath(s, ROOT) for s in _backend.sources(with_cuda)],
            include_dirs=[str(ROOT / "csrc")],
            extra_compile_args=extra,
            extra_link_args=_backend.LINK_FLAGS,
        )
    ],
    cmdclass={"build_ext": BuildExtension},
)
