"""The scene set of bench/training/bench_scenes.py and its pools: each scene's mesh, look,
size and half (`tune`: config values are chosen on these; `held_out`: verdicts only), and
the `--set` options that put one in a nerf config's `data.*`."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: bench, grid, train

from bench.compare.dvgo.bench_dvgo import BenchError  # noqa: E402


class Scene(NamedTuple):
    """One scene of the set: `name`; `mesh` (a file of --meshes; None: the realistic
    scene); `look` (train.nerf.scenes.scan's LOOKS, or "realistic"); `size` (pixels);
    `split`: "tune" (every config value was chosen on these) or "held_out" (verdicts only);
    `up`: the mesh's up axis."""

    name: str
    mesh: str | None
    look: str
    size: int
    split: str
    up: str = "+y"


#: The tuning half: the six scenes every config so far was tuned on. The held-out half:
#: meshes no config has seen (thin parts, fine carving), the looks mixed otherwise (two in
#: chrome, glass on a thin trunk, glaze at 800x800, none filling the box).
SCENES = (
    Scene("realistic", None, "realistic", 400, "tune"),
    Scene("bunny_glossy", "bunny00.off", "glossy", 400, "tune"),
    Scene("cow_mirror", "cow.off", "mirror", 400, "tune"),
    Scene("bull_rough", "bull.off", "rough", 400, "tune"),
    Scene("camel_translucent", "camel.off", "translucent", 400, "tune"),
    Scene("armadillo_large", "armadillo.off", "large", 800, "tune"),
    Scene("dragon_mirror", "ChineseDragon-10kv.off", "mirror", 400, "held_out"),
    Scene("elephant_translucent", "elephant.off", "translucent", 400, "held_out"),
    Scene("diplodocus_rough", "diplodocus.off", "rough", 400, "held_out"),
    Scene("dino_mirror", "dino.off", "mirror", 400, "held_out"),
    Scene("triceratops_glossy", "triceratops.off", "glossy", 800, "held_out"),
)
NAMES = tuple(s[0] for s in SCENES)
SPLITS = ("tune", "held_out")


def pick(names: str | None, option: str = "--scenes", split: str = "all") -> list[Scene]:
    """The SCENES rows named in "a,b,c" (all when None) that are in `split` ("tune",
    "held_out" or "all"); BenchError naming `option` on an unknown name, naming --split on
    an unknown split or when a named scene is not in it."""
    if split not in (*SPLITS, "all"):
        raise BenchError(f"--split: expected tune, held_out or all, got {split!r}")
    if not names:
        return [s for s in SCENES if split in ("all", s.split)]
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in NAMES]
    if unknown:
        raise BenchError(f"{option}: unknown {', '.join(unknown)}; expected {', '.join(NAMES)}")
    rows = [s for s in SCENES if s[0] in wanted]
    outside = [s.name for s in rows if split not in ("all", s.split)]
    if outside:
        raise BenchError(f"--split {split}: {', '.join(outside)} not in it")
    return rows


def split_of(name: str) -> str | None:
    """The split of the scene `name` (None: not one of SCENES)."""
    return next((s.split for s in SCENES if s.name == name), None)


def find_mesh(meshes: str | None, file: str) -> Path:
    """The mesh `file` in the folder --meshes (or its data/meshes); BenchError if absent."""
    if not meshes:
        raise BenchError(
            f"--meshes not given: a folder holding {file} (Debian's libcgal-demo: "
            "/usr/share/doc/libcgal-dev/data.tar.gz, unpacked)"
        )
    for path in (Path(meshes) / file, Path(meshes) / "data" / "meshes" / file):
        if path.is_file():
            return path.resolve()
    raise BenchError(f"--meshes {meshes}: no {file} there (nor in its data/meshes)")


def scene_overrides(
    row: tuple, meshes: str | None, data: Path, size: int | None = None
) -> list[str]:
    """The --set options that put scene `row` in the config's `data.*` (`size`: instead
    of the row's, a quick check)."""
    name, mesh, look, size = (*row[:3], size or row[3])
    up = getattr(row, "up", "+y")
    sets = [f"data.path={json.dumps(str(data / f'{name}_{size}'))}", f"data.scene_size={size}"]
    sets += ["data.generate=true"]
    if mesh is None:
        return sets + [f"data.scene={look}"]
    path = find_mesh(meshes, mesh)
    return sets + [
        "data.scene=scan",
        f"data.scene_mesh={json.dumps(str(path))}",
        f"data.scene_look={look}",
        f"data.scene_up={up}",
    ]
