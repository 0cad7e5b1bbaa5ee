"""Posed images in: the scene readers, cameras and the training rays.

Modules: `blender` (the Blender / NeRF-synthetic layout: `Views`, `load_blender`,
`camera_rays`), `ngp` (instant-ngp / nerfstudio `transforms.json`, either layout through
`load_views`), `cameras` (per-view intrinsics, lens distortion, pixel directions), `rays`
(`TrainingRays`: every training pixel's ray and colour on the device), and the command
`python -m train.nerf.data.to_ngp` (a Blender scene rewritten as transforms.json; not
imported here, so that `-m` runs it as the entry point).

Imports torch, numpy, Pillow and `train.errors`; nothing else of `train.nerf`. Anything in
`train.nerf` may import it.
"""

from .blender import SPLITS, DatasetError, Views, camera_rays, load_blender
from .cameras import CAMERA_ANGLE_X, look_at_origin, pixel_directions
from .ngp import TRANSFORMS, layout, load_ngp, load_views
from .rays import TrainingRays, pixel_views

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
