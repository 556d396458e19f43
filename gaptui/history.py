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

import contextlib
import errno
import gc
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tinydb import TinyDB
from tinydb.storages import Storage
from tinydb.table import Table

from engine.errors import GaptuiError, did_you_mean
from engine.files import FileLock, atomic_write_text, clean_stale_temps, fsync_dir, locked, os_error
from engine.tasks import task_of
from gaptui.processes import in_foreground, worker_gone
from gaptui.record import STATUSES, Record, left_out_line, record_family, record_fault
from gaptui.workspace import Workspace

__all__ = ["STATUSES", "Record", "History", "read_records", "shown", "upgrade_record"]

SCHEMA_VERSION = 2
#: Statuses after which a run is not re-queued by a plain re-run of the same grid.
FINAL = ("done",)


#: The journal beside ``history.json``: one JSON line per write, the documents it changed (``null``: removed).
JOURNAL_NAME = "history.journal.jsonl"
#: The journal is folded into ``history.json`` once it holds more than the file's size in bytes (and at least
#: this many), so a reader never parses more than about twice the history, and a writer's cost per write is one
#: appended line plus, amortised, a constant share of one whole-file write.
COMPACT_MIN_BYTES = 4 << 20


def journal_path(history: Path) -> Path:
    return Path(history).with_name(JOURNAL_NAME)


def history_stamp(history: Path) -> tuple[Any, ...]:
    """What changes whenever the history does (the file and its journal): cheap to poll."""
    out: list[Any] = []
    for path in (Path(history), journal_path(history)):
        try:
            st = path.stat()
            out.append((st.st_ino, st.st_mtime_ns, st.st_size))
        except FileNotFoundError:
            out.append(None)
    return tuple(out)


class JournalStorage(Storage):
    """TinyDB storage of ``history.json`` plus an append-only journal of the documents each write changed.

    A write that knows the documents it changed (:class:`JournalTable`: every write of :class:`History`) appends
    one line to the journal and fsyncs it, so filing a run's result costs the same at 20,000 records as at 200.
    When the journal outgrows the file it is folded in: the whole document is written atomically (temporary file,
    fsync, rename, fsync of the folder) and then the journal is emptied. A SIGKILL at any moment leaves a file and
    a journal whose replay gives every write that returned: a torn last line (a writer killed mid-append) is not a
    write, ignored by readers and cut off by the next writer; replaying lines the file already holds (a kill between
    the rename and the emptying) changes nothing, as each line holds whole documents. Readers re-read only what
    changed: nothing when neither file did, the new lines when only the journal grew.
    """

    def __init__(self, path: str | os.PathLike[str], read_only: bool = False) -> None:
        self.path = Path(path)
        self.journal = journal_path(self.path)
        self.read_only = read_only
        self._cache: dict[str, Any] | None = None
        self._stamp: tuple[int, int, int] | None = None
        self._offset = 0  # bytes of the journal replayed into the cache (always the end of a whole line)
        #: Bumped on every change of the cached document, so callers may cache what they derive from it.
        self.generation = 0
        #: Table -> ids of the documents changed since :meth:`take_changes`; None: the whole document was reloaded.
        self._changes: dict[str, set[str]] | None = None

    # ------------------------------------------------------------------------------------------ reading

    def _file_stamp(self) -> tuple[int, int, int] | None:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise os_error(exc, "reading the history") from None
        # Every full write renames a new file into place, so the inode tells a change apart even within one tick.
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def read(self) -> dict[str, Any] | None:
        for _ in range(50):
            stamp = self._file_stamp()
            if self._cache is None or stamp != self._stamp:
                cache, offset = self._load_file(), 0
            else:
                cache, offset = self._cache, self._offset
            replayed = self._replay(cache, offset)
            if replayed is None:  # the journal was cut below what this reader replayed: start over
                self._cache, self._stamp, self._changes = None, None, None
                continue
            if self._file_stamp() != stamp:  # folded in while we read: the journal we read may belong to a newer file
                self._cache, self._stamp = None, None
                continue
            cache, new_offset = replayed
            if cache is not self._cache:
                self._changes = None
            if cache is not self._cache or new_offset != self._offset:
                self.generation += 1
            self._cache, self._stamp, self._offset = cache, stamp, new_offset
            return cache if cache else None
        raise GaptuiError(f"history {self.path} kept changing while it was read; try again")

    def _load_file(self) -> dict[str, Any]:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        except IsADirectoryError:
            raise GaptuiError(f"history file {self.path} is a directory; move it aside") from None
        except OSError as exc:
            raise os_error(exc, "reading the history") from None
        return parse_history(raw, self.path) or {}

    def _replay(self, cache: dict[str, Any], offset: int) -> tuple[dict[str, Any], int] | None:
        """``cache`` with the journal's whole lines after ``offset`` applied, and the new offset (None: cut)."""
        import json

        try:
            with open(self.journal, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                if size < offset:
                    return None
                if size == offset:
                    return cache, offset
                fh.seek(offset)
                chunk = fh.read(size - offset)
        except FileNotFoundError:
            return (cache, offset) if offset == 0 else None
        except OSError as exc:
            raise os_error(exc, "reading the history's journal") from None
        end = chunk.rfind(b"\n")
        if end < 0:
            return cache, offset  # only a torn line: a writer killed mid-append (or still appending)
        for number, line in enumerate(chunk[:end].split(b"\n"), start=1):
            try:
                entry = json.loads(line)
                tables = entry["tables"]
                for name, docs in tables.items():
                    table = cache.setdefault(name, {})
                    self._note(name, docs)
                    for doc_id, doc in docs.items():
                        if doc is None:
                            table.pop(doc_id, None)
                        else:
                            if name == "runs":
                                _check_record(doc, doc_id, self.journal)
                            table[doc_id] = doc
            except (ValueError, KeyError, TypeError, AttributeError):
                raise GaptuiError(
                    f"history journal {self.journal} is corrupt (line {number} after byte {offset} is not a "
                    "journal entry); it was left untouched: move it aside to read the history without it"
                ) from None
        return cache, offset + end + 1

    # ------------------------------------------------------------------------------------------ writing

    def _note(self, table: str, doc_ids: Iterable[str]) -> None:
        if self._changes is not None:
            self._changes.setdefault(table, set()).update(doc_ids)

    def take_changes(self, table: str) -> set[str] | None:
        """Ids of ``table``'s documents changed since the last call (None: reloaded, take everything)."""
        changes, self._changes = self._changes, {}
        return None if changes is None else changes.get(table, set())

    def write(self, data: dict[str, Any], *, fold: bool = False) -> None:
        """Replace the whole file atomically and empty the journal (it is all in the file now); ``fold``: the
        document is what the file and journal already held (nothing changed for :meth:`take_changes`)."""
        import json

        if self.read_only:
            raise GaptuiError(f"history {self.path} is open read-only")
        try:
            atomic_write_text(self.path, json.dumps(data, separators=(",", ":")))
            fsync_dir(self.path.parent)
            if self.journal.exists() and self.journal.stat().st_size:
                with open(self.journal, "r+b") as fh:
                    fh.truncate(0)
                    os.fsync(fh.fileno())
            stamp = self._file_stamp()
        except OSError as exc:
            self._forget()
            raise os_error(_on_history(exc, self.path), "writing the history (it was left as it was)") from None
        if not fold:
            self._changes = None
        self._cache, self._stamp, self._offset = data, stamp, 0
        self.generation += 1

    def commit(self, data: dict[str, Any], changes: dict[str, dict[str, Any]]) -> None:
        """Record ``changes`` (table -> doc id -> document or None), already applied to ``data`` (the document
        :meth:`read` returned), as one appended journal line; fold the journal in once it is large."""
        import json

        if self.read_only:
            raise GaptuiError(f"history {self.path} is open read-only")
        line = (json.dumps({"tables": changes}, separators=(",", ":")) + "\n").encode("utf-8")
        start = self._offset
        try:
            created = not self.journal.exists()
            fd = os.open(self.journal, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                size = os.fstat(fd).st_size
                if size > start:  # a writer killed mid-append left a torn line: it is not a write, cut it off
                    tail = os.pread(fd, size - start, start)
                    if b"\n" in tail:
                        raise GaptuiError(f"history {self.path} was written by another process during this write")
                    os.ftruncate(fd, start)
                try:
                    os.write(fd, line)
                    os.fsync(fd)
                    if created:
                        fsync_dir(self.path.parent)
                except OSError:
                    with contextlib.suppress(OSError):
                        os.ftruncate(fd, start)
                    raise
                size = os.fstat(fd).st_size
            finally:
                os.close(fd)
        except OSError as exc:
            self._forget()
            raise os_error(_on_history(exc, self.path), "writing the history (it was left as it was)") from None
        except BaseException:
            self._forget()
            raise
        self._offset = start + len(line)
        self._cache = data
        self.generation += 1
        for table, docs in changes.items():
            self._note(table, docs)
        if size > max(COMPACT_MIN_BYTES, (self._stamp or (0, 0, 0))[2]):
            self.write(data, fold=True)

    def compact(self) -> None:
        """Fold a non-empty journal into the file (a writer does this when it closes)."""
        data = self.read()
        if self._offset or (self.journal.exists() and self.journal.stat().st_size):
            self.write(data or {}, fold=True)

    def _forget(self) -> None:
        """Drop the cache: it may hold a change that never reached the disk."""
        self._cache, self._stamp, self._offset, self._changes = None, None, 0, None
        self.generation += 1

    def close(self) -> None:
        pass


def _on_history(exc: OSError, path: Path) -> OSError:
    """``exc`` naming the history file (the journal is part of it) so the error line names what the user knows."""
    return OSError(exc.errno, exc.strerror, str(path)) if exc.errno else exc


class _Tracked(MutableMapping):  # type: ignore[type-arg]
    """A TinyDB table (int doc id -> document) over the stored one (str keys) that notes the documents touched."""

    def __init__(self, raw: dict[str, Any]) -> None:
        self.raw = raw
        self.touched: set[str] = set()

    def __getitem__(self, doc_id: object) -> Any:
        key = str(doc_id)
        doc = self.raw[key]
        self.touched.add(key)
        return doc

    def __setitem__(self, doc_id: object, doc: Any) -> None:
        key = str(doc_id)
        self.raw[key] = doc
        self.touched.add(key)

    def __delitem__(self, doc_id: object) -> None:
        key = str(doc_id)
        del self.raw[key]
        self.touched.add(key)

    def __contains__(self, doc_id: object) -> bool:
        return str(doc_id) in self.raw

    def __iter__(self) -> Iterator[int]:
        return (int(k) for k in self.raw)

    def __len__(self) -> int:
        return len(self.raw)


class JournalTable(Table):
    """A TinyDB table whose writes give the storage only the documents they touched (:meth:`JournalStorage.commit`).

    A write by document id touches only those documents; one that scans the table (a query) touches every
    document it read and, past half the table, is written as a whole file instead.
    """

    def _update_table(self, updater: Callable[[dict[int, Mapping]], None]) -> None:
        storage = self._storage
        if not isinstance(storage, JournalStorage):
            super()._update_table(updater)
            return
        tables = storage.read() or {}
        raw = tables.setdefault(self.name, {})
        tracked = _Tracked(raw)
        try:
            updater(tracked)  # type: ignore[arg-type]
        except BaseException:
            storage._forget()
            raise
        if len(tracked.touched) * 2 > max(len(raw), 1) and len(tracked.touched) > 64:
            storage.write(tables)
        elif tracked.touched:
            storage.commit(tables, {self.name: {k: raw.get(k) for k in tracked.touched}})
        self.clear_cache()


class JournalDB(TinyDB):
    table_class = JournalTable


_gc_pauses = 0
_gc_lock = threading.Lock()
_gc_was_enabled = False


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic collector off while a whole history is parsed or copied: those are tens of thousands of new
    containers and no cycles, and with the collector on its passes over them take about half the time of a
    20,000-record load. Counted, so that threads loading at once (the app and its manager) nest correctly."""
    global _gc_pauses, _gc_was_enabled
    with _gc_lock:
        if _gc_pauses == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_pauses += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_pauses -= 1
            if _gc_pauses == 0 and _gc_was_enabled:
                gc.enable()


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
        with gc_paused():
            data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise GaptuiError(f"history file {path} is corrupt ({exc.msg} at line {exc.lineno}); {kept}") from None
    if not isinstance(data, dict):
        raise GaptuiError(f"history file {path} is corrupt (not a JSON object); {kept}")
    for table, rows in data.items():
        if not isinstance(rows, dict) or not all(isinstance(r, dict) for r in rows.values()):
            raise GaptuiError(f"history file {path} is corrupt (table '{table}' is not a table of records); {kept}")
    for doc_id, record in (data.get("runs") or {}).items():
        _check_record(record, doc_id, path)
    return data


def _check_record(record: Any, doc_id: str, path: Path) -> None:
    if not isinstance(record, dict):
        wrong = ["lacks all"]
    else:
        missing = [k for k in RECORD_KEYS if record.get(k) is None]
        wrong = [f"lacks {', '.join(missing)}"] if missing else []
        wrong += [f"has {k} = {record[k]!r}, not text" for k in RECORD_KEYS if record.get(k) is not None
                  and not isinstance(record[k], str)]  # fmt: skip
    if wrong:
        kept = "it was left untouched: move it aside to start a new history"
        raise GaptuiError(f"history file {path} is corrupt (run record {doc_id} {', '.join(wrong)}); {kept}")


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
