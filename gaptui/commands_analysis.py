"""``gaptui table``, ``gaptui gap`` and ``gaptui export``: ranking tables and accuracy gaps over finished runs.

:func:`register` adds the commands to the main Typer app.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.text import Text

from gaptui import analysis
from gaptui.cli_common import JsonOpt, WorkspaceOpt, console, err_console, print_json
from gaptui.workspace import Workspace

DatasetOpt = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option("--dataset", "-d", help=r"Only this dataset label, e.g. er or 'er\[n=50,degree=6]' (default: all)."),
]
ReferenceOpt = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option(
        "--reference",
        "-r",
        help="Compare with reference results: 'paper' (Table D.3), a NAME from <workspace>/references/NAME.csv, "
        "or a .csv path (format: README, 'Comparing with the paper').",
    ),
]
MetricOpt = Annotated[
    str,
    typer.Option("--metric", "-m", help="Metrics key to rank by (losses rank lower-is-better)."),
]


def _load(workspace: Path | None) -> tuple[Workspace, list[dict[str, Any]]]:
    # Imported here: history pulls in TinyDB, which `gaptui --help` does not need.
    from gaptui.history import read_records

    ws = Workspace.resolve(workspace)
    return ws, read_records(ws)


def _tables(records: list[dict[str, Any]], dataset: str | None, metric: str) -> tuple[list[analysis.RankingTable], str]:
    """Validated tables, plus the reason when there are none (for a friendly message)."""
    analysis.check_metric(metric, records)
    if not analysis.done_datasets(records):
        return [], "no finished runs yet"
    if dataset is not None:
        analysis.check_dataset(dataset, records)
    tables = analysis.build_tables(records, metric, dataset)
    where = f" on {dataset}" if dataset else ""
    return tables, "" if tables else f"no finished run{where} reports metric '{metric}'"


def table_cmd(
    dataset: DatasetOpt = None,
    metric: MetricOpt = analysis.DEFAULT_METRIC,
    fmt: Annotated[str, typer.Option("--format", "-f", help="text, md, csv, latex or json.")] = "text",
    reference: ReferenceOpt = None,
    workspace: WorkspaceOpt = None,
) -> None:
    """Rank models per noise level like Table D.3: median ± std over seeds, best and near-best marked.

    With --reference, each cell is shown beside the reference's with the difference, and per noise level the
    Kendall tau between the two model orders and whether the reference's best model is within 1 point of ours.
    """
    analysis.check_format(fmt)
    if reference is not None:
        _table_with_reference(dataset, metric, fmt, reference, workspace)
        return
    ws, records = _load(workspace)
    tables, why_empty = _tables(records, dataset, metric)
    if fmt == "json":
        print_json(analysis.tables_json(tables))
        return
    if not tables:
        if fmt == "csv":
            sys.stdout.write(analysis.render_csv([]))
        message = f"{why_empty} in {ws.history}; tables fill in as runs finish"
        (console if fmt == "text" else err_console).print(message, highlight=False)
        return
    if fmt == "text":
        for table in tables:
            console.print(analysis.render_rich(table, analysis.gap_analysis(table), width=console.width))
        return
    render = {"md": analysis.render_markdown, "csv": analysis.render_csv, "latex": analysis.render_latex}[fmt]
    sys.stdout.write(render(tables))


def _table_with_reference(dataset: str | None, metric: str, fmt: str, name: str, workspace: Path | None) -> None:
    from gaptui import reference as ref

    analysis.check_format(fmt, ("text", "md", "csv", "json"))
    ws, records = _load(workspace)
    chosen = ref.load_reference(name, ws)
    ref.check_metric(chosen, metric)
    tables, why_empty = _tables(records, dataset, metric)
    pairs = [(table, ref.compare(table, chosen)) for table in tables]
    comparisons = [c for _, c in pairs if c is not None]
    unmatched = [t.dataset for t, c in pairs if c is None]
    if unmatched:
        err_console.print(
            f"[yellow]note:[/] reference '{chosen.name}' has no dataset {', '.join(map(repr, unmatched))} "
            f"(it covers {', '.join(chosen.datasets)})",
            highlight=False,
        )
    if fmt == "json":
        print_json([ref.comparison_json(c) for c in comparisons])
        return
    if fmt == "csv":
        sys.stdout.write(ref.render_csv(comparisons))
        return
    if fmt == "md":
        sys.stdout.write(ref.render_markdown(comparisons))
        return
    if not tables:
        console.print(f"{why_empty} in {ws.history}; tables fill in as runs finish", highlight=False)
        return
    for table, comparison in pairs:
        if comparison is None:
            console.print(analysis.render_rich(table, analysis.gap_analysis(table), width=console.width))
        else:
            console.print(ref.render_rich(comparison))


def gap_cmd(
    dataset: DatasetOpt = None,
    metric: MetricOpt = analysis.DEFAULT_METRIC,
    workspace: WorkspaceOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show the accuracy gap to the worst trained model per noise level, and the optimal noise level."""
    ws, records = _load(workspace)
    tables, why_empty = _tables(records, dataset, metric)
    gaps = [analysis.gap_analysis(t) for t in tables]
    if as_json:
        print_json([g.as_dict() for g in gaps])
        return
    if not gaps:
        console.print(f"{why_empty} in {ws.history}; gaps fill in as runs finish", highlight=False)
        return
    color = console.is_terminal and console.color_system is not None
    width = max(40, min(console.width, 100))
    for gap in gaps:
        console.print(analysis.render_gap_rich(gap, width=console.width))
        if gap.noises:
            plot = analysis.render_gap_plot(gap, width=width, height=20, color=color)
            console.print(Text.from_ansi(plot), soft_wrap=True)
        optimal = "none (no trained model)" if gap.optimal_noise is None else analysis.format_noise(gap.optimal_noise)
        console.print(f"[bold]{gap.dataset}[/]: optimal noise level {optimal}", highlight=False)


def export_cmd(
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder for tables.csv/.md/.tex and runs.json.")],
    metric: MetricOpt = analysis.DEFAULT_METRIC,
    force: Annotated[
        bool, typer.Option("--force", help="Replace files of the same name that an earlier export did not write.")
    ] = False,
    workspace: WorkspaceOpt = None,
) -> None:
    """Export the ranking tables (CSV, Markdown, LaTeX) and all run records (JSON) into a folder."""
    ws, records = _load(workspace)
    analysis.check_metric(metric, records)
    written = analysis.export_all(records, out, metric, force=force)
    if not analysis.done_datasets(records):
        err_console.print(f"[yellow]note:[/] no finished runs in {ws.history}; the tables are empty", highlight=False)
    for path in written:
        console.print(f"wrote {path}", highlight=False)


def register(app: typer.Typer) -> None:
    """Add ``table``, ``gap`` and ``export`` to ``app``."""
    app.command("table")(table_cmd)
    app.command("gap")(gap_cmd)
    app.command("export")(export_cmd)
