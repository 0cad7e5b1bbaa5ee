"""One compile per machine: the build of a native extension, cached between installs.

setup.py builds `grid._C` with `CachedBuildExtension`: torch's `BuildExtension` plus a cache
in `GRID_BUILD_CACHE` (default `~/.cache/densegrid`, or `$XDG_CACHE_HOME/densegrid`; `0`
turns it off). It holds two things:

- `lib/KEY/`: finished libraries. KEY hashes everything that decides the library's bytes:
  the contents of every source and header (`Extension.sources` and `.depends`), the flags,
  the torch build, the Python ABI, the compiler and the environment variables it reads. An
  install whose KEY is there copies the library and compiles nothing: an extra installed
  later, a reinstall, a wheel of the same sources from another folder or another venv with
  the same torch.
- `build/DIR/`: ninja's build folder of one checkout, venv and configuration, kept between
  installs, so that after an edit ninja recompiles only the files the edit reaches (through
  the header dependencies the compiler records).

It also shows what it compiles, one line per file (`grid: [3/12] compiled csrc/ops.cpp`),
on stderr: pip passes a build's output on with `pip install -v`.

setup.py loads this file without importing the package (torch must be importable).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from pathlib import Path

import torch
from torch.utils import cpp_extension

#: Bump when what goes into a key changes, so that old entries are never read as new ones.
SCHEME = 1
#: Entries kept, the most recently used first (a CPU build: a 30 MB library, an 80 MB folder).
KEEP_LIBRARIES = 4
KEEP_BUILD_FOLDERS = 2
#: Environment variables that change what the compiler or the linker makes.
COMPILER_ENV = (
    "CC",
    "CXX",
    "CFLAGS",
    "CXXFLAGS",
    "CPPFLAGS",
    "LDFLAGS",
    "LDSHARED",
    "TORCH_CUDA_ARCH_LIST",
    "NVCC_PREPEND_FLAGS",
    "NVCC_APPEND_FLAGS",
    "CUDA_HOME",
    "CUDA_PATH",
)
_OFF = ("0", "off", "false", "no")


def say(message: str) -> None:
    print(f"grid: {message}", file=sys.stderr, flush=True)


def cache_root() -> Path | None:
    """The cache folder: GRID_BUILD_CACHE, else ~/.cache/densegrid; None when turned off."""
    value = os.environ.get("GRID_BUILD_CACHE", "").strip()
    if value.lower() in _OFF:
        return None
    if value:
        return Path(value).expanduser().absolute()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "densegrid"


def _portable(path: str) -> str:
    """A path inside torch's folder, the folder being built or the environment, relative to
    it: the same for every venv (torch's include folders), checkout and unpacked sdist."""
    full = Path(path).absolute()
    bases = {"<torch>": Path(torch.__file__).parent, ".": Path.cwd(), "<prefix>": Path(sys.prefix)}
    for name, base in bases.items():  # torch first: the README's venv is inside the checkout
        if full.is_relative_to(base):
            relative = full.relative_to(base).as_posix()
            return relative if name == "." else f"{name}/{relative}"
    return path


def _version_line(command: list[str]) -> str:
    try:
        result = subprocess.run([*command, "--version"], capture_output=True, text=True)
    except OSError as error:
        return f"{command}: {error}"
    return result.stdout.strip() or result.stderr.strip()


def _toolchain(ext) -> dict:
    """What, besides the sources, decides the library: flags, torch, Python, compilers."""
    with_cuda = any(s.endswith(".cu") for s in ext.sources)
    return {
        "scheme": SCHEME,
        "name": ext.name,
        "extra_compile_args": ext.extra_compile_args,
        "extra_link_args": ext.extra_link_args,
        "define_macros": ext.define_macros,
        "undef_macros": ext.undef_macros,
        "include_dirs": [_portable(d) for d in ext.include_dirs],
        "library_dirs": [_portable(d) for d in ext.library_dirs],
        "libraries": ext.libraries,
        "language": ext.language,
        "torch": [
            torch.__version__,
            torch.version.git_version,
            torch.version.cuda,
            torch.version.hip,
            torch._C._GLIBCXX_USE_CXX11_ABI,
        ],
        "python": [platform.python_version(), sysconfig.get_config_var("EXT_SUFFIX")],
        "platform": sysconfig.get_platform(),
        "cxx": _version_line([cpp_extension.get_cxx_compiler()]),
        "nvcc": _version_line([cpp_extension._join_cuda_home("bin", "nvcc")]) if with_cuda else "",
        "env": {k: os.environ[k] for k in COMPILER_ENV if k in os.environ},
    }


def _files(ext) -> dict[str, str]:
    """Every source and header: its name in a key (relative to the folder built) -> its path."""
    return dict(sorted({_portable(f): f for f in [*ext.sources, *ext.depends]}.items()))


def _contents(ext) -> dict[str, str]:
    """sha256 of every source and header, by its name in a key."""
    return {
        name: hashlib.sha256(Path(f).read_bytes()).hexdigest() for name, f in _files(ext).items()
    }


def _digest(value: object) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:24]


def library_key(ext) -> tuple[str, dict]:
    """The key of the library `ext` builds into, and what it was made from (for about.json)."""
    about = {"toolchain": _toolchain(ext), "files": _contents(ext)}
    return _digest(about), about


def build_folder_key(ext) -> str:
    """ninja's folder: one per checkout, torch install (a venv) and toolchain; never shared
    between two of them, whose build commands differ and would rebuild everything in turn."""
    where = [str(Path.cwd()), str(Path(torch.__file__).parent)]
    return _digest([where, _toolchain(ext)])


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    """One build at a time per cache: a second install waits, then finds the first's library."""
    import fcntl

    with open(root / "lock", "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"waiting for another build that holds {root / 'lock'}")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _copy(source: Path, target: Path) -> None:
    """Copy to a new file (never over the one a running process may have mapped)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    shutil.copy2(source, partial)
    os.replace(partial, target)


def _prune(folder: Path, keep: int) -> None:
    entries = sorted(folder.iterdir(), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in entries[keep:]:
        shutil.rmtree(old, ignore_errors=True)


def _forget_edits_ninja_cannot_see(folder: Path, ext, contents: dict[str, str]) -> None:
    """ninja rebuilds what is older than its inputs. A file whose contents changed since the
    folder's last build but whose time stamp is older than that build (restored with its old
    time, unpacked from an archive) would be missed: start that folder afresh."""
    try:
        last = json.loads((folder / "sources.json").read_text())
    except (OSError, ValueError):
        return
    for name, path in _files(ext).items():
        changed = last["files"].get(name) != contents[name]
        if changed and os.stat(path).st_mtime_ns < last["started_ns"]:
            say(f"{name} changed but is older than the last build: rebuilding every file")
            shutil.rmtree(folder, ignore_errors=True)
            return


def _elapsed(start: float) -> str:
    seconds = round(time.monotonic() - start)
    return f"{seconds // 60} min {seconds % 60:02d} s" if seconds >= 60 else f"{seconds} s"


def _compiled_file(command: str) -> str:
    found = re.search(r" -c (\S+) -o ", command)  # torch's rule: ... -c $in -o $out ...
    return _portable(found.group(1)) if found else command[:80]


def _run_ninja_with_progress(build_directory: str, verbose: bool, error_prefix: str) -> None:
    """torch's _run_ninja_build (same jobs, same errors), one short line per file compiled
    instead of each full command line."""
    command = ["ninja", "-v"]
    if os.environ.get("MAX_JOBS"):
        command += ["-j", os.environ["MAX_JOBS"]]
    plan = subprocess.run([*command, "-n"], cwd=build_directory, capture_output=True, text=True)
    total = len(re.findall(r"^\[\d+/\d+\] ", plan.stdout, flags=re.MULTILINE))
    if plan.returncode == 0 and total == 0:
        return  # every object is up to date
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    jobs = os.environ.get("MAX_JOBS") or f"{(cores or 1) + 2} (ninja's default)"
    files = "1 file" if total == 1 else f"{total} files"
    say(f"compiling {files}, {jobs} at a time, in {build_directory}")
    start = time.monotonic()
    with subprocess.Popen(
        command,
        cwd=build_directory,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
    ) as ninja:
        assert ninja.stdout is not None
        ended = None  # ninja's status line comes as a file ends; FAILED follows if it failed
        for line in [*ninja.stdout, ""]:
            if ended:
                done, of, what = ended.groups()
                verb = "failed:" if line.startswith("FAILED: ") else "compiled"
                say(f"[{done}/{of}] {verb} {_compiled_file(what)} ({_elapsed(start)})")
            ended = re.match(r"\[(\d+)/(\d+)\] (.*)", line)
            if not ended:
                sys.stderr.write(line)
                sys.stderr.flush()
    if ninja.returncode != 0:
        raise RuntimeError(f"{error_prefix} (ninja exited with {ninja.returncode}; see above)")


class CachedBuildExtension(cpp_extension.BuildExtension):
    """torch's BuildExtension, reusing a library built before from the same inputs."""

    def build_extension(self, ext) -> None:
        target = Path(self.get_ext_fullpath(ext.name))
        root = cache_root()
        if root is not None:
            try:
                for folder in ("lib", "build"):
                    (root / folder).mkdir(parents=True, exist_ok=True)
                if not all(os.access(root / f, os.W_OK) for f in (".", "lib", "build")):
                    raise PermissionError("not writable")
            except OSError as error:
                say(f"build cache {root} cannot be written ({error}): building without it")
                root = None
        if root is None:
            self._compile(ext, target, cache=None)
            return
        key, about = library_key(ext)
        entry = root / "lib" / key
        with _locked(root):
            if (entry / target.name).exists():
                _copy(entry / target.name, target)
                os.utime(entry)  # recently used: pruned last
                say(
                    f"{ext.name} reused from the build cache {entry} (same sources, flags, "
                    f"compiler and torch {torch.__version__}): nothing to compile"
                )
                return
            folder = root / "build" / build_folder_key(ext)
            _forget_edits_ninja_cannot_see(folder, ext, about["files"])
            self.build_temp = str(folder)
            started = time.time_ns()
            self._compile(ext, target, cache=root)
            state = {"started_ns": started, "files": about["files"]}
            (folder / "sources.json").write_text(json.dumps(state, indent=1))
            os.utime(folder)  # recently used: pruned last
            _copy(target, entry / target.name)
            (entry / "about.json").write_text(json.dumps(about, indent=1, sort_keys=True))
            say(f"{ext.name} stored in the build cache {entry}")
            _prune(root / "lib", KEEP_LIBRARIES)
            _prune(root / "build", KEEP_BUILD_FOLDERS)

    def _compile(self, ext, target: Path, cache: Path | None) -> None:
        # Without ninja, distutils would keep a library left at the target by its time stamp
        # alone, even when torch changed since (with ninja, BuildExtension sets force).
        target.unlink(missing_ok=True)
        start = time.monotonic()
        later = f"later installs reuse it from {cache}" if cache else "GRID_BUILD_CACHE: off"
        say(f"building {ext.name} for torch {torch.__version__}: minutes, once ({later})")
        original = cpp_extension._run_ninja_build
        cpp_extension._run_ninja_build = _run_ninja_with_progress
        try:
            super().build_extension(ext)
        finally:
            cpp_extension._run_ninja_build = original
        say(f"built {ext.name} in {_elapsed(start)}")
