"""One of our ranking tables beside a reference's cells of the same kind and group: per cell the difference, per
column Kendall's tau-b of the row order and whether the reference's best row is best or within 1 point of ours
(:func:`compare`); which tables a reference covers and, when it covers none, what each side has."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from engine.errors import GaptuiError
from engine.tasks import Axis, Metric
from gaptui import analysis
from gaptui.analysis.reference.files import Reference, ReferenceCell
from gaptui.analysis.reference.protocol import ProtocolComparison, compare_protocol
from gaptui.analysis.statistics import kendall_tau


@dataclass(frozen=True)
class ColumnAgreement:
    """Rank agreement in one column of the table (alignment: one noise level; see the module docstring):
    ``column`` is the column's value and ``rows`` the rows compared there."""

    column: Any
    rows: tuple[str, ...]
    tau: float | None
    reference_best: tuple[str, ...]
    best_within_1: bool | None


def coordinates(table: analysis.RankingTable, row: str, column: Any) -> dict[str, Any]:
    """The axis values of one cell of ``table`` (the group only for a family's ranking tables)."""
    layout = table.layout
    head = {layout.group: table.group} if layout.group and not table.derived else {}
    return {**head, layout.rows: row, layout.columns: column}


def reference_cell(table: analysis.RankingTable, reference: Reference, row: str, column: Any) -> ReferenceCell | None:
    return reference.at(coordinates(table, row, column))


def covers(table: analysis.RankingTable, reference: Reference) -> bool:
    """Whether ``reference`` holds cells of ``table``'s kind (same family, same derived table, same axes) and
    group."""
    if reference.task != table.task or reference.table != (table.group if table.derived else ""):
        return False
    layout = table.layout
    if set(reference.axes) - {layout.group, layout.rows, layout.columns} - {None}:
        return False
    if not {layout.rows, layout.columns} <= set(reference.axes):
        return False
    return table.derived or reference.group_axis is None or table.group in reference.groups


def not_covered(table: analysis.RankingTable, reference: Reference) -> str:
    """One line saying why ``reference`` has nothing to compare with ``table`` (``""`` when it covers it)."""
    if covers(table, reference):
        return ""
    if reference.task != table.task:
        return f"reference '{reference.name}' holds task {reference.task}, not {table.task}"
    if reference.table:
        return f"reference '{reference.name}' compares {reference.table} only"
    if table.derived:
        return f"reference '{reference.name}' has no {table.group}"
    axis = reference.family.axis(reference.group_axis or table.layout.rows)
    return f"reference '{reference.name}' has no {axis.name} {table.group} (it covers {', '.join(reference.groups)})"


@dataclass(frozen=True)
class Comparison:
    """Our ranking table beside a reference's cells of the same group (alignment: dataset label).

    ``rows`` are the rows compared (ours and the reference's, in the row axis' order); ``agreement`` is keyed by
    our table's column values."""

    table: analysis.RankingTable
    reference: Reference
    rows: tuple[str, ...]
    agreement: dict[Any, ColumnAgreement]
    #: Our protocol beside the reference's (None: the reference states none).
    protocol: ProtocolComparison | None = None

    def pair(self, row: str, column: Any) -> tuple[analysis.Cell | None, ReferenceCell | None]:
        return self.table.cell(row, column), reference_cell(self.table, self.reference, row, column)

    def difference(self, row: str, column: Any) -> float | None:
        """Our value minus the reference's (metric units), or None when either is missing."""
        ours, theirs = self.pair(row, column)
        return None if ours is None or theirs is None else ours.median - theirs.median


def check_metric(reference: Reference, metric: str | Metric | None) -> None:
    """Raise :class:`GaptuiError` unless ``reference`` holds ``metric`` (None: its family's default metric).

    A reference of a derived table is checked when compared (the derived table has its own metric)."""
    if isinstance(metric, Metric):
        metric = metric.key
    metric = metric or reference.family.default_metric
    if metric != reference.metric and not reference.table:
        raise GaptuiError(
            f"reference '{reference.name}' holds {reference.metric}, not {metric}; "
            f"use --metric {reference.metric} or another reference"
        )


def compare(table: analysis.RankingTable, reference: Reference) -> Comparison | None:
    """The comparison of ``table`` with ``reference``, or None when the reference does not cover that table."""
    if not covers(table, reference):
        return None
    check_metric(reference, table.metric)
    if reference.table and table.metric.key != reference.metric:
        raise GaptuiError(f"reference '{reference.name}' holds {reference.metric}, not {table.metric.key}")
    rows_axis = table.row_axis
    theirs_rows = reference.values(table.layout.rows, table.group if reference.group_axis else None)
    rows = tuple(sorted(set(table.rows) | {str(r) for r in theirs_rows}, key=rows_axis.sort_key))
    sign = 1.0 if table.metric.higher_is_better else -1.0
    agreement = {}
    for column in table.columns:
        theirs = {
            row: c.median
            for row in rows
            if row not in table.baselines and (c := reference_cell(table, reference, row, column)) is not None
        }
        ours = {row: c.median for row in theirs if (c := table.cell(row, column)) is not None}
        common = tuple(ours)
        tau = kendall_tau([ours[r] for r in common], [theirs[r] for r in common]) if len(common) >= 2 else math.nan
        best: tuple[str, ...] = ()
        within = None
        if theirs:
            top = max(sign * v for v in theirs.values())
            best = tuple(row for row, v in theirs.items() if sign * v >= top - 1e-12)
            ours_best = [table.cell(row, column) for row in best]
            if all(c is not None for c in ours_best):
                within = all(c.mark in (analysis.BEST, analysis.WITHIN_1) for c in ours_best if c is not None)
        agreement[column] = ColumnAgreement(column, common, None if math.isnan(tau) else tau, best, within)
    return Comparison(table, reference, rows, agreement, compare_protocol(table, reference))


def shared_cells(table: analysis.RankingTable, reference: Reference) -> int:
    """How many cells of ``table`` (row x column) the reference also has."""
    if not covers(table, reference):
        return 0
    return sum(
        table.cell(r, c) is not None and reference_cell(table, reference, r, c) is not None
        for r in table.rows
        for c in table.columns
    )


def _listed(values: Iterable[Any]) -> str:
    return ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in values) or "none"


def _plural(axis: Axis) -> str:
    return axis.name if axis.numeric else f"{axis.name}s"


def no_overlap(reference: Reference, tables: Sequence[analysis.RankingTable]) -> GaptuiError:
    """The error for a history of which the reference has no cell: what each side has, so the user can see which
    runs (or which reference) to choose."""
    fam = reference.family
    plain = [t for t in tables if t.derived == bool(reference.table)] or list(tables)
    ours, theirs = [], []
    for key in reference.axes:
        axis = fam.axis(key)
        if key == reference.group_axis:
            mine: list[Any] = [t.group for t in plain]
        else:
            found = set()
            for t in plain:
                found |= set(t.rows if key == t.layout.rows else t.columns if key == t.layout.columns else ())
            mine = sorted(found, key=axis.sort_key)
        ours.append(f"{_plural(axis)} {_listed(mine)}")
        listed = reference.groups if key == reference.group_axis else reference.values(key)  # groups: file order
        theirs.append(f"{_plural(axis)} {_listed(listed)}")
    return GaptuiError(
        f"reference '{reference.name}' has no cell that the history has: the history's finished runs cover "
        f"{', '.join(ours)}; the reference covers {', '.join(theirs)}"
    )


def uncovered_columns(table: analysis.RankingTable, reference: Reference) -> str:
    """A note naming the columns of ``table`` the reference has no cell for (``""`` when none)."""
    if not covers(table, reference):
        return ""
    missing = [c for c in table.columns if all(reference_cell(table, reference, r, c) is None for r in table.rows)]
    if not missing:
        return ""
    axis = table.column_axis
    group = table.group if reference.group_axis else None
    where = f"{table.group} cell" if group else "cell"
    return (
        f"reference '{reference.name}' has no {where} at {axis.name} {_listed(missing)} "
        f"(it covers {_listed(reference.values(axis.key, group))})"
    )
