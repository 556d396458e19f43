"""What a family's loop receives and returns in the worker: its context, its outcome, its inputs, its stops.

The worker (:mod:`engine.worker`) builds the :class:`RunContext`, calls the family's ``run`` or ``steps`` and
writes the :class:`Outcome` to ``result.json``; :class:`Cancelled` and :class:`RunFailed` are the two ways a loop
ends early on purpose.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

#: The file the worker writes when a run ends (``status``, ``run`` hash, metrics...).
RESULT = "result.json"
#: The file a family's probes of a finished run write into its folder (alignment: ``gaptui probe``): ``sections``,
#: each a ``title``, ``columns`` (``key``, ``name``, ``unit``) and ``rows``, which any reader can print.
PROBES = "probes.json"


class Cancelled(Exception):
    """Raised by a worker loop that stopped on request after saving its checkpoint (worker exit 143)."""

    def __init__(self, **where: Any) -> None:
        super().__init__("cancelled")
        self.where = where


class RunFailed(Exception):
    """Raised by a worker loop for a failure of the run itself (not of its input): non-finite loss and the like.

    ``kind`` goes to the ``error`` event (``nan`` exits 3, anything else 1) with the ``event`` fields;
    ``fields`` go to ``result.json``.
    """

    def __init__(
        self, message: str, kind: str = "crash", *, event: dict[str, Any] | None = None, **fields: Any
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.event = event or {}
        self.fields = fields


@dataclass
class Outcome:
    """What a finished worker loop returns: its final metrics, parameter count and extra ``result.json`` fields."""

    metrics: dict[str, float]
    params: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class RunContext:
    """What the worker hands to a family's loop."""

    run_dir: Path
    emit: Callable[..., None]
    log: Callable[[str], None]
    should_stop: Callable[[], bool]
    #: Shared by the runs of one worker process (packed seeds): a family keeps data they all read here, once.
    shared: dict[str, Any] = field(default_factory=dict)

    def run_dir_of(self, run_hash: str) -> Path:
        """The folder of another run of the same workspace (a dependency): run folders are siblings."""
        return self.run_dir.parent / run_hash[:12]


T = TypeVar("T")


def run_steps(steps: Generator[None, None, T]) -> T:
    """Run a :meth:`TaskFamily.steps` generator to its end and return its outcome (one run alone)."""
    while True:
        try:
            next(steps)
        except StopIteration as end:
            return end.value


@dataclass(frozen=True)
class Input:
    """Something to prepare before a run starts (a dataset, a PE cache). Equal ``key`` = prepared once."""

    key: str
    label: str
    build: Callable[[], Any]
