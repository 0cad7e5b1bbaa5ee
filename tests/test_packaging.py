"""The distribution `densegrid`: one version, the packages the wheel holds, the extras, the
shipped configs, and (marked `packaging`) installs for real: an extra installed after the first
install reuses the build (seconds), and an sdist and wheels built from it, the wheel installed
into a new environment and `grid-train` run from outside the checkout (seconds when the build
cache of grid/_build_cache.py holds grid._C, as after the README's install; minutes when not)."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import site
import subprocess
import sys
import tarfile
import time
import tomllib
import urllib.parse
import zipfile
from pathlib import Path

import pytest
import torch

import grid
from grid import _build_cache
from train.__main__ import main
from train.errors import InputFileError
from train.shipped_configs import resolve, shipped_names

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
DIST = PYPROJECT["project"]["name"]
CONFIGS = sorted(p.name for p in (ROOT / "configs").glob("*.toml"))


# ---- metadata ------------------------------------------------------------------------------


def test_the_version_is_written_in_one_place():
    assert "version" in PYPROJECT["project"]["dynamic"]
    assert "version" not in PYPROJECT["project"]
    dynamic = PYPROJECT["tool"]["setuptools"]["dynamic"]["version"]
    assert dynamic == {"attr": "grid._version.__version__"}
    from grid import _version

    assert grid.__version__ == _version.__version__
    assert re.fullmatch(r"\d+\.\d+\.\d+", grid.__version__)
    assert not re.search(r"\bversion\s*=", (ROOT / "setup.py").read_text())


def test_installed_metadata_has_the_same_version():
    try:
        installed = importlib.metadata.version(DIST)
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"{DIST} is not installed (pip install --no-build-isolation -e .)")
    assert installed == grid.__version__, "reinstall: the installed metadata is out of date"


def test_a_release_tag_names_the_version():
    try:
        tag = subprocess.run(
            ["git", "describe", "--tags", "--exact-match"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("HEAD carries no tag (or git is missing)")
    assert tag == f"v{grid.__version__}"


def test_every_package_is_in_the_distribution():
    """grid, and train/ as grid_train: a new experiment package must be listed too."""
    setuptools = PYPROJECT["tool"]["setuptools"]
    assert setuptools["package-dir"] == {"grid_train": "train", "grid_train.configs": "configs"}
    expected = {"grid_train.configs"}
    for top, name in (("grid", "grid"), ("train", "grid_train")):
        for init in (ROOT / top).rglob("__init__.py"):
            parts = init.parent.relative_to(ROOT / top).parts
            expected.add(".".join((name, *parts)))
    assert set(setuptools["packages"]) == expected
    assert PYPROJECT["project"]["scripts"] == {"grid-train": "grid_train.__main__:main"}


def test_torch_requirement_admits_the_supported_versions():
    (torch_req,) = [r for r in PYPROJECT["project"]["dependencies"] if r.startswith("torch")]
    assert torch_req == "torch>=2.11"  # the GPU machine runs 2.11, CI 2.13; no upper pin


def test_the_all_extra_is_every_other_extra_and_test_has_them_all():
    extras = PYPROJECT["project"]["optional-dependencies"]
    users = {name: set(reqs) for name, reqs in extras.items() if name not in ("all", "test")}
    assert set(extras["all"]) == set().union(*users.values())
    assert len(extras["all"]) == len(set(extras["all"]))
    assert set(extras["test"]) >= set(extras["all"])


# ---- shipped configs -----------------------------------------------------------------------


def test_a_shipped_config_is_found_by_name_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert shipped_names() == CONFIGS
    assert resolve(Path("default.toml")) == ROOT / "configs" / "default.toml"
    assert resolve(Path("sdf_torus")) == ROOT / "configs" / "sdf_torus.toml"
    (tmp_path / "default.toml").write_text("seed = 1\n")
    assert resolve(Path("default.toml")) == Path("default.toml")  # a file here comes first


def test_an_unknown_config_lists_the_shipped_ones(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for given in ("nope.toml", "configs/default.toml"):  # no folder part: a name
        with pytest.raises(InputFileError, match="no such file; a shipped config"):
            resolve(Path(given))
    assert main(["--config", "nope.toml"]) == 2
    err = capsys.readouterr().err
    assert "grid-train: file error: --config: nope.toml: no such file" in err
    assert ", ".join(CONFIGS) in err


# ---- installs for real --------------------------------------------------------------------


def _editable_checkout() -> Path | None:
    """The checkout this environment's densegrid is an editable install of, if it is one
    (looked for in every place of the path: a checkout's own densegrid.egg-info, left by an
    in-tree build, comes first and has no direct_url.json)."""
    for dist in importlib.metadata.distributions(name=DIST):
        info = json.loads(dist.read_text("direct_url.json") or "{}")
        if info.get("dir_info", {}).get("editable"):
            return Path(urllib.parse.unquote(urllib.parse.urlparse(info["url"]).path)).resolve()
    return None


@pytest.mark.packaging
def test_an_extra_installed_after_the_first_install_reuses_the_build():
    """The README's install, then `pip install -e '.[EXTRA]'` in the same environment: it copies
    grid._C from the build cache, compiles nothing, and takes seconds (at most 30 on 2 cores),
    where it compiled for minutes before."""
    pytest.importorskip("pip")
    if _editable_checkout() != ROOT:
        pytest.skip(f"{DIST} here is no editable install of {ROOT} (the README's install)")
    if _build_cache.cache_root() is None:
        pytest.skip("GRID_BUILD_CACHE=0 turns the build cache off")
    pip = [sys.executable, "-m", "pip", "install", "-v", "--no-build-isolation", "-e"]
    # the first install: a cache hit where the README's install ran in this environment (CI),
    # else the one compile of this machine
    _run([*pip, str(ROOT)], cwd=ROOT)
    start = time.monotonic()
    again = _run([*pip, f"{ROOT}[train]"], cwd=ROOT, log=True)
    seconds = time.monotonic() - start
    assert "grid: grid._C reused from the build cache" in again, again[-3000:]
    assert "] compiled " not in again and "compiling" not in again, again[-3000:]
    assert seconds <= 30, f"installing an extra took {seconds:.1f} s"


# ---- sdist and wheel, built and installed --------------------------------------------------

IGNORED = (".git", ".venv", "build", "dist", "site", "*.egg-info", "__pycache__", "*.so")
#: a run's folders at the top of the checkout only: train/nerf/data/ is a package
TOP_IGNORED = {"runs", "data", ".anchors"}


def _ignore(folder: str, names: list[str]) -> set[str]:
    """What copying the checkout leaves out (shutil.copytree's `ignore`)."""
    left_out = set(shutil.ignore_patterns(*IGNORED)(folder, names))
    if Path(folder) == ROOT:
        left_out |= TOP_IGNORED & set(names)
    return left_out


def _run(command: list[str], cwd: Path, env: dict | None = None, log: bool = False) -> str:
    """stdout; with `log`, stderr after it (where `pip -v` writes a build's lines)."""
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, f"{command}:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result.stdout + result.stderr if log else result.stdout


def _environment_with_this_torch(path: Path) -> Path:
    """A new venv whose own site-packages is empty; torch and the other dependencies come
    from this interpreter's site-packages (added after it by a .pth file), so nothing is
    downloaded or installed twice, and this checkout is not on its path."""
    _run([sys.executable, "-m", "venv", "--without-pip", str(path)], cwd=path.parent)
    python = path / "bin" / "python"
    own = _run([str(python), "-c", "import site; print(site.getsitepackages()[0])"], path)
    outer = dict.fromkeys([*site.getsitepackages(), str(Path(torch.__file__).parent.parent)])
    (Path(own.strip()) / "_outer_site.pth").write_text("\n".join(outer) + "\n")
    return python


@pytest.mark.packaging
def test_wheel_from_the_sdist_installs_and_grid_train_runs_elsewhere(tmp_path):
    pytest.importorskip("pip")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["GRID_NO_CUDA"] = "1"  # the CPU kernels: what CI can build (bench/gpu.sh wheel: CUDA)
    src, dist = tmp_path / "src", tmp_path / "dist"
    shutil.copytree(ROOT, src, ignore=_ignore)

    # the sdist (PEP 517, as `python -m build --sdist` calls it), then a wheel built from it
    hook = "import sys; from setuptools import build_meta; build_meta.build_sdist(sys.argv[1])"
    _run([sys.executable, "-c", hook, str(dist)], cwd=src, env=env)
    (sdist,) = dist.glob("*.tar.gz")
    assert sdist.name == f"{DIST}-{grid.__version__}.tar.gz"
    with tarfile.open(sdist) as archive:
        held = {n.split("/", 1)[1] for n in archive.getnames() if "/" in n}
    needed = {"LICENSE", "README.md", "pyproject.toml", "setup.py", "grid/_backend.py"}
    needed |= {p.relative_to(ROOT).as_posix() for p in (ROOT / "csrc").rglob("*") if p.is_file()}
    needed |= {f"configs/{c}" for c in CONFIGS}
    needed |= {"mkdocs.yml", "docs/index.md", "docs/images/default_slices.png"}
    assert not needed - held, f"missing from the sdist: {sorted(needed - held)}"
    pip = [sys.executable, "-m", "pip"]
    wheel_args = ["wheel", "--no-build-isolation", "--no-deps", "--no-index", "-w", str(dist)]
    _run([*pip, *wheel_args, str(sdist)], cwd=tmp_path, env=env)
    (wheel,) = dist.glob("*.whl")
    # a second wheel of the same sources (unpacked elsewhere): grid._C from the build cache
    again = tmp_path / "again"
    if _build_cache.cache_root() is not None:
        command = [*pip, *wheel_args[:-1], str(again), "-v", str(sdist)]
        log = _run(command, cwd=tmp_path, env=env, log=True)
        assert "grid: grid._C reused from the build cache" in log and "] compiled " not in log
        with zipfile.ZipFile(wheel) as first, zipfile.ZipFile(next(again.glob("*.whl"))) as second:
            (library,) = [n for n in first.namelist() if n.startswith("grid/_C")]
            assert first.read(library) == second.read(library)

    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        info = f"{DIST}-{grid.__version__}.dist-info"
        metadata = archive.read(f"{info}/METADATA").decode()
        entry_points = archive.read(f"{info}/entry_points.txt").decode()
    assert {n.split("/")[0] for n in names} == {"grid", "grid_train", info}
    assert len([n for n in names if re.fullmatch(r"grid/_C\..*\.so", n)]) == 1
    train_files = sorted(
        "grid_train/" + p.relative_to(ROOT / "train").as_posix()
        for p in (ROOT / "train").rglob("*.py")
    )
    assert sorted(n for n in names if n.startswith("grid_train/") and n.endswith(".py")) == (
        train_files
    )
    assert sorted(n for n in names if n.startswith("grid_train/configs/")) == [
        f"grid_train/configs/{c}" for c in CONFIGS
    ]
    assert f"Name: {DIST}\n" in metadata and f"Version: {grid.__version__}\n" in metadata
    assert "Requires-Dist: torch>=2.11\n" in metadata
    assert "grid-train = grid_train.__main__:main" in entry_points

    python = _environment_with_this_torch(tmp_path / "venv")
    install = ["install", "--no-deps", "--no-index", "--ignore-installed", str(wheel)]
    _run([str(python), "-m", "pip", *install], cwd=tmp_path, env=env)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    probe = (
        "import grid, grid_train, importlib.metadata as m, grid._backend as b; "
        f"print(grid.__file__, grid_train.__file__, b.source, m.version('{DIST}'))"
    )
    where = _run([str(python), "-c", probe], cwd=elsewhere, env=env).split()
    venv = str(tmp_path / "venv")
    assert where[0].startswith(venv) and where[1].startswith(venv), where
    assert where[2:] == ["installed", grid.__version__]

    tiny = ["device=cpu", "grid.resolution=8", "train.steps=2", "train.batch_size=512"]
    tiny += ["eval.every=1", "eval.points=512", "output.progress=false"]
    command = [str(tmp_path / "venv" / "bin" / "grid-train"), "--config", "default.toml"]
    command += ["--out", "runs/x", "--set", "output.pictures=false"]
    _run([*command, *(a for s in tiny for a in ("--set", s))], cwd=elsewhere, env=env)
    summary = json.loads((elsewhere / "runs" / "x" / "summary.json").read_text())
    assert summary["grid_ops"] == "installed" and summary["steps"] == 2
