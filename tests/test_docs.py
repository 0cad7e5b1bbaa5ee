"""The documentation site (docs/, mkdocs.yml): it builds with warnings as errors (a broken link,
anchor or API reference fails), every Python example on it runs as written (on the CPU, and on a
GPU where there is one), every public object of `grid` shows a runnable `Examples:` block in its
docstring, and README.md stays the short front door that links into it."""

from __future__ import annotations

import doctest
import importlib
import importlib.util
import inspect
import pkgutil
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import grid

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md"))
README = ROOT / "README.md"
FENCE = re.compile(r"^( *)```python\n(.*?)^\1```", re.S | re.M)
SKETCH = "# sketch:"  # an example that names things of the reader's: compiled, not run
README_LINES = 200


def examples(page: Path) -> list[str]:
    """The page's ```python blocks, in order, dedented (blocks inside list items too)."""
    return [textwrap.dedent(code) for _, code in FENCE.findall(page.read_text())]


def test_every_page_is_in_the_navigation():
    nav = (ROOT / "mkdocs.yml").read_text()
    assert PAGES and all(f": {page.name}" in nav for page in PAGES), PAGES


@pytest.mark.parametrize("page", [p for p in [README, *PAGES] if examples(p)], ids=lambda p: p.stem)
def test_examples_run(page, tmp_path, monkeypatch):
    """A page's examples (and README's) run in order in one namespace (a later one uses an
    earlier one's model), from an empty directory."""
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": f"docs_{page.stem}"}
    for i, code in enumerate(examples(page)):
        compiled = compile(code, f"{page.name} example {i + 1}", "exec")  # verbatim
        if code.lstrip().startswith(SKETCH):
            continue
        exec(compiled, namespace)


@pytest.mark.parametrize("page", [p for p in [README, *PAGES] if examples(p)], ids=lambda p: p.stem)
def test_examples_pick_the_device_as_users_do(page):
    """An example that hard-codes CUDA passes on a GPU machine and crashes on a CPU-only torch:
    the examples that run choose the device with `torch.cuda.is_available()`."""
    for i, code in enumerate(examples(page)):
        if not code.lstrip().startswith(SKETCH):
            rest = re.sub(r"[\"']cuda[\"'] if torch\.cuda\.is_available\(\)", "", code)
            assert not re.search(r"\.cuda\(|[\"']cuda", rest), f"{page.name} example {i + 1}"


def test_the_examples_are_found():
    counts = {p.name: len(examples(p)) for p in PAGES}
    assert counts["voxel-grid.md"] >= 5 and counts["operators.md"] >= 1, counts


@pytest.mark.skipif(
    not all(importlib.util.find_spec(m) for m in ("mkdocs", "material", "mkdocstrings")),
    reason="needs the docs extra: pip install -e '.[docs]' (mkdocs-material, mkdocstrings)",
)
def test_site_builds_with_warnings_as_errors(tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    assert (tmp_path / "api" / "index.html").exists()
    api = (tmp_path / "api" / "index.html").read_text()
    assert "march_rays_static" in api and "points: [..., 3]" in api


def test_readme_is_the_short_front_door():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= README_LINES
    links = re.findall(r"\]\((docs/[^)#]+)", readme)
    assert links, "README.md links into docs/"
    for link in links:
        assert (ROOT / link).exists(), link


# ---- the examples in the docstrings of the grid package ---------------------------------

PUBLIC = [name for name in grid.__all__ if name != "__version__"]
MODULES = ["grid"] + [f"grid.{m.name}" for m in pkgutil.iter_modules(grid.__path__)]


def has_examples(obj: object) -> bool:
    """A Google-style `Examples:` section (as mkdocstrings renders it) with `>>>` lines."""
    return re.search(r"^Examples:\n +>>> ", inspect.getdoc(obj) or "", re.M) is not None


def test_every_public_object_has_examples():
    assert len(PUBLIC) >= 25, PUBLIC
    missing = [name for name in PUBLIC if not has_examples(getattr(grid, name))]
    assert not missing, f"no Examples: block with >>> lines in the docstring of {missing}"


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    """Every docstring example of the module runs and prints what it shows (doctest), each
    from an empty namespace: an example imports what it uses, as a reader's session would."""
    module = importlib.import_module(name)
    runner = doctest.DocTestRunner()
    report: list[str] = []
    for test in doctest.DocTestFinder().find(module, name, globs={}):
        runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)


def test_the_public_examples_are_run():
    """The doctests above reach every public object's examples (none hidden from the finder)."""
    found = {
        test.name
        for name in MODULES
        for test in doctest.DocTestFinder().find(importlib.import_module(name), name)
        if test.examples
    }
    for public in PUBLIC:
        obj = getattr(grid, public)
        qualified = (
            obj.__name__ if inspect.ismodule(obj) else f"{obj.__module__}.{obj.__qualname__}"
        )
        assert qualified in found, public
