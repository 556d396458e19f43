"""RunFeed: the worker events of one run as a screen keeps them for its curves and live columns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class RunFeed:
    """Epoch events by epoch number (a resumed run re-sends epochs: the last one wins), plus the last event.

    Events arrive twice in places (the whole ``events.jsonl`` when a run is first shown, then the stream), so
    keying by epoch makes merging them idempotent.
    """

    epochs: dict[int, dict[str, Any]] = field(default_factory=dict)
    #: Eval events by epoch: their metrics join their epoch's row in :meth:`curve`.
    evals: dict[int, dict[str, Any]] = field(default_factory=dict)
    last: dict[str, Any] | None = None
    total_epochs: int | None = None
    #: The last ``progress`` event: the worker prepares the run, or where it is within an epoch.
    position: dict[str, Any] | None = None

    def add(self, events: list[dict[str, Any]], reset: bool = False) -> None:
        """Merge events in file order; ``reset`` when they are the whole file so far."""
        if reset:
            self.epochs.clear()
            self.evals.clear()
        for event in events:
            kind = event.get("event")
            if kind == "epoch" and isinstance(event.get("epoch"), int):
                self.epochs[event["epoch"]] = event
            elif kind == "eval" and isinstance(event.get("epoch"), int):
                self.evals[event["epoch"]] = event
            elif kind == "start" and isinstance(event.get("epochs"), int):
                self.total_epochs = event["epochs"]
            if kind == "progress":
                self.position = event
            else:
                self.last = event

    def curve(self) -> list[dict[str, Any]]:
        """Epoch events in epoch order, each with its epoch's evaluation merged in (the rows of
        :func:`gaptui.plots.epoch_rows`, what :func:`gaptui.plots.draw_curve` reads)."""
        return [{**self.evals.get(e, {}), **self.epochs[e]} for e in sorted(self.epochs)]

    def latest_epoch(self) -> dict[str, Any] | None:
        """The epoch event of the highest epoch, or None before the first."""
        return self.epochs[max(self.epochs)] if self.epochs else None

    def progress(self) -> str:
        """``"3/300"`` (epochs completed of planned), ``"3/300 · batch 12/50"`` within the next epoch,
        ``"preparing"`` while the worker prepares the run, ``""`` before any event
        (:func:`gaptui.columns.run_position`)."""
        from gaptui.columns import run_position

        if self.last is None and self.position is None:
            return ""
        latest = self.latest_epoch()
        return run_position(latest or self.last, self.position, self.total_epochs)
