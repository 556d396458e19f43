"""``gaptui diff``: two or more runs side by side, as experiment trackers compare runs.

What differs first: the spec keys whose values are not the same in every run (nested keys flattened,
``dataset.n_train``; a key one run lacks shows as ``—``), then the final metrics of each run, what the runs were
recorded with where that differs (gaptui's code, packages, device), and their training curves (the loss and the
family's metric, overlaid). The CLI prints it (curves with plotext, ``--figure`` with matplotlib); the terminal
app's History shows the same for the rows marked (:class:`gaptui.tui.screens.run_diff.RunDiffScreen`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.errors import GaptuiError
from gaptui.record import Record, flatten, record_family, record_metrics, record_task

#: How a key one run lacks shows.
MISSING = "—"
#: Fields of the reproducibility record compared, beside each package of ``repro.versions``.
REPRO_FIELDS = (("device", "device_name"), ("precision", "precision"))


@dataclass(frozen=True)
class RunDiff:
    """Runs compared: their ids, and rows of (label, one text per run) in three parts."""

    ids: tuple[str, ...]
    #: The spec keys that differ, flattened (``dataset.n_train``), in key order.
    spec: tuple[tuple[str, tuple[str, ...]], ...]
    #: How many spec keys are the same in every run.
    same: int
    #: Status, axes in one line, parameter count and duration, then every final metric of any of the runs.
    metrics: tuple[tuple[str, tuple[str, ...]], ...]
    #: What the runs were recorded with (gaptui's code, packages, device) where the runs differ.
    recorded: tuple[tuple[str, tuple[str, ...]], ...]

    def as_json(self) -> dict[str, Any]:
        def rows(part: Sequence[tuple[str, tuple[str, ...]]]) -> dict[str, dict[str, str]]:
            return {label: dict(zip(self.ids, values, strict=True)) for label, values in part}

        return {
            "runs": list(self.ids),
            "spec": rows(self.spec),
            "spec_same": self.same,
            "metrics": rows(self.metrics),
            "recorded": rows(self.recorded),
        }


def value_text(value: Any) -> str:
    """One leaf of a spec as the diff shows it: JSON (strings without quotes), floats as written."""
    if value is None:
        return "null"
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True)


def check_runs(runs: Sequence[str]) -> None:
    """At least two run ids, none given twice (one error line otherwise)."""
    if len(runs) < 2:
        given = f" (got only '{runs[0]}')" if runs else ""
        raise GaptuiError(f"diff needs at least two runs to compare{given}; e.g. gaptui diff RUN RUN")


def _differing(rows: Sequence[Mapping[str, Any]]) -> tuple[list[tuple[str, tuple[str, ...]]], int]:
    keys = sorted({k for row in rows for k in row})
    differ, same = [], 0
    for key in keys:
        texts = tuple(value_text(row[key]) if key in row else MISSING for row in rows)
        if len(set(texts)) > 1:
            differ.append((key, texts))
        else:
            same += 1
    return differ, same


def _number(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return MISSING if value is None else str(value)
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def _metric_rows(records: Sequence[Record]) -> list[tuple[str, tuple[str, ...]]]:
    from gaptui.columns import describe

    rows = [
        ("status", tuple(str(r.get("status") or MISSING) for r in records)),
        ("run of", tuple(f"{record_task(r)}: {describe(r)}" for r in records)),
        ("params", tuple(f"{r['params']:,}" if r.get("params") is not None else MISSING for r in records)),
        ("duration", tuple(f"{r['duration']:.0f} s" if r.get("duration") else MISSING for r in records)),
    ]
    names: dict[str, str] = {}
    order: list[str] = []
    for record in records:
        fam = record_family(record)
        declared = {m.key: m.name for m in fam.metrics} if fam is not None else {}
        first = [fam.default_metric] if fam is not None else []
        for key in [*first, *record_metrics(record)]:
            if key in record_metrics(record) and key not in names:
                names[key] = f"{declared[key]} ({key})" if key in declared else key
                order.append(key)
    for key in order:
        rows.append((names[key], tuple(_number(record_metrics(r).get(key)) for r in records)))
    return rows


def _recorded_rows(records: Sequence[Record]) -> list[tuple[str, tuple[str, ...]]]:
    flat = []
    for record in records:
        repro = record.get("repro") or {}
        row = dict(repro.get("versions") or {})
        row.update({label: repro[key] for label, key in REPRO_FIELDS if repro.get(key) is not None})
        flat.append(row)
    return _differing(flat)[0]


def run_diff(records: Sequence[Record]) -> RunDiff:
    """The diff of ``records`` (two or more, in the order given)."""
    specs = [flatten(r.get("spec") or {}) for r in records]
    spec, same = _differing(specs)
    return RunDiff(
        tuple(str(r["id"]) for r in records),
        tuple(spec),
        same,
        tuple(_metric_rows(records)),
        tuple(_recorded_rows(records)),
    )


def diff_tables(diff: RunDiff) -> list[Any]:
    """The diff as Rich tables (spec keys that differ, metrics, what the runs were recorded with), for the CLI
    and the terminal app alike."""
    from rich.markup import escape
    from rich.table import Table

    def table(title: str, first: str, rows: Sequence[tuple[str, tuple[str, ...]]]) -> Table:
        out = Table(title=title, title_justify="left", show_lines=False)
        out.add_column(first, style="bold", no_wrap=True)
        for run in diff.ids:
            out.add_column(run, no_wrap=False)
        for label, values in rows:
            out.add_row(escape(label), *(escape(v) for v in values))
        return out

    keys = len(diff.spec) + diff.same
    title = f"spec: {len(diff.spec)} of {keys} keys differ"
    tables = [table(title, "key", diff.spec) if diff.spec else table(f"{title} (the same spec)", "key", [])]
    tables.append(table("results", "metric", diff.metrics))
    if diff.recorded:
        tables.append(table("recorded with (where the runs differ)", "what", diff.recorded))
    return tables


def run_events(record: Record) -> list[dict[str, Any]]:
    """The events of a run's ``events.jsonl`` (none when its folder or the file is gone)."""
    from engine.events import read_events

    folder = record.get("run_dir")
    if not folder:
        return []
    return read_events(Path(folder) / "events.jsonl")[0]


def curves_task(records: Sequence[Record]) -> str | None:
    """The family whose metric the curves plot: the runs' one family, or None (the loss and a generic metric)."""
    tasks = {record_task(r) for r in records}
    return tasks.pop() if len(tasks) == 1 else None


def draw_curves_figure(records: Sequence[Record], path: Path) -> Path:
    """The runs' training loss and the family's metric over epochs, side by side, one line per run (matplotlib;
    the format from ``path``'s suffix: png, svg or pdf)."""
    from gaptui import figures
    from gaptui.plots import curve_points, curves_of, epoch_rows

    if path.suffix.lstrip(".").lower() not in figures.FORMATS:
        raise GaptuiError(f"--figure {path}: expected a file ending in .{', .'.join(figures.FORMATS)}")
    runs = {str(r["id"]): epoch_rows(run_events(r)) for r in records}
    plt = figures.pyplot()
    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(1, 2, figsize=(figures.FULL_WIDTH, 2.6), layout="constrained")
    for ax, (key, title) in zip(axes, curves_of(curves_task(records), runs), strict=True):
        for i, (label, rows) in enumerate(runs.items()):
            xs, ys = curve_points(rows, key)
            if xs:
                ax.plot(xs, ys, label=label, **{**figures.style(i), "markevery": 0.2})
        ax.set_title(title)
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3, linewidth=0.5)
    handles, labels = axes[0].get_legend_handles_labels()
    if not labels:
        handles, labels = axes[1].get_legend_handles_labels()
    if labels:
        fig.legend(handles, labels, loc="outside lower center", ncols=min(4, len(labels)), frameon=False)
    else:
        fig.suptitle("no epoch events in the runs' folders")
    path.parent.mkdir(parents=True, exist_ok=True)
    return figures.save_figure(fig, path)
