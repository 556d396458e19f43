"""The scheduler: one worker subprocess per run, in its own process group, on GPU or CPU slots.

It owns the history file while it runs (through :class:`~gaptui.history.History` with the workspace lock).
Each worker is ``python -m engine --spec <run>/spec.json --out <run>`` (see :mod:`gaptui.runner`); the
scheduler reads the worker's ``events.jsonl`` to follow it and its exit status to file the outcome:

==========  =================================================================================
exit        recorded status
==========  =================================================================================
0           ``done`` (metrics from ``result.json``)
143         ``cancelled`` (the worker saved a checkpoint; re-queuing resumes it)
other       ``failed`` with the last error event (or stderr line) and the log tail
==========  =================================================================================

After a crash of the manager (or of a foreground ``gaptui train``), :meth:`Scheduler.recover` finds records left
``running``: a worker that is still alive is re-attached (followed by pid); one whose worker may still be alive
without being ours to follow (its folder's ``worker.lock`` held, or started on another host) is left alone; a dead
one (:func:`gaptui.processes.worker_gone`, the rule readers show ``interrupted`` by) that finished meanwhile is
filed from what it wrote (``done`` with its own training time, ``cancelled`` or ``failed``); any other dead one is
marked ``interrupted`` and its checkpoint makes it resume where it stopped when it is queued again. A run that a
foreground ``gaptui train`` may still be training (each record says who started its worker: ``driver``) is never
adopted: a grid that holds it waits for it (:mod:`gaptui.recovery`).

Before a run starts, :attr:`Scheduler.control` is asked (:mod:`gaptui.queue_control`): a paused queue starts
nothing, a draining slot takes no new run, and after ``fail_fast`` runs failed with the same error the queued runs
are withdrawn.

The per-run timeout counts from the run's own ``start`` event (the family's loop writes it as the run begins),
not from the spawn of its process: the worker's start-up before it does not count.

Packed seeds (``pack_seeds = k``): the ready runs of one cell (equal specs apart from ``seed``) are started k at
a time as one worker process on one slot (``python -m engine --spec A --out A --spec B --out B ...``). Each run
keeps its own folder, events, result and record; when the process exits, each is filed from its own files. Each
run of a pack counts its timeout from its own ``start``; the first past it stops the process, and every run of the
process is then recorded timed out; cancelling one run of a pack stops the process (every run saves its
checkpoint) and puts the pack's other runs back in the queue, to resume from their checkpoints.

Dependencies: a spec whose task family names runs it depends on (:meth:`engine.tasks.TaskFamily.dependencies`)
waits in the queue until each of them is ``done``. If one ends ``failed``, ``cancelled`` or ``blocked`` (and is
not queued again), the dependant is recorded ``blocked``, its error naming the culprit, and is never started.
The scheduler knows nothing else about tasks: specs are opaque apart from ``hash()``, ``to_dict()`` and ``task``.
"""

from __future__ import annotations

import os
import platform
import signal
import subprocess
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine.errors import GaptuiError
from engine.events import EXIT_CANCELLED, read_events
from engine.files import read_json
from engine.memory import machine_memory
from engine.tasks import TaskSpec, family
from gaptui.durations import run_seconds
from gaptui.history.store import History, now
from gaptui.jobs import Job, Listener
from gaptui.packs import group_packs
from gaptui.processes import in_foreground, pid_alive, tail
from gaptui.queue_control import QueueControl
from gaptui.recovery import Recovery, WatchedRuns
from gaptui.run_records import PlannedSeeds, git_commit, new_record
from gaptui.runner import run_id, signal_group, start_pack, write_spec
from gaptui.slots import Slot, detect_gpus, make_slots
from gaptui.workspace import Workspace

#: The public names; slots, packs, records and process helpers live in their own modules, importable from here too.
__all__ = [
    "GRACE",
    "Job",
    "Listener",
    "Scheduler",
    "Slot",
    "detect_gpus",
    "git_commit",
    "group_packs",
    "make_slots",
    "new_record",
    "pid_alive",
    "tail",
]

#: Seconds a worker gets to checkpoint after SIGTERM before it is killed.
GRACE = 30.0


#: Statuses of a dependency after which its dependants can never start.
DEAD_ENDS = ("failed", "cancelled", "blocked")


class Scheduler(Recovery):
    """Runs queued specs on slots until the queue is empty; every state change goes to the history.

    ``listener(kind, run_hash, payload)`` is called (from the thread calling :meth:`step`) with ``kind`` in
    ``status`` (payload = the updated record fields) and ``event`` (payload = a worker event), so a UI can
    follow runs without reading files itself.
    """

    def __init__(
        self,
        ws: Workspace,
        history: History,
        slots: list[Slot],
        *,
        timeout: float | None = None,
        retries: int = 0,
        pack_seeds: int = 1,
        listener: Listener | None = None,
        driver: str = "manager",
    ) -> None:
        if not slots:
            raise ValueError("the scheduler needs at least one slot")
        self.ws = ws
        self.history = history
        self.slots = slots
        self.timeout = timeout
        self.retries = retries
        #: Runs of one cell started together in one worker process (1: one process per run).
        self.pack_seeds = pack_seeds
        self.listener = listener
        #: Recorded as each run's ``driver``: ``manager``, or ``train`` for a foreground ``gaptui train``, whose
        #: runs no manager adopts (:func:`gaptui.processes.in_foreground`).
        self.driver = driver
        #: Runs of a foreground ``gaptui train`` this manager waits for (:mod:`gaptui.recovery`).
        self.watched = WatchedRuns()
        #: Records of runs :meth:`recover` left to their foreground ``gaptui train``.
        self.foreground: list[dict[str, Any]] = []
        #: Pause, drained slots, fail-fast (:mod:`gaptui.queue_control`): consulted before any run starts.
        self.control = QueueControl()
        self.queue: deque[TaskSpec] = deque()
        #: Dependencies of queued runs (run hash -> the hashes it needs), from their families.
        self.depends: dict[str, tuple[str, ...]] = {}
        self.running: dict[str, Job] = {}
        #: Workers start only while the memory their runs need (:meth:`memory_of`) stays within this many bytes
        #: (the machine's memory; None: no limit); one always starts when none runs.
        self.memory_limit: int | None = machine_memory()
        self.finished: list[dict[str, Any]] = []
        #: Run ids that :meth:`recover` found finished (their worker ended while no manager watched).
        self.refiled: list[str] = []
        self.repro_base = {
            "host": platform.node(),
            "platform": platform.platform(),
            "project": git_commit(Path.cwd()),
        }

    # ------------------------------------------------------------------------------------------- queueing

    def enqueue(self, specs: list[TaskSpec], preset: str | None = None, planned_seeds: PlannedSeeds = None) -> None:
        """Queue specs, dependencies first (a spec already queued or running is not queued twice: one run, one
        worker)."""
        known = self.history.statuses()
        busy = set(self.running) | {s.hash() for s in self.queue}
        fresh = []
        for spec in specs:
            h = spec.hash()
            if h in busy:
                continue
            busy.add(h)
            if h not in known:
                fresh.append(new_record(spec, self.ws, preset, planned_seeds))
            elif known[h] != "queued":
                self._status(h, status="queued", error=None)
            deps = family(spec.task).dependencies(spec)
            if deps:
                self.depends[h] = tuple(deps)
            self.queue.append(spec)
        self.history.put_many(fresh)

    def fail(
        self, specs: list[TaskSpec], error: str, preset: str | None = None, planned_seeds: PlannedSeeds = None
    ) -> None:
        """Record runs as ``failed`` without starting them (their input could not be prepared)."""
        known = self.history.statuses()
        self.history.put_many([new_record(s, self.ws, preset, planned_seeds) for s in specs if s.hash() not in known])
        for spec in specs:
            self._status(spec.hash(), status="failed", error=error, finished=now())
            self.finished.append({"hash": spec.hash(), "status": "failed", "error": error})

    def set_slots(self, slots: list[Slot]) -> None:
        """Use a new slot list from now on; running workers keep (and later free) the slot of the same name."""
        if not slots:
            raise ValueError("the scheduler needs at least one slot")
        by_name = {slot.name: slot for slot in slots}
        for job in self.running.values():
            new = by_name.get(job.slot.name)
            if new is not None and (new.busy is None or new.busy in job.pack):
                new.busy = job.run_hash
                job.slot = new
        self.slots = slots

    # ------------------------------------------------------------------------------------------- the loop

    def pending(self) -> bool:
        return bool(self.queue or self.running or self.watched)

    def step(self) -> None:
        """Start what fits, follow what runs, file what ended. Call it a few times per second."""
        self._check_watched()
        for job in list(self.running.values()):
            self._follow(job)
        self.check_fail_fast()
        free = self.control.free_slots(self.slots)
        for pack in self.take_packs(len(free)):
            # host memory: a CPU worker's batch lives there (a GPU worker's on its device)
            need = self.memory_of(pack) if free[0].env.get("CUDA_VISIBLE_DEVICES") == "" else 0
            if self.running and self.memory_held() + need > (self.memory_limit or need):
                self.queue.extendleft(reversed(pack))  # waits for a running worker to free its memory
                break
            self._start(pack, free.pop(0), need)

    def memory_of(self, pack: list[TaskSpec]) -> int:
        """What the worker of ``pack`` needs at its peak: its family's estimate for one run
        (:func:`engine.memory.memory_needs`) times the runs it trains together; 0 when unknown."""
        from engine.memory import memory_needs

        try:
            needs = memory_needs(pack[:1])
        except GaptuiError:  # a spec the launch cannot size: start it, its worker reports
            return 0
        return needs[0].need * len(pack) if needs else 0

    def memory_held(self) -> int:
        """Bytes the running workers need (each pack once)."""
        return sum({job.pid: job.memory for job in self.running.values()}.values())

    def check_fail_fast(self) -> None:
        """Once ``control.fail_fast`` runs failed with the same error, start no other: the queued runs are recorded
        ``cancelled`` with the reason (the same command queues them again once the cause is fixed)."""
        reason = self.control.note_finished(self.finished)
        if reason:
            self.withdraw_queued("cancelled", f"not started: fail-fast after {reason}")

    def take_packs(self, limit: int) -> list[list[TaskSpec]]:
        """Up to ``limit`` groups of ready specs, one worker process each: single specs when ``pack_seeds`` is 1,
        else up to ``pack_seeds`` specs of one cell (equal apart from ``seed``), in queue order of their first."""
        if self.pack_seeds <= 1:
            return [[spec] for spec in self.take_ready(limit)]
        ready = self.take_ready()
        groups = group_packs([spec.seedless() for spec in ready], self.pack_seeds)[:limit]
        taken = {i for group in groups for i in group}
        self.queue.extendleft(reversed([spec for i, spec in enumerate(ready) if i not in taken]))
        return [[ready[i] for i in group] for group in groups]

    def take_ready(self, limit: int | None = None) -> list[TaskSpec]:
        """Take up to ``limit`` queued specs whose dependencies are done, in queue order; a spec whose dependency
        can never be done is recorded ``blocked`` (naming the culprit) and dropped from the queue."""
        if limit == 0 or not self.queue:
            return []
        if not self.depends:
            count = len(self.queue) if limit is None else min(limit, len(self.queue))
            return [self.queue.popleft() for _ in range(count)]
        taken: list[TaskSpec] = []
        statuses = self.history.statuses()
        pending = {s.hash() for s in self.queue} | set(self.running) | set(self.watched)
        for spec in list(self.queue):
            h = spec.hash()
            verdict = self._ready(h, statuses, pending)
            if verdict is True and (limit is None or len(taken) < limit):
                self.queue.remove(spec)
                taken.append(spec)
            elif isinstance(verdict, str):
                self.queue.remove(spec)
                pending.discard(h)
                statuses[h] = "blocked"
                self._status(h, status="blocked", error=verdict, finished=now())
                self.finished.append({"hash": h, "status": "blocked", "error": verdict})
        return taken

    def _ready(self, run_hash: str, statuses: dict[str, str], pending: set[str]) -> bool | str:
        """True when every dependency is done, False while one is still to run, else why it never will."""
        for dep in self.depends.get(run_hash, ()):
            status = statuses.get(dep)
            if status == "done":
                continue
            if dep in pending:
                return False
            culprit = dep[:12]
            if status in DEAD_ENDS:
                return f"dependency {culprit} {status}"
            return f"dependency {culprit} is {status or 'not in the history'} and not scheduled"
        return True

    def run(self, poll: float = 0.25, should_stop: Callable[[], bool] = lambda: False) -> None:
        while self.pending() and not should_stop():
            self.step()
            time.sleep(poll)

    def run_dir(self, spec: TaskSpec) -> Path:
        """The run's folder: what its record says (``train --out``), else ``<workspace>/runs/<run id>``."""
        record = self.history.find(spec.hash())
        return Path(record["run_dir"]) if record and record.get("run_dir") else self.ws.runs / run_id(spec)

    def _start(self, specs: list[TaskSpec], slot: Slot, memory: int = 0) -> None:
        """Start one worker process on ``slot`` for ``specs`` (one run, or a pack of one cell's seeds)."""
        runs: list[tuple[TaskSpec, Path]] = []
        for spec in specs:
            record = self.history.find(spec.hash())
            if record is not None and in_foreground(record):  # a gaptui train took it since it was queued
                self.watch([record])
                continue
            run_dir = self.run_dir(spec)
            try:
                run_dir.mkdir(parents=True, exist_ok=True)
                write_spec(spec, run_dir)
            except (GaptuiError, OSError) as exc:
                # The folder cannot be this run's (another run's, a file, no space): fail the run, not the manager.
                self._failed_start(spec, exc)
                continue
            runs.append((spec, run_dir))
        if not runs:
            return
        stderr_path = runs[0][1] / "stderr.txt"
        try:
            with open(stderr_path, "a") as stderr:
                proc = start_pack(runs, env=slot.env, quiet=True, stdout=subprocess.DEVNULL, stderr=stderr)
        except (GaptuiError, OSError) as exc:
            for spec, _ in runs:
                self._failed_start(spec, exc)
            return
        pack = tuple(spec.hash() for spec, _ in runs) if len(runs) > 1 else ()
        slot.busy = runs[0][0].hash()
        for spec, run_dir in runs:
            h = spec.hash()
            events = run_dir / "events.jsonl"
            offset = events.stat().st_size if events.exists() else 0
            self.running[h] = Job(
                spec, h, run_dir, slot, proc.pid, proc, offset=offset, pack=pack, stderr=stderr_path, memory=memory
            )
            self._status(
                h,
                status="running",
                started=now(),
                started_ts=time.time(),
                finished=None,
                pid=proc.pid,
                slot=slot.name,
                host=self.repro_base["host"],
                driver=self.driver,
                driver_pid=os.getpid(),
                attempts=int((self.history.find(h) or {}).get("attempts") or 0) + 1,
                error=None,
            )

    def _failed_start(self, spec: TaskSpec, exc: Exception) -> None:
        from engine.files import describe_os_error

        message = describe_os_error(exc, "starting the worker") if isinstance(exc, OSError) else str(exc)
        fields = {"status": "failed", "error": message, "finished": now(), "pid": None}
        self._status(spec.hash(), **fields)
        self.finished.append({"hash": spec.hash(), **fields})

    def _follow(self, job: Job) -> None:
        events, job.offset = read_events(job.run_dir / "events.jsonl", job.offset)
        for event in events:
            if event.get("event") == "progress":
                job.progress = event
            else:
                job.last = event
            # This attempt's start. A job spawned here ignores earlier attempts' starts in the folder; a re-attached
            # one (its worker began before this manager) reads the folder from the beginning, and the last start wins.
            if event.get("event") == "start" and (job.proc is None or float(event.get("t") or 0) >= job.started - 1.0):
                job.run_started = float(event["t"])
            if self.listener:
                self.listener("event", job.run_hash, event)
        code = self._exit_code(job)
        if code is None:
            if self.timed_out(job) and job.stopping is None:
                job.timed_out = True
                self._terminate(job)
            elif job.stopping is not None and time.monotonic() - job.stopping > GRACE:
                signal_group(job.pid, signal.SIGKILL)
            return
        if job.packed:
            code = self._pack_code(job, code)
        self._finish(job, code)

    def timed_out(self, job: Job, at: float | None = None) -> bool:
        """Whether ``job`` has run longer than the timeout: counted from its own ``start`` event (what a run of a
        pack or a slow start-up spends before it does not count), never while it has not started."""
        if not self.timeout or job.run_started is None:
            return False
        return (time.time() if at is None else at) - job.run_started > self.timeout

    def _pack_code(self, job: Job, code: int) -> int:
        """The exit status of one run of a pack whose process exited with ``code``: from the run's own final event,
        else 0 when its result says done (a run that was already finished), else the process's status."""
        own = self._code_from_files(job.run_dir, job.started)
        if own is not None:
            return own
        result = _read_json(job.run_dir / "result.json")
        return 0 if result.get("status") == "done" and result.get("run") == job.run_hash else code

    def _exit_code(self, job: Job) -> int | None:
        if job.proc is not None:
            return job.proc.poll()
        if pid_alive(job.pid, str(job.run_dir)):
            return None
        # A re-attached worker is not our child: its exit status is lost, so read what it wrote.
        code = self._code_from_files(job.run_dir, job.started)
        return 1 if code is None else code

    @staticmethod
    def _code_from_files(run_dir: Path, since: float | None) -> int | None:
        """The exit status a dead worker's last event implies; None when the attempt started at ``since`` wrote no
        final event (an older attempt's ``done`` or ``cancelled`` says nothing about this one)."""
        last = read_events(run_dir / "events.jsonl")[0][-1:] or [{}]
        if since is not None and float(last[0].get("t", 0)) < float(since):
            return None
        return {"done": 0, "cancelled": EXIT_CANCELLED, "error": 1}.get(last[0].get("event", ""))

    def _finish(self, job: Job, code: int, requeue: bool = True) -> None:
        self.running.pop(job.run_hash, None)
        job.slot.busy = None
        fields = self.outcome(job, code)
        if fields["status"] == "cancelled" and job.stopped_as[0] != "cancelled":
            fields.update(status=job.stopped_as[0], error=job.stopped_as[1])
        elif fields["status"] == "cancelled" and job.requeue:
            # Stopped because another run of its pack was cancelled: it resumes from its checkpoint later.
            self.queue.appendleft(job.spec)
            self._status(job.run_hash, **{**fields, "status": "queued"})
            return
        if fields["status"] == "failed":
            record = self.history.find(job.run_hash) or {}
            if requeue and int(record.get("attempts") or 0) <= self.retries:
                self.queue.append(job.spec)
        self._status(job.run_hash, **fields)
        self.finished.append({"hash": job.run_hash, **fields})

    def outcome(self, job: Job, code: int) -> dict[str, Any]:
        """The record fields of a worker that exited with ``code``: status, metrics or error, log tail, repro."""
        result = _read_json(job.run_dir / "result.json")
        record = self.history.find(job.run_hash) or {}
        fields: dict[str, Any] = {"pid": None, "finished": now(), "log_tail": tail(job.run_dir / "log.txt")}
        fields["exit_code"] = code
        fields["duration"] = run_seconds(job.run_dir, job.started, job.packed, result, record.get("duration"))
        if result:
            fields["repro"] = {
                **self.repro_base,
                "versions": result.get("versions"),
                "device": result.get("device"),
                "device_name": result.get("device_name"),
                "seed": job.spec.seed,
                "dataset_seed": result.get("dataset_seed"),
                "dataset_id": result.get("dataset"),
                "precision": result.get("precision"),
            }
        finished = result.get("status") == "done" and result.get("run") == job.run_hash
        # A worker that wrote its done result finished the work, even when our stop signal caught it exiting.
        if finished and (code == 0 or job.stopping is not None):
            fields.update(status="done", metrics=result.get("metrics", {}), params=result.get("params"), error=None)
        elif not job.timed_out and (code == EXIT_CANCELLED or job.stopping is not None):
            fields.update(status="cancelled", error=None)
        else:
            last = read_events(job.run_dir / "events.jsonl")[0]
            errors = [e for e in last if e.get("event") == "error"]
            stderr = job.stderr or job.run_dir / "stderr.txt"
            message = errors[-1]["message"] if errors else (tail(stderr, 1) or [""])[0]
            if job.timed_out:
                message = f"timed out after {self.timeout:g} s"
            fields.update(status="failed", error=message or f"worker exited with status {code}")
        return fields

    # ------------------------------------------------------------------------------------------- stopping

    def _terminate(self, job: Job) -> None:
        """SIGTERM the worker process; every run it trains (a pack's) is stopping, with the same timeout flag."""
        for other in self._process_jobs(job):
            other.stopping = time.monotonic()
            other.timed_out = job.timed_out
        signal_group(job.pid, signal.SIGTERM)

    def _process_jobs(self, job: Job) -> list[Job]:
        """The runs trained by ``job``'s worker process: itself, and the rest of its pack still running."""
        return [job, *(self.running[h] for h in job.pack if h != job.run_hash and h in self.running)]

    def cancel(self, run_hash: str) -> bool:
        """Cancel a queued or running run. Returns False when it is neither.

        A run of a pack stops the pack's process: the other runs save their checkpoints and go back to the queue.
        """
        for spec in list(self.queue):
            if spec.hash() == run_hash:
                self.queue.remove(spec)
                self._status(run_hash, status="cancelled")
                return True
        job = self.running.get(run_hash)
        if job is None:
            return False
        if job.stopping is None:
            for other in self._process_jobs(job)[1:]:
                other.requeue = True
            self._terminate(job)
        return True

    def stop_all(self, wait: float = GRACE, status: str = "cancelled", reason: str | None = None) -> None:
        """Cancel everything: queued runs are dropped, workers get SIGTERM, then SIGKILL after ``wait`` s.

        Every run is filed ``status`` with ``reason`` as its error: ``cancelled`` when a user chose to stop them,
        ``interrupted`` when no one did (the app went away); either resumes from its checkpoint when queued again.
        """
        self.withdraw_queued(status, reason)
        for job in self.running.values():
            job.stopped_as = (status, reason)
            if job.stopping is None:
                self._terminate(job)
        deadline = time.monotonic() + wait
        while self.running and time.monotonic() < deadline:
            for job in list(self.running.values()):
                self._follow(job)
            time.sleep(0.1)
        for job in list(self.running.values()):
            signal_group(job.pid, signal.SIGKILL)
            if job.proc is not None:
                job.proc.wait(timeout=10)
            self._finish(job, EXIT_CANCELLED)

    def withdraw_queued(self, status: str, reason: str | None = None) -> None:
        """Drop every queued run, recording it ``status`` with ``reason`` as its error."""
        for spec in list(self.queue):
            self._status(spec.hash(), status=status, error=reason)
        self.queue.clear()

    def detach(self) -> list[str]:
        """Leave running workers alive (the next manager re-attaches them); returns their run ids."""
        ids = [job.run_dir.name for job in self.running.values()]
        self.running.clear()
        return ids

    def _status(self, run_hash: str, **fields: Any) -> None:
        self.history.update(run_hash, **fields)
        if self.listener:
            self.listener("status", run_hash, fields)


def _read_json(path: Path) -> dict[str, Any]:
    data = read_json(path)
    return data if isinstance(data, dict) else {}
