"""Task families: a toy family plugged in from outside runs through `gaptui run` with dependencies, blocked
dependants, a crash mid-chain, and family-driven history/table output (all in subprocesses, as a user runs it)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.errors import GaptuiError
from gaptui.history.store import read_records
from gaptui.workspace import Workspace
from tests.support.cli import run_cli, start_cli
from tests.support.presets import toy_preset
from tests.support.records import run_events

#: The worker subprocesses inherit this, so they find the family too.
ENV = {"GAPTUI_FAMILIES": "tests.support.toy_family", "OMP_NUM_THREADS": "1"}


def _count(record: dict, kind: str) -> int:
    return sum(e["event"] == kind for e in run_events(record))


@pytest.mark.e2e
def test_toy_family_runs_end_to_end_in_dependency_order(tmp_path: Path, toy: None) -> None:
    ws = tmp_path / "ws"
    preset = toy_preset(tmp_path)
    where = ("--workspace", str(ws))

    dry = run_cli("run", "--preset", str(preset), *where, "--dry-run", "--list", "--cpu-jobs", "2", env=ENV)
    assert dry.returncode == 0, dry.stderr
    assert "(task toy): 10 runs" in dry.stdout and "start order" in dry.stdout
    order = [line.split()[1] for line in dry.stdout.splitlines() if line.strip()[:1].isdigit()]
    pre_ids = [line.split()[1] for line in dry.stdout.splitlines() if " pre " in line and line.strip()[:1].isdigit()]
    assert len(order) == 10 and len(pre_ids) == 2 and set(order[:2]) == set(pre_ids)
    assert sum(f"(after {p})" in dry.stdout for p in pre_ids) == 2

    res = run_cli("run", "--preset", str(preset), *where, "--cpu-jobs", "2", "--gpus", "none", env=ENV)
    assert res.returncode == 0, res.stderr
    records = read_records(Workspace(ws))
    assert len(records) == 10 and {r["status"] for r in records} == {"done"}
    assert {r["task"] for r in records} == {"toy"}
    by_hash = {r["hash"]: r for r in records}
    for r in records:
        assert set(r["axes"]) == {"size", "model"} and _count(r, "done") == 1
        if r["axes"]["model"] == "pre":
            assert r["depends"] == [] and r["planned_seeds"] == 1
            continue
        (dep,) = r["depends"]
        upstream = by_hash[dep]
        assert upstream["axes"] == {"size": r["axes"]["size"], "model": "pre"}
        # it started only after its dependency was done
        assert run_events(r)[0]["t"] >= next(e["t"] for e in run_events(upstream) if e["event"] == "done")
    # each distinct input was prepared once, before the workers (which then found it)
    builds = (ws / "datasets" / "builds.log").read_text().split()
    assert sorted(builds) == ["2", "3"]

    table = run_cli("table", "--task", "toy", "--format", "json", *where, env=ENV)
    assert table.returncode == 0, table.stderr
    (doc,) = json.loads(table.stdout)
    assert (doc["task"], doc["metric"], doc["higher_is_better"]) == ("toy", "val_mae", False)
    assert (doc["row_axis"], doc["column_axis"], doc["columns"]) == ("model", "size", [2, 3])
    assert doc["rows"] == ["pre", "mean", "median"]
    best = {c["size"]: c["model"] for c in doc["cells"] if c["mark"] == "best"}
    assert best == {2: "median", 3: "median"}  # the lowest MAE: direction declared, not guessed
    gain = json.loads(run_cli("table", "--task", "toy", "-f", "json", "-m", "loss_gain", *where, env=ENV).stdout)
    assert gain[0]["higher_is_better"] is True  # a "loss" in the name does not make it lower-is-better
    assert {c["size"]: c["model"] for c in gain[0]["cells"] if c["mark"] == "best"} == best

    history = run_cli("history", "--task", "toy", *where, env=ENV)
    assert history.returncode == 0, history.stderr
    header = next(line for line in history.stdout.splitlines() if "status" in line)
    assert "size" in header and "model" in header and "val MAE" in header and "noise" not in header
    assert run_cli("history", "--task", "alignment", *where, env=ENV).stdout.startswith("no runs")
    pre = next(r for r in records if r["axes"]["model"] == "pre")
    shown = run_cli("show", pre["id"], "--task", "toy", *where, env=ENV)
    assert shown.returncode == 0 and "val MAE (val_mae)" in shown.stdout
    wrong = run_cli("show", pre["id"], "--task", "alignment", *where, env=ENV)
    assert wrong.returncode == 2 and wrong.stderr.startswith("error: no alignment run matches")
    csv_out = run_cli("export", "--task", "toy", "--out", str(tmp_path / "x"), *where, env=ENV)
    assert csv_out.returncode == 0, csv_out.stderr
    assert (tmp_path / "x" / "tables.csv").read_text().startswith("model,size,median,std,runs,planned,mark,tied\n")

    again = run_cli("run", "--preset", str(preset), *where, env=ENV)
    assert again.returncode == 0 and "10 already done" in again.stderr


@pytest.mark.e2e
def test_failed_dependency_blocks_its_dependants_which_never_start(tmp_path: Path, toy: None) -> None:
    ws = tmp_path / "ws"
    preset = toy_preset(tmp_path, fail_sizes=[2], seeds=[0])
    res = run_cli("run", "--preset", str(preset), "--workspace", str(ws), "--cpu-jobs", "2", env=ENV)
    assert res.returncode == 1
    assert "2 run(s) failed or blocked" not in res.stderr and "3 run(s) failed or blocked" in res.stderr
    records = read_records(Workspace(ws))
    pre2 = next(r for r in records if r["axes"] == {"size": 2, "model": "pre"})
    assert pre2["status"] == "failed" and pre2["error"] == "toy failure on purpose"
    for r in records:
        if r["axes"]["size"] == 2 and r["axes"]["model"] != "pre":
            assert r["status"] == "blocked" and r["error"] == f"dependency {pre2['id']} failed"
            assert run_events(r) == [] and r["attempts"] == 0  # never started
        elif r["axes"]["size"] == 3:
            assert r["status"] == "done"
    blocked = run_cli("history", "--status", "blocked", "--json", "--workspace", str(ws), env=ENV)
    assert len(json.loads(blocked.stdout)) == 2


@pytest.mark.e2e
def test_sigkill_mid_chain_then_rerun_finishes_every_cell_exactly_once(tmp_path: Path, toy: None) -> None:
    ws = tmp_path / "ws"
    gate = tmp_path / "gate"
    preset = toy_preset(tmp_path, seeds=[0], gate=str(gate))
    proc = start_cli("run", "--preset", str(preset), "--workspace", str(ws), "--cpu-jobs", "2", env=ENV, quiet=True)

    def waiting_downstream() -> list[dict]:
        try:
            records = read_records(Workspace(ws))
        except GaptuiError:
            return []
        pre_done = sum(r["axes"]["model"] == "pre" and r["status"] == "done" for r in records) == 2
        running = [r for r in records if r["status"] == "running" and _count(r, "start")]
        return running if pre_done and len(running) == 2 else []

    deadline = time.monotonic() + 240
    while not waiting_downstream():
        assert time.monotonic() < deadline and proc.poll() is None, "the chain did not reach its downstream runs"
        time.sleep(0.2)
    # A crash of the whole machine: the manager and its workers die at once.
    os.killpg(proc.pid, signal.SIGKILL)
    for r in waiting_downstream():
        os.killpg(r["pid"], signal.SIGKILL)
    proc.wait(timeout=30)
    gate.write_text("open")

    res = run_cli("run", "--preset", str(preset), "--workspace", str(ws), "--cpu-jobs", "2", env=ENV)
    assert res.returncode == 0, res.stderr
    assert "interrupted run(s)" in res.stderr
    records = read_records(Workspace(ws))
    assert len(records) == 6 and {r["status"] for r in records} == {"done"}
    for r in records:
        assert _count(r, "done") == 1  # every cell finished exactly once
        if r["axes"]["model"] == "pre":
            assert _count(r, "start") == 1  # the finished pretraining was not redone


def test_order_specs_puts_dependencies_first(toy: None) -> None:
    from engine.tasks import Placement, family
    from gaptui.launch import order_specs

    fam = family("toy")
    preset = fam.parse_preset({"sizes": [2], "models": ["mean"], "seeds": [0, 1]}, "toy preset")
    specs = fam.grid(preset, Placement("d", "r"))
    reordered = order_specs(list(reversed(specs)))
    assert reordered[0].model == "pre" and [s.seed for s in reordered[1:]] == [1, 0]


def test_family_metadata_is_checked_when_registered() -> None:
    from engine.tasks import FamilyRegistry, Metric, TableLayout, TaskFamily

    class Bad(TaskFamily):
        name = "bad"
        metrics = (Metric("val_mae", "val MAE", False),)
        default_metric = "val_acc"
        table = TableLayout(group=None, rows="model", columns="size")

    with pytest.raises(ValueError, match="metric 'val_acc' is not declared"):
        FamilyRegistry().register(Bad())

    class Half(TaskFamily):  # declares the metadata but writes no run, preset or grid
        name = "half"
        metrics = (Metric("val_mae", "val MAE", False),)
        table = TableLayout(group=None, rows="model", columns="size")

    with pytest.raises(ValueError) as missing:
        FamilyRegistry().register(Half())
    expected = "spec_type, axes, record_axes, run (or steps), parse_preset, grid"
    assert str(missing.value) == f"task family 'half' does not declare {expected}"
    assert Half.default_metric == "val_mae" and Half.title == "half"  # the optional declarations' defaults


@pytest.mark.e2e
def test_a_plug_in_family_adds_its_own_commands(tmp_path: Path) -> None:
    preset = toy_preset(tmp_path)
    res = run_cli("toy", "sizes", str(preset), env=ENV)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["2", "3"]
    assert "toy" in run_cli("--help", env=ENV).stdout
    assert "no such command 'toy'" in run_cli("toy", "sizes", str(preset)).stderr  # without the plug-in: none


@pytest.mark.e2e
def test_built_in_families_come_first_in_their_order_whichever_was_imported_first() -> None:
    code = (
        "import engine.brec.family, engine.properties.family, engine.gape.family\n"
        "from engine.tasks import FAMILIES\n"
        "print(','.join(FAMILIES.names()))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["alignment,gape,properties,brec"]
