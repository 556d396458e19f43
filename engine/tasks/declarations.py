"""What a family declares about its runs: metrics, axes, table layouts, derived tables, figures, tunables.

Plain frozen dataclasses: the manager builds every table, column, figure and search space from them and never
looks inside a spec.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.labels import natural_key


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
    #: Spec fields (places in the canonical dict form, ``dataset.n_train`` for a nested one) whose values this
    #: axis names in one word (alignment's recipe names the eleven recipe fields): where runs of one table cell
    #: differ in them, the row label says the axis value rather than the fields (``gin (recipe ngab)``).
    covers: tuple[str, ...] = ()
    #: Computed from the other axes (a property's class): filters and columns show it, a run's one-line
    #: description leaves it out.
    derived: bool = False

    def format(self, value: Any) -> str:
        if self.numeric and isinstance(value, (int, float)) and not isinstance(value, bool):
            return f"{value:g}"
        return "" if value is None else str(value)

    def header(self, value: Any) -> str:
        return f"{self.prefix}{self.format(value)}"

    def sort_key(self, value: Any) -> tuple[Any, ...]:
        """Numbers by value; others by ``order``, a listed value with options (``faq[init=barycenter]``) or with a
        protocol of its own (``gin (epochs 20)``) right after the value itself, the rest alphabetically; numbers
        inside a label compare as numbers (``epochs 5`` before ``epochs 20``)."""
        if self.numeric and isinstance(value, (int, float)):
            return (0, float(value), ())
        rank = {v: i for i, v in enumerate(self.order)}
        text = str(value)
        if text in rank:
            return (1, rank[text], ())
        base = text.partition(" (")[0].partition("[")[0]
        return (1, rank[base] + 0.5, natural_key(text)) if base in rank else (1, len(rank), natural_key(text))

    def key_of(self, value: Any) -> Any:
        """The grouping key of a value (numeric values rounded, so 0.12 computed two ways is one column)."""
        if self.numeric and isinstance(value, (int, float)) and not isinstance(value, bool):
            return round(float(value), 6)
        return "" if value is None else str(value)


@dataclass(frozen=True)
class Setting:
    """A named part of a run's protocol (epochs, pairs, batch size): shown as a column of the history and the
    app's History, by ``gaptui show``, in the protocol line under every table and beside a reference's protocol.

    ``fields`` are places in the spec's canonical dict form (``epochs``, ``dataset.n_train`` for a nested one);
    the setting's text is their values joined by ``/`` (``pairs 1000/200``). ``key`` names it in ``--by``,
    ``--hide`` and a reference file's ``# protocol:`` line, ``name`` in headers and labels."""

    key: str
    name: str
    fields: tuple[str, ...]


@dataclass(frozen=True)
class Bound:
    """A ceiling a family reports with its runs: the largest value of the metrics in ``bounds`` any row can reach
    (alignment: the orbit ceiling of a dataset's symmetry). Each run reports it as the metric ``key`` (the same for
    every run of one cell); tables of a bounded metric show it as a row called ``name``, never marked, and the
    figure of such a table draws it as a dashed line."""

    key: str
    name: str
    bounds: tuple[str, ...]
    note: str = ""


@dataclass(frozen=True)
class TableLayout:
    """How ranking tables are formed from run records.

    One table per value of ``group`` (``None``: a single table), rows = values of ``rows``, columns = values of
    ``columns``; a cell is the ``statistic`` (median or mean) over seeds. Row values in ``baselines`` are
    training-free references: shown, never marked, never the best; ``reference`` says the same of row values
    that are not known in advance (a solver with its options), ``reference_note`` what those rows are (the
    legend under a table). ``bounds`` are the ceilings shown under the rows of the metrics they bound.
    """

    group: str | None
    rows: str
    columns: str
    baselines: tuple[str, ...] = ()
    reference: Callable[[str], bool] | None = field(default=None, compare=False, repr=False)
    reference_note: str = "training-free baseline"
    bounds: tuple[Bound, ...] = ()
    #: The centre of a cell over seeds: ``median`` (Table D.3) or ``mean`` (Table 1 of GAPE).
    statistic: str = "median"

    def is_baseline(self, row: str) -> bool:
        """Whether the row is a reference (listed in ``baselines`` or recognised by ``reference``), never ranked."""
        return row in self.baselines or (self.reference is not None and self.reference(str(row)))

    def bounds_of(self, metric: str) -> tuple[Bound, ...]:
        """The ceilings that bound ``metric``."""
        return tuple(b for b in self.bounds if metric in b.bounds)


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
    #: Row values that are training-free references: shown, never marked, never the best (as a layout's).
    baselines: tuple[str, ...] = ()


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


@dataclass(frozen=True)
class References:
    """Published tables a family's ranking is compared with (``gaptui report``, ``--reference NAME``).

    ``default`` names the one ``gaptui report`` compares with. gaptui's own families ship theirs inside gaptui
    (``gaptui/references/<task>.<name>.csv``); a plug-in family lists its own CSV files in ``files`` (name ->
    path; format in docs/results.md). ``problem`` says, in a few words, why a reference row with these axis
    values (axis key -> value) can be no cell of the family (``"noise 1.5 is outside [0, 1)"``), ``""`` when it
    can."""

    default: str = ""
    files: Mapping[str, str | Path] = field(default_factory=dict)
    problem: Callable[[Mapping[str, Any]], str] | None = field(default=None, compare=False, repr=False)

    def file(self, name: str) -> Path | None:
        """The family's own reference file called ``name``, if it ships one."""
        path = self.files.get(name)
        return None if path is None else Path(path)

    def row_problem(self, coordinates: Mapping[str, Any]) -> str:
        return self.problem(coordinates) if self.problem is not None else ""


@dataclass(frozen=True)
class TrainFlags:
    """How ``gaptui train`` describes one run of a family with flags alone, without a preset or a spec file.

    ``required`` names the flags (as ``gaptui train`` spells them, without ``--`` and with ``_`` for ``-``) that,
    all given, make the flags a run of this family (alignment: ``base``, ``noise``, ``model``); ``spec(flags,
    placement)`` is the run's spec dict from every flag given (a flag not given is absent from ``flags``, so the
    spec's defaults apply), validated by the family's ``parse_spec``."""

    required: tuple[str, ...]
    spec: Callable[[Mapping[str, Any], Any], dict[str, Any]] = field(compare=False, repr=False)
