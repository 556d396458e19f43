"""The memory a training step holds: measured per node and per edge, in the estimate, and in the scheduler."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from engine.alignment.memory import estimate
from engine.alignment.spec import RunSpec
from gaptui.history.store import History
from gaptui.scheduler import Scheduler, Slot
from gaptui.workspace import Workspace

#: Graphs shaped like the mouse connectomes: 332 nodes, mean degree 33, 120 training pairs, batch 100.
CONNECTOME_LIKE = {"base": "er", "noise": 0.19, "n_train": 120, "n_val": 8, "params": {"n": 332, "degree": 33}}


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def test_edge_models_declare_what_they_save_per_edge_and_node_models_do_not() -> None:
    from engine.models.footprint import step_footprint

    gatv2 = step_footprint("gatv2", 64, 60_000, 1, {})
    gcn = step_footprint("gcn", 64, 60_000, 1, {})
    # GATv2 keeps [edges, heads, channels] tensors per layer; GCN's sparse product keeps none per edge
    assert gatv2.per_edge > 1000 and gcn.per_edge < 100
    assert 1000 < gcn.per_node < 20_000


def test_the_estimate_of_an_edge_heavy_batch_is_its_measured_size_not_the_similarity_alone() -> None:
    # measured peak RSS of one epoch on the connectome pairs (benchmarks/bench_memory.py): gatv2 7.0 GB, gcn 1.4 GB
    def batch_gb(model: str) -> float:
        spec = RunSpec(dataset=CONNECTOME_LIKE, model=model)
        est = estimate(spec.dataset_spec().canonical(), spec.batch_size, None, spec.model_bytes(), spec.node_bytes())
        assert est is not None and est.batch_bytes is not None
        return est.batch_bytes / 2**30

    assert 5.5 < batch_gb("gatv2") < 10
    assert 0.8 < batch_gb("gcn") < 2.5


def _spec(tmp_path: Path, seed: int) -> RunSpec:
    return RunSpec(dataset={"base": "er", "noise": 0.1, "n_train": 4, "n_val": 2}, model="gcn", seed=seed)


def test_a_grid_never_starts_more_workers_than_memory_holds(tmp_path: Path, monkeypatch) -> None:
    ws = Workspace(tmp_path / "ws")
    cpu = {"CUDA_VISIBLE_DEVICES": ""}
    started: list[tuple[str, int]] = []
    with History(ws, write=True) as history:
        scheduler = Scheduler(ws, history, [Slot("cpu#0", dict(cpu)), Slot("cpu#1", dict(cpu))])
        scheduler.memory_limit = 10 << 30
        monkeypatch.setattr(scheduler, "memory_of", lambda pack: 6 << 30)  # two would need 12 GB

        def start(specs, slot, memory=0):  # records what would start, holding the slot and the memory
            from gaptui.scheduler import Job

            h = specs[0].hash()
            slot.busy = h
            scheduler.running[h] = Job(specs[0], h, tmp_path, slot, len(started) + 1, None, memory=memory)
            started.append((h, memory))

        monkeypatch.setattr(scheduler, "_start", start)
        monkeypatch.setattr(scheduler, "_follow", lambda job: None)
        scheduler.enqueue([_spec(tmp_path, 0), _spec(tmp_path, 1)])
        scheduler.step()
        assert len(started) == 1 and started[0][1] == 6 << 30 and len(scheduler.queue) == 1
        scheduler.step()  # still held: the second waits, its slot free
        assert len(started) == 1
        first = scheduler.running.pop(started[0][0])
        first.slot.busy = None
        scheduler.step()
        assert len(started) == 2 and not scheduler.queue


def test_a_run_that_alone_exceeds_the_limit_still_starts_when_nothing_runs(tmp_path: Path, monkeypatch) -> None:
    ws = Workspace(tmp_path / "ws")
    with History(ws, write=True) as history:
        scheduler = Scheduler(ws, history, [Slot("cpu#0", {"CUDA_VISIBLE_DEVICES": ""})])
        scheduler.memory_limit = 1 << 30
        monkeypatch.setattr(scheduler, "memory_of", lambda pack: 2 << 30)
        calls = []
        monkeypatch.setattr(scheduler, "_start", lambda specs, slot, memory=0: calls.append(memory))
        scheduler.enqueue([_spec(tmp_path, 0)])
        scheduler.step()
    assert calls == [2 << 30]  # the launch's own check refuses what the machine cannot hold at all
