"""Records and family metadata as the tables need them: families present, declared metrics, groups, number
formats, and the checks of ``--task``, ``--metric``, ``--format`` and ``--dataset`` (one error line each)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from engine.errors import GaptuiError, unknown
from engine.tasks import FAMILIES, Metric, TaskFamily, family
from gaptui.record import Record, axis_matches, axis_value, record_task

FORMATS = ("text", "md", "csv", "latex", "json")


def record_tasks(records: Iterable[Record]) -> list[str]:
    """Families present in ``records`` (registered ones first, in registry order), for pickers."""
    present = {record_task(r) for r in records}
    known = [name for name in FAMILIES.names() if name in present]
    return known + sorted(present - set(known))


def check_task(task: str) -> TaskFamily:
    """The family ``task`` or :class:`GaptuiError` with a did-you-mean."""
    return family(task)


def infer_task(records: Iterable[Record], task: str | None = None) -> str | None:
    """The family a table, statistic, figure or export is of: ``task`` when given (checked), else the one family
    the records hold runs of; None when they hold none (an empty history: nothing to show, whatever the family).

    Records of several families and no ``task`` are one :class:`GaptuiError` line naming them: no family is
    assumed."""
    if task is not None:
        check_task(task)
        return task
    present = record_tasks(records)
    if len(present) > 1:
        raise GaptuiError(f"the history holds runs of {len(present)} families ({', '.join(present)}): pass --task NAME")
    return present[0] if present else None


def view_task(records: Iterable[Record]) -> str:
    """The family a view of the terminal app opens on: the first family the records hold runs of (registry
    order: the only one when they hold one), else the first registered family (alignment among the built-ins)."""
    present = record_tasks(records)
    return present[0] if present else FAMILIES.names()[0]


def _inferred(records: list[Record], task: str | None, what: str) -> str:
    """:func:`infer_task`, for checks that need a family: records that hold no run are an error too."""
    found = infer_task(records, task)
    if found is None:
        raise GaptuiError(f"{what}: the history holds no runs to say which family it belongs to; pass --task NAME")
    return found


def format_number(value: float, metric: Metric) -> str:
    """One value in display units: ``97.6`` for a share of 0.976, ``0.123`` for a loss."""
    return f"{value * 100:.1f}" if metric.share else f"{value:.3f}"


def display_scale(metric: Metric) -> float:
    """Factor from the metric's units to display units (100 for shares, else 1)."""
    return 100.0 if metric.share else 1.0


def known_metrics(records: Iterable[Record], task: str | None = None) -> list[str]:
    """The metrics ``task`` (None: the records' family, :func:`infer_task`) declares plus the declared-by-pattern
    ones found in its finished records; none when neither names a family."""
    records = list(records)
    task = infer_task(records, task)
    if task is None:
        return []
    fam = family(task)
    found = {m.key for m in fam.metrics}
    for rec in records:
        if rec.get("status") == "done" and record_task(rec) == task:
            for key, value in (rec.get("metrics") or {}).items():
                if key not in found and numeric_value(value) is not None:
                    try:
                        fam.metric(key)
                    except GaptuiError:
                        continue  # undeclared: its direction is unknown, so it is never ranked
                    found.add(key)
    declared = [m.key for m in fam.metrics]
    return declared + sorted(found - set(declared))


def check_metric(metric: str | None, records: Iterable[Record], task: str | None = None) -> Metric:
    """The metric of ``task`` (None: the records' family, :func:`infer_task`) named ``metric`` (``None``: the
    family's default) or :class:`GaptuiError` with a did-you-mean."""
    records = list(records)
    task = _inferred(records, task, f"--metric {metric}" if metric else "the metric")
    fam = family(task)
    key = metric or fam.default_metric
    choices = known_metrics(records, task)
    if key not in choices:
        raise unknown("metric", key, choices)
    return fam.metric(key)


def check_format(fmt: str, choices: Sequence[str] = FORMATS) -> str:
    """Return ``fmt`` or raise :class:`GaptuiError` with a did-you-mean suggestion."""
    if fmt not in choices:
        raise unknown("format", fmt, choices)
    return fmt


def done_groups(records: Iterable[Record], task: str | None = None) -> list[str]:
    """Sorted table-group labels (alignment: dataset labels) of ``task`` (None: the records' family,
    :func:`infer_task`) with at least one finished run."""
    records = list(records)
    task = infer_task(records, task)
    if task is None:
        return []
    key = family(task).table.group
    done = [r for r in records if r.get("status") == "done" and record_task(r) == task]
    if key is None:
        return [""] if done else []
    return sorted({str(axis_value(r, key)) for r in done})


def check_group(group: str, records: Iterable[Record], task: str | None = None) -> str:
    """Return ``group`` or raise :class:`GaptuiError` naming the labels of ``task`` (None: the records' family,
    :func:`infer_task`) with finished runs."""
    records = list(records)
    task = _inferred(records, task, f"--dataset {group}")
    fam = family(task)
    labels = done_groups(records, task)
    if fam.table.group is None:
        raise GaptuiError(f"task '{task}' has a single table: there is no {fam.table.rows} group to choose")
    if not any(group_matches(fam, label, group) for label in labels):
        raise unknown(fam.axis(fam.table.group).name, group, labels)
    return group


def group_matches(fam: TaskFamily, label: str, group: str) -> bool:
    """Whether the table group ``label`` is one that ``--dataset group`` chooses: the same label, or as filters
    match (:func:`gaptui.record.axis_matches`: ``er`` chooses ``er[n=50,degree=6]`` too, case ignored)."""
    if label == group:
        return True
    if fam.table.group is None:
        return False
    axis = fam.axis(fam.table.group)
    value: Any = label
    if axis.numeric:
        try:
            value = float(label)
        except ValueError:
            return False
    return axis_matches(axis, value, group)


def numeric_value(value: Any) -> float | None:
    """``value`` as a float when it is a finite number (never a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None
