"""The project's shape: one package per experiment, no import circles (annotation-only imports
under TYPE_CHECKING count too), no private names of the library used outside it, each package
saying what it offers, short files."""

from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("grid", "train")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imported(path: Path) -> set[str]:
    """Every module and `module.name` that `path` imports: anywhere (lazily too), under
    TYPE_CHECKING too (an annotation-only tie is a tie), relative imports made absolute."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)
    return found


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The project modules `path` imports (see `_imported`)."""
    name = _module_name(path)
    found = _imported(path)
    # A module's own packages are imported before it in any case: no edge to them.
    ancestors = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
    return {m for m in found if m in modules and m != name and m not in ancestors}


def _graph() -> dict[str, set[str]]:
    files = [p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")]
    modules = {_module_name(p) for p in files}
    return {_module_name(p): _imports(p, modules) for p in files}


def _find_circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of `graph` (module -> the modules it imports), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def walk(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state:
                found = walk(nxt, path + [nxt])
                if found:
                    return found
        state[node] = 2
        return None

    for module in sorted(graph):
        if module not in state:
            found = walk(module, [module])
            if found:
                return found
    return None


def test_the_circle_finder_finds_circles():
    assert _find_circle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _find_circle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_annotation_only_imports_are_ties(tmp_path, monkeypatch):
    """An import under TYPE_CHECKING is an edge of the graph (a circle through it is one)."""
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    (tmp_path / "pkg").mkdir()
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import B\n"
    (tmp_path / "pkg" / "a.py").write_text(source)
    assert _imports(tmp_path / "pkg" / "a.py", {"pkg.a", "pkg.b"}) == {"pkg.b"}


def test_no_import_circles():
    circle = _find_circle(_graph())
    assert circle is None, "import circle: " + " -> ".join(circle or [])


def test_shared_training_code_names_no_experiment():
    """train/*.py (not the experiment packages) import none of the experiment packages;
    they reach them through the registry (train/experiments.py)."""
    from train.experiments import REGISTRY

    graph = _graph()
    experiments = set(REGISTRY.values())  # train/viewer is shared code, not an experiment
    assert experiments >= {"field", "sdf", "nerf"}
    for module, imports in graph.items():
        parts = module.split(".")
        if parts[0] != "train" or (len(parts) > 1 and parts[1] in experiments):
            continue
        named = sorted(m for m in imports if m.split(".")[1:2] and m.split(".")[1] in experiments)
        assert not named, f"{module} imports experiment code: {named}"


def test_one_package_per_experiment():
    flat = sorted(p.name for p in (ROOT / "train").glob("*.py"))
    assert not [n for n in flat if n.startswith(("nerf", "sdf", "field"))], flat


def _private_grid_uses(path: Path) -> list[str]:
    """The library's private names `path` uses: imports of `grid._x` or of `_x` from a grid
    module, and attributes `grid._x`."""
    uses = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            uses += [a.name for a in node.names if a.name.startswith("grid._")]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            module = node.module
            if module == "grid" or module.startswith("grid."):
                if "._" in "." + module.removeprefix("grid"):
                    uses.append(module)
                uses += [f"{module}.{a.name}" for a in node.names if a.name.startswith("_")]
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            if isinstance(node.value, ast.Name) and node.value.id == "grid":
                uses.append(f"grid.{node.attr}")
    return uses


#: Private names of grid still read in train/, each to be made public or kept in train/.
PRIVATE_GRID_KNOWN: dict[str, list[str]] = {}


def test_train_uses_no_private_names_of_the_library():
    found = {}
    for path in sorted((ROOT / "train").rglob("*.py")):
        uses = _private_grid_uses(path)
        if uses:
            found[str(path.relative_to(ROOT))] = uses
    assert found == PRIVATE_GRID_KNOWN


def test_the_private_name_finder_finds_them(tmp_path):
    path = tmp_path / "m.py"
    path.write_text(
        "import grid._boxes\nfrom grid._boxes import lattice\n"
        "from grid.voxel_grid import _replace_data\nx = grid._backend\n"
        "from grid import lattice\n"
    )
    assert _private_grid_uses(path) == [
        "grid._boxes",
        "grid._boxes",
        "grid.voxel_grid._replace_data",
        "grid._backend",
    ]


def test_every_package_says_what_it_offers():
    """Each package of train/ has a docstring (its design note: what lives there, what may
    import it) and an `__all__` whose names it has."""
    for init in sorted((ROOT / "train").rglob("__init__.py")):
        name = _module_name(init)
        tree = ast.parse(init.read_text())
        assert ast.get_docstring(tree), f"{name}: no docstring"
        module = importlib.import_module(name)
        if name in ("train.field", "train.sdf", "train.viewer"):
            continue  # no __all__ yet
        assert module.__all__, f"{name}: no __all__"
        missing = [n for n in module.__all__ if not hasattr(module, n)]
        assert not missing, f"{name}.__all__ names what it lacks: {missing}"


def test_nerf_renderers_take_functions_not_the_model():
    """The renderers' arguments are rays, functions and plain values: none is a model."""
    import inspect

    from train.nerf.model import render_contracted, render_fused, render_torch

    for render in (render_torch, render_fused, render_contracted):
        parameters = inspect.signature(render).parameters
        assert "model" not in parameters and "sigma_fn" in parameters, render.__name__
        assert "rgb_fn" in parameters, render.__name__


#: The top level the design card fixes, and the small config files beside it.
TOP_LEVEL = {
    *("setup.py", "grid", "csrc", "train", "configs", "tests", "README.md"),
    *("bench", "docs", ".ci"),
    *(".clang-format", ".gitignore", "LICENSE", "MANIFEST.in", "mkdocs.yml"),
    *("pyproject.toml", "ruff.toml"),
}


def test_the_top_level_holds_only_the_design_cards_entries():
    """What git tracks at the top (a stray wheel or log committed by accident fails here)."""
    import shutil
    import subprocess

    import pytest

    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    out = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    top = {line.split("/")[0] for line in out.splitlines() if line}
    assert top <= TOP_LEVEL, f"unexpected at the top level: {sorted(top - TOP_LEVEL)}"
