"""BREC's table in its own terms (distinguished pairs / pairs, per category and in total, reliability failures
marked) and the question across families: do the architectures rank the same on alignment and on BREC?

Both are pure functions of run records; ``gaptui report`` adds them to the brec family's part
(:func:`report_sections`, the family's ``report`` capability) and ``gaptui brec table`` prints the table.

**The table.** A cell is the median over seeds of a run's ``distinguished`` count over its ``pairs`` (``23/60``,
``23.5±0.7/60`` when seeds differ, ``(k/n)`` for k of n planned seeds); its marks are those of the ranking table on
``accuracy`` (``**`` best, ``*`` within 1 point, ``+`` within 3, ``†`` not significantly different from the best
over seeds). ``!k``: k reliability failures over the cell's runs. A model with any failure is **unreliable**: its
row says so, and it is left out of the correlation below (BREC reports a model only when every seed passes).
The total is per seed the sum over the categories (a seed missing a category has none).

**Across families.** For each alignment table of the history (a base dataset), each model's LAP accuracy at the
table's optimal noise (the noise where the models are most spread) against its BREC total; Kendall's tau-b
(:func:`gaptui.analysis.statistics.kendall_tau`) over the reliable models both have.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.brec.data import CATEGORY_KEYS, TOTAL
from engine.brec.wl import WL_ROWS
from gaptui import analysis

TASK = "brec"
RELIABILITY_MARK = "!"
CAVEAT = (
    "Every BREC pair is 1-WL-indistinguishable, and a message-passing model that sums over neighbours, with degree "
    "inputs, is at most as expressive as 1-WL: in exact arithmetic it embeds both graphs of a pair alike, so its "
    "BREC total is 0 and anything above 0 is numerical (the reliability check is there to catch that). Such models "
    "tie at 0 on BREC, tau-b counts their ties as neither agreeing nor disagreeing, and the correlation is carried "
    "by the few models that can exceed 1-WL (positional inputs rwpe and lap; PAN, whose layers weight closed walks, "
    "which 1-WL cannot count): it says nothing about how the message-passing models rank among themselves."
)


@dataclass(frozen=True)
class Count:
    """One cell of BREC's table: distinguished pairs per seed, pairs tested, reliability failures, marks."""

    values: tuple[float, ...]
    pairs: float
    failures: float = 0.0
    planned: int | None = None
    marks: str = ""

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def std(self) -> float:
        return statistics.stdev(self.values) if len(self.values) > 1 else 0.0

    def text(self) -> str:
        centre = f"{self.median:g}" + (f"±{self.std:.1f}" if self.std > 0 else "")
        out = f"{centre}/{self.pairs:g}"
        if self.planned is not None and len(self.values) < self.planned:
            out += f" ({len(self.values)}/{self.planned})"
        if self.marks:
            out += f" {self.marks}"
        if self.failures:
            out += f" {RELIABILITY_MARK}{self.failures:g}"
        return out


@dataclass(frozen=True)
class BrecTable:
    """BREC's table of one subset of pairs (``all pairs``, or the first few of each category)."""

    subset: str
    rows: tuple[str, ...]
    columns: tuple[str, ...]
    cells: dict[tuple[str, str], Count] = field(repr=False)

    def unreliable(self, row: str) -> bool:
        return any(c.failures for (r, _), c in self.cells.items() if r == row)

    def total(self, row: str) -> float | None:
        cell = self.cells.get((row, TOTAL))
        return None if cell is None else cell.median


def _marks(cell: analysis.Cell | None) -> str:
    if cell is None:
        return ""
    return (analysis.MARKERS[cell.mark] + (f" {analysis.TIED_MARKER}" if cell.tied else "")).strip()


def brec_tables(records: Sequence[dict[str, Any]]) -> list[BrecTable]:
    """BREC's tables of the brec runs among ``records``: one per subset of pairs, ``all pairs`` first."""
    mine = analysis.task_records(records, TASK)
    metrics = ("distinguished", "pairs", "reliability_failures", "accuracy")
    built = {m: {t.group: t for t in analysis.build_tables(mine, m, task=TASK) if not t.derived} for m in metrics}
    groups = sorted(built["distinguished"], key=lambda g: (g != "all pairs", g))
    return [_table(*(built[m][g] for m in metrics)) for g in groups]


def _table(
    counts: analysis.RankingTable,
    pairs: analysis.RankingTable,
    failures: analysis.RankingTable,
    accuracy: analysis.RankingTable,
) -> BrecTable:
    columns = tuple(c for c in CATEGORY_KEYS if c in counts.columns)
    cells: dict[tuple[str, str], Count] = {}
    for row in counts.rows:
        totals: dict[Any, float] | None = None
        seed_pairs, seed_failures, complete = 0.0, 0.0, True
        for column in columns:
            cell = counts.cell(row, column)
            if cell is None:
                complete = False
                continue
            tested, failed = pairs.cell(row, column), failures.cell(row, column)
            count = Count(
                cell.values,
                max(tested.values) if tested else math.nan,
                sum(failed.values) if failed else 0.0,
                cell.planned,
                _marks(accuracy.cell(row, column)),
            )
            cells[(row, column)] = count
            seeds = dict(zip(cell.seeds, cell.values, strict=True))
            totals = seeds if totals is None else {s: totals[s] + v for s, v in seeds.items() if s in totals}
            seed_pairs += count.pairs
            seed_failures += count.failures
        if complete and totals:
            cells[(row, TOTAL)] = Count(tuple(totals.values()), seed_pairs, seed_failures)
    return BrecTable(counts.group, counts.rows, (*columns, TOTAL), cells)


def _row_label(table: BrecTable, row: str) -> str:
    return f"{row} (unreliable)" if table.unreliable(row) else row


LEGEND = (
    "Cells: distinguished pairs / pairs, median over seeds (±std when seeds differ; (k/n): k of n planned seeds). "
    "Marks on the share distinguished: ** best, * within 1 point, + within 3, † not significantly different from "
    f"the best (Holm-corrected Welch). {RELIABILITY_MARK}k: k reliability failures (relabellings of one graph told "
    "apart), never counted as distinguished; a model with any is unreliable. 1-wl, 3-wl: exact tests (3-WL as "
    "2-FWL), training-free."
)


def render_markdown(table: BrecTable) -> str:
    head = "| model | " + " | ".join(table.columns) + " |"
    lines = [head, "|---|" + "---:|" * len(table.columns)]
    for row in table.rows:
        cells = [table.cells[(row, c)].text() if (row, c) in table.cells else analysis.EMPTY for c in table.columns]
        lines.append(f"| {_row_label(table, row)} | " + " | ".join(c.replace("*", r"\*") for c in cells) + " |")
    return "\n".join([*lines, "", LEGEND.replace("*", r"\*")])


def render_rich(table: BrecTable, width: int | None = None) -> Any:
    """Rich table(s): split over the columns (the model column repeated) where wider than ``width``."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from gaptui.analysis.render import split_columns

    texts = {key: cell.text() for key, cell in table.cells.items()}
    widths = [3 + max(len(c), *(len(texts.get((r, c), "")) for r in table.rows)) for c in table.columns]
    fixed = 4 + max(5, *(len(_row_label(table, r)) for r in table.rows))
    groups = split_columns(widths, fixed, width)
    rendered = []
    for g, columns in enumerate(groups):
        last = g == len(groups) - 1
        title = f"BREC ({table.subset}): distinguished pairs / pairs" + (" (continued)" if g else "")
        out = Table(title=title, caption=LEGEND if last else None, caption_justify="left")
        out.add_column("model", no_wrap=True)
        for i in columns:
            out.add_column(table.columns[i], justify="right", no_wrap=True)
        for row in table.rows:
            style = "dim" if row in WL_ROWS else ("yellow" if table.unreliable(row) else "")
            cells = [texts.get((row, table.columns[i]), analysis.EMPTY) for i in columns]
            out.add_row(Text(_row_label(table, row), style=style), *cells)
        rendered.append(out)
    return rendered[0] if len(rendered) == 1 else Group(*rendered)


def table_json(table: BrecTable) -> dict[str, Any]:
    return {
        "subset": table.subset,
        "rows": list(table.rows),
        "columns": list(table.columns),
        "unreliable": [r for r in table.rows if table.unreliable(r)],
        "cells": [
            {
                "model": r,
                "category": c,
                "median": cell.median,
                "std": cell.std,
                "seeds": len(cell.values),
                "pairs": cell.pairs,
                "reliability_failures": cell.failures,
                "marks": cell.marks,
            }  # fmt: skip
            for (r, c), cell in table.cells.items()
        ],
    }


# ------------------------------------------------------------------------------------------ across families


@dataclass(frozen=True)
class Agreement:
    """Kendall's tau-b between the alignment accuracy at one table's optimal noise and the BREC total."""

    dataset: str
    noise: float | None
    models: tuple[str, ...]
    alignment: tuple[float, ...]
    brec: tuple[float, ...]
    tau: float


def agreements(records: Sequence[dict[str, Any]], table: BrecTable) -> list[Agreement]:
    """One :class:`Agreement` per alignment table of ``records`` (the models of both, reliable on BREC)."""
    from gaptui.analysis.statistics import kendall_tau

    alignment = analysis.task_records(records, "alignment")
    if not alignment:
        return []
    totals = {
        row: total
        for row in table.rows
        if row not in WL_ROWS and not table.unreliable(row) and (total := table.total(row)) is not None
    }
    out = []
    for ranking in analysis.build_tables(alignment, task="alignment"):
        if ranking.derived:
            continue
        optimal = analysis.gap_analysis(ranking).optimal
        scores = {
            row: cell.median
            for row in ranking.rows
            if row not in ranking.baselines and optimal is not None and (cell := ranking.cell(row, optimal))
        }
        models = tuple(m for m in ranking.rows if m in scores and m in totals)
        a, b = tuple(scores[m] for m in models), tuple(totals[m] for m in models)
        tau = kendall_tau(a, b) if len(models) >= 2 else math.nan
        out.append(Agreement(ranking.group, optimal, models, a, b, tau))
    return out


def agreement_lines(records: Sequence[dict[str, Any]], table: BrecTable) -> list[str]:
    found = agreements(records, table)
    head = [f"## Alignment and BREC ({table.subset}): do the models rank alike?", ""]
    if not found:
        return [*head, "The history holds no finished alignment runs to compare with (run an alignment grid of "
                "the same models, e.g. `gaptui run --preset zoo-smoke`).", ""]  # fmt: skip
    lines = [*head, "| alignment dataset | optimal noise | models | Kendall's tau-b |", "|---|---:|---:|---:|"]
    for a in found:
        tau = "n/a (fewer than 2 models in both)" if math.isnan(a.tau) else f"{a.tau:+.3f}"
        noise = "–" if a.noise is None else f"{a.noise:g}"
        lines.append(f"| {a.dataset} | {noise} | {len(a.models)} | {tau} |")
    lines += ["", "Per model (alignment LAP accuracy at the optimal noise; BREC total, median over seeds):", ""]
    for a in found:
        pairs = ", ".join(f"{m} {x * 100:.1f}% / {y:g}" for m, x, y in zip(a.models, a.alignment, a.brec, strict=True))
        lines.append(f"- {a.dataset}: {pairs or 'no model in both'}")
    left = [r for r in table.rows if r not in WL_ROWS and table.unreliable(r)]
    if left:
        lines.append(f"- left out as unreliable on BREC: {', '.join(left)}")
    return [*lines, "", f"Caveat: {CAVEAT}", ""]


def report_sections(records: Sequence[dict[str, Any]], all_records: Sequence[dict[str, Any]]) -> list[str]:
    """The brec family's own parts of ``gaptui report``: BREC's table in counts per subset of pairs, then the
    comparison with the alignment ranking (``records``: the family's runs; ``all_records``: the history's)."""
    out = []
    for table in brec_tables(records):
        out += [f"## BREC's table in counts ({table.subset})", "", render_markdown(table), ""]
        out += agreement_lines(all_records, table)
    return out
