"""The project's scenes, rendered from their analytic or scanned definitions into the Blender
layout that `train.nerf.data` reads.

Modules: `generate` (the command `python -m train.nerf.scenes.generate` and `ensure_scene`,
which the experiment calls: every scene by name, `SCENES`), `procedural` (analytic solids),
`realistic` with `realistic_shapes` and `realistic_look` (fine detail, glass, mirrors),
`waves` (the noise the looks are made of), `textured` and `outdoor` (the unbounded world),
`forward` (that world seen by forward-facing cameras), `scan` with `scan_mesh` (a scanned
mesh in one of several looks). `generate` is not imported here, so that `-m` runs it as
the entry point.

Imports `train.nerf.data` (views, camera rays), `train.mesh` (scanned meshes), `grid`,
`train.errors`; never the model or the experiment. The experiment and `config` import it.
"""

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .procedural import SCENE_BOUNDS
    from .scan import LOOKS, MeshError, ScanScene
    from .scan_mesh import MESH_SUFFIXES, UP_AXES, read_mesh

#: name -> the module of this package that defines it: imported on first use, so that
#: `python -m train.nerf.scenes.generate --help` answers without importing torch
_WHERE = {
    "SCENE_BOUNDS": "procedural",
    **dict.fromkeys(("LOOKS", "MeshError", "ScanScene"), "scan"),
    **dict.fromkeys(("MESH_SUFFIXES", "UP_AXES", "read_mesh"), "scan_mesh"),
}


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "SCENE_BOUNDS",
    "LOOKS",
    "MeshError",
    "ScanScene",
    "MESH_SUFFIXES",
    "UP_AXES",
    "read_mesh",
]
