"""The forward-facing scene (`data.scene = "forward"`): LLFF-style cameras on a small patch
of a plane, all looking the same way, at a world with depth.

The world is the unbounded scene's (`train.nerf.scenes.outdoor`, rendered by its `render_rays`:
nothing is duplicated): `train.nerf.scenes.textured`'s painted plinth, sphere and box near the
cameras, the textured ground in the middle distance, buildings 10 to 70 units away, the sky
at infinity; Lambert shading with shadows and aerial haze. Seen from `PATCH_CENTRE` along
`FORWARD` (towards +y, turned `YAW` degrees towards -x and tilted `TILT` degrees down, the
sun behind the cameras' right), a 60 degree field of view holds the object (2.2 to 5 units
away), the ground running to the horizon, the buildings at (-6, 8.5) (12 units away, 2 high)
and (10, 60) (64 units, 12 high), and the sky.

Cameras (`camera_poses`): training views on a jittered grid of `ceil(sqrt(n))` columns over
the patch (`PATCH` wide and high, in the camera plane normal to `FORWARD`), each turned by
a random angle up to `TURN` degrees from `FORWARD`; val and test views at random points of
the patch's inner `INNER` (in between the training cameras), turned alike. The seed draws
everything. The baseline (the patch, 1.2 x 0.6 units) is a small fraction of the depth
(2.2 units to the object, infinity to the sky): a capture of photographs taken by stepping
sideways, as LLFF's. Images are opaque RGBA, each pixel 2x2 rays.

Variants (`data.scene_variant`, `ForwardScene`): variant 0 is the above, bit for bit; variant
k > 0 looks at `outdoor.world(k)` (other buildings, sun, ground and paint) with the whole rig
turned about the vertical axis through the object (`rig_turn`), so that the cameras face away
from that world's sun give or take 60 degrees, as they do here.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..data.cameras import look_at_origin
from . import outdoor
from .outdoor import CAMERA_ANGLE_X, STEP, SUPERSAMPLE, render_rays

__all__ = ["CAMERA_ANGLE_X", "STEP", "SUPERSAMPLE", "ForwardScene", "camera_poses", "render_rays"]

PATCH_CENTRE = (0.3, -3.6, 1.0)
TILT, YAW = 10.0, 6.0  # degrees below the horizontal; from +y towards -x
FORWARD = (
    -math.sin(math.radians(YAW)) * math.cos(math.radians(TILT)),
    math.cos(math.radians(YAW)) * math.cos(math.radians(TILT)),
    -math.sin(math.radians(TILT)),
)
PATCH = (1.2, 0.6)  # width (along the camera's right) and height (its up)
TURN = 3.0  # degrees: the most a camera turns away from FORWARD
INNER = 0.8  # val and test views: the middle 80% of the patch each way
METADATA = {  # what scene.json records beyond the common keys
    "camera_angle_x": CAMERA_ANGLE_X,
    "patch_centre": list(PATCH_CENTRE),
    "forward": list(FORWARD),
    "patch": list(PATCH),
    "turn_degrees": TURN,
}


def _frame() -> tuple[Tensor, Tensor, Tensor]:
    """FORWARD and the camera plane's right and up axes, float64 unit vectors."""
    forward = torch.tensor(FORWARD, dtype=torch.float64)
    right = torch.linalg.cross(forward, torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64))
    right = right / right.norm()
    return forward, right, torch.linalg.cross(right, forward)


def _poses(uv: Tensor, gen: torch.Generator) -> Tensor:
    """Patch coordinates [V, 2] in [-0.5, 0.5] -> c2w [V, 4, 4], each camera turned from
    FORWARD by a random angle up to TURN degrees in a random direction."""
    forward, right, up = _frame()
    position = (
        torch.tensor(PATCH_CENTRE, dtype=torch.float64)
        + uv[:, :1] * PATCH[0] * right
        + uv[:, 1:] * PATCH[1] * up
    )
    angle, spin = torch.rand(2, len(uv), generator=gen, dtype=torch.float64)
    angle = torch.tensor(math.radians(TURN), dtype=torch.float64) * angle.sqrt()
    spin = 2 * math.pi * spin
    side = spin.cos()[:, None] * right + spin.sin()[:, None] * up
    view = angle.cos()[:, None] * forward + angle.sin()[:, None] * side
    c2w = look_at_origin(-view)  # the camera looks along -z: its +z axis is -view
    c2w[:, :3, 3] = position
    return c2w


def camera_poses(n_train: int, n_val: int, n_test: int, seed: int) -> dict[str, Tensor]:
    """c2w [V, 4, 4] float64 per split (see the module docstring)."""
    gen = torch.Generator().manual_seed(seed)
    cols = math.ceil(math.sqrt(n_train))
    rows = math.ceil(n_train / cols)
    i = torch.arange(n_train, dtype=torch.float64)
    cell = torch.stack([i % cols, (i // cols).floor()], -1)
    jitter = torch.rand(n_train, 2, generator=gen, dtype=torch.float64) - 0.5
    size = torch.tensor([cols, rows], dtype=torch.float64)
    train_uv = (cell + 0.5 + 0.5 * jitter) / size - 0.5  # within the middle half of a cell
    train = _poses(train_uv, gen)

    def inner(n: int) -> Tensor:
        uv = INNER * (torch.rand(n, 2, generator=gen, dtype=torch.float64) - 0.5)
        return _poses(uv, gen)

    return {"train": train, "val": inner(n_val), "test": inner(n_test)}


def rig_turn(variant: int) -> float:
    """Radians the camera rig of `variant` turns about z (0 for variant 0): its forward
    direction's azimuth ends opposite that world's sun, give or take 60 degrees."""
    if variant == 0:
        return 0.0
    sun = outdoor.world(variant).sun
    gen = torch.Generator().manual_seed(outdoor.VARIANT_SEED + variant)
    spread = (2 * float(torch.rand(1, generator=gen, dtype=torch.float64)) - 1) * math.pi / 3
    target = math.atan2(sun[1], sun[0]) + math.pi + spread
    return target - math.atan2(FORWARD[1], FORWARD[0])


class ForwardScene:
    """The forward-facing scene of `variant` > 0 (what `train.nerf.scenes.generate` asks of a
    scene module); variant 0 is this module itself."""

    STEP = STEP
    SUPERSAMPLE = SUPERSAMPLE
    CAMERA_ANGLE_X = CAMERA_ANGLE_X

    def __init__(self, variant: int) -> None:
        self.variant, self.world = variant, outdoor.world(variant)
        self.turn = rig_turn(variant)
        self.METADATA = {**METADATA, "variant": variant, "rig_turn": self.turn}

    def camera_poses(self, n_train: int, n_val: int, n_test: int, seed: int) -> dict:
        """The module's `camera_poses`, every camera turned by `rig_turn` about z."""
        c, s = math.cos(self.turn), math.sin(self.turn)
        turn = torch.eye(4, dtype=torch.float64)
        turn[:2, :2] = torch.tensor([[c, -s], [s, c]], dtype=torch.float64)
        return {k: turn @ v for k, v in camera_poses(n_train, n_val, n_test, seed).items()}

    def render_rays(self, origins: Tensor, directions: Tensor) -> tuple[Tensor, Tensor]:
        """As `outdoor.render_rays`, in this variant's world."""
        return render_rays(origins, directions, self.world)
