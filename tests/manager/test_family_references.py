"""Every family's reference table: gape's Table 1 and properties' Table 2 as published, the comparison of their
tables with them (CLI, report, terminal app), the toy plug-in's own reference, and optimal lines only where a
family declares them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.errors import GaptuiError
from gaptui import analysis
from gaptui.analysis import reference
from gaptui.workspace import Workspace
from tests.support.cli import run_cli
from tests.support.records import gape_records, properties_records, toy_records
from tests.support.tui import shown


def test_gape_table_1_as_published() -> None:
    paper = reference.load_reference("paper", task="gape")
    assert (paper.task, paper.metric, paper.axes, paper.table) == ("gape", "val_mae", ("dataset", "pe"), "")
    assert "Table 1" in paper.source
    pes = ("none", "lap", "abs-lap", "r-lap", "rwpe", "gape", "gape+rwpe")
    assert set(paper.cells) == {(d, pe) for d in ("aqsol", "pcqm4mv2", "zinc") for pe in pes}
    for dataset, pe, mean, std in (
        ("aqsol", "none", 1.71, 0.05),
        ("aqsol", "lap", 1.31, 0.006),
        ("aqsol", "gape+rwpe", 1.069, 0.009),
        ("pcqm4mv2", "gape", 0.133, 0.003),
        ("zinc", "r-lap", 0.50, 0.042),
        ("zinc", "gape+rwpe", 0.109, 0.005),
    ):
        cell = paper.cell(dataset, pe)
        assert cell is not None and (cell.median, cell.std) == (pytest.approx(mean), pytest.approx(std))
    # SignNet has no value on the pe axis: left out, and the file says so.
    assert "SignNet" in paper.path.read_text() and not any("signnet" in str(k).lower() for k in paper.cells)


def test_properties_table_2_as_published() -> None:
    paper = reference.load_reference("paper", task="properties")
    assert (paper.metric, paper.axes, paper.table) == ("r_score", ("pooling", "dimension"), "Table 2: mean R score")
    expected = {
        ("mean", "generalisation"): 1.003,
        ("mean", "sensitivity"): 1.008,
        ("mean", "robustness"): 0.978,
        ("attention", "generalisation"): 1.044,
        ("attention", "sensitivity"): 1.027,
        ("attention", "robustness"): 1.033,
        ("sopool_bimap", "generalisation"): 1.004,
        ("sopool_bimap", "sensitivity"): 1.037,
        ("sopool_bimap", "robustness"): 1.002,
    }
    assert {k: c.median for k, c in paper.cells.items()} == pytest.approx(expected)
    assert all(c.std is None for c in paper.cells.values())


def test_gape_comparison_by_hand() -> None:
    paper = reference.load_reference("paper", task="gape")
    (table,) = analysis.build_tables(gape_records(), task="gape")
    cmp = reference.compare(table, paper)
    assert cmp is not None and cmp.rows == ("none", "lap", "abs-lap", "r-lap", "rwpe", "gape", "gape+rwpe")
    assert cmp.difference("none", "zinc") == pytest.approx(0.61 - 0.658)
    assert cmp.difference("gape", "zinc") == pytest.approx(0.15 - 0.147)
    agreement = cmp.agreement["zinc"]
    # Same order none > lap > gape (MAE) on both sides; the paper's best of these three, gape, is our best.
    assert agreement.tau == pytest.approx(1.0) and agreement.rows == ("none", "lap", "gape")
    assert agreement.reference_best == ("gape+rwpe",) and agreement.best_within_1 is None
    doc = reference.comparison_json(cmp)
    assert doc["task"] == "gape" and doc["agreement"][0]["dataset"] == "zinc" and doc["agreement"][0]["pes"]
    cell = next(c for c in doc["cells"] if c["pe"] == "lap" and c["dataset"] == "zinc")
    assert cell["mean"] == pytest.approx(0.2) and cell["reference_mean"] == pytest.approx(0.171)


def test_properties_table_2_comparison_and_ranking_tables_left_alone() -> None:
    paper = reference.load_reference("paper", task="properties")
    tables = analysis.build_tables(properties_records(), task="properties")
    assert [t.derived for t in tables] == [False, False, True, True]  # ... Table 2, the pooling advice
    assert [reference.compare(t, paper) for t in (*tables[:2], tables[3])] == [None, None, None]
    assert "compares Table 2: mean R score only" in reference.not_covered(tables[0], paper)
    cmp = reference.compare(tables[2], paper)
    assert cmp is not None and cmp.rows == ("mean", "attention", "sopool_bimap")
    # Mean R over the properties (see properties_records).
    assert cmp.difference("mean", "generalisation") == pytest.approx((0.75 + 0.8 / 0.9) / 2 - 1.003)
    assert cmp.difference("attention", "generalisation") == pytest.approx((1.25 + 1.0 / 0.9) / 2 - 1.044)
    assert cmp.difference("attention", "sensitivity") == pytest.approx(1.0 - 1.027)
    assert cmp.agreement["generalisation"].tau == pytest.approx(1.0)
    assert cmp.agreement["generalisation"].best_within_1 is True
    assert cmp.difference("sopool_bimap", "robustness") is None


def test_optimal_lines_are_what_each_family_declares() -> None:
    gape = analysis.build_tables(gape_records(), task="gape")
    (text,) = [analysis.render_markdown(gape)]
    assert "ptimal" not in text and analysis.gap_analysis(gape[0]).optimal is None
    props = analysis.build_tables(properties_records(), task="properties")
    text = analysis.render_markdown(props)
    assert "Optimal property (largest best − worst spread): connex." in text
    assert "Optimal dimension (largest best − worst spread): generalisation." in text
    assert analysis.tables_json(gape)[0]["optimal"] is None


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    from gaptui.history.store import History

    ws = Workspace.resolve(tmp_path / "ws")
    ws.root.mkdir(parents=True)
    with History(ws, write=True) as history:
        history.put_many(gape_records() + properties_records())
    return ws


@pytest.mark.e2e
def test_table_reference_paper_for_gape_and_properties(workspace: Workspace) -> None:
    where = ("--workspace", str(workspace.root))
    res = run_cli("table", "--task", "gape", "--reference", "paper", "--format", "json", *where)
    assert res.returncode == 0, res.stderr
    (doc,) = json.loads(res.stdout)
    assert doc["reference"] == "paper" and doc["metric"] == "val_mae"
    res = run_cli("table", "--task", "gape", "-r", "paper", "-f", "csv", *where)
    assert "pe,dataset,mean,reference_mean,reference_std,difference" in res.stdout
    assert "lap,zinc,0.2,0.171,0.008," in res.stdout
    res = run_cli("table", "--task", "properties", "-r", "paper", "-f", "md", *where)
    assert res.returncode == 0, res.stderr
    assert "## Table 2: mean R score: ours vs paper" in res.stdout and "| generalisation |" in res.stdout
    res = run_cli("gap", "--task", "gape", *where)  # the family declares no optimal line: none printed
    assert res.returncode == 0 and "gap to the worst PE" in res.stdout and "optimal" not in res.stdout
    res = run_cli("table", "--task", "gape", "-r", "papr", *where)
    assert res.returncode == 2 and "unknown reference 'papr' (did you mean 'paper'?); known: paper" in res.stderr


def test_report_compares_every_family_with_its_paper(workspace: Workspace, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    pytest.importorskip("markdown")
    from gaptui import report

    records = gape_records() + properties_records()
    report.write_report(records, tmp_path / "out", workspace)
    text = (tmp_path / "out" / "report.md").read_text()
    assert text.count("Compared with reference `paper`") == 2
    assert "Table 2: mean R score: ours vs paper" in text and "gaptui: ours vs paper" not in text


# ------------------------------------------------------------------------------------------ a plug-in family


def test_a_plug_in_family_ships_its_reference_and_optimal_line(toy: None, tmp_path: Path) -> None:
    from tests.support.toy_family import REFERENCE

    assert reference.reference_names(task="toy") == ["paper"]
    paper = reference.load_reference("paper", task="toy")
    assert paper.path == REFERENCE and paper.source == "the toy paper, Table 1" and paper.name == "paper"
    (table,) = analysis.build_tables(toy_records(), task="toy")
    cmp = reference.compare(table, paper)
    assert cmp is not None and cmp.difference("mean", 2) == pytest.approx(0.02)
    assert cmp.agreement[2].tau == pytest.approx(1.0) and cmp.agreement[2].best_within_1 is True
    # The spread of the models is 0.52 at size 2 and 0.5 at size 3: size 2 is optimal.
    assert "Optimal size (largest best − worst spread): 2." in analysis.render_markdown([table])
    with pytest.raises(GaptuiError, match="holds task 'alignment' results"):
        bad = tmp_path / "a.csv"
        bad.write_text("# task: alignment\ndataset,model,noise,median,std\ner,gcn,0.1,0.5,\n")
        reference.load_reference(str(bad), task="toy")


@pytest.mark.asyncio
async def test_ranking_screen_compares_gape_and_properties_with_their_papers(workspace: Workspace) -> None:
    from textual.widgets import Static

    from gaptui.tui.app import GaptuiApp
    from gaptui.tui.screens.ranking import RankingScreen

    app = GaptuiApp(workspace)
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.press("f5")
        await pilot.pause()
        ranking = app.screen
        assert isinstance(ranking, RankingScreen)
        while ranking.task_name != "gape":
            await pilot.press("t")
            await pilot.pause()
        await pilot.press("r")
        await pilot.pause()
        compare = ranking.query_one("#ranking-compare", Static)
        assert ranking.reference == "paper" and compare.display
        text = shown(compare)
        assert "ours vs paper" in text and "0.171" in text and "Table 1" in text
        await pilot.press("t")  # properties: its dimension tables have no reference, Table 2 has
        await pilot.pause()
        assert ranking.task_name == "properties" and ranking.reference == "paper"
        assert "compares Table 2: mean R score only" in shown(compare)
        while ranking.dataset != "Table 2: mean R score":
            await pilot.press("right_square_bracket")
            await pilot.pause()
        assert "Table 2: mean R score — r_score: ours vs paper" in shown(compare)
        await pilot.press("ctrl+q")
