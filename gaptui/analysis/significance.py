"""Per-cell significance: Welch's t-test and the Mann-Whitney U test between the rows of one column of a ranking
table, on their per-seed values, Holm-corrected within the cell (the tests are described in
:mod:`gaptui.analysis.statistics`).

The ranking tables' tie mark (``†``, :mod:`gaptui.analysis.tables`) and ``gaptui stats``
(:mod:`gaptui.analysis.statistics`) both use it; it reads a table through its rows and cells only, so it imports
no other module of the package at run time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from itertools import combinations
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # annotations only: the tables import this module, never the reverse
    from gaptui.analysis.tables import RankingTable

ALPHA = 0.05


@dataclass(frozen=True)
class PairTest:
    """Welch and Mann-Whitney tests of two rows in one cell; p-values are ``None`` when no test was possible."""

    group: str
    column: Any
    a: str
    b: str
    n_a: int
    n_b: int
    welch_p: float | None
    mannwhitney_p: float | None
    p_holm: float | None
    mannwhitney_p_holm: float | None
    reason: str = ""


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment: ``p_(i) * (m - i + 1)``, made monotone and capped at 1, in input order."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, pvalues[i] * (m - rank)))
        adjusted[i] = running
    return adjusted


def finite(x: float) -> float | None:
    """``x`` as a float, or None when it is missing, infinite or NaN (a test that gave no p-value)."""
    return float(x) if x is not None and math.isfinite(x) else None


def welch_pvalues(samples: Sequence[Sequence[float]], pairs: Sequence[tuple[int, int]]) -> list[float | None]:
    """Two-sided Welch t-test p-values of ``pairs`` of ``samples`` (what ``scipy.stats.ttest_ind(a, b,
    equal_var=False)`` gives), in one vectorised pass; ``None`` where a side has fewer than 2 values or neither side
    varies (the t statistic is undefined). Ranking tables mark every cell with it, so it must stay cheap."""
    if not pairs:
        return []
    from scipy import special  # on first use: the CLI starts without scipy

    n = np.array([len(s) for s in samples], dtype=float)
    mean = np.array([np.mean(s) if len(s) else np.nan for s in samples])
    var = np.array([np.var(s, ddof=1) if len(s) > 1 else np.nan for s in samples])
    i, j = np.array(pairs).T
    sa, sb = var[i] / n[i], var[j] / n[j]
    se2 = sa + sb
    with np.errstate(divide="ignore", invalid="ignore"):
        t = (mean[i] - mean[j]) / np.sqrt(se2)
        df = se2**2 / (sa**2 / (n[i] - 1) + sb**2 / (n[j] - 1))
        p = 2.0 * special.stdtr(df, -np.abs(t))  # Student's t CDF: scipy.stats costs a second to import
    ok = (n[i] >= 2) & (n[j] >= 2) & (se2 > 0)
    return [float(v) if good and math.isfinite(v) else None for v, good in zip(p, ok, strict=True)]


def cell_tests(table: RankingTable, column: Any, mann_whitney: bool = True) -> list[PairTest]:
    """Every pair of rows of one column of ``table``, Holm-corrected within the cell (``mann_whitney=False``
    leaves the rank test, and the import of scipy.stats, out: table marks need Welch's test only)."""
    cells = [c for r in table.rows if (c := table.cell(r, column)) is not None]
    pairs = list(combinations(range(len(cells)), 2))
    welch = welch_pvalues([c.values for c in cells], pairs)
    tests = []
    for (i, j), p in zip(pairs, welch, strict=True):
        a, b = cells[i], cells[j]
        base = {"group": table.group, "column": column, "a": a.row, "b": b.row, "n_a": a.runs, "n_b": b.runs}
        if a.runs < 2 or b.runs < 2:
            reason, mw = f"fewer than 2 seeds ({a.row}: {a.runs}, {b.row}: {b.runs})", None
        else:
            reason = "" if p is not None else "no variance on either side: the t statistic is undefined"
            mw = _mann_whitney(a.values, b.values) if mann_whitney else None
        tests.append(PairTest(**base, welch_p=p, mannwhitney_p=mw, p_holm=None, mannwhitney_p_holm=None, reason=reason))
    out = list(tests)
    for key, adjusted_key in (("welch_p", "p_holm"), ("mannwhitney_p", "mannwhitney_p_holm")):
        tested = [i for i, t in enumerate(out) if getattr(t, key) is not None]
        for i, p in zip(tested, holm([getattr(out[i], key) for i in tested]), strict=True):
            out[i] = _replace(out[i], **{adjusted_key: p})
    return out


def _mann_whitney(a: Sequence[float], b: Sequence[float]) -> float | None:
    from scipy import stats as sps

    return finite(sps.mannwhitneyu(a, b, alternative="two-sided").pvalue)


def _replace(test: PairTest, **changes: Any) -> PairTest:
    return PairTest(**{**asdict(test), **changes})


def ties_with_best(table: RankingTable, column: Any, alpha: float = ALPHA) -> set[str]:
    """Rows of ``column`` not significantly different from a best cell (Holm-corrected Welch p >= alpha).

    Baselines and the best rows themselves are left out; a pair without a test is not a tie (nothing was shown).
    """
    best = {c.row for c in table.best(column)}
    if not best:
        return set()
    out = set()
    for t in cell_tests(table, column, mann_whitney=False):
        if t.p_holm is None or t.p_holm < alpha:
            continue
        if t.a in best and t.b not in best:
            out.add(t.b)
        elif t.b in best and t.a not in best:
            out.add(t.a)
    return out - set(table.baselines)
