"""A foreground ``gaptui train`` keeps its run: a grid manager (``gaptui run``, the app) started beside it never
adopts, stops or files it; a grid that holds it waits for it, and the counts add up. Real processes throughout;
every wait is on a file or a process, never a fixed sleep."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from engine.events import read_events
from gaptui.history.store import read_records
from gaptui.workspace import Workspace
from tests.support import ROOT
from tests.support.cli import TRAIN_ARGS, run_cli
from tests.support.presets import alignment_preset
from tests.support.tui import SIZE, notices
from tests.support.waiting import alive, wait_for, wait_until

#: Every test here starts the CLI or a worker in a subprocess.
pytestmark = pytest.mark.e2e

CLI_ENV = {**os.environ, "GAPTUI_OFFLINE": "1", "COLUMNS": "200", "OMP_NUM_THREADS": "1"}
#: A foreground run that outlasts the test (stopped by it), compiled by no one: it trains from its first second.
LONG = ("--epochs", "5000", "--compile", "off")


def _start(*args: str, out: Path | None = None) -> subprocess.Popen[str]:
    """``python -m gaptui ARGS`` in the background; output to ``out``.stdout/.stderr files (or discarded)."""
    stdout = open(f"{out}.stdout", "w") if out else subprocess.DEVNULL  # noqa: SIM115 - the child holds them
    stderr = open(f"{out}.stderr", "w") if out else subprocess.DEVNULL  # noqa: SIM115
    return subprocess.Popen(
        [sys.executable, "-m", "gaptui", *args], stdout=stdout, stderr=stderr, cwd=ROOT, env=CLI_ENV
    )


def _training(ws: Path) -> dict | None:
    """The foreground run's record once its worker wrote a first epoch, else None."""
    for record in read_records(Workspace(ws)):
        if record["status"] == "running" and record.get("pid"):
            events = read_events(Path(record["run_dir"]) / "events.jsonl")[0]
            if any(e["event"] == "epoch" for e in events):
                return record
    return None


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGCONT)
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_a_grid_beside_a_foreground_train_leaves_it_alone_and_counts_only_its_own_runs(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    train = _start(*TRAIN_ARGS, *LONG, "--workspace", str(ws))
    try:
        wait_for(lambda: _training(ws) is not None, what="the foreground run's first epoch")
        theirs = _training(ws)
        assert theirs["driver"] == "train" and theirs["driver_pid"] == train.pid
        preset = alignment_preset(tmp_path, noise=(0.2,), models=("gcn", "gin"))  # another grid: 2 runs
        res = run_cli("run", "--preset", str(preset), "--workspace", str(ws))
        assert res.returncode == 0, res.stderr
        assert "re-attached" not in res.stderr
        assert "2 runs, 0 already done, 0 failed before (skipped; --retry-failed to rerun), 2 to run on" in res.stderr
        line = next(x for x in res.stderr.splitlines() if "trained in the foreground" in x)
        assert f"`gaptui train` (pid {train.pid})" in line and theirs["id"] in line and "left to it" in line
        assert theirs["id"] not in res.stdout  # never listed as one of the grid's results
        # the manager ended; the foreground run goes on, still its own
        now = {r["id"]: r for r in read_records(Workspace(ws))}[theirs["id"]]
        assert now["status"] == "running" and now["pid"] == theirs["pid"] and alive(theirs["pid"])
        train.send_signal(signal.SIGINT)
        assert train.wait(timeout=120) == 130
    finally:
        _stop(train)
    assert {r["id"]: r for r in read_records(Workspace(ws))}[theirs["id"]]["status"] == "cancelled"


def test_a_grid_holding_a_foreground_run_waits_for_it_and_files_nothing_of_it(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    preset = alignment_preset(tmp_path, noise=(0.2,), models=("gcn", "gin"), run={"epochs": 60})
    train = _start("train", "--preset", str(preset), "--where", "model=gcn", "--workspace", str(ws))
    manager = None
    try:
        wait_for(lambda: _training(ws) is not None, what="the foreground run's first epoch")
        theirs = _training(ws)
        # Frozen, `gaptui train` cannot file its run: its worker trains to the end, and the record stays running
        # until the command goes on. The grid must wait for it all that time.
        train.send_signal(signal.SIGSTOP)
        manager = _start("run", "--preset", str(preset), "--workspace", str(ws), out=tmp_path / "run")
        result = Path(theirs["run_dir"]) / "result.json"

        def own_done() -> bool:
            statuses = {r["id"]: r["status"] for r in read_records(Workspace(ws))}
            return [s for i, s in statuses.items() if i != theirs["id"]] == ["done"]

        wait_for(lambda: result.exists() and own_done(), what="both workers' ends")
        assert manager.poll() is None  # still waiting: the foreground run is not filed
        assert {r["id"]: r for r in read_records(Workspace(ws))}[theirs["id"]]["status"] == "running"
        train.send_signal(signal.SIGCONT)
        assert train.wait(timeout=120) == 0
        assert manager.wait(timeout=120) == 0
    finally:
        _stop(train)
        if manager is not None and manager.poll() is None:
            manager.kill()
            manager.wait()
    stderr, stdout = (tmp_path / "run.stderr").read_text(), (tmp_path / "run.stdout").read_text()
    assert "re-attached" not in stderr
    assert "2 runs, 0 already done, 0 failed before (skipped; --retry-failed to rerun), 1 to run on" in stderr
    assert "1 trained by `gaptui train` (waited for)" in stderr
    line = next(x for x in stderr.splitlines() if "trained in the foreground" in x)
    assert theirs["id"] in line and "this grid waits for it" in line
    # its end is reported with the grid's (it is one of them), filed by the command that trained it
    assert any(x.split()[:2] == ["done", theirs["id"]] for x in stdout.splitlines()), stdout
    filed = {r["id"]: r for r in read_records(Workspace(ws))}[theirs["id"]]
    assert filed["status"] == "done" and filed["driver"] == "train" and filed["attempts"] == 1


@pytest.mark.asyncio
async def test_the_app_follows_a_foreground_run_and_quits_without_touching_it(tmp_path: Path) -> None:
    from gaptui.tui.app import GaptuiApp

    ws = tmp_path / "ws"
    train = _start(*TRAIN_ARGS, *LONG, "--workspace", str(ws))
    try:
        wait_for(lambda: _training(ws) is not None, what="the foreground run's first epoch")
        theirs = _training(ws)
        app = GaptuiApp(Workspace(ws))
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: app.recovered is not None, what="the manager's start")
            assert not app.recovered.reattached and theirs["id"] in app.recovered.foreground
            assert any("trained in the foreground by `gaptui train`" in n for n in notices(app))
            assert app.state.running == ()  # not the app's: quitting has nothing of its own to stop
            await pilot.press("f3")
            app.runs_screen.table.move_to(theirs["hash"])
            await pilot.press("c")  # cancelling it is refused, with where to stop it
            await wait_until(pilot, lambda: any("stop it there" in n for n in notices(app)), what="the refusal")
            await pilot.press("ctrl+q")
            await wait_until(pilot, lambda: not app.is_running, what="the app to exit")
        assert alive(theirs["pid"]) and train.poll() is None
        now = {r["id"]: r for r in read_records(Workspace(ws))}[theirs["id"]]
        assert now["status"] == "running" and now["pid"] == theirs["pid"]
    finally:
        _stop(train)
