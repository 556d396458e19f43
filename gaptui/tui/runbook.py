"""The app's copy of the run records, kept current from the manager's messages (the UI never reads TinyDB while
the manager thread may write it)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any


class RunBook:
    """Run records by spec hash. Every change returns the hashes it touched, so views update only those rows."""

    def __init__(self, records: Iterable[dict[str, Any]] = ()) -> None:
        self.records: dict[str, dict[str, Any]] = {}
        self._tasks: list[str] | None = None
        self.load(records)

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.records.values())

    def get(self, run_hash: str) -> dict[str, Any] | None:
        """The record of a hash, or None."""
        return self.records.get(run_hash)

    def load(self, records: Iterable[dict[str, Any]]) -> set[str]:
        """Replace everything with ``records``; returns the hashes that are new, changed or gone."""
        fresh = {r["hash"]: r for r in records}
        changed = {h for h, r in fresh.items() if self.records.get(h) != r}
        changed |= set(self.records) - set(fresh)
        self.records = fresh
        self._tasks = None
        return changed

    def add(self, records: Iterable[dict[str, Any]]) -> set[str]:
        """Insert or replace whole records."""
        changed = set()
        for record in records:
            if self.records.get(record["hash"]) != record:
                self.records[record["hash"]] = record
                changed.add(record["hash"])
        if changed:
            self._tasks = None
        return changed

    def update(self, run_hash: str, fields: dict[str, Any]) -> bool:
        """Merge ``fields`` into a record (as ``History.update`` did); False when the record is unknown."""
        record = self.records.get(run_hash)
        if record is None:
            return False
        self.records[run_hash] = {**record, **fields}
        self._tasks = None
        return True

    def tasks(self) -> list[str]:
        """The task families of the records (:func:`gaptui.analysis.record_tasks`), worked out once per change
        rather than on each filter keystroke."""
        if self._tasks is None:
            from gaptui.analysis import record_tasks

            self._tasks = record_tasks(self.records.values())
        return self._tasks
