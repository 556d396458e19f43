"""Run history: a TinyDB file in the workspace, written only by the manager that holds the workspace lock.

Writes are atomic (temporary file, flush, fsync, rename, fsync of the folder), so a SIGKILL at any moment
leaves either the old or the new file, never a torn one. A corrupt file is reported and kept as it is.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tinydb import Query, TinyDB
from tinydb.storages import Storage

from engine.errors import GaptuiError, did_you_mean
from gaptui.workspace import Workspace

SCHEMA_VERSION = 1
STATUSES = ("queued", "running", "done", "failed", "cancelled", "interrupted")
#: Statuses after which a run is not re-queued by a plain re-run of the same grid.
FINAL = ("done",)


class AtomicJSONStorage(Storage):
    """TinyDB storage that replaces the whole file atomically on every write and re-reads only on change."""

    def __init__(self, path: str | os.PathLike[str], read_only: bool = False) -> None:
        self.path = Path(path)
        self.read_only = read_only
        self._cache: dict[str, Any] | None = None
        self._stamp: tuple[int, int] | None = None

    def read(self) -> dict[str, Any] | None:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return None
        stamp = (st.st_mtime_ns, st.st_size)
        if self._cache is not None and stamp == self._stamp:
            return self._cache
        text = self.path.read_text()
        if not text.strip():
            return None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise GaptuiError(
                f"history file {self.path} is corrupt ({exc.msg} at line {exc.lineno}); it was left untouched: "
                "move it aside to start a new history"
            ) from None
        if not isinstance(data, dict):
            raise GaptuiError(f"history file {self.path} is corrupt (not a JSON object); it was left untouched")
        self._cache, self._stamp = data, stamp
        return data

    def write(self, data: dict[str, Any]) -> None:
        if self.read_only:
            raise GaptuiError(f"history {self.path} is open read-only")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        with open(tmp, "w") as fh:
            json.dump(data, fh, separators=(",", ":"))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)
        dir_fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        st = self.path.stat()
        self._cache, self._stamp = data, (st.st_mtime_ns, st.st_size)

    def close(self) -> None:
        pass


class WorkspaceLock:
    """Exclusive lock of a workspace for the one manager process allowed to write its history."""

    def __init__(self, ws: Workspace, purpose: str = "gaptui") -> None:
        self.path = ws.root / "manager.lock"
        self.purpose = purpose
        self._fh: Any = None

    def acquire(self) -> WorkspaceLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fh = open(self.path, "a+")  # noqa: SIM115 - held for the life of the lock
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "another process"
            fh.close()
            raise GaptuiError(
                f"workspace {self.path.parent} is in use by {holder}; wait for it or use another --workspace "
                "(read-only commands such as history, show and table still work)"
            ) from None
        fh.seek(0)
        fh.truncate()
        fh.write(f"{self.purpose} (pid {os.getpid()} on {socket.gethostname()}, since {time.strftime('%H:%M:%S')})")
        fh.flush()
        self._fh = fh
        return self

    def release(self) -> None:
        if self._fh is not None:
            fcntl.flock(self._fh.fileno(), fcntl.LOCK_UN)
            self._fh.close()
            self._fh = None

    def __enter__(self) -> WorkspaceLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


class History:
    """The run records of a workspace, keyed by run id (the first 12 hex digits of the spec hash).

    ``History(ws, write=True)`` takes the workspace lock (a second manager gets a clear error);
    ``History(ws)`` is read-only and never locks.
    """

    def __init__(self, ws: Workspace, *, write: bool = False, purpose: str = "gaptui") -> None:
        self.ws = ws
        self.write = write
        self.lock = WorkspaceLock(ws, purpose).acquire() if write else None
        try:
            self.storage = AtomicJSONStorage(ws.history, read_only=not write)
            self.db = TinyDB(storage=lambda: self.storage)  # type: ignore[arg-type]
            self.runs = self.db.table("runs", cache_size=0)
            self._check_schema()
        except BaseException:
            self.close()
            raise

    def _check_schema(self) -> None:
        data = self.storage.read()
        meta = (data or {}).get("meta", {})
        stored = next(iter(meta.values()), {}).get("schema") if meta else None
        if stored is None:
            if self.write:
                self.db.table("meta").insert({"schema": SCHEMA_VERSION, "created": now()})
        elif stored > SCHEMA_VERSION:
            raise GaptuiError(
                f"history {self.ws.history} has schema {stored}, newer than this gaptui understands "
                f"({SCHEMA_VERSION}); upgrade gaptui"
            )

    def close(self) -> None:
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    def __enter__(self) -> History:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------------------------------ queries

    def records(self) -> list[dict[str, Any]]:
        return [dict(r) for r in self.runs.all()]

    def get(self, run: str) -> dict[str, Any]:
        """A record by run id, unique id prefix, or full hash."""
        found = [r for r in self.runs.all() if r["id"].startswith(run) or r["hash"] == run]
        if len(found) == 1:
            return dict(found[0])
        if not found:
            ids = [r["id"] for r in self.runs.all()]
            raise GaptuiError(f"no run '{run}' in {self.ws.history}{did_you_mean(run, ids)}")
        raise GaptuiError(f"run id '{run}' is ambiguous: {', '.join(r['id'] for r in found[:5])} ...")

    def by_hash(self) -> dict[str, dict[str, Any]]:
        return {r["hash"]: dict(r) for r in self.runs.all()}

    # ------------------------------------------------------------------------------------------ writes

    def put(self, record: dict[str, Any]) -> None:
        """Insert or replace the record with this ``hash``."""
        self.runs.upsert(record, Query().hash == record["hash"])

    def put_many(self, records: Iterable[dict[str, Any]]) -> None:
        """Insert many new records in one write (a 2,000-run grid is queued with one file replacement)."""
        existing = {r["hash"] for r in self.runs.all()}
        fresh = [r for r in records if r["hash"] not in existing]
        if fresh:
            self.runs.insert_multiple(fresh)

    def update(self, run_hash: str, **fields: Any) -> None:
        self.runs.update(fields, Query().hash == run_hash)


def read_records(ws: Workspace) -> list[dict[str, Any]]:
    """All run records of a workspace, without locking (safe while a manager writes: writes are atomic)."""
    if not ws.history.exists():
        return []
    with History(ws) as history:
        return history.records()
