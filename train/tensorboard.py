"""TensorBoard event files of a run (`output.tensorboard = true`): `tensorboard --logdir RUN`.

Every record `train.loop` writes to metrics.jsonl is written here too, at its `step`: each
number as a scalar under its metrics.jsonl key (`psnr`, `mse`, `train_mse`, `lr`, ...),
each list of numbers as one scalar per entry (`view_psnr/0`, `resolution/0`, ...), and the
images the experiment offers at that evaluation (its `tensorboard_images()`,
name -> [H, W, 3] float in [0, 1], e.g. rendered views beside their ground truth).

The files go to RUN/tensorboard/ (`DIRECTORY`; `--overwrite` deletes it). A resumed run
appends a new event file there that purges the old one's records after the checkpoint's
step, so the curves show each step once, as metrics.jsonl does.

Writing uses `torch.utils.tensorboard`, which needs the `tensorboard` package (the
`tensorboard` extra); `train.dependencies` checks it at start-up.
"""

from __future__ import annotations

from numbers import Real
from pathlib import Path
from typing import Any

from torch import Tensor

DIRECTORY = "tensorboard"


class TensorBoardLog:
    """Writes metrics records (and images) as TensorBoard events under `directory`."""

    def __init__(self, directory: Path, purge_step: int | None = None) -> None:
        from torch.utils.tensorboard import SummaryWriter  # optional: checked at start-up

        self.writer = SummaryWriter(str(directory), purge_step=purge_step)

    def write(self, record: dict[str, Any], images: dict[str, Tensor] | None = None) -> None:
        """One metrics record (its "step" is the global step) and `images` at that step."""
        step = record["step"]
        for key, value in record.items():
            if key == "step":
                continue
            if _is_number(value):
                self.writer.add_scalar(key, float(value), step)
            elif isinstance(value, list) and value and all(map(_is_number, value)):
                for i, item in enumerate(value):
                    self.writer.add_scalar(f"{key}/{i}", float(item), step)
        for name, image in (images or {}).items():
            pixels = image.detach().float().clamp(0, 1).cpu().numpy()
            self.writer.add_image(name, pixels, step, dataformats="HWC")
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


def _is_number(value: Any) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool)


def open_log(out: Path, enabled: bool, resumed_at: int | None) -> TensorBoardLog | None:
    """The run's TensorBoard log, or None when `output.tensorboard` is off.

    resumed_at: the checkpoint's step when resuming (records after it are purged).
    """
    if not enabled:
        return None
    return TensorBoardLog(out / DIRECTORY, None if resumed_at is None else resumed_at + 1)
