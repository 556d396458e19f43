"""Ranking tables and gaps over finished runs (paper Table D.3, section 5, Table 1), plus their renderers.

Everything here is a pure function of run records (the dicts stored in the history); the only I/O is
:func:`export_all`. What a table is made of comes from the run's task family (:mod:`engine.tasks`): its
:class:`~engine.tasks.TableLayout` says which axis makes one table per value (alignment: dataset), which axis gives
the rows (model) and which the columns (noise); its declared :class:`~engine.tasks.Metric` gives the direction
(never guessed from a name), the unit and the display name. Records are grouped once, so building every table of
a 2,000-run history is a single pass.

Statistics
    A cell is one (group, row, column). Its value is the **median** over seeds of one metric and its spread the
    **sample standard deviation** (``ddof=1``; 0 for a single run). Only ``status == "done"`` records with a finite
    numeric value of the metric count. When one seed was run more than once (a re-run), the run that finished last
    stands for that seed, so a cell never holds more values than seeds.

Units
    Metrics declared with unit ``%`` are shares in [0, 1] and are shown in percent with one decimal, like
    Table D.3 ("97.6 ± 0.4"). Other metrics (losses, MAE) are shown as they are, with three decimals.
    Machine-readable outputs (CSV, JSON) keep the metric's own units (shares for accuracies).

Marks (per column, paper colours: red = best and within 1 %, blue = within 3 %)
    The best cell has the best median among rows that are not baselines (alignment: the Laplacian baseline is
    shown but is never marked and never counts as the best). Ties all get ``best``. Another cell is ``within1``
    when its median is at most 1 **absolute percentage point** from the best (shares, e.g. 96.6 vs 97.6),
    ``within3`` when at most 3 points. For metrics that are not shares percentage points mean nothing, so the
    thresholds are relative: within 1 % (3 %) of the best value. Comparisons use the unrounded medians with a
    1e-9 tolerance. Without colour the marks read as suffixes: ``**`` best, ``*`` within 1, ``+`` within 3.

Gap (paper section 5)
    In each column, gap(row) = median(row) − median(worst non-baseline row), measured in the better direction
    (so it is >= 0 for losses too); the spread is best − worst. The optimal column maximises the spread; ties go
    to the first column (the lower noise level for alignment).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.markup import escape

from engine.errors import GaptuiError, unknown
from engine.files import refuse_foreign, staged_files, written_by
from engine.tasks import DEFAULT_TASK, FAMILIES, Axis, DerivedTable, Metric, TableLayout, TaskFamily, family

FORMATS = ("text", "md", "csv", "latex", "json")

BEST = "best"
WITHIN_1 = "within1"
WITHIN_3 = "within3"
#: Thresholds in percentage points (shares) or percent of the best value (other metrics).
WITHIN_1_POINTS = 1.0
WITHIN_3_POINTS = 3.0
#: Plain-text suffix of each mark, so the ranking survives without colour.
MARKERS = {BEST: "**", WITHIN_1: "*", WITHIN_3: "+", "": ""}
#: Suffix of a cell not significantly different from the best (Holm-corrected Welch p >= SIGNIFICANCE).
TIED_MARKER = "†"
SIGNIFICANCE = 0.05
RICH_STYLES = {BEST: "bold red", WITHIN_1: "red", WITHIN_3: "blue", "": ""}
EMPTY = "–"
_TOLERANCE = 1e-9

CELL_FIELDS = ("median", "std", "runs", "planned", "mark", "tied")
EXPORT_FILES = ("tables.csv", "tables.md", "tables.tex", "runs.json")
EXPORT_MANIFEST = ".gaptui-export.json"


# ------------------------------------------------------------------------------------------ records and metadata


def record_task(record: dict[str, Any]) -> str:
    """The task family of a record (records written before families were alignment runs)."""
    return str(record.get("task") or DEFAULT_TASK)


def task_records(records: Iterable[dict[str, Any]], task: str) -> list[dict[str, Any]]:
    """The records of one task family."""
    return [r for r in records if record_task(r) == task]


def axis_value(record: dict[str, Any], key: str) -> Any:
    """The value of axis ``key`` of a record (``None`` when the record has no such axis)."""
    return (record.get("axes") or {}).get(key)


def record_tasks(records: Iterable[dict[str, Any]]) -> list[str]:
    """Families present in ``records`` (registered ones first, in registry order), for pickers."""
    present = {record_task(r) for r in records}
    known = [name for name in FAMILIES.names() if name in present]
    return known + sorted(present - set(known))


def check_task(task: str) -> TaskFamily:
    """The family ``task`` or :class:`GaptuiError` with a did-you-mean."""
    return family(task)


def format_number(value: float, metric: Metric) -> str:
    """One value in display units: ``97.6`` for a share of 0.976, ``0.123`` for a loss."""
    return f"{value * 100:.1f}" if metric.share else f"{value:.3f}"


def display_scale(metric: Metric) -> float:
    """Factor from the metric's units to display units (100 for shares, else 1)."""
    return 100.0 if metric.share else 1.0


def known_metrics(records: Iterable[dict[str, Any]], task: str = DEFAULT_TASK) -> list[str]:
    """The metrics ``task`` declares plus the declared-by-pattern ones found in its finished records."""
    fam = family(task)
    found = {m.key for m in fam.metrics}
    for rec in records:
        if rec.get("status") == "done" and record_task(rec) == task:
            for key, value in (rec.get("metrics") or {}).items():
                if key not in found and numeric_value(value) is not None:
                    try:
                        fam.metric(key)
                    except GaptuiError:
                        continue  # undeclared: its direction is unknown, so it is never ranked
                    found.add(key)
    declared = [m.key for m in fam.metrics]
    return declared + sorted(found - set(declared))


def check_metric(metric: str | None, records: Iterable[dict[str, Any]], task: str = DEFAULT_TASK) -> Metric:
    """The declared metric (``None``: the family's default) or :class:`GaptuiError` with a did-you-mean."""
    fam = family(task)
    key = metric or fam.default_metric
    choices = known_metrics(records, task)
    if key not in choices:
        raise unknown("metric", key, choices)
    return fam.metric(key)


def check_format(fmt: str, choices: Sequence[str] = FORMATS) -> str:
    """Return ``fmt`` or raise :class:`GaptuiError` with a did-you-mean suggestion."""
    if fmt not in choices:
        raise unknown("format", fmt, choices)
    return fmt


def done_groups(records: Iterable[dict[str, Any]], task: str = DEFAULT_TASK) -> list[str]:
    """Sorted table-group labels (alignment: dataset labels) of ``task`` with at least one finished run."""
    key = family(task).table.group
    done = [r for r in records if r.get("status") == "done" and record_task(r) == task]
    if key is None:
        return [""] if done else []
    return sorted({str(axis_value(r, key)) for r in done})


def check_group(group: str, records: Iterable[dict[str, Any]], task: str = DEFAULT_TASK) -> str:
    """Return ``group`` or raise :class:`GaptuiError` naming the labels with finished runs."""
    fam = family(task)
    labels = done_groups(records, task)
    if fam.table.group is None:
        raise GaptuiError(f"task '{task}' has a single table: there is no {fam.table.rows} group to choose")
    if group not in labels:
        raise unknown(fam.axis(fam.table.group).name, group, labels)
    return group


# ------------------------------------------------------------------------------------------ tables


@dataclass(frozen=True)
class Cell:
    """One (group, row, column) entry: the centre (median, or mean when the layout says so) and sample std over
    seeds, in the metric's own units."""

    group: str
    row: str
    column: Any
    values: tuple[float, ...]
    median: float
    std: float
    planned: int | None
    mark: str = ""
    #: The seed of each value, in the same order (empty for a derived table's cells, which average over seeds).
    seeds: tuple[Any, ...] = ()
    #: Not significantly different from the column's best (Holm-corrected Welch p >= 0.05; :mod:`gaptui.statistics`).
    tied: bool = False

    @property
    def runs(self) -> int:
        """Number of seeds that finished."""
        return len(self.values)

    @property
    def incomplete(self) -> bool:
        """Fewer finished seeds than the preset planned."""
        return self.planned is not None and self.runs < self.planned

    def text(self, metric: Metric) -> str:
        """Display text without mark, e.g. ``97.6 ± 0.4`` or ``97.6 ± 0.4 (3/10)``."""
        body = f"{format_number(self.median, metric)} ± {format_number(self.std, metric)}"
        return f"{body} ({self.runs}/{self.planned})" if self.incomplete else body

    def marked_text(self, metric: Metric) -> str:
        """:meth:`text` plus the mark's suffix (``**``, ``*``, ``+``) and ``†`` when tied with the best."""
        return (
            self.text(metric)
            + (f" {MARKERS[self.mark]}" if self.mark else "")
            + (f" {TIED_MARKER}" if self.tied else "")
        )


@dataclass(frozen=True)
class RankingTable:
    """One ranking table of a task family: rows and columns as its layout says (alignment: models x noise)."""

    task: str
    group: str
    metric: Metric
    rows: tuple[str, ...]
    columns: tuple[Any, ...]
    cells: dict[tuple[str, Any], Cell] = field(repr=False)
    #: A family's derived table (:class:`engine.tasks.DerivedTable`) has its own axes and statistic.
    derived: bool = False
    layout_override: TableLayout | None = None
    statistic: str = "median ± std over seeds"

    @property
    def family(self) -> TaskFamily:
        return family(self.task)

    @property
    def layout(self) -> TableLayout:
        return self.layout_override or self.family.table

    @property
    def row_axis(self) -> Axis:
        return self.family.axis(self.layout.rows)

    @property
    def column_axis(self) -> Axis:
        return self.family.axis(self.layout.columns)

    @property
    def baselines(self) -> tuple[str, ...]:
        return self.layout.baselines

    def cell(self, row: str, column: Any) -> Cell | None:
        """The cell, or None when the row has no finished run in this column."""
        return self.cells.get((row, column))

    def best(self, column: Any) -> list[Cell]:
        """The cells marked best in this column (several on a tie; empty without non-baseline rows)."""
        return [c for r in self.rows if (c := self.cell(r, column)) is not None and c.mark == BEST]

    def iter_cells(self) -> Iterable[Cell]:
        """All non-empty cells, row by row."""
        for row in self.rows:
            for column in self.columns:
                if (c := self.cell(row, column)) is not None:
                    yield c

    def header(self, column: Any) -> str:
        """Column header, e.g. ``η=0.12``."""
        return self.column_axis.header(column)

    def coordinates(self, cell: Cell) -> dict[str, Any]:
        """The cell's axis values keyed by axis key (``{"dataset": ..., "model": ..., "noise": ...}``); a derived
        table's cells name the table under ``table``."""
        layout = self.layout
        out: dict[str, Any] = {layout.group: cell.group} if layout.group else {}
        if self.derived:
            out["table"] = self.group
        return {**out, layout.rows: cell.row, layout.columns: cell.column}

    def cell_dict(self, cell: Cell) -> dict[str, Any]:
        """JSON/CSV form of a cell, in the metric's own units."""
        values = {self.family.table.statistic: cell.median, "std": cell.std, "runs": cell.runs, "planned": cell.planned}
        return {**self.coordinates(cell), **values, "mark": cell.mark, "tied": cell.tied}

    def csv_columns(self) -> tuple[str, ...]:
        layout = self.layout
        return tuple(k for k in (layout.group, layout.rows, layout.columns) if k) + (
            self.family.table.statistic,
            *CELL_FIELDS[1:],
        )


def numeric_value(value: Any) -> float | None:
    """``value`` as a float when it is a finite number (never a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _planned(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _mark(median: float, best: float, metric: Metric) -> str:
    distance = abs(best - median)
    if distance <= _TOLERANCE:
        return BEST
    if metric.share:
        points = distance * 100.0
    elif best != 0:
        points = distance / abs(best) * 100.0
    else:
        return ""
    if points <= WITHIN_1_POINTS + _TOLERANCE:
        return WITHIN_1
    if points <= WITHIN_3_POINTS + _TOLERANCE:
        return WITHIN_3
    return ""


def build_tables(
    records: Iterable[dict[str, Any]],
    metric: str | Metric | None = None,
    group: str | None = None,
    *,
    task: str = DEFAULT_TASK,
) -> list[RankingTable]:
    """One :class:`RankingTable` per group label (sorted) of ``task``, from finished records holding ``metric``.

    ``metric`` defaults to the family's ``default_metric``. ``planned`` of a cell is the largest
    ``planned_seeds`` of any record (any status) in that cell, so a grid still running shows "3/10". Groups,
    rows and columns appear only once a run of them has finished.
    """
    fam = family(task)
    layout = fam.table
    m = metric if isinstance(metric, Metric) else fam.metric(metric or fam.default_metric)
    row_axis, col_axis = fam.axis(layout.rows), fam.axis(layout.columns)
    records = list(records)
    # seed -> (finished, value): the last finished run of a seed wins.
    per_seed: dict[tuple[str, str, Any], dict[Any, tuple[str, float]]] = defaultdict(dict)
    planned: dict[tuple[str, str, Any], int] = {}
    for rec in records:
        if record_task(rec) != task:
            continue
        label = "" if layout.group is None else str(axis_value(rec, layout.group))
        if group is not None and label != group:
            continue
        try:
            key = (
                label,
                row_axis.key_of(axis_value(rec, layout.rows)),
                col_axis.key_of(axis_value(rec, layout.columns)),
            )
        except (TypeError, ValueError):
            continue
        if (p := _planned(rec.get("planned_seeds"))) is not None:
            planned[key] = max(p, planned.get(key, 0))
        if rec.get("status") != "done":
            continue
        value = numeric_value((rec.get("metrics") or {}).get(m.key))
        if value is None:
            continue
        finished = str(rec.get("finished") or "")
        seeds = per_seed[key]
        seed = rec.get("seed")
        if seed not in seeds or finished >= seeds[seed][0]:
            seeds[seed] = (finished, value)

    grouped: dict[str, dict[tuple[str, Any], tuple[float, ...]]] = defaultdict(dict)
    seeds_of: dict[tuple[str, str, Any], tuple[Any, ...]] = {}
    for (label, row, column), seeds in per_seed.items():
        grouped[label][(row, column)] = tuple(v for _, v in seeds.values())
        seeds_of[(label, row, column)] = tuple(seeds)

    tables = []
    for label in sorted(grouped):
        cells_values = grouped[label]
        rows = tuple(sorted({r for r, _ in cells_values}, key=row_axis.sort_key))
        columns = tuple(sorted({c for _, c in cells_values}, key=col_axis.sort_key))
        # "median" keeps its name for either statistic: it is the cell's centre (the layout says which).
        centre = statistics.mean if layout.statistic == "mean" else statistics.median
        medians = {k: centre(v) for k, v in cells_values.items()}
        best_at = _best_per_column(medians, m, layout.baselines)
        cells = {}
        for (row, column), values in cells_values.items():
            median = medians[(row, column)]
            mark = "" if row in layout.baselines or column not in best_at else _mark(median, best_at[column], m)
            cells[(row, column)] = Cell(
                group=label,
                row=row,
                column=column,
                values=values,
                median=median,
                std=statistics.stdev(values) if len(values) > 1 else 0.0,
                planned=planned.get((label, row, column)),
                mark=mark,
                seeds=seeds_of[(label, row, column)],
            )
        tables.append(_with_ties(RankingTable(task, label, m, rows, columns, cells)))
    done = [r for r in records if record_task(r) == task and r.get("status") == "done"]
    for derived in fam.derived_tables(done, m.key) if done else []:
        if group is None or group == derived.name:
            tables.append(_derived_table(task, derived))
    return tables


def _with_ties(table: RankingTable) -> RankingTable:
    """``table`` with :attr:`Cell.tied` set on the cells not significantly different from their column's best."""
    from gaptui.statistics import ties_with_best

    cells = dict(table.cells)
    for column in table.columns:
        for row in ties_with_best(table, column, SIGNIFICANCE):
            cells[(row, column)] = dataclasses.replace(cells[(row, column)], tied=True)
    return dataclasses.replace(table, cells=cells)


def _derived_table(task: str, derived: DerivedTable) -> RankingTable:
    """A family's :class:`DerivedTable` as a ranking table: cells are means ± sample std, best marked per column."""
    fam = family(task)
    row_axis, col_axis = fam.axis(derived.rows), fam.axis(derived.columns)
    values = {k: tuple(v) for k, v in derived.values.items() if v}
    means = {k: statistics.fmean(v) for k, v in values.items()}
    best_at = _best_per_column(means, derived.metric, ())
    cells = {
        (row, column): Cell(
            group=derived.name,
            row=row,
            column=column,
            values=v,
            median=means[(row, column)],
            std=statistics.stdev(v) if len(v) > 1 else 0.0,
            planned=None,
            mark=_mark(means[(row, column)], best_at[column], derived.metric),
        )
        for (row, column), v in values.items()
    }
    return RankingTable(
        task,
        derived.name,
        derived.metric,
        tuple(sorted({r for r, _ in values}, key=row_axis.sort_key)),
        tuple(sorted({c for _, c in values}, key=col_axis.sort_key)),
        cells,
        derived=True,
        layout_override=TableLayout(None, derived.rows, derived.columns),
        statistic=derived.statistic,
    )


def _best_per_column(medians: dict[tuple[str, Any], float], metric: Metric, baselines: tuple[str, ...]) -> dict:
    pick = max if metric.higher_is_better else min
    by_column: dict[Any, list[float]] = defaultdict(list)
    for (row, column), median in medians.items():
        if row not in baselines:
            by_column[column].append(median)
    return {column: pick(values) for column, values in by_column.items()}


# ------------------------------------------------------------------------------------------ gap


@dataclass(frozen=True)
class GapAnalysis:
    """Gap to the worst non-baseline row per column (metric units), and the optimal column."""

    table: RankingTable = field(repr=False)
    columns: tuple[Any, ...]
    rows: tuple[str, ...]
    gaps: dict[str, dict[Any, float]]
    spread: dict[Any, float]
    optimal: Any | None

    @property
    def group(self) -> str:
        return self.table.group

    @property
    def metric(self) -> Metric:
        return self.table.metric

    def as_dict(self) -> dict[str, Any]:
        """JSON form, in the metric's own units."""
        layout = self.table.family.table
        head = {layout.group: self.group} if layout.group else {}
        return {
            "task": self.table.task,
            **head,
            "metric": self.metric.key,
            "column_axis": layout.columns,
            "optimal": self.optimal,
            "spread": [{layout.columns: c, "spread": self.spread[c]} for c in self.columns],
            "gaps": [
                {layout.rows: r, layout.columns: c, "gap": self.gaps[r][c]}
                for r in self.rows
                for c in self.columns
                if c in self.gaps[r]
            ],
        }


def gap_analysis(table: RankingTable) -> GapAnalysis:
    """Gaps and optimal column of one table; baseline rows are left out (they are not trained)."""
    sign = 1.0 if table.metric.higher_is_better else -1.0
    trained = tuple(r for r in table.rows if r not in table.baselines)
    gaps: dict[str, dict[Any, float]] = {r: {} for r in trained}
    spread: dict[Any, float] = {}
    for column in table.columns:
        # Scores in the better direction, so "worst" is the minimum for every metric.
        scores = {r: sign * c.median for r in trained if (c := table.cell(r, column)) is not None}
        if not scores:
            continue
        worst = min(scores.values())
        for row, score in scores.items():
            gaps[row][column] = score - worst
        spread[column] = max(scores.values()) - worst
    columns = tuple(c for c in table.columns if c in spread)
    optimal = None
    for column in columns:  # in column order, and only a strictly larger spread moves it: ties keep the first
        if optimal is None or spread[column] > spread[optimal] + _TOLERANCE:
            optimal = column
    return GapAnalysis(table, columns, trained, gaps, spread, optimal)


# ------------------------------------------------------------------------------------------ renderers


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
    if table.baselines:
        names = ", ".join(table.baselines)
        parts.append(("", f"({names} = training-free baseline, never marked; (k/n) = k of n planned seeds)"))
    else:
        parts.append(("", "((k/n) = k of n planned seeds)"))
    if any(c.tied for c in table.cells.values()):
        parts.insert(
            3, ("", f"{TIED_MARKER} not significantly different from the best (Holm-corrected Welch p ≥ 0.05)")
        )
    return parts


def legend(table: RankingTable) -> str:
    """The meaning of marks and counts, in words (used by every renderer)."""
    parts = [words for _, words in legend_parts(table)]
    return ", ".join(parts[:-1]) + " " + parts[-1]


def _optimal_line(gap: GapAnalysis) -> str:
    axis = gap.table.column_axis
    return f"optimal {axis.name} (largest best − worst spread): {axis.format(gap.optimal)}"


def _split_columns(widths: Sequence[int], fixed: int, width: int | None) -> list[list[int]]:
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
    if gap is not None and gap.optimal is not None and len(table.columns) > 1:
        caption.append("\n" + _optimal_line(gap))
    headers = [table.header(c) for c in table.columns]
    row_name = table.row_axis.name
    # Rich draws one space of padding each side and one border per column.
    widths = [
        3 + max(len(h), *(len(c.marked_text(table.metric)) for r in table.rows if (c := table.cell(r, col))))
        for h, col in zip(headers, table.columns, strict=True)
    ]
    fixed = 4 + max(len(row_name), *map(len, table.rows))
    groups = _split_columns(widths, fixed, width)
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
        if gap.optimal is not None and len(table.columns) > 1:
            out.append(_optimal_line(gap)[0].upper() + _optimal_line(gap)[1:] + ".")
        out.append("")
    return "\n".join(out)


def render_csv(tables: Sequence[RankingTable], task: str = DEFAULT_TASK) -> str:
    """One row per cell: the cell's axes (group, row, column), median, std, runs, planned, mark (metric units)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    columns = tables[0].csv_columns() if tables else csv_columns(task)
    if any(t.derived for t in tables):
        columns = ("table", *columns)
    writer.writerow(columns)
    for table in tables:
        for c in table.iter_cells():
            row = table.cell_dict(c)
            writer.writerow(["" if row.get(k) is None else row[k] for k in columns])
    return buffer.getvalue()


def csv_columns(task: str = DEFAULT_TASK) -> tuple[str, ...]:
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
        return f"\\textbf{{{body}}}$^{{**}}$"
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
        out.append("\\begin{tabular}{l" + "r" * len(table.columns) + "}")
        out.append("\\toprule")
        header = " & ".join(_latex_header(table, c) for c in table.columns)
        out.append(f"{latex_escape(table.group or table.row_axis.name)} & {header} \\\\")
        out.append("\\midrule")
        for row in table.rows:
            cells = " & ".join(_latex_cell(table.cell(row, c), table.metric) for c in table.columns)
            out.append(f"{latex_escape(row)} & {cells} \\\\")
            if row in table.baselines and len(table.rows) > 1:
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
                "cells": [{**table.cell_dict(c), "display": c.text(table.metric)} for c in table.iter_cells()],
            }
        )
    return docs


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
    groups = _split_columns(widths, 4 + max(map(len, values)), width)
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


def draw_gap_plot(plt: Any, gap: GapAnalysis, short: bool = False) -> None:
    """Draw the gap of each row against the column axis on a plotext module or a widget's ``plt``.

    Numeric columns (noise) are placed at their values, others one tick apart; each row has its own marker so
    the plot reads without colour; the optimal column is a red vertical line. ``short`` titles fit 80 columns.
    """
    table = gap.table
    axis = table.column_axis
    scale = display_scale(gap.metric)
    numeric = axis.numeric
    position = {c: (float(c) if numeric else float(i)) for i, c in enumerate(gap.columns)}
    for i, row in enumerate(gap.rows):
        xs = [c for c in gap.columns if c in gap.gaps[row]]
        if xs:
            ys = [gap.gaps[row][c] * scale for c in xs]
            plt.plot([position[c] for c in xs], ys, label=row, marker=_PLOT_MARKERS[i % len(_PLOT_MARKERS)])
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
    draw_gap_plot(plt, gap)
    text = plt.build()
    plt.clear_figure()
    return text if color else plt.uncolorize(text)


# ------------------------------------------------------------------------------------------ export


def export_all(
    records: Sequence[dict[str, Any]],
    out_dir: Path,
    metric: str | None = None,
    force: bool = False,
    task: str = DEFAULT_TASK,
) -> list[Path]:
    """Write ``tables.csv``, ``tables.md``, ``tables.tex`` (``task``'s tables) and ``runs.json`` into ``out_dir``.

    ``runs.json`` holds the records of ``task`` (all of its records, finished or not).

    The files are written all or none (temporary siblings renamed into place once all are written), so a full
    disk leaves the folder as it was. A file of the same name is replaced only when a previous export wrote it
    (listed in ``.gaptui-export.json``) or when ``force`` is set; otherwise nothing is written and
    :class:`GaptuiError` names the file. Returns the paths written, manifest last.
    """
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise GaptuiError(f"export folder {out_dir} exists and is not a folder")
    if not force:
        refuse_foreign(out_dir, list(EXPORT_FILES), written_by(out_dir, EXPORT_MANIFEST), "gaptui export")
    out_dir.mkdir(parents=True, exist_ok=True)
    records = task_records(records, task)
    tables = build_tables(records, metric, task=task)
    metric_key = tables[0].metric.key if tables else metric or family(task).default_metric
    contents = {
        "tables.csv": render_csv(tables, task),
        "tables.md": render_markdown(tables),
        "tables.tex": render_latex(tables),
        "runs.json": json.dumps(list(records), indent=2, sort_keys=True, default=str) + "\n",
    }
    manifest = {
        "files": list(EXPORT_FILES),
        "task": task,
        "metric": metric_key,
        "runs": len(records),
        "tables": len(tables),
    }
    contents[EXPORT_MANIFEST] = json.dumps(manifest, indent=2) + "\n"
    written = [out_dir / name for name in (*EXPORT_FILES, EXPORT_MANIFEST)]
    with staged_files() as stage:
        for path in written:
            stage(path).write_text(contents[path.name], encoding="utf-8")
    return written
