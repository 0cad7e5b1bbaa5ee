"""The build cache of setup.py (grid/_build_cache.py), on a tiny extension of two sources and a
header that compiles in seconds: the same sources are compiled once, in any folder; an edit
recompiles the files it reaches and nothing else; a change of torch, flags or compiler makes
a new key; GRID_BUILD_CACHE moves the cache or turns it off."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch
from setuptools import Extension

from grid import _build_cache

ROOT = Path(__file__).resolve().parent.parent

SETUP = f"""
import sys
from setuptools import setup
from torch.utils.cpp_extension import CppExtension
sys.path.insert(0, {str(ROOT / "grid")!r})
from _build_cache import CachedBuildExtension

setup(
    name="tiny",
    version="0",
    ext_modules=[CppExtension("tiny", ["src/a.cpp", "src/b.cpp"], depends=["src/common.h"])],
    cmdclass={{"build_ext": CachedBuildExtension}},
)
"""
A_CPP = """
#include <Python.h>
#include "common.h"
int b_value();
static PyModuleDef module = {PyModuleDef_HEAD_INIT, "tiny", nullptr, -1, nullptr};
PyMODINIT_FUNC PyInit_tiny() {
  PyObject* m = PyModule_Create(&module);
  PyModule_AddIntConstant(m, "value", common_value() + b_value());
  return m;
}
"""


def _project(path: Path) -> Path:
    (path / "src").mkdir(parents=True)
    (path / "setup.py").write_text(SETUP)
    (path / "src" / "a.cpp").write_text(A_CPP)
    (path / "src" / "b.cpp").write_text("int b_value() { return 10; }\n")
    (path / "src" / "common.h").write_text(
        "#pragma once\ninline int common_value() { return 1; }\n"
    )
    return path


def _build(project: Path, cache: str) -> tuple[list[str], int]:
    """Build in place; the build's own lines (`grid: ...`) and the module's value."""
    env = {**os.environ, "GRID_BUILD_CACHE": cache}
    command = [sys.executable, "setup.py", "-q", "build_ext", "--inplace"]
    built = subprocess.run(command, cwd=project, env=env, capture_output=True, text=True)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    lines = [line for line in built.stderr.splitlines() if line.startswith("grid: ")]
    probe = [sys.executable, "-c", "import tiny; print(tiny.value)"]
    value = subprocess.run(probe, cwd=project, capture_output=True, text=True, check=True).stdout
    return lines, int(value)


def _compiled(lines: list[str]) -> list[str]:
    """The files compiled, from the `grid: [n/m] compiled FILE (time)` lines."""
    return [line.split("] compiled ")[1].split(" (")[0] for line in lines if "] compiled " in line]


def test_the_same_sources_compile_once_in_any_folder(tmp_path):
    cache = tmp_path / "cache"
    lines, value = _build(_project(tmp_path / "one"), str(cache))
    assert value == 11
    assert sorted(_compiled(lines)) == ["src/a.cpp", "src/b.cpp"]
    assert any("[2/2] compiled" in line for line in lines), lines
    (entry,) = (cache / "lib").iterdir()
    assert (entry / "about.json").is_file()

    # the same sources in another folder (another checkout, an unpacked sdist): no compiler
    lines, value = _build(_project(tmp_path / "two"), str(cache))
    assert value == 11
    assert _compiled(lines) == [] and "reused from the build cache" in lines[0], lines
    assert [p.name for p in (cache / "lib").iterdir()] == [entry.name]


def test_an_edit_recompiles_the_files_it_reaches(tmp_path):
    cache, project = str(tmp_path / "cache"), _project(tmp_path / "tiny")
    assert sorted(_compiled(_build(project, cache)[0])) == ["src/a.cpp", "src/b.cpp"]

    (project / "src" / "b.cpp").write_text("int b_value() { return 20; }\n")
    lines, value = _build(project, cache)
    assert (_compiled(lines), value) == (["src/b.cpp"], 21)

    # a header: the files that include it (ninja knows them from the compiler's depfiles)
    (project / "src" / "common.h").write_text(
        "#pragma once\ninline int common_value() { return 2; }\n"
    )
    lines, value = _build(project, cache)
    assert (_compiled(lines), value) == (["src/a.cpp"], 22)

    # back to sources built before: that library, without compiling
    (project / "src" / "b.cpp").write_text("int b_value() { return 10; }\n")
    (project / "src" / "common.h").write_text(
        "#pragma once\ninline int common_value() { return 1; }\n"
    )
    lines, value = _build(project, cache)
    assert (_compiled(lines), value) == ([], 11)
    assert "reused from the build cache" in lines[0]

    # new contents under a time stamp older than the last build (a file restored with its
    # time, unpacked from an archive): ninja alone would keep the old object
    b_cpp = project / "src" / "b.cpp"
    old = (project / "setup.py").stat().st_mtime_ns  # written before the first build
    b_cpp.write_text("int b_value() { return 30; }\n")
    os.utime(b_cpp, ns=(old, old))
    lines, value = _build(project, cache)
    assert value == 31
    assert "src/b.cpp changed but is older than the last build" in "\n".join(lines)


def test_turned_off_it_compiles_and_keeps_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # where the default cache would go
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    project = _project(tmp_path / "tiny")
    lines, value = _build(project, "0")
    assert sorted(_compiled(lines)) == ["src/a.cpp", "src/b.cpp"] and value == 11
    assert "GRID_BUILD_CACHE: off" in lines[0]
    # the default cache's folder only: on a CUDA host torch's import writes its own files
    # under HOME (seen on an H200 host), which are not the build cache's
    assert not (tmp_path / "home" / ".cache" / "densegrid").exists()
    assert (project / "build").is_dir()  # setuptools' own build folder, as without the cache


def test_where_the_cache_is(monkeypatch, tmp_path):
    monkeypatch.delenv("GRID_BUILD_CACHE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert _build_cache.cache_root() == tmp_path / ".cache" / "densegrid"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert _build_cache.cache_root() == tmp_path / "xdg" / "densegrid"
    monkeypatch.setenv("GRID_BUILD_CACHE", str(tmp_path / "mine"))
    assert _build_cache.cache_root() == tmp_path / "mine"
    for off in ("0", "off", "OFF", "false", "no"):
        monkeypatch.setenv("GRID_BUILD_CACHE", off)
        assert _build_cache.cache_root() is None


def test_the_key_changes_with_everything_that_makes_the_library(tmp_path, monkeypatch):
    project = _project(tmp_path / "tiny")
    monkeypatch.chdir(project)
    for name in _build_cache.COMPILER_ENV:
        monkeypatch.delenv(name, raising=False)

    def key(**changes) -> str:
        args = {"sources": ["src/a.cpp", "src/b.cpp"], "depends": ["src/common.h"]}
        args["extra_compile_args"] = {"cxx": ["-O3"]}
        ext = Extension("tiny", **{**args, **changes})
        return _build_cache.library_key(ext)[0]

    base = key()
    assert key() == base
    # absolute or relative paths inside the folder built: the same files, the same key
    assert key(sources=[str(project / "src" / "a.cpp"), "src/b.cpp"]) == base
    assert key(extra_compile_args={"cxx": ["-O2"]}) != base
    assert key(depends=[]) != base
    monkeypatch.setenv("CXXFLAGS", "-march=native")
    assert key() != base
    monkeypatch.delenv("CXXFLAGS")
    version = torch.__version__
    monkeypatch.setattr(torch, "__version__", "2.99.0")
    assert key() != base
    monkeypatch.setattr(torch, "__version__", version)
    assert key() == base
    (project / "src" / "common.h").write_text("#pragma once\n// a comment\n")
    assert key() != base

    # torch's include folders (CppExtension adds them) are the same in any venv
    torch_dir = Path(torch.__file__).parent
    here = key(include_dirs=[str(torch_dir / "include")])
    monkeypatch.setattr(torch, "__file__", str(tmp_path / "venv2" / "torch" / "__init__.py"))
    assert key(include_dirs=[str(tmp_path / "venv2" / "torch" / "include")]) == here
    assert key(include_dirs=[str(tmp_path / "venv2" / "torch" / "lib")]) != here


def test_old_entries_are_pruned_by_last_use(tmp_path):
    for i in range(5):
        (tmp_path / f"entry{i}").mkdir()
        os.utime(tmp_path / f"entry{i}", (1000 + i, 1000 + i))
    os.utime(tmp_path / "entry0", (2000, 2000))  # used last
    _build_cache._prune(tmp_path, 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["entry0", "entry4"]


def test_the_progress_line_names_the_source_of_torchs_compile_rule(tmp_path, monkeypatch):
    # torch's rule: $cxx -MMD -MF $out.d $cflags -c $in -o $out $post_cflags, where $cflags
    # itself ends with -c
    monkeypatch.chdir(tmp_path)
    command = f"c++ -MMD -MF o.d -O3 -I{tmp_path} -c -c {tmp_path}/csrc/ops.cpp -o /b/ops.o -DX"
    assert _build_cache._compiled_file(command) == "csrc/ops.cpp"
    assert _build_cache._compiled_file(command.replace(str(tmp_path), "/else")) == (
        "/else/csrc/ops.cpp"
    )


def test_a_file_that_fails_says_so_and_nothing_is_stored(tmp_path):
    project = _project(tmp_path / "tiny")
    (project / "src" / "b.cpp").write_text("int b_value() { return oops; }\n")
    env = {**os.environ, "GRID_BUILD_CACHE": str(tmp_path / "cache")}
    command = [sys.executable, "setup.py", "-q", "build_ext", "--inplace"]
    built = subprocess.run(command, cwd=project, env=env, capture_output=True, text=True)
    assert built.returncode != 0
    assert "grid: [1/2] failed: src/b.cpp" in built.stderr or (
        "grid: [2/2] failed: src/b.cpp" in built.stderr
    ), built.stderr[-3000:]
    assert "error" in built.stderr and "oops" in built.stderr  # the compiler's own message
    assert list((tmp_path / "cache" / "lib").iterdir()) == []
