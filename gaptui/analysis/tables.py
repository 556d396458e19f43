"""Ranking tables: cells (centre ± std over seeds), marks, ties and a family's derived tables (see the
package docstring for the statistics and the marks)."""

from __future__ import annotations

import dataclasses
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.tasks import Axis, DerivedTable, Metric, TableLayout, TaskFamily, family
from gaptui.analysis.cells import Entry, Part, TableProtocol, base_row, check_by, split_rows, table_protocol
from gaptui.analysis.lookup import format_number, group_matches, infer_task, numeric_value
from gaptui.analysis.significance import ties_with_best
from gaptui.record import Record, axis_value, record_task

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
    #: Not significantly different from the column's best (Holm-corrected Welch p >= 0.05;
    #: :mod:`gaptui.analysis.significance`).
    tied: bool = False
    #: The run id of each value, in the same order (empty for derived and ceiling cells).
    ids: tuple[str, ...] = ()
    #: A ceiling (:class:`engine.tasks.Bound`), not a row's result: its distinct values, shown without a spread.
    bound: bool = False

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
        if self.bound and len(self.values) == 1:
            return format_number(self.median, metric)
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
    #: The rows that are ceilings (:class:`engine.tasks.Bound` names), after the others.
    bounds: tuple[str, ...] = ()
    #: What the table's runs were run with, and what its rows are split by (:mod:`gaptui.analysis.cells`).
    protocol: TableProtocol | None = None

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
        """The rows never ranked: the layout's references present in this table (with a protocol of their own too,
        ``laplacian (epochs 5)``), and the ceilings."""
        return tuple(r for r in self.rows if r in self.bounds or self.layout.is_baseline(base_row(r)))

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
    records: Iterable[Record],
    metric: str | Metric | None = None,
    group: str | None = None,
    *,
    task: str | None = None,
    by: Sequence[str] = (),
) -> list[RankingTable]:
    """One :class:`RankingTable` per group label (sorted) of ``task``, from finished records holding ``metric``.

    ``task`` None: the one family the records hold runs of (:func:`~gaptui.analysis.lookup.infer_task`: records of
    several families are an error; none, no table). ``metric`` defaults to the family's ``default_metric``.
    Rows are split where a cell's runs differ in protocol, and by the keys ``by`` names
    (:func:`gaptui.analysis.cells.split_rows`: one cell, one protocol). ``planned`` of a cell is the largest
    ``planned_seeds`` of any record (any status) in that cell, so a grid still running shows "3/10". Groups, rows
    and columns appear only once a run of them has finished.
    """
    records = list(records)
    task = infer_task(records, task)
    if task is None:
        return []
    fam = family(task)
    layout = fam.table
    m = metric if isinstance(metric, Metric) else fam.metric(metric or fam.default_metric)
    by_parts = check_by(fam, by, records)
    entries = _entries(fam, records, group)
    rows_of, parts = split_rows(fam, entries, by_parts)
    # seed -> (finished, value, record): the last finished run of a seed wins (a re-run of the same protocol).
    per_seed: dict[tuple[str, str, Any], dict[Any, tuple[str, float, Record]]] = defaultdict(dict)
    planned: dict[tuple[str, str, Any], int] = {}
    bounds = layout.bounds_of(m.key)
    bound_values: dict[tuple[str, str, Any], set[float]] = defaultdict(set)
    for (rec, label, _, column), row in zip(entries, rows_of, strict=True):
        key = (label, row, column)
        if (p := _planned(rec.get("planned_seeds"))) is not None:
            planned[key] = max(p, planned.get(key, 0))
        if rec.get("status") != "done":
            continue
        for bound in bounds:
            if (limit := numeric_value((rec.get("metrics") or {}).get(bound.key))) is not None:
                bound_values[(label, bound.name, column)].add(limit)
        value = numeric_value((rec.get("metrics") or {}).get(m.key))
        if value is None:
            continue
        finished = str(rec.get("finished") or "")
        seeds = per_seed[key]
        seed = rec.get("seed")
        if seed not in seeds or finished >= seeds[seed][0]:
            seeds[seed] = (finished, value, rec)

    grouped: dict[str, dict[tuple[str, Any], dict[Any, tuple[str, float, Record]]]] = defaultdict(dict)
    for (label, row, column), seeds in per_seed.items():
        grouped[label][(row, column)] = seeds
    tables = [
        _ranking_table(fam, m, label, grouped[label], planned, bound_values, parts.get(label, []))
        for label in sorted(grouped)
    ]
    done = [r for r in records if record_task(r) == task and r.get("status") == "done"]
    for derived in fam.derived_tables(done, m.key) if done else []:
        if group is None or group == derived.name:
            tables.append(_derived_table(task, derived, table_protocol(fam, done, ())))
    return tables


def _entries(fam: TaskFamily, records: list[Record], group: str | None) -> list[Entry]:
    """``fam``'s records in ``group`` (None: every group) with their group label, row and column key; records
    whose row or column is no value of the axis are left out."""
    layout = fam.table
    row_axis, col_axis = fam.axis(layout.rows), fam.axis(layout.columns)
    entries: list[Entry] = []
    for rec in records:
        if record_task(rec) != fam.name:
            continue
        label = "" if layout.group is None else str(axis_value(rec, layout.group))
        if group is not None and not group_matches(fam, label, group):
            continue
        try:
            row = row_axis.key_of(axis_value(rec, layout.rows))
            column = col_axis.key_of(axis_value(rec, layout.columns))
        except (TypeError, ValueError):
            continue
        entries.append((rec, label, row, column))
    return entries


def _ranking_table(
    fam: TaskFamily,
    m: Metric,
    label: str,
    cells_seeds: dict[tuple[str, Any], dict[Any, tuple[str, float, Record]]],
    planned: dict[tuple[str, str, Any], int],
    bound_values: dict[tuple[str, str, Any], set[float]],
    parts: Sequence[Part],
) -> RankingTable:
    """One group's table: cells (centre, spread, marks), ceiling rows, ties and its protocol."""
    layout = fam.table
    row_axis, col_axis = fam.axis(layout.rows), fam.axis(layout.columns)
    rows = tuple(sorted({r for r, _ in cells_seeds}, key=row_axis.sort_key))
    columns = tuple(sorted({c for _, c in cells_seeds}, key=col_axis.sort_key))
    # "median" keeps its name for either statistic: it is the cell's centre (the layout says which).
    centre = statistics.mean if layout.statistic == "mean" else statistics.median
    values = {k: tuple(v for _, v, _ in seeds.values()) for k, seeds in cells_seeds.items()}
    medians = {k: centre(v) for k, v in values.items()}

    def is_baseline(row: str) -> bool:
        return layout.is_baseline(base_row(row))

    best_at = _best_per_column(medians, m, is_baseline)
    cells = {}
    for (row, column), seeds in cells_seeds.items():
        median = medians[(row, column)]
        mark = "" if is_baseline(row) or column not in best_at else _mark(median, best_at[column], m)
        cells[(row, column)] = Cell(
            group=label,
            row=row,
            column=column,
            values=values[(row, column)],
            median=median,
            std=statistics.stdev(values[(row, column)]) if len(seeds) > 1 else 0.0,
            planned=planned.get((label, row, column)),
            mark=mark,
            seeds=tuple(seeds),
            ids=tuple(str(rec.get("id")) for _, _, rec in seeds.values()),
        )
    trained = [k for k in cells_seeds if not is_baseline(k[0])] or list(cells_seeds)
    runs = [rec for k in trained for _, _, rec in cells_seeds[k].values()]
    protocol = table_protocol(fam, runs, (len(cells_seeds[k]) for k in trained), parts)
    bound_rows = _bound_cells(label, columns, layout.bounds_of(m.key), bound_values, cells)
    table = RankingTable(fam.name, label, m, rows + bound_rows, columns, cells, bounds=bound_rows, protocol=protocol)
    return _with_ties(table)


def _bound_cells(
    label: str,
    columns: tuple[Any, ...],
    bounds: tuple[Any, ...],
    values: dict[tuple[str, str, Any], set[float]],
    cells: dict[tuple[str, Any], Cell],
) -> tuple[str, ...]:
    """Add the ceiling cells of one table to ``cells`` (their distinct values per column); returns their rows."""
    rows = []
    for bound in bounds:
        found = {c: tuple(sorted(v)) for c in columns if (v := values.get((label, bound.name, c)))}
        if not found:
            continue
        rows.append(bound.name)
        for column, v in found.items():
            std = statistics.stdev(v) if len(v) > 1 else 0.0
            cells[(bound.name, column)] = Cell(
                label, bound.name, column, v, statistics.median(v), std, None, bound=True
            )
    return tuple(rows)


def _with_ties(table: RankingTable) -> RankingTable:
    """``table`` with :attr:`Cell.tied` set on the cells not significantly different from their column's best."""
    cells = dict(table.cells)
    for column in table.columns:
        for row in ties_with_best(table, column, SIGNIFICANCE):
            cells[(row, column)] = dataclasses.replace(cells[(row, column)], tied=True)
    return dataclasses.replace(table, cells=cells)


def _derived_table(task: str, derived: DerivedTable, protocol: TableProtocol | None = None) -> RankingTable:
    """A family's :class:`DerivedTable` as a ranking table: cells are means ± sample std, best marked per column."""
    fam = family(task)
    row_axis, col_axis = fam.axis(derived.rows), fam.axis(derived.columns)
    values = {k: tuple(v) for k, v in derived.values.items() if v}
    means = {k: statistics.fmean(v) for k, v in values.items()}
    best_at = _best_per_column(means, derived.metric, lambda row: row in derived.baselines)
    cells = {
        (row, column): Cell(
            group=derived.name,
            row=row,
            column=column,
            values=v,
            median=means[(row, column)],
            std=statistics.stdev(v) if len(v) > 1 else 0.0,
            planned=None,
            mark=""
            if row in derived.baselines or column not in best_at
            else _mark(means[(row, column)], best_at[column], derived.metric),
        )
        for (row, column), v in values.items()
    }
    table = RankingTable(
        task,
        derived.name,
        derived.metric,
        tuple(sorted({r for r, _ in values}, key=row_axis.sort_key)),
        tuple(sorted({c for _, c in values}, key=col_axis.sort_key)),
        cells,
        derived=True,
        layout_override=TableLayout(None, derived.rows, derived.columns, baselines=derived.baselines),
        statistic=derived.statistic,
        protocol=protocol,
    )
    return _with_ties(table) if derived.ties else table


def _best_per_column(
    medians: dict[tuple[str, Any], float], metric: Metric, is_baseline: Callable[[str], bool] = lambda _row: False
) -> dict:
    pick = max if metric.higher_is_better else min
    by_column: dict[Any, list[float]] = defaultdict(list)
    for (row, column), median in medians.items():
        if not is_baseline(row):
            by_column[column].append(median)
    return {column: pick(values) for column, values in by_column.items()}
