"""PlanBar: the New-experiment form's bottom line, what launching the grid the form describes costs.

It shows the grid's size, the runs history already holds and the estimated time (a
:class:`~gaptui.tui.planning.PlanSummary`), or in the error colour why the form describes no grid yet. Its owner
calls :meth:`PlanBar.schedule` after each edit; once the edits pause for :data:`PLAN_DELAY` seconds, the bar reads
the form (a :class:`~gaptui.tui.planning.FormDraft`, from the callable it was given) and computes the summary off
the UI thread, a newer edit superseding it, and quitting never waits for it (:class:`OneAtATime`). A grid over
:data:`~gaptui.tui.planning.MAX_GRID_RUNS` runs is refused from its counted size, before any of it is built.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, TypeVar, cast

from textual.message import Message
from textual.timer import Timer
from textual.widgets import Static
from textual.worker import get_current_worker

from engine.errors import GaptuiError
from gaptui.tui.context import AppContext
from gaptui.tui.planning import MAX_GRID_RUNS, FormDraft, PlanSummary, over_limit, summarize
from gaptui.workspace import Workspace

#: Seconds of quiet after an edit before the grid summary is recomputed.
PLAN_DELAY = 0.3
#: Seconds between two looks at whether a computation waited for is still wanted.
POLL = 0.05

T = TypeVar("T")


class OneAtATime:
    """Runs one computation at a time on a daemon thread; waiting for it ends as soon as ``cancelled()`` says so.

    A thread worker waiting here is never stuck in work nobody wants: superseded (an exclusive worker of its group
    started after it) or quitting (Textual cancels every worker), it returns None at once, and the computation it
    leaves ends on its own without holding up the process's exit (the thread is a daemon). The next computation
    starts once the one left behind ended, so superseded computations never pile up."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def run(self, compute: Callable[[], T], cancelled: Callable[[], bool]) -> T | None:
        """What ``compute()`` returns (or raises), else None when cancelled before it finished."""
        box: dict[str, Any] = {}

        def target() -> None:
            try:
                box["value"] = compute()
            except Exception as exc:  # raised again in the waiting worker, which reports it
                box["error"] = exc

        thread = threading.Thread(target=target, name=self.name, daemon=True)
        while True:
            with self._lock:
                busy = self._thread
                if busy is None or not busy.is_alive():
                    self._thread = thread
                    thread.start()
                    break
            if cancelled():
                return None
            busy.join(POLL)
        while thread.is_alive():
            if cancelled():
                return None
            thread.join(POLL)
        if "error" in box:
            raise box["error"]
        return box.get("value")


@dataclass
class PlanComputed(Message):
    """The summary of the grid the form describes (or why the form does not describe one yet)."""

    summary: PlanSummary | None
    error: str = ""


class PlanBar(Static):
    """One line: the summary of the grid ``draft()`` describes (class ``error`` while it describes none)."""

    DEFAULT_CSS = """
    PlanBar.error { color: $error; }
    """

    def __init__(self, draft: Callable[[], FormDraft | None], **kwargs: Any) -> None:
        super().__init__("", markup=False, **kwargs)
        #: What the form holds now, read on the UI thread when a computation starts (None: the form is being
        #: rebuilt, and its owner schedules the bar again once it is).
        self.draft = draft
        #: The summary shown (None: none yet, or the form describes no grid and the line says why).
        self.summary: PlanSummary | None = None
        self._timer: Timer | None = None
        #: Where the grid summary is computed (one at a time; quitting never waits for it).
        self._summaries = OneAtATime("grid summary")

    @property
    def gapp(self) -> AppContext:
        return cast(AppContext, self.app)

    def schedule(self) -> None:
        """Compute the summary again once the edits pause for :data:`PLAN_DELAY` seconds."""
        if self._timer is not None:
            self._timer.stop()
        self._timer = self.set_timer(PLAN_DELAY, self._start)

    def _start(self) -> None:
        draft = self.draft()
        if draft is None:
            return
        records = dict(self.gapp.book.records)  # a snapshot: the book's records are replaced, never mutated
        ws = self.gapp.ws
        self.gapp.run_task(lambda: self._plan(draft, records, ws), name="grid summary", group="plan", exclusive=True)

    def _plan(self, draft: FormDraft, records: dict[str, dict[str, Any]], ws: Workspace) -> None:
        """The grid summary of ``draft`` (a thread worker, exclusive in its group: a newer edit supersedes it).

        A grid over :data:`~gaptui.tui.planning.MAX_GRID_RUNS` runs is refused from its counted size, before any
        of it is built; the rest (the preset, the grid, the estimate) is computed by :attr:`_summaries`, which this
        worker stops waiting for once it is superseded or the app quits."""
        worker = get_current_worker()

        def cancelled() -> bool:
            return worker.is_cancelled

        try:
            if draft.form_fields():
                bound, widest = draft.grid_bound()  # counted, nothing listed: at once whatever was typed
                if widest > MAX_GRID_RUNS:
                    raise GaptuiError(over_limit(bound))
            summary = self._summaries.run(lambda: self._summary(draft, records, ws, cancelled), cancelled)
            message = None if summary is None else PlanComputed(summary)
        except GaptuiError as exc:
            message = PlanComputed(None, str(exc))
        if message is not None and not worker.is_cancelled:
            self.post_message(message)

    def _summary(
        self, draft: FormDraft, records: dict[str, dict[str, Any]], ws: Workspace, cancelled: Callable[[], bool]
    ) -> PlanSummary | None:
        """What :meth:`_plan` shows: the grid's size, its overlap with history and the estimate (None: superseded
        between two steps)."""
        from gaptui.launch import plan

        preset = draft.launch_preset()  # refuses a grid over the limit from its size, before it is built
        slots = draft.slot_config().slots()
        if cancelled():
            return None
        known = {h: str(r.get("status")) for h, r in records.items()}
        # One expansion of the grid for both the counts and the estimate; failed runs count as to run.
        grid_plan = plan(preset, ws, known, retry_failed=True)
        if cancelled():
            return None
        summary = summarize(grid_plan.specs, records, len(slots))
        if summary.to_run and not cancelled():
            summary = with_cached_estimate(summary, grid_plan, slots, records, ws)
        return None if cancelled() else summary

    def on_plan_computed(self, message: PlanComputed) -> None:
        self.summary = message.summary
        self.set_class(message.summary is None, "error")
        self.update(message.summary.text() if message.summary else message.error)


def with_cached_estimate(
    summary: PlanSummary, grid_plan: Any, slots: list[Any], records: dict[str, dict[str, Any]], ws: Workspace
) -> PlanSummary:
    """``summary`` with the estimate of ``gaptui run --dry-run`` where this machine's calibration (cached by an
    earlier dry run) and history cover every run left; measuring here would stall the form."""
    from gaptui.estimate import estimate_from_cache

    found = estimate_from_cache(grid_plan, slots, ws, records.values(), grid_plan.preset.pack_seeds)
    if found is None:
        return summary
    measured = any(r.source.startswith("calibration") for r in found.runs)
    notes = [f"{len(found.runs)} of {len(found.runs) + len(found.missing)} runs"] if found.missing else []
    notes += [f"calibration {found.stale[0]}: the dry run measures again"] if found.stale else []
    return replace(
        summary,
        estimate_seconds=found.plan.wall,
        estimate_source="measured" if measured else "history",
        estimate_note="; ".join(notes),
    )
