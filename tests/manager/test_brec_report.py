"""BREC's table in counts (totals per seed, marks, reliability failures) and Kendall's tau between the alignment
ranking at its optimal noise and the BREC totals, from history records."""

from __future__ import annotations

import math
from typing import Any

from gaptui import analysis
from gaptui.families.brec.report import agreements, brec_tables, render_markdown, report_sections

CATEGORIES = ("basic", "regular", "strongly-regular", "extension", "cfi", "4-vertex", "distance-regular")
SIZES = dict(zip(CATEGORIES, (60, 50, 50, 100, 100, 20, 20), strict=True))


def brec(model: str, category: str, seed: int, found: int, failures: int = 0, subset: str = "all pairs") -> dict:
    pairs = SIZES[category]
    return {
        "id": f"{model}-{category}-{seed}-{subset}",
        "task": "brec",
        "axes": {"subset": subset, "model": model, "category": category},
        "seed": seed,
        "status": "done",
        "finished": "2026-01-01T00:00:00",
        "planned_seeds": 1 if model in ("1-wl", "3-wl") else 2,
        "metrics": {
            "accuracy": found / pairs,
            "distinguished": float(found),
            "pairs": float(pairs),
            "reliability_failures": float(failures),
        },  # fmt: skip
    }


def alignment(model: str, noise: float, acc: float) -> dict:
    return {
        "id": f"a-{model}-{noise}",
        "task": "alignment",
        "axes": {"dataset": "er", "noise": noise, "model": model, "recipe": "gaptui"},
        "seed": 0,
        "status": "done",
        "finished": "2026-01-01T00:00:00",
        "metrics": {"val_lap_acc": acc},
    }


def history() -> list[dict[str, Any]]:
    records = []
    three_wl = dict(zip(CATEGORIES, (60, 50, 0, 100, 60, 0, 0), strict=True))
    for category in CATEGORIES:
        records.append(brec("3-wl", category, 0, three_wl[category]))
        for seed in (0, 1):
            records.append(brec("gin", category, seed, 0))
            records.append(brec("gcn+rwpe:16", category, seed, {"basic": 50 + seed, "extension": 70}.get(category, 0)))
            failures = 2 if category == "cfi" else 0
            records.append(brec("gcn+lap:8", category, seed, {"basic": 30}.get(category, 0), failures))
    return records


def test_the_table_counts_per_category_totals_per_seed_and_marks_failures() -> None:
    (table,) = brec_tables(history())
    # the exact rows, the zoo in its order, then rows with positional inputs alphabetically (as alignment's)
    assert table.rows == ("3-wl", "gin", "gcn+lap:8", "gcn+rwpe:16")
    assert table.cells[("3-wl", "total")].text() == "270/400"
    assert table.cells[("gcn+rwpe:16", "basic")].text().startswith("50.5±0.7/60")
    assert table.cells[("gcn+rwpe:16", "total")].values == (120.0, 121.0)
    assert table.cells[("gcn+lap:8", "cfi")].text().endswith("!4") and table.unreliable("gcn+lap:8")
    assert not table.unreliable("gin") and table.total("gin") == 0
    text = render_markdown(table)
    assert "| gcn+lap:8 (unreliable) |" in text and "| 3-wl | 60/60 | 50/50 | 0/50 | 100/100 | 60/100" in text
    assert "\\*\\*" in text  # the best of a column is marked (escaped for Markdown)


def test_a_subset_of_pairs_is_its_own_table() -> None:
    records = [*history(), brec("gin", "basic", 0, 0, subset="first 2 pairs")]
    assert [t.subset for t in brec_tables(records)] == ["all pairs", "first 2 pairs"]
    assert analysis.build_tables(records, task="brec")[0].group == "all pairs"


def test_kendalls_tau_compares_reliable_models_at_the_optimal_noise() -> None:
    records = history()
    # at 0.04 every model aligns alike; at 0.12 they spread most: the optimal noise
    for model, high in (("gin", 0.60), ("gcn+rwpe:16", 0.80), ("gcn+lap:8", 0.30), ("gcn", 0.50)):
        records += [alignment(model, 0.04, 0.97), alignment(model, 0.12, high)]
    (table,) = brec_tables(records)
    (found,) = agreements(records, table)
    assert found.dataset == "er" and found.noise == 0.12
    assert found.models == ("gin", "gcn+rwpe:16")  # gcn has no BREC runs, gcn+lap:8 is unreliable
    assert found.tau == 1.0  # gin lower on both
    lines = "\n".join(report_sections(analysis.task_records(records, "brec"), records))
    assert "| er | 0.12 | 2 | +1.000 |" in lines
    assert "left out as unreliable on BREC: gcn+lap:8" in lines and "1-WL" in lines


def test_without_alignment_runs_the_report_says_what_to_run() -> None:
    (table,) = brec_tables(history())
    assert agreements(history(), table) == []
    text = "\n".join(report_sections(history(), history()))
    assert "no finished alignment runs" in text and "zoo-smoke" in text
    assert not math.isnan(table.cells[("gin", "basic")].median)


def test_brecs_table_regroups_the_categories_and_never_marks_the_exact_rows() -> None:
    (paper,) = [t for t in analysis.build_tables(history(), task="brec") if t.derived]
    assert paper.group == "BREC's table: pairs distinguished per category of the paper"
    assert paper.columns == ("basic", "regular", "extension", "cfi", "total")
    assert paper.cell("3-wl", "regular").median == 50 / 140 and paper.cell("3-wl", "total").median == 270 / 400
    assert paper.cell("3-wl", "total").mark == "" and paper.cell("gcn+rwpe:16", "total").mark == "best"
    assert paper.cell("gcn+rwpe:16", "basic").values == (50 / 60, 51 / 60)  # one value per seed
