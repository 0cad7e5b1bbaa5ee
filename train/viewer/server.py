"""The viewer's server: a viser server over one run directory, re-read as the run trains.

What it shows of every run: the experiment, the step of the latest checkpoint and
evaluation, the held-out PSNR against steps (metrics.jsonl). What it shows of the model
is the experiment's own (`ExperimentSpec.view`: a radiance field rendered for the browser's
camera, a field's slices, a signed distance's mesh and slices), from checkpoint.pt, loaded
again whenever a newer one is written (a training run's checkpoints are written whole and
renamed into place, so a read never sees half of one).
"""

from __future__ import annotations

import importlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..checkpoint import CHECKPOINT, load_checkpoint
from ..config import load_config
from ..dependencies import INSTALL_VIEW, require
from ..errors import ConfigError, InputFileError
from ..experiments import FORMAT_1_KIND, REGISTRY, specs

#: The held-out number plotted against steps: the first of these the records hold (the
#: signed distance runs' records may have no PSNR), with its label.
METRICS = {"psnr": "PSNR (dB)", "mse": "MSE", "chamfer": "Chamfer distance"}
#: Seconds between two looks at the run directory.
POLL_SECONDS = 0.5


@dataclass(frozen=True)
class ViewOptions:
    """device: where the model renders; max_size: the longer side of full frames at most;
    fps: the frame rate previews aim at while the camera moves; training: the run is still
    training (its newer checkpoints are loaded, its renders give way, see `Viewer`)."""

    device: torch.device
    max_size: int = 1024
    fps: float = 20.0
    training: bool = False


def read_records(path: Path) -> list[dict[str, Any]]:
    """metrics.jsonl's records; a line being written (not yet whole JSON) is left out."""
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return []
    records = []
    for line in lines:
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return records


class Viewer:
    """A viser server showing the run in `out` (see the module docstring).

    Raises ConfigError naming RUN when `out` is no run directory, or has no checkpoint and
    `wait` is off; MissingDependencyError without viser.
    wait: start without a checkpoint and show the model once the first one is written (a
    run that is starting to train).
    """

    def __init__(
        self, out: Path, options: ViewOptions, *, host: str, port: int, wait: bool = False
    ) -> None:
        if not out.is_dir() and not wait:  # a starting run makes it once its data is read
            raise ConfigError(
                f"RUN: {out} is not a directory (a run directory: grid-train's --out)"
            )
        if not wait and not (out / CHECKPOINT).is_file():
            raise ConfigError(
                f"RUN: no {CHECKPOINT} in {out} (train it first, or watch it train: "
                "grid-train --config FILE --out RUN --view)"
            )
        # after the run's checks: a wrong RUN is named whether or not viser is installed
        require(
            "viser", key="grid-train view", needs="the viewer", install=INSTALL_VIEW, singular=True
        )
        import viser

        self.out, self.options, self.host = out, options, host
        self.server = viser.ViserServer(host=host, port=port, verbose=False)
        self.server.gui.configure_theme(control_width="medium")
        self.status = self.server.gui.add_markdown(f"**{out.name}**: waiting for a checkpoint")
        self.plot = None
        self.view = None
        self.kind: str | None = None
        self.checkpoint_stamp: int | None = None
        self.records_stamp: tuple[int, int] | None = None
        self.records: list[dict[str, Any]] = []
        self.step: int | None = None
        self.poll()
        if self.kind is None and not wait:  # the checkpoint went missing in between
            raise ConfigError(f"RUN: no {CHECKPOINT} in {out}")

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.server.get_port()}"

    def poll(self) -> None:
        """Read what changed in the run directory: new records, a newer checkpoint."""
        self._read_records()
        self._read_checkpoint()
        self._show_status()

    def serve(self, seconds: float | None = None, parent: int | None = None) -> None:
        """Poll the run directory until `seconds` have passed (None: until Ctrl-C), or
        until process `parent` is gone (the training command that started the viewer)."""
        end = None if seconds is None else time.monotonic() + seconds
        while end is None or time.monotonic() < end:
            time.sleep(POLL_SECONDS)
            if parent is not None and os.getppid() != parent:
                return
            self.poll()

    def stop(self) -> None:
        if self.view is not None:
            self.view.close()
        self.server.stop()

    # ---- the run directory ----------------------------------------------------------------

    def _read_records(self) -> None:
        path = self.out / "metrics.jsonl"
        try:
            stat = path.stat()
        except FileNotFoundError:
            return
        stamp = (stat.st_mtime_ns, stat.st_size)
        if stamp == self.records_stamp:
            return
        self.records_stamp, self.records = stamp, read_records(path)
        self._plot()

    def _read_checkpoint(self) -> None:
        path = self.out / CHECKPOINT
        try:
            stamp = path.stat().st_mtime_ns
        except FileNotFoundError:
            return
        if stamp == self.checkpoint_stamp:
            return
        try:
            checkpoint = load_checkpoint(self.out)
        except InputFileError:
            if self.kind is None and not self.options.training:
                raise
            return  # a training run's checkpoint being replaced: the next poll reads it
        self.checkpoint_stamp = stamp
        kind = checkpoint.get("kind", FORMAT_1_KIND)
        config = load_config(base=checkpoint["config"])
        self.step = int(checkpoint["step"])
        if self.view is not None and kind == self.kind:
            self.view.update(config, checkpoint)
            return
        if self.view is not None:  # the directory now holds another run (--overwrite)
            self.view.close()
        self.kind, self.config = kind, config
        module = specs()[kind].view
        self.view = None
        if module:
            package = importlib.import_module(f"..{REGISTRY[kind]}.{module}", __package__)
            self.view = package.open_view(self.server, self.out, config, checkpoint, self.options)

    # ---- the panel --------------------------------------------------------------------------

    def _show_status(self) -> None:
        if self.kind is None:
            return
        steps = self.config.train.steps
        lines = [f"**{self.out.name}**: {self.kind}, checkpoint of step {self.step} of {steps}"]
        metric = self._metric()
        if metric is not None:
            last = self.records[-1]
            lines.append(f"evaluated at step {last['step']}: {METRICS[metric]} {last[metric]:.4g}")
        if (self.out / "summary.json").is_file():
            lines.append("training finished")
        text = "  \n".join(lines)
        if self.status.content != text:
            self.status.content = text

    def _plot(self) -> None:
        import numpy as np
        from viser import uplot

        metric = self._metric()
        points = [(r["step"], r[metric]) for r in self.records if r.get(metric) is not None]
        if len(points) < 2:  # uPlot draws two points at least
            return
        steps, values = (np.array(column, dtype=np.float64) for column in zip(*points, strict=True))
        if self.plot is None:
            label = METRICS[metric]
            self.plot = self.server.gui.add_uplot(
                data=(steps, values),
                series=(uplot.Series(label="step"), uplot.Series(label=label, stroke="red")),
                title=f"held-out {label} against steps",
                scales={"x": uplot.Scale(time=False)},  # steps, not dates
                aspect=1.6,
            )
        else:
            self.plot.data = (steps, values)

    def _metric(self) -> str | None:
        """The key of METRICS that the last record holds, if any."""
        last = self.records[-1] if self.records else {}
        return next((k for k in METRICS if last.get(k) is not None), None)
