"""Camera paths: nerfstudio's `camera_path.json`, and the orbit and spiral around a camera.

Cameras are camera-to-world matrices in the OpenGL axes of the poses (x right, y up,
looking down -z), in the world coordinates the run was trained in (its `grid.bounds`), with
a vertical field of view in degrees; pixels are square and the principal point is the
image centre (nerfstudio's perspective camera: focal = (height / 2) / tan(fov / 2)).

The file is the one nerfstudio's viewer writes and `ns-render camera-path` reads:

    {
      "render_height": 480, "render_width": 640,
      "seconds": 4.0,                      (or "fps": 24; "seconds" wins, as in nerfstudio)
      "camera_path": [
        {"camera_to_world": [16 numbers, row by row], "fov": 50.0, "aspect": 1.333},
        ...
      ]
    }

Other keys (keyframes, camera_type "perspective", smoothness_value, ...) are ignored.
A path from nerfstudio's own viewer is in the coordinates of its data parser (scaled and
re-centred); paths for a grid-train run are in the run's world coordinates.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import ConfigError, InputFileError, read_input, writing

if TYPE_CHECKING:  # torch is imported where used: `grid-train render --help` needs none
    from torch import Tensor

#: The shapes `grid-train render --path` draws around the first camera; any other value
#: is a camera_path.json file.
SHAPES = ("orbit", "spiral")
#: Degrees of elevation the spiral climbs above and sinks below the first camera's.
SPIRAL_ELEVATION = 15.0
#: Turns the spiral makes around the up axis.
SPIRAL_TURNS = 2


@dataclass
class CameraPath:
    """c2w: [N, 4, 4] float64, OpenGL axes; fov: [N] float64, vertical, degrees;
    every frame width x height pixels, played at `fps` frames per second."""

    c2w: Tensor
    fov: Tensor
    width: int
    height: int
    fps: float

    def __len__(self) -> int:
        return self.c2w.shape[0]

    def focal(self, index: int) -> float:
        """Frame `index`'s focal length in pixels (nerfstudio's three.js camera)."""
        return focal_from_fov(float(self.fov[index]), self.height)


def focal_from_fov(fov: float, height: int) -> float:
    """Focal length in pixels of a camera `height` pixels tall with vertical `fov` degrees."""
    return 0.5 * height / math.tan(math.radians(fov) / 2)


def fov_from_focal(focal: float, height: int) -> float:
    """Vertical field of view in degrees of a camera `height` pixels tall, focal in pixels."""
    return math.degrees(2 * math.atan(0.5 * height / focal))


# ---- reading and writing camera_path.json ---------------------------------------------------


def read_camera_path(path: str | Path, key: str = "--path") -> CameraPath:
    """A nerfstudio camera_path.json (see the module docstring).

    Raises InputFileError naming `key` and the file: missing, not JSON, or a key missing or
    of the wrong kind (which one, and in which camera).
    """
    import torch

    data = read_input(path, lambda f: json.loads(f.read_text()), "camera path JSON", key=key)

    def bad(problem: str) -> InputFileError:
        return InputFileError(path, problem, key=key)

    if not isinstance(data, dict):
        raise bad(f"expected a JSON object with 'camera_path', got {type(data).__name__}")
    height = _positive_int(data, "render_height", bad)
    width = _positive_int(data, "render_width", bad)
    cameras = data.get("camera_path")
    if not isinstance(cameras, list) or not cameras:
        raise bad("'camera_path': expected a non-empty list of cameras")
    c2w, fov = [], []
    for i, camera in enumerate(cameras):
        c2w.append(_matrix(camera, i, bad))
        fov.append(_fov(camera, i, bad))
    fps = _fps(data, len(cameras), bad)
    return CameraPath(
        torch.tensor(c2w, dtype=torch.float64).reshape(-1, 4, 4),
        torch.tensor(fov, dtype=torch.float64),
        width,
        height,
        fps,
    )


def _positive_int(data: dict[str, Any], name: str, bad) -> int:
    value = data.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise bad(f"'{name}': expected an integer >= 1, got {value!r}")
    return value


def _matrix(camera: Any, i: int, bad) -> list[float]:
    import torch

    where = f"camera_path[{i}]"
    if not isinstance(camera, dict):
        raise bad(f"{where}: expected an object, got {type(camera).__name__}")
    values = camera.get("camera_to_world")
    numbers = isinstance(values, list) and all(_is_number(v) for v in values)
    if not numbers or len(values) != 16:
        raise bad(f"{where}.camera_to_world: expected 16 numbers (a 4x4 matrix, row by row)")
    rotation = torch.tensor(values, dtype=torch.float64).reshape(4, 4)[:3, :3]
    if not torch.isfinite(rotation).all() or abs(float(torch.linalg.det(rotation))) < 1e-6:
        raise bad(f"{where}.camera_to_world: its 3x3 rotation is singular or not finite")
    return [float(v) for v in values]


def _fov(camera: dict[str, Any], i: int, bad) -> float:
    value = camera.get("fov")
    if not _is_number(value) or not 0 < value < 180:
        raise bad(f"camera_path[{i}].fov: expected degrees in (0, 180), got {value!r}")
    return float(value)


def _fps(data: dict[str, Any], frames: int, bad) -> float:
    seconds, fps = data.get("seconds"), data.get("fps")
    if seconds is not None:
        if not _is_number(seconds) or not seconds > 0:
            raise bad(f"'seconds': expected a number > 0, got {seconds!r}")
        return frames / seconds  # nerfstudio: the path's frames spread over `seconds`
    if fps is not None:
        if not _is_number(fps) or not fps > 0:
            raise bad(f"'fps': expected a number > 0, got {fps!r}")
        return float(fps)
    raise bad("expected 'seconds' (the path's duration) or 'fps'")


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def write_camera_path(path: Path, cameras: CameraPath) -> None:
    """`cameras` as a camera_path.json that `read_camera_path` (and nerfstudio) reads."""
    data = {
        "camera_type": "perspective",
        "render_height": cameras.height,
        "render_width": cameras.width,
        "seconds": len(cameras) / cameras.fps,
        "fps": cameras.fps,
        "camera_path": [
            {
                "camera_to_world": c2w.reshape(-1).tolist(),
                "fov": float(fov),
                "aspect": cameras.width / cameras.height,
            }
            for c2w, fov in zip(cameras.c2w, cameras.fov, strict=True)
        ],
    }
    with writing(path, remove=path):
        path.write_text(json.dumps(data, indent=1) + "\n")


# ---- shapes around a camera -----------------------------------------------------------------


def up_axis(c2w: Tensor) -> tuple[int, float]:
    """c2w: [V, 4, 4] -> (axis, sign): the world coordinate axis closest to the cameras'
    mean up vector (their y axes), as the turntable picture takes it."""
    up_mean = c2w[:, :3, 1].mean(0)
    axis = int(up_mean.abs().argmax())
    return axis, 1.0 if up_mean[axis] >= 0 else -1.0


def rotation(axis: Tensor, angle: float) -> Tensor:
    """[4, 4] float64: rotation by `angle` radians about the unit vector `axis` [3] through
    the origin (Rodrigues)."""
    import torch

    x, y, z = (float(v) for v in axis)
    k = torch.tensor([[0, -z, y], [z, 0, -x], [-y, x, 0]], dtype=torch.float64)
    out = torch.eye(4, dtype=torch.float64)
    out[:3, :3] += math.sin(angle) * k + (1 - math.cos(angle)) * (k @ k)
    return out


def orbit(first: Tensor, up: Tensor, frames: int) -> Tensor:
    """first: [4, 4] camera, up: [3] unit world up -> [frames, 4, 4]: the camera rotated
    about the up axis through the origin in `frames` equal steps (one turn, the last step
    short of the first camera, so that the video loops)."""
    import torch

    turns = [rotation(up, 2 * math.pi * k / frames) for k in range(frames)]
    return torch.stack([r @ first.double() for r in turns])


def spiral(first: Tensor, up: Tensor, frames: int) -> Tensor:
    """first: [4, 4] camera, up: [3] unit world up -> [frames, 4, 4]: `SPIRAL_TURNS` turns
    about the up axis through the origin while the camera's elevation goes from
    `SPIRAL_ELEVATION` degrees above the first camera's to as far below it (tilting about
    the horizontal axis through the origin square to the camera's position)."""
    import torch

    first = first.double()
    position = first[:3, 3]
    side = torch.linalg.cross(up.double(), position)  # horizontal, square to the camera
    if float(side.norm()) < 1e-9:  # the camera is on the up axis: tilt about its x axis
        side = first[:3, 0]
    side = side / side.norm()
    poses = []
    for k in range(frames):
        t = k / max(frames - 1, 1)
        tilt = rotation(side, -math.radians(SPIRAL_ELEVATION) * (1 - 2 * t))
        turn = rotation(up.double(), 2 * math.pi * SPIRAL_TURNS * k / frames)
        poses.append(turn @ tilt @ first)
    return torch.stack(poses)


def shape_path(
    shape: str,
    first: Tensor,
    up: Tensor,
    frames: int,
    fov: float,
    size: tuple[int, int],
    fps: float,
) -> CameraPath:
    """`frames` cameras of `shape` ("orbit" or "spiral") around `first` [4, 4] (up: [3]),
    each `fov` degrees and size (width, height), played at `fps`."""
    import torch

    if shape not in SHAPES:
        raise ConfigError(f"--path: expected {' or '.join(SHAPES)} or a camera_path.json file")
    poses = orbit(first, up, frames) if shape == "orbit" else spiral(first, up, frames)
    fovs = torch.full((frames,), float(fov), dtype=torch.float64)
    return CameraPath(poses, fovs, size[0], size[1], fps)
