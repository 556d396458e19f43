"""``gaptui probe RUN [RUN ...]``: edge reconstruction and per-layer probes of finished alignment runs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from gaptui.cli.common import JsonOpt, WorkspaceOpt, console, err_console, print_json
from gaptui.workspace import Workspace


def probe_cmd(
    runs: Annotated[
        list[str],
        typer.Argument(metavar="RUN...", help="Finished alignment runs: ids (or unique prefixes) or folders."),
    ],
    pairs: Annotated[
        int, typer.Option("--pairs", help="Validation pairs read (per-layer measures, test graphs).")
    ] = 100,
    graphs: Annotated[int, typer.Option("--graphs", help="Training pairs whose G trains the edge probe.")] = 100,
    node_pairs: Annotated[
        int, typer.Option("--node-pairs", help="Node pairs drawn per graph for the edge probe (all when fewer).")
    ] = 1000,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the pairs, graphs and node pairs drawn.")] = 0,
    device: Annotated[str, typer.Option("--device", help="cpu or cuda[:N].")] = "cpu",
    figures: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option("--figures", help="Folder for the figures: one per run, and one comparing the runs."),
    ] = None,
    fmt: Annotated[str, typer.Option("--format", help="Figure format: png, svg or pdf.")] = "png",
    force: Annotated[
        bool, typer.Option("--force", help="Compute again even when the run holds probes with these options.")
    ] = False,
    workspace: WorkspaceOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Probe what finished alignment runs learned: edge reconstruction, per-layer energy and stability.

    The report is kept in each run's folder (shown by `gaptui show`) and reused while the options are the same.
    What each probe measures and where it comes from: docs/probes.md.
    """
    from engine.alignment.probes import ProbeOptions, cached_report, open_probe_inputs, probe_run
    from engine.gape.embed import resolve_run
    from engine.hardware import RunOptions, resolve_device
    from gaptui.probe_view import probe_tables, probes_heading

    options = ProbeOptions(pairs=pairs, graphs=graphs, node_pairs=node_pairs, seed=seed)
    options.check()
    RunOptions(device=device).check("--device")
    if figures is not None:
        from gaptui.figures import check_format, pyplot

        check_format(fmt)
        pyplot()  # a missing matplotlib is refused before any work
    ws = Workspace.resolve(workspace)
    folders = list(dict.fromkeys(resolve_run(ref, ws.runs) for ref in runs))
    inputs = [open_probe_inputs(folder, ws.datasets, ws.raw_data, resolve_device(device)) for folder in folders]
    reports = []
    for item in inputs:
        report = None if force else cached_report(item.run_dir, options, item.spec.hash())
        if report is None:
            label = f"probing {item.run_dir.name} ..."
            if as_json:
                report = probe_run(item, options)
            else:
                with err_console.status(escape(label)):
                    report = probe_run(item, options)
        reports.append(report)
    written: list[Path] = []
    if figures is not None:
        from gaptui.families.alignment.probe_figures import probe_figures

        written = probe_figures(reports, figures, fmt, force=force)
    if as_json:
        print_json({"reports": reports, "figures": [str(p) for p in written]})
        return
    for report in reports:
        console.print(escape(probes_heading(report)), highlight=False)
        for table in probe_tables(report):
            console.print(table)
    for path in written:
        console.print(f"wrote {escape(str(path))}", highlight=False)
