"""Your own capture in: camera poses from photos, their orientation, the box to train in.

Modules: `orient` (orienting, centring and scaling poses; LLFF's poses; pose errors),
`colmap` (structure from motion through pycolmap, the optional `capture` extra), and two
commands: `python -m train.nerf.capture.poses` (a folder of photos -> a transforms.json
scene) and `python -m train.nerf.capture.bounds` (a `grid.bounds` from where the cameras
look). The commands and `colmap` are not imported here (`-m` runs a command as the entry
point; pycolmap is optional).

Imports `train.nerf.data` (the readers) and `train.errors`; never the model, the scenes or
the experiment. Nothing in `train.nerf` imports it: it writes scenes that `data` reads.
"""

from .orient import CENTRES, Orientation, View, llff_poses, look_at, orient, pose_errors

__all__ = ["CENTRES", "Orientation", "View", "look_at", "llff_poses", "orient", "pose_errors"]
