"""Launching a grid: the one path from a preset to queued runs, shared by ``gaptui run`` and the terminal app.

1. :func:`plan` expands a preset through its task family, orders the runs so that every run comes after the runs
   it depends on, checks them once per family (:func:`check`: files, import paths; one error before any record
   is written) and splits them by what the history already holds (done, failed before, to run). A run recorded
   ``done`` whose folder lost what it must hold (:func:`engine.tasks.artefact_problem`: ``result.json``, or a file
   that a run of the grid still to run reads from it, such as the checkpoint a GAPE run embeds with) is to run
   again (:attr:`Plan.redo`, said by :meth:`Plan.redo_lines`); its dependants wait for it again.
2. :func:`gaptui.runner.prepare` builds the inputs the runs need (datasets, caches), each distinct input once,
   independent ones in parallel threads. It blocks: the terminal app calls it from its manager thread, never the UI
   thread.
3. :func:`launch` prepares and enqueues a plan on a :class:`~gaptui.scheduler.Scheduler`; a run whose input could
   not be built is recorded ``failed`` through :meth:`Scheduler.fail` with the reason (its dependants are then
   ``blocked`` by the scheduler). :func:`retry` does the same for records chosen in the app.

Slots come from :func:`gaptui.slots.slots_for` (``--gpus``/``--jobs-per-gpu``/``--cpu-jobs``, validated).

**The launch service** (end of this module) is what ``gaptui run``, the terminal app's launch and ``gaptui train``
call, so that they cannot drift: :func:`launch_settings` checks the options (:class:`LaunchOptions`: slots, backend,
timeout, retries, packed seeds, Slurm settings) against the preset; :func:`plan_launch` plans, runs the family
checks and refuses a run that cannot fit in memory (every family's :meth:`~engine.cost.CostModel.memory`) before
any work, returning a :class:`LaunchPlan` whose :meth:`~LaunchPlan.summary` is the dry run's; :func:`make_backend`
gives the local scheduler or the Slurm backend with the run policy; :func:`start` prepares the inputs, checks the
memory again of runs whose size was unknown until their input was built (real and user datasets), and queues.
``gaptui train`` checks and prepares its one run with :func:`check_specs` and :func:`prepare_checked`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import GaptuiError
from engine.tasks import PresetBase, TaskFamily, TaskSpec, artefact_problem, family, load_spec
from gaptui.backends import BACKENDS
from gaptui.history.store import now
from gaptui.processes import in_foreground
from gaptui.run_records import PlannedSeeds, planned_seeds_by_run
from gaptui.runner import Progress, prepare, run_id
from gaptui.scheduler import Scheduler, Slot
from gaptui.slots import slots_for
from gaptui.workspace import Workspace


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


@dataclass
class Launched:
    """What :func:`launch` did: runs queued, runs failed at preparation (hash -> error), runs already in flight."""

    queued: list[TaskSpec]
    failed: dict[str, str]
    in_flight: int
    #: Done runs queued again because what their dependants read is gone (run hash -> why).
    redo: dict[str, str] = field(default_factory=dict)
    #: Records of the grid's runs a foreground ``gaptui train`` trains (counted in ``in_flight``): waited for.
    foreground: list[dict[str, Any]] = field(default_factory=list)


def _enqueue_prepared(
    scheduler: Scheduler,
    specs: list[TaskSpec],
    progress: Progress | None,
    preset: str | None = None,
    planned_seeds: PlannedSeeds = None,
) -> tuple[list[TaskSpec], dict[str, str]]:
    from engine.memory import check_memory

    errors = prepare(specs, progress)
    good = [s for s in specs if s.hash() not in errors]
    check_memory(good)  # sizes known only once their inputs are built (real and user datasets): before any run
    bad = [s for s in specs if s.hash() in errors]
    for spec in bad:
        scheduler.fail([spec], errors[spec.hash()], preset, planned_seeds)
    scheduler.enqueue(good, preset=preset, planned_seeds=planned_seeds)
    return good, errors


def enqueue_prepared(
    scheduler: Scheduler, specs: list[TaskSpec], preset: str | None = None, planned_seeds: PlannedSeeds = None
) -> dict[str, str]:
    """Build the inputs of ``specs`` and queue them (runs given one by one, such as ``gaptui tune``'s trials); a
    run whose input could not be built is recorded ``failed`` with the reason. Returns those reasons by hash."""
    return _enqueue_prepared(scheduler, specs, None, preset, planned_seeds)[1]


def launch(
    scheduler: Scheduler, grid_plan: Plan, progress: Progress | None = None, leave: Iterable[str] = ()
) -> Launched:
    """Prepare the inputs of the plan's runs and queue them. Runs already queued or running here, the run hashes
    in ``leave`` (in flight on another backend) and runs a foreground ``gaptui train`` trains (the scheduler waits
    for them: :meth:`Scheduler.watch`) are left alone and counted as in flight."""
    statuses = scheduler.history.statuses()
    records = (scheduler.history.find(s.hash()) for s in grid_plan.to_run if statuses.get(s.hash()) == "running")
    foreground = [r for r in records if r is not None and in_foreground(r)]
    scheduler.watch(foreground)
    busy = set(scheduler.running) | {s.hash() for s in scheduler.queue} | set(leave) | set(scheduler.watched)
    todo = [s for s in grid_plan.to_run if s.hash() not in busy]
    keep_earlier(scheduler.history, {h: why for h, why in grid_plan.redo.items() if h not in busy})
    preset = grid_plan.preset
    planned = planned_seeds_by_run(grid_plan.specs)  # per table cell, as the grid plans it (a pretraining run: 1)
    # runs not queued now (done, in flight): the runs queued keep their records as they were until they start, so a
    # submission that fails puts everything back as it found it
    going = {s.hash() for s in todo}
    refresh_planned(scheduler.history, {h: n for h, n in planned.items() if h not in going})
    queued, errors = _enqueue_prepared(scheduler, todo, progress, preset.name, planned)
    return Launched(queued, errors, len(grid_plan.to_run) - len(todo), foreground=foreground)


#: What a record said about a finished attempt, kept in its ``earlier`` list when the run is done again.
ATTEMPT_FIELDS = ("status", "started", "finished", "duration", "exit_code", "attempts", "slot", "metrics", "params")
ATTEMPT_FIELDS += ("repro", "log_tail")


def refresh_planned(history: Any, planned: dict[str, int]) -> None:
    """Records of the grid's runs already in the history take the seeds the grid plans for their cells (records
    written before a pretraining run planned one, or by a single ``gaptui train``)."""
    updates = {
        h: {"planned_seeds": planned[h]}
        for h, record in history.by_hash().items()
        if h in planned and record.get("planned_seeds") != planned[h]
    }
    if updates:
        history.update_many(updates)


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


# ------------------------------------------------------------------------------------------------ the launch service
#
# ``gaptui run``, the terminal app's launch and ``gaptui train`` all go through these steps, so they plan the same
# runs and refuse the same things in the same words:
#
#     settings = launch_settings(preset, LaunchOptions(...))    # options checked, slots and backend chosen
#     launch_plan = plan_launch(preset, ws, records, settings)  # plan + checks (family, dependencies, memory)
#     launch_plan.summary(list_all)                             # what a dry run prints
#     backend = make_backend(settings, ws, history, ...)        # a local Scheduler or the Slurm backend
#     start(launch_plan, backend, progress, leave)              # inputs prepared, memory checked again, queued

#: Values of one axis shown in the dry run's summary before ``+N more``.
SUMMARY_VALUES = 8


@dataclass(frozen=True)
class LaunchOptions:
    """How to run a grid, as ``gaptui run``'s options or the app's launch bar say it; ``None`` means the preset's
    own setting (``timeout``, ``retries``, ``pack_seeds``, ``[slurm]``)."""

    gpus: list[str] | None = None
    jobs_per_gpu: int = 1
    cpu_jobs: int | None = None
    backend: str = "local"
    timeout: float | None = None
    retries: int | None = None
    pack_seeds: int | None = None
    retry_failed: bool = False
    #: Slurm settings (the preset's merged with command-line flags); None: the preset's ``[slurm]`` table.
    slurm: Any = None
    #: Accept a workspace that the compute nodes may not see (``--force``).
    force: bool = False
    #: Stop queuing once this many runs failed with the same error (``--fail-fast``; None: never).
    fail_fast: int | None = None


@dataclass(frozen=True)
class LaunchSettings:
    """Checked options: the slots (local), the backend and the run policy (timeout, retries, packed seeds)."""

    options: LaunchOptions
    slots: list[Slot]
    timeout: float | None
    retries: int
    pack_seeds: int
    slurm: Any = None

    @property
    def backend(self) -> str:
        return self.options.backend


def launch_settings(preset: PresetBase, options: LaunchOptions, ws: Workspace) -> LaunchSettings:
    """Check ``options`` against ``preset`` (one GaptuiError naming the option and what it expects) and resolve
    them: slots (may run ``nvidia-smi``), the run policy, the Slurm settings."""
    from engine.tasks import check_run_options

    if options.backend not in BACKENDS:
        raise GaptuiError(f"--backend '{options.backend}': expected {' or '.join(BACKENDS)}")
    check_run_options(options.timeout, None, "--timeout")
    check_run_options(None, options.retries, "--retries")
    check_run_options(None, None, "--pack-seeds", options.pack_seeds)
    if options.fail_fast is not None and options.fail_fast < 1:
        raise GaptuiError(f"--fail-fast {options.fail_fast}: expected a number of failed runs >= 1")
    slurm = None
    if options.backend == "slurm":
        from gaptui.backends.slurm import check_shared_workspace
        from gaptui.presets import slurm_options

        check_shared_workspace(ws, options.force)
        slurm = (options.slurm or slurm_options(preset)).check("gaptui run")
        if options.pack_seeds is not None and options.pack_seeds > 1:
            raise GaptuiError("--pack-seeds applies to the local backend; on Slurm each run is its own array task")
    slots = slots_for(options.gpus, options.jobs_per_gpu, options.cpu_jobs)
    return LaunchSettings(
        options,
        slots,
        timeout=options.timeout or preset.timeout,
        retries=preset.retries if options.retries is None else options.retries,
        pack_seeds=options.pack_seeds or preset.pack_seeds,
        slurm=slurm,
    )


@dataclass
class LaunchPlan:
    """A grid ready to start: its :class:`Plan`, its checked settings and the memory each kind of run needs."""

    plan: Plan
    settings: LaunchSettings
    #: The distinct memory needs of the runs to start (:func:`engine.memory.memory_needs`), all within this machine.
    memory: list[Any] = field(default_factory=list)

    @property
    def preset(self) -> PresetBase:
        return self.plan.preset

    def duration_lines(
        self, ws: Workspace, records: Iterable[dict[str, Any]], force: bool = False, estimate: Any = None
    ) -> tuple[bool, list[str]]:
        """Refuse (GaptuiError) the runs left to do when their wall time on the slots is over
        :data:`gaptui.estimate.DURATION_LIMIT` unless ``force``: ``estimate`` (the dry run's, just measured) or the
        estimate from history and cached calibrations when there is one, else the floor of their optimiser steps;
        returns whether they are over it and the line to print first (:func:`gaptui.estimate.check_duration`)."""
        from gaptui.estimate import check_duration, estimate_from_cache

        p, slots = self.plan, self.settings.slots
        local = self.settings.backend == "local"
        if estimate is None and local:
            estimate = estimate_from_cache(p, slots, ws, records, self.settings.pack_seeds)
        width = len(slots) if local else max(1, len(p.to_run))  # Slurm: as many at once as it grants
        return check_duration(p.to_run, width, f"preset {self.preset.name}", force, estimate)

    def head(self) -> str:
        """``preset NAME (task T): N runs; done a, failed b, to run c; slots: ...``"""
        p = self.plan
        counts = {"done": p.done, "failed": p.failed, "to run": p.to_run}
        where = ", ".join(s.name for s in self.settings.slots) if self.settings.backend == "local" else "Slurm"
        return (
            f"preset {self.preset.name} (task {self.preset.task}): {len(p.specs)} runs; "
            + ", ".join(f"{k} {len(v)}" for k, v in counts.items())
            + f"; slots: {where}"
        )

    def summary(self, list_all: bool = False) -> list[str]:
        """What a dry run says before its estimate: runs to start per family and per value of the family's table
        axes (dataset, model...), dependency chains and the memory peak per kind of dataset; with ``list_all``, the
        start order of every run and the memory line of every distinct dataset too."""
        from engine.memory import peaks_by_kind

        lines = [self.head()]
        by_task: dict[str, list[TaskSpec]] = {}
        for spec in self.plan.to_run:
            by_task.setdefault(spec.task, []).append(spec)
        for task, specs in by_task.items():
            fam = family(task)
            parts = []
            keys = [k for k in (fam.table.group, fam.table.rows, fam.table.columns) if k is not None]
            axes = _cell_axes(fam, specs)
            for key in dict.fromkeys(keys):
                axis = fam.axis(key)
                counts: dict[str, int] = {}
                for values in axes:
                    value = axis.format(values.get(key))
                    counts[value] = counts.get(value, 0) + 1
                shown = [f"{v} {n}" for v, n in list(counts.items())[:SUMMARY_VALUES]]
                more = len(counts) - SUMMARY_VALUES
                parts.append(f"{axis.name}: {', '.join(shown)}" + (f" +{more} more" if more > 0 else ""))
            lines.append(f"  {task}: {len(specs)} run(s) to start; " + "; ".join(parts))
        lines += self.dependency_lines()
        for kind, need in peaks_by_kind(self.memory).items():
            lines.append(f"memory peak of {kind}: {need.line().removeprefix('memory: ')}")
        if list_all:
            if self.plan.to_run:
                lines.append("start order (a run starts only after the runs it names are done):")
                lines += self.plan.order_lines()
            lines += [need.line() for need in self.memory]
        elif self.plan.to_run:
            lines.append("  (--list: the start order of every run and the memory of every dataset)")
        return lines

    def dependency_lines(self) -> list[str]:
        """How many runs wait for others, and the longest chain of runs each waiting for the one before."""
        to_run = {s.hash(): s for s in self.plan.to_run}
        waiting = [s for s in to_run.values() if self.plan.dependencies(s)]
        if not waiting:
            return []
        depth: dict[str, int] = {}
        for h, spec in to_run.items():  # start order: every run after the runs it depends on
            depth[h] = 1 + max((depth.get(d, 0) for d in self.plan.dependencies(spec)), default=0)
        upstream = {d for s in waiting for d in self.plan.dependencies(s)}
        return [
            f"dependencies: {len(waiting)} run(s) wait for {len(upstream)} other run(s); "
            f"longest chain {max(depth.values())} runs"
        ]


def _cell_axes(fam: Any, specs: list[TaskSpec]) -> list[dict[str, Any]]:
    """Each spec's table axes (:meth:`TaskFamily.record_axes`), worked out once per cell: a seed is no axis."""
    by_cell: dict[str, dict[str, Any]] = {}
    out = []
    for spec in specs:
        cell = spec.seedless()
        axes = by_cell.get(cell)
        if axes is None:
            axes = by_cell[cell] = fam.record_axes(spec)
        out.append(axes)
    return out


def plan_launch(
    preset: PresetBase, ws: Workspace, records: Iterable[dict[str, Any]], settings: LaunchSettings
) -> LaunchPlan:
    """Plan ``preset`` against the history ``records`` (:func:`plan`: family checks, dependencies, what to redo)
    and refuse, before any work, a run this machine cannot hold (:func:`engine.memory.check_memory`: one line
    naming the run or dataset, the estimate and the limit)."""
    from engine.memory import check_memory

    records = list(records)
    known = {r["hash"]: r["status"] for r in records}
    run_dirs = {r["hash"]: r["run_dir"] for r in records}
    grid_plan = plan(preset, ws, known, settings.options.retry_failed, run_dirs)
    needs = check_memory(grid_plan.specs)
    return LaunchPlan(grid_plan, settings, needs)


def make_backend(
    settings: LaunchSettings,
    ws: Workspace,
    history: Any,
    local: Scheduler | None = None,
    slurm: Any = None,
    listener: Any = None,
) -> Scheduler:
    """The backend ``settings`` choose, with their run policy: ``local`` (or a new local Scheduler on the
    settings' slots) or ``slurm`` (or a new Slurm backend; the workspace must be shared with the compute nodes
    and ``sbatch`` on PATH)."""
    if settings.backend == "slurm":
        from gaptui.backends.slurm import SlurmScheduler, sbatch_available

        if not sbatch_available():
            raise GaptuiError("--backend slurm: sbatch not found on PATH; run on a Slurm login node")
        if slurm is None:
            slurm = SlurmScheduler(
                ws, history, settings.slurm, timeout=settings.timeout, retries=settings.retries, listener=listener
            )
        slurm.configure(settings.slurm, settings.timeout)
        slurm.retries = settings.retries
        slurm.control.fail_fast = settings.options.fail_fast
        return slurm  # type: ignore[no-any-return]
    if local is None:
        kwargs = {"listener": listener} if listener is not None else {}
        local = Scheduler(ws, history, settings.slots, **kwargs)
    else:
        local.set_slots(settings.slots)
    local.timeout = settings.timeout
    local.retries = settings.retries
    local.pack_seeds = settings.pack_seeds
    local.control.fail_fast = settings.options.fail_fast
    return local


def start(
    launch_plan: LaunchPlan, backend: Scheduler, progress: Progress | None = None, leave: Iterable[str] = ()
) -> Launched:
    """Prepare the plan's inputs and queue its runs on ``backend`` (:func:`launch`); the memory of runs whose size
    was unknown until their input was built (real and user datasets) is checked before they are queued."""
    return launch(backend, launch_plan.plan, progress, leave)


def check_specs(specs: list[TaskSpec]) -> list[str]:
    """What :func:`plan_launch` checks, for runs given one by one (``gaptui train``): each family's check and the
    memory each run needs; returns the warning lines."""
    from engine.memory import check_memory

    warnings = check(specs)
    check_memory(specs)
    return warnings


def prepare_checked(specs: list[TaskSpec], progress: Progress | None = None) -> None:
    """Build the inputs of ``specs`` (:func:`prepare`) and check their memory again now that every size is known;
    GaptuiError for the first input that could not be built."""
    from engine.memory import check_memory

    errors = prepare(specs, progress)
    if errors:
        raise GaptuiError(next(iter(errors.values())))
    check_memory(specs)
