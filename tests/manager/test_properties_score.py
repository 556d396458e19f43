"""``gaptui properties score``: a finished run's model on the user's own graphs (edge lists, CSVs of triples)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from engine.errors import GaptuiError
from engine.properties.scoring import read_graphs
from gaptui.history.store import History
from gaptui.workspace import Workspace
from tests.support.cli import run_cli

ENV = {"OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One tiny finished properties study: irreflexive, mean, generalisation (trained) and robustness (reuses it)."""
    root = tmp_path_factory.mktemp("score")
    preset = root / "p.toml"
    preset.write_text(
        'task = "properties"\nproperties = ["irreflexive"]\npoolings = ["mean"]\n'
        'dimensions = ["generalisation", "robustness"]\nseeds = [0]\n'
        "[run]\nepochs = 1\ngraphs = 40\nsizes = 2\nhidden = 8\nlayers = 1\n"
    )
    ws = root / "ws"
    done = run_cli("run", "--preset", str(preset), "-w", str(ws), "--cpu-jobs", "1", "--gpus", "none", env=ENV)
    assert done.returncode == 0, done.stderr[-2000:]
    with History(Workspace(ws)) as history:
        records = {r["axes"]["dimension"]: r for r in history.by_hash().values()}
    loops = root / "loops.txt"
    loops.write_text("# two nodes, one self-loop\na b\nb b\n")
    kg = root / "kg.csv"
    kg.write_text("head,relation,tail\nann,parent_of,bob\nbob,parent_of,cy\nann,knows,bob\nbob,knows,ann\n")
    big = root / "big.txt"
    big.write_text("".join(f"{i} {i + 1}\n" for i in range(9)))  # 10 nodes: above the run's test size 6
    return {"ws": ws, "gen": records["generalisation"]["id"], "rob": records["robustness"]["id"], "root": root,
            "loops": loops, "kg": kg, "big": big}  # fmt: skip


def _score(study: dict, run: str, *args: str):
    return run_cli("properties", "score", run, *args, "-w", str(study["ws"]), env=ENV)


def test_edge_lists_and_triples_are_read_as_directed_graphs(tmp_path: Path) -> None:
    (g,) = read_graphs(_write(tmp_path / "g.txt", "x y\ny,z\n# comment\nz z  # loop\n"))
    assert g.nodes == ["x", "y", "z"] and g.relation is None and len(g.edges) == 3
    np.testing.assert_array_equal(g.adjacency, [[0, 1, 0], [0, 0, 1], [0, 0, 1]])
    graphs = read_graphs(_write(tmp_path / "t.csv", "a,r,b\nb,s,c\nb,r,a\n"))
    assert [(h.relation, h.nodes, len(h.edges)) for h in graphs] == [("r", ["a", "b"], 2), ("s", ["b", "c"], 1)]
    for text, message in [
        ("", "no edges"),
        ("a b c d\n", "line 1: expected an edge 'u v'"),
        ("head,relation,tail\na,r\n", "line 2: expected 'head,relation,tail'"),
    ]:
        with pytest.raises(GaptuiError, match=message):
            read_graphs(_write(tmp_path / "bad.txt", text))
    (tmp_path / "bin.txt").write_bytes(b"\xff\xfe\x00\x01")
    with pytest.raises(GaptuiError, match="not a text file"):
        read_graphs(tmp_path / "bin.txt")


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.mark.e2e
def test_score_prints_a_probability_per_graph_and_the_checkers_verdict(study: dict) -> None:
    done = _score(study, study["gen"], str(study["loops"]), str(study["kg"]), "--json")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert [(r["file"], r["relation"]) for r in rows] == [
        (str(study["loops"]), None), (str(study["kg"]), "parent_of"), (str(study["kg"]), "knows"),
    ]  # fmt: skip
    assert [r["exact"] for r in rows] == [False, True, True]  # irreflexive: the self-loop b -> b breaks it
    assert all(0.0 <= r["probability"] <= 1.0 and r["property"] == "irreflexive" for r in rows)
    assert "warning" not in done.stderr
    table = _score(study, study["gen"], str(study["kg"]))
    assert table.returncode == 0 and "parent_of" in table.stdout and "knows" in table.stdout


@pytest.mark.e2e
def test_explain_lists_the_edges_whose_removal_moves_the_probability_most(study: dict) -> None:
    done = _score(study, study["rob"], str(study["loops"]), "--json", "--explain", "--top", "5")
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout)
    edges = row["explain"]
    assert sorted(tuple(e["edge"]) for e in edges) == [("a", "b"), ("b", "b")]  # both edges, nothing else
    changes = [abs(e["change"]) for e in edges]
    assert changes == sorted(changes, reverse=True)
    for e in edges:
        assert e["without"] == pytest.approx(row["probability"] + e["change"])


@pytest.mark.e2e
def test_a_graph_above_the_largest_test_size_is_scored_with_a_warning(study: dict) -> None:
    done = _score(study, study["gen"], str(study["big"]), "--json")
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout)
    assert row["nodes"] == 10 and "above the run's largest test size 6" in row["warning"]
    assert done.stderr.startswith("warning: ") and str(study["big"]) in done.stderr


@pytest.mark.e2e
def test_bad_input_is_one_error_line(study: dict, tmp_path: Path) -> None:
    bad = _write(tmp_path / "bad.txt", "a b c\n")
    cases = [
        ((study["gen"], str(bad)), f"{bad}, line 1: expected an edge 'u v'"),
        ((study["gen"], str(tmp_path / "none.txt")), "no such file"),
        (("zzzz", str(study["loops"])), "no run 'zzzz'"),
    ]
    for args, message in cases:
        done = _score(study, *args)
        assert done.returncode != 0 and done.stderr.startswith("error: "), done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and message in done.stderr, done.stderr


@pytest.mark.e2e
def test_a_run_not_done_or_of_another_family_is_one_error_line(study: dict, tmp_path: Path) -> None:
    import shutil

    ws = tmp_path / "ws"
    shutil.copytree(study["ws"], ws)
    with History(Workspace(ws), write=True) as history:
        gen = history.get(study["gen"])
        history.update(gen["hash"], status="failed")
    done = run_cli("properties", "score", study["gen"], str(study["loops"]), "-w", str(ws), env=ENV)
    assert (
        done.returncode != 0
        and done.stderr.strip() == f"error: run {study['gen']} is failed, not done: its model is not trained"
    )
    with History(Workspace(ws), write=True) as history:
        history.update(gen["hash"], status="done", task="alignment")
    done = run_cli("properties", "score", study["gen"], str(study["loops"]), "-w", str(ws), env=ENV)
    assert (
        done.returncode != 0
        and done.stderr.strip() == f"error: run {study['gen']} is not a properties run (its family: alignment)"
    )
