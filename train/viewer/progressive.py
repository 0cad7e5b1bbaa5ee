"""Progressive rendering for one browser: small frames while the camera moves, the full
frame once it stops.

Each connected browser (a viser client) gets a `ProgressiveRenderer` thread. A camera
message from the browser marks the view as moving; while it moves the thread renders
previews sized so that one takes about 1 / `fps` seconds at the measured rays per second
(JPEG: small to send; the browser stretches it over the canvas), and once the camera has
been still for `still_after` seconds it renders the full frame (the canvas's size, at most
`max_size` on its longer side) band by band, giving up as soon as the camera moves again,
and sends it as PNG: lossless, pixel for pixel the offline render of that camera.

Cameras reach the scene's `render` as OpenGL camera-to-world matrices (the poses' axes:
x right, y up, looking down -z) with a vertical field of view in degrees; viser's cameras
are OpenCV's (x right, y down, looking down +z), so the rotation's y and z columns flip.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

#: A scene's render: (c2w [4, 4] float64, fov degrees, width, height, cancelled) ->
#: [height, width, 3] uint8, or None when `cancelled()` said yes part way.
RenderFn = Callable[[Tensor, float, int, int, Callable[[], bool]], "np.ndarray | None"]

#: The first preview's longer side, before any speed is measured.
FIRST_PREVIEW = 64
#: The smallest preview's longer side.
MIN_PREVIEW = 32
#: JPEG quality of previews.
JPEG_QUALITY = 85


@dataclass(frozen=True)
class Camera:
    """A browser's camera: c2w [4, 4] float64 (OpenGL axes), vertical fov in degrees, and
    its canvas's size in pixels."""

    c2w: Tensor
    fov: float
    width: int
    height: int


@dataclass(frozen=True)
class Frame:
    """A frame sent to a browser: its camera (at the size rendered), whether it was the
    full frame (PNG) or a preview (JPEG), the seconds it took to render, its pixels."""

    camera: Camera
    full: bool
    seconds: float
    image: np.ndarray
    sent_at: float


def opencv_to_opengl(rotation: np.ndarray) -> np.ndarray:
    """[3, 3] camera-to-world rotation in OpenCV axes -> OpenGL axes (and back)."""
    return rotation * np.array([1.0, -1.0, -1.0])


def camera_of(handle) -> Camera:
    """The OpenGL camera of a viser `CameraHandle` (its last message from the browser)."""
    import viser.transforms as tf

    c2w = np.eye(4)
    c2w[:3, :3] = opencv_to_opengl(tf.SO3(np.asarray(handle.wxyz)).as_matrix())
    c2w[:3, 3] = handle.position
    return Camera(
        torch.from_numpy(c2w),
        float(np.degrees(handle.fov)),
        int(handle.image_width),
        int(handle.image_height),
    )


def scaled(camera: Camera, longer: int) -> Camera:
    """The same camera with its longer side at most `longer` pixels (same aspect, same fov)."""
    scale = min(1.0, longer / max(camera.width, camera.height))
    width = max(1, round(camera.width * scale))
    height = max(1, round(camera.height * scale))
    return Camera(camera.c2w, camera.fov, width, height)


class ProgressiveRenderer(threading.Thread):
    """Renders one browser's view (see the module docstring) until `stop()`.

    client: the viser `ClientHandle`; render: the scene's `RenderFn`; max_size: the full
    frame's longer side at most; fps: the previews' target frame rate; share: the
    fraction of the time that renders of new weights alone (`refresh`, the camera still)
    may take: after such renders took t seconds, the next waits t (1 / share - 1) seconds
    (a training run's checkpoints: the renders share its processor). A camera the browser
    moves is rendered at once, whatever `share`.
    `last` is the last frame sent, `counts` the frames of each kind, `log` their times.
    """

    still_after = 0.15  # seconds without a camera message before the full frame

    def __init__(
        self, client, render: RenderFn, *, max_size: int, fps: float = 20.0, share: float = 1.0
    ) -> None:
        super().__init__(daemon=True, name=f"render-client-{client.client_id}")
        self.client, self.render, self.max_size, self.fps = client, render, max_size, fps
        self.share = share
        self.refresh_at = 0.0  # renders of new weights alone wait until then
        self.wake = threading.Condition()
        self.camera_version = 0  # counts camera messages
        self.scene_version = 0  # counts new weights (a training run's checkpoints)
        self.moved_at = 0.0
        self.previewed: tuple[int, int] | None = None
        self.finished: tuple[int, int] | None = None  # the key of the last full frame
        self.rays_per_second: float | None = None
        self.last: Frame | None = None
        self.counts = {"preview": 0, "full": 0}
        # (sent at, full, width, height, render seconds) of the frames sent, for measurements
        self.log: list[tuple[float, bool, int, int, float]] = []
        self.connected_at = time.perf_counter()
        self.stopped = False

    # ---- called from viser's threads ----------------------------------------------------

    def moved(self) -> None:
        """The browser sent a camera: preview it now, the full frame once it stays."""
        with self.wake:
            self.camera_version += 1
            self.moved_at = time.perf_counter()
            self.wake.notify()

    def refresh(self) -> None:
        """The scene changed (new weights): render the current camera again."""
        with self.wake:
            self.scene_version += 1
            self.wake.notify()

    def stop(self) -> None:
        with self.wake:
            self.stopped = True
            self.wake.notify()

    # ---- the thread ---------------------------------------------------------------------

    def run(self) -> None:
        while True:
            with self.wake:
                key, moving = self._wait()
                if self.stopped:
                    return
            try:
                camera = camera_of(self.client.camera)
            except AssertionError:  # no camera message from this browser yet
                continue
            # the camera is where its last full frame was: new weights alone, no preview
            refreshing = self.finished is not None and self.finished[0] == key[0]
            start = time.perf_counter()
            if moving or (key != self.previewed and not refreshing):
                self._preview(camera, key)
            else:
                self._full(camera, key)
            if refreshing:
                now = time.perf_counter()
                self.refresh_at = max(self.refresh_at, now) + (now - start) * (1 / self.share - 1)

    def _wait(self) -> tuple[tuple[int, int], bool]:
        """Block until there is work: (its key, whether the camera is moving)."""
        while not self.stopped:
            key = (self.camera_version, self.scene_version)
            wait_in = self.refresh_at - time.perf_counter()
            refreshing = self.finished is not None and self.finished[0] == key[0]
            if refreshing and key != self.finished and wait_in > 0:
                self.wake.wait(timeout=wait_in)  # new weights alone: within `share`
            elif self.camera_version > 0 and key != self.finished:
                still_in = self.moved_at + self.still_after - time.perf_counter()
                if key != self.previewed:
                    return key, still_in > 0
                if still_in <= 0:
                    return key, False
                self.wake.wait(timeout=still_in)  # the preview is up: wait to be still
            else:
                self.wake.wait()
        return (self.camera_version, self.scene_version), False

    def _preview(self, camera: Camera, key: tuple[int, int]) -> None:
        full = scaled(camera, self.max_size)
        if self.rays_per_second is None:
            longer = FIRST_PREVIEW
        else:  # as many rays as one 1 / fps of rendering gives
            budget = self.rays_per_second / self.fps
            longer = max(full.width, full.height) * (budget / (full.width * full.height)) ** 0.5
        size = scaled(full, max(MIN_PREVIEW, int(longer)))
        if self._draw(size, full=False, cancelled=lambda: False) is not None:
            self.previewed = key

    def _full(self, camera: Camera, key: tuple[int, int]) -> None:
        def cancelled() -> bool:
            return self.camera_version != key[0] or self.stopped

        if self._draw(scaled(camera, self.max_size), full=True, cancelled=cancelled) is not None:
            self.finished = key

    def _draw(self, camera: Camera, *, full: bool, cancelled) -> Frame | None:
        start = time.perf_counter()
        image = self.render(camera.c2w, camera.fov, camera.width, camera.height, cancelled)
        seconds = time.perf_counter() - start
        if image is None:
            return None
        if full:
            self.client.scene.set_background_image(image, format="png")
        else:
            self.client.scene.set_background_image(image, format="jpeg", jpeg_quality=JPEG_QUALITY)
        # pixels per second of the latest frames (a GPU warms up, a training run shares the
        # CPU); of a whole preview, its JPEG and sending included (sized on the render alone,
        # previews came at 18.7 fps for 20 on an H100), of a full frame's render (its PNG
        # costs as much again, and no preview pays it)
        taken = seconds if full else time.perf_counter() - start
        speed = camera.width * camera.height / max(taken, 1e-6)
        self.rays_per_second = (
            speed if self.rays_per_second is None else (0.5 * self.rays_per_second + 0.5 * speed)
        )
        frame = Frame(camera, full, seconds, image, time.perf_counter())
        self.last = frame
        self.counts["full" if full else "preview"] += 1
        if len(self.log) < 100_000:
            self.log.append((frame.sent_at, full, camera.width, camera.height, seconds))
        return frame
