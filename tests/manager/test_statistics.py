"""Significance tests over ranking tables (gaptui.analysis.statistics) and `gaptui stats`, checked against values
worked out by hand from the formulas and against published critical values."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from scipy import stats as sps

from engine.tasks import family
from gaptui import analysis
from gaptui.analysis import statistics
from tests.support.cli import run_cli
from tests.support.records import rec

LOSS = family("alignment").metric("val_loss")


def _grid(values: dict[tuple[str, float], list[float]], metric: str = "val_lap_acc") -> list[dict[str, Any]]:
    return [
        rec(model, noise, v, seed=s, metric=metric) for (model, noise), vs in values.items() for s, v in enumerate(vs)
    ]


#: Three models at two noise levels, four seeds each: gin best everywhere, gcn last.
THREE = {
    ("gin", 0.1): [0.90, 0.92, 0.94, 0.96],
    ("gat", 0.1): [0.80, 0.84, 0.86, 0.90],
    ("gcn", 0.1): [0.50, 0.55, 0.60, 0.65],
    ("gin", 0.2): [0.70, 0.72, 0.74, 0.76],
    ("gat", 0.2): [0.71, 0.73, 0.75, 0.77],
    ("gcn", 0.2): [0.40, 0.42, 0.44, 0.46],
}


def _welch_by_hand(a: list[float], b: list[float]) -> float:
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    va = sum((x - ma) ** 2 for x in a) / (len(a) - 1) / len(a)
    vb = sum((x - mb) ** 2 for x in b) / (len(b) - 1) / len(b)
    t = (ma - mb) / math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    return 2 * sps.t.sf(abs(t), df)


def test_holm_by_hand() -> None:
    # sorted: 0.01 * 3 = 0.03, 0.03 * 2 = 0.06, 0.04 * 1 = 0.04 -> kept monotone at 0.06
    assert statistics.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert statistics.holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    assert statistics.holm([]) == []


def test_pairwise_welch_and_mann_whitney_by_hand() -> None:
    tables = analysis.build_tables(_grid(THREE))
    result = statistics.table_statistics(tables)
    at = {(t.column, frozenset((t.a, t.b))): t for t in result.pairwise}
    t = at[(0.1, frozenset(("gat", "gcn")))]
    assert t.n_a == t.n_b == 4
    assert t.welch_p == pytest.approx(_welch_by_hand(THREE[("gat", 0.1)], THREE[("gcn", 0.1)]))
    # Every gat value beats every gcn value: exact two-sided p = 2 / C(8, 4) = 2 / 70.
    assert t.mannwhitney_p == pytest.approx(2 / 70)
    cell = [x for x in result.pairwise if x.column == 0.1]
    assert len(cell) == 3  # every pair of the three rows
    assert [x.p_holm for x in cell] == pytest.approx(statistics.holm([x.welch_p for x in cell]))
    # At 0.2, gin and gat are shifted by 0.01 with equal spread: not significantly different.
    assert at[(0.2, frozenset(("gat", "gcn")))].p_holm < 0.05
    assert at[(0.2, frozenset(("gat", "gin")))].p_holm > 0.05


def test_vectorised_welch_equals_scipy() -> None:
    samples = [[0.1, 0.4, 0.35], [0.5, 0.52, 0.7, 0.61], [0.3, 0.3], [0.9], [0.2, 0.25, 0.31, 0.18, 0.4]]
    pairs = [(0, 1), (0, 2), (1, 4), (2, 4), (0, 3)]
    got = statistics.welch_pvalues(samples, pairs)
    for (i, j), p in zip(pairs[:4], got, strict=False):
        assert p == pytest.approx(sps.ttest_ind(samples[i], samples[j], equal_var=False).pvalue, rel=1e-9)
    assert got[4] is None  # one value on a side
    assert statistics.welch_pvalues([[0.5, 0.5], [0.5, 0.5]], [(0, 1)]) == [None]  # no variance anywhere


def test_one_seed_gives_no_test() -> None:
    rows = _grid({("gin", 0.1): [0.9], ("gcn", 0.1): [0.5, 0.6]})
    (t,) = statistics.table_statistics(analysis.build_tables(rows)).pairwise
    assert t.welch_p is None and t.mannwhitney_p is None and t.p_holm is None
    assert t.reason.startswith("fewer than 2 seeds")


def test_ranks_friedman_and_critical_difference_by_hand() -> None:
    result = statistics.table_statistics(analysis.build_tables(_grid(THREE)))
    r = result.ranks
    # medians: 0.1 -> gin 0.93, gat 0.85, gcn 0.575; 0.2 -> gat 0.74, gin 0.73, gcn 0.43
    assert r.average_ranks == pytest.approx({"gin": 1.5, "gat": 1.5, "gcn": 3.0})
    n, k = 2, 3
    sums = [3.0, 3.0, 6.0]
    chi2 = 12 * n / (k * (k + 1)) * sum(s**2 / n**2 for s in sums) - 3 * n * (k + 1)
    assert r.friedman["statistic"] == pytest.approx(chi2)
    assert r.friedman["p"] == pytest.approx(sps.chi2.sf(chi2, k - 1))
    cd = r.critical_difference
    assert cd["value"] == pytest.approx(2.343 * math.sqrt(k * (k + 1) / (6 * n)), abs=2e-3)
    assert cd["significantly_different"] == []  # 1.5 apart < CD 2.34


def test_nemenyi_matches_published_critical_values() -> None:
    # Demšar (2006), Table 5(a): q_0.05 for k = 2..10.
    published = [1.960, 2.343, 2.569, 2.728, 2.850, 2.949, 3.031, 3.102, 3.164]
    for k, q in zip(range(2, 11), published, strict=True):
        assert statistics.nemenyi_q(k) == pytest.approx(q, abs=2e-3)


def test_lower_is_better_ranks_the_smallest_first() -> None:
    rows = _grid({("gin", 0.1): [0.1, 0.2], ("gcn", 0.1): [0.5, 0.6], ("gat", 0.1): [0.3, 0.4]}, metric="val_loss")
    result = statistics.table_statistics(analysis.build_tables(rows, LOSS))
    assert result.ranks.average_ranks == {"gin": 1.0, "gat": 2.0, "gcn": 3.0}
    assert result.as_dict()["direction"] == "lower"


def test_incomplete_blocks_leave_out_what_keeps_fewer_values_and_say_so() -> None:
    # sage has one of 3 cells: leaving sage out keeps 3 rows x 3 cells, leaving cells out 4 rows x 1 cell.
    rows = _grid({**THREE, ("gin", 0.3): [0.5, 0.6], ("gat", 0.3): [0.4, 0.5], ("gcn", 0.3): [0.1, 0.2]})
    r = statistics.table_statistics(analysis.build_tables(rows + _grid({("sage", 0.1): [0.3, 0.4]}))).ranks
    assert "sage" not in r.average_ranks and r.rows == ("gat", "gcn", "gin") and r.cells == 3
    assert any("sage" in n for n in r.notes)
    # A single model in a new column: that cell is left out, every model keeps its rank.
    r = statistics.table_statistics(analysis.build_tables(_grid({**THREE, ("gin", 0.3): [0.5]}))).ranks
    assert r.rows == ("gat", "gcn", "gin") and r.cells == 2
    assert r.notes == ("1 of 3 cells left out: they lack a result of some row",)


def test_kendall_w_by_hand() -> None:
    import numpy as np

    assert statistics.kendall_w(np.array([[1, 2, 3], [1, 2, 3]])) == pytest.approx(1.0)
    assert statistics.kendall_w(np.array([[1, 2, 3], [3, 2, 1]])) == pytest.approx(0.0)
    # m = 3 raters, n = 3 objects: rank sums 4, 6, 8 -> S = 8, W = 12 S / (m^2 (n^3 - n)) = 96 / 216
    assert statistics.kendall_w(np.array([[1, 2, 3], [1, 3, 2], [2, 1, 3]])) == pytest.approx(96 / 216)
    assert statistics.kendall_w(np.array([[1, 2, 3]])) is None


def test_rank_consistency_across_columns_and_seeds() -> None:
    c = statistics.table_statistics(analysis.build_tables(_grid(THREE))).consistency
    (tau,) = c.kendall_tau
    # 0.1: gin > gat > gcn; 0.2: gat > gin > gcn -> one discordant pair of three: tau = 1/3
    assert (tau["a"], tau["b"]) == (0.1, 0.2) and tau["tau"] == pytest.approx(1 / 3)
    w = {e["column"]: e for e in c.kendall_w}
    assert w[0.1]["seeds"] == 4 and w[0.1]["w"] == pytest.approx(1.0)  # every seed orders gin > gat > gcn


def test_renderers_say_what_they_tested() -> None:
    result = statistics.table_statistics(analysis.build_tables(_grid(THREE)))
    text = statistics.render_text(result)
    assert "average rank over 2 cells (1 = best): gat 1.50, gin 1.50, gcn 3.00" in text
    assert "Friedman: chi2 = 3.000" in text and "Nemenyi critical difference: 2.344" in text
    assert "| group | column | a | b |" in statistics.render_markdown(result)
    latex = statistics.render_latex(result)
    assert latex.count("\\begin{tabular}") == 2 and "Friedman $\\chi^2 = 3.00$" in latex


@pytest.mark.e2e
def test_stats_command_json(tmp_path: Path) -> None:
    from gaptui.history.store import History
    from gaptui.workspace import Workspace

    ws = Workspace.resolve(tmp_path / "ws")
    ws.root.mkdir(parents=True)
    with History(ws, write=True) as history:
        history.put_many(_grid(THREE))
    res = run_cli("stats", "--format", "json", "--workspace", str(ws.root))
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert {"pairwise", "average_ranks", "friedman", "critical_difference"} <= set(doc)
    first = doc["pairwise"][0]
    assert set(first) >= {"group", "column", "a", "b", "n_a", "n_b", "welch_p", "mannwhitney_p", "p_holm"}
    assert isinstance(first["column"], float)
    assert doc["average_ranks"] == {"gat": 1.5, "gcn": 3.0, "gin": 1.5}
    res = run_cli("stats", "--format", "pdf", "--workspace", str(ws.root))
    assert res.returncode == 2 and res.stderr.startswith("error:")
