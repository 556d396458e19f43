"""``gaptui table``, ``gap``, ``stats``, ``figures``, ``report`` and ``export``: tables, gaps, statistics, figures
and exports over finished runs.

``table`` and ``gap`` work on one task family at a time: ``--task``, or the one family the history holds runs of
(several: an error asking for ``--task``; none: nothing to show). ``stats``, ``figures``, ``export --out`` and
``report`` cover each family the history holds in turn unless ``--task`` names one. Layouts, metrics and their
directions come from the families (:mod:`engine.tasks`). :func:`register` adds the commands to the Typer app.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.markup import escape
from rich.text import Text

from engine.errors import GaptuiError
from gaptui import analysis
from gaptui.cli.common import JsonOpt, TaskOpt, WorkspaceOpt, console, err_console, print_json, warn
from gaptui.workspace import Workspace

DatasetOpt = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option(
        "--dataset",
        "-d",
        help="Only this table group (alignment: dataset label, e.g. er or 'er[n=50,degree=6]'; default: all).",
    ),
]
ReferenceOpt = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option(
        "--reference",
        "-r",
        help="Compare with reference results: 'paper' (the task's published table: alignment Table D.3, gape "
        "Table 1, properties Table 2), a NAME from <workspace>/references/[TASK.]NAME.csv, or a .csv path "
        "(format: docs/results.md).",
    ),
]
MetricOpt = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option("--metric", "-m", help="Metric to rank by, as the task declares it [default: the task's own]."),
]


TunedOpt = Annotated[
    bool,
    typer.Option("--tuned", help="Also show the rows `gaptui tune --final` re-ran, as '<row> (tuned)'."),
]
ByOpt = Annotated[
    Optional[list[str]],  # noqa: UP045
    typer.Option(
        "--by",
        help="Split rows by this key too (repeatable or comma-separated): a setting of the task (alignment: epochs, "
        "pairs, batch, budget, noise_model), an axis outside the table (recipe) or any key of the runs' specs "
        "(lr, dataset.n_val, model_kwargs.layers).",
    ),
]
FilterOpt = Annotated[
    Optional[list[str]],  # noqa: UP045
    typer.Option(
        "--filter",
        help="Only runs whose AXIS is VALUE (repeatable, all must hold), e.g. recipe=gaptui or model=gin.",
    ),
]


def _load(
    workspace: Path | None,
    filters: list[str] | None = None,
    task: str | None = None,
    tuned: bool | None = False,
):
    """The workspace and its records, those matching ``filters`` (``axis=value``) when given; as ranking tables see
    them (:func:`gaptui.tune.results.table_view`: no trial runs, the final tuned rows with ``tuned``) unless ``tuned``
    is None (every run, for the trackers)."""
    # Imported here: history pulls in TinyDB, which `gaptui --help` does not need.
    from gaptui.history.store import read_records
    from gaptui.record import usable_records

    ws = Workspace.resolve(workspace)
    records = usable_records(read_records(ws), warn)
    if filters:
        from gaptui.record import RecordFilter, parse_axis_filters

        records = RecordFilter(axes=parse_axis_filters(filters, [task] if task else None)).apply(records)
    if tuned is not None:
        from gaptui.tune.results import table_view

        records = table_view(records, tuned)
    return ws, records


def by_keys(by: list[str] | None) -> tuple[str, ...]:
    """``--by`` values, repeatable and comma-separated, as one tuple of keys."""
    return tuple(k.strip() for item in by or [] for k in item.split(",") if k.strip())


def _each_task(records: list[dict[str, Any]], task: str | None, narrowed: str | None = None) -> list[str]:
    """The families a command covers: ``task`` when given (checked), else every family the history holds runs of
    (none for an empty history). An option that names one family's metric or table (``narrowed``) needs ``task``
    when the history holds several."""
    if task is not None:
        analysis.check_task(task)
        return [task]
    tasks = analysis.record_tasks(records)
    if narrowed is not None and len(tasks) > 1:
        analysis.infer_task(records)  # the one line asking for --task
    return tasks


def _tables(
    records: list[dict[str, Any]],
    task: str | None,
    group: str | None,
    metric: str | None,
    by: tuple[str, ...] = (),
) -> tuple[list[analysis.RankingTable], str]:
    """Validated tables of ``task`` (None: the history holds no run), plus the reason when there are none (for a
    friendly message)."""
    if task is None:
        if by:
            raise GaptuiError(f"--by {','.join(by)}: the history holds no runs to say which keys they have")
        return [], "no finished runs yet"
    from gaptui.analysis.cells import check_by

    check_by(analysis.check_task(task), by, records)
    declared = analysis.check_metric(metric, records, task)
    if not analysis.done_groups(records, task):
        return [], f"no finished {task} runs yet"
    if group is not None:
        analysis.check_group(group, records, task)
    tables = analysis.build_tables(records, declared, group, task=task, by=by)
    where = f" on {group}" if group else ""
    return tables, "" if tables else f"no finished {task} run{where} reports metric '{declared.key}'"


def table_cmd(
    dataset: DatasetOpt = None,
    metric: MetricOpt = None,
    fmt: Annotated[str, typer.Option("--format", "-f", help="text, md, csv, latex or json.")] = "text",
    reference: ReferenceOpt = None,
    task: TaskOpt = None,
    filters: FilterOpt = None,
    tuned: TunedOpt = False,
    by: ByOpt = None,
    workspace: WorkspaceOpt = None,
) -> None:
    """Rank like Table D.3 (alignment: models x noise) or as another task lays out: median ± std over seeds.

    With --reference, each cell of the tables the reference covers is shown beside the reference's with the
    difference, and per column (alignment: noise level) the Kendall tau between the two row orders and whether the
    reference's best row is within 1 point of ours. 'paper' is each family's published table (alignment: Table
    D.3, gape: Table 1, properties: Table 2).
    """
    analysis.check_format(fmt)
    if reference is not None:
        _table_with_reference(task, dataset, metric, fmt, reference, workspace, filters, tuned, by_keys(by))
        return
    ws, records = _load(workspace, filters, task, tuned=tuned)
    task = analysis.infer_task(records, task)
    tables, why_empty = _tables(records, task, dataset, metric, by_keys(by))
    if fmt == "json":
        print_json(analysis.tables_json(tables))
        return
    if not tables:
        if fmt == "csv":
            sys.stdout.write(analysis.render_csv([], task))
        message = f"{why_empty} in {ws.history}; tables fill in as runs finish"
        (console if fmt == "text" else err_console).print(message, highlight=False)
        return
    if fmt == "text":
        for table in tables:
            console.print(analysis.render_rich(table, analysis.gap_analysis(table), width=console.width))
        return
    render = {"md": analysis.render_markdown, "csv": analysis.render_csv, "latex": analysis.render_latex}[fmt]
    sys.stdout.write(render(tables))


def _table_with_reference(
    task: str | None,
    dataset: str | None,
    metric: str | None,
    fmt: str,
    name: str,
    workspace: Path | None,
    filters: list[str] | None = None,
    tuned: bool = False,
    by: tuple[str, ...] = (),
) -> None:
    from gaptui.analysis import reference as ref

    analysis.check_format(fmt, ("text", "md", "csv", "json"))
    ws, records = _load(workspace, filters, task, tuned=tuned)
    task = analysis.infer_task(records, task)
    chosen = ref.load_reference(name, ws, task)
    task = chosen.task  # the history's family, or (no run yet) the one the reference holds
    ref.check_metric(chosen, metric)
    tables, why_empty = _tables(records, task, dataset, metric, by)
    pairs = [(table, ref.compare(table, chosen)) for table in tables]
    comparisons = [c for _, c in pairs if c is not None]
    overlap = not tables or any(ref.shared_cells(table, chosen) for table in tables)
    if not overlap:
        # Not a mistake of the user's (a smoke grid on a dataset the paper never ran): the tables, and why alone.
        warn(f"{ref.no_overlap(chosen, tables)}; the tables are shown without it")
    unmatched = [t.group for t, c in pairs if c is None and not t.derived and chosen.group_axis]
    if unmatched and overlap:
        axis = chosen.family.axis(chosen.group_axis or "")
        err_console.print(
            f"[yellow]note:[/] reference '{chosen.name}' has no {axis.name} {', '.join(map(repr, unmatched))} "
            f"(it covers {', '.join(chosen.groups)})",
            highlight=False,
        )
    for table in tables if overlap else ():
        if note := ref.uncovered_columns(table, chosen):
            err_console.print(f"[yellow]note:[/] {escape(note)}", highlight=False)
    if fmt == "json":
        print_json([ref.comparison_json(c) for c in comparisons])
        return
    if fmt == "csv":  # the protocols have no place in the CSV: beside it, as notes
        from gaptui.analysis.reference import protocol_notes

        for line in protocol_notes(comparisons):
            err_console.print(f"[yellow]note:[/] {escape(line)}", highlight=False)
        sys.stdout.write(ref.render_csv(comparisons))
        return
    if fmt == "md":
        sys.stdout.write(ref.render_markdown(comparisons))
        return
    if not tables:
        console.print(f"{why_empty} in {ws.history}; tables fill in as runs finish", highlight=False, markup=False)
        return
    for table, comparison in pairs:
        if comparison is None:
            console.print(analysis.render_rich(table, analysis.gap_analysis(table), width=console.width))
        else:
            console.print(ref.render_rich(comparison))


def gap_cmd(
    dataset: DatasetOpt = None,
    metric: MetricOpt = None,
    task: TaskOpt = None,
    tuned: TunedOpt = False,
    by: ByOpt = None,
    workspace: WorkspaceOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show the gap to the worst trained row per column (alignment: per noise level) and the optimal column."""
    ws, records = _load(workspace, tuned=tuned)
    tables, why_empty = _tables(records, analysis.infer_task(records, task), dataset, metric, by_keys(by))
    gaps = [analysis.gap_analysis(t) for t in tables]
    if as_json:
        print_json([g.as_dict() for g in gaps])
        return
    if not gaps:
        console.print(f"{why_empty} in {ws.history}; gaps fill in as runs finish", highlight=False, markup=False)
        return
    color = console.is_terminal and console.color_system is not None
    width = max(40, min(console.width, 100))
    for gap in gaps:
        console.print(analysis.render_gap_rich(gap, width=console.width))
        if gap.columns:
            plot = analysis.render_gap_plot(gap, width=width, height=20, color=color)
            console.print(Text.from_ansi(plot), soft_wrap=True)
        if not gap.table.family.optimal_line(gap.table.group if gap.table.derived else None):
            continue  # the family gives an optimal column no meaning for this table
        axis = gap.table.column_axis
        optimal = "none (no trained model)" if gap.optimal is None else axis.format(gap.optimal)
        label = gap.group or gap.table.task
        console.print(f"[bold]{escape(label)}[/]: optimal {escape(axis.name)} {escape(optimal)}", highlight=False)


ExportOutOpt = Annotated[
    Optional[Path],  # noqa: UP045
    typer.Option(
        "--out",
        "-o",
        help="Folder for tables.csv/.md/.tex and runs.json (several families: one folder each, DIR/TASK/).",
    ),
]
ExportForceOpt = Annotated[
    bool, typer.Option("--force", help="Replace files of the same name that an earlier export did not write.")
]
ExportMlflowOpt = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option(
        "--mlflow",
        help="Also log every finished run of every task to this MLflow tracking URI (e.g. file:./mlruns), "
        "once: runs already logged are skipped.",
    ),
]
ExportWandbOpt = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option(
        "--wandb",
        help="Also log every finished run of every task to this Weights & Biases project, once (offline into "
        "--wandb-dir when there is no API key).",
    ),
]
ExportEntityOpt = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option("--entity", help="With --wandb: the W&B team or user owning the project."),
]
ExportWandbDirOpt = Annotated[
    Optional[Path],  # noqa: UP045
    typer.Option("--wandb-dir", help="With --wandb: folder of W&B's run files [default: <workspace>/exports/wandb]."),
]


def export_cmd(
    out: ExportOutOpt = None,
    metric: MetricOpt = None,
    task: TaskOpt = None,
    force: ExportForceOpt = False,
    mlflow: ExportMlflowOpt = None,
    wandb: ExportWandbOpt = None,
    entity: ExportEntityOpt = None,
    wandb_dir: ExportWandbDirOpt = None,
    workspace: WorkspaceOpt = None,
) -> None:
    """Export a task's ranking tables (CSV, Markdown, LaTeX) and its run records (JSON) into a folder (each family
    in a folder of its own when the history holds several), and/or log every finished run to an MLflow tracking
    store and / or a Weights & Biases project."""
    if wandb is None and (entity is not None or wandb_dir is not None):
        raise GaptuiError("gaptui export: --entity and --wandb-dir go with --wandb PROJECT")
    if out is None and mlflow is None and wandb is None:
        raise GaptuiError(
            "gaptui export: give --out DIR (tables and records), --mlflow URI, --wandb PROJECT, or several"
        )
    if out is not None:
        from engine.files import check_out_folder

        check_out_folder(out)
    if wandb is not None:
        from gaptui.wandb_export import check_project

        check_project(wandb)
    ws, records = _load(workspace, tuned=None)  # the trackers get every run, trials included
    # Every option is checked before anything is written or logged: a bad --metric leaves the MLflow store alone.
    # The trackers log every family; the tables' one (--task, or the history's) matters to --out and --metric only.
    tasks = _each_task(records, task, metric)
    declared = analysis.check_metric(metric, records, tasks[0]) if len(tasks) == 1 else None
    if mlflow is not None:
        from gaptui.mlflow_export import export_mlflow

        summary = export_mlflow(records, mlflow)
        unreadable = f"; {len(summary.unreadable)} unreadable record(s) left out" if summary.unreadable else ""
        console.print(
            f"logged {len(summary.logged)} run(s) to {mlflow}; {len(summary.skipped)} already there{unreadable}",
            highlight=False,
        )
    if wandb is not None:
        _export_wandb(records, wandb, entity, wandb_dir or ws.exports / "wandb")
    if out is None:
        return
    from gaptui.tune.results import table_view

    records = table_view(records)
    key = declared.key if declared is not None else metric
    # One family (--task, or the history's one): its files in --out; several: each family's in --out/<task>/.
    for name in tasks or [None]:
        folder = out / name if len(tasks) > 1 and name else out
        written = analysis.export_all(records, folder, key, force=force, task=name)
        if not analysis.done_groups(records, name):
            err_console.print(
                f"[yellow]note:[/] no finished {name or ''} runs in {escape(str(ws.history))}; the tables are empty",
                highlight=False,
            )
        for path in written:
            console.print(f"wrote {path}", highlight=False, markup=False)


def _export_wandb(records: list[dict[str, Any]], project: str, entity: str | None, folder: Path) -> None:
    from gaptui.wandb_export import export_wandb

    summary = export_wandb(records, project, entity, folder)
    unreadable = f"; {len(summary.unreadable)} unreadable record(s) left out" if summary.unreadable else ""
    where = f"W&B project {summary.project}"
    if summary.offline:
        runs = summary.folder / "wandb"
        where += f" offline in {runs} (no API key; upload them with `wandb sync {runs}/offline-run-*`)"
    console.print(
        f"logged {len(summary.logged)} run(s) to {where}; {len(summary.skipped)} already there{unreadable}",
        highlight=False,
    )


def stats_cmd(
    dataset: DatasetOpt = None,
    metric: MetricOpt = None,
    fmt: Annotated[str, typer.Option("--format", "-f", help="text, json, md or latex.")] = "text",
    alpha: Annotated[float, typer.Option("--alpha", help="Significance level of the critical difference.")] = 0.05,
    task: TaskOpt = None,
    tuned: TunedOpt = False,
    by: ByOpt = None,
    workspace: WorkspaceOpt = None,
) -> None:
    """Test which rows of each task's tables differ: Welch and Mann-Whitney per cell (Holm-corrected), average ranks,
    Friedman's test, the Nemenyi critical difference, and Kendall's tau and W for rank consistency."""
    from gaptui.analysis import statistics

    analysis.check_format(fmt, ("text", "json", "md", "latex"))
    if not 0.0 < alpha < 1.0:
        raise GaptuiError(f"--alpha {alpha:g}: expected a level between 0 and 1, e.g. 0.05")
    ws, records = _load(workspace, tuned=tuned)
    tasks = _each_task(records, task, metric or dataset)
    results, empty, protocols = [], [], []
    for name in tasks or [None]:
        tables, why_empty = _tables(records, name, dataset, metric, by_keys(by))
        if any(not t.derived for t in tables):
            results.append(statistics.table_statistics(tables, alpha=alpha))
            protocols.append(analysis.protocol_lines([t for t in tables if not t.derived]))
        else:
            empty.append(why_empty or f"no {name} ranking tables")
    if not results:
        if fmt == "json":
            print_json(None)
        (console if fmt == "text" else err_console).print(
            f"{'; '.join(empty)} in {ws.history}; nothing to test", highlight=False
        )
        return
    if fmt == "json":  # one family (--task, or the history's one): its statistics; several: a list of them
        print_json(results[0].as_dict() if len(tasks) <= 1 else [r.as_dict() for r in results])
        return
    render = {"text": statistics.render_text, "md": statistics.render_markdown, "latex": statistics.render_latex}
    heading = {"text": "{} statistics", "md": "## {}", "latex": "% task {}"}[fmt]
    prefix = "% " if fmt == "latex" else ""
    parts = []
    for result, lines in zip(results, protocols, strict=True):
        stated = "".join(f"{prefix}{line.removeprefix('- ')}\n" for line in lines if line)  # the protocol
        parts.append((heading.format(result.task) + "\n\n" if len(results) > 1 else "") + stated + render[fmt](result))
    sys.stdout.write("\n".join(parts))


def figures_cmd(
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder for the figure files.")],
    fmt: Annotated[str, typer.Option("--format", "-f", help="png, svg or pdf.")] = "png",
    metric: MetricOpt = None,
    task: TaskOpt = None,
    force: Annotated[
        bool, typer.Option("--force", help="Replace files of the same name that an earlier figures did not write.")
    ] = False,
    tuned: TunedOpt = False,
    workspace: WorkspaceOpt = None,
) -> None:
    """Draw each task's publication figures (matplotlib): the kinds its family declares, sized for a paper.

    All or none into the --out folder, listed in its .gaptui-figures.json; a file there that this command did not
    write is never replaced without --force, and earlier figures of the task and format no longer drawn are removed.
    """
    from engine.files import check_out_folder
    from gaptui import figures

    if fmt not in figures.FORMATS:
        raise GaptuiError(f"--format {fmt!r}: expected one of {', '.join(figures.FORMATS)}")
    check_out_folder(out)
    ws, records = _load(workspace, tuned=tuned)
    tasks = _each_task(records, task, metric)
    finished = [name for name in tasks if analysis.done_groups(records, name)]
    if not finished:
        runs = f"{tasks[0]} runs" if len(tasks) == 1 else "runs"
        err_console.print(
            f"[yellow]note:[/] no finished {runs} in {escape(str(ws.history))}; no figures", highlight=False
        )
        return
    for name in finished:  # each family's figures are named after it: one folder holds them all
        for path in figures.figure_files(records, out, name, fmt, metric, force=force):
            console.print(f"wrote {path}", highlight=False, markup=False)


def report_cmd(
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder for report.md, report.html and figures/.")],
    force: Annotated[
        bool, typer.Option("--force", help="Replace files of the same name that an earlier report did not write.")
    ] = False,
    tuned: TunedOpt = False,
    workspace: WorkspaceOpt = None,
) -> None:
    """Write the whole study as one Markdown file and the same as self-contained HTML: per family its tables with
    significance marks, statistics, figures, reference comparison and reproducibility record."""
    from gaptui import report

    ws, records = _load(workspace, tuned=None)
    for path in report.write_report(records, out, ws, force=force, tuned=tuned):
        console.print(f"wrote {path}", highlight=False, markup=False)


def register(app: typer.Typer) -> None:
    """Add ``table``, ``gap``, ``stats`` and ``export`` to ``app``."""
    app.command("table")(table_cmd)
    app.command("gap")(gap_cmd)
    app.command("stats")(stats_cmd)
    app.command("figures")(figures_cmd)
    app.command("report")(report_cmd)
    app.command("export")(export_cmd)
