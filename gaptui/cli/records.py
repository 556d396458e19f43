"""The records' commands: ``history``, ``show``, ``tasks``, ``tag`` and ``note``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from engine.errors import GaptuiError
from gaptui.cli.common import (
    JsonOpt,
    WorkspaceOpt,
    console,
    print_json,
    task_name,
)
from gaptui.workspace import Workspace


def register(app: typer.Typer) -> None:
    app.command("history")(history_cmd)
    app.command("show")(show_cmd)
    # "-TAG" removes a tag: it must reach the command as an argument, not be parsed as an option.
    app.command("tag", context_settings={"ignore_unknown_options": True})(tag_cmd)
    app.command("note")(note_cmd)
    app.command("tasks")(tasks_cmd)


RECORD_KEYS = (
    "id",
    "hash",
    "status",
    "task",
    "axes",
    "seed",
    "depends",
    "metrics",
    "params",
    "duration",
    "created",
    "started",
    "finished",
    "tags",
    "note",
    "error",
    "run_dir",
    "preset",
)


#: Past this many rows ``gaptui history`` prints plain aligned text instead of a Rich table.
RICH_ROWS = 1000


def _record_row(r: dict[str, Any]) -> dict[str, Any]:
    return {k: r.get(k) for k in RECORD_KEYS}


HistoryTaskOpt = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option(
        "--task", "-t", callback=task_name, help="Only runs of this task family; its axes become the columns."
    ),
]
HistoryStatusOpt = Annotated[
    Optional[list[str]],  # noqa: UP045
    typer.Option("--status", help="Only runs with this status (repeatable)."),
]
HistoryDatasetOpt = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option("--dataset", help="Only this dataset label or base (the same as --filter dataset=VALUE)."),
]
HistoryModelOpt = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option("--model", help="Only this model (the same as --filter model=VALUE)."),
]
HistoryTagOpt = Annotated[Optional[str], typer.Option("--tag", help="Only runs with this tag.")]  # noqa: UP045
HistoryFiltersOpt = Annotated[
    Optional[list[str]],  # noqa: UP045
    typer.Option(
        "--filter",
        help="Only runs whose AXIS is VALUE (repeatable, all must hold): any axis a family declares, e.g. "
        "noise=0.12, pe=rwpe, pooling=gmt, dataset=er (also matches er[n=50]).",
    ),
]
HistoryLimitOpt = Annotated[int, typer.Option("--limit", help="Show the newest N runs in the table (0: all).")]
HistoryHideOpt = Annotated[
    Optional[list[str]],  # noqa: UP045
    typer.Option(
        "--hide",
        help="Hide these protocol columns (repeatable or comma-separated): a setting such as epochs, pairs, "
        "batch, or 'protocol' for all of them.",
    ),
]


def history_cmd(
    workspace: WorkspaceOpt = None,
    task: HistoryTaskOpt = None,
    status: HistoryStatusOpt = None,
    dataset: HistoryDatasetOpt = None,
    model: HistoryModelOpt = None,
    tag: HistoryTagOpt = None,
    filters: HistoryFiltersOpt = None,
    limit: HistoryLimitOpt = 200,
    hide: HistoryHideOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List the runs of the workspace (the table shows the newest --limit; --json always lists all)."""
    from engine.tasks import family
    from gaptui import analysis
    from gaptui.cli.tables import print_table
    from gaptui.columns import aligned, record_columns, visible_columns
    from gaptui.history.store import read_records
    from gaptui.record import RecordFilter, check_statuses, parse_axis_filters

    ws = Workspace.resolve(workspace)
    statuses = check_statuses(status or [])
    if task is not None:
        family(task)
    shortcuts = [f"{k}={v}" for k, v in (("dataset", dataset), ("model", model)) if v]
    axes = parse_axis_filters([*(filters or []), *shortcuts], [task] if task else None)
    chosen = RecordFilter(task, statuses, tag, axes)
    records = chosen.apply(read_records(ws))
    if as_json:
        print_json([_record_row(r) for r in records])
        return
    if not records:
        console.print(
            f"no runs in {ws.history}" + (" matching the filters" if chosen else ""), highlight=False, markup=False
        )
        return
    tasks = analysis.record_tasks(records)
    columns = visible_columns(record_columns(task or (tasks[0] if len(tasks) == 1 else None)), hide or [])
    total = len(records)
    if limit and total > limit:
        records = sorted(records, key=lambda r: r.get("created") or "")[-limit:]
    title = f"{total} runs in {ws.root}" + (
        f" (newest {len(records)}; --limit 0 for all)" if len(records) < total else ""
    )
    cells = [
        [
            r["id"],
            r["status"],
            *(col.text(r) for col in columns),
            f"{r['params']:,}" if r.get("params") is not None else "",
            f"{r['duration']:.0f}s" if r.get("duration") else "",
            ",".join(r.get("tags") or []),
        ]
        for r in records
    ]
    header = ["id", "status", *(col.label for col in columns), "params", "duration", "tags"]
    right = {2 + i for i, col in enumerate(columns) if col.numeric} | {len(header) - 3, len(header) - 2}
    if len(cells) > RICH_ROWS:  # a Rich table costs ~1 ms a row: 20,000 rows print as plain aligned text
        print(title)
        sys.stdout.write("\n".join(aligned([header, *cells], right)) + "\n")
        return
    print_table(console, title, header, cells, right=right)


ShowRunOpt = Annotated[str, typer.Argument(metavar="RUN", help="Run id (or unique prefix).")]
ShowTaskOpt = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option("--task", "-t", callback=task_name, help="Look the run up among this task family's runs only."),
]


def show_cmd(
    run: ShowRunOpt,
    workspace: WorkspaceOpt = None,
    task: ShowTaskOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show one run: its axes, spec, metrics, reproducibility record, training curves and probes."""
    from engine.events import read_events
    from gaptui.plots import curves_plot
    from gaptui.probe_view import probe_tables, probes_heading, read_probes
    from gaptui.record import record_task

    ws = Workspace.resolve(workspace)
    record = _find_record(ws, run, task)
    events = read_events(Path(record["run_dir"]) / "events.jsonl")[0] if record.get("run_dir") else []
    probes = read_probes(record.get("run_dir"))
    if as_json:
        print_json({**record, "events": events, **({"probes": probes} if probes else {})})
        return
    console.print(_show_table(record))
    if any(e.get("event") == "epoch" for e in events):
        plot = curves_plot({record["id"]: events}, record_task(record), width=min(console.width, 100), height=18)
        console.print(Text.from_ansi(plot))
    if probes:  # written by a family's probe command (gaptui probe)
        console.print(escape(probes_heading(probes)), highlight=False)
        for probe_table in probe_tables(probes):
            console.print(probe_table)
    if record.get("log_tail") and record["status"] == "failed":
        console.print("\n".join(record["log_tail"]), highlight=False, markup=False)
    console.print(
        f"spec: {json.dumps(record.get('spec'), sort_keys=True)}", highlight=False, soft_wrap=True, markup=False
    )


def _find_record(ws: Workspace, run: str, task: str | None) -> dict[str, Any]:
    """The record ``gaptui show`` shows: the run id (or unique prefix) ``run``, among ``task``'s runs when given."""
    from engine.tasks import family
    from gaptui.history.store import History
    from gaptui.record import record_task

    with History(ws) as history:
        if task is not None:
            family(task)
            matches = [r for r in history.records() if record_task(r) == task and r["id"].startswith(run)]
            if len(matches) != 1:
                found = "no" if not matches else "more than one"
                raise GaptuiError(f"{found} {task} run matches '{run}' in {ws.history}")
            return matches[0]
        else:
            return history.get(run)


def _show_table(record: dict[str, Any]) -> Table:
    """The table at the head of ``gaptui show``: a run's axes, settings, bookkeeping, metrics and reproducibility."""
    from gaptui.protocol import settings_texts
    from gaptui.record import record_family, record_metrics, record_task

    fam = record_family(record)
    head = Table(title=f"run {record['id']} ({record_task(record)}, {record['status']})", show_header=False)
    head.add_column("key")
    head.add_column("value")
    axes = record.get("axes") or {}
    for axis in fam.axes if fam else ():
        head.add_row(axis.name, escape(axis.format(axes.get(axis.key))))
    texts = settings_texts(record)
    for setting in fam.settings() if fam else ():
        if texts.get(setting.key):
            head.add_row(setting.name, escape(texts[setting.key]))
    for key in ("seed", "depends", "params", "duration", "preset", "tags", "note", "error", "run_dir"):
        value = record.get(key)
        if value not in (None, "", []):
            head.add_row(key, escape(", ".join(value) if isinstance(value, list) else str(value)))
    for attempt in record.get("earlier") or []:  # runs recorded done and done again (their artefacts were gone)
        when = attempt.get("finished") or "?"
        head.add_row(
            "earlier",
            escape(f"{attempt.get('status')} {when}; done again {attempt.get('redone')}: {attempt.get('why')}"),
        )
    slurm = record.get("slurm") or {}
    if slurm.get("jobs"):
        state = " ".join(str(slurm[k]) for k in ("state", "reason", "node") if slurm.get(k))
        jobs = ", ".join(slurm["jobs"])
        head.add_row("slurm", escape(f"job(s) {jobs}: {state}; resubmitted {slurm.get('retries', 0)}x"))
    for key, value in record_metrics(record).items():
        name = key
        if fam is not None and key in {m.key for m in fam.metrics}:
            name = f"{fam.metric(key).name} ({key})"
        head.add_row(escape(name), f"{value:.4f}" if isinstance(value, float) else str(value))
    repro = record.get("repro") or {}
    code = (repro.get("versions") or {}).get("gaptui")
    if code:  # the release alone in runs recorded before gaptui named its code
        head.add_row("code", escape(str(code) if "(" in str(code) else f"{code} (code not recorded)"))
    for key in ("device_name", "precision", "versions", "project", "dataset_id"):
        if repro.get(key):
            value = json.dumps(repro[key]) if isinstance(repro[key], dict) else str(repro[key])
            head.add_row(f"repro.{key}", escape(value))
    return head


def tasks_cmd(as_json: JsonOpt = False) -> None:
    """List the task families: their axes, table layout and metrics (direction and unit)."""
    from engine.tasks import FAMILIES

    docs = [
        {
            "name": fam.name,
            "title": fam.title,
            "axes": [a.key for a in fam.axes],
            "table": {"group": fam.table.group, "rows": fam.table.rows, "columns": fam.table.columns},
            "baselines": list(fam.table.baselines),
            "default_metric": fam.default_metric,
            "metrics": [
                {"key": m.key, "name": m.name, "unit": m.unit, "higher_is_better": m.higher_is_better}
                for m in fam.metrics
            ],
        }
        for fam in FAMILIES
    ]
    if as_json:
        print_json(docs)
        return
    table = Table(title="task families")
    for col in ("task", "what", "axes", "table (group: rows x columns)", "metrics (default first)"):
        table.add_column(col)
    for doc in docs:
        t = doc["table"]
        metrics = sorted(doc["metrics"], key=lambda m: m["key"] != doc["default_metric"])
        table.add_row(
            doc["name"],
            escape(doc["title"]),
            ", ".join(doc["axes"]),
            f"{t['group'] or '-'}: {t['rows']} x {t['columns']}",
            ", ".join(
                f"{m['key']} ({'↑' if m['higher_is_better'] else '↓'}{' ' + m['unit'] if m['unit'] else ''})"
                for m in metrics
            ),
        )
    console.print(table)


def tag_cmd(
    run: Annotated[str, typer.Argument(metavar="RUN", help="Run id (or unique prefix).")],
    tag: Annotated[str, typer.Argument(help="Tag to add (prefix with - to remove).")],
    workspace: WorkspaceOpt = None,
) -> None:
    """Add a tag to a run (``-TAG`` removes it). Works while a grid runs."""
    from gaptui.history.store import History

    name = tag[1:] if tag.startswith("-") else tag
    if not name.strip() or name != name.strip() or "," in name:
        raise GaptuiError(f"tag '{tag}': expected a non-empty word without commas or surrounding spaces")
    with History(Workspace.resolve(workspace), write=True, exclusive=False, purpose="gaptui tag") as history:
        record = history.get(run)
        tags = list(record.get("tags") or [])
        if tag.startswith("-"):
            if name not in tags:
                raise GaptuiError(f"run {record['id']} has no tag '{name}' (tags: {', '.join(tags) or 'none'})")
            tags = [t for t in tags if t != name]
        elif name not in tags:
            tags.append(name)
        history.update(record["hash"], tags=tags)
    console.print(f"{record['id']}: tags {', '.join(tags) or '(none)'}", highlight=False, markup=False)


def note_cmd(
    run: Annotated[str, typer.Argument(metavar="RUN", help="Run id (or unique prefix).")],
    text: Annotated[str, typer.Argument(help="The note (replaces the previous one).")],
    workspace: WorkspaceOpt = None,
) -> None:
    """Attach a note to a run. Works while a grid runs."""
    from gaptui.history.store import History

    with History(Workspace.resolve(workspace), write=True, exclusive=False, purpose="gaptui note") as history:
        record = history.get(run)
        history.update(record["hash"], note=text)
    console.print(f"{record['id']}: note saved", highlight=False, markup=False)
