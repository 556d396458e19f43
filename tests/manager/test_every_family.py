"""A workspace holding runs of several families: ``stats``, ``figures`` and ``export --out`` cover each family in
turn without ``--task`` (as ``report`` does), and a reference with none of the history's cells is a note beside the
history's own table, not an error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gaptui.history.store import History
from gaptui.workspace import Workspace
from tests.support.cli import run_cli
from tests.support.records import alignment_history, gape_history, properties_history, rec

#: Every test here starts the CLI or a worker in a subprocess.
pytestmark = pytest.mark.e2e

pytest.importorskip("matplotlib")

TASKS = ("alignment", "gape", "properties")


@pytest.fixture(scope="module")
def three_families(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("three")
    ws = Workspace.resolve(root / "ws")
    with History(ws, write=True) as history:
        history.put_many([*alignment_history(ws.root), *gape_history(ws.root), *properties_history()])
    return ws.root


def test_stats_covers_every_family(three_families: Path) -> None:
    latex = run_cli("stats", "--format", "latex", "-w", str(three_families))
    assert latex.returncode == 0, latex.stderr
    assert [line for line in latex.stdout.splitlines() if line.startswith("% task ")] == [f"% task {t}" for t in TASKS]
    doc = json.loads(run_cli("stats", "--format", "json", "-w", str(three_families)).stdout)
    assert [d["task"] for d in doc] == list(TASKS)
    one = json.loads(run_cli("stats", "--task", "gape", "--format", "json", "-w", str(three_families)).stdout)
    assert one["task"] == "gape"  # one family named: its statistics, as before
    mixed = run_cli("stats", "--metric", "val_mae", "-w", str(three_families))
    assert mixed.returncode == 2 and mixed.stderr.strip().splitlines() == [
        "error: the history holds runs of 3 families (alignment, gape, properties): pass --task NAME"
    ]


def test_figures_and_export_cover_every_family(three_families: Path, tmp_path: Path) -> None:
    figs = run_cli("figures", "--out", str(tmp_path / "figs"), "-w", str(three_families))
    assert figs.returncode == 0, figs.stderr
    drawn = {p.name.split("-")[0] for p in (tmp_path / "figs").glob("*.png")}
    assert drawn == set(TASKS)
    out = run_cli("export", "--out", str(tmp_path / "tables"), "-w", str(three_families))
    assert out.returncode == 0, out.stderr
    for task in TASKS:
        runs = json.loads((tmp_path / "tables" / task / "runs.json").read_text())
        assert runs and {r["task"] for r in runs} == {task}
        assert (tmp_path / "tables" / task / "tables.tex").read_text().strip()


def test_a_reference_without_the_historys_cells_is_a_note_beside_the_table(tmp_path: Path) -> None:
    ws = Workspace.resolve(tmp_path / "ws")
    with History(ws, write=True) as history:
        history.put_many([rec("gcn", 0.5, 0.05, dataset="tree"), rec("gin", 0.5, 0.25, dataset="tree")])
    res = run_cli("table", "--reference", "paper", "-w", str(ws.root))
    assert res.returncode == 0, res.stderr
    assert res.stderr.strip().splitlines() == [
        "warning: reference 'paper' has no cell that the history has: the history's finished runs cover datasets "
        "tree, models gcn, gin, noise 0.5; the reference covers datasets er, aqsol, pcqm4mv2, ogbn-arxiv, corafull, "
        "models laplacian, gcn, gin, ggnn[steps=2], gat, gatv2, noise 0.04, 0.06, 0.08, 0.12, 0.15, 0.18, 0.24, "
        "0.3; the tables are shown without it"
    ]
    assert "gin" in res.stdout and "25.0" in res.stdout  # the history's own table
