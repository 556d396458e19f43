"""The history as the manager and the commands use it: :class:`History` opened read-only or for writing under the
workspace lock, records upgraded from older schemas, records shown (a killed run's ``running`` read as
``interrupted``) and read with a note of what was left out."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from engine.errors import GaptuiError, did_you_mean
from engine.files import FileLock, clean_stale_temps, locked, os_error
from engine.tasks import task_of
from gaptui.history.journal import SCHEMA_VERSION, JournalDB, JournalStorage, gc_paused, history_stamp, journal_path
from gaptui.processes import in_foreground, worker_gone
from gaptui.record import Record, left_out_line, record_family, record_fault
from gaptui.workspace import Workspace


class WorkspaceLock:
    """Exclusive lock of a workspace for the one manager process allowed to schedule runs in it."""

    def __init__(self, ws: Workspace, purpose: str = "gaptui") -> None:
        self.path = ws.manager_lock
        self._lock = FileLock(self.path, purpose)

    def acquire(self) -> WorkspaceLock:
        check_workspace(self.path.parent)
        try:
            taken = self._lock.acquire()
        except OSError as exc:
            raise os_error(exc, "locking the workspace") from None
        if not taken:
            raise GaptuiError(
                f"workspace {self.path.parent} is in use by {self._lock.current_holder()}; wait for it or use "
                "another --workspace (read-only commands such as history, show and table still work)"
            )
        return self

    def release(self) -> None:
        self._lock.release()

    def __enter__(self) -> WorkspaceLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def check_workspace(root: Path) -> None:
    """One line when the workspace path cannot be a workspace (a file, or under one)."""
    for parent in (root, *root.parents):
        if parent.exists():
            if not parent.is_dir():
                raise GaptuiError(f"workspace {root}: {parent} is a file, not a folder; choose another --workspace")
            return


#: Temporary files a killed writer may leave in a workspace, removed when a manager opens it.
STALE_TEMPS = (
    ".history.json.*.tmp",
    ".calibration.json.*.tmp",
    "datasets/.tmp-*",
    "datasets/properties/.tmp-*",
    "datasets/molecules/.tmp-*",
    "datasets/pe/*/.tmp-*",
)


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


class History:
    """The run records of a workspace, keyed by run id (the first 12 hex digits of the spec hash).

    ``History(ws, write=True)`` is a manager: it takes the workspace lock (a second manager gets a clear error).
    ``History(ws, write=True, exclusive=False)`` writes without it (``tag``, ``note``, ``train``), each write under
    the short history lock. ``History(ws)`` is read-only and never locks.
    """

    def __init__(self, ws: Workspace, *, write: bool = False, purpose: str = "gaptui", exclusive: bool = True) -> None:
        self.ws = ws
        self.write = write
        self.purpose = purpose
        self.lock = WorkspaceLock(ws, purpose).acquire() if write and exclusive else None
        self._index: tuple[int, dict[str, int]] | None = None
        self._root = str(ws.root)
        #: Records left out of what this history was asked for (a field of the wrong type): id -> warning line.
        self.left_out: dict[str, str] = {}
        #: Stored records (the objects themselves, by ``id()``) that passed :func:`record_fault`.
        self._passed: dict[int, Mapping[str, Any]] = {}
        try:
            if write:
                check_workspace(ws.root)
                ws.root.mkdir(parents=True, exist_ok=True)
            if self.lock is not None:
                clean_stale_temps(ws.root, STALE_TEMPS)
            self.storage = JournalStorage(ws.history, read_only=not write)
            self.db = JournalDB(storage=lambda: self.storage)  # type: ignore[arg-type]
            self.runs = self.db.table("runs", cache_size=0)
            self._check_schema()
        except OSError as exc:
            self.close()
            raise os_error(exc, "opening the workspace") from None
        except BaseException:
            self.close()
            raise

    @contextmanager
    def _writing(self) -> Iterator[None]:
        """The short lock around one read-modify-write of the file."""
        try:
            with locked(self.ws.history_lock, self.purpose):
                yield
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES):
                raise os_error(exc, "writing the history (it was left as it was)") from None
            raise

    def _check_schema(self) -> None:
        data = self.storage.read()
        meta = (data or {}).get("meta", {})
        stored = next(iter(meta.values()), {}).get("schema") if meta else None
        if stored is None:
            if self.write:
                with self._writing():
                    if not self.db.table("meta").all():
                        self.db.table("meta").insert({"schema": SCHEMA_VERSION, "created": now()})
        elif not isinstance(stored, int):
            raise GaptuiError(f"history file {self.ws.history} is corrupt (schema {stored!r} is not a number)")
        elif stored > SCHEMA_VERSION:
            raise GaptuiError(
                f"history {self.ws.history} has schema {stored}, newer than this gaptui understands "
                f"({SCHEMA_VERSION}); upgrade gaptui"
            )
        elif stored < SCHEMA_VERSION and self.write:
            with self._writing():
                data = self.storage.read() or {}
                if next(iter(data.get("meta", {}).values()), {}).get("schema") == stored:
                    self._migrate(data, stored)

    def _migrate(self, data: dict[str, Any], stored: int) -> None:
        """Upgrade the file in place (one atomic write) after keeping a copy of it; no record is dropped."""
        backup = self.ws.history.with_name(f"history.v{stored}.json")
        n = 1
        while backup.exists():
            backup = self.ws.history.with_name(f"history.v{stored}.{n}.json")
            n += 1
        shutil.copy2(self.ws.history, backup)
        runs = {doc_id: upgrade_record(record) for doc_id, record in (data.get("runs") or {}).items()}
        meta_id, meta = next(iter(data["meta"].items()))
        meta = {**meta, "schema": SCHEMA_VERSION, "migrated": {"from": stored, "at": now(), "backup": backup.name}}
        self.storage.write({**data, "runs": runs, "meta": {meta_id: meta}})

    def close(self) -> None:
        """Fold the journal into ``history.json`` (a writer; best effort: the journal stays the truth when it cannot),
        then release the workspace lock."""
        storage = getattr(self, "storage", None)
        if self.write and storage is not None:
            with contextlib.suppress(GaptuiError, OSError), self._writing():
                storage.compact()
            self.storage = None  # type: ignore[assignment]
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    def stamp(self) -> tuple[Any, ...]:
        """Changes whenever the stored history does (:func:`history_stamp`)."""
        return history_stamp(self.ws.history)

    def _ids(self) -> dict[str, int]:
        """Spec hash -> TinyDB document id of every record (cached until the history changes, except by this
        object's own writes that keep every record's hash: an update need not rebuild it)."""
        raw = self.runs._read_table()
        generation = self.storage.generation
        if self._index is None or self._index[0] != generation:
            self._index = (generation, {doc["hash"]: int(doc_id) for doc_id, doc in raw.items()})
        return self._index[1]

    def _kept_ids(self) -> None:
        """After a write that changed no record's hash: the cached index is still right."""
        if self._index is not None:
            self._index = (self.storage.generation, self._index[1])

    def __enter__(self) -> History:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------------------------------ queries

    def records(self) -> list[Record]:
        """Every record readers can use; one with a field of the wrong type (:func:`gaptui.record.record_fault`) is
        left out (and on disk as it is), its warning line in :attr:`left_out`."""
        with gc_paused():
            table = self.runs._read_table()
            if len(self._passed) > 2 * len(table) + 1024:  # records replaced since: forget them
                current = {id(r) for r in table.values()}
                self._passed = {i: r for i, r in self._passed.items() if i in current}
            return [r for r in map(self._readable, table.values()) if r is not None]

    def _readable(self, record: Mapping[str, Any]) -> Record | None:
        """:meth:`_loaded`, or None for a record with a fault (remembered in :attr:`left_out`). A stored record
        that passed once is not checked again while it is the same object: every change to the file or the journal
        reads new objects, and this process's own writes are typed (they never make a record faulty)."""
        if self._passed.get(id(record)) is not record:
            fault = record_fault(record)
            if fault is not None:
                self.left_out[str(record.get("id"))] = left_out_line(record, fault)
                return None
            self._passed[id(record)] = record
        return self._loaded(record)

    def _loaded(self, record: Mapping[str, Any]) -> Record:
        """A record as callers use it (a copy): ``run_dir`` absolute. Stored relative to the workspace, so a copied
        or moved workspace opens its own runs (an absolute path from older files that no longer exists falls back
        to the workspace's own folder of that run); in the current schema (:func:`upgrade_record`). Read-only,
        a ``running`` record whose worker is gone reads ``interrupted`` (:func:`shown`); writers see what is
        stored, and the next manager's recovery files it."""
        out = upgrade_record(record)
        run_dir = out.get("run_dir")
        if isinstance(run_dir, str) and run_dir:
            # os.path, not pathlib: this runs once per record of every read (20,000 in a large study)
            if not os.path.isabs(run_dir):
                out["run_dir"] = os.path.join(self._root, run_dir)
            elif not os.path.exists(run_dir) and (self.ws.runs / out["id"]).is_dir():
                out["run_dir"] = str(self.ws.runs / out["id"])
        return out if self.write else shown(out)

    def find(self, run_hash: str) -> Record | None:
        """The record of the run with this spec hash, or None (one record read, whatever the history's size)."""
        doc_id = self._ids().get(run_hash)
        return None if doc_id is None else self._loaded(self.runs._read_table()[str(doc_id)])

    def changes(self) -> list[Record] | None:
        """The records changed (by anyone) since the last call, read from the journal's new lines; None when the
        whole history was reloaded or a record was removed (read :meth:`records` again)."""
        raw = self.runs._read_table()
        changed = self.storage.take_changes("runs")
        if changed is None or any(k not in raw for k in changed):
            return None
        return [r for r in (self._readable(raw[k]) for k in sorted(changed, key=int)) if r is not None]

    def statuses(self) -> dict[str, str]:
        """Spec hash -> stored status of every record (no record copied: cheap at 20,000 records)."""
        return {doc["hash"]: doc["status"] for doc in self.runs._read_table().values()}

    def _stored(self, fields: dict[str, Any]) -> dict[str, Any]:
        run_dir = fields.get("run_dir")
        if isinstance(run_dir, str) and Path(run_dir).is_absolute():
            try:
                return {**fields, "run_dir": str(Path(run_dir).relative_to(self.ws.root))}
            except ValueError:
                return fields  # a folder outside the workspace (``train --out``) stays absolute
        return fields

    def get(self, run: str) -> Record:
        """A record by run id, unique id prefix, or full hash."""
        records = list(self.runs._read_table().values())
        exact = [r for r in records if r["id"] == run or r["hash"] == run]
        found = exact or [r for r in records if r["id"].startswith(run)]
        if len(found) == 1:
            fault = record_fault(found[0])
            if fault is not None:
                raise GaptuiError(f"{left_out_line(found[0], fault)}; fix or remove it in {self.ws.history}")
            return self._loaded(found[0])
        if not found:
            ids = [r["id"] for r in records]
            raise GaptuiError(f"no run '{run}' in {self.ws.history}{did_you_mean(run, ids)}")
        raise GaptuiError(f"run id '{run}' is ambiguous: {', '.join(r['id'] for r in found[:5])} ...")

    def by_hash(self) -> dict[str, Record]:
        return {r["hash"]: r for r in self.records()}

    # ------------------------------------------------------------------------------------------ writes

    def put(self, record: Record) -> None:
        """Insert or replace the record with this ``hash`` (refused when another run has its id)."""
        with self._writing():
            self._refuse_taken_ids([record])
            doc_id = self._ids().get(record["hash"])
            if doc_id is None:
                self.runs.insert(self._stored(record))
            else:
                self.runs.update(self._stored(record), doc_ids=[doc_id])

    def put_many(self, records: Iterable[Record]) -> None:
        """Insert new records in one write (a 2,000-run grid is queued with one file replacement).

        Records whose hash is already stored (or repeated in ``records``) are skipped: one run, one record.
        """
        with self._writing():
            existing = self._ids()
            fresh: dict[str, dict[str, Any]] = {}
            for r in records:
                if r["hash"] not in existing:
                    fresh.setdefault(r["hash"], self._stored(r))
            self._refuse_taken_ids(list(fresh.values()))
            if fresh:
                self.runs.insert_multiple(list(fresh.values()))

    def _refuse_taken_ids(self, records: list[dict[str, Any]]) -> None:
        taken = {r["id"]: r["hash"] for r in self.runs._read_table().values()}
        for r in records:
            if taken.setdefault(r["id"], r["hash"]) != r["hash"]:
                raise GaptuiError(f"history {self.ws.history} already holds a different run with id {r['id']}")

    def update(self, run_hash: str, **fields: Any) -> None:
        with self._writing():
            doc_id = self._ids().get(run_hash)
            if doc_id is not None and fields.get("hash", run_hash) == run_hash:
                self.runs.update(self._stored(fields), doc_ids=[doc_id])
                self._kept_ids()
            elif doc_id is not None:
                self.runs.update(self._stored(fields), doc_ids=[doc_id])

    def update_many(self, updates: dict[str, dict[str, Any]]) -> None:
        """Change fields of many records (spec hash -> fields) with one write of the file."""
        if not updates:
            return

        def apply(doc: dict[str, Any]) -> None:
            doc.update(updates[doc["hash"]])

        with self._writing():
            ids = self._ids()
            doc_ids = [ids[h] for h in updates if h in ids]
            if doc_ids:
                self.runs.update(apply, doc_ids=doc_ids)
                if all(u.get("hash", h) == h for h, u in updates.items()):
                    self._kept_ids()

    def restore_many(self, records: Iterable[Record]) -> None:
        """Put records back exactly as they were read (fields added since are dropped), in one write."""
        by_hash = {r["hash"]: self._stored(r) for r in records}
        if not by_hash:
            return

        def apply(doc: dict[str, Any]) -> None:
            old = by_hash[doc["hash"]]
            doc.clear()
            doc.update(old)

        with self._writing():
            ids = self._ids()
            doc_ids = [ids[h] for h in by_hash if h in ids]
            if doc_ids:
                self.runs.update(apply, doc_ids=doc_ids)

    def remove_many(self, hashes: Iterable[str]) -> None:
        """Drop the records of runs that never started (a submission that failed), in one write."""
        gone = set(hashes)
        if gone:
            with self._writing():
                ids = self._ids()
                doc_ids = [ids[h] for h in gone if h in ids]
                if doc_ids:
                    self.runs.remove(doc_ids=doc_ids)


#: Top-level fields of a schema-1 record that schema 2 keeps in ``axes`` (or reads from the spec).
_V1_FIELDS = ("dataset", "base", "dataset_params", "noise", "noise_model", "model")


def upgrade_record(record: Mapping[str, Any]) -> Record:
    """A copy of ``record`` in the current schema (schema-1 records were all runs of the family before families,
    :data:`engine.tasks.LEGACY_TASK`, as :func:`~engine.tasks.task_of` reads them)."""
    out: Record = dict(record)  # type: ignore[assignment]
    if "axes" in out:
        return _with_declared_axes(out)
    out["task"] = task_of(out)
    out["axes"] = {"dataset": out.get("dataset"), "noise": out.get("noise"), "model": out.get("model")}
    out.setdefault("depends", [])
    for key in _V1_FIELDS:
        out.pop(key, None)
    return _with_declared_axes(out)


def _with_declared_axes(record: Record) -> Record:
    """``record`` with the axes its family declared after it was filed (an ``Axis.of_spec``), read from its spec."""
    fam = record_family(record)
    spec = record.get("spec")
    if fam is None or not isinstance(spec, Mapping):
        return record
    missing = [a for a in fam.axes if a.of_spec is not None and a.key not in record["axes"]]
    if missing:
        record["axes"] = {**record["axes"], **{a.key: a.of_spec(spec) for a in missing}}
    return record


def shown(record: Record) -> Record:
    """``record`` as readers show it: ``interrupted`` when it is stored ``running`` and its local worker is gone
    (:func:`gaptui.processes.worker_gone`: the ``gaptui train`` or manager that drove it was killed); nothing is
    written (the next manager records it, :meth:`gaptui.scheduler.Scheduler.recover`). A foreground ``gaptui train``
    still alive files its run itself, its worker gone or not (:func:`gaptui.processes.in_foreground`)."""
    if record.get("status") == "running" and worker_gone(record) and not in_foreground(record):
        return {**record, "status": "interrupted"}  # type: ignore[typeddict-item]
    return record


def read_records(ws: Workspace, warn: Callable[[str], None] | None = None) -> list[Record]:
    """All run records of a workspace, without locking (safe while a manager writes: writes are atomic). A record
    with a field of the wrong type is left out, named once per process in a ``warning:`` line (``warn``, by
    default on stderr)."""
    check_workspace(ws.root)
    if not ws.history.exists() and not journal_path(ws.history).exists():
        return []
    with History(ws) as history:
        records = history.records()
        warn_left_out(history, warn)
        return records


#: Records already named as left out by this process (one command), by (history file, record id): each once.
warned: set[tuple[str, str]] = set()


def warn_left_out(history: History, warn: Callable[[str], None] | None = None) -> None:
    """Say (``warn``, default a ``warning:`` line on stderr) each record ``history`` left out, once per process."""
    if warn is None:
        from gaptui.cli.common import warn as cli_warn

        warn = cli_warn
    for ident, line in history.left_out.items():
        key = (str(history.ws.history), ident)
        if key not in warned:
            warned.add(key)
            warn(line)
