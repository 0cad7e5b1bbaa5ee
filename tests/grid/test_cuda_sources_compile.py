"""Compile every CUDA source with nvcc (compile only, sm_90) against the installed torch.

CI has nvcc but no GPU and a CPU-only torch, so nothing CUDA runs there; this makes a CUDA
mistake fail CI anyway. Where the extension was built with its CUDA kernels, the build itself
compiled these files and the CUDA tests ran them, so the check is skipped.
"""

import os
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest
import torch.utils.cpp_extension as cpp

from grid import _backend

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted((ROOT / "csrc" / "cuda").glob("*.cu"))


def _nvcc() -> str | None:
    if cpp.CUDA_HOME and (Path(cpp.CUDA_HOME) / "bin" / "nvcc").exists():
        return str(Path(cpp.CUDA_HOME) / "bin" / "nvcc")
    return shutil.which("nvcc")


def test_there_are_cuda_sources():
    assert len(SOURCES) == 14, SOURCES


@pytest.mark.skipif(_nvcc() is None, reason="nvcc not found")
@pytest.mark.skipif(_backend.has_cuda_kernels, reason="the CUDA kernels were built and run")
@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.name)
def test_cuda_source_compiles(source, tmp_path):
    includes = [*cpp.include_paths(), sysconfig.get_paths()["include"], str(ROOT / "csrc")]
    if cpp.CUDA_HOME:
        includes.append(os.path.join(cpp.CUDA_HOME, "include"))
    command = [
        _nvcc(),
        "-c",
        str(source),
        "-o",
        str(tmp_path / "out.o"),
        "-arch=sm_90",
        "-std=c++17",
        "-Xptxas=-O1",  # errors, not speed, are what this checks
        "-DTORCH_EXTENSION_NAME=grid_C",
        "-DTORCH_API_INCLUDE_EXTENSION_H",
        # A CPU-only wheel ships the CUDA headers but not this generated one.
        "-DC10_CUDA_NO_CMAKE_CONFIGURE_FILE",
        *cpp.COMMON_NVCC_FLAGS,
        *[f"-I{p}" for p in includes],
    ]
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 0, f"{' '.join(command)}\n{result.stdout}\n{result.stderr}"
