"""What every tracker export shares (``gaptui export --mlflow`` and ``--wandb``): which records it logs, and the
per-epoch metrics of a run read from its ``events.jsonl``."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from engine.errors import GaptuiError
from engine.events import iter_events
from gaptui import analysis


def readable(record: Mapping[str, Any]) -> bool:
    """Whether an export can read ``record`` (the history's loader warns about malformed ones; here: skipped)."""
    try:
        analysis.record_task(record)
    except GaptuiError:
        return False
    run_hash = record.get("hash")
    return (
        isinstance(run_hash, str)
        and re.fullmatch(r"[\w.-]+", run_hash) is not None
        and all(isinstance(record.get(key) or {}, Mapping) for key in ("metrics", "spec", "axes"))
        and isinstance(record.get("run_dir") or "", (str, os.PathLike))
    )


def finished_records(records: Sequence[Any], task: str | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """The finished runs of ``records`` an export logs (of ``task`` only, when given), and the ids of finished
    records it cannot read."""
    done, unreadable = [], []
    for record in records:
        if not isinstance(record, Mapping) or record.get("status") != "done":
            continue
        if not readable(record):
            unreadable.append(str(record.get("id")))
        elif task is None or analysis.record_task(record) == task:
            done.append(record)
    return done, unreadable


def epoch_metrics(run_dir: Path) -> list[tuple[str, float, int, int]]:
    """``(key, value, timestamp ms, epoch)`` for every numeric field of the ``epoch`` and ``eval`` events."""
    out = []
    for event in iter_events(Path(run_dir) / "events.jsonl"):
        epoch = event.get("epoch")
        if event.get("event") not in ("epoch", "eval") or not isinstance(epoch, int) or isinstance(epoch, bool):
            continue
        stamp = analysis.numeric_value(event.get("t")) or 0.0
        for key, value in event.items():
            if key in ("v", "t", "epoch", "step", "event", "run") or (number := analysis.numeric_value(value)) is None:
                continue
            out.append((str(key), number, int(1000 * stamp), epoch))
    return out


def record_run_dir(record: Mapping[str, Any]) -> Path | None:
    return Path(record["run_dir"]) if record.get("run_dir") else None
