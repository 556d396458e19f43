"""Reference results (a published table, another machine's export) and how our ranking compares with them.

A reference file is CSV, the columns of ``gaptui export``'s ``tables.csv`` (``dataset, model, noise, median,
std``; other columns such as ``runs`` are ignored), preceded by optional ``# key: value`` lines::

    # source: Table D.3 of "Graph Alignment for Benchmarking Graph Neural Networks ..."
    # metric: val_lap_acc          (default val_lap_acc)
    # units: percent               (percent or share; default share, as gaptui export writes accuracies)
    dataset,model,noise,median,std
    er,gcn,0.12,49.5,0.9
    er,laplacian,0.12,7.5,         (std may be empty)

Any other line starting with ``#`` is a comment. Shipped references live in ``gaptui/references/`` (``paper``:
Table D.3); ``--reference NAME`` also finds ``<workspace>/references/NAME.csv`` (first) or takes a path.

Comparison, per dataset label present in both and per noise level of our table:

- each cell: our median, the reference's, and the difference ours - reference (metric units);
- Kendall's tau-b between our medians and the reference's over the trained models both have at that noise
  (the Laplacian baseline is left out; ``None`` with fewer than two such models);
- whether every model that is best in the reference at that noise (ties: all of them) is marked best or within
  1 point of our best in our table (the red marks of :mod:`gaptui.analysis`); ``None`` when we did not run it.
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.errors import GaptuiError, did_you_mean
from engine.files import read_user_text
from engine.tasks import Metric, TaskFamily, family
from gaptui import analysis
from gaptui.workspace import Workspace

#: References shipped with gaptui (inside the package, so an installed wheel finds them).
BUNDLED = Path(__file__).resolve().parent / "references"
REQUIRED_COLUMNS = ("dataset", "model", "noise", "median", "std")
META_KEYS = ("source", "metric", "units")
UNITS = ("share", "percent")
_META = re.compile(r"#\s*([a-z_]+)\s*:(.*)")


def _alignment() -> TaskFamily:
    """References hold alignment results (Table D.3): dataset x model x noise."""
    return family("alignment")


def _noise_key(noise: Any) -> float:
    return _alignment().axis("noise").key_of(noise)


def _model_order(models: Any) -> list[str]:
    return sorted(set(models), key=_alignment().axis("model").sort_key)


def _metric(where: str, key: str) -> Metric:
    try:
        return _alignment().metric(key)
    except GaptuiError as exc:
        raise GaptuiError(f"{where}: {exc}") from None


def kendall_tau(ours: Sequence[float], theirs: Sequence[float]) -> float:
    """Kendall's tau-b between two scorings of the same models (ties allowed; ``nan`` when either is constant).

    tau-b = (concordant - discordant) / sqrt((n0 - ties_ours) (n0 - ties_theirs)), n0 = n (n - 1) / 2, over
    pairs of models; a pair tied in one scoring is neither concordant nor discordant.
    """
    if len(ours) != len(theirs):
        raise ValueError(f"kendall_tau: {len(ours)} scores against {len(theirs)}")
    concordant = discordant = tied_ours = tied_theirs = 0
    for i in range(len(ours)):
        for j in range(i + 1, len(ours)):
            a = ours[i] - ours[j]
            b = theirs[i] - theirs[j]
            tied_ours += a == 0
            tied_theirs += b == 0
            if a * b > 0:
                concordant += 1
            elif a * b < 0:
                discordant += 1
    pairs = len(ours) * (len(ours) - 1) // 2
    denominator = math.sqrt((pairs - tied_ours) * (pairs - tied_theirs))
    return (concordant - discordant) / denominator if denominator else math.nan


# ------------------------------------------------------------------------------------------ files


@dataclass(frozen=True)
class ReferenceCell:
    """One reference value in the metric's own units (shares for accuracies); ``std`` None when not given."""

    dataset: str
    model: str
    noise: float
    median: float
    std: float | None


@dataclass(frozen=True)
class Reference:
    """A parsed reference file: cells keyed by ``(dataset, model, noise)``."""

    name: str
    source: str
    metric: str
    path: Path
    cells: dict[tuple[str, str, float], ReferenceCell]

    @property
    def datasets(self) -> list[str]:
        """Dataset labels, in file order."""
        return list(dict.fromkeys(d for d, _, _ in self.cells))

    def cell(self, dataset: str, model: str, noise: float) -> ReferenceCell | None:
        return self.cells.get((dataset, model, _noise_key(noise)))

    def models(self, dataset: str) -> list[str]:
        return _model_order(m for d, m, _ in self.cells if d == dataset)

    def noise_levels(self, dataset: str | None = None) -> list[float]:
        return sorted({n for d, _, n in self.cells if dataset is None or d == dataset})


def reference_names(ws: Workspace | None = None) -> list[str]:
    """Names ``--reference`` accepts: the shipped references and ``<workspace>/references/*.csv``."""
    folders = [BUNDLED] + ([ws.root / "references"] if ws else [])
    return sorted({p.stem for folder in folders if folder.is_dir() for p in folder.glob("*.csv")})


def find_reference(name: str, ws: Workspace | None = None) -> Path:
    """A path as given (``.csv`` or existing), else ``<workspace>/references/NAME.csv``, else a shipped one."""
    path = Path(name).expanduser()
    if path.suffix == ".csv" or path.exists():
        if not path.is_file():
            raise GaptuiError(f"--reference {name}: file not found")
        return path
    for folder in ([ws.root / "references"] if ws else []) + [BUNDLED]:
        candidate = folder / f"{name}.csv"
        if candidate.is_file():
            return candidate
    known = reference_names(ws)
    raise GaptuiError(
        f"unknown reference '{name}'{did_you_mean(name, known)}; known: {', '.join(known) or 'none'} "
        "(or a path to a .csv file)"
    )


def load_reference(name: str, ws: Workspace | None = None) -> Reference:
    """Find and parse a reference; every problem is one :class:`GaptuiError` line naming file and line."""
    path = find_reference(name, ws)
    text = read_user_text(path, "a reference is a CSV text file (format: README, 'Comparing with the paper')")
    return parse_reference(text, path, name=path.stem)


def _number(where: str, key: str, raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise GaptuiError(f"{where}: {key} '{raw}' is not a number") from None
    if not math.isfinite(value):
        raise GaptuiError(f"{where}: {key} '{raw}' is not a finite number")
    return value


def parse_reference(text: str, path: Path, name: str | None = None) -> Reference:
    """Parse the text of a reference file (see the module docstring for the format)."""
    meta: dict[str, str] = {}
    data_lines: list[tuple[int, str]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("#"):
            if match := _META.fullmatch(stripped):
                key, value = match.group(1), match.group(2).strip()
                if key not in META_KEYS:
                    raise GaptuiError(
                        f"{path}:{number}: unknown key '{key}'{did_you_mean(key, META_KEYS)}; "
                        f"known: {', '.join(META_KEYS)} (other '#' lines are comments)"
                    )
                meta[key] = value
            continue
        data_lines.append((number, line))
    if not data_lines:
        raise GaptuiError(f"{path}: no header line ({','.join(REQUIRED_COLUMNS)}) and no rows")
    metric = meta.get("metric") or _alignment().default_metric
    declared = _metric(str(path), metric)
    units = meta.get("units") or "share"
    if units not in UNITS:
        raise GaptuiError(f"{path}: units '{units}' is not one of {', '.join(UNITS)}{did_you_mean(units, UNITS)}")
    if units == "percent" and not declared.share:
        raise GaptuiError(f"{path}: units 'percent' only suits accuracies (*_acc), not metric '{metric}'")
    scale = 100.0 if units == "percent" else 1.0
    header_number, header_line = data_lines[0]
    header = [h.strip() for h in next(csv.reader([header_line]))]
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        hint = "".join(did_you_mean(c, header) for c in missing[:1])
        raise GaptuiError(
            f"{path}:{header_number}: header lacks column(s) {', '.join(missing)}{hint}; "
            f"expected {','.join(REQUIRED_COLUMNS)}"
        )
    index = {c: header.index(c) for c in REQUIRED_COLUMNS}
    cells: dict[tuple[str, str, float], ReferenceCell] = {}
    rows = csv.reader(io.StringIO("\n".join(line for _, line in data_lines[1:])))
    for (number, _), row in zip(data_lines[1:], rows, strict=True):
        where = f"{path}:{number}"
        if len(row) < len(header):
            raise GaptuiError(f"{where}: {len(row)} fields, the header has {len(header)}")
        value = {c: row[i].strip() for c, i in index.items()}
        if not value["dataset"] or not value["model"]:
            raise GaptuiError(f"{where}: empty dataset or model")
        noise = _number(where, "noise", value["noise"])
        if not 0 <= noise < 1:
            raise GaptuiError(f"{where}: noise {value['noise']} is outside [0, 1)")
        # Rounded so that 65.6 percent reads back as 0.656, not 0.6559999999999999.
        median = round(_number(where, "median", value["median"]) / scale, 12)
        if declared.share and not 0 <= median <= 1:
            bound = "100 (units: percent)" if units == "percent" else "1 (units: share; '# units: percent' if not)"
            raise GaptuiError(f"{where}: median {value['median']} is outside 0 .. {bound}")
        std = None
        if value["std"]:
            std = round(_number(where, "std", value["std"]) / scale, 12)
            if std < 0:
                raise GaptuiError(f"{where}: std {value['std']} is negative")
        key = (value["dataset"], value["model"], _noise_key(noise))
        if key in cells:
            raise GaptuiError(f"{where}: second row for dataset {key[0]}, model {key[1]}, noise {value['noise']}")
        cells[key] = ReferenceCell(key[0], key[1], key[2], median, std)
    if not cells:
        raise GaptuiError(f"{path}: no rows after the header")
    return Reference(name or path.stem, meta.get("source") or str(path), metric, path, cells)


# ------------------------------------------------------------------------------------------ comparison


@dataclass(frozen=True)
class NoiseAgreement:
    """Rank agreement at one noise level (see the module docstring)."""

    noise: float
    models: tuple[str, ...]
    tau: float | None
    reference_best: tuple[str, ...]
    best_within_1: bool | None


@dataclass(frozen=True)
class Comparison:
    """Our ranking table of one dataset beside a reference's cells of the same dataset label."""

    table: analysis.RankingTable
    reference: Reference
    models: tuple[str, ...]
    agreement: dict[float, NoiseAgreement]

    def pair(self, model: str, noise: float) -> tuple[analysis.Cell | None, ReferenceCell | None]:
        return self.table.cell(model, noise), self.reference.cell(self.table.group, model, noise)

    def difference(self, model: str, noise: float) -> float | None:
        """Our median minus the reference's (metric units), or None when either is missing."""
        ours, theirs = self.pair(model, noise)
        return None if ours is None or theirs is None else ours.median - theirs.median


def check_metric(reference: Reference, metric: str | Metric | None) -> None:
    """Raise :class:`GaptuiError` unless ``reference`` holds ``metric`` (None: the alignment default)."""
    if isinstance(metric, Metric):
        metric = metric.key
    metric = metric or _alignment().default_metric
    if metric != reference.metric:
        raise GaptuiError(
            f"reference '{reference.name}' holds {reference.metric}, not {metric}; "
            f"use --metric {reference.metric} or another reference"
        )


def compare(table: analysis.RankingTable, reference: Reference) -> Comparison | None:
    """The comparison of ``table`` with ``reference``, or None when the reference lacks the dataset."""
    check_metric(reference, table.metric)
    dataset = table.group
    if dataset not in reference.datasets:
        return None
    models = tuple(_model_order([*table.rows, *reference.models(dataset)]))
    sign = 1.0 if table.metric.higher_is_better else -1.0
    agreement = {}
    for noise in table.columns:
        theirs = {
            m: c.median
            for m in models
            if m not in table.baselines and (c := reference.cell(dataset, m, noise)) is not None
        }
        ours = {m: c.median for m in theirs if (c := table.cell(m, noise)) is not None}
        common = tuple(ours)
        tau = kendall_tau([ours[m] for m in common], [theirs[m] for m in common]) if len(common) >= 2 else math.nan
        best: tuple[str, ...] = ()
        within = None
        if theirs:
            top = max(sign * v for v in theirs.values())
            best = tuple(m for m, v in theirs.items() if sign * v >= top - 1e-12)
            ours_best = [table.cell(m, noise) for m in best]
            if all(c is not None for c in ours_best):
                within = all(c.mark in (analysis.BEST, analysis.WITHIN_1) for c in ours_best if c is not None)
        agreement[noise] = NoiseAgreement(noise, common, None if math.isnan(tau) else tau, best, within)
    return Comparison(table, reference, models, agreement)


def shared_cells(table: analysis.RankingTable, reference: Reference) -> int:
    """How many cells of ``table`` (model x noise) the reference also has."""
    return sum(
        table.cell(m, n) is not None and reference.cell(table.group, m, n) is not None
        for m in table.rows
        for n in table.columns
    )


def _listed(values: Iterable[Any]) -> str:
    return ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in values) or "none"


def no_overlap(reference: Reference, tables: Sequence[analysis.RankingTable]) -> GaptuiError:
    """The error for a history of which the reference has no cell: what each side has, so the user can see which
    runs (or which reference) to choose."""
    ours_datasets = [t.group for t in tables]
    ours_models = _model_order({m for t in tables for m in t.rows})
    ours_noise = sorted({_noise_key(n) for t in tables for n in t.columns})
    theirs_models = _model_order({m for _, m, _ in reference.cells})
    return GaptuiError(
        f"reference '{reference.name}' has no cell that the history has: the history's finished runs cover "
        f"datasets {_listed(ours_datasets)}, models {_listed(ours_models)}, noise {_listed(ours_noise)}; the "
        f"reference covers datasets {_listed(reference.datasets)}, models {_listed(theirs_models)}, noise "
        f"{_listed(reference.noise_levels())}"
    )


def uncovered_noise(table: analysis.RankingTable, reference: Reference) -> str:
    """A note naming the noise levels of ``table`` the reference has no cell for (``""`` when none)."""
    missing = [n for n in table.columns if all(reference.cell(table.group, m, n) is None for m in table.rows)]
    if not missing or table.group not in reference.datasets:
        return ""
    return (
        f"reference '{reference.name}' has no {table.group} cell at noise {_listed(missing)} "
        f"(it covers {_listed(reference.noise_levels(table.group))})"
    )


def _signed(value: float, metric: Metric) -> str:
    return ("+" if value >= 0 else "−") + analysis.format_number(abs(value), metric)


def _yes_no(value: bool | None) -> str:
    return "–" if value is None else ("yes" if value else "no")


def render_rich(cmp: Comparison) -> Any:
    """A Rich table: one row per noise level, per model ``ours`` over ``reference  difference``, then tau and
    whether the reference's best is within 1 point of our best."""
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    metric = cmp.table.metric
    title = f"{cmp.table.group} — {metric.key}: ours vs {cmp.reference.name} (ours − reference)"
    caption = Text(
        f"each cell: our median (marks as in `gaptui table`), below it the reference's and the difference; "
        f"τ = Kendall tau-b of the trained models' order; best ≤1 = the reference's best model is best or "
        f"within 1 point of our best. Reference: {cmp.reference.source}",
        style="dim",
    )
    table = Table(title=escape(title), caption=caption, caption_justify="left", show_lines=True)
    table.add_column("η")
    for model in cmp.models:
        table.add_column(model, justify="right", style="dim" if model in cmp.table.baselines else "")
    table.add_column("τ", justify="right")
    table.add_column("best ≤1", justify="center")
    for noise in cmp.table.columns:
        row: list[Any] = [cmp.table.column_axis.format(noise)]
        for model in cmp.models:
            ours, theirs = cmp.pair(model, noise)
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
                diff = cmp.difference(model, noise)
                if diff is not None:
                    text.append(f" {_signed(diff, metric)}", style="bold")
            row.append(text)
        agreement = cmp.agreement[noise]
        row.append("–" if agreement.tau is None else f"{agreement.tau:+.2f}")
        best = _yes_no(agreement.best_within_1)
        row.append(Text(best, style={"yes": "green", "no": "red"}.get(best, "dim")))
        table.add_row(*row)
    return table


def render_markdown(comparisons: Sequence[Comparison]) -> str:
    """One Markdown section per dataset: ``ours / reference (difference)`` cells, tau and best-within-1 columns."""
    out: list[str] = []
    for cmp in comparisons:
        metric = cmp.table.metric
        out.append(f"## {cmp.table.group}: ours vs {cmp.reference.name}\n")
        out.append(f"{metric.key}, ours / reference (ours − reference). Reference: {cmp.reference.source}\n")
        out.append("| η | " + " | ".join(cmp.models) + " | tau | reference best within 1 |")
        out.append("|---|" + "---:|" * len(cmp.models) + "---:|:---:|")
        for noise in cmp.table.columns:
            cells = []
            for model in cmp.models:
                ours, theirs = cmp.pair(model, noise)
                left = analysis.EMPTY if ours is None else analysis.format_number(ours.median, metric)
                right = analysis.EMPTY if theirs is None else analysis.format_number(theirs.median, metric)
                diff = cmp.difference(model, noise)
                cells.append(f"{left} / {right}" + ("" if diff is None else f" ({_signed(diff, metric)})"))
            agreement = cmp.agreement[noise]
            tau = "–" if agreement.tau is None else f"{agreement.tau:+.2f}"
            out.append(
                f"| {cmp.table.column_axis.format(noise)} | "
                + " | ".join(cells)
                + f" | {tau} | {_yes_no(agreement.best_within_1)} |"
            )
        out.append("")
    return "\n".join(out)


CSV_COLUMNS = ("dataset", "model", "noise", "median", "reference_median", "reference_std", "difference")


def render_csv(comparisons: Sequence[Comparison]) -> str:
    """One row per (dataset, model, noise) of our tables' noise levels, in the metric's own units."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for cmp in comparisons:
        for model in cmp.models:
            for noise in cmp.table.columns:
                ours, theirs = cmp.pair(model, noise)
                if ours is None and theirs is None:
                    continue
                diff = cmp.difference(model, noise)
                writer.writerow(
                    [
                        cmp.table.group,
                        model,
                        noise,
                        "" if ours is None else ours.median,
                        "" if theirs is None else theirs.median,
                        "" if theirs is None or theirs.std is None else theirs.std,
                        "" if diff is None else round(diff, 12),
                    ]
                )
    return buffer.getvalue()


def comparison_json(cmp: Comparison) -> dict[str, Any]:
    """JSON form of one comparison (metric units)."""
    cells = []
    for model in cmp.models:
        for noise in cmp.table.columns:
            ours, theirs = cmp.pair(model, noise)
            if ours is None and theirs is None:
                continue
            cells.append(
                {
                    "model": model,
                    "noise": noise,
                    "median": None if ours is None else ours.median,
                    "reference_median": None if theirs is None else theirs.median,
                    "reference_std": None if theirs is None else theirs.std,
                    "difference": cmp.difference(model, noise),
                }
            )
    return {
        "dataset": cmp.table.group,
        "metric": cmp.table.metric.key,
        "reference": cmp.reference.name,
        "source": cmp.reference.source,
        "cells": cells,
        "agreement": [
            {
                "noise": a.noise,
                "models": list(a.models),
                "kendall_tau": a.tau,
                "reference_best": list(a.reference_best),
                "reference_best_within_1": a.best_within_1,
            }
            for a in cmp.agreement.values()
        ],
    }
