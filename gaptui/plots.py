"""Training curves with plotext, drawn on any plotext-like object: the global ``plotext`` module for the CLI, a
``textual_plotext.PlotextPlot.plt`` for the TUI. One drawing function serves both."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

#: The first plot of every run: its training loss (every family's epoch events carry it).
LOSS = ("train_loss", "training loss")


def epoch_rows(events: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each epoch's ``epoch`` event with the fields of the ``eval`` event of the same epoch merged in (the epoch's
    own fields win), in epoch order; a resumed run's repeated epochs count once (the last)."""
    evals: dict[int, Mapping[str, Any]] = {}
    rows: dict[int, dict[str, Any]] = {}
    for e in events:
        epoch = e.get("epoch")
        if not isinstance(epoch, int) or isinstance(epoch, bool):
            continue
        if e.get("event") == "eval":
            evals[epoch] = e
            if epoch in rows:  # an evaluation after its epoch's event (a family's final one)
                rows[epoch] = {**e, **rows[epoch]}
        elif e.get("event") == "epoch":
            rows[epoch] = {**evals.get(epoch, {}), **e}
    return [rows[epoch] for epoch in sorted(rows)]


def curves_of(task: str | None, runs: Mapping[str, Sequence[Mapping[str, Any]]]) -> tuple[tuple[str, str], ...]:
    """The two plots of runs of ``task`` (rows of :func:`epoch_rows` per run): the training loss, and the first
    metric the family declares (its default first) that the runs give at two epochs or more, titled with the
    metric's name (alignment: LAP acc; gape: val MAE; properties: train accuracy, its U score coming once at the
    end). A family that is not installed: the loss and its first epoch field."""
    from engine.tasks import FAMILIES

    if task is None or task not in FAMILIES.names():
        return LOSS, ("val_acc", "validation accuracy")
    fam = FAMILIES.get(task)
    metrics = [fam.metric(fam.default_metric), *(m for m in fam.metrics if m.key != fam.default_metric)]
    metrics = [m for m in metrics if m.key != LOSS[0]]
    for metric in metrics:
        if any(len(curve_points(rows, metric.key)[0]) >= 2 for rows in runs.values()):
            return LOSS, (metric.key, metric.name)
    return LOSS, (metrics[0].key, metrics[0].name) if metrics else LOSS


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


def curves_plot(
    runs: Mapping[str, Sequence[Mapping[str, Any]]], task: str | None, width: int = 100, height: int = 20
) -> str:
    """The loss and the family's metric (:func:`curves_of`) of runs of ``task`` (label -> events) side by side, as
    a string for the terminal."""
    import plotext as plt

    rows = {label: epoch_rows(events) for label, events in runs.items()}
    # plotext's clear_figure clears the active plot only: back to the main figure first, or the last call's second
    # subplot stays active and its first keeps its curves, drawn again under the next call's.
    plt.main()
    plt.clear_figure()
    plt.subplots(1, 2)
    plt.plotsize(width, height)
    for i, (key, title) in enumerate(curves_of(task, rows), start=1):
        plt.subplot(1, i)
        draw_curve(plt, rows, key, title)
    out = plt.build()
    plt.main()
    plt.clear_figure()
    return out
