"""The gap to the worst trained row per column (paper section 5) and the optimal column, where the family
declares what it means (:attr:`engine.tasks.TaskFamily.optimal`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine.tasks import Metric
from gaptui.analysis.tables import _TOLERANCE, RankingTable


@dataclass(frozen=True)
class GapAnalysis:
    """Gap to the worst non-baseline row per column (metric units), and the optimal column (None where the family
    declares no optimal line for the table, :attr:`engine.tasks.TaskFamily.optimal`)."""

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
    # Only where the family says what an optimal column means (alignment: the noise that separates models best).
    declared = table.family.optimal_line(table.group if table.derived else None)
    for column in (
        columns if declared else ()
    ):  # in column order, and only a strictly larger spread moves it: ties keep the first
        if optimal is None or spread[column] > spread[optimal] + _TOLERANCE:
            optimal = column
    return GapAnalysis(table, columns, trained, gaps, spread, optimal)
