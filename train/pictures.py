"""Plotting every experiment uses: the MSE curves and the upsample marks.

Uses matplotlib's object API (`Axes`), no pyplot, no display.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from .errors import writing

if TYPE_CHECKING:
    from .config import Config


def save_figure(fig: Figure, path: Path, dpi: int) -> None:
    """`fig.savefig(path)`; a failed write raises OutputFileError naming `path` and
    leaves no partial picture."""
    with writing(path, remove=path):
        fig.savefig(path, dpi=dpi)


def plot_mse(
    ax: Axes, records: list[dict[str, Any]], train: str, held_out: str, title: str
) -> None:
    """Training MSE (`train_mse`, a mean over the steps since the previous evaluation, drawn
    as a staircase over that window) and evaluated MSE (`mse`) against steps, log scale."""
    steps = [r["step"] for r in records]
    starts = [0, *steps[:-1]]
    ax.semilogy(
        [x for a, b in zip(starts, steps, strict=True) for x in (a, b)],
        [r["train_mse"] for r in records for _ in range(2)],
        "-",
        label=f"{train} (mean over each interval)",
    )
    ax.semilogy(steps, [r["mse"] for r in records], "s-", ms=3, label=held_out)
    ax.set(xlabel="step", ylabel="MSE", title=title)


def mark_upsamples(ax: Axes, config: Config) -> None:
    """A dotted line at each upsample step, labelled with the new resolution."""
    for step, res in zip(
        config.train.upsample_steps, config.train.upsample_resolutions, strict=True
    ):
        ax.axvline(step, color="gray", linestyle=":", linewidth=1)
        text = "x".join(map(str, res)) if isinstance(res, list) else f"{res}^3"
        ax.annotate(
            text,
            (step, 1),
            xycoords=("data", "axes fraction"),
            fontsize=8,
            xytext=(2, -10),
            textcoords="offset points",
            color="gray",
        )
