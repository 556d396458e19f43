"""Publication figures of a family's results with matplotlib (``gaptui figures``, ``gaptui report``).

What a family gets is its declaration (:attr:`engine.tasks.TaskFamily.figures`); every kind is drawn from the
ranking tables (:mod:`gaptui.analysis`), the rank statistics (:mod:`gaptui.analysis.statistics`) or the run folders'
``events.jsonl``, never from a family's internals.

Figures are sized for a two-column paper (3.4 in wide for one column, 7 in for a full-width grid) at 220 dpi, so a
PNG is at least 600 px wide once its margins are trimmed. Every row gets a colour, a marker and a line style, so a
greyscale print still tells them apart. Files are deterministic: no dates or software versions in the metadata, a
fixed SVG hash salt, and TrueType fonts embedded in PDFs (``pdf.fonttype = 42``); the same history gives the same
bytes.
"""

from __future__ import annotations

import math
import re
import statistics as stats
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from engine.errors import GaptuiError
from engine.events import iter_events
from engine.files import OutputFolder, atomic_write_bytes
from engine.tasks import Figure, family
from gaptui import analysis
from gaptui.analysis.statistics import rank_test

FORMATS = ("png", "svg", "pdf")
COLUMN_WIDTH = 3.4  # inches: one column of a two-column paper
FULL_WIDTH = 7.0
DPI = 220
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">", "h", "p")
LINESTYLES = ("-", "--", "-.", ":")
#: Colour-blind safe (Okabe-Ito), with distinct lightness so greyscale still separates most rows.
#: What ``gaptui figures`` wrote into its --out folder (see :class:`engine.files.OutputFolder`).
MANIFEST = ".gaptui-figures.json"
COLOURS = ("#000000", "#E69F00", "#56B4E9", "#009E73", "#0072B2", "#D55E00", "#CC79A7", "#F0E442", "#999999")


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend with the house style (sizes for a two-column paper, embedded
    fonts, deterministic files); a GaptuiError naming the extra when matplotlib is missing."""
    try:
        import matplotlib
    except ImportError:
        raise GaptuiError("figures need matplotlib: pip install 'gaptui[figures]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    matplotlib.rcParams.update(
        {
            "font.size": 7,
            "axes.titlesize": 7,
            "axes.labelsize": 7,
            "legend.fontsize": 6,
            "xtick.labelsize": 6,
            "ytick.labelsize": 6,
            "lines.linewidth": 1.0,
            "lines.markersize": 3.5,
            "pdf.fonttype": 42,
            "ps.fonttype": 42,
            "svg.hashsalt": "gaptui",
            "svg.fonttype": "path",
        }
    )
    return plt


def style(index: int) -> dict[str, Any]:
    """Colour, marker and line style of the ``index``-th row (stable across figures of one table)."""
    return {
        "color": COLOURS[index % len(COLOURS)],
        "marker": MARKERS[index % len(MARKERS)],
        "linestyle": LINESTYLES[index % len(LINESTYLES)],
    }


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9._-]+", "-", text.lower()).strip("-") or "all"


def save_figure(fig: Any, path: Path) -> Path:
    """Write ``fig`` to ``path`` (its suffix is the format) without dates or versions, atomically; closes it."""
    import io

    fmt = path.suffix.lstrip(".")
    metadata = {"png": {"Software": None}, "svg": {"Date": None}, "pdf": {"CreationDate": None, "ModDate": None}}
    buffer = io.BytesIO()
    fig.savefig(buffer, format=fmt, dpi=DPI, bbox_inches="tight", metadata=metadata[fmt])
    fig.clf()
    import matplotlib.pyplot as plt

    plt.close(fig)
    atomic_write_bytes(path, buffer.getvalue())
    return path


def _scale(metric: Any) -> float:
    return analysis.display_scale(metric)


def _metric_label(metric: Any) -> str:
    unit = " (%)" if metric.share else (f" ({metric.unit})" if metric.unit else "")
    arrow = "higher is better" if metric.higher_is_better else "lower is better"
    return f"{metric.name}{unit}, {arrow}"


def _numeric_columns(columns: Sequence[Any]) -> bool:
    return all(isinstance(c, (int, float)) and not isinstance(c, bool) for c in columns)


def _title(table: analysis.RankingTable) -> str:
    return table.group or table.task


def _fit(text: str, width: float) -> str:
    """``text`` wrapped to a figure ``width`` inches wide (a title longer than its figure widened it)."""
    import textwrap

    return textwrap.fill(text, max(30, int(width * 17)))


def _legend_below(fig: Any, ax: Any) -> None:
    """The legend of ``ax`` under the figure (beside it past eight entries), outside the axes (constrained layout
    makes room): never over a point, a band or a label, whatever the data."""
    handles, labels = ax.get_legend_handles_labels()
    if len(labels) > 8:  # many rows (solvers, searches, ceilings): one column beside the plot
        fig.legend(handles, labels, loc="outside right upper", frameon=False)
    elif labels:
        fig.legend(handles, labels, loc="outside lower center", ncols=min(4, len(labels)), frameon=False)


# ------------------------------------------------------------------------------------------ kinds


def draw_lines(table: analysis.RankingTable, path: Path) -> Path:
    """The metric against the columns: one line per row (centre over seeds) with its min-max seed band."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(COLUMN_WIDTH, 2.6), layout="constrained")
    scale = _scale(table.metric)
    numeric = _numeric_columns(table.columns)
    xs_of = {c: (c if numeric else i) for i, c in enumerate(table.columns)}
    for i, row in enumerate(table.rows):
        cells = [c for col in table.columns if (c := table.cell(row, col)) is not None]
        if not cells:
            continue
        x = [xs_of[c.column] for c in cells]
        s = style(i)
        if row in table.bounds:  # a ceiling: a black dashed line, no band
            s = {**s, "color": "#000000", "linestyle": "--", "marker": None, "linewidth": 0.9}
            ax.plot(x, [c.median * scale for c in cells], label=row, **s)
            continue
        if row in table.baselines:  # a reference row: dotted and thin, grey when it is the only one
            grey = len(table.baselines) - len(table.bounds) == 1
            s = {**s, "linestyle": ":", "linewidth": 0.9, **({"color": "#777777"} if grey else {})}
        elif len(table.baselines) > len(table.bounds):  # beside reference rows, trained rows are solid
            s = {**s, "linestyle": "-"}
        ax.plot(x, [c.median * scale for c in cells], label=row, **s)
        lo, hi = [min(c.values) * scale for c in cells], [max(c.values) * scale for c in cells]
        ax.fill_between(x, lo, hi, color=s["color"], alpha=0.15, linewidth=0)
    ax.set_xlabel(table.column_axis.name)
    labels = [table.column_axis.format(c) for c in table.columns]
    xs = list(xs_of.values())
    # Numeric columns closer than a twelfth of their range (0.04, 0.06, 0.08 of 0.04-0.30) would print on each other.
    gaps = [b - a for a, b in zip(xs, xs[1:], strict=False)]
    crowded = numeric and bool(gaps) and min(gaps) < (xs[-1] - xs[0]) / 12
    ax.set_xticks(xs, labels, rotation=45 if crowded or not numeric else 0)
    ax.set_ylabel(_metric_label(table.metric))
    ax.set_title(_fit(f"{_title(table)}: {table.layout.statistic} over seeds, band = min-max", COLUMN_WIDTH))
    ax.grid(alpha=0.3, linewidth=0.5)
    _legend_below(fig, ax)
    return save_figure(fig, path)


def draw_gap(table: analysis.RankingTable, path: Path) -> Path:
    """Each row's gap to the worst trained row per column, with the optimal column (largest spread) marked."""
    plt = pyplot()
    gap = analysis.gap_analysis(table)
    fig, ax = plt.subplots(figsize=(COLUMN_WIDTH, 2.6), layout="constrained")
    scale = _scale(table.metric)
    numeric = _numeric_columns(gap.columns)
    xs = list(gap.columns) if numeric else list(range(len(gap.columns)))
    for i, row in enumerate(table.rows):
        values = gap.gaps.get(row, {})
        points = [(x, values[c] * scale) for x, c in zip(xs, gap.columns, strict=True) if values.get(c) is not None]
        if points and row not in table.baselines:
            ax.plot(*zip(*points, strict=True), label=row, **style(i))
    title = f"{_title(table)}: gap to the worst trained row"
    if gap.optimal is not None:  # said in the title: a label in the axes ran through lines and the legend
        at = gap.optimal if numeric else list(gap.columns).index(gap.optimal)
        ax.axvline(at, color="#444444", linewidth=0.8, linestyle="--")
        optimal = table.column_axis.format(gap.optimal)
        title += f"\noptimal {table.column_axis.name} {optimal} (dashed line)"
    ax.set_xlabel(table.column_axis.name)
    ax.set_xticks(xs, [table.column_axis.format(c) for c in gap.columns])
    ax.set_ylabel(f"gap to the worst row{' (points)' if table.metric.share else ''}")
    ax.set_title(title)
    ax.grid(alpha=0.3, linewidth=0.5)
    _legend_below(fig, ax)
    return save_figure(fig, path)


def draw_bars(table: analysis.RankingTable, path: Path) -> Path:
    """Grouped bars: one group per column, one bar per row (centre), error bars = sample std over seeds."""
    plt = pyplot()
    width = COLUMN_WIDTH if len(table.columns) * len(table.rows) <= 24 else FULL_WIDTH
    fig, ax = plt.subplots(figsize=(width, 2.4))
    scale = _scale(table.metric)
    n = max(1, len(table.rows))
    bar = 0.8 / n
    for i, row in enumerate(table.rows):
        xs, ys, errs = [], [], []
        for j, col in enumerate(table.columns):
            if (c := table.cell(row, col)) is not None:
                xs.append(j - 0.4 + bar * (i + 0.5))
                ys.append(c.median * scale)
                errs.append(c.std * scale)
        s = style(i)
        hatch = ("", "//", "..", "xx", "\\\\", "--", "++", "oo")[i % 8]
        ax.bar(xs, ys, bar, yerr=errs, label=row, color=s["color"], hatch=hatch, edgecolor="#333333", linewidth=0.4,
               error_kw={"elinewidth": 0.6, "capsize": 1.5})  # fmt: skip
    ax.set_xticks(range(len(table.columns)), [table.column_axis.format(c) for c in table.columns])
    ax.set_ylabel(_metric_label(table.metric))
    what = table.statistic if table.derived else f"{table.layout.statistic} ± std over seeds"
    ax.set_title(_fit(f"{_title(table)}: {what}", width))
    ax.grid(axis="y", alpha=0.3, linewidth=0.5)
    ax.legend(frameon=False, ncols=min(4, n), loc="upper center", bbox_to_anchor=(0.5, -0.1))
    return save_figure(fig, path)


def draw_heatmap(table: analysis.RankingTable, path: Path) -> Path:
    """Rows x columns of cell centres, annotated (viridis: readable in greyscale), best per column in bold."""
    plt = pyplot()
    scale = _scale(table.metric)
    grid = [
        [(c.median * scale if (c := table.cell(r, col)) else math.nan) for col in table.columns] for r in table.rows
    ]
    fig, ax = plt.subplots(figsize=(FULL_WIDTH, 0.3 * len(table.rows) + 1.2))
    image = ax.imshow(grid, cmap="viridis", aspect="auto")
    ax.set_xticks(range(len(table.columns)), [table.column_axis.format(c) for c in table.columns], rotation=45,
                  ha="right")  # fmt: skip
    ax.set_yticks(range(len(table.rows)), list(table.rows))
    lo, hi = image.get_clim()
    for i, row in enumerate(table.rows):
        for j, col in enumerate(table.columns):
            if (c := table.cell(row, col)) is None:
                continue
            value = c.median * scale
            light = hi > lo and (value - lo) / (hi - lo) > 0.6
            text = f"{value:.0f}" if table.metric.share else f"{value:.2f}"
            weight = "bold" if c.mark == "best" else "normal"
            colour = "black" if light else "white"
            ax.text(j, i, text, ha="center", va="center", fontsize=5, color=colour, fontweight=weight)
    fig.colorbar(image, ax=ax, label=_metric_label(table.metric), fraction=0.03, pad=0.01)
    what = table.statistic if table.derived else f"{table.layout.statistic} over seeds"
    ax.set_title(_fit(f"{_title(table)}: {what}; bold = best per column", FULL_WIDTH))
    return save_figure(fig, path)


def draw_series(table: analysis.RankingTable, records: Sequence[dict[str, Any]], fig_spec: Figure, path: Path) -> Path:
    """Metrics named ``<prefix><x>`` against x, per row: the mean over every run of the row's cells in the table."""
    plt = pyplot()
    pattern = re.compile(re.escape(fig_spec.prefix) + r"(\d+(?:\.\d+)?)$")
    by_row: dict[str, dict[float, list[float]]] = defaultdict(lambda: defaultdict(list))
    for row, _, rec in _cell_runs(table, records):
        for key, value in (rec.get("metrics") or {}).items():
            if (m := pattern.match(key)) and isinstance(value, (int, float)) and math.isfinite(value):
                by_row[row][float(m.group(1))].append(float(value))
    fig, ax = plt.subplots(figsize=(COLUMN_WIDTH, 2.6), layout="constrained")
    for i, row in enumerate(r for r in table.rows if r in by_row):
        xs = sorted(by_row[row])
        ax.plot(xs, [100 * stats.fmean(by_row[row][x]) for x in xs], label=row, **style(i))
    ticks = sorted({x for row in by_row.values() for x in row})
    ax.set_xticks(ticks, [f"{x:g}" for x in ticks])
    ax.set_xlabel(fig_spec.label or fig_spec.prefix)
    ax.set_ylabel("accuracy (%), mean over runs")
    ax.set_title(_fit(f"{_title(table)}: accuracy by {fig_spec.label or fig_spec.prefix}", COLUMN_WIDTH))
    ax.grid(alpha=0.3, linewidth=0.5)
    _legend_below(fig, ax)
    return save_figure(fig, path)


def _cell_runs(
    table: analysis.RankingTable, records: Sequence[dict[str, Any]]
) -> Iterable[tuple[str, Any, dict[str, Any]]]:
    """(row, column, record) of every run whose value a cell of ``table`` holds: the rows as the table splits them
    (one cell, one protocol), never regrouped from the records' axes."""
    by_id = {str(r.get("id")): r for r in records}
    for cell in table.iter_cells():
        for run_id in cell.ids:
            if (record := by_id.get(run_id)) is not None:
                yield cell.row, cell.column, record


def learning_curves(table: analysis.RankingTable, records: Sequence[dict[str, Any]]) -> dict[Any, dict[str, Any]]:
    """Per column and row: the median over seeds of ``train_loss`` (``epoch`` events) and of the table's metric
    (``eval`` events) at each epoch, read from the ``events.jsonl`` of the runs each cell holds."""
    metric = table.metric.key
    out: dict[Any, dict[str, Any]] = defaultdict(lambda: defaultdict(lambda: {"loss": {}, "metric": {}}))
    per: dict[tuple[Any, str], dict[str, dict[int, list[float]]]] = defaultdict(
        lambda: {"loss": defaultdict(list), "metric": defaultdict(list)}
    )
    for row, column, rec in _cell_runs(table, records):
        if not rec.get("run_dir"):
            continue
        series = per[(column, row)]
        for event in iter_events(Path(rec["run_dir"]) / "events.jsonl"):
            epoch = event.get("epoch")
            if not isinstance(epoch, int):
                continue
            if event.get("event") == "epoch" and isinstance(event.get("train_loss"), (int, float)):
                series["loss"][epoch].append(float(event["train_loss"]))
            if event.get("event") == "eval" and isinstance(event.get(metric), (int, float)):
                series["metric"][epoch].append(float(event[metric]))
    for (column, row), series in per.items():
        for part in ("loss", "metric"):
            out[column][row][part] = {e: stats.median(v) for e, v in sorted(series[part].items())}
    return out


def draw_curves(table: analysis.RankingTable, records: Sequence[dict[str, Any]], path: Path) -> Path | None:
    """Learning curves per cell: train loss (top) and the table's metric (bottom) over epochs, per column."""
    curves = learning_curves(table, records)
    columns = [c for c in table.columns if c in curves][:8]
    if not columns:
        return None
    plt = pyplot()
    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(2, len(columns), figsize=(FULL_WIDTH, 3.2), squeeze=False, sharex="col")
    scale = _scale(table.metric)
    for j, column in enumerate(columns):
        for i, row in enumerate(table.rows):
            series = curves[column].get(row)
            if not series:
                continue
            s = {**style(i), "markevery": 0.2}
            if series["loss"]:
                axes[0][j].plot(list(series["loss"]), list(series["loss"].values()), label=row, **s)
            if series["metric"]:
                values = [v * scale for v in series["metric"].values()]
                axes[1][j].plot(list(series["metric"]), values, label=row, **s)
        axes[0][j].set_title(table.header(column))
        axes[1][j].set_xlabel("epoch")
        axes[1][j].xaxis.set_major_locator(MaxNLocator(integer=True))
        for ax in axes[:, j]:
            ax.grid(alpha=0.3, linewidth=0.5)
    axes[0][0].set_ylabel("train loss")
    axes[1][0].set_ylabel(table.metric.name + (" (%)" if table.metric.share else ""))
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncols=min(6, max(1, len(labels))), frameon=False,
               bbox_to_anchor=(0.5, 1.06))  # fmt: skip
    fig.suptitle(f"{_title(table)}: learning curves, median over seeds", y=1.12)
    return save_figure(fig, path)


def draw_cd(tables: Sequence[analysis.RankingTable], path: Path, alpha: float = 0.05) -> Path | None:
    """Critical-difference diagram (Demšar 2006): average ranks on an axis, 1 (best) on the left, a bar of the
    Nemenyi CD, and thick lines joining rows whose ranks differ by less than it."""
    plain = [t for t in tables if not t.derived]
    if not plain:
        return None
    ranks = rank_test(plain, plain[0].metric.higher_is_better, alpha)
    if len(ranks.average_ranks) < 2 or ranks.critical_difference is None:
        return None
    plt = pyplot()
    k = len(ranks.average_ranks)
    ordered = sorted(ranks.average_ranks.items(), key=lambda kv: kv[1])
    cd = ranks.critical_difference["value"]
    fig, ax = plt.subplots(figsize=(COLUMN_WIDTH, 0.9 + 0.16 * k))
    ax.set_xlim(0.7, k + 0.3)
    ax.set_ylim(-((k + 1) // 2 + 1), 2.2)
    ax.axis("off")
    ax.plot([1, k], [0, 0], color="black", linewidth=0.8)
    for r in range(1, k + 1):
        ax.plot([r, r], [0, 0.25], color="black", linewidth=0.8)
        ax.text(r, 0.45, str(r), ha="center", va="bottom", fontsize=6)
    ax.plot([1, 1 + cd], [1.6, 1.6], color="black", linewidth=1.2)
    ax.text(1 + cd / 2, 1.75, f"CD = {cd:.2f}", ha="center", va="bottom", fontsize=6)
    half = (k + 1) // 2
    for i, (row, rank) in enumerate(ordered):
        left = i < half
        y = -(i + 1) if left else -(k - i)
        end = 0.8 if left else k + 0.2
        ax.plot([rank, rank, end], [0, y, y], color="black", linewidth=0.6)
        ax.text(end - 0.05 if left else end + 0.05, y, f"{row} ({rank:.2f})", ha="right" if left else "left",
                va="center", fontsize=6)  # fmt: skip
    # Cliques: maximal runs of consecutive rows whose spread is below the CD.
    cliques, start = [], 0
    for end in range(k):
        while ordered[end][1] - ordered[start][1] >= cd:
            start += 1
        if end > start and (not cliques or end > cliques[-1][1]):
            if cliques and cliques[-1][0] >= start:
                cliques[-1] = (cliques[-1][0], end)
            else:
                cliques.append((start, end))
    for n, (a, b) in enumerate(cliques):
        y = -0.45 - 0.35 * n
        ax.plot([ordered[a][1] - 0.03, ordered[b][1] + 0.03], [y, y], color="black", linewidth=2.2)
    friedman = ranks.friedman
    note = f"; Friedman p = {friedman['p']:.3g}" if friedman and friedman.get("p") is not None else ""
    ax.set_title(_fit(f"{plain[0].task}: average ranks over {ranks.cells} cells{note}", COLUMN_WIDTH))
    return save_figure(fig, path)


# ------------------------------------------------------------------------------------------ driver


def figure_files(
    records: Sequence[dict[str, Any]],
    out: Path,
    task: str,
    fmt: str = "png",
    metric: str | None = None,
    force: bool = False,
) -> list[Path]:
    """Draw every figure ``task`` declares into the folder ``out`` (``gaptui figures``); returns the files (sorted).

    All or none, through :class:`engine.files.OutputFolder`: the figures are drawn into a hidden staging folder and
    moved in under ``.gaptui-figures.json``, which lists what this command wrote. A file of the same name it did not
    write is refused unless ``force``; its earlier figures of ``task`` in ``fmt`` that it no longer draws are removed
    (figures of other tasks and formats in the same folder are kept).
    """
    check_format(fmt)
    family(task)
    analysis.check_metric(metric, records, task)
    out = Path(out)

    def replaces(name: str) -> bool:
        return "/" not in name and name.startswith(f"{task}-") and name.endswith(f".{fmt}")

    with OutputFolder(out, MANIFEST, "gaptui figures", force, replaces=replaces) as dest:
        assert dest.staging is not None
        draw_figures(records, dest.staging, task, fmt, metric)
    return sorted(out / name for name in dest.names)


def check_format(fmt: str) -> None:
    if fmt not in FORMATS:
        raise GaptuiError(f"unknown figure format '{fmt}'; expected one of: {', '.join(FORMATS)}")


def draw_figures(
    records: Sequence[dict[str, Any]],
    out: Path,
    task: str,
    fmt: str = "png",
    metric: str | None = None,
) -> list[Path]:
    """Draw every figure ``task`` declares into ``out`` and return the files written (sorted); ``out`` is a folder
    of the caller's (a staging folder: :func:`figure_files`, the report), nothing else is checked or kept there.

    Names: ``<task>-<kind>-<table>.<fmt>`` (``<task>-cd.<fmt>`` for the one diagram across tables).
    """
    check_format(fmt)
    fam = family(task)
    declared = analysis.check_metric(metric, records, task)
    tables = analysis.build_tables(records, declared, task=task)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for spec in fam.figures:
        chosen: Iterable[analysis.RankingTable] = [t for t in tables if t.derived == spec.derived]
        if spec.kind == "cd":
            path = draw_cd(tables, out / f"{task}-cd.{fmt}")
            written += [path] if path else []
            continue
        for table in chosen:
            name = out / f"{task}-{spec.kind}-{slug(table.group or task)}.{fmt}"
            if spec.kind == "lines":
                written.append(draw_lines(table, name))
            elif spec.kind == "gap":
                written.append(draw_gap(table, name))
            elif spec.kind == "bars":
                written.append(draw_bars(table, name))
            elif spec.kind == "heatmap":
                written.append(draw_heatmap(table, name))
            elif spec.kind == "series":
                written.append(draw_series(table, records, spec, name))
            elif spec.kind == "curves":
                if (path := draw_curves(table, records, name)) is not None:
                    written.append(path)
            else:
                raise GaptuiError(f"task '{task}' declares figure kind '{spec.kind}', which gaptui does not draw")
    return sorted(written)
