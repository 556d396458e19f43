"""GapPlot: the accuracy gap to the worst trained model against noise, the optimal noise level marked.

The numbers come from :func:`gaptui.analysis.gap_analysis`; this widget only draws them with its own ``plt``
(the same picture as :func:`gaptui.analysis.render_gap_plot`, which draws on the global plotext module).
"""

from __future__ import annotations

from textual_plotext import PlotextPlot

from gaptui.analysis import GapAnalysis, display_scale, format_noise, is_share

#: One marker per model so the plot reads without colour too (as in the CLI's plot).
MARKERS = ("•", "x", "+", "o", "*", "#", "@", "%", "&", "=")


class GapPlot(PlotextPlot):
    """Gap per model vs noise level (percentage points for accuracies); a red vertical line at the optimum."""

    DEFAULT_CSS = "GapPlot { height: 1fr; min-height: 10; }"

    def draw(self, gap: GapAnalysis | None) -> None:
        """Draw ``gap`` (None: an empty plot saying why) with this widget's own ``plt``."""
        plt = self.plt
        plt.clear_figure()
        if gap is None or not gap.noises:
            plt.title("accuracy gap: no finished runs of trained models yet")
            self.refresh()
            return
        scale = display_scale(gap.metric)
        for i, model in enumerate(gap.models):
            xs = [n for n in gap.noises if n in gap.gaps[model]]
            if xs:
                plt.plot(xs, [gap.gaps[model][n] * scale for n in xs], label=model, marker=MARKERS[i % len(MARKERS)])
        if gap.optimal_noise is not None:
            plt.vline(gap.optimal_noise, "red")
            spread = gap.spread[gap.optimal_noise] * scale
            unit = " pp" if is_share(gap.metric) else ""
            # Short enough for 80 columns: plotext drops a title wider than the plot.
            plt.title(
                f"gap to the worst model · optimal η={format_noise(gap.optimal_noise)} (spread {spread:.1f}{unit})"
            )
        plt.xticks(list(gap.noises), [format_noise(n) for n in gap.noises])
        plt.xlabel("noise η")
        plt.ylabel("gap (pp)" if is_share(gap.metric) else f"gap ({gap.metric})")
        self.refresh()
