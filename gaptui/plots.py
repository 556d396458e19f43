"""Training curves with plotext, drawn on any plotext-like object: the global ``plotext`` module for the CLI, a
``textual_plotext.PlotextPlot.plt`` for the TUI. One drawing function serves both."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

CURVES = (("train_loss", "training loss"), ("val_acc", "validation LAP accuracy"))


def curve_points(events: Sequence[Mapping[str, Any]], key: str) -> tuple[list[float], list[float]]:
    """``(epochs, values)`` of ``key`` over the ``epoch`` events that carry it."""
    xs, ys = [], []
    for e in events:
        if e.get("event") == "epoch" and isinstance(e.get(key), (int, float)):
            xs.append(float(e["epoch"]))
            ys.append(float(e[key]))
    return xs, ys


def draw_curve(plt: Any, runs: Mapping[str, Sequence[Mapping[str, Any]]], key: str, title: str) -> None:
    """Overlay curve ``key`` of several runs (label -> events) on the current plot of ``plt``."""
    plt.title(title)
    plt.xlabel("epoch")
    drawn = False
    for label, events in runs.items():
        xs, ys = curve_points(events, key)
        if xs:
            plt.plot(xs, ys, label=label, marker="braille")
            drawn = True
    if key.endswith("acc"):
        plt.ylim(0, 1)
    if not drawn:
        plt.text("no data yet", 0.5, 0.5) if hasattr(plt, "text") else None


def curves_plot(runs: Mapping[str, Sequence[Mapping[str, Any]]], width: int = 100, height: int = 20) -> str:
    """Loss and validation accuracy side by side, as a string for the terminal."""
    import plotext as plt

    plt.clear_figure()
    plt.subplots(1, 2)
    plt.plotsize(width, height)
    for i, (key, title) in enumerate(CURVES, start=1):
        plt.subplot(1, i)
        draw_curve(plt, runs, key, title)
    out = plt.build()
    plt.clear_figure()
    return out
