"""The time left of a grid as it runs, from the same estimate the dry run prints.

``gaptui run``'s progress line and the terminal app's Runs screen ask a :class:`Countdown`: the runs in flight and
queued are estimated by :func:`gaptui.estimate.estimate_from_cache` (the finished runs of their cells and this
machine's cached calibrations, nothing measured; the runs in flight count what is left of them) and scheduled on
the slots as the dry run schedules them, again each time a run ends; in between the estimate counts down. So the
dry run, the run and the app give one number, and it sharpens as finished runs join the history.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.tasks import TaskSpec, family
from gaptui.durations import format_duration
from gaptui.workspace import Workspace

#: What the progress says when no estimate holds every run left (a cell never run here and never calibrated).
NOT_ESTIMATED = "ETA not estimated yet (`gaptui run --dry-run` measures this machine)"
#: Seconds between two estimates at the least: a grid of 2,000 runs takes a few seconds to estimate on a loaded
#: machine, and the loop that drives the workers waits meanwhile.
REFRESH_EVERY = 30.0


@dataclass
class RunsLeft:
    """The runs a grid has left, as :meth:`gaptui.estimate.Estimator.estimate` reads a plan: in flight first."""

    to_run: list[TaskSpec]
    done: list[TaskSpec] = field(default_factory=list)

    def dependencies(self, spec: TaskSpec) -> tuple[str, ...]:
        return tuple(family(spec.task).dependencies(spec))


class Countdown:
    """The estimated seconds left of the runs a scheduler holds, estimated again when one of them ends."""

    def __init__(self, ws: Workspace, pack_seeds: int = 1, clock: Callable[[], float] = time.time) -> None:
        self.ws = ws
        self.pack_seeds = pack_seeds
        self.clock = clock
        #: Seconds left when last estimated (None: no estimate), and when that was.
        self.left: float | None = None
        self.at = 0.0
        #: A note on the estimate's measurements when they no longer hold (taken under another load...).
        self.note = ""
        self._ended = -1

    def refresh(self, scheduler: Any, records: Callable[[], Iterable[Mapping[str, Any]]]) -> None:
        """Estimate the scheduler's runs again if one ended since the last estimate (at most every
        :data:`REFRESH_EVERY` seconds), or for the first time."""
        ended, now = len(scheduler.finished), self.clock()
        if ended == self._ended or (self._ended >= 0 and now - self.at < REFRESH_EVERY):
            return
        self._ended = ended
        running = list(scheduler.running.values())
        specs = [job.spec for job in running] + list(scheduler.queue)
        elapsed = {job.run_hash: now - (job.run_started or job.started) for job in running}
        self.at = now
        self.left, self.note = self.estimate(specs, elapsed, scheduler.slots, records)

    def estimate(
        self,
        specs: list[TaskSpec],
        elapsed: Mapping[str, float],
        slots: Sequence[Any],
        records: Callable[[], Iterable[Mapping[str, Any]]],
    ) -> tuple[float | None, str]:
        from gaptui.estimate import estimate_from_cache

        if not specs:
            return 0.0, ""
        if not slots:  # a backend without local slots (Slurm): its pace is the cluster's
            return None, ""
        found = estimate_from_cache(RunsLeft(specs), slots, self.ws, records(), self.pack_seeds, elapsed)
        if found is None:
            return None, ""
        notes = [f"calibration {found.stale[0]}"] if found.stale else []
        notes += [f"and {len(found.missing)} run(s) not estimated"] if found.missing else []
        return found.plan.wall, "; ".join(notes)

    def seconds(self) -> float | None:
        """Seconds left now (the last estimate, counted down since)."""
        return None if self.left is None else max(0.0, self.left - (self.clock() - self.at))

    def text(self) -> str:
        """``ETA 43 min`` (with why the estimate may be off, when its measurements no longer hold)."""
        left = self.seconds()
        if left is None:
            return NOT_ESTIMATED
        return f"ETA {format_duration(left)}" + (f" ({self.note})" if self.note else "")
