"""A comparison (:class:`~gaptui.analysis.reference.compare.Comparison`) written out: a Rich table for the terminal,
Markdown for a paper's appendix, CSV and JSON for scripts (metric units, the table's axis keys as column names)."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from typing import Any

from engine.tasks import Metric
from gaptui import analysis
from gaptui.analysis.reference.compare import Comparison


def _signed(value: float, metric: Metric) -> str:
    return ("+" if value >= 0 else "−") + analysis.format_number(abs(value), metric)


def _yes_no(value: bool | None) -> str:
    return "–" if value is None else ("yes" if value else "no")


def _label(cmp: Comparison) -> str:
    return cmp.table.group or cmp.table.task


def render_rich(cmp: Comparison) -> Any:
    """A Rich table: one row per column of our table (alignment: noise level), per row (model) ``ours`` over
    ``reference  difference``, then tau and whether the reference's best is within 1 point of our best."""
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    metric = cmp.table.metric
    rows_name = cmp.table.row_axis.name
    title = f"{_label(cmp)} — {metric.key}: ours vs {cmp.reference.name} (ours − reference)"
    caption = Text(
        f"each cell: our {cmp.table.family.table.statistic if not cmp.table.derived else 'mean'} (marks as in "
        f"`gaptui table`), below it the reference's and the difference; τ = Kendall tau-b of the "
        f"{rows_name} order (baselines left out); best ≤1 = the reference's best {rows_name} is best or within 1 "
        f"point of our best. Reference: {cmp.reference.source}",
        style="dim",
    )
    if cmp.protocol is not None:
        *same, verdict = cmp.protocol.lines()
        caption.append("\n" + "\n".join(same), style="dim")
        caption.append("\n" + verdict, style="bold yellow" if cmp.protocol.differs else "green")
    table = Table(title=escape(title), caption=caption, caption_justify="left", show_lines=True)
    column_axis = cmp.table.column_axis
    table.add_column(column_axis.prefix.rstrip("=") or column_axis.name)
    for row in cmp.rows:
        table.add_column(row, justify="right", style="dim" if row in cmp.table.baselines else "")
    table.add_column("τ", justify="right")
    table.add_column("best ≤1", justify="center")
    for column in cmp.table.columns:
        line: list[Any] = [column_axis.format(column)]
        for row in cmp.rows:
            ours, theirs = cmp.pair(row, column)
            text = Text()
            if ours is None:
                text.append(analysis.EMPTY, style="dim")
            else:
                marker = analysis.MARKERS[ours.mark]
                text.append(analysis.format_number(ours.median, metric) + (f" {marker}" if marker else ""))
                text.stylize(analysis.RICH_STYLES[ours.mark])
            text.append("\n")
            if theirs is None:
                text.append(f"{analysis.EMPTY}", style="dim")
            else:
                text.append(analysis.format_number(theirs.median, metric), style="dim")
                diff = cmp.difference(row, column)
                if diff is not None:
                    text.append(f" {_signed(diff, metric)}", style="bold")
            line.append(text)
        agreement = cmp.agreement[column]
        line.append("–" if agreement.tau is None else f"{agreement.tau:+.2f}")
        best = _yes_no(agreement.best_within_1)
        line.append(Text(best, style={"yes": "green", "no": "red"}.get(best, "dim")))
        table.add_row(*line)
    return table


def render_markdown(comparisons: Sequence[Comparison]) -> str:
    """One Markdown section per table: ``ours / reference (difference)`` cells, tau and best-within-1 columns."""
    out: list[str] = []
    for cmp in comparisons:
        metric = cmp.table.metric
        column_axis = cmp.table.column_axis
        out.append(f"## {_label(cmp)}: ours vs {cmp.reference.name}\n")
        out.append(f"{metric.key}, ours / reference (ours − reference). Reference: {cmp.reference.source}\n")
        if cmp.protocol is not None:
            out.append("".join(f"- {line}\n" for line in cmp.protocol.lines()))
        head = column_axis.prefix.rstrip("=") or column_axis.name
        out.append(f"| {head} | " + " | ".join(cmp.rows) + " | tau | reference best within 1 |")
        out.append("|---|" + "---:|" * len(cmp.rows) + "---:|:---:|")
        for column in cmp.table.columns:
            cells = []
            for row in cmp.rows:
                ours, theirs = cmp.pair(row, column)
                left = analysis.EMPTY if ours is None else analysis.format_number(ours.median, metric)
                right = analysis.EMPTY if theirs is None else analysis.format_number(theirs.median, metric)
                diff = cmp.difference(row, column)
                cells.append(f"{left} / {right}" + ("" if diff is None else f" ({_signed(diff, metric)})"))
            agreement = cmp.agreement[column]
            tau = "–" if agreement.tau is None else f"{agreement.tau:+.2f}"
            out.append(
                f"| {column_axis.format(column)} | "
                + " | ".join(cells)
                + f" | {tau} | {_yes_no(agreement.best_within_1)} |"
            )
        out.append("")
    return "\n".join(out)


def _centre(table: analysis.RankingTable) -> str:
    return "mean" if table.derived else table.family.table.statistic


def _head(cmp: Comparison) -> dict[str, Any]:
    layout = cmp.table.layout
    if cmp.table.derived:
        return {"table": cmp.table.group}
    return {layout.group: cmp.table.group} if layout.group else {}


def csv_columns(cmp: Comparison) -> tuple[str, ...]:
    """The CSV header of one comparison (alignment: dataset, model, noise, median, reference_median, ...)."""
    layout = cmp.table.layout
    centre = _centre(cmp.table)
    return (*_head(cmp), layout.rows, layout.columns, centre, f"reference_{centre}", "reference_std", "difference")


def render_csv(comparisons: Sequence[Comparison]) -> str:
    """One row per (group, row, column) of our tables' columns, in the metric's own units; one header per kind of
    table (a new header line where the columns change)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    header: tuple[str, ...] | None = None
    for cmp in comparisons:
        if csv_columns(cmp) != header:
            header = csv_columns(cmp)
            writer.writerow(header)
        head = list(_head(cmp).values())
        for row in cmp.rows:
            for column in cmp.table.columns:
                ours, theirs = cmp.pair(row, column)
                if ours is None and theirs is None:
                    continue
                diff = cmp.difference(row, column)
                writer.writerow(
                    [
                        *head,
                        row,
                        column,
                        "" if ours is None else ours.median,
                        "" if theirs is None else theirs.median,
                        "" if theirs is None or theirs.std is None else theirs.std,
                        "" if diff is None else round(diff, 12),
                    ]
                )
    return buffer.getvalue()


def comparison_json(cmp: Comparison) -> dict[str, Any]:
    """JSON form of one comparison (metric units); cells and agreement keyed by the table's axis keys."""
    layout = cmp.table.layout
    centre = _centre(cmp.table)
    cells = []
    for row in cmp.rows:
        for column in cmp.table.columns:
            ours, theirs = cmp.pair(row, column)
            if ours is None and theirs is None:
                continue
            cells.append(
                {
                    layout.rows: row,
                    layout.columns: column,
                    centre: None if ours is None else ours.median,
                    f"reference_{centre}": None if theirs is None else theirs.median,
                    "reference_std": None if theirs is None else theirs.std,
                    "difference": cmp.difference(row, column),
                }
            )
    return {
        "task": cmp.table.task,
        **_head(cmp),
        "metric": cmp.table.metric.key,
        "reference": cmp.reference.name,
        "source": cmp.reference.source,
        "protocol": None if cmp.protocol is None else cmp.protocol.as_dict(),
        "cells": cells,
        "agreement": [
            {
                layout.columns: a.column,
                f"{layout.rows}s": list(a.rows),
                "kendall_tau": a.tau,
                "reference_best": list(a.reference_best),
                "reference_best_within_1": a.best_within_1,
            }
            for a in cmp.agreement.values()
        ],
    }
