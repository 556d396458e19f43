"""CurvesPanel: the training loss and the family's metric of one or more runs, overlaid, side by side.

The panel only draws: the screen that shows it owns the event lists and calls :meth:`CurvesPanel.draw` from its
redraw timer (about twice a second), never once per incoming event.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual_plotext import PlotextPlot

from gaptui.plots import curves_of, draw_curve

#: The two plots: the loss, and the family's metric (:func:`gaptui.plots.curves_of`).
PLOTS = ("loss", "metric")


class CurvesPanel(Horizontal):
    """Two PlotextPlots: the training loss, and the metric the runs' family declares (alignment: LAP acc)."""

    DEFAULT_CSS = """
    CurvesPanel { height: 1fr; min-height: 8; }
    CurvesPanel > PlotextPlot { width: 1fr; height: 1fr; }
    """

    def compose(self) -> ComposeResult:
        for name in PLOTS:
            yield PlotextPlot(id=f"curve-{name}")

    def draw(self, runs: Mapping[str, Sequence[Mapping[str, Any]]], task: str | None = None) -> None:
        """Redraw both plots from ``runs`` of ``task`` (label -> rows of :func:`gaptui.plots.epoch_rows`) with each
        widget's own ``plt``."""
        for name, (key, title) in zip(PLOTS, curves_of(task, runs), strict=True):
            plot = self.query_one(f"#curve-{name}", PlotextPlot)
            # Braille gives two dots per column: more points than that only cost drawing time.
            limit = max(16, 2 * plot.size.width)
            plot.plt.clear_figure()
            draw_curve(plot.plt, {label: thin(events, limit) for label, events in runs.items()}, key, title)
            plot.refresh()


def thin(events: Sequence[Mapping[str, Any]], limit: int) -> Sequence[Mapping[str, Any]]:
    """At most about ``limit`` events, evenly strided, always keeping the last (the newest epoch)."""
    if len(events) <= limit:
        return events
    step = -(-len(events) // limit)
    kept = list(events[::step])
    if kept[-1] is not events[-1]:
        kept.append(events[-1])
    return kept
