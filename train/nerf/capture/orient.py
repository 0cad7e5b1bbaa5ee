"""Camera poses from a capture: orienting and scaling the scene, LLFF's poses, and the error
of estimated poses against the truth.

Orientation follows nerfstudio's `auto_orient_and_center_poses` ("up" and "focus"):

- up: the mean of the cameras' up axes (+y of the OpenGL camera), rotated onto +z by the
  smallest rotation (a photographer holds the camera upright, so their mean is the world's
  up; the rotation about z stays free, as nerfstudio leaves it);
- centre: the point nearest to every optical axis (`look_at`: what the
  cameras look at), moved to the origin; "poses" takes the mean camera centre instead,
  and so does "focus" when that point is not in front of the cameras (parallel axes);
- scale: the farthest camera from the centre ends at `radius` (4: cameras at the distance
  of the NeRF-synthetic scenes and the shipped configs, whose grid.bounds is +-1.5).

The map is p -> scale * (R p + t): `Orientation.matrix` as a 4x4 similarity.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Where `orient` puts the farthest camera: the NeRF-synthetic camera distance.
CAMERA_RADIUS = 4.0
CENTRES = ("focus", "poses")


def look_at(c2w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the point nearest to every optical axis [3], each camera's distance to it [N]).

    Minimises sum_i |(I - d_i d_i^T)(p - o_i)|^2 over p, with o_i the camera centre and
    d_i its viewing direction (-z of the camera, OpenGL axes)."""
    origins = c2w[:, :3, 3]
    forward = -c2w[:, :3, 2] / np.linalg.norm(c2w[:, :3, 2], axis=1, keepdims=True)
    projectors = np.eye(3) - forward[:, :, None] * forward[:, None, :]  # [N, 3, 3]
    a = projectors.sum(axis=0)
    b = (projectors @ origins[:, :, None]).sum(axis=0)[:, 0]
    centre = np.linalg.lstsq(a, b, rcond=None)[0]
    return centre, np.linalg.norm(origins - centre, axis=1)


@dataclass
class View:
    """One posed image: its file name, pose and pinhole intrinsics.

    c2w: [4, 4] camera-to-world, OpenGL camera axes; intrinsics: (fx, fy, cx, cy) in pixels;
    size: (width, height)."""

    name: str
    c2w: np.ndarray
    intrinsics: tuple[float, float, float, float]
    size: tuple[int, int]


@dataclass
class Orientation:
    """The similarity `orient` applied: world point p -> scale * (rotation @ p + translation).

    rotation: [3, 3]; translation: [3]; scale: > 0; up: [3] the mean camera up before;
    centre: [3] the point moved to the origin (before); centre_method: "focus" or "poses".
    """

    rotation: np.ndarray
    translation: np.ndarray
    scale: float
    up: np.ndarray
    centre: np.ndarray
    centre_method: str

    @property
    def matrix(self) -> np.ndarray:
        """[4, 4] the similarity as a matrix on homogeneous points."""
        m = np.eye(4)
        m[:3, :3] = self.scale * self.rotation
        m[:3, 3] = self.scale * self.translation
        return m

    def describe(self) -> str:
        """One line: what was done, in numbers."""
        up = ", ".join(f"{v:.3f}" for v in self.up)
        centre = ", ".join(f"{v:.3f}" for v in self.centre)
        return (
            f"oriented: mean camera up ({up}) -> +z; {self.centre_method} point ({centre}) "
            f"-> origin; scaled by {self.scale:.4g} (farthest camera at {CAMERA_RADIUS:g})"
        )


def rotation_between(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """[3, 3] the smallest rotation taking unit vector a [3] to unit vector b [3]."""
    v, c = np.cross(a, b), float(np.dot(a, b))
    if c < -1 + 1e-9:  # opposite: half a turn about any axis normal to a
        axis = np.cross(a, [1.0, 0.0, 0.0])
        if np.linalg.norm(axis) < 1e-6:
            axis = np.cross(a, [0.0, 1.0, 0.0])
        axis /= np.linalg.norm(axis)
        return 2 * np.outer(axis, axis) - np.eye(3)
    k = np.array([[0, -v[2], v[1]], [v[2], 0, -v[0]], [-v[1], v[0], 0]])
    return np.eye(3) + k + k @ k / (1 + c)


def orient(
    c2w: np.ndarray, *, centre: str = "focus", radius: float = CAMERA_RADIUS
) -> tuple[np.ndarray, Orientation]:
    """Orient, centre and scale camera-to-world poses (OpenGL axes).

    c2w: [V, 4, 4]. centre: "focus" or "poses" (see the module). Returns the new poses
    [V, 4, 4] (rotations stay orthonormal) and the `Orientation` applied.
    """
    if centre not in CENTRES:
        raise ValueError(f"centre must be one of {', '.join(CENTRES)}; got {centre!r}")
    c2w = np.asarray(c2w, dtype=np.float64)
    up = c2w[:, :3, 1].mean(axis=0)
    up /= np.linalg.norm(up)
    rotation = rotation_between(up, np.array([0.0, 0.0, 1.0]))
    origins = c2w[:, :3, 3]
    point, method = origins.mean(axis=0), "poses"
    if centre == "focus" and len(c2w) >= 2:
        focus, _ = look_at(c2w)
        forward = -c2w[:, :3, 2]
        in_front = ((focus - origins) * forward).sum(-1) > 0
        if np.isfinite(focus).all() and in_front.mean() > 0.5:
            point, method = focus, "focus"
    translation = -rotation @ point
    distance = np.linalg.norm(origins - point, axis=1).max()
    scale = radius / distance if distance > 0 else 1.0
    out = c2w.copy()
    out[:, :3, :3] = rotation @ c2w[:, :3, :3]
    out[:, :3, 3] = scale * (origins @ rotation.T + translation)
    return out, Orientation(rotation, translation, float(scale), up, point, method)


# ---- LLFF -------------------------------------------------------------------------------


def llff_poses(poses_bounds: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """LLFF's `poses_bounds.npy` [N, 17] -> (c2w [N, 4, 4] OpenGL axes, hwf [N, 3] (height,
    width, focal in pixels of the original images), bounds [N, 2] (near, far)).

    Each row is a 3x5 matrix, row-major, then near and far: [R | t | hwf] whose rotation
    columns are LLFF's camera axes (down, right, back); OpenGL's are (right, up, back), so
    x = second column, y = -first, z = third (as LLFF's own `load_llff_data` does).
    """
    array = np.asarray(poses_bounds, dtype=np.float64)
    if array.ndim != 2 or array.shape[1] != 17:
        raise ValueError(f"expected an array of shape [N, 17]; got {list(array.shape)}")
    matrices = array[:, :15].reshape(-1, 3, 5)
    c2w = np.tile(np.eye(4), (len(array), 1, 1))
    c2w[:, :3, 0] = matrices[:, :, 1]
    c2w[:, :3, 1] = -matrices[:, :, 0]
    c2w[:, :3, 2] = matrices[:, :, 2]
    c2w[:, :3, 3] = matrices[:, :, 3]
    return c2w, matrices[:, :, 4], array[:, 15:17]


def to_llff(c2w: np.ndarray, hwf: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """The inverse of `llff_poses`: c2w [N, 4, 4], hwf [N, 3] or [3], bounds [N, 2] ->
    [N, 17] (for tests and for writing LLFF files)."""
    c2w = np.asarray(c2w, dtype=np.float64)
    matrices = np.zeros((len(c2w), 3, 5))
    matrices[:, :, 0] = -c2w[:, :3, 1]
    matrices[:, :, 1] = c2w[:, :3, 0]
    matrices[:, :, 2] = c2w[:, :3, 2]
    matrices[:, :, 3] = c2w[:, :3, 3]
    matrices[:, :, 4] = hwf
    return np.concatenate([matrices.reshape(-1, 15), np.asarray(bounds, np.float64)], axis=1)


# ---- error against the truth ------------------------------------------------------------


def umeyama(source: np.ndarray, target: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """The similarity (scale, rotation [3, 3], translation [3]) minimising
    sum |scale * R source_i + t - target_i|^2 over points [N, 3] (Umeyama 1991)."""
    mu_s, mu_t = source.mean(0), target.mean(0)
    s, t = source - mu_s, target - mu_t
    covariance = t.T @ s / len(source)
    u, d, vt = np.linalg.svd(covariance)
    sign = np.eye(3)
    if np.linalg.det(u) * np.linalg.det(vt) < 0:
        sign[2, 2] = -1
    rotation = u @ sign @ vt
    scale = float(np.trace(np.diag(d) @ sign) / s.var(0).sum())
    return scale, rotation, mu_t - scale * rotation @ mu_s


def pose_errors(estimated: np.ndarray, truth: np.ndarray, scene_size: float) -> dict[str, float]:
    """Errors of estimated poses [V, 4, 4] against the true ones [V, 4, 4] (same views, same
    order; OpenGL axes), after the similarity that best maps the estimated camera centres
    onto the true ones (`umeyama`).

    Returns rotation_median / rotation_mean / rotation_max (degrees: the angle of
    R_true^T R_aligned per view) and centre_median / centre_mean / centre_max (percent of
    `scene_size`, the distance between aligned and true centres).
    """
    scale, rotation, translation = umeyama(estimated[:, :3, 3], truth[:, :3, 3])
    centres = scale * estimated[:, :3, 3] @ rotation.T + translation
    centre = np.linalg.norm(centres - truth[:, :3, 3], axis=1) / scene_size * 100
    aligned = rotation @ estimated[:, :3, :3]
    relative = np.swapaxes(truth[:, :3, :3], 1, 2) @ aligned
    cosine = (np.trace(relative, axis1=1, axis2=2) - 1) / 2
    angle = np.degrees(np.arccos(np.clip(cosine, -1.0, 1.0)))
    return {
        "rotation_median": float(np.median(angle)),
        "rotation_mean": float(angle.mean()),
        "rotation_max": float(angle.max()),
        "centre_median": float(np.median(centre)),
        "centre_mean": float(centre.mean()),
        "centre_max": float(centre.max()),
    }
