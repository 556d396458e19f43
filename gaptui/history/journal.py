"""The history's file: TinyDB over a JSON file plus an append-only journal of changes, every write atomic under a
short lock, compacted into the file once the journal grows; a corrupt file is reported in one line and kept."""

from __future__ import annotations

import contextlib
import gc
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tinydb import TinyDB
from tinydb.storages import Storage
from tinydb.table import Table

from engine.errors import GaptuiError
from engine.files import atomic_write_text, fsync_dir, os_error

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
