"""Launching a grid: the one path from a preset to queued runs, shared by ``gaptui run`` and the terminal app.

1. :func:`plan` expands a preset through its task family, orders the runs so that every run comes after the runs
   it depends on, checks them once per family (:func:`check`: files, import paths; one error before any record
   is written) and splits them by what the history already holds (done, failed before, to run).
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
from typing import Any

from engine.errors import GaptuiError
from engine.tasks import PresetBase, TaskFamily, TaskSpec, family, load_spec
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


def check(specs: Iterable[TaskSpec]) -> list[str]:
    """Each family's :meth:`~engine.tasks.TaskFamily.check` on its runs among ``specs``, once: GaptuiError for
    input every run would fail on, before any record is written; returns the warning lines."""
    by_task: dict[str, list[TaskSpec]] = {}
    for spec in specs:
        by_task.setdefault(spec.task, []).append(spec)
    return [line for task, runs in by_task.items() for line in family(task).check(runs)]


def plan(preset: PresetBase, ws: Workspace, known: dict[str, str], retry_failed: bool = False) -> Plan:
    """Expand ``preset``, check its runs (:func:`check`) and split them by ``known`` (run hash -> status)."""
    from gaptui.presets import grid

    specs = order_specs(grid(preset, ws))
    result = Plan(preset, specs, warnings=check(s for s in specs if known.get(s.hash()) != "done"))
    for spec in result.specs:
        status = known.get(spec.hash())
        if status == "done":
            result.done.append(spec)
        elif status == "failed" and not retry_failed:
            result.failed.append(spec)
        else:
            result.to_run.append(spec)
    return result


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
    preset = grid_plan.preset
    queued, errors = _enqueue_prepared(scheduler, todo, progress, preset.name, len(preset.seeds))
    return Launched(queued, errors, len(grid_plan.to_run) - len(todo))


def retry(scheduler: Scheduler, records: Iterable[dict[str, Any]], progress: Progress | None = None) -> Launched:
    """Queue the runs of ``records`` again (their inputs prepared first)."""
    specs = order_specs(load_spec(r["spec"]) for r in records)
    check(specs)
    queued, errors = _enqueue_prepared(scheduler, specs, progress)
    return Launched(queued, errors, 0)
