"""Where runs execute. Every backend writes the same run folders and history records, so history, resume, tables
and the terminal app do not care which one ran a grid.

- ``local`` (the default): :class:`gaptui.scheduler.Scheduler`, one worker subprocess per slot on this machine.
- ``slurm``: :class:`gaptui.backends.slurm.SlurmScheduler`, job arrays submitted and polled through submitit.

Both satisfy :class:`Backend`, the interface the CLI and the terminal app drive.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any, Protocol

from engine.tasks import TaskSpec

if TYPE_CHECKING:
    from gaptui.run_records import PlannedSeeds

#: Where runs execute (the one list: `gaptui run --backend`, the form, launch settings).
BACKENDS = ("local", "slurm")


class Backend(Protocol):
    """What ``gaptui run`` and the terminal app need from a backend."""

    #: Specs waiting to be started (local) or submitted (Slurm).
    queue: deque[TaskSpec]
    #: Runs this manager follows, by spec hash (objects with ``spec``, ``run_dir``, ``slot.name`` and ``last``).
    running: dict[str, Any]
    #: Record fields of runs filed since the backend started, in filing order (each with its ``hash``).
    finished: list[dict[str, Any]]

    def enqueue(self, specs: list[TaskSpec], preset: str | None = None, planned_seeds: PlannedSeeds = None) -> None: ...

    def recover(self) -> tuple[list[str], list[str]]:
        """Re-attach runs a previous manager left in flight; returns (re-attached ids, re-queued ids)."""
        ...

    def pending(self) -> bool: ...

    def step(self) -> None:
        """Start or submit what is queued, follow what runs, file what ended."""
        ...

    def cancel(self, run_hash: str) -> bool: ...

    def stop_all(self) -> None: ...

    def detach(self) -> list[str]:
        """Leave what runs running for the next manager; returns their run ids."""
        ...
