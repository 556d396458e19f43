"""Reference results (a published table, another machine's export) and how our ranking compares with them.

Every task family may ship reference tables (its paper's), declared by the family (:mod:`engine.tasks`,
"Reference tables and optimal lines"). A reference file is CSV, the columns of ``gaptui export``'s ``tables.csv``
for that family (its table layout's axis keys, the cell's centre ``median`` or ``mean``, and ``std``; other
columns such as ``runs`` are ignored), preceded by optional ``# key: value`` lines::

    # source: Table D.3 of "Graph Alignment for Benchmarking Graph Neural Networks ..."
    # task: alignment              (the family; default: the family it is loaded for, see below)
    # metric: val_lap_acc          (default: the family's default metric)
    # units: percent               (percent or share; default share, as gaptui export writes accuracies)
    # table: NAME                  (optional: a derived table of the family, e.g. "Table 2: mean R score")
    # protocol: epochs=300, pairs=5000/500, noise_model=add_remove, seeds=10
    # protocol[aqsol]: pairs=7836/998, noise_model=add    (a group's own values, over the line above)
    dataset,model,noise,median,std
    er,gcn,0.12,49.5,0.9
    er,laplacian,0.12,7.5,         (std may be empty)

``protocol`` keys are the family's settings (:class:`engine.tasks.Setting`: alignment's ``epochs``, ``pairs``,
``batch``, ``budget``, ``noise_model``) and ``seeds`` (values per cell); a comparison prints them beside ours and
says when they differ (:mod:`gaptui.reference_protocol`). Any other line starting with ``#`` is a comment.

A file loaded for no family that names none is of the one family whose table layout its header has (an export of another
machine), else read as every reference was before families: alignment's (:data:`engine.tasks.LEGACY_TASK`). Shipped
references live in ``gaptui/references/`` as ``<task>.<name>.csv`` (``alignment.paper``: Table D.3, ``gape.paper``:
Table 1 of the alignment paper, ``properties.paper``: Table 2 of the property-suite paper); a family may also ship its
own (:class:`engine.tasks.References`). ``--reference NAME`` finds, for the family compared,
``<workspace>/references/<task>.NAME.csv`` or ``<workspace>/references/NAME.csv`` (first), then a shipped one, or takes
a path; loaded for no family, ``NAME`` must be one family's only.

Comparison, per table of ours that the reference covers (same table kind, same group) and per column of it:

- each cell: our centre, the reference's, and the difference ours - reference (metric units);
- Kendall's tau-b between our values and the reference's over the rows both have in that column (baseline rows,
  e.g. alignment's Laplacian, left out; ``None`` with fewer than two such rows);
- whether every row that is best in the reference in that column (ties: all of them) is marked best or within
  1 point of our best in our table (the marks of :mod:`gaptui.analysis`); ``None`` when we did not run it.
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import GaptuiError, did_you_mean
from engine.tasks import FAMILIES, LEGACY_TASK, Axis, Metric, TaskFamily, family
from engine.user_files import read_user_text
from gaptui import analysis
from gaptui.analysis.statistics import kendall_tau
from gaptui.reference_protocol import ProtocolComparison, compare_protocol
from gaptui.workspace import Workspace

#: References shipped with gaptui (inside the package, so an installed wheel finds them): ``<task>.<name>.csv``.
BUNDLED = Path(__file__).resolve().parent / "references"
#: Names of a cell's centre a reference may use (``median`` for Table D.3, ``mean`` for Table 1 and Table 2).
CENTRES = ("median", "mean")
META_KEYS = ("source", "task", "metric", "units", "table", "protocol")
UNITS = ("share", "percent")
_META = re.compile(r"#\s*([a-z_]+)(?:\[(.+?)\])?\s*:(.*)")


# ------------------------------------------------------------------------------------------ files


@dataclass(frozen=True)
class ReferenceCell:
    """One reference value in the metric's own units (shares for accuracies); ``std`` None when not given.

    ``coordinates`` are the cell's axis values in the order of :attr:`Reference.axes`."""

    coordinates: tuple[Any, ...]
    median: float
    std: float | None


@dataclass(frozen=True)
class Reference:
    """A parsed reference file of one family: cells keyed by their axis values, in the order of ``axes``.

    ``table`` names the family's derived table it holds (``""``: the family's ranking tables)."""

    name: str
    source: str
    metric: str
    path: Path
    cells: dict[tuple[Any, ...], ReferenceCell]
    task: str
    axes: tuple[str, ...] = ()
    table: str = ""
    #: What the reference's runs were run with, per group (``""``: every group): setting key (or ``seeds``) -> text.
    protocol: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    @property
    def family(self) -> TaskFamily:
        return family(self.task)

    @property
    def group_axis(self) -> str | None:
        """The key of the family's table group (alignment: dataset) when the reference has that column."""
        group = self.family.table.group
        return group if not self.table and group in self.axes else None

    @property
    def groups(self) -> list[str]:
        """Table-group labels (alignment: dataset labels), in file order (``[""]`` for single-table layouts)."""
        key = self.group_axis
        if key is None:
            return [self.table]
        i = self.axes.index(key)
        return list(dict.fromkeys(str(c[i]) for c in self.cells))

    def key(self, coordinates: Mapping[str, Any]) -> tuple[Any, ...] | None:
        """The cell key of ``coordinates`` (axis key -> value), or None when one of :attr:`axes` is missing."""
        if any(k not in coordinates for k in self.axes):
            return None
        return tuple(self.family.axis(k).key_of(coordinates[k]) for k in self.axes)

    def at(self, coordinates: Mapping[str, Any]) -> ReferenceCell | None:
        """The cell at ``coordinates`` (axis key -> value; extra keys ignored), or None."""
        key = self.key(coordinates)
        return None if key is None else self.cells.get(key)

    def cell(self, *values: Any) -> ReferenceCell | None:
        """The cell at ``values`` given in the order of :attr:`axes` (alignment: dataset, model, noise)."""
        return self.at(dict(zip(self.axes, values, strict=True)))

    def values(self, axis: str, group: str | None = None) -> list[Any]:
        """The values of ``axis`` (sorted as the axis sorts), within one group when ``group`` is given."""
        i = self.axes.index(axis)
        g = self.axes.index(self.group_axis) if group is not None and self.group_axis else None
        found = {c[i] for c in self.cells if g is None or str(c[g]) == group}
        return sorted(found, key=self.family.axis(axis).sort_key)


def _folders(ws: Workspace | None) -> list[Path]:
    return ([ws.references] if ws else []) + [BUNDLED]


def reference_names(ws: Workspace | None = None, task: str | None = None) -> list[str]:
    """Names ``--reference`` accepts for ``task`` (None: every family): ``<task>.NAME.csv`` files of the
    workspace and of gaptui, the workspace's ``NAME.csv`` files, and the family's own (its ``reference``)."""
    tasks = [task] if task else [f.name for f in FAMILIES]
    names: set[str] = set()
    for folder in _folders(ws):
        for path in folder.glob("*.csv") if folder.is_dir() else ():
            prefix, dot, rest = path.stem.partition(".")
            if dot and prefix in tasks:
                names.add(rest)
            elif not dot and folder != BUNDLED:
                names.add(path.stem)
    for name in tasks:
        refs = family(name).references
        if refs is not None:
            names.update(refs.files)  # a plug-in's own reference files
    return sorted(names)


def _find_for(name: str, ws: Workspace | None, task: str) -> Path | None:
    """``<workspace>/references/<task>.NAME.csv`` or ``NAME.csv``, else a shipped ``<task>.NAME.csv``, else the
    file the family declares for ``NAME``; None when none is."""
    for folder in _folders(ws):
        stems = (f"{task}.{name}",) if folder == BUNDLED else (f"{task}.{name}", name)
        for stem in stems:
            if (candidate := folder / f"{stem}.csv").is_file():
                return candidate
    refs = family(task).references
    return refs.file(name) if refs is not None else None


def find_reference(name: str, ws: Workspace | None = None, task: str | None = None) -> Path:
    """A path as given (``.csv`` or existing), else the reference ``NAME`` of ``task`` (:func:`_find_for`).

    ``task`` None: the workspace's ``NAME.csv`` (its file says its family), else the one family that has ``NAME``;
    several have it: :class:`GaptuiError` asking for the family."""
    path = Path(name).expanduser()
    if path.suffix == ".csv" or path.exists():
        if not path.is_file():
            raise GaptuiError(f"--reference {name}: file not found")
        return path
    if task is not None:
        if (found := _find_for(name, ws, task)) is not None:
            return found
    elif ws is not None and (own := ws.references / f"{name}.csv").is_file():
        return own
    else:
        hits = {fam.name: p for fam in FAMILIES if (p := _find_for(name, ws, fam.name)) is not None}
        if len(hits) == 1:
            return next(iter(hits.values()))
        if hits:
            raise GaptuiError(
                f"reference '{name}' exists for {len(hits)} families ({', '.join(hits)}): pass --task NAME"
            )
    known = reference_names(ws, task)
    raise GaptuiError(
        f"unknown reference '{name}'{did_you_mean(name, known)}; known: {', '.join(known) or 'none'} "
        "(or a path to a .csv file)"
    )


def load_reference(name: str, ws: Workspace | None = None, task: str | None = None) -> Reference:
    """Find and parse a reference of ``task`` (None: the family the file is of, see :func:`find_reference` and
    :func:`parse_reference`); every problem is one :class:`GaptuiError` line naming file and line."""
    path = find_reference(name, ws, task)
    text = read_user_text(path, "a reference is a CSV text file (format: docs/results.md, 'Comparing with the paper')")
    given = Path(name).expanduser()
    by_name = not (given.suffix == ".csv" or given.exists())
    return parse_reference(text, path, name=name if by_name else path.stem, task=task)


def _number(where: str, key: str, raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise GaptuiError(f"{where}: {key} '{raw}' is not a number") from None
    if not math.isfinite(value):
        raise GaptuiError(f"{where}: {key} '{raw}' is not a finite number")
    return value


def _axis_value(where: str, axis: Axis, raw: str) -> Any:
    if not raw:
        raise GaptuiError(f"{where}: empty {axis.key}")
    return axis.key_of(_number(where, axis.key, raw)) if axis.numeric else raw


def _file_task(data_lines: Sequence[tuple[int, str]]) -> str:
    """The family of a reference file loaded for no family and naming none: the one family whose table layout
    (group, row and column axes) its header has, as an export of another machine has; else
    :data:`~engine.tasks.LEGACY_TASK`, the family of every reference written before families."""
    if data_lines:
        header = {h.strip() for h in next(csv.reader([data_lines[0][1]]))}
        fits = [f.name for f in FAMILIES if {k for k in (f.table.group, f.table.rows, f.table.columns) if k} <= header]
        if len(fits) == 1:
            return fits[0]
    return LEGACY_TASK


def _read_lines(text: str, path: Path) -> tuple[dict[str, str], list[tuple[int, str, str]], list[tuple[int, str]]]:
    """A reference file's lines sorted: its ``# key: value`` lines, its ``# protocol[...]`` lines (line number,
    group, value) and its data lines (line number, text); other ``#`` lines are comments."""
    meta: dict[str, str] = {}
    protocol_lines: list[tuple[int, str, str]] = []
    data_lines: list[tuple[int, str]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("#"):
            if match := _META.fullmatch(stripped):
                key, group, value = match.group(1), match.group(2), match.group(3).strip()
                if key == "protocol":
                    protocol_lines.append((number, (group or "").strip(), value))
                    continue
                if group is not None:
                    continue  # "# word[...]: ..." of another key: a comment
                if key not in META_KEYS:
                    raise GaptuiError(
                        f"{path}:{number}: unknown key '{key}'{did_you_mean(key, META_KEYS)}; "
                        f"known: {', '.join(META_KEYS)} (other '#' lines are comments)"
                    )
                meta[key] = value
            continue
        data_lines.append((number, line))
    return meta, protocol_lines, data_lines


def parse_reference(text: str, path: Path, name: str | None = None, task: str | None = None) -> Reference:
    """Parse the text of a reference file (see the module docstring for the format); ``task`` is the family it is
    loaded for (a ``# task:`` line naming another family is an error; None: :func:`_file_task`)."""
    meta, protocol_lines, data_lines = _read_lines(text, path)
    declared_task = meta.get("task") or task or _file_task(data_lines)
    if task and declared_task != task:
        raise GaptuiError(f"{path}: holds task '{declared_task}' results ('# task:' line), not task '{task}'")
    try:
        fam = family(declared_task)
    except GaptuiError as exc:
        raise GaptuiError(f"{path}: {exc}") from None
    if not data_lines:
        raise GaptuiError(f"{path}: no header line and no rows")
    metric = meta.get("metric") or fam.default_metric
    try:
        declared = fam.metric(metric)
    except GaptuiError as exc:
        raise GaptuiError(f"{path}: {exc}") from None
    units = meta.get("units") or "share"
    if units not in UNITS:
        raise GaptuiError(f"{path}: units '{units}' is not one of {', '.join(UNITS)}{did_you_mean(units, UNITS)}")
    if units == "percent" and not declared.share:
        raise GaptuiError(f"{path}: units 'percent' only suits accuracies (*_acc), not metric '{metric}'")
    scale = 100.0 if units == "percent" else 1.0
    table = meta.get("table", "")
    layout = fam.table
    header_number, header_line = data_lines[0]
    header = [h.strip() for h in next(csv.reader([header_line]))]
    centre = next((c for c in CENTRES if c in header), "mean" if table else layout.statistic)
    if table:
        axes = tuple(h for h in header if h in {a.key for a in fam.axes})
        required = (*axes, centre, "std") if axes else ("<two axis keys>", centre, "std")
    else:
        axes = tuple(k for k in header if k in (layout.group, layout.rows, layout.columns))
        required = (*(k for k in (layout.group, layout.rows, layout.columns) if k), centre, "std")
    missing = [c for c in required if c not in header]
    if missing:
        hint = "".join(did_you_mean(c, header) for c in missing[:1])
        raise GaptuiError(
            f"{path}:{header_number}: header lacks column(s) {', '.join(missing)}{hint}; expected {','.join(required)}"
        )
    index = {c: header.index(c) for c in (*axes, centre, "std")}
    cells: dict[tuple[Any, ...], ReferenceCell] = {}
    rows = csv.reader(io.StringIO("\n".join(line for _, line in data_lines[1:])))
    for (number, _), row in zip(data_lines[1:], rows, strict=True):
        where = f"{path}:{number}"
        if len(row) < len(header):
            raise GaptuiError(f"{where}: {len(row)} fields, the header has {len(header)}")
        value = {c: row[i].strip() for c, i in index.items()}
        key = tuple(_axis_value(where, fam.axis(k), value[k]) for k in axes)
        if fam.references is not None and (problem := fam.references.row_problem(dict(zip(axes, key, strict=True)))):
            raise GaptuiError(f"{where}: {problem}")
        # Rounded so that 65.6 percent reads back as 0.656, not 0.6559999999999999.
        median = round(_number(where, centre, value[centre]) / scale, 12)
        if declared.share and not 0 <= median <= 1:
            bound = "100 (units: percent)" if units == "percent" else "1 (units: share; '# units: percent' if not)"
            raise GaptuiError(f"{where}: {centre} {value[centre]} is outside 0 .. {bound}")
        std = None
        if value["std"]:
            std = round(_number(where, "std", value["std"]) / scale, 12)
            if std < 0:
                raise GaptuiError(f"{where}: std {value['std']} is negative")
        if key in cells:
            named = ", ".join(f"{k} {value[k]}" for k in axes)
            raise GaptuiError(f"{where}: second row for {named}")
        cells[key] = ReferenceCell(key, median, std)
    if not cells:
        raise GaptuiError(f"{path}: no rows after the header")
    from gaptui.reference_protocol import parse_protocol_lines

    protocol = parse_protocol_lines(fam, protocol_lines, path)
    return Reference(
        name or path.stem, meta.get("source") or str(path), metric, path, cells, declared_task, axes, table, protocol
    )


# ------------------------------------------------------------------------------------------ comparison


@dataclass(frozen=True)
class ColumnAgreement:
    """Rank agreement in one column of the table (alignment: one noise level; see the module docstring):
    ``column`` is the column's value and ``rows`` the rows compared there."""

    column: Any
    rows: tuple[str, ...]
    tau: float | None
    reference_best: tuple[str, ...]
    best_within_1: bool | None


def coordinates(table: analysis.RankingTable, row: str, column: Any) -> dict[str, Any]:
    """The axis values of one cell of ``table`` (the group only for a family's ranking tables)."""
    layout = table.layout
    head = {layout.group: table.group} if layout.group and not table.derived else {}
    return {**head, layout.rows: row, layout.columns: column}


def reference_cell(table: analysis.RankingTable, reference: Reference, row: str, column: Any) -> ReferenceCell | None:
    return reference.at(coordinates(table, row, column))


def covers(table: analysis.RankingTable, reference: Reference) -> bool:
    """Whether ``reference`` holds cells of ``table``'s kind (same family, same derived table, same axes) and
    group."""
    if reference.task != table.task or reference.table != (table.group if table.derived else ""):
        return False
    layout = table.layout
    if set(reference.axes) - {layout.group, layout.rows, layout.columns} - {None}:
        return False
    if not {layout.rows, layout.columns} <= set(reference.axes):
        return False
    return table.derived or reference.group_axis is None or table.group in reference.groups


def not_covered(table: analysis.RankingTable, reference: Reference) -> str:
    """One line saying why ``reference`` has nothing to compare with ``table`` (``""`` when it covers it)."""
    if covers(table, reference):
        return ""
    if reference.task != table.task:
        return f"reference '{reference.name}' holds task {reference.task}, not {table.task}"
    if reference.table:
        return f"reference '{reference.name}' compares {reference.table} only"
    if table.derived:
        return f"reference '{reference.name}' has no {table.group}"
    axis = reference.family.axis(reference.group_axis or table.layout.rows)
    return f"reference '{reference.name}' has no {axis.name} {table.group} (it covers {', '.join(reference.groups)})"


@dataclass(frozen=True)
class Comparison:
    """Our ranking table beside a reference's cells of the same group (alignment: dataset label).

    ``rows`` are the rows compared (ours and the reference's, in the row axis' order); ``agreement`` is keyed by
    our table's column values."""

    table: analysis.RankingTable
    reference: Reference
    rows: tuple[str, ...]
    agreement: dict[Any, ColumnAgreement]
    #: Our protocol beside the reference's (None: the reference states none).
    protocol: ProtocolComparison | None = None

    def pair(self, row: str, column: Any) -> tuple[analysis.Cell | None, ReferenceCell | None]:
        return self.table.cell(row, column), reference_cell(self.table, self.reference, row, column)

    def difference(self, row: str, column: Any) -> float | None:
        """Our value minus the reference's (metric units), or None when either is missing."""
        ours, theirs = self.pair(row, column)
        return None if ours is None or theirs is None else ours.median - theirs.median


def check_metric(reference: Reference, metric: str | Metric | None) -> None:
    """Raise :class:`GaptuiError` unless ``reference`` holds ``metric`` (None: its family's default metric).

    A reference of a derived table is checked when compared (the derived table has its own metric)."""
    if isinstance(metric, Metric):
        metric = metric.key
    metric = metric or reference.family.default_metric
    if metric != reference.metric and not reference.table:
        raise GaptuiError(
            f"reference '{reference.name}' holds {reference.metric}, not {metric}; "
            f"use --metric {reference.metric} or another reference"
        )


def compare(table: analysis.RankingTable, reference: Reference) -> Comparison | None:
    """The comparison of ``table`` with ``reference``, or None when the reference does not cover that table."""
    if not covers(table, reference):
        return None
    check_metric(reference, table.metric)
    if reference.table and table.metric.key != reference.metric:
        raise GaptuiError(f"reference '{reference.name}' holds {reference.metric}, not {table.metric.key}")
    rows_axis = table.row_axis
    theirs_rows = reference.values(table.layout.rows, table.group if reference.group_axis else None)
    rows = tuple(sorted(set(table.rows) | {str(r) for r in theirs_rows}, key=rows_axis.sort_key))
    sign = 1.0 if table.metric.higher_is_better else -1.0
    agreement = {}
    for column in table.columns:
        theirs = {
            row: c.median
            for row in rows
            if row not in table.baselines and (c := reference_cell(table, reference, row, column)) is not None
        }
        ours = {row: c.median for row in theirs if (c := table.cell(row, column)) is not None}
        common = tuple(ours)
        tau = kendall_tau([ours[r] for r in common], [theirs[r] for r in common]) if len(common) >= 2 else math.nan
        best: tuple[str, ...] = ()
        within = None
        if theirs:
            top = max(sign * v for v in theirs.values())
            best = tuple(row for row, v in theirs.items() if sign * v >= top - 1e-12)
            ours_best = [table.cell(row, column) for row in best]
            if all(c is not None for c in ours_best):
                within = all(c.mark in (analysis.BEST, analysis.WITHIN_1) for c in ours_best if c is not None)
        agreement[column] = ColumnAgreement(column, common, None if math.isnan(tau) else tau, best, within)
    return Comparison(table, reference, rows, agreement, compare_protocol(table, reference))


def shared_cells(table: analysis.RankingTable, reference: Reference) -> int:
    """How many cells of ``table`` (row x column) the reference also has."""
    if not covers(table, reference):
        return 0
    return sum(
        table.cell(r, c) is not None and reference_cell(table, reference, r, c) is not None
        for r in table.rows
        for c in table.columns
    )


def _listed(values: Iterable[Any]) -> str:
    return ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in values) or "none"


def _plural(axis: Axis) -> str:
    return axis.name if axis.numeric else f"{axis.name}s"


def no_overlap(reference: Reference, tables: Sequence[analysis.RankingTable]) -> GaptuiError:
    """The error for a history of which the reference has no cell: what each side has, so the user can see which
    runs (or which reference) to choose."""
    fam = reference.family
    plain = [t for t in tables if t.derived == bool(reference.table)] or list(tables)
    ours, theirs = [], []
    for key in reference.axes:
        axis = fam.axis(key)
        if key == reference.group_axis:
            mine: list[Any] = [t.group for t in plain]
        else:
            found = set()
            for t in plain:
                found |= set(t.rows if key == t.layout.rows else t.columns if key == t.layout.columns else ())
            mine = sorted(found, key=axis.sort_key)
        ours.append(f"{_plural(axis)} {_listed(mine)}")
        listed = reference.groups if key == reference.group_axis else reference.values(key)  # groups: file order
        theirs.append(f"{_plural(axis)} {_listed(listed)}")
    return GaptuiError(
        f"reference '{reference.name}' has no cell that the history has: the history's finished runs cover "
        f"{', '.join(ours)}; the reference covers {', '.join(theirs)}"
    )


def uncovered_columns(table: analysis.RankingTable, reference: Reference) -> str:
    """A note naming the columns of ``table`` the reference has no cell for (``""`` when none)."""
    if not covers(table, reference):
        return ""
    missing = [c for c in table.columns if all(reference_cell(table, reference, r, c) is None for r in table.rows)]
    if not missing:
        return ""
    axis = table.column_axis
    group = table.group if reference.group_axis else None
    where = f"{table.group} cell" if group else "cell"
    return (
        f"reference '{reference.name}' has no {where} at {axis.name} {_listed(missing)} "
        f"(it covers {_listed(reference.values(axis.key, group))})"
    )


def _signed(value: float, metric: Metric) -> str:
    return ("+" if value >= 0 else "−") + analysis.format_number(abs(value), metric)


def _yes_no(value: bool | None) -> str:
    return "–" if value is None else ("yes" if value else "no")


def _label(cmp: Comparison) -> str:
    return cmp.table.group or cmp.table.task


def render_rich(cmp: Comparison) -> Any:
    """A Rich table: one row per column of our table (alignment: noise level), per row (model) ``ours`` over
    ``reference  difference``, then tau and whether the reference's best is within 1 point of our best."""
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    metric = cmp.table.metric
    rows_name = cmp.table.row_axis.name
    title = f"{_label(cmp)} — {metric.key}: ours vs {cmp.reference.name} (ours − reference)"
    caption = Text(
        f"each cell: our {cmp.table.family.table.statistic if not cmp.table.derived else 'mean'} (marks as in "
        f"`gaptui table`), below it the reference's and the difference; τ = Kendall tau-b of the "
        f"{rows_name} order (baselines left out); best ≤1 = the reference's best {rows_name} is best or within 1 "
        f"point of our best. Reference: {cmp.reference.source}",
        style="dim",
    )
    if cmp.protocol is not None:
        *same, verdict = cmp.protocol.lines()
        caption.append("\n" + "\n".join(same), style="dim")
        caption.append("\n" + verdict, style="bold yellow" if cmp.protocol.differs else "green")
    table = Table(title=escape(title), caption=caption, caption_justify="left", show_lines=True)
    column_axis = cmp.table.column_axis
    table.add_column(column_axis.prefix.rstrip("=") or column_axis.name)
    for row in cmp.rows:
        table.add_column(row, justify="right", style="dim" if row in cmp.table.baselines else "")
    table.add_column("τ", justify="right")
    table.add_column("best ≤1", justify="center")
    for column in cmp.table.columns:
        line: list[Any] = [column_axis.format(column)]
        for row in cmp.rows:
            ours, theirs = cmp.pair(row, column)
            text = Text()
            if ours is None:
                text.append(analysis.EMPTY, style="dim")
            else:
                marker = analysis.MARKERS[ours.mark]
                text.append(analysis.format_number(ours.median, metric) + (f" {marker}" if marker else ""))
                text.stylize(analysis.RICH_STYLES[ours.mark])
            text.append("\n")
            if theirs is None:
                text.append(f"{analysis.EMPTY}", style="dim")
            else:
                text.append(analysis.format_number(theirs.median, metric), style="dim")
                diff = cmp.difference(row, column)
                if diff is not None:
                    text.append(f" {_signed(diff, metric)}", style="bold")
            line.append(text)
        agreement = cmp.agreement[column]
        line.append("–" if agreement.tau is None else f"{agreement.tau:+.2f}")
        best = _yes_no(agreement.best_within_1)
        line.append(Text(best, style={"yes": "green", "no": "red"}.get(best, "dim")))
        table.add_row(*line)
    return table


def render_markdown(comparisons: Sequence[Comparison]) -> str:
    """One Markdown section per table: ``ours / reference (difference)`` cells, tau and best-within-1 columns."""
    out: list[str] = []
    for cmp in comparisons:
        metric = cmp.table.metric
        column_axis = cmp.table.column_axis
        out.append(f"## {_label(cmp)}: ours vs {cmp.reference.name}\n")
        out.append(f"{metric.key}, ours / reference (ours − reference). Reference: {cmp.reference.source}\n")
        if cmp.protocol is not None:
            out.append("".join(f"- {line}\n" for line in cmp.protocol.lines()))
        head = column_axis.prefix.rstrip("=") or column_axis.name
        out.append(f"| {head} | " + " | ".join(cmp.rows) + " | tau | reference best within 1 |")
        out.append("|---|" + "---:|" * len(cmp.rows) + "---:|:---:|")
        for column in cmp.table.columns:
            cells = []
            for row in cmp.rows:
                ours, theirs = cmp.pair(row, column)
                left = analysis.EMPTY if ours is None else analysis.format_number(ours.median, metric)
                right = analysis.EMPTY if theirs is None else analysis.format_number(theirs.median, metric)
                diff = cmp.difference(row, column)
                cells.append(f"{left} / {right}" + ("" if diff is None else f" ({_signed(diff, metric)})"))
            agreement = cmp.agreement[column]
            tau = "–" if agreement.tau is None else f"{agreement.tau:+.2f}"
            out.append(
                f"| {column_axis.format(column)} | "
                + " | ".join(cells)
                + f" | {tau} | {_yes_no(agreement.best_within_1)} |"
            )
        out.append("")
    return "\n".join(out)


def _centre(table: analysis.RankingTable) -> str:
    return "mean" if table.derived else table.family.table.statistic


def _head(cmp: Comparison) -> dict[str, Any]:
    layout = cmp.table.layout
    if cmp.table.derived:
        return {"table": cmp.table.group}
    return {layout.group: cmp.table.group} if layout.group else {}


def csv_columns(cmp: Comparison) -> tuple[str, ...]:
    """The CSV header of one comparison (alignment: dataset, model, noise, median, reference_median, ...)."""
    layout = cmp.table.layout
    centre = _centre(cmp.table)
    return (*_head(cmp), layout.rows, layout.columns, centre, f"reference_{centre}", "reference_std", "difference")


def render_csv(comparisons: Sequence[Comparison]) -> str:
    """One row per (group, row, column) of our tables' columns, in the metric's own units; one header per kind of
    table (a new header line where the columns change)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    header: tuple[str, ...] | None = None
    for cmp in comparisons:
        if csv_columns(cmp) != header:
            header = csv_columns(cmp)
            writer.writerow(header)
        head = list(_head(cmp).values())
        for row in cmp.rows:
            for column in cmp.table.columns:
                ours, theirs = cmp.pair(row, column)
                if ours is None and theirs is None:
                    continue
                diff = cmp.difference(row, column)
                writer.writerow(
                    [
                        *head,
                        row,
                        column,
                        "" if ours is None else ours.median,
                        "" if theirs is None else theirs.median,
                        "" if theirs is None or theirs.std is None else theirs.std,
                        "" if diff is None else round(diff, 12),
                    ]
                )
    return buffer.getvalue()


def comparison_json(cmp: Comparison) -> dict[str, Any]:
    """JSON form of one comparison (metric units); cells and agreement keyed by the table's axis keys."""
    layout = cmp.table.layout
    centre = _centre(cmp.table)
    cells = []
    for row in cmp.rows:
        for column in cmp.table.columns:
            ours, theirs = cmp.pair(row, column)
            if ours is None and theirs is None:
                continue
            cells.append(
                {
                    layout.rows: row,
                    layout.columns: column,
                    centre: None if ours is None else ours.median,
                    f"reference_{centre}": None if theirs is None else theirs.median,
                    "reference_std": None if theirs is None else theirs.std,
                    "difference": cmp.difference(row, column),
                }
            )
    return {
        "task": cmp.table.task,
        **_head(cmp),
        "metric": cmp.table.metric.key,
        "reference": cmp.reference.name,
        "source": cmp.reference.source,
        "protocol": None if cmp.protocol is None else cmp.protocol.as_dict(),
        "cells": cells,
        "agreement": [
            {
                layout.columns: a.column,
                f"{layout.rows}s": list(a.rows),
                "kendall_tau": a.tau,
                "reference_best": list(a.reference_best),
                "reference_best_within_1": a.best_within_1,
            }
            for a in cmp.agreement.values()
        ],
    }
