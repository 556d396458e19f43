"""Solver rows, search on a model and ceilings as a user meets them: a grid, its tables, `gaptui evaluate`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import run_cli

#: Every test here starts the CLI or a worker in a subprocess.
pytestmark = pytest.mark.e2e

PRESET = """
description = "solvers beside a model"
noise = [0.1]
models = ["gcn"]
seeds = [0]
laplacian = true
solvers = ["faq", "grampa"]

[run]
epochs = 2
batch_size = 10
budget = 3000
out_dim = 8

[[datasets]]
base = "er"
params = { n = 12, degree = 3 }
train = 10
val = 8
"""


@pytest.fixture(scope="module")
def grid_ws(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("solvers")
    (root / "grid.toml").write_text(PRESET)
    ws = root / "ws"
    done = run_cli("run", "--preset", str(root / "grid.toml"), "--workspace", str(ws), "--cpu-jobs", "1")
    assert done.returncode == 0, done.stderr
    return ws


def _history(ws: Path) -> list[dict]:
    return json.loads(run_cli("history", "--workspace", str(ws), "--json").stdout)


def test_solver_rows_and_ceilings_in_the_table(grid_ws: Path) -> None:
    table = run_cli("table", "--workspace", str(grid_ws))
    assert table.returncode == 0, table.stderr
    lines = {line.split("│")[1].strip(): line for line in table.stdout.splitlines() if line.count("│") > 2}
    assert {"laplacian", "grampa", "faq", "gcn", "ceiling: orbits", "ceiling: 1-WL"} <= set(lines)
    assert "**" in lines["gcn"] and "**" not in lines["faq"]  # the solvers are references, never marked
    assert "±" not in lines["ceiling: orbits"]  # a ceiling is one number, not a spread over seeds
    latex = run_cli("table", "--workspace", str(grid_ws), "--format", "latex").stdout
    assert "ceiling: orbits &" in latex
    solved = run_cli("table", "--workspace", str(grid_ws), "--metric", "val_solved").stdout
    assert "solved pairs" in solved and "ceiling" not in solved  # the ceilings bound accuracies only
    faq = next(r for r in _history(grid_ws) if r["axes"]["model"] == "faq")
    assert {"val_solved", "val_edge_overlap", "val_orbit_acc", "seconds_per_pair", "val_orbit_ceiling"} <= set(
        faq["metrics"]
    )
    assert (Path(faq["run_dir"]) / "val_pairs.csv").read_text().startswith("pair,nodes,lap_acc,orbit_acc")


def test_the_same_grid_again_runs_nothing(grid_ws: Path) -> None:
    preset = grid_ws.parent / "grid.toml"
    again = run_cli("run", "--preset", str(preset), "--workspace", str(grid_ws), "--dry-run")
    assert again.returncode == 0 and "to run 0" in again.stdout + again.stderr


def test_evaluate_a_model_with_faq_on_top_then_again(grid_ws: Path) -> None:
    gcn = next(r for r in _history(grid_ws) if r["axes"]["model"] == "gcn")
    first = run_cli("evaluate", gcn["id"], "--decoder", "faq", "--workspace", str(grid_ws), "--json")
    assert first.returncode == 0, first.stderr
    out = json.loads(first.stdout)
    assert out["val_model_lap_acc"] == pytest.approx(gcn["metrics"]["val_lap_acc"])  # the model's own LAP
    assert out["val_lap_acc"] >= 0 and "val_edge_overlap" in out
    records = _history(grid_ws)
    decoded = [r for r in records if r["axes"]["model"] == "gcn+faq"]
    assert len(decoded) == 1 and decoded[0]["depends"] == [gcn["hash"]]
    again = run_cli("evaluate", gcn["id"], "--workspace", str(grid_ws), "--json")
    assert again.returncode == 0 and len(_history(grid_ws)) == len(records)
    table = run_cli("table", "--workspace", str(grid_ws)).stdout
    assert "gcn+faq" in table


def test_evaluate_refuses_bad_input_in_one_line(grid_ws: Path) -> None:
    records = _history(grid_ws)
    ids = {r["axes"]["model"]: r["id"] for r in records}
    for args, message in (
        (["nosuchrun"], "no run 'nosuchrun'"),
        ([ids["faq"]], "'faq' trains none"),
        ([ids["gcn"], "--decoder", "qap"], "decoder 'qap' is not one of faq"),
    ):
        out = run_cli("evaluate", *args, "--workspace", str(grid_ws))
        assert out.returncode == 2 and message in out.stderr, out.stderr
        assert out.stderr.count("error:") == 1 and "Traceback" not in out.stderr
    assert len(_history(grid_ws)) == len(records)


def test_datasets_show_their_ceilings(tmp_path: Path) -> None:
    ws = str(tmp_path / "ws")
    built = run_cli("datasets", "build", "er", "--noise", "0.1", "-p", "n=10", "-p", "degree=2", "--val", "6",
                    "--train", "4", "--workspace", ws)  # fmt: skip
    assert built.returncode == 0, built.stderr
    assert "ceiling: orbits" in built.stdout and "ceiling: 1-WL" in built.stdout
    listed = json.loads(run_cli("datasets", "list", "--workspace", ws, "--json").stdout)
    val = listed[0]["symmetry"]["val"]
    assert 0 < val["wl_ceiling"] <= val["orbit_ceiling"] <= 1
    assert "orbits" in run_cli("datasets", "list", "--workspace", ws).stdout
