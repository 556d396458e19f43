"""Messages the manager thread posts to the app (thread-safe ``App.post_message``); only handlers touch widgets.

Each is a small dataclass. Payloads are fresh dicts and lists built in the manager thread and never mutated
after posting, so handlers may keep them. All derive from :class:`ManagerMessage`: the app receives them through
one handler, which drops what arrives while it is being torn down.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from textual.message import Message


class ManagerMessage(Message):
    """Base of the messages the manager thread (or a background task) posts to the app for its sections."""


@dataclass
class RecordsLoaded(ManagerMessage):
    """The whole history as it is now (start-up, or another manager changed it while we are read-only)."""

    records: list[dict[str, Any]]


@dataclass
class RecordsAdded(ManagerMessage):
    """Whole records that are new or changed: a launch just queued them, or the history's journal says they changed."""

    records: list[dict[str, Any]]


@dataclass
class RunUpdated(ManagerMessage):
    """Fields of one record changed (status, metrics, tags, note ...): the scheduler's ``status`` callback."""

    run_hash: str
    fields: dict[str, Any]


@dataclass
class RunEvents(ManagerMessage):
    """Worker events of one run, in file order; ``reset`` when they are the whole ``events.jsonl`` so far."""

    run_hash: str
    events: list[dict[str, Any]]
    reset: bool = False


@dataclass
class LogTail(ManagerMessage):
    """The last lines of the followed run's ``log.txt``."""

    run_hash: str
    lines: list[str]


@dataclass
class SchedulerState(ManagerMessage):
    """What the scheduler holds after a step: running and queued run hashes, its slot names, how it is steered."""

    running: tuple[str, ...]
    queued: tuple[str, ...]
    slots: tuple[str, ...] = ()
    building: str = ""
    #: The queue is paused (no run starts); these local slots are draining (finish their run, take no other).
    paused: bool = False
    draining: tuple[str, ...] = ()
    #: What steers the queue, in words ("paused · draining cpu#1 · halted (...)"), "" when nothing does.
    control: str = ""
    #: The time left of the runs running and queued (``ETA 43 min``; "" when there are none).
    eta: str = ""


@dataclass
class ManagerNotice(ManagerMessage):
    """A line for the user (a notification); GaptuiError messages arrive here verbatim."""

    text: str
    severity: str = "information"


@dataclass
class Recovered(ManagerMessage):
    """What :meth:`Scheduler.recover` found at start: re-attached workers and interrupted runs."""

    reattached: list[str]
    interrupted: list[str]
    refiled: list[str] = field(default_factory=list)
    #: One line on the runs a foreground ``gaptui train`` trains ("" when none): followed, never adopted.
    foreground: str = ""
