"""Reference results: the shipped Table D.3, user reference files, and `gaptui table --reference`."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from engine.errors import GaptuiError
from gaptui import analysis
from gaptui.analysis import reference
from gaptui.analysis.statistics import kendall_tau
from gaptui.workspace import Workspace
from tests.support.cli import run_cli
from tests.support.records import rec
from tests.support.tui import shown

PAPER_DATASETS = ("er", "aqsol", "pcqm4mv2", "ogbn-arxiv", "corafull")
PAPER_NOISES = (0.04, 0.06, 0.08, 0.12, 0.15, 0.18, 0.24, 0.30)
PAPER_MODELS = ("laplacian", "gcn", "gin", "ggnn[steps=2]", "gat", "gatv2")


def test_paper_reference_covers_every_cell_of_table_d3() -> None:
    paper = reference.load_reference("paper", task="alignment")
    assert paper.metric == "val_lap_acc" and "Table D.3" in paper.source
    assert paper.path.parent == reference.BUNDLED
    assert set(paper.cells) == {(d, m, n) for d in PAPER_DATASETS for m in PAPER_MODELS for n in PAPER_NOISES}
    for (_, model, _), cell in paper.cells.items():
        assert (cell.std is None) == (model == "laplacian")  # the paper gives no spread for the baseline
    # Spot checks against the printed table (percent in the file, shares once loaded).
    for dataset, model, noise, median, std in (
        ("er", "gat", 0.12, 65.6, 0.8),
        ("er", "gcn", 0.04, 97.6, 0.4),
        ("aqsol", "ggnn[steps=2]", 0.15, 63.3, 0.4),
        ("pcqm4mv2", "gcn", 0.15, 61.7, 1.7),
        ("ogbn-arxiv", "gin", 0.30, 16.7, 0.2),
        ("corafull", "gatv2", 0.30, 22.8, 0.2),
    ):
        cell = paper.cell(dataset, model, noise)
        assert cell is not None
        assert cell.median == pytest.approx(median / 100) and cell.std == pytest.approx(std / 100)
    assert paper.cell("pcqm4mv2", "laplacian", 0.04).median == pytest.approx(0.756)


def fixture_history() -> list[dict]:
    """ER runs compared with the paper by hand.

    eta 0.12 (paper: gcn 49.5 < gin 54.8 < ggnn[steps=2] 62.8 < gat 65.6 = gatv2 65.6):
        ours gcn 63.5 (two seeds 63.0 and 64.0), gin 55.0, ggnn[steps=2] 60.0, gat 62.0, gatv2 61.0, laplacian 7.0.
        Pairs: gcn against each of the 4 others discordant (4), the 5 pairs among gin < ggnn[steps=2] < gat, gatv2
        concordant, gat-gatv2 tied in the paper (neither) -> tau_b = (5 - 4) / sqrt(10 * 9) = 0.1054.
        Paper best gat and gatv2; our best gcn 63.5, gat 1.5 points below -> not within 1 -> "no".
        Differences: gcn +14.0, gin +0.2, laplacian -0.5.
    eta 0.04: gcn 98.0, gat 99.0 (paper 97.6 < 99.8) -> tau 1, paper best gat is our best -> "yes".
    eta 0.5: not in the paper -> no tau, no verdict.
    """
    rows = [rec("gcn", 0.12, 0.63, 0), rec("gcn", 0.12, 0.64, 1)]
    rows += [rec(m, 0.12, v) for m, v in (("gin", 0.55), ("ggnn[steps=2]", 0.60), ("gat", 0.62), ("gatv2", 0.61))]
    rows += [rec("laplacian", 0.12, 0.07), rec("gcn", 0.04, 0.98), rec("gat", 0.04, 0.99)]
    rows += [rec("gcn", 0.5, 0.05), rec("gat", 0.5, 0.06), rec("gcn", 0.1, 0.5, dataset="tree")]
    return rows


def test_compare_differences_tau_and_best_by_hand() -> None:
    paper = reference.load_reference("paper", task="alignment")
    (table,) = analysis.build_tables(fixture_history(), "val_lap_acc", "er")
    cmp = reference.compare(table, paper)
    assert cmp is not None
    assert cmp.rows == ("laplacian", "gcn", "gin", "ggnn[steps=2]", "gat", "gatv2")
    assert cmp.difference("gcn", 0.12) == pytest.approx(0.14)
    assert cmp.difference("gin", 0.12) == pytest.approx(0.002)
    assert cmp.difference("laplacian", 0.12) == pytest.approx(-0.005)
    assert cmp.difference("gin", 0.04) is None and cmp.difference("gcn", 0.5) is None
    at12 = cmp.agreement[0.12]
    assert at12.tau == pytest.approx(1 / math.sqrt(90))
    assert at12.reference_best == ("gat", "gatv2") and at12.best_within_1 is False
    assert at12.rows == ("gcn", "gin", "ggnn[steps=2]", "gat", "gatv2")
    at04 = cmp.agreement[0.04]
    assert at04.tau == pytest.approx(1.0) and at04.reference_best == ("gat",) and at04.best_within_1 is True
    at50 = cmp.agreement[0.5]
    assert at50.tau is None and at50.best_within_1 is None and at50.reference_best == ()
    (tree,) = analysis.build_tables(fixture_history(), "val_lap_acc", "tree")
    assert reference.compare(tree, paper) is None


def test_kendall_tau_matches_scipy_with_ties() -> None:
    from scipy.stats import kendalltau

    for ours, theirs in (([1, 2, 3, 4], [1, 3, 2, 4]), ([1, 1, 2, 3], [2, 1, 1, 3]), ([3, 2, 1], [1, 2, 3])):
        assert kendall_tau(ours, theirs) == pytest.approx(kendalltau(ours, theirs).statistic)
    assert math.isnan(kendall_tau([1, 1], [1, 2]))


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("# metirc: val_lap_acc\ndataset,model,noise,median,std\n", ":1: unknown key 'metirc' (did you mean 'metri"),
        ("dataset,model,noise,meadian,std\ner,gcn,0.1,0.5,\n", ":1: header lacks column(s) median (did you mean"),
        ("dataset,model,noise,median,std\ner,gcn,0.1,high,\n", ":2: median 'high' is not a number"),
        ("dataset,model,noise,median,std\ner,gcn,1.5,0.5,\n", ":2: noise 1.5 is outside [0, 1)"),
        ("dataset,model,noise,median,std\ner,gcn,0.1,65.6,0.8\n", ":2: median 65.6 is outside 0 .. 1 (units: share;"),
        ("# units: percent\ndataset,model,noise,median,std\ner,gcn,0.1,50,-1\n", ":3: std -1 is negative"),
        ("dataset,model,noise,median,std\ner,gcn,0.1,0.5,\ner,gcn,0.10,0.6,\n", ":3: second row for dataset er"),
        ("# units: percentage\ndataset,model,noise,median,std\n", "units 'percentage' is not one of share, percent"),
        ("# just a comment\n", "no header line"),
        ("dataset,model,noise,median,std\n", "no rows after the header"),
    ],
)
def test_bad_reference_files_get_one_line_errors(tmp_path: Path, text: str, needle: str) -> None:
    path = write(tmp_path / "ref.csv", text)
    with pytest.raises(GaptuiError) as info:
        reference.load_reference(str(path))
    message = str(info.value)
    assert needle in message and str(path) in message and "\n" not in message


def test_reference_found_by_name_in_the_workspace_and_unknown_names(tmp_path: Path) -> None:
    ws = Workspace.resolve(tmp_path / "ws")
    text = "# source: my GPU box\ndataset,model,noise,median,std\ner,gcn,0.1,0.5,0.01\n"
    write(ws.root / "references" / "mine.csv", text)
    mine = reference.load_reference("mine", ws)
    assert mine.source == "my GPU box" and mine.cell("er", "gcn", 0.1).median == 0.5
    assert reference.reference_names(ws) == ["mine", "paper"]
    with pytest.raises(GaptuiError, match=r"unknown reference 'papr' \(did you mean 'paper'\?\); known: mine, paper"):
        reference.load_reference("papr", ws)
    with pytest.raises(GaptuiError, match="file not found"):
        reference.load_reference(str(tmp_path / "missing.csv"), ws)


def test_an_export_of_another_machine_is_a_reference(tmp_path: Path) -> None:
    analysis.export_all(fixture_history(), tmp_path / "other")
    other = reference.load_reference(str(tmp_path / "other" / "tables.csv"))
    (table,) = analysis.build_tables(fixture_history(), "val_lap_acc", "er")
    cmp = reference.compare(table, other)
    assert cmp is not None and cmp.difference("gcn", 0.12) == pytest.approx(0.0)
    assert cmp.agreement[0.12].tau == pytest.approx(1.0) and cmp.agreement[0.12].best_within_1 is True


# ------------------------------------------------------------------------------------------ the command


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    from gaptui.history.store import History

    ws = Workspace.resolve(tmp_path / "ws")
    ws.root.mkdir(parents=True)
    with History(ws, write=True) as history:
        history.put_many(fixture_history())
    return ws


@pytest.mark.e2e
def test_table_reference_command(workspace: Workspace) -> None:
    where = ("--workspace", str(workspace.root))
    res = run_cli("table", "--reference", "paper", "--dataset", "er", *where)
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "er — val_lap_acc: ours vs paper" in out
    assert "63.5 **" in out and "49.5 +14.0" in out and "7.5 −0.5" in out
    assert "+0.11" in out and "+1.00" in out and "no" in out and "yes" in out

    res = run_cli("table", "--reference", "paper", "--format", "json", *where)
    assert res.returncode == 0, res.stderr
    assert "note: reference 'paper' has no dataset 'tree'" in res.stderr
    (doc,) = json.loads(res.stdout)
    agreement = {a["noise"]: a for a in doc["agreement"]}
    assert agreement[0.12]["kendall_tau"] == pytest.approx(0.1054, abs=1e-4)
    assert agreement[0.12]["reference_best"] == ["gat", "gatv2"]
    assert agreement[0.12]["reference_best_within_1"] is False
    gcn = next(c for c in doc["cells"] if c["model"] == "gcn" and c["noise"] == 0.12)
    assert gcn["difference"] == pytest.approx(0.14) and gcn["reference_std"] == pytest.approx(0.009)

    res = run_cli("table", "-r", "paper", "-f", "md", "-d", "er", *where)
    assert "| 0.12 | 7.0 / 7.5 (−0.5) | 63.5 / 49.5 (+14.0) |" in res.stdout
    res = run_cli("table", "-r", "paper", "-f", "csv", "-d", "er", *where)
    assert "er,gcn,0.12,0.635,0.495,0.009," in res.stdout


@pytest.mark.e2e
def test_table_reference_errors(workspace: Workspace, tmp_path: Path) -> None:
    where = ("--workspace", str(workspace.root))
    bad = write(tmp_path / "bad.csv", "dataset,model,noise,median,std\ner,gcn,0.1,x,\n")
    for args, message in (
        (("--reference", "papr"), "error: unknown reference 'papr' (did you mean 'paper'?); known: paper"),
        (("--reference", str(bad)), f"error: {bad}:2: median 'x' is not a number"),
        (("--reference", "paper", "--metric", "val_loss"), "error: reference 'paper' holds val_lap_acc, not val_loss"),
        (("--reference", "paper", "--format", "latex"), "error: unknown format 'latex'"),
    ):
        res = run_cli("table", *args, *where)
        assert res.returncode == 2 and res.stdout == "", res.stdout
        (line,) = res.stderr.strip().splitlines()
        assert line.startswith(message), line


# ------------------------------------------------------------------------------------------ the terminal app


@pytest.mark.asyncio
async def test_ranking_screen_compares_with_the_paper(workspace: Workspace) -> None:
    from textual.widgets import Select, Static

    from gaptui.tui.app import GaptuiApp
    from gaptui.tui.screens.ranking import RankingScreen
    from gaptui.tui.widgets.ranking_grid import RankingGrid

    app = GaptuiApp(workspace)
    async with app.run_test(size=(140, 45)) as pilot:
        await pilot.press("f5")
        await pilot.pause()
        ranking = app.screen
        assert isinstance(ranking, RankingScreen)
        ranking.action_dataset(0)  # make sure "er" is shown (labels are sorted: er, tree)
        assert ranking.dataset == "er"
        compare = ranking.query_one("#ranking-compare", Static)
        assert not compare.display and ranking.query_one(RankingGrid).display
        await pilot.press("r")
        await pilot.pause()
        assert ranking.reference == "paper"
        assert ranking.query_one("#ranking-reference", Select).value == "paper"
        text = shown(compare)
        assert compare.display and not ranking.query_one(RankingGrid).display
        assert "49.5 +14.0" in text and "+0.11" in text and "ours vs paper" in text
        await pilot.press("right_square_bracket")  # the tree dataset: not in the paper
        await pilot.pause()
        assert ranking.dataset == "tree" and "has no dataset tree" in shown(compare)
        assert ranking.query_one(RankingGrid).display
        await pilot.press("r")  # back to none
        await pilot.pause()
        assert ranking.reference is None and not compare.display
        await pilot.press("ctrl+q")
