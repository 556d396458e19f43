"""Reference files: where ``--reference NAME`` finds one (the workspace's, gaptui's shipped ones, a family's own, or a
path) and how one is parsed into a :class:`Reference`; every problem is one :class:`GaptuiError` line naming the
file and the line. The format is in :mod:`gaptui.analysis.reference`'s docstring and docs/results.md."""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import GaptuiError, did_you_mean
from engine.tasks import FAMILIES, LEGACY_TASK, Axis, TaskFamily, family
from engine.user_files import read_user_text
from gaptui.analysis.reference.protocol import parse_protocol_lines
from gaptui.workspace import Workspace

#: References shipped with gaptui (inside the package, so an installed wheel finds them): ``<task>.<name>.csv``.
BUNDLED = Path(__file__).resolve().parents[2] / "references"
#: Names of a cell's centre a reference may use (``median`` for Table D.3, ``mean`` for Table 1 and Table 2).
CENTRES = ("median", "mean")
META_KEYS = ("source", "task", "metric", "units", "table", "protocol")
UNITS = ("share", "percent")
_META = re.compile(r"#\s*([a-z_]+)(?:\[(.+?)\])?\s*:(.*)")


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
    protocol = parse_protocol_lines(fam, protocol_lines, path)
    return Reference(
        name or path.stem, meta.get("source") or str(path), metric, path, cells, declared_task, axes, table, protocol
    )
