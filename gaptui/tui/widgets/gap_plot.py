"""GapPlot: the accuracy gap to the worst trained model against noise, the optimal noise level marked.

The numbers come from :func:`gaptui.analysis.gap_analysis`; this widget only draws them with its own ``plt``
(:func:`gaptui.analysis.draw_gap_plot`, the same drawing as ``gaptui gap``'s plot).
"""

from __future__ import annotations

from textual_plotext import PlotextPlot

from gaptui.analysis import GapAnalysis, draw_gap_plot


class GapPlot(PlotextPlot):
    """Gap per row vs column (percentage points for accuracies); a red vertical line at the optimum."""

    DEFAULT_CSS = "GapPlot { height: 1fr; min-height: 10; }"

    def draw(self, gap: GapAnalysis | None) -> None:
        """Draw ``gap`` (None: an empty plot saying why) with this widget's own ``plt``."""
        plt = self.plt
        plt.clear_figure()
        if gap is None or not gap.columns:
            plt.title("gap: no finished runs of trained models yet")
        else:
            draw_gap_plot(plt, gap, short=True)  # sized when rendered: the CLI's 20 rows assumed for the legend
        self.refresh()
