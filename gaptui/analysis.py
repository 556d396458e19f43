"""Ranking tables and accuracy gaps over finished runs (paper Table D.3 and section 5), plus their renderers.

Everything here is a pure function of run records (the dicts stored in the history); the only I/O is
:func:`export_all`. Records are grouped once by (dataset label, model, noise), so building every table of a
2,000-run history is a single pass.

Statistics
    A cell is one (dataset, model, noise). Its value is the **median** over seeds of one metric and its spread the
    **sample standard deviation** (``ddof=1``; 0 for a single run). Only ``status == "done"`` records with a finite
    numeric value of the metric count. When one seed was run more than once (a re-run), the run that finished last
    stands for that seed, so a cell never holds more values than seeds.

Units
    Metrics whose key ends in ``_acc`` are shares in [0, 1] and are shown in percent with one decimal, like
    Table D.3 ("97.6 ± 0.4"). Other metrics (losses, custom keys) are shown as they are, with three decimals.
    Machine-readable outputs (CSV, JSON) keep the metric's own units (shares for accuracies).

Direction
    Metrics whose key contains ``loss`` are better when lower; every other metric is better when higher.

Marks (per noise column, paper colours: red = best and within 1 %, blue = within 3 %)
    The best cell has the best median among **trained** models; the Laplacian baseline is shown but is never
    marked and never counts as the best. Ties all get ``best``. Another cell is ``within1`` when its median is at
    most 1 **absolute percentage point** of accuracy from the best (e.g. 96.6 vs 97.6), ``within3`` when at most
    3 points. For metrics that are not shares (losses) percentage points mean nothing, so the thresholds are
    relative: within 1 % (3 %) of the best value. Comparisons use the unrounded medians with a 1e-9 tolerance.
    Without colour the marks read as suffixes: ``**`` best, ``*`` within 1, ``+`` within 3.

Gap (paper section 5)
    At each noise level, gap(model) = median(model) − median(worst trained model), measured in the better
    direction (so it is >= 0 for losses too); the spread is best − worst among trained models. The optimal noise
    level maximises the spread; ties go to the lower noise.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import statistics
import uuid
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.markup import escape

from engine.errors import GaptuiError, unknown

DEFAULT_METRIC = "val_lap_acc"
#: The metrics every finished run reports; any other key found in the records is accepted as well.
STANDARD_METRICS = ("val_lap_acc", "val_argmax_acc", "val_top5_acc", "val_top10_acc", "val_loss", "train_loss")
BASELINE = "laplacian"
#: Row order of Table D.3; models not listed follow alphabetically.
PAPER_ORDER = ("gcn", "gin", "gatedgcn", "ggnn", "gat", "gatv2")
FORMATS = ("text", "md", "csv", "latex", "json")

BEST = "best"
WITHIN_1 = "within1"
WITHIN_3 = "within3"
#: Thresholds in percentage points (shares) or percent of the best value (other metrics).
WITHIN_1_POINTS = 1.0
WITHIN_3_POINTS = 3.0
#: Plain-text suffix of each mark, so the ranking survives without colour.
MARKERS = {BEST: "**", WITHIN_1: "*", WITHIN_3: "+", "": ""}
RICH_STYLES = {BEST: "bold red", WITHIN_1: "red", WITHIN_3: "blue", "": ""}
EMPTY = "–"
_TOLERANCE = 1e-9

CSV_COLUMNS = ("dataset", "model", "noise", "median", "std", "runs", "planned", "mark")
EXPORT_FILES = ("tables.csv", "tables.md", "tables.tex", "runs.json")
EXPORT_MANIFEST = ".gaptui-export.json"


# ------------------------------------------------------------------------------------------ metric conventions


def is_share(metric: str) -> bool:
    """True for accuracies (shares in [0, 1], shown in percent)."""
    return metric.endswith("_acc")


def higher_is_better(metric: str) -> bool:
    """False for losses (any key containing ``loss``), True otherwise."""
    return "loss" not in metric


def display_scale(metric: str) -> float:
    """Factor from the metric's units to display units (100 for shares, else 1)."""
    return 100.0 if is_share(metric) else 1.0


def format_number(value: float, metric: str) -> str:
    """One value in display units: ``97.6`` for a share of 0.976, ``0.123`` for a loss."""
    return f"{value * 100:.1f}" if is_share(metric) else f"{value:.3f}"


def format_noise(noise: float) -> str:
    """A noise level as written in column headers (``0.12``)."""
    return f"{noise:g}"


def model_order(models: Iterable[str]) -> list[str]:
    """Laplacian first, then the paper order, then the others alphabetically."""
    rank = {name: i for i, name in enumerate((BASELINE, *PAPER_ORDER))}
    return sorted(set(models), key=lambda m: (rank.get(m, len(rank)), m))


def known_metrics(records: Iterable[dict[str, Any]]) -> list[str]:
    """The standard metrics plus every numeric metric key found in finished records."""
    found = set(STANDARD_METRICS)
    for rec in records:
        if rec.get("status") == "done":
            found.update(k for k, v in (rec.get("metrics") or {}).items() if _numeric(v) is not None)
    return sorted(found)


def check_metric(metric: str, records: Iterable[dict[str, Any]]) -> str:
    """Return ``metric`` or raise :class:`GaptuiError` with a did-you-mean suggestion."""
    choices = known_metrics(records)
    if metric not in choices:
        raise unknown("metric", metric, choices)
    return metric


def check_format(fmt: str, choices: Sequence[str] = FORMATS) -> str:
    """Return ``fmt`` or raise :class:`GaptuiError` with a did-you-mean suggestion."""
    if fmt not in choices:
        raise unknown("format", fmt, choices)
    return fmt


def done_datasets(records: Iterable[dict[str, Any]]) -> list[str]:
    """Sorted dataset labels that have at least one finished run."""
    return sorted({str(r.get("dataset")) for r in records if r.get("status") == "done"})


def check_dataset(dataset: str, records: Iterable[dict[str, Any]]) -> str:
    """Return ``dataset`` or raise :class:`GaptuiError` naming the labels with finished runs."""
    labels = done_datasets(records)
    if dataset not in labels:
        raise unknown("dataset", dataset, labels)
    return dataset


# ------------------------------------------------------------------------------------------ tables


@dataclass(frozen=True)
class Cell:
    """One (dataset, model, noise) entry: median and sample std over seeds, in the metric's own units."""

    dataset: str
    model: str
    noise: float
    values: tuple[float, ...]
    median: float
    std: float
    planned: int | None
    mark: str = ""

    @property
    def runs(self) -> int:
        """Number of seeds that finished."""
        return len(self.values)

    @property
    def incomplete(self) -> bool:
        """Fewer finished seeds than the preset planned."""
        return self.planned is not None and self.runs < self.planned

    def text(self, metric: str) -> str:
        """Display text without mark, e.g. ``97.6 ± 0.4`` or ``97.6 ± 0.4 (3/10)``."""
        body = f"{format_number(self.median, metric)} ± {format_number(self.std, metric)}"
        return f"{body} ({self.runs}/{self.planned})" if self.incomplete else body

    def as_dict(self) -> dict[str, Any]:
        """JSON/CSV form, in the metric's own units."""
        return {
            "dataset": self.dataset,
            "model": self.model,
            "noise": self.noise,
            "median": self.median,
            "std": self.std,
            "runs": self.runs,
            "planned": self.planned,
            "mark": self.mark,
        }


@dataclass(frozen=True)
class RankingTable:
    """Table D.3 for one dataset label: rows are models, columns noise levels ascending."""

    dataset: str
    metric: str
    models: tuple[str, ...]
    noises: tuple[float, ...]
    cells: dict[tuple[str, float], Cell] = field(repr=False)

    def cell(self, model: str, noise: float) -> Cell | None:
        """The cell, or None when the model has no finished run at this noise."""
        return self.cells.get((model, noise))

    def best(self, noise: float) -> list[Cell]:
        """The cells marked best at this noise (several on a tie; empty without trained models)."""
        return [c for m in self.models if (c := self.cell(m, noise)) is not None and c.mark == BEST]

    def iter_cells(self) -> Iterable[Cell]:
        """All non-empty cells, row by row."""
        for model in self.models:
            for noise in self.noises:
                if (c := self.cell(model, noise)) is not None:
                    yield c


def _numeric(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def noise_key(noise: Any) -> float:
    """A noise level as a grouping key (rounded so that 0.12 computed two ways lands in one column)."""
    return round(float(noise), 6)


def _planned(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _mark(median: float, best: float, metric: str) -> str:
    distance = abs(best - median)
    if distance <= _TOLERANCE:
        return BEST
    if is_share(metric):
        points = distance * 100.0
    elif best != 0:
        points = distance / abs(best) * 100.0
    else:
        return ""
    if points <= WITHIN_1_POINTS + _TOLERANCE:
        return WITHIN_1
    if points <= WITHIN_3_POINTS + _TOLERANCE:
        return WITHIN_3
    return ""


def build_tables(
    records: Iterable[dict[str, Any]], metric: str = DEFAULT_METRIC, dataset: str | None = None
) -> list[RankingTable]:
    """One :class:`RankingTable` per dataset label (sorted), from finished records holding ``metric``.

    ``planned`` of a cell is the largest ``planned_seeds`` of any record (any status) in that cell, so a grid
    still running shows "3/10". Datasets, models and noise levels appear only once a run of them has finished.
    """
    # seed -> (finished, value): the last finished run of a seed wins.
    per_seed: dict[tuple[str, str, float], dict[Any, tuple[str, float]]] = defaultdict(dict)
    planned: dict[tuple[str, str, float], int] = {}
    for rec in records:
        label = str(rec.get("dataset"))
        if dataset is not None and label != dataset:
            continue
        try:
            key = (label, str(rec.get("model")), noise_key(rec.get("noise")))
        except (TypeError, ValueError):
            continue
        if (p := _planned(rec.get("planned_seeds"))) is not None:
            planned[key] = max(p, planned.get(key, 0))
        if rec.get("status") != "done":
            continue
        value = _numeric((rec.get("metrics") or {}).get(metric))
        if value is None:
            continue
        finished = str(rec.get("finished") or "")
        seeds = per_seed[key]
        seed = rec.get("seed")
        if seed not in seeds or finished >= seeds[seed][0]:
            seeds[seed] = (finished, value)

    grouped: dict[str, dict[tuple[str, float], tuple[float, ...]]] = defaultdict(dict)
    for (label, model, noise), seeds in per_seed.items():
        grouped[label][(model, noise)] = tuple(v for _, v in seeds.values())

    tables = []
    for label in sorted(grouped):
        groups = grouped[label]
        models = tuple(model_order(m for m, _ in groups))
        noises = tuple(sorted({n for _, n in groups}))
        medians = {k: statistics.median(v) for k, v in groups.items()}
        best_at = _best_per_noise(medians, metric)
        cells = {}
        for (model, noise), values in groups.items():
            median = medians[(model, noise)]
            mark = "" if model == BASELINE or noise not in best_at else _mark(median, best_at[noise], metric)
            cells[(model, noise)] = Cell(
                dataset=label,
                model=model,
                noise=noise,
                values=values,
                median=median,
                std=statistics.stdev(values) if len(values) > 1 else 0.0,
                planned=planned.get((label, model, noise)),
                mark=mark,
            )
        tables.append(RankingTable(label, metric, models, noises, cells))
    return tables


def _best_per_noise(medians: dict[tuple[str, float], float], metric: str) -> dict[float, float]:
    pick = max if higher_is_better(metric) else min
    by_noise: dict[float, list[float]] = defaultdict(list)
    for (model, noise), median in medians.items():
        if model != BASELINE:
            by_noise[noise].append(median)
    return {noise: pick(values) for noise, values in by_noise.items()}


# ------------------------------------------------------------------------------------------ gap


@dataclass(frozen=True)
class GapAnalysis:
    """Accuracy gap to the worst trained model per noise level (metric units), and the optimal noise level."""

    dataset: str
    metric: str
    noises: tuple[float, ...]
    models: tuple[str, ...]
    gaps: dict[str, dict[float, float]]
    spread: dict[float, float]
    optimal_noise: float | None

    def as_dict(self) -> dict[str, Any]:
        """JSON form, in the metric's own units."""
        return {
            "dataset": self.dataset,
            "metric": self.metric,
            "optimal_noise": self.optimal_noise,
            "spread": [{"noise": n, "spread": self.spread[n]} for n in self.noises],
            "gaps": [
                {"model": m, "noise": n, "gap": self.gaps[m][n]}
                for m in self.models
                for n in self.noises
                if n in self.gaps[m]
            ],
        }


def gap_analysis(table: RankingTable) -> GapAnalysis:
    """Gaps and optimal noise of one table; the Laplacian baseline is left out (it is not trained)."""
    sign = 1.0 if higher_is_better(table.metric) else -1.0
    trained = tuple(m for m in table.models if m != BASELINE)
    gaps: dict[str, dict[float, float]] = {m: {} for m in trained}
    spread: dict[float, float] = {}
    for noise in table.noises:
        # Scores in the better direction, so "worst" is the minimum for every metric.
        scores = {m: sign * c.median for m in trained if (c := table.cell(m, noise)) is not None}
        if not scores:
            continue
        worst = min(scores.values())
        for model, score in scores.items():
            gaps[model][noise] = score - worst
        spread[noise] = max(scores.values()) - worst
    noises = tuple(n for n in table.noises if n in spread)
    optimal = None
    for noise in noises:  # ascending, and only a strictly larger spread moves it: ties keep the lower noise
        if optimal is None or spread[noise] > spread[optimal] + _TOLERANCE:
            optimal = noise
    return GapAnalysis(table.dataset, table.metric, noises, trained, gaps, spread, optimal)


# ------------------------------------------------------------------------------------------ renderers


def _title(table: RankingTable) -> str:
    unit = " (%)" if is_share(table.metric) else ""
    direction = "higher" if higher_is_better(table.metric) else "lower"
    return f"{table.dataset} — {table.metric}{unit}, median ± std over seeds; {direction} is better"


def _legend_parts(metric: str) -> list[tuple[str, str]]:
    """(mark, words) pairs of the legend; mark "" is plain text."""
    unit = "percentage point" if is_share(metric) else "% of the best value"
    return [
        (BEST, f"{MARKERS[BEST]} best"),
        (WITHIN_1, f"{MARKERS[WITHIN_1]} within 1 {unit}"),
        (WITHIN_3, f"{MARKERS[WITHIN_3]} within 3"),
        ("", f"(trained models only; {BASELINE} = training-free baseline, never marked; (k/n) = k of n planned seeds)"),
    ]


def legend(metric: str) -> str:
    """The meaning of marks and counts, in words (used by every renderer)."""
    parts = [words for _, words in _legend_parts(metric)]
    return ", ".join(parts[:-1]) + " " + parts[-1]


def _split_columns(widths: Sequence[int], fixed: int, width: int | None) -> list[list[int]]:
    """Indices of columns grouped so that each group plus the ``fixed`` first column fits in ``width``."""
    if width is None:
        return [list(range(len(widths)))]
    groups: list[list[int]] = [[]]
    used = fixed
    for i, w in enumerate(widths):
        if groups[-1] and used + w > width:
            groups.append([])
            used = fixed
        groups[-1].append(i)
        used += w
    return groups


def _marked_text(c: Cell, metric: str) -> str:
    return c.text(metric) + (f" {MARKERS[c.mark]}" if c.mark else "")


def render_rich(table: RankingTable, gap: GapAnalysis | None = None, width: int | None = None) -> Any:
    """Rich table(s): best bold red, within 1 red, within 3 blue, ``**``/``*``/``+`` suffixes and a legend.

    With ``width`` (the console's), a grid too wide for it is split into several tables over the noise levels
    (each repeating the model column) instead of letting Rich squeeze every column to nothing.
    """
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    caption = Text()
    parts = _legend_parts(table.metric)
    for i, (mark, words) in enumerate(parts):
        caption.append(", " if 0 < i < len(parts) - 1 else " " if i else "")
        caption.append(words, style=RICH_STYLES[mark])
    if gap is not None and gap.optimal_noise is not None:
        caption.append(f"\noptimal noise (largest best − worst spread): {format_noise(gap.optimal_noise)}")
    headers = [f"η={format_noise(n)}" for n in table.noises]
    # Rich draws one space of padding each side and one border per column.
    widths = [
        3 + max(len(h), *(len(_marked_text(c, table.metric)) for m in table.models if (c := table.cell(m, n))))
        for h, n in zip(headers, table.noises, strict=True)
    ]
    fixed = 4 + max(len("model"), *map(len, table.models))
    groups = _split_columns(widths, fixed, width)
    rendered = []
    for g, columns in enumerate(groups):
        last = g == len(groups) - 1
        rich_table = Table(
            title=escape(_title(table) if g == 0 else f"{table.dataset} (continued)"),
            caption=caption if last else None,
            caption_justify="left",
            min_width=min(72, width or 72),
        )
        rich_table.add_column("model")
        for i in columns:
            rich_table.add_column(headers[i], justify="right")
        for model in table.models:
            row: list[Any] = [Text(model, style="dim" if model == BASELINE else "")]
            for i in columns:
                c = table.cell(model, table.noises[i])
                row.append(
                    Text(EMPTY, style="dim") if c is None else Text(_marked_text(c, table.metric), RICH_STYLES[c.mark])
                )
            rich_table.add_row(*row)
        rendered.append(rich_table)
    return rendered[0] if len(rendered) == 1 else Group(*rendered)


def render_text(tables: Sequence[RankingTable], width: int = 160) -> str:
    """The Rich tables as plain text without colour (what a pipe receives)."""
    from rich.console import Console

    buffer = io.StringIO()
    console = Console(file=buffer, width=width, color_system=None, force_terminal=False)
    for table in tables:
        console.print(render_rich(table, gap_analysis(table), width=width))
    return buffer.getvalue()


def _md_cell(c: Cell | None, metric: str) -> str:
    if c is None:
        return EMPTY
    text = c.text(metric)
    marker = MARKERS[c.mark].replace("*", r"\*")
    if c.mark == BEST:
        return f"**{text}** {marker}"
    return f"{text} {marker}" if marker else text


def render_markdown(tables: Sequence[RankingTable]) -> str:
    """GitHub Markdown: one section per dataset; best in bold; markers escaped so they stay visible."""
    out: list[str] = []
    for table in tables:
        gap = gap_analysis(table)
        out.append(f"## {table.dataset}\n")
        out.append(f"{_title(table)}\n")
        out.append("| model | " + " | ".join(f"η={format_noise(n)}" for n in table.noises) + " |")
        out.append("|---|" + "---:|" * len(table.noises))
        for model in table.models:
            cells = [_md_cell(table.cell(model, n), table.metric) for n in table.noises]
            out.append(f"| {model} | " + " | ".join(cells) + " |")
        out.append("")
        out.append(legend(table.metric).replace("*", r"\*") + ".")
        if gap.optimal_noise is not None:
            out.append(f"Optimal noise (largest best − worst spread): {format_noise(gap.optimal_noise)}.")
        out.append("")
    return "\n".join(out)


def render_csv(tables: Sequence[RankingTable]) -> str:
    """One row per cell: dataset, model, noise, median, std, runs, planned, mark (metric units; empty = none)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for table in tables:
        for c in table.iter_cells():
            row = c.as_dict()
            writer.writerow(["" if row[k] is None else row[k] for k in CSV_COLUMNS])
    return buffer.getvalue()


_LATEX_SPECIALS = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
}


def latex_escape(text: str) -> str:
    """Escape LaTeX specials (underscores in model and dataset names above all)."""
    return "".join(_LATEX_SPECIALS.get(ch, ch) for ch in text)


def _latex_cell(c: Cell | None, metric: str) -> str:
    if c is None:
        return "--"
    body = f"{format_number(c.median, metric)} $\\pm$ {format_number(c.std, metric)}"
    if c.incomplete:
        body += f" ({c.runs}/{c.planned})"
    if c.mark == BEST:
        return f"\\textbf{{{body}}}$^{{**}}$"
    if c.mark == WITHIN_1:
        return f"\\underline{{{body}}}$^{{*}}$"
    if c.mark == WITHIN_3:
        return f"{body}$^{{+}}$"
    return body


def render_latex(tables: Sequence[RankingTable]) -> str:
    """booktabs tabulars: best ``\\textbf`` + ``**``, within 1 ``\\underline`` + ``*``, within 3 ``+``.

    Needs only ``\\usepackage{booktabs}`` (no colour package), so the marks survive black-and-white printing.
    """
    out: list[str] = []
    for table in tables:
        out.append(f"% {latex_escape(_title(table))}")
        out.append(f"% {latex_escape(legend(table.metric))}")
        out.append("\\begin{tabular}{l" + "r" * len(table.noises) + "}")
        out.append("\\toprule")
        header = " & ".join(f"$\\eta={format_noise(n)}$" for n in table.noises)
        out.append(f"{latex_escape(table.dataset)} & {header} \\\\")
        out.append("\\midrule")
        for model in table.models:
            cells = " & ".join(_latex_cell(table.cell(model, n), table.metric) for n in table.noises)
            out.append(f"{latex_escape(model)} & {cells} \\\\")
            if model == BASELINE and len(table.models) > 1:
                out.append("\\midrule")
        out.append("\\bottomrule")
        out.append("\\end{tabular}")
        out.append("")
    return "\n".join(out)


def tables_json(tables: Sequence[RankingTable]) -> list[dict[str, Any]]:
    """One object per dataset: metric, direction, noises, models, optimal noise and the list of cells."""
    docs = []
    for table in tables:
        gap = gap_analysis(table)
        docs.append(
            {
                "dataset": table.dataset,
                "metric": table.metric,
                "higher_is_better": higher_is_better(table.metric),
                "noises": list(table.noises),
                "models": list(table.models),
                "optimal_noise": gap.optimal_noise,
                "cells": [{**c.as_dict(), "display": c.text(table.metric)} for c in table.iter_cells()],
            }
        )
    return docs


def render_gap_rich(gap: GapAnalysis, width: int | None = None) -> Any:
    """Rich table(s) of gaps (display units) per model and noise plus the spread row; the optimal column bold.

    Split over several tables like :func:`render_rich` when wider than ``width``.
    """
    from rich.console import Group
    from rich.table import Table

    unit = "pp" if is_share(gap.metric) else gap.metric
    scale = display_scale(gap.metric)
    spread_label = "spread (best − worst)"
    headers = [f"η={format_noise(n)}" + (" (optimal)" if n == gap.optimal_noise else "") for n in gap.noises]
    values = {
        model: [f"{gap.gaps[model][n] * scale:.1f}" if n in gap.gaps[model] else EMPTY for n in gap.noises]
        for model in gap.models
    }
    values[spread_label] = [f"{gap.spread[n] * scale:.1f}" for n in gap.noises]
    widths = [3 + max(len(h), *(len(v[i]) for v in values.values())) for i, h in enumerate(headers)]
    groups = _split_columns(widths, 4 + max(map(len, values)), width)
    rendered = []
    for g, columns in enumerate(groups):
        title = f"{gap.dataset} — gap to the worst trained model ({unit}, {gap.metric})"
        rich_table = Table(title=escape(title if g == 0 else f"{gap.dataset} (continued)"))
        rich_table.add_column("model")
        for i in columns:
            bold = "bold" if gap.noises[i] == gap.optimal_noise else ""
            rich_table.add_column(headers[i], justify="right", style=bold, header_style=bold or "bold")
        for model in gap.models:
            rich_table.add_row(model, *(values[model][i] for i in columns))
        rich_table.add_section()
        rich_table.add_row(spread_label, *(values[spread_label][i] for i in columns))
        rendered.append(rich_table)
    return rendered[0] if len(rendered) == 1 else Group(*rendered)


_PLOT_MARKERS = ("•", "x", "+", "o", "*", "#", "@", "%", "&", "=")


def render_gap_plot(gap: GapAnalysis, width: int = 80, height: int = 20, color: bool = False) -> str:
    """A plotext line plot of gap vs noise per model, the optimal noise as a vertical line; returns the text.

    Each model gets its own marker character, so the plot reads without colour too.
    """
    import plotext as plt

    plt.clear_figure()
    plt.plot_size(width, height)
    plt.theme("pro" if color else "clear")  # "pro" colours the lines without painting a background
    scale = display_scale(gap.metric)
    for i, model in enumerate(gap.models):
        xs = [n for n in gap.noises if n in gap.gaps[model]]
        if xs:
            ys = [gap.gaps[model][n] * scale for n in xs]
            plt.plot(xs, ys, label=model, marker=_PLOT_MARKERS[i % len(_PLOT_MARKERS)])
    if gap.optimal_noise is not None:
        plt.vline(gap.optimal_noise, "red")
        plt.title(f"{gap.dataset}: gap to worst model; optimal noise {format_noise(gap.optimal_noise)} (|)")
    else:
        plt.title(f"{gap.dataset}: gap to worst model")
    plt.xlabel("noise η")
    plt.ylabel("gap (pp)" if is_share(gap.metric) else f"gap ({gap.metric})")
    text = plt.build()
    plt.clear_figure()
    return text if color else plt.uncolorize(text)


# ------------------------------------------------------------------------------------------ export


def _write_atomic(path: Path, text: str) -> None:
    # Temporary file in the same folder, then rename: a reader never sees half a file. Opened with "x" (not
    # mkstemp) so the export gets the user's usual permissions rather than 0600.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with open(tmp, "x", encoding="utf-8", newline="") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _previous_export(out_dir: Path) -> set[str]:
    try:
        return set(json.loads((out_dir / EXPORT_MANIFEST).read_text()).get("files", []))
    except (OSError, ValueError, AttributeError):
        return set()


def export_all(
    records: Sequence[dict[str, Any]], out_dir: Path, metric: str = DEFAULT_METRIC, force: bool = False
) -> list[Path]:
    """Write ``tables.csv``, ``tables.md``, ``tables.tex`` and ``runs.json`` (all records) into ``out_dir``.

    Each file is written atomically. A file of the same name is replaced only when a previous export wrote it
    (listed in ``.gaptui-export.json``, which is written last) or when ``force`` is set; otherwise nothing is
    written and :class:`GaptuiError` names the file. Returns the paths written, manifest last.
    """
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise GaptuiError(f"export folder {out_dir} exists and is not a folder")
    ours = _previous_export(out_dir)
    if not force:
        foreign = [name for name in EXPORT_FILES if (out_dir / name).exists() and name not in ours]
        if foreign:
            raise GaptuiError(
                f"{out_dir / foreign[0]} exists and was not written by gaptui export; "
                "choose another --out folder or pass --force to replace it"
            )
    out_dir.mkdir(parents=True, exist_ok=True)
    tables = build_tables(records, metric)
    contents = {
        "tables.csv": render_csv(tables),
        "tables.md": render_markdown(tables),
        "tables.tex": render_latex(tables),
        "runs.json": json.dumps(list(records), indent=2, sort_keys=True, default=str) + "\n",
    }
    written = []
    for name in EXPORT_FILES:
        _write_atomic(out_dir / name, contents[name])
        written.append(out_dir / name)
    manifest = {"files": list(EXPORT_FILES), "metric": metric, "runs": len(records), "datasets": len(tables)}
    _write_atomic(out_dir / EXPORT_MANIFEST, json.dumps(manifest, indent=2) + "\n")
    written.append(out_dir / EXPORT_MANIFEST)
    return written
