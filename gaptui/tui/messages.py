"""Messages the manager thread posts to the app (thread-safe ``App.post_message``); only handlers touch widgets.

Each is a small dataclass. Payloads are fresh dicts and lists built in the manager thread and never mutated
after posting, so handlers may keep them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from textual.message import Message


@dataclass
class RecordsLoaded(Message):
    """The whole history as it is now (start-up, or another manager changed it while we are read-only)."""

    records: list[dict[str, Any]]


@dataclass
class RecordsAdded(Message):
    """Whole records that are new or changed: a launch just queued them, or the history's journal says they changed."""

    records: list[dict[str, Any]]


@dataclass
class RunUpdated(Message):
    """Fields of one record changed (status, metrics, tags, note ...): the scheduler's ``status`` callback."""

    run_hash: str
    fields: dict[str, Any]


@dataclass
class RunEvents(Message):
    """Worker events of one run, in file order; ``reset`` when they are the whole ``events.jsonl`` so far."""

    run_hash: str
    events: list[dict[str, Any]]
    reset: bool = False


@dataclass
class LogTail(Message):
    """The last lines of the followed run's ``log.txt``."""

    run_hash: str
    lines: list[str]


@dataclass
class SchedulerState(Message):
    """What the scheduler holds after a step: running and queued run hashes, and its slot names."""

    running: tuple[str, ...]
    queued: tuple[str, ...]
    slots: tuple[str, ...] = ()
    building: str = ""
    #: The time left of the runs running and queued (``ETA 43 min``; "" when there are none).
    eta: str = ""


@dataclass
class ManagerNotice(Message):
    """A line for the user (a notification); GaptuiError messages arrive here verbatim."""

    text: str
    severity: str = "information"


@dataclass
class Recovered(Message):
    """What :meth:`Scheduler.recover` found at start: re-attached workers and interrupted runs."""

    reattached: list[str]
    interrupted: list[str]
    refiled: list[str] = field(default_factory=list)


@dataclass
class ManagerClosed(Message):
    """The manager loop ended: how (``stopped``, ``detached``, ``idle``) and the run ids left running."""

    how: str
    detached: list[str] = field(default_factory=list)
