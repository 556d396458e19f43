"""The bookkeeping of a GAPE grid run end to end: planned seeds per cell and the device of every run."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli import run_cli

#: Two seeds, a PE without and one with the pretraining run: one pretraining record, four downstream ones.
PRESET = """\
task = "gape"
name = "gape-bookkeeping"
description = "a tiny gape grid of two seeds"
pes = ["none", "gape"]
seeds = [0, 1]

[run]
pack_seeds = 2

[[datasets]]
base = "ringmol"
params = { count = 40, n = 8, max_rings = 1 }

[datasets.pretrain]
model = "gin"
out_dim = 8
epochs = 1
budget = 2000
batch_size = 20

[datasets.run]
layers = 1
heads = 1
budget = 1000
epochs = 2
batch_size = 16
warmup_steps = 2
"""


@pytest.fixture(scope="module")
def grid_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A workspace where the tiny two-seed GAPE grid has run through ``gaptui run`` on the CPU."""
    root = tmp_path_factory.mktemp("bookkeeping")
    preset = root / "gape-bookkeeping.toml"
    preset.write_text(PRESET)
    ws = root / "ws"
    res = run_cli("run", "--preset", str(preset), "-w", str(ws), "--cpu-jobs", "1", "--gpus", "none", timeout=600)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    return ws


def _records(ws: Path) -> list[dict]:
    from gaptui.history.store import History
    from gaptui.workspace import Workspace

    with History(Workspace(ws)) as history:
        return list(history.records())


@pytest.mark.e2e
def test_the_pretraining_run_plans_one_seed_and_its_table_cell_is_complete(grid_run: Path) -> None:
    from gaptui.analysis import build_tables

    records = _records(grid_run)
    assert len(records) == 5 and all(r["status"] == "done" for r in records)
    (pre,) = [r for r in records if r["task"] == "alignment"]
    assert pre["planned_seeds"] == 1
    assert sorted(r["planned_seeds"] for r in records if r["task"] == "gape") == [2, 2, 2, 2]
    table = run_cli("table", "--task", "alignment", "-w", str(grid_run))
    assert table.returncode == 0, table.stderr
    assert "gin" in table.stdout and "(1/2)" not in table.stdout  # a complete cell shows no count
    (alignment,) = build_tables(records, task="alignment")
    assert [(c.runs, c.planned) for c in alignment.iter_cells() if not c.bound] == [(1, 1)]  # ceilings apart
    (gape,) = build_tables(records, task="gape")
    assert sorted((c.row, c.runs, c.planned) for c in gape.iter_cells()) == [("gape", 2, 2), ("none", 2, 2)]


@pytest.mark.e2e
def test_every_run_of_the_grid_records_its_device_and_the_report_names_it(grid_run: Path, tmp_path: Path) -> None:
    records = _records(grid_run)
    assert all(r["repro"].get("device_name") and r["repro"].get("device") == "cpu" for r in records), [
        (r["task"], r["repro"].get("device_name")) for r in records
    ]
    res = run_cli("report", "--out", str(tmp_path / "report"), "-w", str(grid_run))
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    text = (tmp_path / "report" / "report.md").read_text()
    devices = [line for line in text.splitlines() if line.startswith("- devices")]
    assert devices and not any("unknown" in line for line in devices), devices


@pytest.mark.e2e
def test_a_record_written_with_the_presets_seeds_is_corrected_when_the_grid_runs_again(grid_run: Path) -> None:
    from gaptui.history.store import History
    from gaptui.workspace import Workspace

    (pre,) = [r for r in _records(grid_run) if r["task"] == "alignment"]
    with History(Workspace(grid_run), write=True) as history:
        history.update_many({pre["hash"]: {"planned_seeds": 2}})  # what earlier gaptui wrote
    preset = grid_run.parent / "gape-bookkeeping.toml"
    res = run_cli("run", "--preset", str(preset), "-w", str(grid_run), "--cpu-jobs", "1", "--gpus", "none")
    assert res.returncode == 0 and "5 runs, 5 already done" in res.stderr, res.stderr[-2000:]
    assert [r["planned_seeds"] for r in _records(grid_run) if r["task"] == "alignment"] == [1]


@pytest.mark.parametrize("name", ["smoke", "quick", "paper", "properties-smoke", "properties", "gape-smoke", "gape"])
def test_the_grid_plans_the_presets_seeds_for_every_cell_but_its_single_runs(name: str, tmp_path: Path) -> None:
    from engine.tasks import family
    from gaptui.presets import grid, load_preset
    from gaptui.run_records import planned_seeds_by_run
    from gaptui.workspace import Workspace

    preset = load_preset(name)
    specs = grid(preset, Workspace(tmp_path / "ws"))
    planned = planned_seeds_by_run(specs)
    for spec in specs:
        single = family(spec.task).is_baseline(spec) or spec.task != preset.task  # a GAPE grid's pretraining run
        assert planned[spec.hash()] == (1 if single else len(preset.seeds)), family(spec.task).describe(spec)
