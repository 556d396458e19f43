"""Durations: how long a run took, summed over its parts (:func:`run_seconds`, what its record's ``duration``
holds), and durations as people read them (:func:`format_duration`: the CLI's estimate lines, the app's columns).

A run stopped and resumed (cancelled, interrupted, timed out on Slurm) is trained in several attempts, each a
worker process appending to the same ``events.jsonl``: an attempt that resumes from a checkpoint says so in its
``start`` event (``resumed_from``). Its duration is the sum of the parts since the run last started afresh.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from engine.events import read_events


def format_duration(seconds: float | None) -> str:
    """``42 s``, ``3 min``, ``2 h 05 min``, ``3 d 4 h``."""
    if seconds is None:
        return "–"
    seconds = max(0.0, float(seconds))
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes = seconds / 60
    if minutes < 90:
        return f"{minutes:.0f} min"
    hours, minutes = divmod(int(minutes), 60)
    if hours < 48:
        return f"{hours} h {minutes:02d} min"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h"


def earlier_parts_seconds(events: Sequence[Mapping[str, Any]], since: float) -> float:
    """Seconds of the earlier attempts that the attempt started at ``since`` (its worker's spawn) continues: each
    from its ``start`` event to its last event, back through every attempt that resumed from the one before it.
    0 for an attempt that started afresh or wrote no ``start`` event (it stopped before it began)."""
    starts = [i for i, e in enumerate(events) if e.get("event") == "start"]
    current = [k for k, i in enumerate(starts) if float(events[i].get("t") or 0) >= since - 1.0]
    if not current:
        return 0.0
    total, k = 0.0, current[-1]
    while k > 0 and events[starts[k]].get("resumed_from"):
        part = list(events[starts[k - 1] : starts[k]])
        # The next attempt says it prepares (``progress`` events) before its ``start``: not this part's time.
        while len(part) > 1 and part[-1].get("event") == "progress":
            part.pop()
        total += max(0.0, float(part[-1].get("t") or 0) - float(part[0].get("t") or 0))
        k -= 1
    return total


def run_seconds(
    run_dir: Path, started: float, packed: bool, result: Mapping[str, Any], recorded: float | None
) -> float:
    """Seconds a run took, over all its parts: this attempt, from ``started`` (its worker's spawn) to its result or
    its last event (a run of a pack: its own epochs and evaluations, not the time the pack's other runs took), plus
    the earlier attempts it resumed from (:func:`earlier_parts_seconds`). For a result older than this attempt (a
    finished run re-checked) the time ``recorded`` before, else the worker's own measure."""
    events = read_events(run_dir / "events.jsonl")[0]
    earlier = earlier_parts_seconds(events, started)
    if packed:
        own = sum(
            float(e.get("seconds") or 0)
            for e in events
            if float(e.get("t", 0)) >= started and e.get("event") in ("epoch", "eval")
        )
        if own > 0:
            return round(own + earlier, 2)
    path = run_dir / "result.json"
    if result.get("status") == "done" and path.exists():
        end = path.stat().st_mtime
    else:
        end = float(events[-1].get("t", 0)) if events else time.time()
    if end >= started:
        return round(end - started + earlier, 2)
    return float(recorded or result.get("seconds") or 0.0)
