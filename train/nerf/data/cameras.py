"""Pinhole cameras with per-view intrinsics and OpenCV lens distortion: pixel -> direction.

A view's intrinsics are `(fx, fy, cx, cy)` in pixels at the image's resolution, with
COLMAP's and OpenCV's pixel convention: the top-left pixel covers [0, 1] x [0, 1], so its
centre is (0.5, 0.5) and an ideal camera has `cx = W / 2`, `cy = H / 2`. Its distortion is
OpenCV's radial-tangential model `(k1, k2, p1, p2, k3)` (COLMAP's OPENCV camera and the
instant-ngp / nerfstudio `transforms.json` keys; k3 = 0 for OPENCV) on the normalised
image coordinates `(x, y)` of OpenCV's camera axes (x right, y *down*, z forward):

    r2 = x^2 + y^2,  radial = 1 + k1 r2 + k2 r2^2 + k3 r2^3
    x_d = x radial + 2 p1 x y + p2 (r2 + 2 x^2)
    y_d = y radial + p1 (r2 + 2 y^2) + 2 p2 x y
    u = fx x_d + cx,  v = fy y_d + cy                       (pixel coordinates)

A pixel's ray needs the inverse (`undistort`, Newton's method). The direction is then
returned in the OpenGL camera axes of the poses: (x, -y, -1).
"""

from __future__ import annotations

import torch
from torch import Tensor

#: Newton iterations of `undistort`; the lens distortions of real cameras converge to
#: float64 rounding in fewer than 10 (tested on a forward-distortion round trip).
NEWTON_STEPS = 20


def distort(x: Tensor, y: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
    """OpenCV's forward distortion of normalised coordinates.

    x, y: [..., N] undistorted (y down); k: [..., 5] (k1, k2, p1, p2, k3), broadcast
    against x's leading dimensions. Returns (x_d, y_d), [..., N] each.
    """
    k1, k2, p1, p2, k3 = (k[..., i, None] for i in range(5))
    r2 = x * x + y * y
    radial = 1 + r2 * (k1 + r2 * (k2 + r2 * k3))
    x_d = x * radial + 2 * p1 * x * y + p2 * (r2 + 2 * x * x)
    y_d = y * radial + p1 * (r2 + 2 * y * y) + 2 * p2 * x * y
    return x_d, y_d


def undistort(x_d: Tensor, y_d: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
    """The inverse of `distort`: the undistorted (x, y) whose distortion is (x_d, y_d).

    Newton's method on the 2x2 system, started at (x_d, y_d), `NEWTON_STEPS` steps (no
    early exit: the result is a deterministic function of the inputs). Shapes as `distort`;
    compute in float64 for pixel-exact rays.
    """
    k1, k2, p1, p2, k3 = (k[..., i, None] for i in range(5))
    x, y = x_d.clone(), y_d.clone()
    for _ in range(NEWTON_STEPS):
        r2 = x * x + y * y
        radial = 1 + r2 * (k1 + r2 * (k2 + r2 * k3))
        d_radial = k1 + r2 * (2 * k2 + 3 * k3 * r2)  # d radial / d r2
        fx = x * radial + 2 * p1 * x * y + p2 * (r2 + 2 * x * x) - x_d
        fy = y * radial + p1 * (r2 + 2 * y * y) + 2 * p2 * x * y - y_d
        # Jacobian of (fx, fy) with respect to (x, y); d r2 / dx = 2x, d r2 / dy = 2y
        a = radial + 2 * x * x * d_radial + 2 * p1 * y + 6 * p2 * x  # dfx/dx
        b = 2 * x * y * d_radial + 2 * p1 * x + 2 * p2 * y  # dfx/dy (= dfy/dx)
        d = radial + 2 * y * y * d_radial + 6 * p1 * y + 2 * p2 * x  # dfy/dy
        det = a * d - b * b
        det = torch.where(det.abs() < 1e-12, torch.full_like(det, 1e-12), det)
        x = x - (d * fx - b * fy) / det
        y = y - (a * fy - b * fx) / det
    return x, y


def pixel_directions(
    intrinsics: Tensor, distortion: Tensor | None, height: int, width: int
) -> Tensor:
    """Camera-space directions (OpenGL axes, z = -1, not normalised) through pixel centres.

    intrinsics: [..., 4] (fx, fy, cx, cy) per view; distortion: [..., 5] or None (none).
    Returns [..., H, W, 3] float32 on the intrinsics' device; pixel (row i, column j) is
    ((u - cx) / fx, -(v - cy) / fy, -1) at u = j + 0.5, v = i + 0.5, undistorted first.
    """
    k = intrinsics.double()
    fx, fy, cx, cy = (k[..., i, None, None] for i in range(4))  # [..., 1, 1]
    device = intrinsics.device
    u = torch.arange(width, device=device, dtype=torch.float64) + 0.5
    v = torch.arange(height, device=device, dtype=torch.float64) + 0.5
    x = ((u[None, :] - cx) / fx).expand(*k.shape[:-1], height, width)
    y = ((v[:, None] - cy) / fy).expand(*k.shape[:-1], height, width)  # OpenCV: y down
    if distortion is not None:
        coeffs = distortion.to(device, torch.float64)
        flat_x, flat_y = x.reshape(*k.shape[:-1], -1), y.reshape(*k.shape[:-1], -1)
        flat_x, flat_y = undistort(flat_x, flat_y, coeffs)
        x, y = flat_x.reshape(x.shape), flat_y.reshape(y.shape)
    return torch.stack([x, -y, -torch.ones_like(x)], dim=-1).float()


#: The original (NeRF-synthetic) scenes' horizontal field of view, radians: the shipped
#: scenes' cameras but the unbounded one's.
CAMERA_ANGLE_X = 0.6911112070083618


def look_at_origin(position: Tensor) -> Tensor:
    """Camera positions [V, 3] -> OpenGL camera-to-world [V, 4, 4] looking at the origin, z up."""
    back = position / position.norm(dim=-1, keepdim=True)  # the camera's +z axis
    up = torch.tensor([0.0, 0.0, 1.0], dtype=position.dtype).expand_as(back)
    right = torch.linalg.cross(up, back)
    right = right / right.norm(dim=-1, keepdim=True)
    true_up = torch.linalg.cross(back, right)
    c2w = torch.zeros(position.shape[0], 4, 4, dtype=position.dtype)
    c2w[:, :3, 0], c2w[:, :3, 1], c2w[:, :3, 2], c2w[:, :3, 3] = right, true_up, back, position
    c2w[:, 3, 3] = 1.0
    return c2w
