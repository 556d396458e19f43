"""Renderers of ranking tables and gaps: Rich (terminal), plain text, Markdown, CSV, LaTeX, JSON, the gap table
and the gap plot (plotext)."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from typing import Any

from rich.markup import escape

from engine.tasks import Metric, family
from gaptui.analysis.gap import GapAnalysis, gap_analysis
from gaptui.analysis.lookup import display_scale, format_number
from gaptui.analysis.tables import (
    BEST,
    CELL_FIELDS,
    EMPTY,
    MARKERS,
    RICH_STYLES,
    TIED_MARKER,
    WITHIN_1,
    WITHIN_3,
    Cell,
    RankingTable,
)


def table_title(table: RankingTable) -> str:
    """``er — LAP acc (%), median ± std over seeds; higher is better`` (the group is left out when there is one)."""
    unit = f" ({table.metric.unit})" if table.metric.unit else ""
    head = f"{table.group} — " if table.group else f"{table.task} — "
    statistic = table.statistic if table.derived else f"{table.family.table.statistic} ± std over seeds"
    return f"{head}{table.metric.name}{unit}, {statistic}; {table.metric.direction} is better"


def legend_parts(table: RankingTable) -> list[tuple[str, str]]:
    """(mark, words) pairs of the legend; mark "" is plain text."""
    unit = "percentage point" if table.metric.share else "% of the best value"
    parts = [
        (BEST, f"{MARKERS[BEST]} best"),
        (WITHIN_1, f"{MARKERS[WITHIN_1]} within 1 {unit}"),
        (WITHIN_3, f"{MARKERS[WITHIN_3]} within 3"),
    ]
    references = [r for r in table.baselines if r not in table.bounds]
    for bound in table.layout.bounds_of(table.metric.key) if table.bounds else ():
        if bound.name in table.bounds:
            parts.append(("", f"({bound.name} = {bound.note})" if bound.note else f"({bound.name})"))
    if references:
        names = ", ".join(references)
        note = table.layout.reference_note
        parts.append(("", f"({names} = {note}, never marked; (k/n) = k of n planned seeds)"))
    else:
        parts.append(("", "((k/n) = k of n planned seeds)"))
    if any(c.tied for c in table.cells.values()):
        parts.insert(
            3, ("", f"{TIED_MARKER} not significantly different from the best (Holm-corrected Welch p ≥ 0.05)")
        )
    return parts


def protocol_line(table: RankingTable) -> str:
    """The table's protocol in one line (:class:`gaptui.analysis.cells.TableProtocol`), ``""`` without one."""
    return table.protocol.line() if table.protocol is not None else ""


def protocol_lines(tables: Sequence[RankingTable]) -> list[str]:
    """What the runs of a section were run with: one line per table (``er: protocol: epochs 20 · ...``), then a
    blank line; none for tables without a protocol."""
    lines = []
    for table in tables:
        if line := protocol_line(table):
            lines.append(f"- {table.group}: {line}" if table.group else f"- {line}")
    return [*lines, ""] if lines else []


def legend(table: RankingTable) -> str:
    """The meaning of marks and counts, in words (used by every renderer)."""
    parts = [words for _, words in legend_parts(table)]
    return ", ".join(parts[:-1]) + " " + parts[-1]


def optimal_line(gap: GapAnalysis) -> str:
    """The family's "optimal" summary line of a table (``""`` where it declares none or there is no optimum)."""
    table = gap.table
    words = table.family.optimal_line(table.group if table.derived else None)
    if not words or gap.optimal is None or len(table.columns) < 2:
        return ""
    return f"{words}: {table.column_axis.format(gap.optimal)}"


def split_columns(widths: Sequence[int], fixed: int, width: int | None) -> list[list[int]]:
    """Indices of columns grouped so that each group plus the ``fixed`` first column fits in ``width``."""
    if width is None:
        return [list(range(len(widths)))]
    groups: list[list[int]] = [[]]
    used = fixed
    for i, w in enumerate(widths):
        if groups[-1] and used + w > width:
            groups.append([])
            used = fixed
        groups[-1].append(i)
        used += w
    return groups


def render_rich(table: RankingTable, gap: GapAnalysis | None = None, width: int | None = None) -> Any:
    """Rich table(s): best bold red, within 1 red, within 3 blue, ``**``/``*``/``+`` suffixes and a legend.

    With ``width`` (the console's), a grid too wide for it is split into several tables over the columns
    (each repeating the row column) instead of letting Rich squeeze every column to nothing.
    """
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    caption = Text()
    parts = legend_parts(table)
    for i, (mark, words) in enumerate(parts):
        caption.append(", " if 0 < i < len(parts) - 1 else " " if i else "")
        caption.append(words, style=RICH_STYLES[mark])
    if line := protocol_line(table):
        caption.append("\n" + line, style="dim")
    if gap is not None and (line := optimal_line(gap)):
        caption.append("\n" + line)
    headers = [table.header(c) for c in table.columns]
    row_name = table.row_axis.name
    # Rich draws one space of padding each side and one border per column.
    widths = [
        3 + max(len(h), *(len(c.marked_text(table.metric)) for r in table.rows if (c := table.cell(r, col))))
        for h, col in zip(headers, table.columns, strict=True)
    ]
    fixed = 4 + max(len(row_name), *map(len, table.rows))
    groups = split_columns(widths, fixed, width)
    label = table.group or table.task
    rendered = []
    for g, columns in enumerate(groups):
        last = g == len(groups) - 1
        rich_table = Table(
            title=escape(table_title(table) if g == 0 else f"{label} (continued)"),
            caption=caption if last else None,
            caption_justify="left",
            min_width=min(72, width or 72),
        )
        rich_table.add_column(row_name)
        for i in columns:
            rich_table.add_column(headers[i], justify="right")
        for row in table.rows:
            cells: list[Any] = [Text(row, style="dim" if row in table.baselines else "")]
            for i in columns:
                c = table.cell(row, table.columns[i])
                cells.append(
                    Text(EMPTY, style="dim") if c is None else Text(c.marked_text(table.metric), RICH_STYLES[c.mark])
                )
            rich_table.add_row(*cells)
        rendered.append(rich_table)
    return rendered[0] if len(rendered) == 1 else Group(*rendered)


def render_text(tables: Sequence[RankingTable], width: int = 160) -> str:
    """The Rich tables as plain text without colour (what a pipe receives)."""
    from rich.console import Console

    buffer = io.StringIO()
    console = Console(file=buffer, width=width, color_system=None, force_terminal=False)
    for table in tables:
        console.print(render_rich(table, gap_analysis(table), width=width))
    return buffer.getvalue()


def _md_cell(c: Cell | None, metric: Metric) -> str:
    if c is None:
        return EMPTY
    text = c.text(metric)
    marker = MARKERS[c.mark].replace("*", r"\*") + (f" {TIED_MARKER}" if c.tied else "")
    if c.mark == BEST:
        return f"**{text}** {marker}"
    return f"{text} {marker.strip()}" if marker else text


def render_markdown(tables: Sequence[RankingTable]) -> str:
    """GitHub Markdown: one section per table; best in bold; markers escaped so they stay visible."""
    out: list[str] = []
    for table in tables:
        gap = gap_analysis(table)
        out.append(f"## {table.group or table.task}\n")
        out.append(f"{table_title(table)}\n")
        out.append(f"| {table.row_axis.name} | " + " | ".join(table.header(c) for c in table.columns) + " |")
        out.append("|---|" + "---:|" * len(table.columns))
        for row in table.rows:
            cells = [_md_cell(table.cell(row, c), table.metric) for c in table.columns]
            out.append(f"| {row} | " + " | ".join(cells) + " |")
        out.append("")
        out.append(legend(table).replace("*", r"\*") + ".")
        if line := protocol_line(table):
            out.append("")
            out.append(line[0].upper() + line[1:] + ".")
        if line := optimal_line(gap):
            out.append(line[0].upper() + line[1:] + ".")
        out.append("")
    return "\n".join(out)


def render_csv(tables: Sequence[RankingTable], task: str | None = None) -> str:
    """One row per cell: the cell's axes (group, row, column), median, std, runs, planned, mark (metric units).

    Without tables, the header of ``task``'s tables alone (None: no family, so no header either)."""
    if tables:
        columns = tables[0].csv_columns()
    elif task is not None:
        columns = csv_columns(task)
    else:
        return ""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    if any(t.derived for t in tables):
        columns = ("table", *columns)
    writer.writerow(columns)
    for table in tables:
        for c in table.iter_cells():
            row = table.cell_dict(c)
            writer.writerow(["" if row.get(k) is None else row[k] for k in columns])
    return buffer.getvalue()


def csv_columns(task: str) -> tuple[str, ...]:
    """The CSV header of ``task``'s tables: its layout's axis keys, then the cell fields."""
    layout = family(task).table
    return tuple(k for k in (layout.group, layout.rows, layout.columns) if k) + (layout.statistic, *CELL_FIELDS[1:])


_LATEX_SPECIALS = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
}


def latex_escape(text: str) -> str:
    """Escape LaTeX specials (underscores in model and dataset names above all)."""
    return "".join(_LATEX_SPECIALS.get(ch, ch) for ch in text)


def _latex_cell(c: Cell | None, metric: Metric) -> str:
    if c is None:
        return "--"
    body = f"{format_number(c.median, metric)} $\\pm$ {format_number(c.std, metric)}"
    if c.incomplete:
        body += f" ({c.runs}/{c.planned})"
    tie = "$^{\\dagger}$" if c.tied else ""
    if c.mark == BEST:
        return f"\\textbf{{{body}}}$^{{**}}${tie}"
    if c.mark == WITHIN_1:
        return f"\\underline{{{body}}}$^{{*}}${tie}"
    if c.mark == WITHIN_3:
        return f"{body}$^{{+}}${tie}"
    return body + tie


def _latex_header(table: RankingTable, column: Any) -> str:
    axis = table.column_axis
    if axis.prefix == "η=":
        return f"$\\eta={axis.format(column)}$"
    return latex_escape(axis.header(column))


def render_latex(tables: Sequence[RankingTable]) -> str:
    """booktabs tabulars: best ``\\textbf`` + ``**``, within 1 ``\\underline`` + ``*``, within 3 ``+``.

    Needs only ``\\usepackage{booktabs}`` (no colour package), so the marks survive black-and-white printing.
    """
    out: list[str] = []
    for table in tables:
        out.append(f"% {latex_escape(table_title(table))} [{latex_escape(table.metric.key)}]")
        out.append(f"% {latex_escape(legend(table))}")
        if line := protocol_line(table):
            out.append(f"% {latex_escape(line)}")
        out.append("\\begin{tabular}{l" + "r" * len(table.columns) + "}")
        out.append("\\toprule")
        header = " & ".join(_latex_header(table, c) for c in table.columns)
        out.append(f"{latex_escape(table.group or table.row_axis.name)} & {header} \\\\")
        out.append("\\midrule")
        baselines = set(table.baselines)
        for i, row in enumerate(table.rows):
            cells = " & ".join(_latex_cell(table.cell(row, c), table.metric) for c in table.columns)
            out.append(f"{latex_escape(row)} & {cells} \\\\")
            after = table.rows[i + 1] if i + 1 < len(table.rows) else None
            # A rule between reference rows and trained ones, and before the ceilings.
            if after is not None and (
                (row in baselines) != (after in baselines) or after == (table.bounds or ("",))[0]
            ):
                out.append("\\midrule")
        out.append("\\bottomrule")
        out.append("\\end{tabular}")
        out.append("")
    return "\n".join(out)


def tables_json(tables: Sequence[RankingTable]) -> list[dict[str, Any]]:
    """One object per table: task, group, metric, direction, axes, rows, columns, optimal column and the cells."""
    docs = []
    for table in tables:
        gap = gap_analysis(table)
        layout = table.layout
        docs.append(
            {
                "task": table.task,
                **({layout.group: table.group} if layout.group else {}),
                **({"table": table.group, "statistic": table.statistic} if table.derived else {}),
                "metric": table.metric.key,
                "metric_name": table.metric.name,
                "unit": table.metric.unit,
                "higher_is_better": table.metric.higher_is_better,
                "row_axis": layout.rows,
                "column_axis": layout.columns,
                "rows": list(table.rows),
                "columns": list(table.columns),
                "optimal": gap.optimal,
                "protocol": _protocol_json(table),
                "cells": [{**table.cell_dict(c), "display": c.text(table.metric)} for c in table.iter_cells()],
            }
        )
    return docs


def _protocol_json(table: RankingTable) -> dict[str, Any] | None:
    protocol = table.protocol
    if protocol is None:
        return None
    return {
        "settings": {name: list(values) for name, values in protocol.settings},
        "seeds_per_cell": list(protocol.seeds) if protocol.seeds else None,
        "rows_split_by": list(protocol.split),
    }


def render_gap_rich(gap: GapAnalysis, width: int | None = None) -> Any:
    """Rich table(s) of gaps (display units) per row and column plus the spread row; the optimal column bold.

    Split over several tables like :func:`render_rich` when wider than ``width``.
    """
    from rich.console import Group
    from rich.table import Table

    table = gap.table
    unit = "pp" if gap.metric.share else gap.metric.unit or gap.metric.name
    scale = display_scale(gap.metric)
    spread_label = "spread (best − worst)"
    headers = [table.header(c) + (" (optimal)" if c == gap.optimal else "") for c in gap.columns]
    values = {
        row: [f"{gap.gaps[row][c] * scale:.1f}" if c in gap.gaps[row] else EMPTY for c in gap.columns]
        for row in gap.rows
    }
    values[spread_label] = [f"{gap.spread[c] * scale:.1f}" for c in gap.columns]
    widths = [3 + max(len(h), *(len(v[i]) for v in values.values())) for i, h in enumerate(headers)]
    groups = split_columns(widths, 4 + max(map(len, values)), width)
    label = gap.group or table.task
    rendered = []
    for g, columns in enumerate(groups):
        title = f"{label} — gap to the worst {table.row_axis.name} ({unit}, {gap.metric.name})"
        rich_table = Table(title=escape(title if g == 0 else f"{label} (continued)"))
        rich_table.add_column(table.row_axis.name)
        for i in columns:
            bold = "bold" if gap.columns[i] == gap.optimal else ""
            rich_table.add_column(headers[i], justify="right", style=bold, header_style=bold or "bold")
        for row in gap.rows:
            rich_table.add_row(row, *(values[row][i] for i in columns))
        rich_table.add_section()
        rich_table.add_row(spread_label, *(values[spread_label][i] for i in columns))
        rendered.append(rich_table)
    return rendered[0] if len(rendered) == 1 else Group(*rendered)


_PLOT_MARKERS = ("•", "x", "+", "o", "*", "#", "@", "%", "&", "=")


def draw_gap_plot(plt: Any, gap: GapAnalysis, short: bool = False, rows: int = 20) -> None:
    """Draw the gap of each row against the column axis on a plotext module or a widget's ``plt`` (``rows``
    high).

    Numeric columns (noise) are placed at their values, others one tick apart; each row has its own marker so
    the plot reads without colour; the optimal column is a red vertical line. ``short`` titles fit 80 columns.
    The y range leaves the top rows to plotext's legend (drawn over the plot's top left), so it hides no point.
    """
    table = gap.table
    axis = table.column_axis
    scale = display_scale(gap.metric)
    numeric = axis.numeric
    position = {c: (float(c) if numeric else float(i)) for i, c in enumerate(gap.columns)}
    drawn: list[float] = []
    legend = 0  # lines of plotext's legend: one per row drawn
    for i, row in enumerate(gap.rows):
        xs = [c for c in gap.columns if c in gap.gaps[row]]
        if xs:
            ys = [gap.gaps[row][c] * scale for c in xs]
            plt.plot([position[c] for c in xs], ys, label=row, marker=_PLOT_MARKERS[i % len(_PLOT_MARKERS)])
            drawn += ys
            legend += 1
    if drawn:
        low, high = min(*drawn, 0.0), max(drawn)
        span = (high - low) or 1.0
        free = max(3, rows - 7 - legend)  # the plot's rows under the legend (title, ticks and labels take ~7)
        plt.ylim(low, high + span * (legend + 1) / free)
    if gap.optimal is not None:
        plt.vline(position[gap.optimal], "red")
        if short:
            spread = gap.spread[gap.optimal] * scale
            unit = " pp" if gap.metric.share else ""
            plt.title(
                f"gap to the worst {table.row_axis.name} · optimal {table.header(gap.optimal)} "
                f"(spread {spread:.1f}{unit})"
            )
        else:
            label = gap.group or table.task
            plt.title(
                f"{label}: gap to worst {table.row_axis.name}; optimal {axis.name} {axis.format(gap.optimal)} (|)"
            )
    else:
        plt.title(f"{gap.group or table.task}: gap to worst {table.row_axis.name}")
    plt.xticks([position[c] for c in gap.columns], [axis.format(c) for c in gap.columns])
    plt.xlabel(f"{axis.name} {axis.prefix.rstrip('=')}".strip())
    plt.ylabel("gap (pp)" if gap.metric.share else f"gap ({gap.metric.name})")


def render_gap_plot(gap: GapAnalysis, width: int = 80, height: int = 20, color: bool = False) -> str:
    """:func:`draw_gap_plot` on the global plotext module; returns the text (uncoloured unless ``color``)."""
    import plotext as plt

    plt.clear_figure()
    plt.plot_size(width, height)
    plt.theme("pro" if color else "clear")  # "pro" colours the lines without painting a background
    draw_gap_plot(plt, gap, rows=height)
    text = plt.build()
    plt.clear_figure()
    return text if color else plt.uncolorize(text)
