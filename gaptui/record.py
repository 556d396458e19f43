"""The run record of the history, typed, and what every view asks of it: its family, its axes, filters.

A :class:`Record` is the dict the history stores (schema 2, :mod:`gaptui.history`): a ``TypedDict``, so a record
read from any existing store is the same mapping as before (nothing converted, nothing dropped: keys written by a
newer gaptui or a backend, such as ``slurm`` or ``earlier``, stay), and type checkers know its fields.

Generic code never reads inside ``spec``: what a run is (its dataset, noise, PE, pooling...) is in ``axes``, the
coordinates its family declares (:class:`engine.tasks.Axis`). :class:`RecordFilter` filters on those (``gaptui
history --filter axis=value`` and the terminal app's history filter), plus task, status and tag.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Required, TypedDict

from engine.errors import GaptuiError, did_you_mean
from engine.tasks import FAMILIES, Axis, TaskFamily, family, task_of

#: The filter key choosing the runs of one ``gaptui tune`` study (``study=NAME``), beside the declared axes.
STUDY_KEY = "study"

#: Statuses a record can have, in the order a run goes through them.
STATUSES = ("queued", "running", "done", "failed", "cancelled", "interrupted", "blocked")


class Record(TypedDict, total=False):
    """One run of the history (schema 2). ``id``, ``hash`` and ``status`` are always there (strings)."""

    id: Required[str]
    hash: Required[str]
    status: Required[str]
    #: The family (absent in records written before families: :data:`engine.tasks.LEGACY_TASK`, alignment).
    task: str
    #: The run's coordinates, one value per axis its family declares (``{"dataset": "er", "noise": 0.12, ...}``).
    axes: dict[str, Any]
    seed: int
    #: The full spec (its canonical hash is ``hash``); read by the family and the worker only.
    spec: dict[str, Any]
    #: Hashes of the runs that must be done before this one starts.
    depends: list[str]
    preset: str | None
    planned_seeds: int | None
    run_dir: str
    created: str
    started: str | None
    finished: str | None
    duration: float | None
    exit_code: int | None
    attempts: int
    pid: int | None
    slot: str | None
    metrics: dict[str, Any]
    params: int | None
    error: str | None
    log_tail: list[str]
    repro: dict[str, Any]
    tags: list[str]
    note: str
    #: A run of a ``gaptui tune`` study: ``{"study", "row", "trials"}``, plus ``final`` for its final runs and
    #: ``pruned`` for the runs of a pruned trial (:mod:`gaptui.tune`).
    tune: dict[str, Any]


def record_task(record: Mapping[str, Any]) -> str:
    """The task family of a record (records written before families are
    :data:`engine.tasks.LEGACY_TASK`'s, alignment's)."""
    return task_of(record)


def record_family(record: Mapping[str, Any]) -> TaskFamily | None:
    """The family of a record, or None when it is not registered (a plug-in no longer installed)."""
    try:
        return family(record_task(record))
    except GaptuiError:
        return None


def task_records(records: Iterable[Record], task: str) -> list[Record]:
    """The records of one task family."""
    return [r for r in records if record_task(r) == task]


def record_metrics(record: Mapping[str, Any]) -> Mapping[str, Any]:
    """A record's final metrics; empty when it has none or they are not a table (a record garbled by hand)."""
    metrics = record.get("metrics")
    return metrics if isinstance(metrics, Mapping) else {}


def record_axes(record: Mapping[str, Any]) -> Mapping[str, Any]:
    """A record's axes; empty when it has none or they are not a table."""
    axes = record.get("axes")
    return axes if isinstance(axes, Mapping) else {}


def axis_value(record: Mapping[str, Any], key: str) -> Any:
    """The value of axis ``key`` of a record (``None`` when the record has no such axis)."""
    return record_axes(record).get(key)


#: The seed of a run, chosen like an axis (``--filter seed=0``, ``--where seed=1``) though no family declares it.
SEED = Axis("seed", "seed", numeric=True)


def axis_matches(axis: Axis, value: Any, wanted: str) -> bool:
    """Whether a record's ``value`` of ``axis`` is what a filter asks for: the same number for numeric axes
    (``noise=0.050`` matches 0.05), else the same text, ignoring case (``pe=RWPE`` matches rwpe), or a labelled
    variant of it (``dataset=er`` matches ``er[n=50]``, whose base is er). The one rule of every command that
    chooses runs by their axes: ``history --filter``, ``table --filter``, ``train --where``, ``--dataset``."""
    if value is None:
        return False
    if axis.numeric:
        try:
            return axis.key_of(value) == axis.key_of(float(wanted))
        except (TypeError, ValueError):
            return False
    text, wanted = axis.format(value).lower(), wanted.lower()
    return text == wanted or text.startswith(f"{wanted}[")


def known_axes(tasks: Sequence[str] | None = None) -> dict[str, Axis]:
    """Axes of ``tasks`` (None: every registered family) by key (the first family's declaration of a key)."""
    fams = [family(t) for t in tasks] if tasks else list(FAMILIES)
    out: dict[str, Axis] = {}
    for fam in fams:
        for axis in fam.axes:
            out.setdefault(axis.key, axis)
    out.setdefault(SEED.key, SEED)
    return out


def run_axes(fam: TaskFamily, axes: Mapping[str, Any], seed: Any) -> dict[str, tuple[Axis, Any]]:
    """The axes a run is chosen by: its family's, with their values, and its seed."""
    out = {a.key: (a, axes.get(a.key)) for a in fam.axes}
    out.setdefault(SEED.key, (SEED, seed))
    return out


def parse_axis_filters(items: Iterable[str], tasks: Sequence[str] | None = None, option: str = "--filter") -> dict:
    """``["dataset=er", "noise=0.1"]`` as ``{axis key: value}``, every key a declared axis of ``tasks`` (None:
    of any family); one error line naming the item and the known axes otherwise."""
    axes = known_axes(tasks)
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key or not value:
            raise GaptuiError(f"{option} '{item}': expected AXIS=VALUE, e.g. dataset=er; known axes: {', '.join(axes)}")
        if key == STUDY_KEY:  # not an axis: the runs of a `gaptui tune` study (its trials and final runs)
            out[key] = value
            continue
        if key not in axes:
            scope = f"task {', '.join(tasks)}" if tasks else "any task"
            raise GaptuiError(
                f"{option} '{item}': '{key}' is not an axis of {scope}{did_you_mean(key, list(axes))}; "
                f"known axes: {', '.join(axes)}"
            )
        if axes[key].numeric:
            try:
                float(value)
            except ValueError:
                raise GaptuiError(f"{option} '{item}': {key} takes a number, got '{value}'") from None
        out[key] = value
    return out


@dataclass(frozen=True)
class RecordFilter:
    """Which records to show: a task, statuses, a tag, and values of declared axes (all must hold)."""

    task: str | None = None
    statuses: tuple[str, ...] = ()
    tag: str | None = None
    axes: Mapping[str, str] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.task or self.statuses or self.tag or self.axes)

    def matches(self, record: Mapping[str, Any]) -> bool:
        task = record_task(record)
        if self.task is not None and task != self.task:
            return False
        if self.statuses and record.get("status") not in self.statuses:
            return False
        if self.tag is not None and self.tag not in (record.get("tags") or []):
            return False
        if not self.axes:
            return True
        axes = dict(self.axes)
        if STUDY_KEY in axes:
            tune = record.get("tune")
            if not isinstance(tune, Mapping) or str(tune.get("study")).lower() != axes.pop(STUDY_KEY).lower():
                return False
            if not axes:
                return True
        fam = record_family(record)
        if fam is None:
            return False
        declared = run_axes(fam, record_axes(record), record.get("seed"))
        return all(k in declared and axis_matches(*declared[k], v) for k, v in axes.items())

    def apply(self, records: Iterable[Record]) -> list[Record]:
        return [r for r in records if self.matches(r)]


_IDENT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
# Exact types (``type(v) in ...``, not ``isinstance``): a bool is never a count, and the check of 20,000 records
# stays a small part of reading them. Records are JSON: tables are dicts, lists are lists.
_NUMBER = (int, float)
_SCALAR = (str, int, float, bool, type(None))
#: The type of every field some reader of a record uses (absent or None is always fine): types, what it is said as.
RECORD_FIELDS: dict[str, tuple[tuple[type, ...], str]] = {
    "task": ((str,), "a family name"),
    "axes": ((dict,), "a table of axis: value"),
    "seed": ((int,), "an integer"),
    "spec": ((dict,), "a table (the run spec)"),
    "depends": ((list,), "a list of run hashes"),
    "preset": ((str,), "a preset name"),
    "planned_seeds": ((int,), "a count"),
    "run_dir": ((str,), "a folder path"),
    "created": ((str,), "a time"),
    "started": ((str,), "a time"),
    "finished": ((str,), "a time"),
    "started_ts": (_NUMBER, "a number of seconds"),
    "duration": (_NUMBER, "a number of seconds"),
    "exit_code": ((int,), "an integer"),
    "attempts": ((int,), "a count"),
    "pid": ((int,), "a process id"),
    "slot": ((str,), "a slot name"),
    "host": ((str,), "a host name"),
    "backend": ((str,), "a backend name"),
    "slurm": ((dict,), "a table"),
    "metrics": ((dict,), "a table of metric: value"),
    "params": ((int,), "a count"),
    "error": ((str,), "text"),
    "log_tail": ((list,), "a list of lines"),
    "repro": ((dict,), "a table"),
    "tags": ((list,), "a list of tags"),
    "note": ((str,), "text"),
    "tune": ((dict,), "a table (study, row, trials...)"),
    "earlier": ((list,), "a list of earlier attempts"),
}
#: Lists whose items readers use as text.
_TEXT_LISTS = ("depends", "log_tail", "tags")
#: The fields of ``tune`` that readers use (``gaptui tune``, the Runs screen, the report), typed alike.
TUNE_FIELDS: dict[str, tuple[tuple[type, ...], str]] = {
    "study": ((str,), "a study name"),
    "row": ((str,), "a row"),
    "trials": ((list,), "a list of trial numbers"),
    "of": ((int,), "a count"),
    "metric": ((str,), "a metric name"),
    "space": ((list,), "a list of searched keys"),
    "params": ((dict,), "a table of values"),
    "label": ((str,), "a row label"),
    "final": ((bool,), "true or false"),
    "pruned": ((bool,), "true or false"),
}


def _said(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:40]}{'...' if len(text) > 40 else ''}"


def record_fault(record: Mapping[str, Any]) -> str | None:
    """What field of ``record`` has a type no reader can use (``axes`` a list, ``tags`` a number, ``tune.trials``
    a string, a metric that is text...), or None: the one check of every field any reader of the history uses. A
    record with a fault is left alone on disk and left out of every view, each named once in a ``warning:``."""
    for key in ("id", "hash"):  # named in folders, file names and W&B ids: never a path or a pattern
        value = record.get(key)
        if type(value) is not str or not _IDENT.fullmatch(value):
            return f"its {key} is {_said(value)}, expected letters, digits, '-', '_' or '.'"
    fields = RECORD_FIELDS
    for key, value in record.items():
        typed = fields.get(key)
        if typed is not None and value is not None and type(value) not in typed[0]:
            return f"its {key} is {_said(value)}, expected {typed[1]}"
    for key in _TEXT_LISTS:
        for item in record.get(key) or ():
            if type(item) is not str:
                return f"its {key} hold {_said(item)}, expected text"
    for key, value in (record.get("axes") or {}).items():
        if type(value) not in _SCALAR:
            return f"its axis '{key}' is {_said(value)}, expected a number or text"
    for key, value in (record.get("metrics") or {}).items():
        if value is not None and type(value) not in _NUMBER:
            return f"its metric '{key}' is {_said(value)}, expected a number"
    for item in record.get("earlier") or ():
        if type(item) is not dict:
            return "its earlier attempts are not tables"
    tune = record.get("tune")
    return None if tune is None else _tune_fault(tune)


def _tune_fault(tune: Mapping[str, Any]) -> str | None:
    for key, (types, what) in TUNE_FIELDS.items():
        value = tune.get(key)
        if value is not None and type(value) not in types:
            return f"its tune.{key} is {_said(value)}, expected {what}"
    bad = [n for n in tune.get("trials") or () if type(n) is not int or n < 0]
    return f"its tune.trials hold {_said(bad[0])}, expected trial numbers" if bad else None


def record_problem(record: Mapping[str, Any]) -> str | None:
    """What makes ``record`` unusable for tables, statistics, figures and exports, or None when nothing does: a
    field of the wrong type (:func:`record_fault`), a family that is not installed, ``axes`` that lack the values
    its family's tables need, or an unknown status. Such a record is left alone on disk, only left out of views."""
    fault = record_fault(record)
    if fault is not None:
        return fault
    fam = record_family(record)
    if fam is None:
        return f"its task family '{record_task(record)}' is not installed"
    if record.get("status") not in STATUSES:
        return f"its status {record.get('status')!r} is not one of {', '.join(STATUSES)}"
    axes = record.get("axes")
    if not isinstance(axes, Mapping):
        return f"it has no axes (expected a table of {', '.join(a.key for a in fam.axes)})"
    layout = fam.table
    needed = [k for k in (layout.group, layout.rows, layout.columns) if k is not None]
    missing = [k for k in needed if axes.get(k) is None]
    if missing:
        return f"its axes lack {', '.join(missing)} ({fam.name} tables need {', '.join(needed)})"
    return None


def left_out_line(record: Mapping[str, Any], problem: str) -> str:
    """The one ``warning:`` text naming a record left out of a view and why."""
    name = record.get("id") or record.get("hash") or "without an id"
    return f"history record {name} left out: {problem}"


def usable_records(records: Iterable[Record], warn: Any = None) -> list[Record]:
    """``records`` less those with a :func:`record_problem`; ``warn(line)`` is called once per record left out,
    naming its id and what is wrong."""
    out: list[Record] = []
    for record in records:
        problem = record_problem(record)
        if problem is None:
            out.append(record)
        elif warn is not None:
            warn(left_out_line(record, problem))
    return out


def check_statuses(statuses: Iterable[str], option: str = "--status") -> tuple[str, ...]:
    """The statuses given, each one of :data:`STATUSES` (one error line otherwise)."""
    for s in statuses:
        if s not in STATUSES:
            raise GaptuiError(
                f"{option} '{s}' is not a status{did_you_mean(s, STATUSES)}; known: {', '.join(STATUSES)}"
            )
    return tuple(statuses)


def split_words(words: Iterable[str]) -> tuple[list[str], dict[str, str]]:
    """A free-text filter's words as (plain words, axis filters): a word ``key=value`` whose key is an axis some
    family declares filters on that axis (the terminal app's history filter); any other word is searched as text."""
    axes = known_axes()
    plain: list[str] = []
    filters: dict[str, str] = {}
    for word in words:
        key, sep, value = word.partition("=")
        if sep and value and (key in axes or key == STUDY_KEY):
            filters[key] = value
        else:
            plain.append(word)
    return plain, filters


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """A nested mapping (a spec) as one level, its keys joined by ``.`` (``dataset.n_train``) in sorted order; a
    leaf (lists included) is kept as it is."""
    if not isinstance(value, Mapping):
        return {prefix: value} if prefix else {}
    out: dict[str, Any] = {}
    for key in sorted(value, key=str):
        out.update(flatten(value[key], f"{prefix}.{key}" if prefix else str(key)))
    return out
