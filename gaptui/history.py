"""Run history: a TinyDB file in the workspace.

One manager (``gaptui run``, the terminal app) holds the workspace lock at a time; short writers (``tag``,
``note``, a foreground ``train``) may write while it runs. Every write is a read-modify-write under a short lock
on the history file alone (``history.lock``), and atomic (temporary file, fsync, rename, fsync of the folder), so
a SIGKILL at any moment leaves either the old or the new file, never a torn one, and no writer loses another's
change. A corrupt file (not JSON, not UTF-8, the wrong shape) is reported in one line and kept as it is.
Read-only opens show a record left ``running`` by a killed ``gaptui train`` or manager as ``interrupted`` once its
worker is gone (:func:`shown`); the next manager records it so.

A record (schema 2) names its task family (``task``) and holds the run's coordinates in ``axes`` (the keys the
family declares, e.g. ``dataset``/``noise``/``model`` for alignment), its ``seed``, full ``spec``, the run hashes
it ``depends`` on, its status, metrics and bookkeeping. A schema-1 file (alignment only, with ``dataset``,
``noise`` and ``model`` at the top level) is upgraded in place the first time it is opened for writing, after a
copy of the old file is kept as ``history.v1.json`` (or ``history.v1.N.json``); read-only opens upgrade the
records in memory and leave the file alone. Records are :class:`gaptui.record.Record` (a ``TypedDict``: the stored
mapping itself, so reading an existing store loses nothing).
"""

from __future__ import annotations

import errno
import os
import shutil
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tinydb import Query, TinyDB
from tinydb.storages import Storage

from engine.errors import GaptuiError, did_you_mean
from engine.files import FileLock, atomic_write_text, clean_stale_temps, fsync_dir, locked, os_error
from engine.tasks import DEFAULT_TASK
from gaptui.processes import worker_gone
from gaptui.record import STATUSES, Record, record_family
from gaptui.workspace import Workspace

__all__ = ["STATUSES", "Record", "History", "read_records", "shown", "upgrade_record"]

SCHEMA_VERSION = 2
#: Statuses after which a run is not re-queued by a plain re-run of the same grid.
FINAL = ("done",)


class AtomicJSONStorage(Storage):
    """TinyDB storage that replaces the whole file atomically on every write and re-reads only on change."""

    def __init__(self, path: str | os.PathLike[str], read_only: bool = False) -> None:
        self.path = Path(path)
        self.read_only = read_only
        self._cache: dict[str, Any] | None = None
        self._stamp: tuple[int, int, int] | None = None

    def read(self) -> dict[str, Any] | None:
        try:
            st = self.path.stat()
            # Every write renames a new file into place, so the inode tells a change apart even within one tick.
            stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
            if self._cache is not None and stamp == self._stamp:
                return self._cache
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return None
        except IsADirectoryError:
            raise GaptuiError(f"history file {self.path} is a directory; move it aside") from None
        except OSError as exc:
            raise os_error(exc, "reading the history") from None
        data = parse_history(raw, self.path)
        if data is None:
            return None
        self._cache, self._stamp = data, stamp
        return data

    def write(self, data: dict[str, Any]) -> None:
        import json

        if self.read_only:
            raise GaptuiError(f"history {self.path} is open read-only")
        try:
            atomic_write_text(self.path, json.dumps(data, separators=(",", ":")))
            fsync_dir(self.path.parent)
            st = self.path.stat()
        except OSError as exc:
            raise os_error(exc, "writing the history (it was left as it was)") from None
        self._cache, self._stamp = data, (st.st_ino, st.st_mtime_ns, st.st_size)

    def close(self) -> None:
        pass


def parse_history(raw: bytes, path: Path) -> dict[str, Any] | None:
    """The history document in ``raw``, checked for the shape gaptui writes; one-line errors otherwise."""
    import json

    kept = "it was left untouched: move it aside to start a new history"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise GaptuiError(f"history file {path} is corrupt (not UTF-8 text); {kept}") from None
    if not text.strip():
        return None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise GaptuiError(f"history file {path} is corrupt ({exc.msg} at line {exc.lineno}); {kept}") from None
    if not isinstance(data, dict):
        raise GaptuiError(f"history file {path} is corrupt (not a JSON object); {kept}")
    for table, rows in data.items():
        if not isinstance(rows, dict) or not all(isinstance(r, dict) for r in rows.values()):
            raise GaptuiError(f"history file {path} is corrupt (table '{table}' is not a table of records); {kept}")
    for doc_id, record in (data.get("runs") or {}).items():
        missing = [k for k in RECORD_KEYS if not isinstance(record.get(k), str)]
        if missing:
            raise GaptuiError(
                f"history file {path} is corrupt (run record {doc_id} lacks {', '.join(missing)}); {kept}"
            )
    return data


#: Keys every run record must hold (as strings) for any command to use it.
RECORD_KEYS = ("id", "hash", "status")


class WorkspaceLock:
    """Exclusive lock of a workspace for the one manager process allowed to schedule runs in it."""

    def __init__(self, ws: Workspace, purpose: str = "gaptui") -> None:
        self.path = ws.root / "manager.lock"
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
        try:
            if write:
                check_workspace(ws.root)
                ws.root.mkdir(parents=True, exist_ok=True)
            if self.lock is not None:
                clean_stale_temps(ws.root, STALE_TEMPS)
            self.storage = AtomicJSONStorage(ws.history, read_only=not write)
            self.db = TinyDB(storage=lambda: self.storage)  # type: ignore[arg-type]
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
            with locked(self.ws.root / "history.lock", self.purpose):
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
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    def __enter__(self) -> History:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------------------------------ queries

    def records(self) -> list[Record]:
        return [self._loaded(r) for r in self.runs.all()]

    def _loaded(self, record: Mapping[str, Any]) -> Record:
        """A record as callers use it: ``run_dir`` absolute. Stored relative to the workspace, so a copied or
        moved workspace opens its own runs (an absolute path from older files that no longer exists falls back
        to the workspace's own folder of that run); in the current schema (:func:`upgrade_record`). Read-only,
        a ``running`` record whose worker is gone reads ``interrupted`` (:func:`shown`); writers see what is
        stored, and the next manager's recovery files it."""
        out = upgrade_record(record)
        run_dir = out.get("run_dir")
        if isinstance(run_dir, str) and run_dir:
            path = Path(run_dir)
            if not path.is_absolute():
                path = self.ws.root / path
            elif not path.exists() and (self.ws.runs / out["id"]).is_dir():
                path = self.ws.runs / out["id"]
            out["run_dir"] = str(path)
        return out if self.write else shown(out)

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
        records = self.runs.all()
        exact = [r for r in records if r["id"] == run or r["hash"] == run]
        found = exact or [r for r in records if r["id"].startswith(run)]
        if len(found) == 1:
            return self._loaded(found[0])
        if not found:
            ids = [r["id"] for r in records]
            raise GaptuiError(f"no run '{run}' in {self.ws.history}{did_you_mean(run, ids)}")
        raise GaptuiError(f"run id '{run}' is ambiguous: {', '.join(r['id'] for r in found[:5])} ...")

    def by_hash(self) -> dict[str, Record]:
        return {r["hash"]: self._loaded(r) for r in self.runs.all()}

    # ------------------------------------------------------------------------------------------ writes

    def put(self, record: Record) -> None:
        """Insert or replace the record with this ``hash`` (refused when another run has its id)."""
        with self._writing():
            self._refuse_taken_ids([record])
            self.runs.upsert(self._stored(record), Query().hash == record["hash"])

    def put_many(self, records: Iterable[Record]) -> None:
        """Insert new records in one write (a 2,000-run grid is queued with one file replacement).

        Records whose hash is already stored (or repeated in ``records``) are skipped: one run, one record.
        """
        with self._writing():
            existing = {r["hash"] for r in self.runs.all()}
            fresh: dict[str, dict[str, Any]] = {}
            for r in records:
                if r["hash"] not in existing:
                    fresh.setdefault(r["hash"], self._stored(r))
            self._refuse_taken_ids(list(fresh.values()))
            if fresh:
                self.runs.insert_multiple(list(fresh.values()))

    def _refuse_taken_ids(self, records: list[dict[str, Any]]) -> None:
        taken = {r["id"]: r["hash"] for r in self.runs.all()}
        for r in records:
            if taken.setdefault(r["id"], r["hash"]) != r["hash"]:
                raise GaptuiError(f"history {self.ws.history} already holds a different run with id {r['id']}")

    def update(self, run_hash: str, **fields: Any) -> None:
        with self._writing():
            self.runs.update(self._stored(fields), Query().hash == run_hash)

    def update_many(self, updates: dict[str, dict[str, Any]]) -> None:
        """Change fields of many records (spec hash -> fields) with one write of the file."""
        if not updates:
            return

        def apply(doc: dict[str, Any]) -> None:
            doc.update(updates[doc["hash"]])

        self.runs.update(apply, lambda doc: doc.get("hash") in updates)

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
            self.runs.update(apply, lambda doc: doc.get("hash") in by_hash)

    def remove_many(self, hashes: Iterable[str]) -> None:
        """Drop the records of runs that never started (a submission that failed), in one write."""
        gone = set(hashes)
        if gone:
            with self._writing():
                self.runs.remove(lambda doc: doc.get("hash") in gone)


#: Top-level fields of a schema-1 record that schema 2 keeps in ``axes`` (or reads from the spec).
_V1_FIELDS = ("dataset", "base", "dataset_params", "noise", "noise_model", "model")


def upgrade_record(record: Mapping[str, Any]) -> Record:
    """A copy of ``record`` in the current schema (schema-1 records were all runs of the default family)."""
    out: Record = dict(record)  # type: ignore[assignment]
    if "axes" in out:
        return _with_declared_axes(out)
    out["task"] = out.get("task") or DEFAULT_TASK
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
    written (the next manager records it, :meth:`gaptui.scheduler.Scheduler.recover`)."""
    if record.get("status") == "running" and worker_gone(record):
        return {**record, "status": "interrupted"}  # type: ignore[typeddict-item]
    return record


def read_records(ws: Workspace) -> list[Record]:
    """All run records of a workspace, without locking (safe while a manager writes: writes are atomic)."""
    check_workspace(ws.root)
    if not ws.history.exists():
        return []
    with History(ws) as history:
        return history.records()
