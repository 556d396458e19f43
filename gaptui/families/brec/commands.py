"""``gaptui brec ...``: BREC's pairs, the exact WL tests on them and BREC's table of a workspace."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from engine.errors import GaptuiError
from gaptui.cli.common import JsonOpt, WorkspaceOpt, console, err_console, print_json
from gaptui.workspace import Workspace

brec_app = typer.Typer(help="BREC (Wang and Zhang 2023): its pairs, exact WL tests and its table.")

DataOpt = Annotated[
    Optional[Path],  # noqa: UP045
    typer.Option("--data", help="A folder of BREC's seven .npy files [default: the pairs shipped with gaptui]."),
]
CategoryOpt = Annotated[
    Optional[list[str]],  # noqa: UP045
    typer.Option("--category", "-c", help="A category (repeatable) [default: all seven]."),
]


def _categories(names: list[str] | None) -> list[str]:
    from engine.brec.data import CATEGORY_KEYS, category

    return [category(name, "--category").key for name in names] if names else list(CATEGORY_KEYS)


@brec_app.command("list")
def brec_list(data: DataOpt = None, as_json: JsonOpt = False) -> None:
    """The categories: pairs, graph orders, BREC's pair ids and the file each comes from."""
    from engine.brec.data import CATEGORIES, data_folder, load_category

    folder = data_folder(None if data is None else str(data))
    rows = []
    for cat in CATEGORIES:
        pairs = load_category(cat.key, None if data is None else str(data))
        nodes = [p.nodes for p in pairs]
        ids = f"{pairs[0].id}-{pairs[-1].id}" if pairs else "-"
        rows.append({"category": cat.key, "title": cat.title, "pairs": len(pairs), "ids": ids,
                     "nodes": [min(nodes, default=0), max(nodes, default=0)], "file": cat.file})  # fmt: skip
    if as_json:
        print_json({"folder": str(folder), "categories": rows})
        return
    table = Table(title=f"BREC pairs ({escape(str(folder))})")
    for col in ("category", "title", "pairs", "ids", "nodes", "file"):
        table.add_column(col, justify="right" if col in ("pairs", "nodes") else "left")
    for r in rows:
        low, high = r["nodes"]
        table.add_row(r["category"], r["title"], str(r["pairs"]), r["ids"], f"{low}-{high}", r["file"])
    console.print(table)
    console.print(
        "Source: github.com/GraphPKU/BREC, customize/Data/raw (MIT licence, engine/brec/data/LICENSE).",
        highlight=False,
        markup=False,
    )


@brec_app.command("wl")
def brec_wl(
    test: Annotated[str, typer.Option("--test", help="1-wl, 3-wl or both.")] = "both",
    category: CategoryOpt = None,
    data: DataOpt = None,
    workspace: WorkspaceOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """The exact WL tests on every pair of the categories: distinguished pairs per category and in total.

    Verdicts are cached in the workspace's datasets folder (the runs of the 1-wl and 3-wl rows read the same
    cache). 3-WL (as 2-FWL) on a category is refused in one line when its largest pair would not fit in memory."""
    from engine.brec.data import data_digest, load_pairs
    from engine.brec.spec import BrecSpec
    from engine.brec.wl import WL_ROWS, verdicts
    from engine.tasks import family

    tests = list(WL_ROWS) if test == "both" else [test.lower()]
    if any(t not in WL_ROWS for t in tests):
        raise GaptuiError(f"--test '{test}': expected 1-wl, 3-wl or both")
    ws = Workspace.resolve(workspace)
    folder = None if data is None else str(data)
    cats = _categories(category)
    costs = family("brec").costs
    counts: dict[str, dict[str, list[int]]] = {t: {} for t in tests}
    for t in tests:
        for cat in cats:
            costs.memory(BrecSpec(model=t, category=cat, data=folder)).check()
            pairs = load_pairs(cat, folder)
            found = verdicts(t, pairs, data_digest(folder), ws.datasets)
            counts[t][cat] = [sum(v.distinguished for v in found), len(found)]
    if as_json:
        print_json({t: {**by, "total": [sum(v[0] for v in by.values()), sum(v[1] for v in by.values())]}
                    for t, by in counts.items()})  # fmt: skip
        return
    table = Table(title="Exact WL tests on BREC: distinguished pairs / pairs")
    table.add_column("test")
    for cat in [*cats, "total"]:
        table.add_column(cat, justify="right")
    for t, by in counts.items():
        total = f"{sum(v[0] for v in by.values())}/{sum(v[1] for v in by.values())}"
        table.add_row(t, *(f"{by[c][0]}/{by[c][1]}" for c in cats), total)
    console.print(table)


@brec_app.command("table")
def brec_table_cmd(
    fmt: Annotated[str, typer.Option("--format", help="text, md or json.")] = "text",
    workspace: WorkspaceOpt = None,
) -> None:
    """BREC's table of the workspace's brec runs: distinguished pairs / pairs per model and category, the total,
    the marks over seeds and the reliability failures; then how the models' alignment ranking agrees with it."""
    from gaptui.families.brec.report import agreement_lines, brec_tables, render_markdown, render_rich, table_json
    from gaptui.history.store import read_records
    from gaptui.record import usable_records
    from gaptui.tune.results import table_view

    if fmt not in ("text", "md", "json"):
        raise GaptuiError(f"--format '{fmt}': expected text, md or json")
    ws = Workspace.resolve(workspace)
    records = table_view(usable_records(read_records(ws), lambda line: err_console.print(f"warning: {line}")))
    tables = brec_tables(records)
    if not tables:
        raise GaptuiError(f"{ws.root}: no finished brec runs yet (gaptui run --preset brec-smoke)")
    if fmt == "json":
        print_json([table_json(t) for t in tables])
        return
    for table in tables:
        if fmt == "md":
            print("\n".join([f"## {table.subset}", "", render_markdown(table), "", *agreement_lines(records, table)]))
        else:
            console.print(render_rich(table, console.width))
            console.print("\n".join(agreement_lines(records, table)), highlight=False, markup=False)


def register(app: typer.Typer) -> None:
    """Add ``brec`` to ``app``."""
    app.add_typer(brec_app, name="brec")
