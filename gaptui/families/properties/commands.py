"""``gaptui properties``: the property suite's datasets (list, build, export in the published layout), and
``score``: a finished run's model applied to the user's own graphs."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from engine.errors import GaptuiError
from gaptui.cli.common import JsonOpt, WorkspaceOpt, console, err_console, print_json
from gaptui.workspace import Workspace

properties_app = typer.Typer(
    help="The property suite: relation datasets (GraphRandom, GraphPerturb), build and export.", no_args_is_help=True
)

PropertyOpt = Annotated[
    Optional[list[str]],  # noqa: UP045 (Typer needs Optional on Python 3.10)
    typer.Option("--property", "-p", help="Property name (repeatable) [default: all 16]."),
]
FamilyOpt = Annotated[
    Optional[list[str]],  # noqa: UP045
    typer.Option("--family", "-f", help="random (GraphRandom) or perturb (GraphPerturb), repeatable [default: both]."),
]
GraphsOpt = Annotated[int, typer.Option("--graphs", help="Graphs per dataset (half positive).")]
SizesOpt = Annotated[
    Optional[int],  # noqa: UP045
    typer.Option("--sizes", help="Keep the first K sizes of each property [default: all 11, base .. base+10]."),
]
SeedOpt = Annotated[int, typer.Option("--seed", help="Dataset seed.")]
NegativesOpt = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option("--negatives", help="GraphRandom negatives: solver or random [default: solver]."),
]


def _workers(value: int | None) -> int | None:
    if value is not None and value < 1:
        raise GaptuiError(f"--workers (-j) {value}: expected at least 1 process (leave it out for all cores)")
    return value


WorkersOpt = Annotated[
    Optional[int],  # noqa: UP045
    typer.Option("--workers", "-j", callback=_workers, help="Parallel build processes [default: all cores]."),
]


@properties_app.command("list")
def properties_list(as_json: JsonOpt = False) -> None:
    """The 16 properties: definition, base size, sizes, and how many labelled positives the base size has."""
    from engine.properties.definitions import BASE_SIZES, PROPERTIES, suite_sizes

    rows = [
        {
            "property": name,
            "definition": prop.definition,
            "base": BASE_SIZES[name],
            "sizes": suite_sizes(name),
            "positives_at_base": prop.count(BASE_SIZES[name]),
        }
        for name, prop in PROPERTIES.items()
    ]
    if as_json:
        print_json(rows)
        return
    table = Table(title="relation properties (adjacency A\\[i]\\[j] = 1 means i -> j; diagonal = self-loops)")
    for col in ("property", "definition", "base", "sizes", "positives at base"):
        table.add_column(col, justify="right" if col in ("base", "positives at base") else "left")
    for r in rows:
        table.add_row(
            r["property"], r["definition"], str(r["base"]), f"{r['sizes'][0]}..{r['sizes'][-1]}",
            f"{r['positives_at_base']:,}",
        )  # fmt: skip
    console.print(table)


def _specs(
    prop: list[str] | None, family: list[str] | None, graphs: int, seed: int, negatives: str | None, sizes: int | None
) -> list:
    from engine.properties.datasets import FAMILIES
    from engine.properties.definitions import PROPERTY_NAMES
    from engine.properties.suite import suite_specs

    if sizes is not None and sizes < 1:
        raise GaptuiError(f"--sizes {sizes}: expected at least 1 size per property")
    return suite_specs(prop or PROPERTY_NAMES, family or FAMILIES, graphs, seed, negatives, sizes)


def _build_with_progress(specs: list, datasets_dir: Path, workers: int | None, quiet: bool) -> list:
    from engine.properties.datasets import check_builds_fit
    from engine.properties.suite import build_suite

    # Refused before the progress bar starts, so that an error is the only line.
    check_builds_fit([spec.canonical() for spec in specs], workers or os.cpu_count() or 1)
    if quiet:
        return build_suite(specs, datasets_dir, workers)
    columns = (
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        TextColumn("{task.fields[last]}"),
    )  # fmt: skip
    # transient: an error that stops the build is the last and only line, not under a bar
    with Progress(*columns, console=err_console, transient=True) as progress:
        task = progress.add_task("datasets", total=len(specs), last="")

        def done(report) -> None:  # noqa: ANN001 - a BuildReport
            how = f"built in {report.seconds:.1f} s" if report.built else "cached"
            progress.update(task, advance=1, last=f"{report.dataset_id} ({how})")

        return build_suite(specs, datasets_dir, workers, done)


@properties_app.command("build")
def properties_build(
    prop: PropertyOpt = None,
    family: FamilyOpt = None,
    graphs: GraphsOpt = 10_000,
    sizes: SizesOpt = None,
    seed: SeedOpt = 0,
    negatives: NegativesOpt = None,
    workers: WorkersOpt = None,
    workspace: WorkspaceOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Build the suite's datasets into the workspace cache, in parallel; cached ones are skipped (resumable)."""
    ws = Workspace.resolve(workspace)
    specs = _specs(prop, family, graphs, seed, negatives, sizes)
    started = time.perf_counter()
    reports = _build_with_progress(specs, ws.datasets, workers, as_json)
    seconds = time.perf_counter() - started
    built = sum(r.built for r in reports)
    if as_json:
        rows = [
            {"id": r.dataset_id, "built": r.built, "seconds": round(r.seconds, 3), "stats": r.stats} for r in reports
        ]
        print_json({"datasets": rows, "built": built, "cached": len(reports) - built, "seconds": round(seconds, 3)})
        return
    from gaptui.cli.tables import print_table

    header = ("property", "family", "n", "graphs", "resampled", "density acc", "id", "build")
    cells = [
        [
            r.spec.property,
            r.spec.family,
            str(r.spec.n),
            str(r.stats["graphs"]),
            str(r.stats["resampled"]) if r.spec.family == "perturb" else "-",
            f"{r.stats['density_accuracy']:.3f}",
            r.dataset_id,
            f"{r.seconds:.1f} s" if r.built else "cached",
        ]  # fmt: skip
        for r in sorted(reports, key=lambda r: (r.spec.property, r.spec.family, r.spec.n))
    ]
    print_table(console, "property datasets", header, cells, ids=(6,), right=(2, 3, 4, 5, 7))
    console.print(f"{len(reports)} datasets ({built} built, {len(reports) - built} cached) in {seconds:.1f} s")


@properties_app.command("export")
def properties_export(
    out: Annotated[Path, typer.Option("--out", help="Folder to write the published layout into.")],
    prop: PropertyOpt = None,
    family: FamilyOpt = None,
    graphs: GraphsOpt = 10_000,
    sizes: SizesOpt = None,
    seed: SeedOpt = 0,
    negatives: NegativesOpt = None,
    workers: WorkersOpt = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite files that already exist in --out.")] = False,
    workspace: WorkspaceOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Write datasets as CSV in the published layout (<Family>-Train/<property>.csv, <Family>-Test/...).

    Datasets not yet cached are built first. Existing files are never overwritten without --force.
    """
    from engine.properties.suite import export_folder, export_names, export_suite, export_targets

    ws = Workspace.resolve(workspace)
    specs = _specs(prop, family, graphs, seed, negatives, sizes)
    targets = export_targets(out, specs)
    export_folder(out, force).refuse(export_names(out, targets))  # before any dataset is built
    _build_with_progress(specs, ws.datasets, workers, as_json)
    export_suite(targets, ws.datasets, out=out, force=force)
    files = sorted(str(p) for p in targets)
    if as_json:
        print_json({"out": str(out), "files": files})
        return
    console.print(f"wrote {len(files)} files under {out}", highlight=False, markup=False)


def _scoring_model(run: str, workspace: Path | None):  # noqa: ANN202 - (record, spec, model)
    """The record, spec and trained model of property run ``run`` (a robustness run: its trainer's model)."""
    from engine.properties.training import load_trained
    from engine.tasks import load_spec
    from gaptui.history.store import History

    with History(Workspace.resolve(workspace)) as history:
        record = history.get(run)
        if record.get("task") != "properties":
            raise GaptuiError(f"run {record['id']} is not a properties run (its family: {record.get('task')})")
        if record.get("status") != "done":
            raise GaptuiError(f"run {record['id']} is {record.get('status')}, not done: its model is not trained")
        spec = load_spec(record["spec"])
        trainer = spec.trainer()
        source = record
        if trainer is not None:
            source = history.by_hash().get(trainer.hash())
            if source is None or source.get("status") != "done":
                raise GaptuiError(f"run {record['id']} tests the model of run {trainer.hash()[:12]}, which is not done")
    checkpoint = Path(source["run_dir"]) / "checkpoint.pt"
    return record, spec, load_trained(checkpoint, spec.pooling, spec.options())


@properties_app.command("score")
def properties_score(
    run: Annotated[str, typer.Argument(metavar="RUN", help="A finished properties run (id or unique prefix).")],
    files: Annotated[
        list[Path], typer.Argument(metavar="FILE...", help="Edge lists ('u v' per line) or CSVs of head,relation,tail.")
    ],
    explain: Annotated[
        bool, typer.Option("--explain", help="Also list the edges whose removal moves the probability most.")
    ] = False,
    top: Annotated[int, typer.Option("--top", help="Edges listed per graph with --explain.")] = 5,
    workspace: WorkspaceOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Apply a finished property run's model to your own directed graphs: per graph the probability that the
    run's property holds (and the exact checker's verdict beside it); with --explain the edges whose removal
    changes that probability most, the candidates for review. A CSV of triples gives one graph per relation."""
    from engine.properties.definitions import get_property
    from engine.properties.scoring import explain as explain_edges
    from engine.properties.scoring import probabilities, read_graphs

    if top < 1:
        raise GaptuiError(f"--top {top}: expected at least 1 edge")
    graphs = [g for path in files for g in read_graphs(path)]  # every file read before the model is loaded
    record, spec, model = _scoring_model(run, workspace)
    prop = get_property(spec.property)
    tested = [int(k[5:]) for k in record.get("metrics", {}) if k.startswith("acc_n") and k[5:].isdigit()]
    largest = max(tested) if tested else None
    rows = []
    for g in graphs:
        n = len(g.nodes)
        row = {
            "file": g.file, "relation": g.relation, "nodes": n, "edges": len(g.edges), "property": prop.name,
            "probability": float(probabilities(model, g.adjacency[None])[0]), "exact": bool(prop(g.adjacency)),
        }  # fmt: skip
        if largest is not None and n > largest:
            row["warning"] = f"{n} nodes, above the run's largest test size {largest}: the model was never tested there"
            err_console.print(f"warning: {g.file}{f' ({g.relation})' if g.relation else ''}: {row['warning']}",
                              highlight=False, markup=False)  # fmt: skip
        if explain:
            row["explain"] = explain_edges(model, g, top)
        rows.append(row)
    if as_json:
        print_json(rows)
        return
    title = f"run {record['id']}: {prop.name} ({prop.definition}), {spec.pooling}"
    table = Table(title=escape(title))
    for col in ("file", "relation", "nodes", "edges", "P(holds)", "checker"):
        table.add_column(col, justify="right" if col in ("nodes", "edges", "P(holds)") else "left")
    for r in rows:
        table.add_row(  # file and relation names are the user's: shown as they are, never read as markup
            Text(r["file"]), Text(r["relation"] or "-"), str(r["nodes"]), str(r["edges"]), f"{r['probability']:.3f}",
            "holds" if r["exact"] else "fails",
        )  # fmt: skip
    console.print(table)
    for r in rows if explain else []:
        name = r["file"] + (f" ({r['relation']})" if r["relation"] else "")
        console.print(f"{name}: edges whose removal moves P(holds) most", highlight=False, markup=False)
        for e in r["explain"]:
            u, v = e["edge"]
            console.print(
                f"  {u} -> {v}: {e['without']:.3f} without it ({e['change']:+.3f})", highlight=False, markup=False
            )


def register(app: typer.Typer) -> None:
    """Add ``properties`` to ``app``."""
    app.add_typer(properties_app, name="properties")
