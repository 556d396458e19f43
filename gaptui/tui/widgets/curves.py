"""CurvesPanel: training loss and validation LAP accuracy of one or more runs, overlaid, side by side.

The panel only draws: the screen that shows it owns the event lists and calls :meth:`CurvesPanel.draw` from its
redraw timer (about twice a second), never once per incoming event.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual_plotext import PlotextPlot

from gaptui.plots import CURVES, draw_curve


class CurvesPanel(Horizontal):
    """One PlotextPlot per curve of :data:`gaptui.plots.CURVES` (training loss, validation LAP accuracy)."""

    DEFAULT_CSS = """
    CurvesPanel { height: 1fr; min-height: 8; }
    CurvesPanel > PlotextPlot { width: 1fr; height: 1fr; }
    """

    def compose(self) -> ComposeResult:
        for key, _ in CURVES:
            yield PlotextPlot(id=f"curve-{key}")

    def draw(self, runs: Mapping[str, Sequence[Mapping[str, Any]]]) -> None:
        """Redraw both plots from ``runs`` (label -> events in epoch order) with each widget's own ``plt``."""
        for key, title in CURVES:
            plot = self.query_one(f"#curve-{key}", PlotextPlot)
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
