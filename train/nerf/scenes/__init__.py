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

from typing import TYPE_CHECKING

from ...lazy import lazy_getattr

if TYPE_CHECKING:
    from .procedural import SCENE_BOUNDS
    from .scan import LOOKS, MeshError, ScanScene
    from .scan_mesh import MESH_SUFFIXES, UP_AXES, read_mesh

#: name -> the module of this package that defines it: imported on first use, so that
#: `python -m train.nerf.scenes.generate --help` answers without importing torch
__getattr__ = lazy_getattr(
    __name__,
    __name__,
    {
        "SCENE_BOUNDS": ".procedural",
        **dict.fromkeys(("LOOKS", "MeshError", "ScanScene"), ".scan"),
        **dict.fromkeys(("MESH_SUFFIXES", "UP_AXES", "read_mesh"), ".scan_mesh"),
    },
)


__all__ = [
    "SCENE_BOUNDS",
    "LOOKS",
    "MeshError",
    "ScanScene",
    "MESH_SUFFIXES",
    "UP_AXES",
    "read_mesh",
]
