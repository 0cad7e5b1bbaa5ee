"""A viser client without a browser: the wire protocol of viser's web client, in Python.

It connects as the web client does (a websocket with the subprotocol `viser-v<version>` of
the installed viser: the server rejects any other version), sends the camera messages the
web client sends (`ViewerCameraMessage`: the camera-to-world rotation as a quaternion in
OpenCV axes, the position, the vertical fov in radians, the canvas's size) and decodes what
the server sends: the initial camera (`SetCamera*Message`) and the frames
(`BackgroundImageMessage`: JPEG previews, PNG full frames), each logged with the time it
arrived. For machines without a browser (a GPU machine), and for timing at the client.

Server to client, one websocket message per window of messages (viser's
`infra._infra._message_producer`): [8 bytes] the msgpack's size, [8 bytes] its
zstd-compressed size, the compressed msgpack {"messages": [...], "timestampSec": ...,
"binaryBufferLengths": [...]}, then numpy arrays' raw buffers, each 8-byte aligned, that
messages refer to by {"__binary_index": i, "dtype": ...}. Client to server: one plain
msgpack dict per message, its class name under "type" (`_message_consumer`).
"""

from __future__ import annotations

import io
import threading
import time
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np

#: Seconds between two camera messages of a dragging browser: the web client throttles
#: them to one per 20 ms (`useThrottledMessageSender(20)` in its CameraControls).
CAMERA_INTERVAL = 0.02
#: The web client's camera before the server sets one (viser's `InitialCameraConfig`).
DEFAULT_CAMERA = {"position": (3.0, 3.0, 3.0), "look_at": (0.0, 0.0, 0.0), "up": (0.0, 0.0, 1.0)}
DEFAULT_FOV = np.radians(75.0)


@dataclass(frozen=True)
class Received:
    """A frame as it arrived: perf_counter time, "jpeg" or "png", its size in pixels and
    bytes, the server's timestamp of the window it came in."""

    at: float
    format: str
    width: int
    height: int
    nbytes: int
    server_stamp: float


def decode_window(raw: bytes) -> tuple[float, list[dict[str, Any]]]:
    """One websocket message from a viser server -> (the server's perf_counter when it
    sent it, its messages: dicts with "type", binary placeholders replaced by the bytes
    of their buffers)."""
    import msgspec
    import zstandard

    size = int.from_bytes(raw[0:8], "little")
    compressed = int.from_bytes(raw[8:16], "little")
    inner = zstandard.ZstdDecompressor().decompress(raw[16 : 16 + compressed], size)
    window = msgspec.msgpack.decode(inner)
    buffers, offset = [], 16 + compressed
    for length in window.get("binaryBufferLengths") or ():
        offset += (8 - offset % 8) % 8
        buffers.append(raw[offset : offset + length])
        offset += length
    return window["timestampSec"], [_with_buffers(m, buffers) for m in window["messages"]]


def _with_buffers(value: Any, buffers: list[bytes]) -> Any:
    if isinstance(value, dict):
        if "__binary_index" in value and "dtype" in value:
            return buffers[value["__binary_index"]]
        return {k: _with_buffers(v, buffers) for k, v in value.items()}
    if isinstance(value, list):
        return [_with_buffers(v, buffers) for v in value]
    return value


def look_rotation(position: np.ndarray, look_at: np.ndarray, up: np.ndarray) -> np.ndarray:
    """[3, 3] camera-to-world rotation in OpenCV axes (x right, y down, z forward) of a
    camera at `position` looking at `look_at`, its y axis away from `up`."""
    forward = look_at - position
    forward = forward / np.linalg.norm(forward)
    right = np.cross(forward, up)
    right = right / np.linalg.norm(right)
    return np.stack([right, np.cross(forward, right), forward], axis=1)


def camera_message(position, look_at, up, fov: float, width: int, height: int) -> dict[str, Any]:
    """The web client's `ViewerCameraMessage` (fov: vertical, radians)."""
    import viser.transforms as tf

    position, look_at, up = (np.asarray(v, dtype=np.float64) for v in (position, look_at, up))
    wxyz = tf.SO3.from_matrix(look_rotation(position, look_at, up)).wxyz
    return {
        "type": "ViewerCameraMessage",
        "wxyz": [float(v) for v in wxyz],
        "position": [float(v) for v in position],
        "fov": float(fov),
        "near": 0.01,
        "far": 1000.0,
        "image_height": int(height),
        "image_width": int(width),
        "look_at": [float(v) for v in look_at],
        "up_direction": [float(v) for v in up],
    }


def opengl_camera(message: dict[str, Any]):
    """The viewer's `Camera` (OpenGL c2w, fov in degrees) of a camera message: what the
    server renders for it (`train.viewer.progressive.camera_of` on the same numbers)."""
    from train.viewer.progressive import camera_of

    handle = SimpleNamespace(**{k: message[k] for k in ("wxyz", "position", "fov")})
    handle.image_width, handle.image_height = message["image_width"], message["image_height"]
    return camera_of(handle)


def orbit(position, look_at, up, degrees: float) -> np.ndarray:
    """`position` turned by `degrees` about the axis `up` through `look_at` (Rodrigues)."""
    axis = np.asarray(up, dtype=np.float64)
    axis = axis / np.linalg.norm(axis)
    v = np.asarray(position, dtype=np.float64) - look_at
    a = np.radians(degrees)
    turned = v * np.cos(a) + np.cross(axis, v) * np.sin(a) + axis * (axis @ v) * (1 - np.cos(a))
    return np.asarray(look_at, dtype=np.float64) + turned


class ViserClient:
    """One connection to a viser server at `url` (http://host:port) with a `width` x
    `height` canvas. `frames` logs the frames received, `last_image` the latest decoded
    ([H, W, 3] uint8), `images` every decoded frame when `keep_images`; `home` is the
    initial camera the server set (position, look_at, up, fov), `replayed` is set once
    the server's backlog has arrived. Closed by `close()` or by the server."""

    def __init__(
        self, url: str, width: int, height: int, *, timeout: float = 10.0, keep_images: bool = False
    ) -> None:
        import viser
        from websockets.sync.client import connect

        self.width, self.height, self.keep_images = width, height, keep_images
        self.frames: list[Received] = []
        self.images: list[np.ndarray] = []
        self.last_image: np.ndarray | None = None
        self.home: dict[str, Any] = {}
        self.home_version = 0  # counts SetCamera* messages: the server moved the home camera
        self.sent: list[tuple[float, dict[str, Any]]] = []
        self.replayed = threading.Event()
        self.closed = threading.Event()
        self.started = time.perf_counter()
        self.ws = connect(
            "ws" + url.removeprefix("http"),
            subprotocols=[f"viser-v{viser.__version__}"],
            max_size=None,
            compression=None,
            open_timeout=timeout,
        )
        self.connected_at = time.perf_counter()
        self.thread = threading.Thread(target=self._receive, daemon=True, name="viser-client")
        self.thread.start()

    # ---- sending ----------------------------------------------------------------------

    def camera(self) -> dict[str, Any]:
        """The home camera as keyword arguments of `send_camera`."""
        home = {**DEFAULT_CAMERA, "fov": DEFAULT_FOV, **self.home}
        return {k: home[k] for k in ("position", "look_at", "up", "fov")}

    def send_camera(self, position, look_at, up, fov: float) -> dict[str, Any]:
        import msgspec

        message = camera_message(position, look_at, up, fov, self.width, self.height)
        self.ws.send(msgspec.msgpack.encode(message))
        self.sent.append((time.perf_counter(), message))
        return message

    def close(self) -> None:
        self.ws.close()
        self.thread.join(timeout=5)

    # ---- receiving --------------------------------------------------------------------

    def _receive(self) -> None:
        from websockets.exceptions import ConnectionClosed

        try:
            while True:
                raw = self.ws.recv()
                at = time.perf_counter()
                stamp, messages = decode_window(raw)
                for message in messages:
                    self._handle(message, at, stamp)
        except ConnectionClosed:
            pass
        finally:
            self.closed.set()
            self.replayed.set()  # nobody waits for a backlog that will never come

    def _handle(self, message: dict[str, Any], at: float, stamp: float) -> None:
        kind = message["type"]
        if kind == "BackgroundImageMessage" and message.get("rgb_data") is not None:
            self._frame(message, at, stamp)
        elif kind == "ReplayDoneMessage":
            self.replayed.set()
        elif kind in HOME_FIELDS:
            key, field = HOME_FIELDS[kind]
            self.home[key] = message[field]
            self.home_version += 1

    def _frame(self, message: dict[str, Any], at: float, stamp: float) -> None:
        from PIL import Image

        data = bytes(message["rgb_data"])
        image = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
        height, width = image.shape[:2]
        self.last_image = image
        if self.keep_images:
            self.images.append(image)
        self.frames.append(Received(at, message["format"], width, height, len(data), stamp))


#: The server's camera messages -> (the `home` key, the message's field).
HOME_FIELDS = {
    "SetCameraPositionMessage": ("position", "position"),
    "SetCameraLookAtMessage": ("look_at", "look_at"),
    "SetCameraUpDirectionMessage": ("up", "position"),  # viser names its field `position`
    "SetCameraFovMessage": ("fov", "fov"),
}
