"""``gaptui diff RUN RUN [RUN...]``: what differs between runs, their metrics and curves side by side
(:mod:`gaptui.run_diff`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.text import Text

from engine.errors import GaptuiError
from gaptui.cli.common import JsonOpt, WorkspaceOpt, console, print_json
from gaptui.workspace import Workspace


def register(app: typer.Typer) -> None:
    app.command("diff")(diff_cmd)


def diff_cmd(
    runs: Annotated[
        list[str], typer.Argument(metavar="RUN RUN [RUN]...", help="Two or more run ids (or unique prefixes).")
    ],
    workspace: WorkspaceOpt = None,
    figure: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option("--figure", help="Also draw the curves side by side with matplotlib into this .png/.svg/.pdf."),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Compare runs: the spec keys that differ (nested keys flattened, e.g. dataset.n_train), the metrics side by
    side, what they were recorded with where it differs, and their training curves overlaid."""
    from gaptui.history.store import History
    from gaptui.plots import curves_plot
    from gaptui.run_diff import check_runs, curves_task, diff_tables, draw_curves_figure, run_diff, run_events

    check_runs(runs)
    ws = Workspace.resolve(workspace)
    with History(ws) as history:
        records = [history.get(run) for run in runs]
    seen: dict[str, str] = {}
    for run, record in zip(runs, records, strict=True):
        if record["id"] in seen:
            raise GaptuiError(f"runs '{seen[record['id']]}' and '{run}' are the same run {record['id']}")
        seen[record["id"]] = run
    diff = run_diff(records)
    written = draw_curves_figure(records, figure) if figure is not None else None
    if as_json:
        print_json({**diff.as_json(), **({"figure": str(written)} if written else {})})
        return
    for table in diff_tables(diff):
        console.print(table)
    events = {record["id"]: run_events(record) for record in records}
    if any(e.get("event") == "epoch" for run in events.values() for e in run):
        plot = curves_plot(events, curves_task(records), width=min(console.width, 120), height=18)
        console.print(Text.from_ansi(plot))
    else:
        console.print("no training curves: the runs' folders hold no epoch events", highlight=False)
    if written is not None:
        console.print(f"figure: {written}", highlight=False, markup=False, soft_wrap=True)
