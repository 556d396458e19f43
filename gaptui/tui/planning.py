"""What the New-experiment form holds, turned into a preset of its task family, and what launching it costs.

The form is built from the chosen family's :class:`~engine.tasks.FormField` declarations and keeps what the user
typed; :meth:`FormDraft.preset` parses each field by its kind (:func:`parse_field`), asks the family for the preset
document (:meth:`~engine.tasks.FamilyForm.preset_from_form`) and validates it exactly as a preset file is
validated (:func:`gaptui.presets.parse_preset`), so ``grid()``, the saved TOML and the scheduler see no difference
between a grid composed here and one read from a file. A grid over :data:`MAX_GRID_RUNS` runs is refused before
anything of it is listed: its size is counted from the fields (:meth:`FormDraft.grid_bound`; a range of seeds is
counted arithmetically). Everything in this module is pure (no widgets, no threads) and cheap, except that
validating a preset may import the model registry (torch): call it off the UI thread.
"""

from __future__ import annotations

import bisect
import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.errors import GaptuiError
from engine.tasks import FamilyForm, FormField, PresetBase, family, task_of

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

from gaptui.durations import format_duration

#: Statuses a run can be retried from (re-queued; a cancelled or interrupted run resumes from its checkpoint).
RETRYABLE = ("failed", "cancelled", "interrupted")
#: Statuses of runs the scheduler still has to finish.
IN_FLIGHT = ("queued", "running")
#: Keys of a preset document the form shows for every family (the family's fields hold the rest).
COMMON_KEYS = ("task", "name", "description")


#: The most runs a grid composed or launched in the terminal app may hold. Sizes are counted from the axes (the
#: product of their lengths, a range of seeds counted arithmetically), so a grid over it is refused before any of
#: it is built; ``gaptui run`` has no such limit.
MAX_GRID_RUNS = 100_000
#: The largest value a ``seeds`` field takes (a signed 64-bit integer, the range of the form's ``int`` fields).
MAX_SEED = 2**63 - 1
#: ``0-9`` or ``0..9`` (inclusive).
SEED_RANGE = re.compile(r"(\d+)\s*(?:-|\.\.)\s*(\d+)")


def over_limit(size: int) -> str:
    """Why a grid of ``size`` runs is refused (the bottom line of the form and a refused Launch say it)."""
    return f"grid of {size:,} runs is over the limit of {MAX_GRID_RUNS:,}; narrow seeds or axes"


def check_grid_size(size: int | None) -> None:
    """Refuse a grid of more than :data:`MAX_GRID_RUNS` runs (``None``: a size nobody counted, let through)."""
    if size is not None and size > MAX_GRID_RUNS:
        raise GaptuiError(over_limit(size))


def seed_spans(text: str, what: str = "seeds") -> list[tuple[int, int]]:
    """The items of a ``seeds`` field (``0``, ``0,1,2``, ``0-9``) as inclusive ``(first, last)`` spans, in the
    order typed; nothing is expanded. Refuses items that are not integers >= 0 (at most :data:`MAX_SEED`) or ranges
    of them, and empty ranges such as ``5-2``."""
    spans = []
    for item in _items(text):
        match = SEED_RANGE.fullmatch(item)
        try:
            first, last = (int(match[1]), int(match[2])) if match else (int(item),) * 2
        except ValueError:
            raise GaptuiError(f"{what}: '{item}' is not an integer or a range like 0-9") from None
        if first < 0:
            raise GaptuiError(f"{what}: {first} is negative; give integers >= 0 or a range like 0-9")
        if first > last:
            raise GaptuiError(f"{what}: '{item}' is an empty range ({first} > {last}); did you mean {last}-{first}?")
        if last > MAX_SEED:
            raise GaptuiError(f"{what}: {last} is too large (at most {MAX_SEED})")
        spans.append((first, last))
    return spans


def fresh_parts(spans: Iterable[tuple[int, int]]) -> Iterator[tuple[int, int]]:
    """The parts of ``spans`` no earlier span covers, in order: inclusive spans whose values are those of ``spans``
    with repeats dropped. Keeps the covered values as disjoint intervals, so the cost is in the number of spans,
    never in the number of values."""
    starts: list[int] = []  # covered intervals, sorted, disjoint and not adjacent
    ends: list[int] = []
    for first, last in spans:
        lo = bisect.bisect_left(ends, first - 1)  # the first covered interval touching [first, last] ...
        hi = bisect.bisect_right(starts, last + 1)  # ... and the one after the last
        pos = first
        for start, end in zip(starts[lo:hi], ends[lo:hi], strict=True):
            if start > pos:
                yield pos, min(start - 1, last)
            pos = max(pos, end + 1)
        if pos <= last:
            yield pos, last
        merged = (min(first, starts[lo]), max(last, ends[hi - 1])) if hi > lo else (first, last)
        starts[lo:hi], ends[lo:hi] = [merged[0]], [merged[1]]


def count_seeds(text: str, what: str = "seeds") -> int:
    """How many distinct values a ``seeds`` field holds, counted arithmetically (``0-99999999`` costs nothing)."""
    return sum(last - first + 1 for first, last in fresh_parts(seed_spans(text, what)))


def parse_seeds(text: str, what: str = "seeds") -> list[int]:
    """Seeds typed as ``0``, ``0,1,2`` or a range ``0-9`` (inclusive); duplicates dropped, order kept.

    Counted before they are listed: more than :data:`MAX_GRID_RUNS` distinct values are refused unlisted."""
    parts = list(fresh_parts(seed_spans(text, what)))
    count = sum(last - first + 1 for first, last in parts)
    if not count:
        raise GaptuiError(f"{what}: give at least one value, e.g. 0 or 0-9")
    if count > MAX_GRID_RUNS:
        raise GaptuiError(f"{what}: {count:,} values, over the limit of {MAX_GRID_RUNS:,} runs in a grid; narrow them")
    return [value for first, last in parts for value in range(first, last + 1)]


def field_count(spec: FormField, raw: Any) -> tuple[int, int]:
    """``(values, widest range)`` of what a field's widget holds, counted without parsing or expanding it: how many
    values the field gives its axis of the grid (1 for a field that is no axis) and the most values a ``seeds``
    field among it holds. Raises :class:`GaptuiError` for a ``seeds`` field that does not parse."""
    kind = spec.kind
    if kind == "seeds":
        count = count_seeds("" if raw is None else str(raw), spec.label)
        return count, count
    if kind == "numbers":
        return len(_items("" if raw is None else str(raw))), 0
    if kind == "multi":
        return len(raw or []), 0
    if kind == "rows":
        total = widest = 0
        for row in raw or []:
            counts = [field_count(sub, (row or {}).get(sub.key)) for sub in spec.fields]
            total += math.prod(max(1, n) for n, _ in counts)
            widest = max([widest, *(w for _, w in counts)])
        return total, widest
    return 1, 0


def parse_int(text: str, what: str, minimum: int = 0) -> int | None:
    """An optional integer field: ``None`` when blank."""
    text = text.strip().replace("_", "").replace(",", "")
    if not text:
        return None
    try:
        value = int(text)
    except ValueError:
        raise GaptuiError(f"{what}: '{text}' is not an integer") from None
    if value < minimum:
        raise GaptuiError(f"{what}: {value} must be >= {minimum}")
    return value


def parse_float(text: str, what: str) -> float | None:
    """An optional positive number field: ``None`` when blank."""
    value = parse_number(text, what)
    if value is not None and not value > 0:
        raise GaptuiError(f"{what}: {value:g} must be > 0")
    return value


def parse_number(text: str, what: str) -> float | None:
    """An optional number field: ``None`` when blank."""
    text = text.strip()
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        raise GaptuiError(f"{what}: '{text}' is not a number") from None


#: One ``key=value`` item: a quoted string, a list, or a run of characters up to a space or a comma.
PARAM_ITEM = re.compile(r"""\s*([\w.:-]+)\s*=\s*("(?:[^"\\]|\\.)*"|'[^']*'|\[[^\]]*\]|[^\s,]*)\s*,?""")


def parse_params(text: str, what: str = "parameters") -> dict[str, Any]:
    """``key=value`` items (``n=16 degree=4 path="my file.csv" topk=[5, 10]``); values read as TOML (``16``,
    ``0.5``, ``true``, ``[5, 10]``, ``"text"``), else kept as text."""
    out: dict[str, Any] = {}
    pos, text = 0, text.strip()
    while pos < len(text):
        match = PARAM_ITEM.match(text, pos)
        if match is None or match.end() == pos:
            item = text[pos:].split()[0]
            raise GaptuiError(f"{what}: '{item}': expected key=value")
        out[match[1]] = _toml_or_text(match[2])
        pos = match.end()
    return out


def _toml_or_text(value: str) -> Any:
    try:
        return tomllib.loads(f"v = {value}")["v"]
    except tomllib.TOMLDecodeError:
        return value


def format_params(params: Mapping[str, Any]) -> str:
    """The inverse of :func:`parse_params`: ``n=16 degree=4``."""
    return " ".join(f"{k}={_format_item(v)}" for k, v in params.items())


def _format_item(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        plain = value and _toml_or_text(value) == value and not re.search(r"[\s,'\"\[]", value)
        return value if plain else json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_format_item(v) for v in value) + "]"
    return repr(value) if isinstance(value, float) else str(value)


def _items(text: str) -> list[str]:
    return [item for item in re.split(r"[,\s]+", text.strip()) if item]


# ------------------------------------------------------------------------------------------ fields by kind


def parse_field(spec: FormField, raw: Any) -> Any:
    """The typed value (see :data:`engine.tasks.FORM_KINDS`) of what a field's widget holds; errors name the field."""
    kind, what = spec.kind, spec.label
    if kind in ("multi", "bool"):
        return raw
    if kind == "choice":
        return raw or None
    if kind == "rows":
        rows = []
        for i, row in enumerate(raw or []):
            try:
                rows.append({sub.key: parse_field(sub, row.get(sub.key)) for sub in spec.fields})
            except GaptuiError as exc:
                raise GaptuiError(f"{what}, row {i + 1}: {exc}") from None
        return rows
    text = "" if raw is None else str(raw)
    if kind == "int":
        return parse_int(text, what, minimum=-(2**63))
    if kind == "number":
        return parse_number(text, what)
    if kind == "seeds":
        return parse_seeds(text, what)
    if kind == "numbers":
        return [parse_number(item, what) for item in _items(text)]
    if kind == "params":
        return parse_params(text, what)
    return text.strip()


def format_field(spec: FormField, value: Any) -> Any:
    """What a field's widget shows for a typed value (the inverse of :func:`parse_field`)."""
    kind = spec.kind
    if kind == "multi":
        return list(value or [])
    if kind == "bool":
        return bool(value)
    if kind == "choice":
        return value or None
    if kind == "rows":
        return [
            {sub.key: format_field(sub, (row or {}).get(sub.key, sub.default)) for sub in spec.fields}
            for row in value or []
        ]
    if value is None:
        return ""
    if kind in ("seeds", "numbers"):
        return ", ".join(_format_item(v) for v in value)
    if kind == "params":
        return format_params(value)
    return _format_item(value) if kind in ("int", "number") else str(value)


def default_values(fields: Sequence[FormField]) -> dict[str, Any]:
    """The values of a new form: each field's declared default."""
    return {f.key: f.default for f in fields}


# ------------------------------------------------------------------------------------------ the draft


@dataclass(frozen=True)
class SlotConfig:
    """Where runs go: GPU indices (None = every visible GPU), runs per GPU, CPU runs (None = automatic)."""

    gpus: list[str] | None = None
    jobs_per_gpu: int = 1
    cpu_jobs: int | None = None
    #: ``local`` (the slots above) or ``slurm`` (job arrays with the preset's [slurm] settings).
    backend: str = "local"

    def slots(self) -> list[Any]:
        """The scheduler slots (``make_slots``); may run ``nvidia-smi``, so not on the UI thread."""
        from gaptui.slots import slots_for

        return slots_for(self.gpus, self.jobs_per_gpu, self.cpu_jobs)


@dataclass(frozen=True)
class FormDraft:
    """Everything the New-experiment form holds: the family, name and description, what each of the family's
    fields' widgets hold (``fields``: key -> widget value, see :func:`format_field`), the preset document it was
    loaded from (``base``: keys no field shows, such as ``[slurm]``, are written back as they were), the device
    slots and whether to retry failed runs; for a family without form fields, the preset loaded for it."""

    task: str
    name: str = "tui"
    description: str = ""
    fields: Mapping[str, Any] = field(default_factory=dict)
    base: Mapping[str, Any] = field(default_factory=dict)
    gpus: str = ""
    jobs_per_gpu: str = "1"
    cpu_jobs: str = ""
    backend: str = "local"
    retry_failed: bool = False
    #: The tune section (families that declare tunable keys): trials per row and the space, one line of TOML.
    tune_trials: str = ""
    tune_space: str = ""
    #: For a family without form fields: the preset file loaded for it, launched as it was read (None: none yet).
    family_preset: PresetBase | None = None

    def launch_preset(self) -> PresetBase:
        """The grid to launch: the form's (:meth:`preset`), or for a family without form fields the preset loaded
        for it; either refused when its size (counted from its axes, the grid never built) is over the limit."""
        if self.form_fields():
            return self.preset()
        if self.family_preset is None:
            raise GaptuiError(f"choose a preset of task {self.task} and load it (^o)")
        check_grid_size(getattr(self.family_preset, "size", None))
        return self.family_preset

    def values(self) -> dict[str, Any]:
        """The typed values of the family's fields; :class:`GaptuiError` names the field that is wrong, or says the
        grid is over :data:`MAX_GRID_RUNS` runs when a ``seeds`` field alone holds more values (nothing listed)."""
        bound, widest = self.grid_bound()
        if widest > MAX_GRID_RUNS:
            raise GaptuiError(over_limit(bound))
        return {spec.key: parse_field(spec, self.fields.get(spec.key)) for spec in self.form_fields()}

    def grid_bound(self) -> tuple[int, int]:
        """``(runs, widest range)``: the product of the lengths of the fields' axes (an empty axis counted as one
        value) and the most values one ``seeds`` field holds, both counted from what the widgets hold, so nothing
        is parsed into lists and no grid is built. The runs are what a family's grid has when its size is the
        product of its axes (:attr:`preset`'s ``size`` gives the exact count)."""
        counts = [field_count(spec, self.fields.get(spec.key)) for spec in self.form_fields()]
        return math.prod(max(1, n) for n, _ in counts), max((w for _, w in counts), default=0)

    def form_fields(self) -> tuple[FormField, ...]:
        """The fields of the family's form (none for a family without one)."""
        form = family(self.task).form
        return () if form is None else form.fields()

    def _form(self) -> FamilyForm:
        form = family(self.task).form
        if form is None:
            raise GaptuiError(f"task '{self.task}' has no form: load one of its presets")
        return form

    def preset_name(self) -> str:
        name = self.name.strip() or "tui"
        if not re.fullmatch(r"[\w.-]+", name):
            raise GaptuiError(f"preset name '{name}': use letters, digits, '.', '-' and '_' (it names the file)")
        return name

    def document(self) -> dict[str, Any]:
        """The preset document (raw TOML dict) this form describes, as it is saved."""
        fam = family(self.task)
        body = self._form().preset_from_form(self.values())
        kept = {k: v for k, v in self.base.items() if k not in (*COMMON_KEYS, *body, *self._owned())}
        # A document names its family, but one loaded from a preset written before families (no ``task``: the
        # legacy family's, as task_of reads it) is saved back as it was, without one.
        legacy = bool(self.base) and "task" not in self.base and task_of(self.base) == self.task
        doc: dict[str, Any] = {} if legacy else {"task": self.task}
        if "name" in self.base:
            doc["name"] = self.preset_name()
        if self.description.strip() or "description" in self.base:
            doc["description"] = self.description.strip()
        out = {**doc, **body, **kept}
        if fam.tunable:  # the tune section owns [tune]: blank fields drop it
            from gaptui.tune.form import tune_table

            out.pop("tune", None)
            tune = tune_table(self.base.get("tune"), self.tune_trials, self.tune_space)
            if tune is not None:
                out["tune"] = tune
        return out

    def _owned(self) -> set[str]:
        """The keys of :attr:`base` the form shows (a form left blank drops them rather than keeping them)."""
        body = {k: v for k, v in self.base.items() if k not in COMMON_KEYS}
        try:
            form = self._form()
            owned = set(form.preset_from_form(form.form_values(body)))
        except (GaptuiError, TypeError, ValueError, AttributeError):
            owned = set()
        return owned | {spec.key for spec in self.form_fields()}

    def preset(self) -> PresetBase:
        """The validated preset this form describes (as :func:`gaptui.presets.parse_preset` reads a file); a grid
        over :data:`MAX_GRID_RUNS` runs is refused (:func:`over_limit`) before it is built."""
        from gaptui.presets import parse_preset

        preset = parse_preset({**self.document(), "name": self.preset_name()}, where="the form")
        size = getattr(preset, "size", None)  # counted from its axes; PresetBase does not require it
        check_grid_size(self.grid_bound()[0] if size is None else size)
        return preset

    def slot_config(self) -> SlotConfig:
        """The device-slot fields, parsed like ``gaptui run --gpus/--jobs-per-gpu/--cpu-jobs``."""
        from gaptui.backends import BACKENDS
        from gaptui.slots import parse_gpus

        text = self.gpus.strip()
        backend = self.backend.strip().lower() or "local"
        if backend not in BACKENDS:
            raise GaptuiError(f"backend '{self.backend}': expected {' or '.join(BACKENDS)}")
        return SlotConfig(
            gpus=parse_gpus(text or None),
            jobs_per_gpu=parse_int(self.jobs_per_gpu, "jobs per GPU", 1) or 1,
            cpu_jobs=parse_int(self.cpu_jobs, "CPU jobs"),
            backend=backend,
        )


def form_fields_of(raw: Mapping[str, Any], fields: Sequence[FormField]) -> dict[str, Any]:
    """Widget values for typed ``raw`` values (a loaded preset's :meth:`~engine.tasks.FamilyForm.form_values`)."""
    return {spec.key: format_field(spec, raw.get(spec.key)) for spec in fields}


# ------------------------------------------------------------------------------------------ cost of a grid


@dataclass(frozen=True)
class PlanSummary:
    """What launching a grid means: its size, what history already holds, and a duration estimate."""

    size: int
    existing: int
    done: int
    failed: int
    to_run: int
    slots: int
    #: ``gaptui run --dry-run``'s wall time on these slots from what it has cached (:func:`gaptui.estimate.
    #: estimate_from_cache`: finished runs of the same cells, this machine's calibration); None: none yet.
    estimate_seconds: float | None
    #: What the estimate comes from: ``measured`` (calibrated throughput, with finished runs of the same cells) or
    #: ``history`` (finished runs of the same cells alone).
    estimate_source: str = "history"
    #: What the estimate leaves out or may be off by (runs not estimated, a calibration under another load).
    estimate_note: str = ""

    def text(self) -> str:
        """One line for the form's launch bar."""
        if not self.to_run:
            estimate = "nothing to run"
        elif self.estimate_seconds is None:
            estimate = "no estimate yet (gaptui run --dry-run measures this machine)"
        else:
            source = "measured throughput" if self.estimate_source == "measured" else "finished runs of its cells"
            estimate = f"≈ {format_duration(self.estimate_seconds)} on {self.slots} slot(s), from {source}"
            estimate += f" ({self.estimate_note})" if self.estimate_note else ""
        return (
            f"grid {self.size} runs · {self.existing} in history ({self.done} done, {self.failed} failed) · "
            f"{self.to_run} to run · {estimate}"
        )


def summarize(specs: Sequence[Any], records: Mapping[str, Mapping[str, Any]], slots: int) -> PlanSummary:
    """Size and history overlap (by spec hash) of a grid; ``records`` maps hash -> record. Its estimate is the
    dry run's, added by the caller."""
    hashes = [spec.hash() for spec in specs]
    statuses = [records[h]["status"] for h in hashes if h in records]
    to_run = sum(1 for h in hashes if records.get(h, {}).get("status") != "done")
    return PlanSummary(
        size=len(specs),
        existing=len(statuses),
        done=statuses.count("done"),
        failed=statuses.count("failed"),
        to_run=to_run,
        slots=slots,
        estimate_seconds=None if to_run else 0.0,  # the dry run's, once asked (off the UI thread)
    )
