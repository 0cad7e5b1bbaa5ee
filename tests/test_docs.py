"""The documentation site (docs/, mkdocs.yml): it builds with warnings as errors (a broken link,
anchor or API reference fails), every Python example on it runs, and README.md stays the short
front door that links into it."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

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


def on_this_machine(code: str) -> str:
    """Without a GPU the examples' CUDA tensors go to the CPU."""
    if torch.cuda.is_available():
        return code
    return code.replace(".cuda()", "").replace('device="cuda"', 'device="cpu"')


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
        compiled = compile(on_this_machine(code), f"{page.name} example {i + 1}", "exec")
        if code.lstrip().startswith(SKETCH):
            continue
        exec(compiled, namespace)


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
