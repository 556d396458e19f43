"""How long a grid will take on these slots: what ``gaptui run --dry-run`` prints and the app's launch bar shows.

Every family estimates its own runs (:meth:`engine.cost.CostModel.estimate`, vocabulary in
:mod:`engine.cost`): the seconds of each run left to do on each slot profile and where they came from. A family
may have a calibrated model (the default family's: measured training throughput); the others have, by default,
the history of finished runs of the same cell (seconds per unit of work: an epoch, an epoch over its graphs).
The :class:`Estimator` offers them what they ask for (:class:`engine.cost.CostContext`):

1. **history**: finished runs of the same cell (:meth:`~engine.cost.CostModel.cell`) on this host and
   device: their median seconds per unit, per evaluation and the rest of their duration, from their events;
2. **calibration**: measurements of a family's cost keys taken in one process per slot of the grid side by side
   (``python -m <the family's calibration_module>``), each in its slot's environment (so concurrent runs slow each
   other as they will), and the per-run ``overhead`` timed on tiny runs of the family
   (:meth:`~engine.cost.CostModel.overhead_probe`) through the real scheduler and worker, one per slot at once
   (:mod:`gaptui.calibration`). Both are cached in ``<workspace>/calibration.json`` with when and under what load
   they were taken (:class:`engine.cost.Conditions`), and measured again when missing, stale (older than a week,
   or taken while a run got another share of a core) or with ``--recalibrate``; an estimate that measures nothing
   (:func:`estimate_from_cache`: the app's form, a running grid's countdown in :mod:`gaptui.eta`) uses a stale
   one and says so.

The wall time schedules the runs in start order on the slots (each run on the slot where it would end first,
after the runs it depends on): the same greedy order the scheduler follows. Runs a family cannot estimate (a real
dataset not built yet, a cell never finished here) are listed as not estimated, never given a made-up number;
building inputs is not counted.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, is_dataclass
from functools import partial
from pathlib import Path
from typing import Any

import engine.tasks.cost
from engine.tasks import LEGACY_TASK, family
from engine.tasks.cost import CalibrationCache, CellHistory, Conditions, CostContext, CostReport, Profile
from gaptui.calibration import measure_on_slots, measure_overhead
from gaptui.durations import format_duration
from gaptui.scheduler import Slot, group_packs
from gaptui.workspace import Workspace

#: Seconds of a run's duration besides its units and evaluations below which it was a run of a pack (whose
#: duration is rounded to 0.01 s from just those).
PACKED_REST = 0.05
#: Calibration file in the workspace.
CALIBRATION_FILE = "calibration.json"

__all__ = ["CalibrationCache", "CellHistory", "Profile"]


def calibration_path(ws: Workspace) -> Path:
    return ws.root / CALIBRATION_FILE


# ------------------------------------------------------------------------------------------------ arithmetic


def profile_of(slot: Slot) -> Profile:
    """What ``slot`` offers a run: its device type, concrete device (as this process numbers it) and threads."""
    import os

    threads = int(slot.env.get("OMP_NUM_THREADS") or 1)
    gpu = slot.env.get("CUDA_VISIBLE_DEVICES", "").split(",")[0]
    if not (slot.name.startswith("cuda") and gpu):
        return Profile("cpu", "cpu", threads)
    # The slot names a GPU as the system numbers it; this process may see only some of them, renumbered.
    visible = [g.strip() for g in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if g.strip()]
    return Profile("cuda", f"cuda:{visible.index(gpu) if gpu in visible else gpu}", threads)


@dataclass(frozen=True)
class Schedule:
    """Where the simulated runs went: the wall time, the compute summed over slots, the seconds of each run and the
    slot profile it went to."""

    wall: float
    compute: float
    seconds: dict[str, float]
    where: dict[str, Profile] = field(default_factory=dict)


def schedule(runs: Sequence[tuple[str, Sequence[str], Mapping[Profile, float]]], slots: Sequence[Profile]) -> Schedule:
    """Simulate ``runs`` (hash, dependency hashes, seconds per slot profile), in start order, on ``slots``: each run
    goes where it would end first, no earlier than the end of its dependencies in ``runs``."""
    free = [0.0] * len(slots)
    end: dict[str, float] = {}
    took: dict[str, float] = {}
    where: dict[str, Profile] = {}
    for run_hash, deps, cost in runs:
        ready = max((end[d] for d in deps if d in end), default=0.0)
        best = min(range(len(slots)), key=lambda i: max(free[i], ready) + cost[slots[i]])
        took[run_hash], where[run_hash] = cost[slots[best]], slots[best]
        free[best] = end[run_hash] = max(free[best], ready) + took[run_hash]
    return Schedule(max(free, default=0.0), sum(took.values()), took, where)


# ------------------------------------------------------------------------------------------------ estimate


@dataclass
class RunEstimate:
    """One run's seconds per slot profile, of which ``shared`` (per profile) is paid once per worker process
    (start-up, dataset loading: what the runs of a pack share), and where the numbers came from."""

    spec: Any
    label: str
    seconds: dict[Profile, float]
    source: str
    shared: dict[Profile, float] = field(default_factory=dict)


@dataclass
class GridEstimate:
    """The estimate of a plan's runs left to do on ``slots``; ``missing`` lists runs without one and why."""

    slots: list[Profile]
    done: int
    runs: list[RunEstimate] = field(default_factory=list)
    missing: list[tuple[Any, str]] = field(default_factory=list)
    plan: Schedule = field(default_factory=lambda: Schedule(0.0, 0.0, {}))
    unavailable: str = ""
    datasets_to_build: int = 0
    pack_seeds: int = 1
    #: Seconds of each run (hash) where the schedule placed it, its pack's shared part split between its runs.
    placed: dict[str, float] = field(default_factory=dict)
    #: What the calibrations used were: measured again and why, or cached and in what conditions (one line each).
    calibration: list[str] = field(default_factory=list)
    #: Why cached calibrations used as they are no longer hold (an estimate that measures nothing).
    stale: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        if self.unavailable:
            return [f"estimate: {self.unavailable}"]
        left = len(self.runs) + len(self.missing)
        if not left:
            return ["estimate: nothing left to run"]
        kinds = sorted({(p.kind, p.threads) for p in self.slots})
        where = ", ".join(
            f"{sum(1 for p in self.slots if (p.kind, p.threads) == k)} {k[0]} slot(s) x {k[1]} thread(s)" for k in kinds
        )
        head = f"estimate: {len(self.runs)} run(s)"
        if self.missing:
            head += f" ({len(self.missing)} more not estimated)"
        if self.done:
            head += f" (resuming: {left} of {left + self.done} left)"
        if self.pack_seeds > 1:
            where += f", up to {self.pack_seeds} seeds per worker"
        if self.runs:
            wall, compute = format_duration(self.plan.wall), format_duration(self.plan.compute)
            head += f": wall about {wall} on {where}; compute {compute}"
        else:
            head = f"estimate: none of the {left} run(s) left has one yet"
        out = [head]
        by_label: dict[str, list[RunEstimate]] = {}
        for run in self.runs:
            by_label.setdefault(run.label, []).append(run)
        width = max((len(label) for label in by_label), default=5)
        for label, runs in by_label.items():
            per_run = [self.placed[r.spec.hash()] for r in runs]
            sources = sorted({r.source for r in runs})
            out.append(
                f"  {label:<{width}}  {len(runs):>4} run(s)  {format_duration(statistics.fmean(per_run)):>9} per run  "
                f"{format_duration(sum(per_run)):>9} in all  from {', '.join(sources)}"
            )
        if self.missing:
            reasons: dict[str, int] = {}
            for _spec, why in self.missing:
                reasons[why] = reasons.get(why, 0) + 1
            for why, count in reasons.items():
                out.append(f"  not estimated: {count} run(s): {why}")
        if self.datasets_to_build:
            out.append(f"  not counted: building {self.datasets_to_build} dataset(s) not yet in the cache")
        return out + [f"  {line}" for line in self.calibration]


#: ``measure(keys, slots) -> [measurement per key]``: the keys measured at once on every slot of one profile.
Measure = Callable[[list[Any], list[Slot]], list[Any]]
#: ``overhead(slots) -> seconds``: what a run costs besides its training, with every slot busy.
Overhead = Callable[[list[Slot]], float]


class Estimator(CostContext):
    """Estimates plans through each family's cost model, from history and calibration; measurements go through
    ``measure`` and ``overhead`` (replaceable in tests; by default the family's calibration module and a tiny run
    of the family) and are cached in ``cache``. ``progress(text, done, total)`` is told before each measurement
    and, for a calibration, as each of its ``total`` keys is measured (``total`` 0: a measurement of one piece)."""

    def __init__(
        self,
        cache: CalibrationCache,
        records: Iterable[Mapping[str, Any]] = (),
        *,
        recalibrate: bool = False,
        measure: Measure | None = None,
        overhead: Overhead | None = None,
        progress: Callable[[str, int, int], None] = lambda _text, _done, _total: None,
        now: Conditions | None = None,
    ) -> None:
        self.cache = cache
        self.records = list(records)
        self.recalibrate = recalibrate
        self.measure = measure
        self.overhead_of = overhead
        self.progress = progress
        self.profiles: list[Profile] = []
        self.datasets_dir = Path()
        self._slots: list[Slot] = []
        self._history: dict[tuple[str, str, str], CellHistory] | None = None
        self._machines: dict[str, dict[str, str]] = {}
        #: This machine's load now, before anything is measured: what measurements are taken under and compared to.
        self.now = now or Conditions.now()
        #: Why cached measurements were taken again (measuring) or are used though they no longer hold (not
        #: measuring), and the conditions of those used as they are.
        self.remeasured: set[str] = set()
        self.stale: set[str] = set()
        self.used: list[Conditions] = []

    def machine(self, profile: Profile) -> dict[str, str]:
        if profile.device not in self._machines:
            self._machines[profile.device] = engine.tasks.cost.machine(profile.device)
        return self._machines[profile.device]

    def history(self, fam: Any, spec: Any, profile: Profile) -> CellHistory | None:
        if self._history is None:
            self._history = _history_cells(self.records)
        return self._history.get((fam.name, fam.costs.cell(spec), self.machine(profile)["device"]))

    def _cached(self, host: Mapping[str, Any], key: Mapping[str, Any]) -> dict[str, Any] | None:
        """A cached measurement that still holds (:meth:`engine.cost.Conditions.stale`); one that no longer does is
        measured again when this estimator measures, else used and said."""
        found = None if self.recalibrate else self.cache.entry(host, key)
        if found is None:
            return None
        value, taken = found
        why = taken.stale(self.now) if taken else "measured before gaptui recorded the load it was measured under"
        if why and self.measures:
            self.remeasured.add(why)
            return None
        if why:
            self.stale.add(why)
        else:
            self.used.append(taken)  # type: ignore[arg-type]
        return value

    def _put(self, host: Mapping[str, Any], key: Mapping[str, Any], value: Mapping[str, Any]) -> None:
        """Cache a measurement taken in this estimate, under the load it found before measuring."""
        self.cache.put(host, key, value, self.now)

    def calibration_lines(self) -> list[str]:
        """What the estimate's measurements were: taken again and why, used though they no longer hold, or cached
        and when, under what load."""
        lines = [f"calibration measured again: the cached one was {why}" for why in sorted(self.remeasured)]
        lines += [
            f"calibration from the cache, {why}: `gaptui run --dry-run` measures it again" for why in sorted(self.stale)
        ]
        if self.used and not lines:
            oldest = min(self.used, key=lambda c: c.at)
            loads = sorted({c.load for c in self.used})
            load = f"{loads[0]:.1f}" if len(loads) == 1 else f"{loads[0]:.1f}-{loads[-1]:.1f}"
            lines.append(
                f"calibration from the cache, measured {format_duration(self.now.at - oldest.at)} ago under a load "
                f"of {load} per core (now {self.now.load:.1f}; `--recalibrate` measures again)"
            )
        return lines

    def overhead(self, fam: Any) -> float:
        slots = self._slots
        profiles = [profile_of(s) for s in slots]
        host = self.machine(profiles[0])
        key: dict[str, Any] = {
            "overhead": sorted({json.dumps(p.__dict__, sort_keys=True) for p in profiles}),
            "slots": len(slots),
        }
        # Entries cached before families name no task (they were all LEGACY_TASK's): its entries keep that key, so
        # an old cache stays readable; every other family's key names it.
        if fam.name != LEGACY_TASK:
            key["task"] = fam.name
        cached = self._cached(host, key)
        if cached is None or "seconds" not in cached:
            self.progress(f"timing a tiny run on each of {len(slots)} slot(s)", 0, 0)
            seconds = self.overhead_of(list(slots)) if self.overhead_of else measure_overhead(list(slots), fam)
            cached = {"seconds": seconds}
            self._put(host, key, cached)
        return float(cached["seconds"])

    def calibrate(
        self,
        fam: Any,
        wanted: Mapping[Profile, Mapping[str, Any]],
        fits: Callable[[dict[str, Any]], bool] = bool,
    ) -> dict[tuple[Profile, str], Any]:
        """Each wanted key's measurement on its profile (a dict as cached, or what ``measure`` returned), measured
        (on all slots of the profile at once) when not cached; True when measured now."""
        out: dict[tuple[Profile, str], Any] = {}
        for profile, keys in wanted.items():
            host = self.machine(profile)
            missing: list[tuple[str, Any]] = []
            for ident, key in keys.items():
                cached = self._cached(host, key.to_dict())
                if cached is not None and fits(cached):
                    out[(profile, ident)] = (cached, False)
                else:  # not cached, or an entry of another layout
                    missing.append((ident, key))
            if not missing:
                continue
            here = [s for s in self._slots if profile_of(s) == profile]
            models = sorted({getattr(k, "model", fam.name) for _, k in missing})
            names = ", ".join(models[:4]) + (f" +{len(models) - 4} more" if len(models) > 4 else "")
            what = f"calibrating {names} on {len(here)} {profile.kind} slot(s) at once"
            self.progress(what, 0, len(missing))
            if self.measure is not None:
                values = self.measure([k for _, k in missing], here)
            else:
                keys, module = [k for _, k in missing], fam.costs.calibration_module
                told = partial(self.progress, what)
                values = measure_on_slots(keys, here, module, measured=lambda n, told=told, k=len(keys): told(n, k))
            for (ident, key), value in zip(missing, values, strict=True):
                self._put(host, key.to_dict(), asdict(value) if is_dataclass(value) else dict(value))
                out[(profile, ident)] = (value, True)
        return out

    def estimate(
        self,
        plan: Any,
        slots: Sequence[Slot],
        ws: Workspace,
        pack_seeds: int = 1,
        elapsed: Mapping[str, float] | None = None,
    ) -> GridEstimate:
        """The estimate of ``plan``'s runs left to do on ``slots``, seeds packed by ``pack_seeds`` per worker; runs
        in flight (``elapsed``: run hash -> seconds since they started) count what is left of them."""
        self._slots = list(slots)
        profiles = [profile_of(s) for s in slots]
        self.profiles = list(dict.fromkeys(profiles))
        self.datasets_dir = ws.datasets
        result = GridEstimate(slots=profiles, done=len(plan.done), pack_seeds=pack_seeds)
        by_task: dict[str, list[Any]] = {}
        for spec in plan.to_run:
            by_task.setdefault(spec.task, []).append(spec)
        reports: dict[str, CostReport] = {}
        for task, specs in by_task.items():
            fam = family(task)
            reports[task] = fam.costs.estimate(specs, self)
            result.datasets_to_build += reports[task].to_build
        several = len(by_task) > 1
        for spec in plan.to_run:
            report, h = reports[spec.task], spec.hash()
            if h in report.missing or h not in report.costs:
                result.missing.append((spec, report.missing.get(h, f"task {spec.task} gave no estimate")))
                continue
            fam = family(spec.task)
            label = f"{spec.task} {fam.costs.label(spec)}" if several else fam.costs.label(spec)
            cost = report.costs[h]
            seconds, shared = cost.seconds, cost.shared
            if elapsed and h in elapsed:  # in flight: what is left of it
                seconds = {p: max(0.0, t - elapsed[h]) for p, t in seconds.items()}
                shared = {p: min(t, seconds[p]) for p, t in shared.items()}
            result.runs.append(RunEstimate(spec, label, seconds, cost.source, shared))
        # Packs of seeds (one process each: their shared part paid once), then the schedule.
        groups = group_packs([r.spec.seedless() for r in result.runs], max(1, pack_seeds))
        timed: list[tuple[str, Sequence[str], Mapping[Profile, float]]] = []
        for group in groups:
            members = [result.runs[i] for i in group]
            hashes = {r.spec.hash() for r in members}
            deps = [d for r in members for d in plan.dependencies(r.spec) if d not in hashes]
            cost = {p: _pack_seconds(members, p) for p in self.profiles}
            timed.append((members[0].spec.hash(), deps, cost))
        result.plan = schedule(timed, profiles)
        for group in groups:
            members = [result.runs[i] for i in group]
            profile = result.plan.where[members[0].spec.hash()]
            shared = max(r.shared[profile] for r in members)
            for r in members:
                result.placed[r.spec.hash()] = r.seconds[profile] - r.shared[profile] + shared / len(members)
        result.calibration, result.stale = self.calibration_lines(), sorted(self.stale)
        return result


class NotCached(Exception):
    """A measurement that :func:`estimate_from_cache` does not make."""


def _not_cached(*_args: Any) -> Any:
    raise NotCached


def estimate_from_cache(
    plan: Any,
    slots: Sequence[Slot],
    ws: Workspace,
    records: Iterable[Mapping[str, Any]],
    pack_seeds: int = 1,
    elapsed: Mapping[str, float] | None = None,
) -> GridEstimate | None:
    """The estimate of ``plan`` from history and cached calibrations only, measuring nothing (the terminal app's
    form asks on every edit, a running grid after each run); None when a run left to do would need a measurement
    (``gaptui run --dry-run`` makes them) or none has an estimate. Runs without one (a real dataset not built yet,
    a cell of a family estimated from its history never run here) are in its ``missing``."""
    from engine.errors import GaptuiError

    cache = CalibrationCache(calibration_path(ws), lambda _line: None)
    estimator = Estimator(cache, records, measure=_not_cached, overhead=_not_cached)
    estimator.measures = False  # the cost models give up at the first key not cached
    try:
        result = estimator.estimate(plan, slots, ws, pack_seeds, elapsed)
    except (NotCached, GaptuiError):
        return None
    return None if result.unavailable or not result.runs else result


#: A run or grid estimated to take longer than this (seconds) is refused unless the user insists (``--force``).
DURATION_LIMIT = 30 * 86400.0
#: Seconds one optimiser step takes at the least, on any machine (a graph network's forward, backward and update
#: in eager PyTorch): the floor of a run's duration that needs no measurement (:meth:`engine.cost.CostModel.steps`).
STEP_FLOOR = 1e-3


def duration_floor(specs: Iterable[Any], slots: int, times: int = 1) -> tuple[float, int]:
    """The least wall seconds ``specs``, run ``times`` times, can take on ``slots`` slots in parallel, and the
    optimiser steps behind it."""
    steps = 0
    for spec in specs:
        steps += family(spec.task).costs.steps(spec) or 0
    steps *= times
    return steps * STEP_FLOOR / max(1, slots), steps


def check_duration(
    specs: Sequence[Any],
    slots: int,
    what: str,
    force: bool = False,
    estimate: GridEstimate | None = None,
    limit: float = DURATION_LIMIT,
    times: int = 1,
) -> tuple[bool, list[str]]:
    """Whether ``specs`` (each ``times`` times) take longer than ``limit`` on ``slots`` slots in parallel, and the
    lines to print before they start: the ``estimate`` when there is one (history, cached calibration), else the
    floor of their optimiser steps (:func:`duration_floor`, said when it is over a day). Over the limit and without
    ``force``: one GaptuiError line with the estimate, the limit and ``--force``."""
    from engine.errors import GaptuiError

    floor, steps = duration_floor(specs, slots, times)
    floor_said = f"{steps:,} optimiser steps, at least {format_duration(floor)} at {STEP_FLOOR * 1000:g} ms a step"
    floor_said += f" on {slots} slots" if slots > 1 else ""
    if estimate is not None and estimate.runs and not estimate.missing:
        wall, said = estimate.plan.wall, f"estimated at about {format_duration(estimate.plan.wall)}"
    elif estimate is not None and estimate.runs and estimate.plan.wall > floor:
        # some runs not estimated yet (a real dataset not built): the others already take this long
        wall = estimate.plan.wall
        said = f"estimated at about {format_duration(wall)} without {len(estimate.missing)} run(s) not estimated"
    else:
        wall, said = floor, floor_said
    if wall > limit:
        line = f"{what}: {said}, over the limit of {format_duration(limit)}"
        if not force:
            raise GaptuiError(f"{line}; lower its epochs or steps, or pass --force to start it anyway")
        return True, [f"{line}; starting it as --force asks"]
    if estimate is not None and estimate.runs:
        return False, estimate.lines()[:1]
    return False, [f"{what}: {said}"] if wall > 86400 else []


def _pack_seconds(members: Sequence[RunEstimate], profile: Profile) -> float:
    """Seconds of one worker process training ``members`` in turn: their own parts, and the shared part once."""
    return sum(r.seconds[profile] - r.shared[profile] for r in members) + max(r.shared[profile] for r in members)


def _history_cells(records: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str, str], CellHistory]:
    """Finished runs of this host, by (task, cell, device name): medians of their measured seconds per unit of work
    (the family's :meth:`~engine.cost.CostModel.units`), per evaluation and of the rest of their duration; a
    family without units gives whole durations."""
    import platform

    from engine.errors import GaptuiError
    from engine.events import read_events
    from engine.tasks import load_spec

    host = platform.node()
    samples: dict[tuple[str, str, str], list[tuple[float, float, float]]] = {}
    for record in records:
        repro = record.get("repro") or {}
        if record.get("status") != "done" or repro.get("host") != host or not record.get("duration"):
            continue
        if not repro.get("device_name"):
            continue
        try:
            spec = load_spec(record["spec"])
            fam = family(spec.task)
        except (GaptuiError, KeyError, TypeError):
            continue
        units = fam.costs.units(spec)
        duration = float(record["duration"])
        if units is None:
            sample = (0.0, 0.0, duration)
        else:
            events, _ = read_events(Path(record["run_dir"]) / "events.jsonl")
            epochs = [float(e["seconds"]) for e in events if e.get("event") == "epoch" and "seconds" in e]
            evals = [float(e["seconds"]) for e in events if e.get("event") == "eval" and "seconds" in e]
            if units and not _whole(events, epochs):
                continue  # resumed or partial events: the sum below would not be the run's
            rest = max(0.0, duration - sum(epochs) - sum(evals))
            # one epoch event per unit: their median; fewer events than units (an epoch over many graphs): per unit
            per_unit = 0.0 if not units else statistics.median(epochs) if len(epochs) >= units else sum(epochs) / units
            sample = (per_unit, statistics.median(evals) if evals else 0.0, rest)
        samples.setdefault((fam.name, fam.costs.cell(spec), repro["device_name"]), []).append(sample)
    out = {}
    for key, values in samples.items():
        # A run of a pack records its own epochs and evaluations as its duration: no rest to learn from it.
        rests = [s[2] for s in values if s[2] > PACKED_REST]
        out[key] = CellHistory(
            epoch_s=statistics.median(s[0] for s in values),
            eval_s=statistics.median(s[1] for s in values),
            overhead_s=statistics.median(rests) if rests else None,
            runs=len(values),
        )
    return out


def _whole(events: list[dict[str, Any]], epochs: list[float]) -> bool:
    """Whether a run's events time every epoch it trained: some, not resumed, none missing."""
    if not epochs or any(e.get("event") == "start" and e.get("resumed_from") for e in events):
        return False
    last = max((int(e.get("epoch") or 0) for e in events if e.get("event") == "epoch"), default=0)
    return len(epochs) >= last
