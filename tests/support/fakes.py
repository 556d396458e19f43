"""Stand-ins for the manager's collaborators: a measurement of fixed throughput that counts its calls, CPU slots, a
history and a scheduler that only record what the code under test asked of them."""

from __future__ import annotations

from pathlib import Path

from engine.alignment.throughput import CostKey, Throughput
from engine.tasks.cost import CalibrationCache
from gaptui import launch
from gaptui.estimate import Estimator, calibration_path
from gaptui.presets import load_preset
from gaptui.scheduler import Slot
from gaptui.workspace import Workspace

#: The throughput every stand-in measurement reports.
FAKE = Throughput(step_s=0.5, val_pair_s=0.01, checkpoint_s=0.0, params=100, steps=3)

#: Two CPU slots of one thread each.
CPU1 = Slot("cpu#0", {"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"})
CPU2 = Slot("cpu#1", {"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"})


def smoke_plan(ws: Path, known: dict[str, str] | None = None) -> launch.Plan:
    """The plan of the shipped smoke preset in workspace ``ws`` (``known``: hashes the history holds)."""
    workspace = Workspace(ws)
    return launch.plan(load_preset("smoke", workspace), workspace, known or {})


class Counting:
    """A stand-in for the measurement: fixed throughput, every call recorded."""

    def __init__(self) -> None:
        self.keys: list[CostKey] = []
        self.overheads = 0

    def measure(self, keys: list[CostKey], slots: list[Slot]) -> list[Throughput]:
        self.keys += keys
        return [FAKE] * len(keys)

    def overhead(self, slots: list[Slot]) -> float:
        self.overheads += 1
        return 1.0


def estimator(ws: Path, counter: Counting, **kwargs) -> Estimator:
    """An estimator measuring through ``counter``, its calibration cache in ``ws`` (``warned``: a list for its
    warnings, ``records``: the history it reads; the rest are the estimator's own options)."""
    warned = kwargs.pop("warned", [])
    cache = CalibrationCache(calibration_path(Workspace(ws)), warned.append)
    return Estimator(cache, kwargs.pop("records", []), measure=counter.measure, overhead=counter.overhead, **kwargs)


class FakeHistory:
    """The history calls a search makes, on a dict of records by hash."""

    def __init__(self, records: dict) -> None:
        self.records = records

    def by_hash(self) -> dict:
        return self.records

    def update_many(self, updates: dict) -> None:
        for run_hash, fields in updates.items():
            self.records[run_hash].update(fields)


class FakeScheduler:
    """A scheduler that runs nothing and records what it was asked to cancel."""

    def __init__(self) -> None:
        self.cancelled: list[str] = []
        self.running: dict = {}
        self.queue: list = []

    def cancel(self, run_hash: str) -> bool:
        self.cancelled.append(run_hash)
        return True
