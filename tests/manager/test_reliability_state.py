"""What the history says about a run whose driver died (a SIGKILLed foreground ``gaptui train``), and where a
``train --spec`` from a copied workspace builds its data."""

from __future__ import annotations

import json
import os
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.events import read_events
from engine.files import FileLock
from engine.tasks import load_spec
from gaptui.history.journal import JournalStorage
from gaptui.history.store import History, read_records
from gaptui.processes import worker_gone
from gaptui.runner import run_id
from gaptui.scheduler import Scheduler, Slot, new_record
from gaptui.workspace import Workspace
from tests.support import ROOT
from tests.support.cli import TRAIN_ARGS, run_cli
from tests.support.engine import TINY_SPEC
from tests.support.presets import alignment_preset
from tests.support.waiting import alive, wait_for

EPOCHS = "300"  # about 10 s of epochs: still running when it is killed after its first one


def _stored(ws: Path) -> list[dict]:
    """The records as the file and its journal hold them (no reader's view)."""
    return list((JournalStorage(ws / "history.json", read_only=True).read() or {}).get("runs", {}).values())


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


# ------------------------------------------------------------------------------------------ the rule


@pytest.mark.e2e
def test_a_running_record_reads_interrupted_only_when_its_worker_is_gone(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    specs = [load_spec({**TINY_SPEC, "seed": seed}) for seed in range(6)]
    folders = [ws.runs / run_id(s) for s in specs]
    for folder in folders:
        folder.mkdir(parents=True)
    sleeper = subprocess.Popen(["sleep", "60"])  # a live pid that is not the worker: a reused pid
    # a live process whose command line names the engine and the run folder, as a worker's does
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "engine", str(folders[3])])
    held = FileLock(folders[1] / "worker.lock", "a worker of another user")
    try:
        assert held.acquire()
        base = {"status": "running", "started_ts": time.time()}
        fields = [
            {"pid": _dead_pid()},  # gone
            {"pid": _dead_pid()},  # its folder's lock is held: alive
            {"pid": sleeper.pid},  # the pid lives on as another process: gone
            {"pid": worker.pid},  # alive
            {"pid": _dead_pid(), "host": "another-host"},  # not this host's to judge
            {"pid": None, "backend": "slurm", "slurm": {"job_id": "7_0"}},  # a Slurm job
        ]
        with History(ws, write=True) as history:
            history.put_many([{**new_record(s, ws), **base, **f} for s, f in zip(specs, fields, strict=True)])
            # a writer sees what is stored
            assert [r["status"] for r in history.records()] == ["running"] * 6
        shown = ["interrupted", "running", "interrupted", "running", "running", "running"]
        assert [r["status"] for r in read_records(ws)] == shown
        with History(ws) as reader:
            assert reader.get(run_id(specs[0]))["status"] == "interrupted"
            assert reader.by_hash()[specs[1].hash()]["status"] == "running"
        assert {r["status"] for r in _stored(ws.root)} == {"running"}  # readers never write

        # the next manager records what readers showed, and leaves alone what may be alive
        with History(ws, write=True) as history:
            scheduler = Scheduler(ws, history, [Slot("cpu#0", {})])
            reattached, interrupted = scheduler.recover()
            scheduler.detach()
        assert reattached == [run_id(specs[3])]
        assert sorted(interrupted) == sorted([run_id(specs[0]), run_id(specs[2])])
        by_id = {r["id"]: r for r in _stored(ws.root)}
        assert [by_id[run_id(s)]["status"] for s in specs] == shown
        assert by_id[run_id(specs[0])]["pid"] is None
        held.release()  # its worker ended: now it is gone too
        assert worker_gone(_stored(ws.root)[1] | {"run_dir": str(folders[1])})
        assert read_records(ws)[1]["status"] == "interrupted"
    finally:
        held.release()
        for proc in (sleeper, worker):
            proc.kill()
            proc.wait()


# ------------------------------------------------------------------------------------------ a killed train


@pytest.mark.e2e
@pytest.mark.slow  # about 40 s of CLI and worker processes; run with -m slow
def test_a_killed_foreground_train_reads_interrupted_is_recorded_so_and_resumes(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    command = [sys.executable, "-m", "gaptui", *TRAIN_ARGS, "--epochs", EPOCHS, "--workspace", str(ws)]
    env = {**os.environ, "GAPTUI_OFFLINE": "1"}
    train = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT, env=env)
    try:

        def training() -> bool:
            records = _stored(ws)
            if not records or records[0]["status"] != "running" or not records[0].get("pid"):
                return False
            events = read_events(ws / records[0]["run_dir"] / "events.jsonl")[0]
            return any(e["event"] == "epoch" for e in events)

        wait_for(training, what="the first epoch")
        record = _stored(ws)[0]
        worker = record["pid"]
        assert worker != train.pid and alive(worker) and record["host"] == platform.node()
        assert read_records(Workspace(ws))[0]["status"] == "running"  # alive: shown running
        # Both die at once, the worker before it can write a final event: freeze train (nothing it could file),
        # kill its worker, then train.
        train.send_signal(signal.SIGSTOP)
        os.kill(worker, signal.SIGKILL)
        train.kill()
        train.wait(timeout=30)
        wait_for(lambda: not alive(worker), timeout=60, what="the worker's end")
    finally:
        if train.poll() is None:
            train.kill()
            train.wait()
    assert _stored(ws)[0]["status"] == "running"  # as the killed train left it

    # every reader shows it interrupted, and none writes
    res = run_cli("history", "--json", "--workspace", str(ws))
    assert res.returncode == 0, res.stderr
    assert [r["status"] for r in json.loads(res.stdout)] == ["interrupted"]
    res = run_cli("show", record["id"], "--json", "--workspace", str(ws))
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["status"] == "interrupted"
    assert _stored(ws)[0]["status"] == "running"

    # the next manager (a grid of another run) records it interrupted
    preset = alignment_preset(tmp_path, noise=(0.1,), models=("gcn",))
    res = run_cli("run", "--preset", str(preset), "--workspace", str(ws))
    assert res.returncode == 0, res.stderr
    assert "1 interrupted run(s)" in res.stderr
    stored = {r["id"]: r for r in _stored(ws)}
    assert stored[record["id"]]["status"] == "interrupted" and stored[record["id"]]["pid"] is None
    assert [r["status"] for r in stored.values() if r["id"] != record["id"]] == ["done"]

    # the same command resumes it from its checkpoint and completes it
    res = run_cli(*TRAIN_ARGS, "--epochs", EPOCHS, "--json", "--workspace", str(ws))
    assert res.returncode == 0, res.stderr
    done = {r["id"]: r for r in read_records(Workspace(ws))}[record["id"]]
    assert done["status"] == "done"
    starts = [e for e in read_events(Path(done["run_dir"]) / "events.jsonl")[0] if e["event"] == "start"]
    assert len(starts) == 2 and starts[-1]["resumed_from"]["epoch"] >= 1


# ------------------------------------------------------------------------------------------ train --spec


@pytest.mark.e2e
def test_train_spec_from_another_workspace_builds_its_data_in_this_one(tmp_path: Path) -> None:
    old = tmp_path / "old-ws"  # never created: the workspace the file was written in is gone
    raw = {**TINY_SPEC, "datasets_dir": str(old / "datasets"), "data_root": str(old / "data")}
    spec_file = tmp_path / "copy" / "runs" / "r" / "spec.json"
    spec_file.parent.mkdir(parents=True)
    spec_file.write_text(json.dumps(raw))
    new = tmp_path / "new-ws"
    res = run_cli("train", "--spec", str(spec_file), "--json", "--workspace", str(new))
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["run"] == run_id(load_spec(raw))  # placement is not hashed: the run keeps its id
    assert not old.exists()
    assert any(p.is_file() for p in (new / "datasets").rglob("*"))
    written = json.loads((Path(out["out"]) / "spec.json").read_text())
    assert written["datasets_dir"] == str(new / "datasets") and written["data_root"] == str(new / "data")


def test_train_spec_placement_is_the_workspaces_unless_set(tmp_path: Path) -> None:
    from gaptui.cli.train import _chosen_spec

    ws = Workspace(tmp_path / "ws")
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps({**TINY_SPEC, "datasets_dir": "/old/datasets", "data_root": "/old/data"}))
    spec = _chosen_spec(ws, None, None, [], spec_file, [])
    assert (spec.datasets_dir, spec.data_root) == (str(ws.datasets), str(ws.raw_data))
    chosen = _chosen_spec(ws, None, None, [], spec_file, ['datasets_dir="/shared/datasets"'])
    assert (chosen.datasets_dir, chosen.data_root) == ("/shared/datasets", str(ws.raw_data))
    assert chosen.hash() == spec.hash()
