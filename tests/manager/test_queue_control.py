"""Steering a grid: pause and resume the queue, drain a slot, fail fast; the rules, the files another terminal
uses (``gaptui queue``) and ``gaptui run`` obeying them, in subprocesses waiting on files, never on sleeps."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

from engine.errors import GaptuiError
from gaptui.history.store import History, read_records
from gaptui.queue_control import ControlChannel, QueueControl, error_signature, read_state, request, steer
from gaptui.slots import Slot
from gaptui.workspace import Workspace
from tests.support import ROOT
from tests.support.cli import CLI_ENV, run_cli
from tests.support.presets import alignment_preset
from tests.support.waiting import wait_for

# ------------------------------------------------------------------------------------------ the rules


def test_the_same_error_is_the_first_line_with_ids_and_numbers_aside() -> None:
    a = error_signature("RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\nTraceback ...")
    b = error_signature("RuntimeError: CUDA out of memory. Tried to allocate 512 MiB")
    assert a != b  # the unit differs
    assert error_signature("dataset 3f2a9c1b2d4e: 12 graphs missing") == error_signature(
        "dataset 0011aabbccdd: 7 graphs missing"
    )
    assert error_signature("") == error_signature(None) == "(no error message)"


def test_fail_fast_counts_runs_per_error_and_halts_once() -> None:
    control = QueueControl(fail_fast=2)
    finished = [
        {"hash": "a", "status": "failed", "error": "ValueError: bad input at row 3"},
        {"hash": "b", "status": "done"},
        {"hash": "a", "status": "failed", "error": "ValueError: bad input at row 3"},  # a retry: the same run
        {"hash": "c", "status": "failed", "error": "KeyError: 'x'"},
    ]
    assert control.note_finished(finished) == "" and control.may_start()
    finished.append({"hash": "d", "status": "failed", "error": "ValueError: bad input at row 9"})
    reason = control.note_finished(finished)
    assert reason == "2 runs failed with the same error: ValueError: bad input at row 3"
    assert control.halted == reason and not control.may_start()
    assert control.note_finished([*finished, {"hash": "e", "status": "failed", "error": "KeyError: 'x'"}]) == ""
    assert QueueControl().note_finished(finished) == ""  # without fail_fast: never


def test_pause_drain_and_resume_decide_which_slots_take_runs() -> None:
    slots = [Slot("cpu#0", {}), Slot("cpu#1", {}), Slot("cpu#2", {}, busy="h")]
    control = QueueControl()
    names = [s.name for s in slots]
    assert [s.name for s in control.free_slots(slots)] == ["cpu#0", "cpu#1"]
    assert "draining cpu#1" in control.apply({"action": "drain", "slots": ["cpu#1"]}, names)
    assert [s.name for s in control.free_slots(slots)] == ["cpu#0"]
    assert control.apply({"action": "pause"}, names).startswith("paused")
    assert control.free_slots(slots) == [] and control.state_line() == "paused · draining cpu#1"
    assert control.apply({"action": "resume"}, names) == "resumed (cpu#1 still draining)"
    assert control.apply({"action": "resume", "slots": ["cpu#1"]}, names) == "taking runs again: cpu#1"
    assert len(control.free_slots(slots)) == 2 and control.state_line() == ""
    assert control.apply({"action": "drain", "slots": ["gpu9"]}, names).startswith("ignored drain of unknown slot")


def test_a_request_reaches_the_manager_of_the_workspace_and_waits_for_it(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    with pytest.raises(GaptuiError, match="no workspace at"):
        request(ws, "pause", [])
    ws.root.mkdir()
    with pytest.raises(GaptuiError, match="no manager is running on workspace"):
        request(ws, "pause", [])

    class Manager:  # what steer() reads of a scheduler
        control = QueueControl()
        slots = [Slot("cpu#0", {}), Slot("cpu#1", {})]
        running: dict = {}
        queue: list = []

    said: list[str] = []
    stop = threading.Event()
    with History(ws, write=True, purpose="gaptui run --preset test"):
        (ws.root / "queue-requests.jsonl").write_text('{"action": "pause"}\n')  # before the manager: void
        channel = ControlChannel(ws, "gaptui run --preset test")
        steer(channel, Manager, said.append)
        assert read_state(ws)["slots"] == ["cpu#0", "cpu#1"] and not read_state(ws)["paused"]

        def manager() -> None:
            while not stop.wait(0.05):
                steer(channel, Manager, said.append)

        thread = threading.Thread(target=manager)
        thread.start()
        try:
            with pytest.raises(GaptuiError, match=r"slot 'gpu#0' is not one of the manager's: cpu#0, cpu#1"):
                request(ws, "drain", ["gpu#0"])
            assert request(ws, "drain", ["cpu#1"])["draining"] == ["cpu#1"]
            state = request(ws, "pause", [])
            assert state["paused"] and state["manager"] == "gaptui run --preset test"
        finally:
            stop.set()
            thread.join()
        channel.close()
    assert said == [
        "draining cpu#1: each finishes its run and takes no other",
        "paused: running runs go on, no run starts",
    ]
    assert read_state(ws) is None  # the manager ended: no state


def test_the_channel_reads_whole_new_lines_only(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    ws.root.mkdir()
    requests = ws.root / "queue-requests.jsonl"
    requests.write_text('{"action": "pause"}\n')
    channel = ControlChannel(ws, "test")
    assert channel.poll() == []  # written before the manager started
    with open(requests, "a") as fh:
        fh.write('{"action": "drain", "slots": ["cpu#0"]}\nnot json\n{"action": "res')  # the last one half written
    assert channel.poll() == [{"action": "drain", "slots": ["cpu#0"]}]
    with open(requests, "a") as fh:
        fh.write('ume"}\n')
    assert channel.poll() == [{"action": "resume"}]
    requests.unlink()
    requests.write_text('{"action": "pause"}\n')  # removed and written anew: read from its start
    assert channel.poll() == [{"action": "pause"}]


# ------------------------------------------------------------------------------------------ gaptui run, steered


CRASHING = '''
import torch
from tests.support.models import TinyGNN


class Crashes(TinyGNN):
    """Builds, then fails at its first forward pass (as a model with a bug would)."""

    def forward(self, x, edge_index, batch=None):
        raise RuntimeError("this model always fails")
'''


@pytest.mark.e2e
def test_fail_fast_stops_queuing_after_n_runs_fail_with_the_same_error(tmp_path: Path) -> None:
    code = tmp_path / "code"
    code.mkdir()
    (code / "crashing_model.py").write_text(CRASHING)
    preset = alignment_preset(tmp_path, "grid", noise=[0.05, 0.1, 0.15, 0.2], models=["crashing_model:Crashes"])
    ws = tmp_path / "ws"
    env = {"PYTHONPATH": f"{code}:{ROOT}"}
    args = ("--workspace", str(ws), "--cpu-jobs", "1", "--fail-fast", "2")
    res = run_cli("run", "--preset", str(preset), *args, env=env)
    assert res.returncode == 1, res.stderr
    assert "fail-fast: 2 runs failed with the same error:" in res.stderr and "this model always fails" in res.stderr
    statuses = sorted(r["status"] for r in read_records(Workspace(ws)))
    assert statuses == ["cancelled", "cancelled", "failed", "failed"]
    cancelled = [r for r in read_records(Workspace(ws)) if r["status"] == "cancelled"]
    assert all(r["error"].startswith("not started: fail-fast after 2 runs failed") for r in cancelled)
    assert all(not r.get("attempts") for r in cancelled)  # never started
    bad = run_cli("run", "--preset", str(preset), "--workspace", str(ws), "--fail-fast", "0", env=env)
    assert bad.returncode == 2 and bad.stderr.splitlines()[-1].startswith("error: --fail-fast 0: expected a number")


@pytest.mark.e2e
def test_gaptui_queue_pauses_drains_and_resumes_a_running_grid(tmp_path: Path) -> None:
    preset = alignment_preset(
        tmp_path, "grid", noise=[0.05, 0.1], models=["gcn", "gin"], run={"epochs": 5}
    )  # 4 runs on 2 slots
    ws = tmp_path / "ws"
    manager = subprocess.Popen(
        [sys.executable, "-m", "gaptui", "run", "--preset", str(preset), "--workspace", str(ws), "--cpu-jobs", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=CLI_ENV,
    )
    try:
        wait_for(lambda: (ws / "queue-state.json").exists(), what="the manager's queue state")
        res = run_cli("queue", "pause", "--workspace", str(ws))
        assert res.returncode == 0, res.stderr
        assert "queue paused" in res.stdout and "slots cpu#0, cpu#1" in res.stdout
        started = {r["hash"] for r in read_records(Workspace(ws)) if r.get("attempts")}
        wait_for(lambda: (read_state(Workspace(ws)) or {}).get("running") == 0, what="the running runs' ends")
        records = read_records(Workspace(ws))
        assert {r["hash"] for r in records if r.get("attempts")} == started  # paused: nothing else started
        assert sum(r["status"] == "queued" for r in records) == 4 - len(started) and manager.poll() is None
        status = run_cli("queue", "status", "--workspace", str(ws))
        assert "queue paused" in status.stdout and "0 running" in status.stdout

        res = run_cli("queue", "drain", "cpu#1", "--workspace", str(ws))
        assert res.returncode == 0 and "cpu#1 (draining)" in res.stdout, res.stdout + res.stderr
        res = run_cli("queue", "resume", "--workspace", str(ws))
        assert res.returncode == 0 and "queue going" in res.stdout, res.stdout + res.stderr
        _, stderr = manager.communicate(timeout=600)
        assert manager.returncode == 0, stderr
    finally:
        if manager.poll() is None:
            manager.kill()
            manager.wait()
    assert "queue: paused" in stderr and "queue: draining cpu#1" in stderr and "queue: resumed (cpu#1" in stderr
    records = read_records(Workspace(ws))
    assert all(r["status"] == "done" for r in records)
    assert {r["slot"] for r in records if r["hash"] not in started} == {"cpu#0"}  # cpu#1 took no other run
    assert not (ws / "queue-state.json").exists()
    gone = run_cli("queue", "pause", "--workspace", str(ws))
    assert gone.returncode == 2 and "no manager is running on workspace" in gone.stderr
