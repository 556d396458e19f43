"""Packed seeds: several runs of one cell trained in one worker process give exactly what separate runs give."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch

from engine.events import EXIT_NAN, read_events
from engine.tasks import load_spec
from gaptui.history.store import read_records
from gaptui.workspace import Workspace
from tests.support.cli import run_cli
from tests.support.engine import result_of, spec_file


def _kinds(out: Path) -> list[str]:
    """The run's events but for ``progress`` (where it is, said now and then)."""
    return [e["event"] for e in read_events(out / "events.jsonl")[0] if e["event"] != "progress"]


def _start(out: Path) -> dict:
    return next(e for e in read_events(out / "events.jsonl")[0] if e["event"] == "start")


def test_packed_seeds_equal_separate_runs(tmp_path: Path, in_process) -> None:
    specs = [spec_file(tmp_path, f"seed{s}", seed=s) for s in (0, 1, 2)]
    for i, spec in enumerate(specs):
        assert in_process([(spec, tmp_path / f"alone{i}")]) == 0
    assert in_process([(spec, tmp_path / f"packed{i}") for i, spec in enumerate(specs)]) == 0
    for i, spec in enumerate(specs):
        packed, separate = tmp_path / f"packed{i}", tmp_path / f"alone{i}"
        run_hash = load_spec(json.loads(spec.read_text())).hash()
        a, b = result_of(packed), result_of(separate)
        assert a["status"] == b["status"] == "done" and a["run"] == b["run"] == run_hash
        assert a["metrics"] == b["metrics"] and a["params"] == b["params"]
        assert _kinds(packed) == _kinds(separate) == ["start", "eval", "epoch", "eval", "epoch", "done"]
        assert {e["run"] for e in read_events(packed / "events.jsonl")[0]} == {run_hash}
        ckpt_a = torch.load(packed / "checkpoint.pt", weights_only=True)
        ckpt_b = torch.load(separate / "checkpoint.pt", weights_only=True)
        assert ckpt_a["state"] == ckpt_b["state"]
        for name, tensor in ckpt_b["model"].items():
            assert torch.allclose(ckpt_a["model"][name], tensor, rtol=0, atol=1e-6), name
    # the seeds differ from each other (three runs, not one run written three times)
    assert len({json.dumps(result_of(tmp_path / f"packed{i}")["metrics"]) for i in range(3)}) == 3
    assert "loaded by another run of this worker" in (tmp_path / "packed2" / "log.txt").read_text()


def test_a_failing_run_fails_alone_and_finished_runs_are_not_redone(tmp_path: Path, in_process) -> None:
    nan = spec_file(tmp_path, "nan", model="tests.support.worker_models:NaNModel", model_kwargs={}, epochs=1)
    seed0, seed1 = spec_file(tmp_path, "seed0", seed=0, epochs=1), spec_file(tmp_path, "seed1", seed=1, epochs=1)
    assert in_process([(nan, tmp_path / "nan"), (seed0, tmp_path / "s0")]) == EXIT_NAN
    assert result_of(tmp_path / "nan")["status"] == "failed" and _kinds(tmp_path / "nan")[-1] == "error"
    assert result_of(tmp_path / "s0")["status"] == "done" and _kinds(tmp_path / "s0")[-1] == "done"
    # a pack whose runs are partly done trains only the others
    assert in_process([(seed0, tmp_path / "s0"), (seed1, tmp_path / "s1")]) == 0
    assert _kinds(tmp_path / "s0").count("start") == 1 and "already done" in (tmp_path / "s0" / "log.txt").read_text()
    assert result_of(tmp_path / "s1")["status"] == "done"


def _grid(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.toml"
    path.write_text(
        """description = "packed seeds"
noise = [0.1]
models = ["gcn"]
seeds = [0, 1]

[run]
epochs = 2
batch_size = 10
budget = 5000
out_dim = 8

[[datasets]]
base = "er"
params = { n = 16, degree = 4 }
train = 20
val = 6
"""
    )
    return path


@pytest.mark.e2e
def test_gaptui_run_with_packed_seeds_records_the_same_runs(tmp_path: Path) -> None:
    preset = _grid(tmp_path)
    env = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    common = ("--preset", str(preset), "--cpu-jobs", "1")
    packed = run_cli("run", *common, "--pack-seeds", "2", "--workspace", str(tmp_path / "packed"), env=env)
    assert packed.returncode == 0, packed.stderr
    alone = run_cli("run", *common, "--workspace", str(tmp_path / "alone"), env=env)
    assert alone.returncode == 0, alone.stderr
    a = {r["id"]: r for r in read_records(Workspace(tmp_path / "packed"))}
    b = {r["id"]: r for r in read_records(Workspace(tmp_path / "alone"))}
    assert len(a) == 2 and a.keys() == b.keys()
    for run_id, record in a.items():
        assert record["status"] == b[run_id]["status"] == "done"
        assert record["metrics"] == b[run_id]["metrics"] and record["duration"] > 0
    # one worker process trained both seeds; separately, two
    assert {r["attempts"] for r in a.values()} == {1}
    starts = [_start(Path(r["run_dir"])) for r in a.values()]
    assert starts[0]["pid"] == starts[1]["pid"]
    starts = [_start(Path(r["run_dir"])) for r in b.values()]
    assert starts[0]["pid"] != starts[1]["pid"]


@pytest.mark.e2e  # the scheduler starts its workers
def test_scheduler_runs_a_pack_on_one_slot_recovers_it_and_cancels_one_run(tmp_path: Path) -> None:
    # SleepyModel: 0.25 s per training batch, 3 batches per epoch, so the cancel lands inside training.
    from engine.alignment.spec import RunSpec
    from gaptui.history.store import History
    from gaptui.scheduler import Scheduler, Slot

    ws = Workspace(tmp_path / "ws")
    raw = json.loads(
        spec_file(tmp_path, "sleepy", model="tests.support.worker_models:SleepyModel", model_kwargs={}).read_text()
    )
    specs = [RunSpec.from_dict({**raw, "seed": s}) for s in (0, 1)]
    hashes = [spec.hash() for spec in specs]
    slot = Slot("cpu#0", {"OMP_NUM_THREADS": "1"})
    with History(ws, write=True) as history:
        scheduler = Scheduler(ws, history, [slot], pack_seeds=2)
        scheduler.enqueue(specs)
        scheduler.step()
        assert set(scheduler.running) == set(hashes) and not scheduler.queue and slot.busy in hashes
        assert len({job.pid for job in scheduler.running.values()}) == 1
        second = scheduler.running[hashes[1]].run_dir / "events.jsonl"
        deadline = time.monotonic() + 120
        while not second.exists() or "start" not in _kinds(second.parent):
            assert time.monotonic() < deadline, "the pack's second run never started"
            scheduler.step()
            time.sleep(0.1)
        scheduler.detach()  # the manager goes away; the pack trains on
    with History(ws, write=True) as history:
        slot = Slot("cpu#0", {"OMP_NUM_THREADS": "1"})
        scheduler = Scheduler(ws, history, [slot], pack_seeds=2)
        reattached, interrupted = scheduler.recover()
        assert sorted(reattached) == sorted(h[:12] for h in hashes) and interrupted == []
        assert {scheduler.running[h].slot.name for h in hashes} == {"cpu#0"} and slot.busy in hashes
        # cancelling one run stops the pack: the other goes back to the queue and resumes alone
        assert scheduler.cancel(hashes[0])
        deadline = time.monotonic() + 180
        while scheduler.pending():
            assert time.monotonic() < deadline, "the grid did not finish"
            scheduler.step()
            time.sleep(0.1)
        records = history.by_hash()
    cancelled = Path(records[hashes[0]]["run_dir"])
    assert records[hashes[0]]["status"] == "cancelled" and _kinds(cancelled)[-1] == "cancelled"
    assert (cancelled / "checkpoint.pt").exists() and not (cancelled / "result.json").exists()
    assert records[hashes[1]]["status"] == "done" and records[hashes[1]]["duration"] > 0
    starts = [e for e in read_events(Path(records[hashes[1]]["run_dir"]) / "events.jsonl")[0] if e["event"] == "start"]
    assert len(starts) == 2 and starts[1]["resumed_from"] is not None and starts[0]["pid"] != starts[1]["pid"]


@pytest.mark.e2e  # the scheduler starts its workers
def test_a_free_slot_takes_the_first_ready_run_and_more_seeds_of_its_cell(tmp_path: Path) -> None:
    from engine.alignment.spec import RunSpec
    from gaptui.history.store import History
    from gaptui.scheduler import Scheduler, Slot

    raw = json.loads(spec_file(tmp_path, "cell").read_text())
    # seed-major, as grids are planned: (cell, seed) for seeds 0..2 of cells a and b
    specs = [RunSpec.from_dict({**raw, "seed": s, "lr": lr}) for s in (0, 1, 2) for lr in (1e-3, 2e-3)]
    ws = Workspace(tmp_path / "ws")
    with History(ws, write=True) as history:
        scheduler = Scheduler(ws, history, [Slot("cpu#0", {}), Slot("cpu#1", {})], pack_seeds=2)
        scheduler.enqueue(specs)
        packs = scheduler.take_packs(2)
        assert [[(s.lr, s.seed) for s in pack] for pack in packs] == [[(1e-3, 0), (1e-3, 1)], [(2e-3, 0), (2e-3, 1)]]
        assert [(s.lr, s.seed) for s in scheduler.queue] == [(1e-3, 2), (2e-3, 2)]
        assert [[s.seed for s in pack] for pack in scheduler.take_packs(1)] == [[2]]
        assert [(s.lr, s.seed) for s in scheduler.queue] == [(2e-3, 2)]
