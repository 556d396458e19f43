"""Steering a grid while it runs: pause and resume the queue, drain a slot, stop queuing after repeated failures.

:class:`QueueControl` is what a scheduler consults before it starts a run. Paused, it starts nothing (running
runs go on); a draining slot finishes its run and takes no other; after ``fail_fast`` runs failed with the same
error (:func:`error_signature`: the first line, numbers and ids aside), queuing stops for good, the queued runs
are recorded ``cancelled`` with the reason, and the manager exits non-zero naming the error.

Another terminal steers the manager of a workspace through files (``gaptui queue pause|resume|drain|status``):

- ``<workspace>/queue-requests.jsonl``: requests appended one JSON line each (``{"action": "pause"}``,
  ``{"action": "resume", "slots": [...]}``, ``{"action": "drain", "slots": [...]}``). A manager reads the lines
  added since it started (older ones are void) between two steps.
- ``<workspace>/queue-state.json``: what the manager holding the workspace applied (written atomically on each
  change): ``pid``, ``manager``, ``offset`` (bytes of requests read), ``paused``, ``draining``, ``slots``,
  ``running``, ``queued``, ``halted``. The requesting command waits until ``offset`` passes its line.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import GaptuiError
from engine.files import atomic_write_text
from gaptui.slots import Slot
from gaptui.workspace import Workspace

REQUESTS_NAME = "queue-requests.jsonl"
STATE_NAME = "queue-state.json"
ACTIONS = ("pause", "resume", "drain")


def error_signature(message: str | None) -> str:
    """What makes two failures "the same error": the first line of the message with hex ids and numbers (sizes,
    epochs, addresses) left out."""
    line = (message or "").strip().splitlines()[0] if (message or "").strip() else "(no error message)"
    line = re.sub(r"\b[0-9a-f]{8,}\b", "<id>", line)
    return re.sub(r"\d+(\.\d+)?", "#", line)


@dataclass
class QueueControl:
    """Whether and where a scheduler may start runs."""

    paused: bool = False
    #: Names of slots that finish their run and take no other.
    draining: set[str] = field(default_factory=set)
    #: Stop queuing once this many runs failed with the same error (None: never).
    fail_fast: int | None = None
    #: Why queuing stopped for good (fail-fast), "" while it goes on.
    halted: str = ""
    _failures: dict[str, dict[str, str]] = field(default_factory=dict)
    _seen: int = 0

    def may_start(self) -> bool:
        return not self.paused and not self.halted

    def free_slots(self, slots: Sequence[Slot]) -> list[Slot]:
        """The idle slots that take a run now."""
        if not self.may_start():
            return []
        return [slot for slot in slots if slot.busy is None and slot.name not in self.draining]

    def note_finished(self, finished: Sequence[dict[str, Any]]) -> str:
        """Count the failures among ``finished`` entries not seen yet (each run once per error); returns the reason
        to halt when one error reached :attr:`fail_fast` runs (and keeps it in :attr:`halted`), else ""."""
        for item in finished[self._seen :]:
            if item.get("status") == "failed":
                message = item.get("error") or ""
                runs = self._failures.setdefault(error_signature(message), {})
                runs.setdefault(item["hash"], message)
        self._seen = len(finished)
        if self.halted or not self.fail_fast:
            return ""
        for runs in self._failures.values():
            if len(runs) >= self.fail_fast:
                first = next(iter(runs.values())).strip().splitlines()
                self.halted = f"{len(runs)} runs failed with the same error: {first[0] if first else '(no message)'}"
                return self.halted
        return ""

    def apply(self, request: dict[str, Any], slot_names: Iterable[str]) -> str:
        """Apply one request: ``pause`` or ``resume`` the queue, ``drain`` slots or ``resume`` them (given slots);
        returns a line saying what changed."""
        action, slots = request.get("action"), [str(s) for s in request.get("slots") or []]
        names = set(slot_names)
        unknown = [s for s in slots if s not in names]
        if unknown:
            return f"ignored {action} of unknown slot(s) {', '.join(unknown)} (slots: {', '.join(sorted(names))})"
        if action == "pause":
            self.paused = True
            return "paused: running runs go on, no run starts"
        if action == "drain":
            self.draining |= set(slots)
            return f"draining {', '.join(slots)}: each finishes its run and takes no other"
        if action == "resume" and slots:
            self.draining -= set(slots)
            return f"taking runs again: {', '.join(slots)}"
        if action == "resume":
            self.paused = False
            drained = f" ({', '.join(sorted(self.draining))} still draining)" if self.draining else ""
            return f"resumed{drained}"
        return f"ignored unknown request {action!r}"

    def state_line(self) -> str:
        """``paused``, ``draining cpu#1``, ``halted: ...`` joined, "" when none holds."""
        parts = ["paused"] if self.paused else []
        if self.draining:
            parts.append(f"draining {', '.join(sorted(self.draining))}")
        if self.halted:
            parts.append(f"halted ({self.halted})")
        return " · ".join(parts)


class ControlChannel:
    """The manager's end of the request and state files (see the module's docstring)."""

    def __init__(self, ws: Workspace, manager: str) -> None:
        self.requests = ws.root / REQUESTS_NAME
        self.state_path = ws.root / STATE_NAME
        self.manager = manager
        self.offset = _size(self.requests)  # requests written before this manager started are void
        self._published: dict[str, Any] | None = None

    def poll(self) -> list[dict[str, Any]]:
        """The whole request lines appended since the last call."""
        size = _size(self.requests)
        if size < self.offset:  # the file was removed (and written anew): what it holds now is new
            self.offset = 0
        if size <= self.offset:
            return []
        with open(self.requests, "rb") as fh:
            fh.seek(self.offset)
            data = fh.read()
        end = data.rfind(b"\n") + 1  # a line still being written is read next time
        self.offset += end
        out = []
        for line in data[:end].splitlines():
            try:
                request = json.loads(line)
            except ValueError:
                continue
            if isinstance(request, dict):
                out.append(request)
        return out

    def publish(self, control: QueueControl, slots: Sequence[Slot], running: int, queued: int) -> None:
        """Write the state file when what it says changed."""
        state = {
            "pid": os.getpid(),
            "manager": self.manager,
            "offset": self.offset,
            "paused": control.paused,
            "draining": sorted(control.draining),
            "slots": [s.name for s in slots],
            "running": running,
            "queued": queued,
            "halted": control.halted,
        }
        if state != self._published:
            self._published = state
            atomic_write_text(self.state_path, json.dumps(state, indent=1) + "\n")

    def close(self) -> None:
        """The manager ends: its state no longer holds."""
        self.state_path.unlink(missing_ok=True)

    def __enter__(self) -> ControlChannel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def steer(channel: ControlChannel, scheduler: Any, say: Any) -> None:
    """One step of steering ``scheduler`` (its ``control``, ``slots``, ``running``, ``queue``): apply the new
    requests (``say`` gets a line for each) and publish the state."""
    for request in channel.poll():
        say(scheduler.control.apply(request, (s.name for s in scheduler.slots)))
    channel.publish(scheduler.control, scheduler.slots, len(scheduler.running), len(scheduler.queue))


# ------------------------------------------------------------------------------------------ the requesting side


def read_state(ws: Workspace) -> dict[str, Any] | None:
    """The state published by the manager of ``ws``, or None."""
    try:
        state = json.loads((ws.root / STATE_NAME).read_text())
    except (FileNotFoundError, ValueError):
        return None
    return state if isinstance(state, dict) else None


def request(ws: Workspace, action: str, slots: Sequence[str], wait: float = 15.0) -> dict[str, Any]:
    """Append a request for the manager of ``ws`` and wait (up to ``wait`` s) until it was read; returns the state
    the manager published then. GaptuiError when no manager runs there, a slot is not one of its own, or it did not
    read the request in time."""
    from gaptui.history.store import WorkspaceLock

    if action not in ACTIONS:
        raise GaptuiError(f"unknown request '{action}': expected {', '.join(ACTIONS)}")
    if not ws.root.is_dir():
        raise GaptuiError(f"no workspace at {ws.root}: nothing to {action}")
    lock = WorkspaceLock(ws, "gaptui queue")
    try:
        lock.acquire()
    except GaptuiError:
        pass  # held: a manager runs
    else:
        lock.release()
        raise GaptuiError(
            f"no manager is running on workspace {ws.root}: nothing to {action} "
            "(`gaptui run --preset P` or the app start one)"
        )
    state = read_state(ws) or {}
    names = state.get("slots") or []
    unknown = [s for s in slots if s not in names]
    if unknown:
        raise GaptuiError(
            f"slot '{unknown[0]}' is not one of the manager's: {', '.join(names) or 'none published yet'}"
        )
    line = json.dumps({"action": action, "slots": list(slots), "by": os.getpid(), "t": time.time()}) + "\n"
    path = ws.root / REQUESTS_NAME
    with open(path, "ab") as fh:  # one write in append mode: lines of concurrent writers do not interleave
        fh.write(line.encode())
        end = fh.tell()
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        state = read_state(ws) or {}
        if int(state.get("offset") or 0) >= end:
            return state
        time.sleep(0.1)
    raise GaptuiError(f"the manager of {ws.root} did not read the request within {wait:g} s (is it stuck?)")


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0
