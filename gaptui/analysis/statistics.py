"""Significance tests over ranking tables: which differences between rows (models, PEs, poolings) a reviewer can
trust, following Demšar (2006) for comparisons across many cells.

Everything here is a pure function of :class:`gaptui.analysis.RankingTable` objects (their cells keep the
per-seed values), so the statistics of a table are those of the numbers it shows. The tests within a cell are
:mod:`gaptui.analysis.significance`'s (the tables' tie marks use them too); ``holm``, ``welch_pvalues`` and
``cell_tests`` are importable from here as well.

Within a cell (a table's group and column, e.g. dataset x noise)
    For every pair of rows with at least 2 seeds on each side: a two-sided Welch t-test
    (``scipy.stats.ttest_ind(equal_var=False)``) and a two-sided Mann-Whitney U test on the per-seed values. The
    p-values of each test are Holm-corrected over the pairs of the cell. A pair with fewer seeds, or whose two
    sides have no variance at all, gets no test and says why (``reason``).

Across cells
    Each cell ranks the rows that are not baselines by their centre (the table's median or mean) in the metric's
    declared direction: rank 1 is the best, ties share the average rank. Only rows present in every compared cell
    are ranked (Friedman needs complete blocks); the others are named in ``notes``. The Friedman test
    (``scipy.stats.friedmanchisquare``, at least 3 rows and 2 cells) says whether the rows differ at all, and the
    Nemenyi critical difference ``CD = q_alpha * sqrt(k (k + 1) / (6 N))`` (``q_alpha`` from the studentized range
    with infinite degrees of freedom, divided by sqrt 2; k rows, N cells) says which average ranks differ.

Rank consistency
    Kendall's tau-b between the row orders of adjacent columns of a table (noise levels, sizes), and Kendall's W
    (with the tie correction) of the row orders given by each seed of a cell, over the seeds every row has.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from itertools import combinations
from typing import Any

import numpy as np

from gaptui.analysis.render import latex_escape
from gaptui.analysis.significance import ALPHA, PairTest, cell_tests, finite, holm, welch_pvalues
from gaptui.analysis.tables import RankingTable

__all__ = [
    "ALPHA",
    "Consistency",
    "PairTest",
    "RankTest",
    "Statistics",
    "cell_tests",
    "consistency",
    "holm",
    "kendall_w",
    "nemenyi_q",
    "rank_test",
    "render_latex",
    "render_markdown",
    "render_text",
    "table_statistics",
    "welch_pvalues",
]


@dataclass(frozen=True)
class RankTest:
    """Average ranks over complete cells, the Friedman test and the Nemenyi critical difference."""

    rows: tuple[str, ...]
    cells: int
    average_ranks: dict[str, float]
    friedman: dict[str, float] | None
    critical_difference: dict[str, Any] | None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Consistency:
    """Kendall's tau between adjacent columns and Kendall's W over seeds."""

    kendall_tau: list[dict[str, Any]] = field(default_factory=list)
    kendall_w: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class Statistics:
    """Everything ``gaptui stats`` reports for one task family and metric."""

    task: str
    metric: str
    higher_is_better: bool
    alpha: float
    pairwise: list[PairTest]
    ranks: RankTest
    consistency: Consistency
    #: Display text of each column value (``η=0.12``), for the renderers.
    headers: dict[Any, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "metric": self.metric,
            "direction": "higher" if self.higher_is_better else "lower",
            "alpha": self.alpha,
            "pairwise": [asdict(p) for p in self.pairwise],
            "average_ranks": self.ranks.average_ranks,
            "ranked_rows": list(self.ranks.rows),
            "ranked_cells": self.ranks.cells,
            "friedman": self.ranks.friedman,
            "critical_difference": self.ranks.critical_difference,
            "kendall_tau": self.consistency.kendall_tau,
            "kendall_w": self.consistency.kendall_w,
            "notes": list(self.ranks.notes),
        }


def nemenyi_q(k: int, alpha: float = ALPHA) -> float:
    """The Nemenyi test's critical value for ``k`` rows (Demšar 2006, Table 5a: 1.960, 2.343, 2.569, ...)."""
    from scipy import stats as sps

    return float(sps.studentized_range.ppf(1 - alpha, k, np.inf) / math.sqrt(2))


def rank_test(tables: Sequence[RankingTable], higher_is_better: bool, alpha: float = ALPHA) -> RankTest:
    """Average ranks over every cell holding all the compared rows, Friedman's test and Nemenyi's CD."""
    from scipy import stats as sps

    blocks: list[dict[str, float]] = []
    for table in tables:
        for column in table.columns:
            centres = {
                r: c.median for r in table.rows if r not in table.baselines and (c := table.cell(r, column)) is not None
            }
            if centres:
                blocks.append(centres)
    notes: list[str] = []
    if not blocks:
        return RankTest((), 0, {}, None, None, ("no cells to rank",))
    # Complete blocks: either leave out the cells that lack a row, or the rows that lack a cell, whichever keeps
    # more values (rows x cells); a tie keeps every row.
    seen = set().union(*(set(b) for b in blocks))
    everywhere = set.intersection(*(set(b) for b in blocks))
    complete = [b for b in blocks if set(b) == seen]
    if len(seen) * len(complete) >= len(everywhere) * len(blocks):
        if dropped := len(blocks) - len(complete):
            notes.append(f"{dropped} of {len(blocks)} cells left out: they lack a result of some row")
        rows, blocks = tuple(sorted(seen)), complete
    else:
        rows = tuple(sorted(everywhere))
        notes.append(f"not ranked (missing from some cells): {', '.join(sorted(seen - everywhere))}")
    if not blocks:
        notes.append("no cell holds every row: no ranks")
        return RankTest(rows, 0, {}, None, None, tuple(notes))
    if len(rows) < 2:
        notes.append("fewer than 2 rows in every cell: no ranks")
        return RankTest(rows, len(blocks), {}, None, None, tuple(notes))
    sign = -1.0 if higher_is_better else 1.0
    ranks = np.array([sps.rankdata([sign * b[r] for r in rows]) for b in blocks])  # [N, k], 1 = best
    n, k = ranks.shape
    average = {r: float(ranks[:, j].mean()) for j, r in enumerate(rows)}
    friedman = None
    if k >= 3 and n >= 2:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            res = sps.friedmanchisquare(*[[sign * b[r] for b in blocks] for r in rows])
        friedman = {"statistic": float(res.statistic), "p": finite(res.pvalue), "rows": k, "cells": n}
    else:
        notes.append(f"Friedman test needs at least 3 rows and 2 cells (have {k} rows, {n} cells)")
    q = nemenyi_q(k, alpha)
    cd = q * math.sqrt(k * (k + 1) / (6.0 * n))
    different = [[a, b] for a, b in combinations(sorted(rows, key=average.get), 2) if abs(average[a] - average[b]) > cd]
    critical = {"alpha": alpha, "q_alpha": q, "value": cd, "rows": k, "cells": n, "significantly_different": different}
    return RankTest(rows, n, average, friedman, critical, tuple(notes))


def kendall_w(ranks: np.ndarray) -> float | None:
    """Kendall's coefficient of concordance of ``ranks`` ``[m raters, n objects]`` (average ranks on ties),
    with the tie correction; ``None`` when undefined (fewer than 2 raters or objects, or every rater tied)."""
    m, n = ranks.shape
    if m < 2 or n < 2:
        return None
    s = float(((ranks.sum(axis=0) - m * (n + 1) / 2.0) ** 2).sum())
    ties = 0.0
    for row in ranks:
        _, counts = np.unique(row, return_counts=True)
        ties += float((counts**3 - counts).sum())
    denominator = m**2 * (n**3 - n) - m * ties
    return s * 12.0 / denominator if denominator > 0 else None


def kendall_tau_test(ours: Sequence[float], theirs: Sequence[float]) -> tuple[float, float]:
    """Kendall's tau-b between two scorings of the same rows and its p-value (scipy; ties allowed): ``nan`` for
    both when either scoring is constant, without scipy's warning."""
    from scipy import stats as sps

    if len(ours) != len(theirs):
        raise ValueError(f"kendall_tau: {len(ours)} scores against {len(theirs)}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        res = sps.kendalltau(ours, theirs)
    return float(res.statistic), float(res.pvalue)


def kendall_tau(ours: Sequence[float], theirs: Sequence[float]) -> float:
    """Kendall's tau-b between two scorings of the same rows (:func:`kendall_tau_test` without its p-value)."""
    return kendall_tau_test(ours, theirs)[0]


def consistency(tables: Sequence[RankingTable]) -> Consistency:
    """Kendall's tau between adjacent columns' row orders and Kendall's W over each cell's seeds."""
    from scipy import stats as sps

    taus, ws = [], []
    for table in tables:
        rows = [r for r in table.rows if r not in table.baselines]
        for left, right in zip(table.columns, table.columns[1:], strict=False):
            common = [r for r in rows if table.cell(r, left) is not None and table.cell(r, right) is not None]
            entry = {"group": table.group, "a": left, "b": right, "rows": len(common), "tau": None, "p": None}
            if len(common) >= 2:
                tau, p = kendall_tau_test(
                    [table.cell(r, left).median for r in common], [table.cell(r, right).median for r in common]
                )
                entry.update(tau=finite(tau), p=finite(p))
            taus.append(entry)
        for column in table.columns:
            cells = [c for r in rows if (c := table.cell(r, column)) is not None and c.seeds]
            if len(cells) < 2:
                continue
            seeds = sorted(set.intersection(*(set(c.seeds) for c in cells)), key=str)
            by_seed = [{s: v for s, v in zip(c.seeds, c.values, strict=True)} for c in cells]
            ranks = np.array([sps.rankdata([values[s] for values in by_seed]) for s in seeds]).reshape(len(seeds), -1)
            ws.append(
                {"group": table.group, "column": column, "rows": len(cells), "seeds": len(seeds), "w": kendall_w(ranks)}
            )
    return Consistency(taus, ws)


def table_statistics(tables: Sequence[RankingTable], alpha: float = ALPHA) -> Statistics:
    """The statistics of a family's ranking tables (derived tables, such as Table 2, are aggregates: left out)."""
    plain = [t for t in tables if not t.derived]
    if not plain:
        raise ValueError("no ranking tables to test")
    metric = plain[0].metric
    pairwise = [t for table in plain for column in table.columns for t in cell_tests(table, column)]
    return Statistics(
        task=plain[0].task,
        metric=metric.key,
        higher_is_better=metric.higher_is_better,
        alpha=alpha,
        pairwise=pairwise,
        ranks=rank_test(plain, metric.higher_is_better, alpha),
        consistency=consistency(plain),
        headers={c: table.header(c) for table in plain for c in table.columns},
    )


# ------------------------------------------------------------------------------------------ renderers


def _p(value: float | None) -> str:
    if value is None:
        return "–"
    return "<0.001" if value < 1e-3 else f"{value:.3f}"


def _summary_lines(s: Statistics) -> list[str]:
    r = s.ranks
    direction = "higher" if s.higher_is_better else "lower"
    lines = [f"{s.task} — {s.metric} ({direction} is better), alpha {s.alpha:g}"]
    if r.average_ranks:
        ordered = sorted(r.average_ranks.items(), key=lambda kv: kv[1])
        ranks = ", ".join(f"{row} {rank:.2f}" for row, rank in ordered)
        lines.append(f"average rank over {r.cells} cells (1 = best): {ranks}")
    if r.friedman:
        f = r.friedman
        lines.append(f"Friedman: chi2 = {f['statistic']:.3f}, p = {_p(f['p'])} ({f['rows']} rows, {f['cells']} cells)")
    if r.critical_difference:
        cd = r.critical_difference
        pairs = "; ".join(f"{a} vs {b}" for a, b in cd["significantly_different"]) or "none"
        lines.append(f"Nemenyi critical difference: {cd['value']:.3f} (q = {cd['q_alpha']:.3f}); ranks apart: {pairs}")
    lines.extend(f"note: {n}" for n in r.notes)
    return lines


def _pair_rows(s: Statistics) -> list[list[str]]:
    return [
        [
            t.group,
            s.headers.get(t.column, str(t.column)),
            t.a,
            t.b,
            f"{t.n_a}/{t.n_b}",
            _p(t.welch_p),
            _p(t.p_holm),
            _p(t.mannwhitney_p),
            _p(t.mannwhitney_p_holm),
            t.reason,
        ]
        for t in s.pairwise
    ]


PAIR_HEADER = ["group", "column", "a", "b", "seeds", "Welch p", "Holm", "MW p", "MW Holm", "no test because"]


def _consistency_lines(s: Statistics) -> list[str]:
    lines = []
    for e in s.consistency.kendall_tau:
        tau = "–" if e["tau"] is None else f"{e['tau']:+.2f}"
        a, b = s.headers.get(e["a"], e["a"]), s.headers.get(e["b"], e["b"])
        lines.append(f"{e['group'] or s.task}: Kendall tau {a} -> {b}: {tau} over {e['rows']} rows")
    for e in s.consistency.kendall_w:
        w = "–" if e["w"] is None else f"{e['w']:.2f}"
        col = s.headers.get(e["column"], e["column"])
        lines.append(f"{e['group'] or s.task} {col}: Kendall W over {e['seeds']} seeds: {w}")
    return lines


def render_text(s: Statistics) -> str:
    """Plain text: the rank summary, the pairwise table and the rank consistency."""
    from gaptui.columns import aligned

    table = aligned([[str(c) for c in r] for r in [PAIR_HEADER, *_pair_rows(s)]])
    return (
        "\n".join(
            [
                *_summary_lines(s),
                "",
                "pairwise tests per cell (p-values Holm-corrected within the cell):",
                *table,
                "",
                *_consistency_lines(s),
            ]
        )
        + "\n"
    )


def render_markdown(s: Statistics) -> str:
    """Markdown: the same content as :func:`render_text`, as lists and a table."""
    out = [f"- {line}" for line in _summary_lines(s)]
    out += ["", "| " + " | ".join(PAIR_HEADER) + " |", "|" + " --- |" * len(PAIR_HEADER)]
    out += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in _pair_rows(s)]
    out += ["", *(f"- {line}" for line in _consistency_lines(s))]
    return "\n".join(out) + "\n"


def render_latex(s: Statistics) -> str:
    """LaTeX (booktabs): average ranks with the Friedman test and CD in the caption, then the pairwise tests."""
    r = s.ranks
    caption = f"Average rank of each {latex_escape(s.task)} row over {r.cells} cells (1 = best)."
    if r.friedman:
        caption += f" Friedman $\\chi^2 = {r.friedman['statistic']:.2f}$, $p = {_p(r.friedman['p'])}$."
    if r.critical_difference:
        caption += f" Nemenyi CD ($\\alpha = {s.alpha:g}$) $= {r.critical_difference['value']:.2f}$."
    out = [
        "\\begin{table}[t]",
        "\\centering",
        "\\begin{tabular}{lr}",
        "\\toprule",
        "row & average rank \\\\",
        "\\midrule",
    ]
    out += [
        f"{latex_escape(row)} & {rank:.2f} \\\\" for row, rank in sorted(r.average_ranks.items(), key=lambda kv: kv[1])
    ]
    out += ["\\bottomrule", "\\end{tabular}", f"\\caption{{{caption}}}", "\\end{table}", ""]
    out += [
        "\\begin{table}[t]",
        "\\centering",
        "\\begin{tabular}{llllrrrr}",
        "\\toprule",
        "group & column & a & b & Welch $p$ & Holm & MW $p$ & MW Holm \\\\",
        "\\midrule",
    ]
    for row in _pair_rows(s):
        cells = [latex_escape(c) for c in row[:4]] + [c.replace("<", "$<$") for c in row[5:9]]
        out.append(" & ".join(cells) + " \\\\")
    out += [
        "\\bottomrule",
        "\\end{tabular}",
        "\\caption{Pairwise tests per cell: two-sided Welch and Mann-Whitney, Holm-corrected within the cell.}",
        "\\end{table}",
    ]
    return "\n".join(out) + "\n"
