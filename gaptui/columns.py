"""Run-record columns from task-family metadata: what the history/runs views of the CLI and the app show.

For one family the columns are its axes (alignment: dataset, η, model), the seed, its protocol settings
(alignment: epochs, pairs, batch, budget, noise model; :mod:`gaptui.protocol`) and its result metric (alignment: LAP
acc in percent); across families they are the task, the axes as one ``what`` text, the seed, each record's settings
as one ``protocol`` text and its own result metric. Protocol columns are ``optional``: views may hide them.

``record_family`` is re-exported from :mod:`gaptui.record`, its home.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engine.errors import GaptuiError
from engine.tasks import Metric, Setting, TaskFamily, family
from gaptui.protocol import protocol_words, settings_texts
from gaptui.record import Record, axis_value, record_family, record_metrics, record_task


@dataclass(frozen=True)
class RecordColumn:
    """One column: header, the raw value (for sorting and JSON) and its display text."""

    key: str
    label: str
    value: Callable[[Record], Any]
    text: Callable[[Record], str]
    numeric: bool = False
    #: A protocol column, which ``gaptui history --hide`` and the app's History may hide.
    optional: bool = False


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


def _setting_column(setting: Setting) -> RecordColumn:
    def text(r: Record) -> str:
        return settings_texts(r).get(setting.key, "")

    def value(r: Record) -> Any:
        found = text(r)
        try:
            return float(found)
        except ValueError:
            return found or None

    return RecordColumn(setting.key, setting.name, value, text, numeric=len(setting.fields) == 1, optional=True)


SEED = RecordColumn("seed", "seed", lambda r: r.get("seed"), lambda r: str(r.get("seed", "")), True)
TASK = RecordColumn("task", "task", record_task, record_task)
WHAT = RecordColumn("what", "run of", describe, describe)
PROTOCOL = RecordColumn("protocol", "protocol", protocol_words, protocol_words, optional=True)


def record_columns(task: str | None) -> list[RecordColumn]:
    """Descriptive columns for the records of ``task`` (None: records of any family)."""
    if task is None:
        result = RecordColumn("result", "result", result_value, result_text, True)
        return [TASK, WHAT, SEED, PROTOCOL, result]
    fam = family(task)
    metric = result_metric(fam)
    result = RecordColumn("result", metric.name, result_value, result_text, True)
    settings = [_setting_column(s) for s in fam.settings()]
    return [*(_axis_column(fam, a.key) for a in fam.axes), SEED, *settings, result]


def visible_columns(columns: list[RecordColumn], hide: list[str]) -> list[RecordColumn]:
    """``columns`` without the protocol columns ``hide`` names (repeatable or comma-separated keys or names;
    ``protocol``: all of them). A key that names no protocol column is one :class:`GaptuiError` line."""
    keys = [k.strip() for item in hide for k in item.split(",") if k.strip()]
    optional = {c.key: c for c in columns if c.optional} | {c.label: c for c in columns if c.optional}
    gone: set[str] = set()
    for key in keys:
        if key == "protocol":
            gone |= {c.key for c in columns if c.optional}
        elif key in optional:
            gone.add(optional[key].key)
        else:
            known = ", ".join(["protocol", *dict.fromkeys(c.key for c in columns if c.optional)])
            raise GaptuiError(f"--hide '{key}': not a protocol column of these runs; columns: {known}")
    return [c for c in columns if c.key not in gone]


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
