"""Task families: the seam every kind of experiment plugs into.

The process model is the same for every family: a *spec* (a frozen dataclass whose canonical hash is the run's
identity) is written to ``<run dir>/spec.json``; ``python -m engine`` reads it, looks up the family named by the
spec's ``task`` field and calls the family's worker loop, which streams events to ``events.jsonl`` (schema in
:mod:`engine.events`) and returns an :class:`Outcome` that the worker writes to ``result.json``. The manager
(scheduler, history, analysis, CLI, terminal app) never looks inside a spec: everything it shows or ranks comes
from what the family declares here. Adding a family touches neither the scheduler nor the history storage.

A family is a subclass of :class:`TaskFamily`, registered once::

    from engine.tasks import FAMILIES, Axis, Metric, Outcome, TableLayout, TaskFamily, TaskSpec

    @dataclass(frozen=True)
    class ToySpec(TaskSpec):          # the spec: typed fields, checked by validate(), hashed canonically
        size: int
        task: str = "toy"
        seed: int = 0

    class Toy(TaskFamily):
        name = "toy"                                   # the value of ``task`` in specs, records and presets
        title = "a toy task"                           # one line shown by pickers
        spec_type = ToySpec
        metrics = (Metric("val_mae", "val MAE", higher_is_better=False),)
        default_metric = "val_mae"                     # what tables rank by unless --metric says otherwise
        axes = (Axis("size", "size", numeric=True), Axis("model", "model"))
        table = TableLayout(group=None, rows="model", columns="size")

        def record_axes(self, spec):                   # the axis values of one run (stored in its record)
            return {"size": spec.size, "model": "mean"}

        def run(self, spec, ctx):                      # the worker loop (in the worker subprocess)
            ctx.emit("start", run=spec.hash(), pid=os.getpid())
            ...                                        # poll ctx.should_stop(); raise Cancelled after a checkpoint
            return Outcome(metrics={"val_mae": 0.5})

    FAMILIES.register(Toy())

What a family declares
    ``name``, ``title``; ``spec_type`` (a :class:`TaskSpec` dataclass; :meth:`TaskSpec.canonical` leaves out the
    placement fields listed in ``PLACEMENT`` so where a run executes never changes its identity); ``metrics``
    (:class:`Metric`: key, display name, direction, unit; tables rank only declared metrics, and the direction is
    never guessed from a name); ``axes`` (:class:`Axis`: the descriptive coordinates of a run, in the order the
    history and runs views show them as columns); ``table`` (:class:`TableLayout`: which axis makes one table per
    value, which axis gives rows and which columns; the row values in ``baselines`` are shown but never marked
    best and never count in gaps); ``result_metric`` (the metric shown in the history/runs "result" column).

What a family implements (hooks with defaults are optional)
    - :meth:`TaskFamily.record_axes` ``(spec) -> {axis key: value}``: one value per declared axis.
    - :meth:`TaskFamily.run` ``(spec, ctx) -> Outcome``: the training/evaluation loop, in the worker process.
      ``ctx`` (:class:`RunContext`) gives ``run_dir``, ``emit(event, **fields)``, ``log(text)``,
      ``should_stop()``, ``run_dir_of(run_hash)`` (the folder of a dependency) and ``shared`` (a dict common to
      the runs of one worker process, for data they can share). Raise :class:`Cancelled` after saving a
      checkpoint when ``should_stop()`` turns true (the worker exits 143 and a re-run resumes),
      :class:`RunFailed` for a scientific failure (non-finite loss...), ``GaptuiError`` for bad input.
    - :meth:`TaskFamily.steps` ``(spec, ctx)``: the same loop as a generator that yields between units of work
      (an epoch) and returns the :class:`Outcome`; a worker running packed seeds (several runs in one process)
      alternates between the runs' generators. The default runs :meth:`run` without yielding (the runs of a
      pack then go one after another, still in one process).
    - :meth:`TaskFamily.inputs` ``(spec) -> [Input]``: data to prepare before the worker starts (datasets,
      caches). Inputs with the same ``key`` are prepared once per launch; independent ones in parallel, off the
      terminal app's UI thread. A failed input fails exactly the runs that need it. The worker must still
      build (or find in its cache) what it needs, so a spec run by hand works too.
    - :meth:`TaskFamily.dependencies` ``(spec) -> (run hash, ...)``: runs that must be ``done`` before this one
      starts (a downstream run and its pretraining run). If one fails or is cancelled the dependant is recorded
      ``blocked`` with the culprit named, and never started.
    - :meth:`TaskFamily.artefacts` ``(spec) -> (file name, ...)``: what a ``done`` run's folder must hold for the
      run to count as done (default ``result.json``); :meth:`TaskFamily.dependant_artefacts` ``(spec)``: what the
      runs that depend on it read from its folder (alignment: the trained model's ``checkpoint.pt``; default none).
      A run recorded done whose artefacts are missing or corrupt (see :func:`artefact_problem`) is run again by
      ``gaptui run`` and the app, and its dependants wait for it again.
    - :meth:`TaskFamily.is_baseline` ``(spec) -> bool``: a training-free run, planned once per cell, not per seed.
    - :meth:`TaskFamily.parse_preset` ``(raw TOML dict, where) -> PresetBase`` and :meth:`TaskFamily.grid`
      ``(preset, placement) -> [spec]``: preset expansion. A preset file names its family with ``task = "..."``
      (default :data:`DEFAULT_TASK`); every spec of the grid must come out of ``grid`` (dependencies included, before
      their dependants), seed-major so early results cover every cell once.
    - :meth:`TaskFamily.preset_import_paths` ``(raw TOML dict) -> {import path: role}``: the user code a preset
      names (``module.path:Name`` models, poolings...), listed without importing it, so the user sees what
      opening the preset runs. The default finds every such string and names it by ``import_roles[key]``.
    - :meth:`TaskFamily.form_fields` ``() -> (FormField, ...)``, :meth:`TaskFamily.preset_from_form`
      ``(values) -> raw TOML dict`` and :meth:`TaskFamily.form_values` ``(raw TOML dict) -> values``: the terminal
      app's New-experiment form (declarative data only, see :class:`FormField`). ``values`` maps each field's key
      to its typed value (see :data:`FORM_KINDS`); the document ``preset_from_form`` returns is validated by
      :meth:`parse_preset`, so form errors are preset errors; ``form_values`` fills the form from a loaded preset
      and ``preset_from_form(form_values(raw))`` gives ``raw`` back. Default: no fields (the form asks for a
      preset file to load instead).
    - :meth:`TaskFamily.describe` ``(spec) -> str``: one line for progress output.
    - :meth:`TaskFamily.check` ``(specs) -> [warning]``: checks of the planned runs of this family taken
      together, once per plan and before any record is written (``gaptui run``, its dry run and the terminal
      app's launch all plan through :func:`gaptui.launch.plan`): files the runs read, import paths they name.
      Raise ``GaptuiError`` for what every run would fail on; return lines for what is suspect but runs.
    - :meth:`TaskFamily.derived_tables` ``(records, metric) -> [DerivedTable]``: tables computed across runs
      (scores relative to the other methods, averages over an axis), shown after the ranking tables everywhere
      they are (``gaptui table``, exports, the terminal app).
    - :meth:`TaskFamily.reference_file` ``(name) -> Path | None`` and ``reference`` (the name of the family's
      default reference, compared by ``gaptui report``): published tables to compare with;
      :meth:`TaskFamily.reference_problem` ``(coordinates) -> str``: axis values a reference row cannot have.
    - :meth:`TaskFamily.optimal_line` ``(derived table name or None) -> str``: what the "optimal" summary line
      under a table means (the column of largest best − worst spread); ``""`` (the default): no such line.
    - Cost and memory (``gaptui run --dry-run``, the app's launch bar and the refusal of a plan that cannot fit):
      :meth:`TaskFamily.cost_units` ``(spec) -> float | None`` (units of work: epochs, epochs x graphs...),
      :meth:`TaskFamily.cost_cell` ``(spec) -> str`` (runs that cost the same per unit share their history),
      :meth:`TaskFamily.estimate_costs` ``(specs, ctx) -> CostReport`` (default: the history of finished runs of
      the same cell; alignment measures its throughput through ``calibration_module``) and
      :meth:`TaskFamily.memory` ``(spec) -> MemoryNeed | None`` (the peak a run needs; checked before any work,
      and again once inputs whose size is unknown until built are built). Types in :mod:`engine.cost` and
      :mod:`engine.memory`.
    - Training loops share :mod:`engine.loop` (resume at the exact batch, checksummed checkpoints, stop ->
      :class:`Cancelled`, non-finite loss named by step, the standard events, a generator for packed seeds): a
      family writes its epoch and its evaluation (:class:`engine.loop.EpochTask`) and returns
      ``engine.loop.epoch_steps(...)`` from :meth:`TaskFamily.steps`.

Where families come from
    The built-in families (:data:`BUILTIN`, imported on first use), then the modules named in the
    ``GAPTUI_FAMILIES`` environment variable (comma-separated; each registers its families when imported; the
    worker subprocess inherits the variable), then the ``gaptui.families`` entry-point group of installed packages.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import os
import sys
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from engine.errors import GaptuiError, did_you_mean, unknown
from engine.files import read_user_text
from engine.registry import find_import_paths
from engine.typed import frozen_json, json_fields, parse_dataclass

#: Modules that register the families shipped with gaptui (imported on first use of :data:`FAMILIES`).
BUILTIN = ("engine.tasks.alignment", "engine.tasks.gape", "engine.tasks.properties")
#: Environment variable naming extra modules that register families (comma-separated).
ENV_FAMILIES = "GAPTUI_FAMILIES"
ENTRY_POINT_GROUP = "gaptui.families"
DEFAULT_TASK = "alignment"


# ------------------------------------------------------------------------------------------------ metadata


@dataclass(frozen=True)
class Metric:
    """A metric a family reports in ``result.json``'s ``metrics``.

    ``unit == "%"`` marks a share in [0, 1]: displayed times 100 with one decimal, near-best thresholds in
    percentage points. Any other unit (``""``, ``"eV"``...) is displayed as is with three decimals and
    near-best thresholds are relative (percent of the best value).
    """

    key: str
    name: str
    higher_is_better: bool
    unit: str = ""

    @property
    def share(self) -> bool:
        return self.unit == "%"

    @property
    def direction(self) -> str:
        return "higher" if self.higher_is_better else "lower"


@dataclass(frozen=True)
class Axis:
    """A coordinate of a run (dataset, noise, model, PE...): a key of the record's ``axes`` mapping.

    ``numeric`` axes sort by value and their header reads ``{prefix}{value:g}`` (``η=0.12``); others sort by
    ``order`` (listed values first, the rest alphabetically) and show the value as is.
    """

    key: str
    name: str
    numeric: bool = False
    prefix: str = ""
    order: tuple[str, ...] = ()
    #: The value from a record's spec dict, for records filed before the family declared this axis.
    of_spec: Callable[[Mapping[str, Any]], Any] | None = field(default=None, compare=False, repr=False)

    def format(self, value: Any) -> str:
        if self.numeric and isinstance(value, (int, float)) and not isinstance(value, bool):
            return f"{value:g}"
        return "" if value is None else str(value)

    def header(self, value: Any) -> str:
        return f"{self.prefix}{self.format(value)}"

    def sort_key(self, value: Any) -> tuple[Any, ...]:
        if self.numeric and isinstance(value, (int, float)):
            return (0, float(value), "")
        rank = {v: i for i, v in enumerate(self.order)}
        return (1, rank.get(str(value), len(rank)), str(value))

    def key_of(self, value: Any) -> Any:
        """The grouping key of a value (numeric values rounded, so 0.12 computed two ways is one column)."""
        if self.numeric and isinstance(value, (int, float)) and not isinstance(value, bool):
            return round(float(value), 6)
        return "" if value is None else str(value)


@dataclass(frozen=True)
class TableLayout:
    """How ranking tables are formed from run records.

    One table per value of ``group`` (``None``: a single table), rows = values of ``rows``, columns = values of
    ``columns``; a cell is the ``statistic`` (median or mean) over seeds. Row values in ``baselines`` are
    training-free references: shown, never marked, never the best.
    """

    group: str | None
    rows: str
    columns: str
    baselines: tuple[str, ...] = ()
    #: The centre of a cell over seeds: ``median`` (Table D.3) or ``mean`` (Table 1 of GAPE).
    statistic: str = "median"
    #: Axes outside the table's own whose value every run of a cell should share (alignment: the recipe). A
    #: table says which value its runs have, and marks a cell whose runs differ in one.
    uniform: tuple[str, ...] = ()


@dataclass(frozen=True)
class DerivedTable:
    """A table a family computes across its finished runs, shown after its ranking tables.

    For scores that need more than one cell's seeds, such as a method's score relative to the others averaged
    over an axis (the property study's Table 2). ``rows`` and ``columns`` are keys of declared axes;
    ``values[(row, column)]`` are the numbers a cell averages (shown as mean ± sample std, ``statistic`` says
    over what); the best cell of each column is marked by the metric's direction.
    """

    name: str
    metric: Metric
    rows: str
    columns: str
    values: Mapping[tuple[str, Any], tuple[float, ...]]
    statistic: str = "mean ± std"
    #: Mark the cells not significantly different from their column's best (Holm-corrected Welch over the values),
    #: as the ranking tables do.
    ties: bool = False


# ------------------------------------------------------------------------------------------------ specs


class TaskSpec:
    """Base of every family's spec (subclasses are frozen dataclasses with ``task`` and ``seed`` fields).

    The canonical form (:meth:`canonical`) is what the run computes: it leaves out ``PLACEMENT`` fields (where and
    how it executes). Its SHA-256 over sorted, compact JSON is the run's identity.
    """

    task: str
    seed: int
    #: Fields that say where or how a run executes, not what it computes: left out of the hash.
    PLACEMENT: ClassVar[tuple[str, ...]] = ("device", "datasets_dir", "data_root")

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], where: str = "run spec") -> Any:
        spec = parse_dataclass(cls, dict(raw), where)  # type: ignore[type-var]
        spec.validate(where)
        return spec

    def validate(self, where: str = "run spec") -> None:
        """Raise GaptuiError naming ``where``, the field and the expected value when the spec cannot run."""

    @frozen_json
    def to_dict(self) -> dict[str, Any]:
        return json_fields(self)  # type: ignore[no-any-return]

    @frozen_json
    def canonical(self) -> dict[str, Any]:
        return {k: v for k, v in self.to_dict().items() if k not in self.PLACEMENT}

    def hash(self) -> str:
        known = self.__dict__.get("_hash")
        if known is None:  # specs are frozen: computed once (a grid's planning asks each spec many times)
            blob = json.dumps(self.canonical(), sort_keys=True, separators=(",", ":"))
            known = hashlib.sha256(blob.encode()).hexdigest()
            object.__setattr__(self, "_hash", known)
        return known

    def replace(self, **changes: Any) -> Any:
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]


# ------------------------------------------------------------------------------------------------ artefacts

#: The file the worker writes when a run ends (``status``, ``run`` hash, metrics...).
RESULT = "result.json"


def artefact_problem(spec: TaskSpec, run_dir: Path, dependants: bool = False) -> str:
    """Why the finished run ``spec`` in ``run_dir`` no longer counts as done (``""`` when it does).

    Checks its family's :meth:`~TaskFamily.artefacts` (and, with ``dependants``, its
    :meth:`~TaskFamily.dependant_artefacts`): each file present; ``result.json`` valid JSON saying ``done`` for this
    run's hash; any other file matching its fingerprint (``<stem>.json``: size and SHA-256) when one was written.
    The answer reads ``its result.json is missing`` and the like.
    """
    from engine.files import mismatch, read_json

    fam = family(spec.task)
    names = tuple(fam.artefacts(spec)) + (tuple(fam.dependant_artefacts(spec)) if dependants else ())
    for name in dict.fromkeys(names):
        path = Path(run_dir) / name
        if not path.is_file():
            return f"its {name} is missing"
        if name == RESULT:
            result = read_json(path)
            if not isinstance(result, dict):
                return f"its {name} is corrupt (not a JSON object)"
            if result.get("run") != spec.hash():
                return f"its {name} belongs to another run ({str(result.get('run'))[:12]})"
            if result.get("status") != "done":
                return f"its {name} says {result.get('status')!r}, not done"
            continue
        sums = path.with_suffix(".json")
        expected = read_json(sums) if sums != path else None
        if isinstance(expected, dict) and "sha256" in expected:
            problem = mismatch(path, expected)
            if problem:
                return f"its {name} fails its checksum ({problem})"
    return ""


# ------------------------------------------------------------------------------------------------ worker side


class Cancelled(Exception):
    """Raised by a worker loop that stopped on request after saving its checkpoint (worker exit 143)."""

    def __init__(self, **where: Any) -> None:
        super().__init__("cancelled")
        self.where = where


class RunFailed(Exception):
    """Raised by a worker loop for a failure of the run itself (not of its input): non-finite loss and the like.

    ``kind`` goes to the ``error`` event (``nan`` exits 3, anything else 1) with the ``event`` fields;
    ``fields`` go to ``result.json``.
    """

    def __init__(
        self, message: str, kind: str = "crash", *, event: dict[str, Any] | None = None, **fields: Any
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.event = event or {}
        self.fields = fields


@dataclass
class Outcome:
    """What a finished worker loop returns: its final metrics, parameter count and extra ``result.json`` fields."""

    metrics: dict[str, float]
    params: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class RunContext:
    """What the worker hands to a family's loop."""

    run_dir: Path
    emit: Callable[..., None]
    log: Callable[[str], None]
    should_stop: Callable[[], bool]
    #: Shared by the runs of one worker process (packed seeds): a family keeps data they all read here, once.
    shared: dict[str, Any] = field(default_factory=dict)

    def run_dir_of(self, run_hash: str) -> Path:
        """The folder of another run of the same workspace (a dependency): run folders are siblings."""
        return self.run_dir.parent / run_hash[:12]


T = TypeVar("T")


def run_steps(steps: Generator[None, None, T]) -> T:
    """Run a :meth:`TaskFamily.steps` generator to its end and return its outcome (one run alone)."""
    while True:
        try:
            next(steps)
        except StopIteration as end:
            return end.value


@dataclass(frozen=True)
class Input:
    """Something to prepare before a run starts (a dataset, a PE cache). Equal ``key`` = prepared once."""

    key: str
    label: str
    build: Callable[[], Any]


# ------------------------------------------------------------------------------------------------ presets


class PresetBase:
    """What the manager reads from any family's preset (families define frozen dataclasses with these attributes).

    ``name``, ``description``, ``seeds`` (the planned seeds of a trained cell), ``path`` (the TOML file, if any),
    ``timeout`` (seconds per run or None), ``retries`` (re-runs of a failed run) and ``pack_seeds`` (how many seeds
    of one cell share a worker process); ``task`` names the family.
    These keys, the ``[run]`` policy and ``[slurm]`` are one schema for every family: a family's ``parse_preset``
    starts from :func:`engine.presets.parse_head` (the common part parsed and checked) and reads only its own keys.
    A family whose grids may go to a cluster declares a ``slurm`` field (default None) and passes ``slurm=True``;
    the engine parses that table with the rest and never acts on it.
    """

    task: ClassVar[str] = ""
    name: str
    description: str
    seeds: tuple[int, ...]
    path: Path | None
    #: What planning merged or adjusted (repeated grid values), one line each, shown to the user.
    notes: tuple[str, ...] = ()

    # A preset whose runs follow a policy declares ``policy`` (a field or property): an object with ``timeout``,
    # ``retries`` and ``pack_seeds``, such as :class:`engine.presets.RunPolicy` or a ``[run]`` table built on it.

    @property
    def timeout(self) -> float | None:
        policy = getattr(self, "policy", None)
        return None if policy is None else policy.timeout

    @property
    def retries(self) -> int:
        policy = getattr(self, "policy", None)
        return 0 if policy is None else policy.retries

    @property
    def pack_seeds(self) -> int:
        policy = getattr(self, "policy", None)
        return 1 if policy is None else policy.pack_seeds


@dataclass(frozen=True)
class Placement:
    """Where a grid's runs find their data: copied into every spec's placement fields by :meth:`TaskFamily.grid`."""

    datasets_dir: str
    data_root: str


def unknown_keys(where: str, raw: Mapping[str, Any], known: tuple[str, ...]) -> None:
    """Raise for the first key of ``raw`` not in ``known`` (with a did-you-mean)."""
    for key in raw:
        if key not in known:
            raise GaptuiError(f"{where}: unknown key '{key}'{did_you_mean(key, known)}; known: {', '.join(known)}")


def check_run_options(timeout: float | None, retries: int | None, where: str, pack_seeds: int | None = None) -> None:
    """How the scheduler treats runs (a preset's timeout, retries and pack_seeds), checked once at planning."""
    if timeout is not None and not timeout > 0:
        raise GaptuiError(f"{where}: timeout = {timeout:g}: expected seconds > 0 (or no timeout)")
    if retries is not None and retries < 0:
        raise GaptuiError(f"{where}: retries = {retries}: expected a count >= 0")
    if pack_seeds is not None and pack_seeds < 1:
        raise GaptuiError(f"{where}: pack_seeds = {pack_seeds}: expected a count >= 1 (1: one run per process)")


def unique_values(values: list[Any], key: Callable[[Any], Any], name: str, notes: list[str]) -> list[Any]:
    """``values`` without repeats (by ``key``), first forms kept; a line in ``notes`` says what was merged."""
    seen: dict[Any, Any] = {}
    repeated: list[str] = []
    for value in values:
        k = key(value)
        if k in seen:
            repeated.append(str(getattr(value, "base", value)))
        else:
            seen[k] = value
    if repeated:
        notes.append(f"key '{name}' repeats {', '.join(repeated)}: merged (a grid is a set of runs)")
    return list(seen.values())


def seeds_of(where: str, value: Any, key: str = "seeds") -> list[int]:
    """A preset's list of seeds: non-empty, integers, each >= 0."""
    seeds = list_of(where, key, value, int, "integer seeds")
    for seed in seeds:
        if seed < 0:
            raise GaptuiError(f"{where}: key '{key}' holds {seed}: expected seeds >= 0")
    return seeds


def list_of(where: str, key: str, value: Any, kind: type | tuple[type, ...], what: str) -> list[Any]:
    """A non-empty TOML list whose items are all ``kind`` (booleans never count as numbers)."""
    if not isinstance(value, list):
        raise GaptuiError(f"{where}: key '{key}' = {value!r}: expected a list of {what}")
    if not value:
        raise GaptuiError(f"{where}: key '{key}' is empty: the grid would have no runs")
    for item in value:
        if isinstance(item, bool) or not isinstance(item, kind):
            raise GaptuiError(f"{where}: key '{key}' holds {item!r}: expected {what}")
    return value


# ------------------------------------------------------------------------------------------------ form fields

#: The kinds of :class:`FormField` and the type of their value in a form's ``values``:
#: ``multi`` (checkboxes over ``choices``: a list of the chosen values), ``numbers`` (a typed list of numbers:
#: ``list[float]``), ``seeds`` (``0-9, 12``: ``list[int]``), ``int`` / ``number`` (``int | None`` / ``float |
#: None``, blank is None), ``choice`` (one of ``choices``: ``str``), ``text`` and ``path`` (``str``), ``params``
#: (``key=value`` items: a dict of TOML values), ``bool`` and ``rows`` (repeated groups of the sub-fields
#: ``fields``, e.g. a base dataset and its parameters: ``list[dict]``, one values dict per row).
FORM_KINDS = ("multi", "numbers", "seeds", "int", "number", "choice", "text", "path", "params", "bool", "rows")


@dataclass(frozen=True)
class FormField:
    """One field of a family's New-experiment form: what it edits, never how it is drawn.

    ``key`` names the value in the form's ``values`` (and the widget); ``section`` groups fields under a title.
    ``choices`` lists the values of ``multi`` and ``choice`` fields, ``choices_from`` computes them (a registry:
    called once, off the terminal's UI thread, may import torch); ``label_of`` shows a choice (``0.12`` as
    ``12 %``). ``parse_item`` turns an extra item typed next to a ``multi`` list into a value (raises
    ``GaptuiError``); a ``multi`` field without it takes no typed items unless ``free`` (items kept as text, for
    ``module.path:Name`` import paths). ``fields`` are the sub-fields of a ``rows`` field; ``default`` is the value
    of a new form (a row's defaults: each sub-field's ``default``).
    """

    key: str
    label: str
    kind: str
    default: Any = None
    help: str = ""
    choices: tuple[Any, ...] = ()
    choices_from: Callable[[], Sequence[Any]] | None = None
    label_of: Callable[[Any], str] | None = None
    parse_item: Callable[[str], Any] | None = None
    free: bool = False
    fields: tuple[FormField, ...] = ()
    section: str = ""
    placeholder: str = ""
    #: For a ``rows`` field: placeholders of a row's sub-fields computed from its values (a base dataset's
    #: parameter defaults and split sizes), ``{sub-field key: text}``; called whenever a choice of the row changes.
    hints: Callable[[Mapping[str, Any]], Mapping[str, str]] | None = None

    def __post_init__(self) -> None:
        if self.kind not in FORM_KINDS:
            raise ValueError(f"form field '{self.key}': kind '{self.kind}' is not one of {', '.join(FORM_KINDS)}")
        if self.kind == "rows" and not self.fields:
            raise ValueError(f"form field '{self.key}': a rows field needs sub-fields")

    def show(self, choice: Any) -> str:
        """How a choice is listed."""
        return self.label_of(choice) if self.label_of else str(choice)


def drop_blank(table: Mapping[str, Any]) -> dict[str, Any]:
    """``table`` without its blank values (None, ``""``): what a form leaves empty is left out of the preset,
    so the family's defaults apply and a loaded preset is written back as it was."""
    return {k: v for k, v in table.items() if v is not None and v != ""}


def form_table(values: Mapping[str, Any], keys: Mapping[str, str], more: str = "") -> dict[str, Any]:
    """A preset table from form values: ``keys`` maps form keys to table keys (blank values left out), and the
    ``key=value`` field ``more`` adds the table's other keys."""
    table = drop_blank({name: values.get(key) for key, name in keys.items()})
    return {**table, **(values.get(more) or {})} if more else table


def table_values(table: Mapping[str, Any] | None, keys: Mapping[str, str], more: str = "") -> dict[str, Any]:
    """The inverse of :func:`form_table`: a preset table as form values (absent keys are blank)."""
    table = dict(table or {})
    out: dict[str, Any] = {key: table.pop(name, None) for key, name in keys.items()}
    if more:
        out[more] = table
    return out


# ------------------------------------------------------------------------------------------------ families


@dataclass(frozen=True)
class Figure:
    """A figure ``gaptui figures`` draws for a family (drawn by :mod:`gaptui.figures`; the engine only names it).

    Kinds: ``lines`` (the metric against the table's columns, one line per row with its seed band), ``gap`` (the
    gap to the worst row, optimal column marked), ``curves`` (learning curves per cell from ``events.jsonl``),
    ``cd`` (critical-difference diagram of the average ranks), ``bars`` (grouped bars with seed error bars;
    ``derived`` for the family's derived tables), ``heatmap`` (rows x columns of cell values per table) and
    ``series`` (metrics named ``<prefix><x>`` against x, e.g. accuracy per test size).
    """

    kind: str
    derived: bool = False
    prefix: str = ""
    label: str = ""


@dataclass(frozen=True)
class Tunable:
    """A spec value ``gaptui tune`` may search: ``field`` is its place in the spec's dict form (``lr``, or
    ``model_kwargs.layers`` for a nested one), ``kind`` ``float`` or ``int``, and ``space`` the search space used
    when a preset's ``[tune]`` names the key without one (``{"log": [a, b]}``, ``{"range": [a, b]}`` or a list of
    choices)."""

    field: str
    kind: str
    space: Any
    help: str = ""


class TaskFamily:
    """Base class of task families: subclass, fill in the class attributes and hooks, register an instance."""

    name: ClassVar[str] = ""
    title: ClassVar[str] = ""
    spec_type: ClassVar[type[TaskSpec]] = TaskSpec
    metrics: ClassVar[tuple[Metric, ...]] = ()
    default_metric: ClassVar[str] = ""
    #: The metric of the history/runs "result" column (defaults to ``default_metric``).
    result_metric: ClassVar[str] = ""
    axes: ClassVar[tuple[Axis, ...]] = ()
    table: ClassVar[TableLayout]
    #: A shipped reference table (``gaptui/references/<name>.csv``) that ``gaptui report`` compares with; "" for none.
    reference: ClassVar[str] = ""
    #: What ``gaptui figures`` and ``gaptui report`` draw for this family.
    figures: ClassVar[tuple[Figure, ...]] = (Figure("lines"), Figure("curves"), Figure("cd"))
    #: The spec values ``gaptui tune`` may search, by the key a preset's ``[tune]`` names them with; a family
    #: that declares none cannot be tuned.
    tunable: ClassVar[Mapping[str, Tunable]] = {}

    # -------------------------------------------------------------------------------- metadata look-ups

    def metric(self, key: str) -> Metric:
        """The declared metric ``key`` (GaptuiError with a did-you-mean otherwise)."""
        for m in self.metrics:
            if m.key == key:
                return m
        raise unknown(f"metric of task '{self.name}'", key, [m.key for m in self.metrics])

    def axis(self, key: str) -> Axis:
        for a in self.axes:
            if a.key == key:
                return a
        raise unknown(f"axis of task '{self.name}'", key, [a.key for a in self.axes])

    # -------------------------------------------------------------------------------- specs

    def parse_spec(self, raw: Mapping[str, Any], where: str = "run spec") -> TaskSpec:
        spec: TaskSpec = self.spec_type.from_dict(raw, where)
        return spec

    def record_axes(self, spec: Any) -> dict[str, Any]:
        raise NotImplementedError

    def is_baseline(self, spec: Any) -> bool:
        return False

    def dependencies(self, spec: Any) -> tuple[str, ...]:
        return ()

    def artefacts(self, spec: Any) -> tuple[str, ...]:
        """Files of a done run's folder without which it does not count as done (see :func:`artefact_problem`)."""
        return (RESULT,)

    def dependant_artefacts(self, spec: Any) -> tuple[str, ...]:
        """Files of a done run's folder that the runs depending on it read (checked when such a run is to start)."""
        return ()

    def describe(self, spec: Any) -> str:
        values = self.record_axes(spec)
        return " ".join(a.format(values.get(a.key)) for a in self.axes) + f" seed {spec.seed}"

    def check(self, specs: list[Any]) -> list[str]:
        """Check the planned runs of this family together, once per plan, before any record is written.

        Raise GaptuiError (one line naming the file, key or value) for input every run would fail on; return
        ``warning`` lines for input that runs but is suspect. The default checks nothing."""
        return []

    # -------------------------------------------------------------------------------- data and worker

    def inputs(self, spec: Any) -> list[Input]:
        return []

    def run(self, spec: Any, ctx: RunContext) -> Outcome:
        raise NotImplementedError

    def steps(self, spec: Any, ctx: RunContext) -> Generator[None, None, Outcome]:
        """:meth:`run` as a generator for packed seeds; families that can interleave runs yield between epochs."""
        outcome = self.run(spec, ctx)
        yield from ()
        return outcome

    # -------------------------------------------------------------------------------- results

    def derived_tables(self, records: list[dict[str, Any]], metric: str) -> list[DerivedTable]:
        """Tables computed from the finished ``records`` of this family when ranking by ``metric`` (default none)."""
        return []

    # -------------------------------------------------------------------------------- presets

    def parse_preset(self, raw: dict[str, Any], where: str, path: Path | None = None) -> PresetBase:
        raise GaptuiError(f"{where}: task '{self.name}' has no presets")

    #: What a preset's import paths are used as, by the TOML key that holds them (e.g. ``{"models": "model"}``).
    import_roles: ClassVar[Mapping[str, str]] = {}

    def preset_import_paths(self, raw: dict[str, Any]) -> dict[str, str]:
        """``{module.path:Name: role}`` for the code a preset document names, in file order; imports nothing.

        The default takes every string (or table key) of the form ``module.path:Name``, named by
        :attr:`import_roles` or else by its key; a family whose presets hold such strings that are not code
        overrides it."""
        return find_import_paths(raw, self.import_roles)

    def grid(self, preset: Any, placement: Placement, limit: int | None = None) -> list[Any]:
        raise NotImplementedError

    # -------------------------------------------------------------------------------- the New-experiment form

    def form_fields(self) -> tuple[FormField, ...]:
        """The fields of this family's form, in order (default none: the app offers to load a preset instead)."""
        return ()

    def preset_from_form(self, values: dict[str, Any]) -> dict[str, Any]:
        """The preset document (raw TOML dict, without ``task``, ``name``, ``description``) a filled form means;
        :meth:`parse_preset` validates it."""
        raise GaptuiError(f"task '{self.name}' has no form: load one of its presets")

    def form_values(self, raw: dict[str, Any]) -> dict[str, Any]:
        """The form's values for a preset document (the inverse of :meth:`preset_from_form`)."""
        raise GaptuiError(f"task '{self.name}' has no form: load one of its presets")

    # -------------------------------------------------------------------------------- cost and memory
    # What a run costs (``gaptui run --dry-run``'s estimate, the app's launch bar) and how much memory it needs
    # (a plan that cannot fit is refused before any work). Types in :mod:`engine.cost` and :mod:`engine.memory`.

    #: A module that ``python -m`` runs to measure this family's cost keys (JSON request on stdin, one measurement
    #: per key on stdout; see :mod:`engine.cost`); "" when the family has no calibration.
    calibration_module: ClassVar[str] = ""

    def cost_cell(self, spec: Any) -> str:
        """What makes two runs cost the same per unit of work, as a string: runs of one cell share their history.
        The default: the canonical spec without its seed."""
        return json.dumps({k: v for k, v in spec.canonical().items() if k != "seed"}, sort_keys=True, default=str)

    def cost_units(self, spec: Any) -> float | None:
        """Units of work of a run (its epochs, epochs x graphs...): finished runs of its cell give the seconds per
        unit. None (the default): a run is one whole; its cell's runs give its duration."""
        return None

    def cost_steps(self, spec: Any) -> int | None:
        """Optimiser steps a run takes at the least, known from its spec alone (no input built): the floor of its
        duration that no measurement is needed for (:data:`gaptui.estimate.STEP_FLOOR` seconds a step), so a run of
        billions of epochs is refused before it starts. None (the default): no floor."""
        return None

    def cost_evaluations(self, spec: Any) -> int:
        """Evaluation passes of a run timed apart from its units (``eval`` events with ``seconds``); default 0."""
        return 0

    def cost_label(self, spec: Any) -> str:
        """How the estimate groups runs (default: the value of the table's row axis, e.g. the model)."""
        return self.axis(self.table.rows).format(self.record_axes(spec).get(self.table.rows))

    def estimate_costs(self, specs: list[Any], ctx: Any) -> Any:
        """The seconds of ``specs`` (runs of this family left to do) on the slot profiles of ``ctx``
        (:class:`engine.cost.CostContext`), as a :class:`engine.cost.CostReport`. The default is the history of
        finished runs of the same cell (:meth:`engine.cost.CostContext.from_history`); a family with a calibrated
        model (alignment: measured throughput) overrides it."""
        return ctx.from_history(self, specs)

    def overhead_probe(self, placement: Placement, count: int) -> list[Any]:
        """``count`` tiny runs (distinct seeds) whose duration through the real worker is a run's overhead (process
        start, imports, loading, result); none (the default) when the family's model needs no overhead."""
        return []

    def memory(self, spec: Any) -> Any:
        """What the run needs in memory at its peak (:class:`engine.memory.MemoryNeed`: the run or dataset, its
        kind, the bytes, what they are made of, what to lower), None when nothing grows with its parameters or
        its size is unknown until its input is built (checked again once it is). Runs with the same
        ``MemoryNeed.key`` are checked once."""
        return None

    # -------------------------------------------------------------------------------- reference tables, optimal lines

    def reference_file(self, name: str) -> Path | None:
        """The reference table (CSV, format in docs/results.md) this family ships itself under ``name``, if any.

        gaptui's own families ship theirs inside gaptui (``gaptui/references/<task>.<name>.csv``); a plug-in
        family returns the path of its file here, so ``--reference NAME`` and ``gaptui report`` find it."""
        return None

    def reference_problem(self, coordinates: Mapping[str, Any]) -> str:
        """Why a reference row with these axis values (axis key -> value) can be no cell of this family, in a few
        words (``"noise 1.5 is outside [0, 1)"``); ``""`` when it can (the default)."""
        return ""

    def optimal_line(self, derived: str | None) -> str:
        """What this family's "optimal" summary line says, before ``: <column value>``, for its ranking tables
        (``derived`` None) or its derived table named ``derived``; ``""`` for no line (the default).

        The value is the column whose best − worst spread over the table's rows is largest (the first on a tie);
        alignment: ``"optimal noise (largest best − worst spread)"``, the noise that best separates the models."""
        return ""


class FamilyRegistry:
    """Task families by name; built-ins and plug-ins are imported on first use."""

    def __init__(self) -> None:
        self._items: dict[str, TaskFamily] = {}
        self._loaded = False
        self._loading = False
        #: ``GAPTUI_FAMILIES`` modules that failed to import, with why (each was warned about once).
        self.failed: dict[str, str] = {}

    def register(self, family: TaskFamily) -> TaskFamily:
        """Add ``family`` (an instance); a second family of the same name is an error."""
        if not family.name or not isinstance(family.name, str):
            raise ValueError(f"{type(family).__name__}: a task family needs a name")
        if family.name in self._items and type(self._items[family.name]) is not type(family):
            raise ValueError(f"task family '{family.name}' registered twice")
        declared = {m.key for m in family.metrics}
        for key in (family.default_metric, family.result_metric):
            if key and key not in declared:
                raise ValueError(f"task family '{family.name}': metric '{key}' is not declared in metrics")
        axes = {a.key for a in family.axes}
        for key in (family.table.group, family.table.rows, family.table.columns):
            if key is not None and key not in axes:
                raise ValueError(f"task family '{family.name}': table axis '{key}' is not declared in axes")
        self._items[family.name] = family
        return family

    def _load(self) -> None:
        if self._loaded or self._loading:
            return
        self._loading = True
        try:
            for module in BUILTIN:
                importlib.import_module(module)
            for module in filter(None, (m.strip() for m in os.environ.get(ENV_FAMILIES, "").split(","))):
                try:
                    importlib.import_module(module)
                except (Exception, SystemExit) as exc:  # a plug-in's bug must not take the built-in families down
                    self.failed[module] = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
                    print(
                        f"warning: {ENV_FAMILIES}: could not import '{module}' ({self.failed[module]}); "
                        "the other families still work",
                        file=sys.stderr,
                    )
            from importlib.metadata import entry_points

            for entry in entry_points(group=ENTRY_POINT_GROUP):
                entry.load()
            self._loaded = True
        finally:
            self._loading = False

    def get(self, name: str) -> TaskFamily:
        self._load()
        if name not in self._items:
            error = unknown("task", name, self._items)
            if self.failed:
                error = GaptuiError(f"{error}; ${ENV_FAMILIES} modules that did not import: {', '.join(self.failed)}")
            raise error
        return self._items[name]

    def names(self) -> list[str]:
        self._load()
        return list(self._items)

    def __contains__(self, name: object) -> bool:
        self._load()
        return name in self._items

    def __iter__(self) -> Iterator[TaskFamily]:
        self._load()
        return iter(list(self._items.values()))


FAMILIES = FamilyRegistry()


def family(name: str | None) -> TaskFamily:
    """The family called ``name`` (``None`` means :data:`DEFAULT_TASK`)."""
    return FAMILIES.get(name or DEFAULT_TASK)


def task_of(raw: Mapping[str, Any]) -> str:
    """The ``task`` of a spec, record or preset dict (absent: :data:`DEFAULT_TASK`, as written before families)."""
    task = raw.get("task") or DEFAULT_TASK
    if not isinstance(task, str):
        raise GaptuiError(f"task = {task!r}: expected a family name such as {DEFAULT_TASK}")
    return task


def load_spec(raw: Mapping[str, Any], where: str = "run spec") -> Any:
    """The spec of any family, from its dict form (dispatch on ``task``)."""
    task = task_of(raw)
    try:
        fam = FAMILIES.get(task)
    except GaptuiError as exc:
        raise GaptuiError(f"{where}: {exc}") from None
    return fam.parse_spec({**raw, "task": task}, where)


def load_spec_file(path: Path) -> Any:
    if not Path(path).exists():
        raise GaptuiError(f"run spec {path}: file not found")
    try:
        raw = json.loads(read_user_text(path, "a run spec is a JSON text file"))
    except json.JSONDecodeError as exc:
        raise GaptuiError(f"run spec {path}: not valid JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise GaptuiError(f"run spec {path}: expected a JSON object")
    return load_spec(raw, where=f"run spec {path}")
