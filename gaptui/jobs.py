"""A worker the scheduler follows (:class:`Job`: one run, of one worker process) and the scheduler's callback."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.tasks import TaskSpec
from gaptui.slots import Slot


@dataclass
class Job:
    spec: TaskSpec
    run_hash: str
    run_dir: Path
    slot: Slot
    pid: int
    proc: subprocess.Popen[str] | None  # None when re-attached after a manager restart
    started: float = field(default_factory=time.time)
    #: When the worker reported this run's ``start`` event (the per-run timeout counts from it); None before.
    run_started: float | None = None
    offset: int = 0
    stopping: float | None = None
    timed_out: bool = False
    last: dict[str, Any] = field(default_factory=dict)
    #: The last ``progress`` event (where the run is within an epoch, or that it prepares), kept apart from ``last``.
    progress: dict[str, Any] = field(default_factory=dict)
    #: Run hashes trained by the same worker process (packed seeds), this one included; () when alone.
    pack: tuple[str, ...] = ()
    #: The worker process's stderr file (a pack writes one, in its first run's folder).
    stderr: Path | None = None
    #: Put back in the queue when it ends cancelled (another run of its pack was cancelled, not this one).
    requeue: bool = False
    #: Bytes its worker needs at its peak (:meth:`Scheduler.memory_of`), shared by the runs of a pack.
    memory: int = 0
    #: The status (and error) a stop files instead of ``cancelled`` (``interrupted``: no one chose to stop it).
    stopped_as: tuple[str, str | None] = ("cancelled", None)

    @property
    def packed(self) -> bool:
        return len(self.pack) > 1


Listener = Callable[[str, str, dict[str, Any]], None]
