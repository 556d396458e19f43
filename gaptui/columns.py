"""Run-record columns from task-family metadata: what the history/runs views of the CLI and the app show.

For one family the columns are its axes (alignment: dataset, η, model), the seed and its result metric
(alignment: LAP acc in percent); across families they are the task, the axes as one ``what`` text, the seed and
each record's own result metric.

``record_family`` is re-exported from :mod:`gaptui.record`, its home.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engine.tasks import Metric, TaskFamily, family
from gaptui.record import Record, axis_value, record_family, record_metrics, record_task


@dataclass(frozen=True)
class RecordColumn:
    """One column: header, the raw value (for sorting and JSON) and its display text."""

    key: str
    label: str
    value: Callable[[Record], Any]
    text: Callable[[Record], str]
    numeric: bool = False


def result_metric(fam: TaskFamily) -> Metric:
    """The metric a family shows in the result column."""
    return fam.metric(fam.result_metric or fam.default_metric)


def result_value(record: Record) -> float | None:
    fam = record_family(record)
    if fam is None:
        return None
    value = record_metrics(record).get(result_metric(fam).key)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def result_text(record: Record) -> str:
    """``97.6 %`` (shares) or ``0.412`` (others), from the record family's result metric; empty when absent."""
    value = result_value(record)
    fam = record_family(record)
    if value is None or fam is None:
        return ""
    metric = result_metric(fam)
    return f"{value * 100:.1f} %" if metric.share else f"{value:.4g}"


def describe(record: Record) -> str:
    """The record's axes in one line (``er η=0.12 gcn``), as its family formats them."""
    fam = record_family(record)
    axes = record.get("axes") or {}
    if fam is None:
        return " ".join(f"{k}={v}" for k, v in axes.items())
    shown = [a for a in fam.axes if not a.derived]
    return " ".join(a.header(axes.get(a.key)) if a.prefix else a.format(axes.get(a.key)) for a in shown)


def _axis_column(fam: TaskFamily, key: str) -> RecordColumn:
    axis = fam.axis(key)

    def value(r: Record) -> Any:
        return axis_value(r, key)

    return RecordColumn(key, axis.name, value, lambda r: axis.format(value(r)), axis.numeric)


SEED = RecordColumn("seed", "seed", lambda r: r.get("seed"), lambda r: str(r.get("seed", "")), True)
TASK = RecordColumn("task", "task", record_task, record_task)
WHAT = RecordColumn("what", "run of", describe, describe)


def record_columns(task: str | None) -> list[RecordColumn]:
    """Descriptive columns for the records of ``task`` (None: records of any family)."""
    if task is None:
        result = RecordColumn("result", "result", result_value, result_text, True)
        return [TASK, WHAT, SEED, result]
    fam = family(task)
    metric = result_metric(fam)
    result = RecordColumn("result", metric.name, result_value, result_text, True)
    return [*(_axis_column(fam, a.key) for a in fam.axes), SEED, result]


def aligned(rows: list[list[str]], right: frozenset[int] | set[int] = frozenset()) -> list[str]:
    """``rows`` (the first is the header) as lines of columns two spaces apart, the columns in ``right`` flush
    right: plain text whose cost per row is a join, for tables too long for a Rich table (20,000 runs)."""
    if not rows:
        return []
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(
            c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))
        ).rstrip()
        for r in rows
    ]


def run_position(last: dict[str, Any] | None, progress: dict[str, Any] | None, epochs: int | None) -> str:
    """Where a run in flight is, from its last event and its last ``progress`` event: ``starting`` (no event yet),
    ``preparing`` (its worker reads data and builds the model), ``3/300`` (epochs done of planned), ``3/300 ·
    batch 12/50`` (within the next epoch)."""
    last, progress = last or {}, progress or {}
    newer = float(progress.get("t") or 0) >= float(last.get("t") or 0)
    if progress.get("phase") == "training" and newer:
        of = f"/{epochs}" if epochs else ""
        return f"{int(progress['epoch']) - 1}{of} · batch {progress.get('batch')}/{progress.get('batches')}"
    if not last:
        return "preparing" if progress else "starting"
    if last.get("event") in ("start", "epoch", "eval"):
        done = int(last.get("epoch") or 0) if last.get("event") != "start" else 0
        return f"{done}/{epochs}" if epochs else str(done)
    return ""
