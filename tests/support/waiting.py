"""Waiting for the event that matters (a file, an event line, a process gone), never for a fixed time."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # an engine test waits without importing Textual
    from textual.pilot import Pilot

#: Seconds a wait gives up after. A wait returns as soon as its event happens; this bound only decides when a test
#: that will never see it fails. One bound for every wait, set for the slowest machine the suite runs on (every
#: test of it on one loaded core, where starting a worker or importing the model registry takes minutes), rather
#: than a guess per wait tuned on a quiet machine.
WAIT_BOUND = 600.0


def wait_for(predicate: Callable[[], object], timeout: float = WAIT_BOUND, what: str = "condition") -> None:
    """Poll ``predicate`` (every 50 ms) until it holds; fails the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"{what} not reached in {timeout:g} s")


async def wait_until(pilot: Pilot, predicate: Callable[[], bool], timeout: float = WAIT_BOUND, what: str = "") -> None:
    """Poll ``predicate`` between pilot pauses (subprocess progress cannot be awaited otherwise)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        await pilot.pause(0.1)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what or predicate}")


def alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie, exited but not yet reaped, counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def event_starts(run_dir: str) -> int:
    """How many times a run's worker started (its ``start`` events)."""
    path = Path(run_dir) / "events.jsonl"
    return sum(1 for line in path.read_text().splitlines() if '"event": "start"' in line) if path.exists() else 0
