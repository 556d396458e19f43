"""`gaptui run` end to end, in subprocesses: a grid, resume after SIGKILL, failures, Ctrl-C, two managers."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from gaptui.history.store import read_records
from gaptui.workspace import Workspace
from tests.support.cli import run_cli, start_cli
from tests.support.presets import alignment_preset
from tests.support.waiting import event_starts, wait_for

#: Every test here starts the CLI or a worker in a subprocess.
pytestmark = pytest.mark.e2e


def test_smoke_preset_end_to_end_then_table(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    res = run_cli("run", "--preset", "smoke", "--workspace", str(ws), "--cpu-jobs", "2")
    assert res.returncode == 0, res.stderr
    records = read_records(Workspace(ws))
    assert len(records) == 4 and {r["status"] for r in records} == {"done"}
    for r in records:
        assert 0 <= r["metrics"]["val_lap_acc"] <= 1 and r["params"] > 0 and r["duration"] > 0
        assert r["repro"]["versions"]["torch"] and r["repro"]["seed"] == 0 and r["planned_seeds"] == 1
    res = run_cli("table", "--format", "json", "--workspace", str(ws))
    assert res.returncode == 0, res.stderr
    tables = json.loads(res.stdout)
    assert len(tables) == 1 and tables[0]["dataset"] == "er[degree=4,n=20]"
    # the dataset's symmetry ceilings are rows of their own beside the models
    ceilings = [c for c in tables[0]["cells"] if c["model"].startswith("ceiling: ")]
    assert {c["model"] for c in ceilings} == {"ceiling: orbits", "ceiling: 1-WL"}
    assert all(0 < c["median"] <= 1 for c in ceilings)
    cells = [c for c in tables[0]["cells"] if c not in ceilings]
    assert {(c["model"], c["noise"]) for c in cells} == {(m, n) for m in ("gcn", "gin") for n in (0.05, 0.2)}
    by_model = {(r["axes"]["model"], r["axes"]["noise"]): r["metrics"]["val_lap_acc"] for r in records}
    for c in cells:
        assert c["median"] == by_model[(c["model"], c["noise"])] and c["runs"] == 1
    # the same command again is a no-op: everything is done
    again = run_cli("run", "--preset", "smoke", "--workspace", str(ws))
    assert again.returncode == 0 and "4 already done" in again.stderr
    assert all(event_starts(r["run_dir"]) == 1 for r in records)


@pytest.mark.slow  # 15-35 s of real worker processes on 2 cores: run with -m slow
def test_sigkill_then_rerun_finishes_each_cell_exactly_once(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    preset = alignment_preset(tmp_path, noise=(0.05, 0.2), models=("gcn", "gin"), run={"epochs": 3})
    proc = start_cli("run", "--preset", str(preset), "--workspace", str(ws), "--cpu-jobs", "1")

    def two_done() -> bool:
        try:
            return sum(r["status"] == "done" for r in read_records(Workspace(ws))) >= 2
        except Exception:  # noqa: BLE001 - the file may not exist yet
            return False

    wait_for(two_done, timeout=180)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    done_before = {r["hash"] for r in read_records(Workspace(ws)) if r["status"] == "done"}
    assert 2 <= len(done_before) < 4

    res = run_cli("run", "--preset", str(preset), "--workspace", str(ws), "--cpu-jobs", "1")
    assert res.returncode == 0, res.stderr
    records = read_records(Workspace(ws))
    assert len(records) == 4 and len({r["hash"] for r in records}) == 4
    assert {r["status"] for r in records} == {"done"}
    for r in records:
        if r["hash"] in done_before:
            assert event_starts(r["run_dir"]) == 1  # no finished run redone
        events = [json.loads(x) for x in (Path(r["run_dir"]) / "events.jsonl").read_text().splitlines()]
        assert sorted(e["epoch"] for e in events if e["event"] == "epoch") == [1, 2, 3]


@pytest.mark.slow  # 15-35 s of real worker processes on 2 cores: run with -m slow
def test_failing_worker_is_recorded_and_the_grid_goes_on(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    preset = alignment_preset(
        tmp_path, noise=(0.1,), models=("tests.support.worker_models:CrashModel", "gcn"), laplacian=True
    )
    res = run_cli("run", "--preset", str(preset), "--workspace", str(ws), "--cpu-jobs", "2")
    assert res.returncode == 1
    assert "1 run(s) failed" in res.stderr
    records = {r["axes"]["model"]: r for r in read_records(Workspace(ws))}
    crashed = records["tests.support.worker_models:CrashModel"]
    assert crashed["status"] == "failed" and "injected crash" in crashed["error"]
    assert any("Traceback" in line or "RuntimeError" in line for line in crashed["log_tail"])
    assert records["gcn"]["status"] == "done" and records["laplacian"]["status"] == "done"
    # a plain rerun skips the failure; --retry-failed runs it again (and it fails again)
    res = run_cli("run", "--preset", str(preset), "--workspace", str(ws))
    assert res.returncode == 1 and "1 failed before (skipped" in res.stderr  # not complete: not exit 0
    assert "1 run(s) of the preset are failed" in res.stderr
    res = run_cli("run", "--preset", str(preset), "--workspace", str(ws), "--retry-failed")
    assert res.returncode == 1
    crashed = next(r for r in read_records(Workspace(ws)) if r["axes"]["model"].endswith("CrashModel"))
    assert crashed["attempts"] == 2


def test_ctrl_c_cancels_workers_and_a_second_manager_is_refused(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    preset = alignment_preset(tmp_path, noise=(0.05,), models=("gcn",), run={"epochs": 20000})
    proc = start_cli("run", "--preset", str(preset), "--workspace", str(ws), "--cpu-jobs", "1")

    def running() -> bool:
        try:
            return any(r["status"] == "running" and event_starts(r["run_dir"]) for r in read_records(Workspace(ws)))
        except Exception:  # noqa: BLE001
            return False

    wait_for(running)
    second = run_cli("run", "--preset", str(preset), "--workspace", str(ws))
    assert second.returncode == 2 and "is in use by gaptui run --preset tiny" in second.stderr
    assert run_cli("history", "--workspace", str(ws)).returncode == 0  # readers still work
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    record = read_records(Workspace(ws))[0]
    assert record["status"] == "cancelled"
    events = (Path(record["run_dir"]) / "events.jsonl").read_text()
    assert '"event": "cancelled"' in events  # the worker checkpointed and said so
    pid = record.get("pid")
    assert pid is None


@pytest.mark.slow  # 15-35 s of real worker processes on 2 cores: run with -m slow
def test_per_run_timeout_fails_the_run_and_the_grid_goes_on(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    # 20 s covers a worker's start-up (torch + PyG imports) even on a loaded machine; 5,000 epochs never fit in it.
    preset = alignment_preset(tmp_path, noise=(0.05,), models=("gcn",), run={"epochs": 5000}, laplacian=True)
    res = run_cli("run", "--preset", str(preset), "--workspace", str(ws), "--cpu-jobs", "1", "--timeout", "20")
    assert res.returncode == 1, res.stderr
    records = {r["axes"]["model"]: r for r in read_records(Workspace(ws))}
    assert records["gcn"]["status"] == "failed" and records["gcn"]["error"] == "timed out after 20 s"
    assert records["laplacian"]["status"] == "done"
    # the worker was stopped through SIGTERM: it checkpointed, so a retry resumes rather than restarts
    events = (Path(records["gcn"]["run_dir"]) / "events.jsonl").read_text()
    assert '"event": "cancelled"' in events
