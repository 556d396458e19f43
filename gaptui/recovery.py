"""Runs a manager did not start: those an earlier manager left ``running`` (re-attached, or filed when their worker
is gone) and those a foreground ``gaptui train`` trains.

``gaptui train`` files its own run (its process starts the worker and writes the record), so a manager never
re-attaches, stops or files such a run while that command may be at it (:func:`gaptui.processes.in_foreground`).
When a grid holds one, the manager waits for it (its dependants too) and reports its end as the grid's; if the
``gaptui train`` dies without filing it (killed outright: its worker stops with it), the manager files it as its
recovery would. :class:`Recovery` is the part of :class:`~gaptui.scheduler.Scheduler` that does this.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from engine.tasks import load_spec
from gaptui.jobs import Job, Listener
from gaptui.processes import in_foreground, pid_alive, worker_gone
from gaptui.slots import Slot


class WatchedRuns:
    """Run hashes waited for (with the id and the ``gaptui train`` pid of each, for messages)."""

    def __init__(self) -> None:
        self.runs: dict[str, dict[str, Any]] = {}

    def __contains__(self, run_hash: object) -> bool:
        return run_hash in self.runs

    def __len__(self) -> int:
        return len(self.runs)

    def __iter__(self) -> Any:
        return iter(self.runs)

    def add(self, records: Iterable[dict[str, Any]]) -> None:
        """Wait for these records' runs (each trained in the foreground elsewhere)."""
        for record in records:
            self.runs[record["hash"]] = {"id": record["id"], "driver_pid": record.get("driver_pid")}

    def ended(self, history: Any) -> list[dict[str, Any]]:
        """The records of watched runs that ``gaptui train`` no longer holds (filed by it, or orphaned: still
        ``running`` with neither its process nor its worker alive), no longer watched from now on."""
        if not self.runs:
            return []
        statuses = history.statuses()
        out = []
        for run_hash in list(self.runs):
            if statuses.get(run_hash) == "running":
                record = history.find(run_hash)
                if record is not None and in_foreground(record):
                    continue
            del self.runs[run_hash]
            record = history.find(run_hash)
            if record is not None:
                out.append(record)
        return out


def foreground_line(records: Iterable[dict[str, Any]], what: str) -> str:
    """One line naming runs trained by a foreground ``gaptui train`` and what the manager does about them
    (``what``), "" when there are none."""
    records = list(records)
    if not records:
        return ""
    pids = sorted({str(r.get("driver_pid")) for r in records if r.get("driver_pid")})
    by = f"`gaptui train` (pid {', '.join(pids)})" if pids else "`gaptui train`"
    ids = ", ".join(r["id"] for r in records[:6]) + (" ..." if len(records) > 6 else "")
    return f"{len(records)} run(s) trained in the foreground by {by}, not by this manager: {ids}; {what}"


class Recovery:
    """Re-attaching, filing and waiting for runs this scheduler did not start (a part of the Scheduler)."""

    history: Any
    slots: list[Slot]
    running: dict[str, Job]
    finished: list[dict[str, Any]]
    refiled: list[str]
    repro_base: dict[str, Any]
    listener: Listener | None
    watched: WatchedRuns
    foreground: list[dict[str, Any]]
    _status: Callable[..., None]
    _finish: Callable[..., None]
    _code_from_files: Callable[[Path, float | None], int | None]

    def recover(self) -> tuple[list[str], list[str]]:
        """Re-attach live workers left ``running`` by a previous manager and file the dead ones.

        Returns ``(reattached, interrupted)`` run ids; runs whose worker finished meanwhile are filed from their
        files (see :meth:`_finish`) and listed in :attr:`refiled`. A run a foreground ``gaptui train`` may still
        be training is never adopted: it is listed in :attr:`foreground`.
        """
        reattached, requeued = [], []
        # Runs of one pack share their worker's pid (and, re-attached, one slot).
        records = [
            r for r in self.history.records() if r["status"] == "running" and r.get("backend", "local") == "local"
        ]  # runs on another backend (a Slurm job) are that backend's to re-attach
        packs: dict[int, list[str]] = {}
        for record in records:
            if record.get("pid"):
                packs.setdefault(record["pid"], []).append(record["hash"])
        pack_slots: dict[int, Slot] = {}
        for record in records:
            if in_foreground(record):
                self.foreground.append(record)
                continue
            spec = load_spec(record["spec"])
            pid = record.get("pid")
            pack = tuple(packs.get(pid, ())) if pid else ()
            slot = next((s for s in self.slots if s.name == record.get("slot") and s.busy is None), None)
            here = record.get("host") in (None, "", self.repro_base["host"])  # a pid of another host is not ours
            if pid and here and pid_alive(pid, record["run_dir"]):
                slot = pack_slots.get(pid) or slot or Slot(record.get("slot") or "attached", {})
                pack_slots[pid] = slot
                slot.busy = slot.busy or record["hash"]
                job = Job(spec, record["hash"], Path(record["run_dir"]), slot, pid, None, pack=pack)
                job.started = float(record.get("started_ts") or time.time())
                self.running[record["hash"]] = job
                reattached.append(record["id"])
            elif not worker_gone(record):
                continue  # its worker holds the folder's lock, or runs on another host: not ours to file
            elif self._file_orphan(record, slot, pack):
                self.refiled.append(record["id"])
            else:
                requeued.append(record["id"])
        return reattached, requeued

    def _file_orphan(self, record: dict[str, Any], slot: Slot | None = None, pack: tuple[str, ...] = ()) -> bool:
        """File a ``running`` record whose worker is gone: from what the worker wrote when it got to its end (True),
        else ``interrupted`` (its checkpoint resumes it when it is queued again)."""
        code = self._code_from_files(Path(record["run_dir"]), record.get("started_ts"))
        if code is None:
            self._status(record["hash"], status="interrupted", pid=None)
            return False
        spec = load_spec(record["spec"])
        job = Job(spec, record["hash"], Path(record["run_dir"]), slot or Slot("recovered", {}), 0, None, pack=pack)
        job.started = float(record.get("started_ts") or 0)
        self._finish(job, code, requeue=False)
        return True

    def watch(self, records: list[dict[str, Any]]) -> None:
        """Wait for these runs, trained by a foreground ``gaptui train``: :meth:`pending` until it filed each, then
        listed in :attr:`finished`; their dependants wait for them; never started, stopped or filed here."""
        self.watched.add(records)

    def _check_watched(self) -> None:
        for record in self.watched.ended(self.history):
            if record["status"] == "running":  # its gaptui train and worker died without filing it
                self._file_orphan(record)
                record = self.history.find(record["hash"]) or record
            fields = {k: record.get(k) for k in ("status", "error", "metrics", "duration", "finished", "pid")}
            self.finished.append({"hash": record["hash"], **fields})
            if self.listener:
                self.listener("status", record["hash"], fields)
