"""Launching a grid: the one path from a preset to queued runs, shared by ``gaptui run`` and the terminal app.

1. :func:`plan` expands a preset through its task family, orders the runs so that every run comes after the runs
   it depends on, checks them once per family (:func:`check`: files, import paths; one error before any record
   is written) and splits them by what the history already holds (done, failed before, to run). A run recorded
   ``done`` whose folder lost what it must hold (:func:`engine.tasks.artefact_problem`: ``result.json``, or a file
   that a run of the grid still to run reads from it, such as the checkpoint a GAPE run embeds with) is to run
   again (:attr:`Plan.redo`, said by :meth:`Plan.redo_lines`); its dependants wait for it again.
2. :func:`prepare` builds the inputs the runs need (datasets, caches), each distinct input once, independent
   ones in parallel threads. It blocks: the terminal app calls it from its manager thread, never the UI thread.
3. :func:`launch` prepares and enqueues a plan on a :class:`~gaptui.scheduler.Scheduler`; a run whose input could
   not be built is recorded ``failed`` through :meth:`Scheduler.fail` with the reason (its dependants are then
   ``blocked`` by the scheduler). :func:`retry` does the same for records chosen in the app.

Slots come from :func:`slots_for` (``--gpus``/``--jobs-per-gpu``/``--cpu-jobs``, validated).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import GaptuiError
from engine.tasks import PresetBase, TaskFamily, TaskSpec, artefact_problem, family, load_spec
from gaptui.history import now
from gaptui.runner import run_id
from gaptui.scheduler import Scheduler, Slot, detect_gpus, make_slots
from gaptui.workspace import Workspace

#: ``progress(done, total, label)``: called after each input is prepared (from a worker thread).
Progress = Callable[[int, int, str], None]


def parse_gpus(text: str | None) -> list[str] | None:
    """``--gpus``: ``None``/``auto`` = every visible GPU, ``none``/empty = CPU only, else ``0,1``."""
    if text is None or text == "auto":
        return None
    if text in ("", "none"):
        return []
    gpus = [g.strip() for g in text.split(",") if g.strip()]
    for g in gpus:
        if not g.isdigit():
            raise GaptuiError(f"--gpus '{text}': expected a comma-separated list of GPU indices like 0,1 (or none)")
    return gpus


def slots_for(gpus: list[str] | None, jobs_per_gpu: int = 1, cpu_jobs: int | None = None) -> list[Slot]:
    """The scheduler slots for these settings (may run ``nvidia-smi``); GaptuiError when there are none."""
    if jobs_per_gpu < 1 or (cpu_jobs is not None and cpu_jobs < 0):
        raise GaptuiError("--jobs-per-gpu must be >= 1 and --cpu-jobs >= 0")
    if gpus:
        visible = detect_gpus()
        missing = [g for g in gpus if g not in visible]
        if missing:
            have = f"GPUs {', '.join(visible)}" if visible else "no GPU"
            raise GaptuiError(
                f"--gpus {','.join(gpus)}: GPU {', '.join(missing)} is not on this machine (it has {have}); "
                "--gpus none runs on the CPU"
            )
    slots = make_slots(gpus, jobs_per_gpu, cpu_jobs)
    if not slots:
        raise GaptuiError("no slot to run on: --gpus none needs --cpu-jobs >= 1")
    return slots


def order_specs(specs: Iterable[TaskSpec]) -> list[TaskSpec]:
    """``specs`` with every run after the runs of the list it depends on (stable otherwise)."""
    specs = list(specs)
    by_hash = {s.hash(): s for s in specs}
    placed: set[str] = set()
    out: list[TaskSpec] = []

    def place(spec: TaskSpec, trail: tuple[str, ...]) -> None:
        h = spec.hash()
        if h in placed:
            return
        if h in trail:
            raise GaptuiError(f"run {h[:12]} depends on itself through {', '.join(t[:12] for t in trail)}")
        for dep in family(spec.task).dependencies(spec):
            if dep in by_hash:
                place(by_hash[dep], (*trail, h))
        placed.add(h)
        out.append(spec)

    for spec in specs:
        place(spec, ())
    return out


@dataclass
class Plan:
    """A preset's runs, dependencies first, split by what the history holds."""

    preset: PresetBase
    specs: list[TaskSpec]
    done: list[TaskSpec] = field(default_factory=list)
    failed: list[TaskSpec] = field(default_factory=list)
    to_run: list[TaskSpec] = field(default_factory=list)
    #: Runs recorded done that are to run again (also in ``to_run``): run hash -> why (``its result.json is missing``).
    redo: dict[str, str] = field(default_factory=dict)
    #: What the plan's checks found suspect but runnable, one line each (shown as ``warning:``).
    warnings: list[str] = field(default_factory=list)

    @property
    def family(self) -> TaskFamily:
        return family(self.preset.task)

    def dependencies(self, spec: TaskSpec) -> tuple[str, ...]:
        return tuple(family(spec.task).dependencies(spec))

    def describe(self, spec: TaskSpec) -> str:
        return family(spec.task).describe(spec)

    def order_lines(self, limit: int | None = None) -> list[str]:
        """``1. <id> <what> (after <id>, ...)`` for the runs to start, in start order."""
        lines = []
        for i, spec in enumerate(self.to_run[:limit] if limit else self.to_run, 1):
            deps = self.dependencies(spec)
            after = f"  (after {', '.join(d[:12] for d in deps)})" if deps else ""
            lines.append(f"{i:>4}. {spec.hash()[:12]}  {self.describe(spec)}{after}")
        return lines

    def redo_lines(self) -> list[str]:
        """What :attr:`redo` runs again and why (:func:`redo_lines`)."""
        return redo_lines(self.redo)


def check(specs: Iterable[TaskSpec]) -> list[str]:
    """Each family's :meth:`~engine.tasks.TaskFamily.check` on its runs among ``specs``, once: GaptuiError for
    input every run would fail on, before any record is written; returns the warning lines."""
    by_task: dict[str, list[TaskSpec]] = {}
    for spec in specs:
        by_task.setdefault(spec.task, []).append(spec)
    return [line for task, runs in by_task.items() for line in family(task).check(runs)]


def redo_lines(redo: dict[str, str], limit: int = 3) -> list[str]:
    """``note:`` lines for runs recorded done that run again (run hash -> why): one per run up to ``limit`` runs,
    else one summary line."""
    if len(redo) <= limit:
        return [f"note: run {h[:12]} is recorded done but {why}: running it again" for h, why in redo.items()]
    shown = ", ".join(f"{h[:12]} ({why})" for h, why in list(redo.items())[:limit])
    more = len(redo) - limit
    return [f"note: {len(redo)} runs recorded done lack what they must hold and run again: {shown} and {more} more"]


def plan(
    preset: PresetBase,
    ws: Workspace,
    known: dict[str, str],
    retry_failed: bool = False,
    run_dirs: dict[str, str] | None = None,
) -> Plan:
    """Expand ``preset`` and split its runs by ``known`` (run hash -> status in the history); ``run_dirs`` (run hash
    -> folder, from the records) says where done runs lie (default ``<workspace>/runs/<run id>``).

    Checks the runs not settled as done (:func:`check`: GaptuiError before any record is written) and reads run
    folders only (no side effect): a done run whose artefacts are gone goes to ``to_run`` and :attr:`Plan.redo`.
    """
    from gaptui.presets import grid

    result = Plan(preset, order_specs(grid(preset, ws)))
    by_hash = {s.hash(): s for s in result.specs}
    folders = run_dirs or {}

    def folder(spec: TaskSpec) -> Path:
        return Path(folders.get(spec.hash()) or ws.runs / run_id(spec))

    def settled(h: str) -> bool:  # done and staying done
        return known.get(h) == "done" and h not in result.redo

    for h, spec in by_hash.items():
        if known.get(h) == "done" and (why := artefact_problem(spec, folder(spec))):
            result.redo[h] = why
    waiting = [s for h, s in by_hash.items() if not settled(h) and not (known.get(h) == "failed" and not retry_failed)]
    done = {h: (s, folder(s)) for h, s in by_hash.items() if settled(h)}
    result.redo.update(stale_dependencies(waiting, done.get))
    result.warnings = check(s for h, s in by_hash.items() if not settled(h))
    for h, spec in by_hash.items():
        status = known.get(h)
        if settled(h):
            result.done.append(spec)
        elif status == "failed" and not retry_failed:
            result.failed.append(spec)
        else:
            result.to_run.append(spec)
    return result


def stale_dependencies(
    waiting: Iterable[TaskSpec], done: Callable[[str], tuple[TaskSpec, Path] | None]
) -> dict[str, str]:
    """Done runs that runs of ``waiting`` depend on (directly, or through another such run) whose folders lack what
    their dependants read: run hash -> why. ``done(run hash)`` gives a done run's spec and folder, else None."""
    redo: dict[str, str] = {}
    checked: set[str] = set()
    pending = list(waiting)
    while pending:
        spec = pending.pop()
        for dep in family(spec.task).dependencies(spec):
            found = None if dep in checked else done(dep)
            checked.add(dep)
            if found is not None and (why := artefact_problem(found[0], found[1], dependants=True)):
                redo[dep] = why
                pending.append(found[0])
    return redo


def prepare(specs: Iterable[TaskSpec], progress: Progress | None = None, workers: int | None = None) -> dict[str, str]:
    """Build every input the runs need, once per distinct input; returns ``{run hash: error}`` for failed ones."""
    needed: dict[str, tuple[Any, list[str]]] = {}
    for spec in specs:
        for item in family(spec.task).inputs(spec):
            needed.setdefault(item.key, (item, []))[1].append(spec.hash())
    if not needed:
        return {}
    errors: dict[str, str] = {}
    total = len(needed)
    workers = workers or max(1, min(total, len(os.sched_getaffinity(0))))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="gaptui-prepare") as pool:
        futures = {pool.submit(item.build): (item, runs) for item, runs in needed.values()}
        for done, future in enumerate(as_completed(futures), 1):
            item, runs = futures[future]
            try:
                future.result()
            except GaptuiError as exc:
                for h in runs:
                    errors.setdefault(h, f"{item.label}: {exc}")
            if progress is not None:
                progress(done, total, item.label)
    return errors


@dataclass
class Launched:
    """What :func:`launch` did: runs queued, runs failed at preparation (hash -> error), runs already in flight."""

    queued: list[TaskSpec]
    failed: dict[str, str]
    in_flight: int
    #: Done runs queued again because what their dependants read is gone (run hash -> why).
    redo: dict[str, str] = field(default_factory=dict)


def _enqueue_prepared(
    scheduler: Scheduler,
    specs: list[TaskSpec],
    progress: Progress | None,
    preset: str | None = None,
    planned_seeds: int | None = None,
) -> tuple[list[TaskSpec], dict[str, str]]:
    errors = prepare(specs, progress)
    bad = [s for s in specs if s.hash() in errors]
    for spec in bad:
        scheduler.fail([spec], errors[spec.hash()], preset, planned_seeds)
    good = [s for s in specs if s.hash() not in errors]
    scheduler.enqueue(good, preset=preset, planned_seeds=planned_seeds)
    return good, errors


def launch(
    scheduler: Scheduler, grid_plan: Plan, progress: Progress | None = None, leave: Iterable[str] = ()
) -> Launched:
    """Prepare the inputs of the plan's runs and queue them. Runs already queued or running here, and the run hashes
    in ``leave`` (in flight on another backend), are left alone and counted as in flight."""
    busy = set(scheduler.running) | {s.hash() for s in scheduler.queue} | set(leave)
    todo = [s for s in grid_plan.to_run if s.hash() not in busy]
    keep_earlier(scheduler.history, {h: why for h, why in grid_plan.redo.items() if h not in busy})
    preset = grid_plan.preset
    queued, errors = _enqueue_prepared(scheduler, todo, progress, preset.name, len(preset.seeds))
    return Launched(queued, errors, len(grid_plan.to_run) - len(todo))


#: What a record said about a finished attempt, kept in its ``earlier`` list when the run is done again.
ATTEMPT_FIELDS = ("status", "started", "finished", "duration", "exit_code", "attempts", "slot", "metrics", "params")
ATTEMPT_FIELDS += ("repro", "log_tail")


def keep_earlier(history: Any, redo: dict[str, str]) -> None:
    """Before runs recorded done are queued again (``redo``: run hash -> why), keep what their records said in
    ``earlier`` (a list, oldest first, with ``redone`` time and ``why``) and clear their metrics: the record stays
    the run's one record, its id unchanged."""
    by_hash = history.by_hash()
    updates = {}
    for h, why in redo.items():
        record = by_hash.get(h)
        if record is None or record.get("status") != "done":
            continue
        attempt = {k: record.get(k) for k in ATTEMPT_FIELDS} | {"redone": now(), "why": why}
        updates[h] = {"earlier": [*(record.get("earlier") or []), attempt], "metrics": {}, "params": None}
    history.update_many(updates)


def retry(scheduler: Scheduler, records: Iterable[dict[str, Any]], progress: Progress | None = None) -> Launched:
    """Queue the runs of ``records`` again (their inputs prepared first), with any done run they depend on whose
    folder lost what they read (:func:`stale_dependencies`; listed in :attr:`Launched.redo`)."""
    specs = [load_spec(r["spec"]) for r in records]
    by_hash = scheduler.history.by_hash()

    def done(run_hash: str) -> tuple[TaskSpec, Path] | None:
        record = by_hash.get(run_hash)
        if record is None or record.get("status") != "done":
            return None
        return load_spec(record["spec"]), Path(record["run_dir"])

    redo = stale_dependencies(specs, done)
    specs = order_specs([*(load_spec(by_hash[h]["spec"]) for h in redo), *specs])
    check(specs)  # before the history is touched
    keep_earlier(scheduler.history, redo)
    queued, errors = _enqueue_prepared(scheduler, specs, progress)
    return Launched(queued, errors, 0, redo)
