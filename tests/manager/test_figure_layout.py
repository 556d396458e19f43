"""Nothing written over the data: in every figure with a legend (lines, gap, bars, series) the legend lies outside
the plotting area and no label is drawn inside it (the gap figure's optimal column is said in its title), for each
family, a single-column grid included (its legend covered points); long titles wrap to the figure's width."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("matplotlib")

from gaptui import figures  # noqa: E402
from tests.support.records import alignment_history, figure_record, gape_history, properties_history, write_events  # noqa: E402

#: Figure kinds whose plotting area holds only data (the heatmap's numbers and the CD diagram's labels are data).
PLAIN = ("lines", "gap", "bars", "series")


def single_noise(root: Path) -> list[dict[str, Any]]:
    """Five models at one noise level: one x value, the points stacked where a legend used to sit."""
    records = []
    for m, model in enumerate(("gcn", "gin", "gat", "gatv2", "sage")):
        for seed in range(3):
            acc = 0.7 - 0.05 * m + 0.01 * seed
            folder = root / "runs" / f"s{len(records)}"
            write_events(folder, 3, acc, "val_lap_acc")
            axes = {"dataset": "ba", "noise": 0.12, "model": model}
            records.append(figure_record(9000 + len(records), "alignment", axes, seed, {"val_lap_acc": acc}, folder))
    return records


@pytest.mark.parametrize("task", ["alignment", "gape", "properties"])
def test_no_legend_or_label_over_the_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, task: str) -> None:
    laid_out: dict[str, tuple[Any, ...]] = {}
    save = figures.save_figure

    def measured(fig: Any, path: Path) -> Path:
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        plots = [ax for ax in fig.axes if ax.axison and ax.get_label() != "<colorbar>"]
        legends = [*fig.legends, *(ax.get_legend() for ax in plots if ax.get_legend() is not None)]
        laid_out[path.name] = (
            [ax.get_window_extent(renderer) for ax in plots],
            [legend.get_window_extent(renderer) for legend in legends],
            [text for ax in plots for text in ax.texts],
            fig.get_size_inches()[0] * fig.dpi,
            max(ax.title.get_window_extent(renderer).width for ax in fig.axes),
        )
        return save(fig, path)

    monkeypatch.setattr(figures, "save_figure", measured)
    records = {
        "alignment": lambda: [*alignment_history(tmp_path), *single_noise(tmp_path)],
        "gape": lambda: gape_history(tmp_path),
        "properties": properties_history,
    }[task]()
    drawn = figures.draw_figures(records, tmp_path / "figs", task, "png")
    assert drawn and set(laid_out) == {p.name for p in drawn}
    checked = [name for name in laid_out if name.split("-")[1] in PLAIN]
    assert checked
    for name in checked:
        plots, legends, texts, width, title = laid_out[name]
        assert legends, name
        assert not any(legend.overlaps(ax) for legend in legends for ax in plots), f"{name}: legend over the plot"
        assert not texts, f"{name}: {[t.get_text() for t in texts]} written over the plot"
        assert title <= width, f"{name}: a title wider than its figure"
