"""The Slurm backend: a preset's runs as job arrays, submitted and polled through submitit.

Each array task runs :func:`run_task` on a compute node, which starts the usual worker (``python -m engine``) on the
run's folder in the workspace, so the workspace must be on a filesystem the nodes see under the same path. The
manager follows runs by what the worker writes (``events.jsonl``, ``result.json``) and by the job state that a
submitit watcher reads with one ``sacct`` call per poll:

=======================================================  ===========================================================
Slurm state                                              history record
=======================================================  ===========================================================
PENDING, REQUEUED, CONFIGURING, SUSPENDED, ...           ``queued`` (``slurm.reason``: why it waits)
RUNNING, COMPLETING                                      ``running`` (``slot``: the node)
COMPLETED                                                what the worker reported: ``done``, ``cancelled`` or
                                                         ``failed``
FAILED, OUT_OF_MEMORY                                    ``failed`` with the state, reason and log tail
CANCELLED                                                ``cancelled`` (running the grid again resumes it)
TIMEOUT, NODE_FAIL, PREEMPTED, BOOT_FAIL, DEADLINE       submitted again (resumes from its checkpoint), at most
                                                         ``max_retries`` times, then ``failed``
=======================================================  ===========================================================

Slurm sends SIGUSR2 ``signal_delay`` seconds before the time limit (``--signal``); the task forwards it to the
worker as SIGTERM, the worker saves its checkpoint and exits, and the manager resubmits the run. Job ids (every
submission of a run) are kept in the record's ``slurm`` field.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from engine.errors import GaptuiError
from engine.events import EXIT_CANCELLED, read_events
from engine.tasks import TaskSpec, load_spec
from engine.tasks.presets import SlurmOptions
from gaptui.backends.slurm_jobs import (
    FAILED_STATES,
    QUEUED_STATES,
    RETRY_STATES,
    RUNNING_STATES,
    array_ids,
    by_array,
    cancel_jobs,
    elapsed_seconds,
    in_flight_on_slurm,
    job_paths,
    job_state,
    make_watcher,
    slurm_folder,
    task_result,
)
from gaptui.backends.slurm_node import run_task
from gaptui.durations import earlier_parts_seconds
from gaptui.history.store import History, now
from gaptui.processes import tail
from gaptui.run_records import PlannedSeeds
from gaptui.runner import run_id
from gaptui.scheduler import GRACE, Job, Listener, Scheduler, Slot
from gaptui.workspace import Workspace

#: The public names: job tracking lives in :mod:`gaptui.backends.slurm_jobs`, the task run on a compute node in
#: :mod:`gaptui.backends.slurm_node`; both are importable from here too.
__all__ = [
    "FAILED_STATES",
    "LOCAL_ONLY",
    "POLL_SECONDS",
    "QUEUED_STATES",
    "RETRY_STATES",
    "RUNNING_STATES",
    "SlurmOptions",
    "SlurmScheduler",
    "array_ids",
    "by_array",
    "cancel_jobs",
    "check_shared_workspace",
    "elapsed_seconds",
    "in_flight_on_slurm",
    "job_paths",
    "job_state",
    "make_watcher",
    "parse_slurm_options",
    "run_task",
    "sbatch_available",
    "slurm_folder",
    "task_result",
]

#: Seconds between two ``sacct`` calls while runs are in flight.
POLL_SECONDS = 2.0
#: Folders that compute nodes do not share with the submitting machine.
LOCAL_ONLY = (Path("/tmp"), Path("/var/tmp"), Path("/dev/shm"))


def parse_slurm_options(pairs: list[str]) -> dict[str, str]:
    """``--slurm-option key=value`` (repeatable) into sbatch options, e.g. ``constraint=a100``."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip().lstrip("-")
        if not sep or not key:
            raise GaptuiError(f"--slurm-option '{pair}': expected key=value, e.g. constraint=a100")
        out[key] = value.strip()
    return out


def check_shared_workspace(ws: Workspace, force: bool) -> None:
    """Refuse a workspace compute nodes cannot see (under /tmp and friends) unless ``force``."""
    root = ws.root.resolve()
    for folder in LOCAL_ONLY:
        if (root == folder or folder in root.parents) and not force:
            raise GaptuiError(
                f"workspace {root} is under {folder}, which compute nodes do not share: use a --workspace on a "
                "shared filesystem (home, project or scratch space), or --force on a single-node cluster"
            )


def sbatch_available() -> bool:
    return shutil.which("sbatch") is not None


# ---------------------------------------------------------------------------------------------- the manager


class SlurmScheduler(Scheduler):
    """Submits queued specs as job arrays and follows them until Slurm is done with each.

    Same public interface as the local :class:`~gaptui.scheduler.Scheduler` (``enqueue``, ``recover``, ``step``,
    ``cancel``, ``stop_all``, ``detach``); ``running`` holds every run submitted and not filed yet, pending or
    running, with the node (or the pending reason) as its slot name.
    """

    def __init__(
        self,
        ws: Workspace,
        history: History,
        options: SlurmOptions,
        *,
        timeout: float | None = None,
        retries: int = 0,
        listener: Listener | None = None,
    ) -> None:
        super().__init__(ws, history, [Slot("slurm", {})], timeout=None, retries=retries, listener=listener)
        self.configure(options, timeout)
        self.watcher = make_watcher()
        self.job_ids: dict[str, str] = {}  # run hash -> the job id of its current submission
        self.meta: dict[str, dict[str, Any]] = {}  # run hash -> the record's ``slurm`` field
        self.submitted = 0
        self._next_poll = 0.0
        #: Run hash -> its record before it was queued here (None: no record), until a submission works.
        self.before: dict[str, dict[str, Any] | None] = {}

    def configure(self, options: SlurmOptions, timeout: float | None = None) -> None:
        """Settings for what is submitted from now on (runs already out keep theirs)."""
        self.options = options
        self.time_min = options.time or (int(-(-timeout // 60)) if timeout else None)

    # ------------------------------------------------------------------------------------------ queueing

    def enqueue(self, specs: list[TaskSpec], preset: str | None = None, planned_seeds: PlannedSeeds = None) -> None:
        known = self.history.by_hash()
        busy = set(self.running) | {s.hash() for s in self.queue}
        for spec in specs:  # what each record said before, should the first submission fail
            h = spec.hash()
            if h not in busy and h not in self.before:
                self.before[h] = dict(known[h]) if h in known else None
        super().enqueue(specs, preset, planned_seeds)
        # A fresh request of the grid gets its full number of resubmissions again.
        known = self.history.by_hash()
        updates = {}
        for spec in specs:
            h = spec.hash()
            self.meta[h] = {**(known[h].get("slurm") or {}), "retries": 0}
            updates[h] = {"backend": "slurm", "slurm": self.meta[h]}
        self.history.update_many(updates)

    def recover(self) -> tuple[list[str], list[str]]:
        """Re-attach every submitted run still queued or running in the history; sacct tells what became of it."""
        reattached: list[str] = []
        for record in self.history.records():
            meta = record.get("slurm") or {}
            if record.get("backend") != "slurm" or record["status"] not in ("queued", "running"):
                continue
            if not meta.get("job_id"):
                continue  # never submitted: planning the grid queues it again
            self._track(load_spec(record["spec"]), meta, record.get("slot") or "slurm")
            self.running[record["hash"]].started = float(record.get("started_ts") or time.time())
            reattached.append(record["id"])
        return reattached, []

    def _track(self, spec: TaskSpec, meta: dict[str, Any], slot: str) -> None:
        h = spec.hash()
        run_dir = self.ws.runs / run_id(spec)
        events = run_dir / "events.jsonl"
        job = Job(spec, h, run_dir, Slot(slot, {}), 0, None, offset=events.stat().st_size if events.exists() else 0)
        self.running[h] = job
        self.job_ids[h] = meta["job_id"]
        self.meta[h] = meta
        self.watcher.register_job(meta["job_id"])

    # ------------------------------------------------------------------------------------------ the loop

    def step(self) -> None:
        self._check_watched()
        self.check_fail_fast()
        if self.queue and self.control.may_start():
            self._submit()
        if time.monotonic() >= self._next_poll and self.running:
            self._poll()
            self._next_poll = time.monotonic() + POLL_SECONDS
        for job in self.running.values():
            if self.meta[job.run_hash].get("state") in RUNNING_STATES:
                self._read_events(job)

    def _read_events(self, job: Job) -> None:
        events, job.offset = read_events(job.run_dir / "events.jsonl", job.offset)
        for event in events:
            if event.get("event") == "progress":
                job.progress = event
            else:
                job.last = event
            if self.listener:
                self.listener("event", job.run_hash, event)

    def _executor(self) -> Any:
        import submitit

        opts = self.options
        executor = submitit.SlurmExecutor(folder=slurm_folder(self.ws), max_num_timeout=0)
        params: dict[str, Any] = {
            "job_name": f"gaptui-{self.ws.root.name}",
            "cpus_per_task": opts.cpus_per_run,
            "array_parallelism": opts.array_parallelism,
            "signal_delay_s": opts.signal_delay,
            "time": self.time_min,
            "partition": opts.partition,
            "account": opts.account,
            "qos": opts.qos,
            "mem": opts.mem_per_run,
            "gpus_per_node": opts.gpus_per_run or None,
            "additional_parameters": dict(opts.options) or None,
        }
        executor.update_parameters(**{k: v for k, v in params.items() if v is not None})
        return executor

    def _submit(self) -> None:
        """Everything queued whose dependencies are done goes out now, as job arrays of at most ``chunk`` tasks."""
        specs = self.take_ready()
        if not specs:
            return
        try:
            executor = self._executor()
        except Exception as exc:  # noqa: BLE001 - submitit refuses a machine without srun (RuntimeError)
            self._refused(specs, exc)
            return
        known = self.history.by_hash()
        for start in range(0, len(specs), self.options.chunk):
            part = specs[start : start + self.options.chunk]
            dirs = [self.ws.runs / run_id(spec) for spec in part]
            for run_dir in dirs:
                run_dir.mkdir(parents=True, exist_ok=True)
            try:
                # submitit prints sbatch's stderr itself before raising it: said once, below, in one line
                with contextlib.redirect_stderr(io.StringIO()):
                    jobs = executor.map_array(run_task, [s.to_dict() for s in part], [str(d) for d in dirs])
            except Exception as exc:  # noqa: BLE001 - sbatch's refusal, whatever submitit wraps it in
                self._refused(part, exc, specs)
                continue
            updates = {}
            for spec, job in zip(part, jobs, strict=True):
                h = spec.hash()
                meta = self.meta.get(h) or (known.get(h, {}).get("slurm") or {})
                meta = {
                    **meta,
                    "job_id": job.job_id,
                    "jobs": [*meta.get("jobs", []), job.job_id],
                    "state": "PENDING",
                    "reason": None,
                    "node": None,
                    "submitted": now(),
                    # what it went out with: a manager re-attaching without the preset resubmits it the same way
                    "options": dataclasses.asdict(replace(self.options, time=self.time_min)),
                }
                self._track(spec, meta, "PENDING")
                attempts = int(known.get(h, {}).get("attempts") or 0) + 1
                updates[h] = {"status": "queued", "slurm": meta, "attempts": attempts, "error": None, "pid": None}
            self.submitted += len(part)
            self.before.clear()
            self._write(updates)

    def _refused(self, part: list[TaskSpec], exc: Exception, taken: list[TaskSpec] | None = None) -> None:
        """A submission of ``part`` (of the ``taken`` specs) failed. Before anything reached Slurm in this session:
        the runs are withdrawn and a GaptuiError names the cause in one line; later, the part is recorded failed."""
        message = " ".join(str(exc).split())[-400:] or type(exc).__name__
        if not self.submitted:
            self._withdraw([*(taken or part), *self.queue])
            raise GaptuiError(f"Slurm submission failed: {message}{_hint(message)}") from None
        failed = {"status": "failed", "error": f"sbatch refused: {message}", "finished": now()}
        self.history.update_many({s.hash(): dict(failed) for s in part})
        self.finished.extend({"hash": s.hash(), **failed} for s in part)

    def _withdraw(self, specs: list[TaskSpec]) -> None:
        """Nothing reached Slurm: give back the runs queued here. Records created for them are removed and the
        others get their earlier status back, so no run waits ``queued`` for a job that does not exist and the next
        ``gaptui run`` submits them again (a ``failed`` mark would make it skip them: the runs did not fail)."""
        self.queue.clear()
        hashes = {s.hash() for s in specs}
        self.history.remove_many(h for h in hashes if h in self.before and self.before[h] is None)
        restored = []
        for h, old in self.before.items():
            if h not in hashes or old is None:
                continue
            earlier = old.get("earlier") or []
            if old["status"] == "done" and earlier and "redone" in earlier[-1]:
                # queued to be done again (see gaptui.launch.keep_earlier): back to its record as it was
                last = earlier[-1]
                old = {**old, "metrics": last.get("metrics"), "params": last.get("params"), "earlier": earlier[:-1]}
                if not old["earlier"]:
                    del old["earlier"]
            restored.append(old)
        self.history.restore_many(restored)
        for spec in specs:
            folder = self.ws.runs / run_id(spec)
            with contextlib.suppress(OSError):
                folder.rmdir()  # made for the submission, still empty
        self.before.clear()

    def _poll(self) -> None:
        """One sacct call for every run in flight; write what changed, file what ended."""
        self.watcher.update()
        updates: dict[str, dict[str, Any]] = {}
        ended = []
        for h, job in self.running.items():
            info = self.watcher.get_info(self.job_ids[h], mode="cache")
            state = job_state(info)
            if state == "UNKNOWN":
                continue  # not in the accounting yet
            meta = self.meta[h]
            fresh = {
                "state": state,
                "reason": info.get("Reason") if info.get("Reason") not in ("", "None") else None,
                "node": info.get("NodeList") or None,
                "elapsed": info.get("Elapsed") or None,
            }
            if fresh["node"] in ("None assigned", "(null)"):
                fresh["node"] = None
            if state in QUEUED_STATES or state in RUNNING_STATES:
                if all(meta.get(k) == v for k, v in fresh.items() if k != "elapsed"):
                    meta["elapsed"] = fresh["elapsed"]
                    continue
                meta.update(fresh)
                fields: dict[str, Any] = {"slurm": dict(meta)}
                if state in RUNNING_STATES:
                    job.slot.name = fresh["node"] or "running"
                    fields.update(status="running", slot=job.slot.name)
                    if job.stopping is None and not job.last:
                        job.started = time.time()
                        fields.update(started=now(), started_ts=job.started, finished=None)
                else:
                    job.slot.name = f"{state} ({fresh['reason']})" if fresh["reason"] else state
                    fields.update(status="queued", slot=None)
                updates[h] = fields
            else:
                meta.update(fresh)
                ended.append((job, state, info))
        for job, state, info in ended:
            updates[job.run_hash] = self._file(job, state, info)
        self._write(updates)

    def _write(self, updates: dict[str, dict[str, Any]]) -> None:
        self.history.update_many(updates)
        if self.listener:
            for h, fields in updates.items():
                self.listener("status", h, fields)

    def _file(self, job: Job, state: str, info: dict[str, str]) -> dict[str, Any]:
        """A job Slurm is done with: done, cancelled, failed, or submitted again. Returns the record's new fields."""
        h = job.run_hash
        meta = self.meta[h]
        self._read_events(job)
        outcome = task_result(self.ws, self.job_ids[h])
        returned = outcome[1] if outcome and outcome[0] == "success" and isinstance(outcome[1], dict) else {}
        code = returned.get("exit")
        retry_reason = None
        if _done(job.run_dir):
            code = 0
        elif state in RETRY_STATES:
            retry_reason = state
        elif state == "COMPLETED" and code == EXIT_CANCELLED and returned.get("signal") == "SIGUSR2":
            retry_reason = "TIMEOUT"  # stopped by the signal before the time limit, checkpoint saved
        elif state == "CANCELLED":
            code = EXIT_CANCELLED
        if retry_reason and int(meta.get("retries") or 0) < self.options.max_retries:
            meta.update(retries=int(meta.get("retries") or 0) + 1, reason=f"{retry_reason}; resubmitted")
            del self.running[h]
            self.queue.append(job.spec)
            return {"status": "queued", "slot": None, "slurm": dict(meta)}
        if code is None or retry_reason:
            code = 1
        del self.running[h]
        fields = self.outcome(job, code)
        fields["slurm"] = dict(meta)
        elapsed = elapsed_seconds(info.get("Elapsed"))
        if elapsed is not None:  # Slurm's figure holds even when the manager was away while the job ran
            # plus the earlier jobs this one resumed from (a time limit hit, a preemption)
            events = read_events(job.run_dir / "events.jsonl")[0]
            fields["duration"] = round(elapsed + earlier_parts_seconds(events, job.started), 2)
        if fields["status"] == "failed":
            fields["error"] = self._failure(job, state, info, outcome, retry_reason, fields.get("error"))
            fields["log_tail"] = fields["log_tail"] or tail(job_paths(self.ws, self.job_ids[h]).stderr)
            record = self.history.find(h) or {}
            if int(record.get("attempts") or 0) <= self.retries:
                self.queue.append(job.spec)
        self.finished.append({"hash": h, **fields})
        return fields

    def _failure(
        self,
        job: Job,
        state: str,
        info: dict[str, str],
        outcome: tuple[str, Any] | None,
        retry_reason: str | None,
        worker_error: str | None,
    ) -> str:
        """One line: what Slurm says (state, reason, exit code) and what the worker said."""
        job_id = self.job_ids[job.run_hash]
        where = f"Slurm job {job_id} {state}"
        reason = info.get("Reason")
        if reason and reason != "None":
            where += f" ({reason})"
        if info.get("ExitCode") and info["ExitCode"] != "0:0":
            where += f", exit code {info['ExitCode']}"
        if retry_reason:
            return f"{where}: gave up after {self.options.max_retries} resubmission(s)"
        if state == "OUT_OF_MEMORY":
            return f"{where}: out of memory; raise --mem-per-run"
        if outcome and outcome[0] == "error":
            lines = [line for line in str(outcome[1]).splitlines() if line.strip()]
            return f"{where}: {lines[-1] if lines else 'the task raised'}"
        if outcome is None:
            return f"{where}: the task died without reporting its worker's outcome ({worker_error})"
        return f"{where}: {worker_error}" if worker_error else where

    # ------------------------------------------------------------------------------------------ stopping

    def cancel(self, run_hash: str) -> bool:
        """Drop a queued run, or scancel a submitted one (sacct then reports it CANCELLED and it is filed)."""
        if any(spec.hash() == run_hash for spec in self.queue):
            return super().cancel(run_hash)
        if run_hash not in self.running:
            return False
        job = self.running[run_hash]
        if job.stopping is None:
            job.stopping = time.monotonic()
            cancel_jobs(self.ws, [self.job_ids[run_hash]])
        return True

    def stop_all(self, wait: float = GRACE + 30) -> None:
        """scancel every run in flight (arrays at once) and wait until Slurm reports them ended."""
        self._write({spec.hash(): {"status": "cancelled"} for spec in self.queue})
        self.queue.clear()
        ids = [self.job_ids[h] for h in self.running]
        cancel_jobs(self.ws, array_ids(ids, by_array(ids)))
        for job in self.running.values():
            job.stopping = time.monotonic()
        deadline = time.monotonic() + wait
        while self.running and time.monotonic() < deadline:
            self._poll()
            time.sleep(POLL_SECONDS)
        self._write({h: {"status": "cancelled", "finished": now(), "slurm": self.meta[h]} for h in list(self.running)})
        self.running.clear()

    def detach(self) -> list[str]:
        ids = [job.run_dir.name for job in self.running.values()]
        self.running.clear()
        return ids


def _hint(message: str) -> str:
    """What to check when sbatch could not reach the cluster."""
    lowered = message.lower()
    if "controller" in lowered or "slurmctld" in lowered or "connection refused" in lowered:
        return " (is slurmctld running? `scontrol ping` tells)"
    return ""


def _done(run_dir: Path) -> bool:
    try:
        return json.loads((run_dir / "result.json").read_text()).get("status") == "done"
    except (FileNotFoundError, json.JSONDecodeError):
        return False
