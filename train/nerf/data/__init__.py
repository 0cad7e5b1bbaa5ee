"""Posed images in: the scene readers, cameras and the training rays.

Modules: `blender` (the Blender / NeRF-synthetic layout: `Views`, `load_blender`,
`camera_rays`), `ngp` (instant-ngp / nerfstudio `transforms.json`, either layout through
`load_views`), `cameras` (per-view intrinsics, lens distortion, pixel directions), `rays`
(`TrainingRays`: every training pixel's ray and colour on the device), and the command
`python -m train.nerf.data.to_ngp` (a Blender scene rewritten as transforms.json; not
imported here, so that `-m` runs it as the entry point).

Imports torch, numpy, Pillow, `train.errors` and `train.lazy`; nothing of `train.nerf`. Anything in
`train.nerf` may import it. Its names are imported from their modules on first use.
"""

from typing import TYPE_CHECKING

from ...lazy import lazy_getattr

if TYPE_CHECKING:
    from .blender import SPLITS, DatasetError, Views, camera_rays, load_blender
    from .cameras import CAMERA_ANGLE_X, look_at_origin, pixel_directions
    from .ngp import TRANSFORMS, layout, load_ngp, load_views
    from .rays import TrainingRays, pixel_views

#: name -> the module of this package that defines it: imported on first use, so that the
#: commands of the packages that import this one (`python -m train.nerf.data.to_ngp`,
#: `train.nerf.capture.bounds`) answer --help without importing torch
__getattr__ = lazy_getattr(
    __name__,
    __name__,
    {
        **dict.fromkeys(
            ("SPLITS", "DatasetError", "Views", "camera_rays", "load_blender"), ".blender"
        ),
        **dict.fromkeys(("CAMERA_ANGLE_X", "look_at_origin", "pixel_directions"), ".cameras"),
        **dict.fromkeys(("TRANSFORMS", "layout", "load_ngp", "load_views"), ".ngp"),
        **dict.fromkeys(("TrainingRays", "pixel_views"), ".rays"),
    },
)


__all__ = [
    "SPLITS",
    "DatasetError",
    "Views",
    "load_blender",
    "camera_rays",
    "CAMERA_ANGLE_X",
    "look_at_origin",
    "pixel_directions",
    "TRANSFORMS",
    "layout",
    "load_ngp",
    "load_views",
    "TrainingRays",
    "pixel_views",
]
