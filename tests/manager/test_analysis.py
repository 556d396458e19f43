"""Ranking tables, marks, gaps and their renderers (gaptui.analysis), and the `table`/`gap`/`export` commands."""

from __future__ import annotations

import csv
import io
import json
import math
import os
from pathlib import Path
from typing import Any

import pytest
import typer
from rich.console import Console
from typer.testing import CliRunner

from engine.errors import GaptuiError
from engine.tasks import family
from gaptui import analysis
from gaptui.analysis import BEST, WITHIN_1, WITHIN_3
from gaptui.cli.analysis import register
from tests.support.cli import run_cli
from tests.support.records import rec

LAP = family("alignment").metric("val_lap_acc")
LOSS = family("alignment").metric("val_loss")


def grid() -> list[dict[str, Any]]:
    """Hand-computed fixture.

    noise 0.1: gcn 4 seeds [.90 .94 .96 .98] -> median .95 (even count), std .034157 -> "95.0 ± 3.4", best;
               gin one seed .945 (0.5 pp) -> within 1, "(1/4)"; gat [.93 .93] -> 2 pp -> within 3;
               ggnn .90 (5 pp, planned None) -> unmarked; laplacian .99 -> highest but never marked.
    noise 0.2: gcn .80 and gin .80 tie -> both best; gat .79 exactly 1 pp -> within 1; ggnn .77 exactly 3 pp
               -> within 3; laplacian .50.
    Also: a queued gin run and a failed gat run (ignored) and a second dataset.
    """
    rows = [rec("gcn", 0.1, v, seed) for seed, v in enumerate([0.96, 0.90, 0.98, 0.94])]
    rows += [rec("gin", 0.1, 0.945, 0), rec("gin", 0.1, None, 1, status="queued")]
    rows += [rec("gat", 0.1, 0.93, 0), rec("gat", 0.1, 0.93, 1), rec("gat", 0.1, 0.1, 2, status="failed")]
    rows += [rec("ggnn", 0.1, 0.90, planned=None), rec("laplacian", 0.1, 0.99)]
    rows += [rec("gcn", 0.2, 0.80), rec("gin", 0.2, 0.80), rec("gat", 0.2, 0.79), rec("ggnn", 0.2, 0.77)]
    rows += [rec("laplacian", 0.2, 0.50)]
    rows += [rec("gcn", 0.1, 0.5, dataset="tree"), rec("gin", 0.1, 0.4, dataset="tree")]
    return rows


def table_for(records: list[dict[str, Any]], dataset: str = "er", metric: str = "val_lap_acc") -> analysis.RankingTable:
    (table,) = analysis.build_tables(records, metric, dataset)
    assert table.group == dataset
    return table


# ------------------------------------------------------------------------------------------ statistics and marks


def test_median_std_and_text_against_hand_computed_values() -> None:
    table = table_for(grid())
    gcn = table.cell("gcn", 0.1)
    assert gcn is not None and gcn.runs == 4
    assert gcn.median == pytest.approx(0.95)  # even count: mean of .94 and .96
    assert gcn.std == pytest.approx(math.sqrt(0.0035 / 3))  # sample std, ddof=1
    assert gcn.text(LAP) == "95.0 ± 3.4"
    gin = table.cell("gin", 0.1)
    assert gin is not None and gin.std == 0.0 and gin.runs == 1  # one run: std 0, the queued run not counted
    assert table.cell("gatv2", 0.1) is None


def test_marks_within_thresholds_and_ties() -> None:
    table = table_for(grid())
    marks = {(m, n): c.mark for (m, n), c in table.cells.items()}
    assert marks[("gcn", 0.1)] == BEST
    assert marks[("gin", 0.1)] == WITHIN_1
    assert marks[("gat", 0.1)] == WITHIN_3
    assert marks[("ggnn", 0.1)] == ""
    assert marks[("gcn", 0.2)] == BEST and marks[("gin", 0.2)] == BEST  # a tie: both best
    assert marks[("gat", 0.2)] == WITHIN_1  # exactly 1 point counts as within
    assert marks[("ggnn", 0.2)] == WITHIN_3  # exactly 3 points
    assert [c.row for c in table.best(0.2)] == ["gcn", "gin"]


def test_laplacian_never_marked_nor_best() -> None:
    table = table_for(grid())
    lap = table.cell("laplacian", 0.1)
    assert lap is not None and lap.median == pytest.approx(0.99) and lap.mark == ""
    assert [c.row for c in table.best(0.1)] == ["gcn"]
    only_baseline = table_for([rec("laplacian", 0.1, 0.9)])
    assert only_baseline.cell("laplacian", 0.1).mark == "" and only_baseline.best(0.1) == []


def test_loss_metric_lower_is_better_with_relative_thresholds() -> None:
    rows = [
        rec("gcn", 0.1, 0.50, metric="val_loss"),
        rec("gin", 0.1, 0.504, metric="val_loss"),  # 0.8 % above the best
        rec("gat", 0.1, 0.51, metric="val_loss"),  # 2 % above
        rec("ggnn", 0.1, 0.60, metric="val_loss"),
        rec("laplacian", 0.1, 0.10, metric="val_loss"),  # lowest, yet never best
    ]
    table = table_for(rows, metric="val_loss")
    assert {m: table.cell(m, 0.1).mark for m in table.rows} == {
        "laplacian": "",
        "gcn": BEST,
        "gin": WITHIN_1,
        "gat": WITHIN_3,
        "ggnn": "",
    }
    assert table.cell("gcn", 0.1).text(LOSS) == "0.500 ± 0.000 (1/4)"
    gap = analysis.gap_analysis(table)
    assert gap.gaps["gcn"][0.1] == pytest.approx(0.10)  # measured in the better direction: worst − model
    assert gap.gaps["ggnn"][0.1] == 0.0


def test_planned_seed_counts() -> None:
    table = table_for(grid())
    assert table.cell("gin", 0.1).text(LAP) == "94.5 ± 0.0 (1/4)"
    assert table.cell("gcn", 0.1).text(LAP) == "95.0 ± 3.4"  # complete: no count
    assert table.cell("ggnn", 0.1).text(LAP) == "90.0 ± 0.0"  # nothing planned: no count
    # The preset planned 10 in a queued record: the done one shows it.
    rows = [rec("gcn", 0.1, 0.9, planned=None), rec("gcn", 0.1, None, 1, status="queued", planned=10)]
    assert table_for(rows).cell("gcn", 0.1).text(LAP) == "90.0 ± 0.0 (1/10)"


def test_rerun_of_a_seed_counts_once_latest_wins() -> None:
    rows = [
        rec("gcn", 0.1, 0.5, 0, finished="2024-01-01T00:00:00"),
        rec("gcn", 0.1, 0.9, 0, finished="2024-02-01T00:00:00"),
        rec("gcn", 0.1, 0.7, 0, finished="2024-01-15T00:00:00"),
    ]
    cell = table_for(rows).cell("gcn", 0.1)
    assert cell.values == (0.9,)


def test_model_order_and_noise_columns() -> None:
    rows = [rec(m, n, 0.5) for m in ("zzz", "gat", "gatv2", "aaa", "gcn", "laplacian", "gin") for n in (0.2, 0.05)]
    rows.append(rec("gcn", 0.1 + 0.2 - 0.2, 0.5))  # float noise jitter lands in the 0.1 column
    table = table_for(rows)
    assert table.rows == ("laplacian", "gcn", "gin", "gat", "gatv2", "aaa", "zzz")
    assert table.columns == (0.05, 0.1, 0.2)


def test_only_done_records_with_the_metric_count() -> None:
    rows = [rec("gcn", 0.1, 0.9, status=s) for s in ("queued", "running", "failed", "cancelled", "interrupted")]
    assert analysis.build_tables(rows) == []
    assert analysis.build_tables([rec("gcn", 0.1, 0.9)], metric="val_top5_acc") == []
    assert [t.group for t in analysis.build_tables(grid())] == ["er", "tree"]


# ------------------------------------------------------------------------------------------ gap


def test_gap_and_optimal() -> None:
    gap = analysis.gap_analysis(table_for(grid()))
    assert gap.rows == ("gcn", "gin", "ggnn", "gat")  # laplacian excluded
    assert gap.gaps["gcn"][0.1] == pytest.approx(0.05)
    assert gap.gaps["gin"][0.1] == pytest.approx(0.045)
    assert gap.gaps["gat"][0.1] == pytest.approx(0.03)
    assert gap.gaps["ggnn"][0.1] == 0.0
    assert gap.spread[0.1] == pytest.approx(0.05) and gap.spread[0.2] == pytest.approx(0.03)
    assert gap.optimal == 0.1


def test_optimal_tie_goes_to_lower_noise() -> None:
    rows = [rec("gcn", n, 0.9) for n in (0.3, 0.1, 0.2)] + [rec("gin", n, 0.8) for n in (0.3, 0.1, 0.2)]
    assert analysis.gap_analysis(table_for(rows)).optimal == 0.1
    single = analysis.gap_analysis(table_for([rec("gcn", 0.2, 0.9), rec("laplacian", 0.1, 0.9)]))
    assert single.columns == (0.2,) and single.spread == {0.2: 0.0} and single.optimal == 0.2
    assert analysis.gap_analysis(table_for([rec("laplacian", 0.1, 0.9)])).optimal is None


# ------------------------------------------------------------------------------------------ renderers


def test_text_rendering_shows_markers_and_legend() -> None:
    text = analysis.render_text(analysis.build_tables(grid(), group="er"), width=200)
    assert "\x1b[" not in text
    assert "95.0 ± 3.4 **" in text and "94.5 ± 0.0 (1/4) *" in text and "93.0 ± 0.0 (2/4) +" in text
    assert "99.0 ± 0.0 *" not in text and "99.0 ± 0.0 +" not in text
    assert "training-free, or search on a trained model, never marked" in text
    assert "optimal noise (largest best − worst spread): 0.1" in text


def test_wide_grid_is_split_over_tables_that_fit_the_width() -> None:
    rows = [rec(m, n / 100, 0.5 + n / 100) for m in ("gcn", "gin", "laplacian") for n in range(12)]
    text = analysis.render_text(analysis.build_tables(rows), width=80)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert text.count("er (continued)") >= 2
    assert "η=0.11" in text and "61.0 ± 0.0 (1/4) **" in text  # nothing squeezed into an ellipsis
    assert "…" not in text
    gap_text = io.StringIO()
    gap = analysis.gap_analysis(analysis.build_tables(rows)[0])
    Console(file=gap_text, width=60, color_system=None).print(analysis.render_gap_rich(gap, width=60))
    assert "(continued)" in gap_text.getvalue() and "…" not in gap_text.getvalue()


def test_markdown() -> None:
    md = analysis.render_markdown(analysis.build_tables(grid()))
    lines = md.splitlines()
    assert "## er" in lines and "## tree" in lines
    assert "| model | η=0.1 | η=0.2 |" in lines
    assert "| gcn | **95.0 ± 3.4** \\*\\* | **80.0 ± 0.0 (1/4)** \\*\\* |" in lines
    assert "| gin | 94.5 ± 0.0 (1/4) \\* | **80.0 ± 0.0 (1/4)** \\*\\* |" in lines
    assert "| gatedgcn |" not in md
    assert "Optimal noise (largest best − worst spread): 0.1." in lines


def test_csv_is_one_row_per_cell() -> None:
    text = analysis.render_csv(analysis.build_tables(grid()))
    rows = list(csv.DictReader(io.StringIO(text)))
    assert tuple(rows[0]) == analysis.csv_columns("alignment")
    assert len(rows) == 10 + 2
    gin = next(r for r in rows if r["dataset"] == "er" and r["model"] == "gin" and r["noise"] == "0.1")
    assert (gin["median"], gin["std"], gin["runs"], gin["planned"], gin["mark"]) == (
        "0.945",
        "0.0",
        "1",
        "4",
        "within1",
    )
    ggnn = next(r for r in rows if r["model"] == "ggnn" and r["noise"] == "0.1")
    assert ggnn["planned"] == "" and ggnn["mark"] == ""
    lap = next(r for r in rows if r["model"] == "laplacian" and r["noise"] == "0.1")
    assert float(lap["median"]) == pytest.approx(0.99) and lap["mark"] == ""


def test_latex() -> None:
    rows = grid() + [rec("my_model", 0.1, 0.2)]
    tex = analysis.render_latex(analysis.build_tables(rows, group="er"))
    assert tex.count("\\begin{tabular}{lrr}") == 1 and "\\toprule" in tex and "\\bottomrule" in tex
    assert "\\textbf{95.0 $\\pm$ 3.4}$^{**}$" in tex
    assert "\\underline{94.5 $\\pm$ 0.0 (1/4)}$^{*}$" in tex
    assert "93.0 $\\pm$ 0.0 (2/4)$^{+}$" in tex
    assert "my\\_model &" in tex and "my_model" not in tex
    assert "val\\_lap\\_acc" in tex and "val_lap_acc" not in tex
    assert analysis.latex_escape("a_b&c%") == "a\\_b\\&c\\%"


def test_json_cells_and_optimal() -> None:
    docs = analysis.tables_json(analysis.build_tables(grid()))
    json.dumps(docs)  # serialisable as it is
    er = docs[0]
    assert (er["dataset"], er["metric"], er["higher_is_better"], er["optimal"]) == (
        "er",
        "val_lap_acc",
        True,
        0.1,
    )
    assert er["columns"] == [0.1, 0.2] and er["rows"][0] == "laplacian"
    assert (er["task"], er["row_axis"], er["column_axis"], er["unit"]) == ("alignment", "model", "noise", "%")
    gcn = next(c for c in er["cells"] if c["model"] == "gcn" and c["noise"] == 0.1)
    assert gcn["median"] == pytest.approx(0.95) and gcn["mark"] == BEST and gcn["display"] == "95.0 ± 3.4"
    assert gcn["runs"] == 4 and gcn["planned"] == 4
    assert analysis.tables_json([]) == []


def test_gap_plot_string() -> None:
    gap = analysis.gap_analysis(table_for(grid()))
    plot = analysis.render_gap_plot(gap, width=70, height=16)
    assert "\x1b[" not in plot
    assert "optimal noise 0.1" in plot and "gcn" in plot and "ggnn" in plot
    assert len(plot.splitlines()) >= 10
    assert "\x1b[" in analysis.render_gap_plot(gap, width=70, height=16, color=True)


def test_unknown_metric_dataset_format_suggest() -> None:
    with pytest.raises(GaptuiError, match=r"unknown metric 'val_lap' \(did you mean 'val_lap_acc'\?\)"):
        analysis.check_metric("val_lap", grid())
    # An undeclared metric has no known direction: it is never ranked (no guessing from its name).
    with pytest.raises(GaptuiError, match=r"unknown metric 'custom_score'"):
        analysis.check_metric("custom_score", [rec("gcn", 0.1, 0.3, metric="custom_score")])
    assert analysis.check_metric("val_top3_acc", [rec("gcn", 0.1, 0.3, metric="val_top3_acc")]).share
    with pytest.raises(GaptuiError, match=r"unknown dataset 'ert' \(did you mean 'er'\?\)"):
        analysis.check_group("ert", grid())
    with pytest.raises(GaptuiError, match=r"unknown format 'latx' \(did you mean 'latex'\?\)"):
        analysis.check_format("latx")


# ------------------------------------------------------------------------------------------ export


def test_export_writes_four_files_atomically_and_protects_user_files(tmp_path: Path) -> None:
    out = tmp_path / "exports" / "paper"
    records = grid()
    written = analysis.export_all(records, out)
    assert [p.name for p in written] == [*analysis.EXPORT_FILES, analysis.EXPORT_MANIFEST]
    assert json.loads((out / "runs.json").read_text()) == records
    assert "gin,0.1,0.945,0.0,1,4,within1" in (out / "tables.csv").read_text()
    assert "## er" in (out / "tables.md").read_text()
    assert "\\toprule" in (out / "tables.tex").read_text()
    assert not list(out.glob("*.tmp"))
    analysis.export_all(records[:3], out)  # our own files are replaced
    assert len(json.loads((out / "runs.json").read_text())) == 3

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "tables.md").write_text("my notes")
    with pytest.raises(GaptuiError, match="was not written by gaptui export"):
        analysis.export_all(records, mine)
    assert sorted(p.name for p in mine.iterdir()) == ["tables.md"]  # nothing written
    assert (mine / "tables.md").read_text() == "my notes"
    analysis.export_all(records, mine, force=True)
    assert (mine / "tables.md").read_text().startswith("## er")


# ------------------------------------------------------------------------------------------ commands (CliRunner)


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch):
    """A fresh Typer app with the analysis commands, reading records from a list the test sets."""
    import gaptui.history.store

    records: list[dict[str, Any]] = []
    monkeypatch.setattr(gaptui.history.store, "read_records", lambda ws: records)
    app = typer.Typer()
    register(app)
    runner = CliRunner()

    def invoke(*args: str, rows: list[dict[str, Any]] | None = None):
        records[:] = grid() if rows is None else rows
        return runner.invoke(app, list(args), env={**os.environ, "COLUMNS": "200"})

    return invoke


def test_table_command_formats(cli) -> None:
    res = cli("table", "--dataset", "er")
    assert res.exit_code == 0, res.output
    assert "95.0 ± 3.4 **" in res.output and "tree" not in res.output
    docs = json.loads(cli("table", "--format", "json").output)
    assert [d["dataset"] for d in docs] == ["er", "tree"]
    assert cli("table", "-f", "csv").output.startswith("dataset,model,noise,median,std,runs,planned,mark,tied\n")
    assert "| gcn |" in cli("table", "-f", "md").output
    assert "\\begin{tabular}" in cli("table", "-f", "latex", "--metric", "val_lap_acc").output


def test_table_command_errors(cli) -> None:
    for args, needle in (
        (("table", "--dataset", "ert"), "unknown dataset 'ert' (did you mean 'er'?)"),
        (("table", "--metric", "val_lap"), "unknown metric 'val_lap' (did you mean 'val_lap_acc'?)"),
        (("table", "--format", "latx"), "unknown format 'latx' (did you mean 'latex'?)"),
        (("gap", "--metric", "val_los"), "did you mean 'val_loss'?"),
    ):
        res = cli(*args)
        assert isinstance(res.exception, GaptuiError), res.output
        assert needle in str(res.exception)


def test_commands_without_finished_runs_are_friendly(cli) -> None:
    queued = [rec("gcn", 0.1, None, status="queued")]
    res = cli("table", rows=queued)
    assert res.exit_code == 0 and "no finished alignment runs yet" in res.output
    assert json.loads(cli("table", "--format", "json", rows=queued).output) == []
    assert json.loads(cli("gap", "--json", rows=[]).output) == []
    assert cli("table", "--dataset", "anything", rows=[]).exit_code == 0  # nothing to choose from yet
    res = cli("table", "--metric", "val_top5_acc")
    assert res.exit_code == 0 and "no finished alignment run reports metric 'val_top5_acc'" in res.output


def test_gap_command(cli) -> None:
    res = cli("gap", "--dataset", "er")
    assert res.exit_code == 0, res.output
    assert "spread (best − worst)" in res.output and "optimal noise 0.1" in res.output
    assert "er: optimal noise 0.1" in res.output
    (doc,) = json.loads(cli("gap", "--dataset", "er", "--json").output)
    assert doc["optimal"] == 0.1
    assert {"model": "gcn", "noise": 0.1, "gap": pytest.approx(0.05)} in doc["gaps"]


def test_export_command(cli, tmp_path: Path) -> None:
    res = cli("export", "--out", str(tmp_path / "x"))
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in (tmp_path / "x").iterdir()) == sorted(
        [*analysis.EXPORT_FILES, analysis.EXPORT_MANIFEST]
    )
    assert "wrote" in res.output and "tables.tex" in res.output


def test_table_on_2000_records(cli) -> None:
    """2,000 records rank into one table per dataset (its speed is measured in benchmarks/bench_manager.py)."""
    rows = [
        rec(m, n / 100, 0.5 + ((i * 7919) % 1000) / 2000, seed, dataset=d)
        for i, (d, n, m, seed) in enumerate(
            (d, n, m, s)
            for d in ("er", "tree")
            for n in range(0, 25, 1)
            for m in ("laplacian", "gcn", "gin", "gatedgcn", "ggnn", "gat", "gatv2", "pna")
            for s in range(5)
        )
    ]
    assert len(rows) == 2000
    res = cli("table", rows=rows)
    assert res.exit_code == 0 and "gatv2" in res.output and "tree" in res.output


# ------------------------------------------------------------------------------------------ real CLI (subprocess)


@pytest.mark.e2e
def test_real_cli(tmp_path: Path) -> None:
    from gaptui.history.store import History
    from gaptui.workspace import Workspace

    ws = Workspace.resolve(tmp_path / "ws")
    ws.root.mkdir(parents=True)
    with History(ws, write=True) as history:
        history.put_many(grid())
    where = ("--workspace", str(ws.root))

    res = run_cli("table", "--dataset", "ert", *where)
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.strip().splitlines() == ["error: unknown dataset 'ert' (did you mean 'er'?); known: er, tree"]
    res = run_cli("table", "--format", "json", *where)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)[0]["optimal"] == 0.1
    res = run_cli("table", "--dataset", "er", *where)
    assert res.returncode == 0 and "95.0 ± 3.4 **" in res.stdout
    res = run_cli("gap", "--dataset", "er", *where)
    assert res.returncode == 0 and "er: optimal noise 0.1" in res.stdout
    res = run_cli("export", "--out", str(tmp_path / "out"), *where)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "out" / "tables.tex").exists() and (tmp_path / "out" / "runs.json").exists()
