"""Alignment's own commands: ``gaptui datasets build | list | stats | export | sources``, ``gaptui models`` and
``gaptui probe`` (:mod:`gaptui.families.alignment.probe_command`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.markup import escape
from rich.table import Table

from gaptui.cli.common import JsonOpt, WorkspaceOpt, console, err_console, print_json
from gaptui.workspace import Workspace

datasets_app = typer.Typer(help="Build, list, inspect and export alignment datasets.", no_args_is_help=True)


def _note(text: str) -> None:
    if text:
        err_console.print(f"[yellow]note:[/] {escape(text)}", highlight=False)


STAT_LABELS = (
    ("pairs", "pairs", "{:d}"),
    ("mean_order", "mean order", "{:.2f}"),
    ("mean_degree", "mean degree G", "{:.3f}"),
    ("mean_degree_h", "mean degree H", "{:.3f}"),
    ("removed_fraction", "removed / |E|", "{:.4f}"),
    ("added_fraction", "added / |E|", "{:.4f}"),
    ("disconnected_h_share", "disconnected H", "{:.2%}"),
    ("capped_graphs", "p_add capped at 1", "{:d}"),
    ("left_out", "left out (no edges)", "{:d}"),
)


#: The symmetry statistics of a split (engine.alignment.symmetry), as the statistics table shows them.
SYMMETRY_LABELS = (
    ("orbit_ceiling", "ceiling: orbits", "{:.2%}"),
    ("wl_ceiling", "ceiling: 1-WL", "{:.2%}"),
    ("symmetric_graphs", "graphs with symmetry", "{:d}"),
)


def _symmetry(dataset: Any) -> dict[str, Any]:
    """The dataset's symmetry statistics per split, computed (and cached) now for a dataset built before them."""
    from engine.alignment.symmetry import dataset_symmetry

    return dataset_symmetry(dataset)["stats"]  # type: ignore[no-any-return]


def _stats_table(dataset: Any) -> Table:
    spec = dataset.spec
    params = ", ".join(f"{k}={v}" for k, v in spec["params"].items())
    table = Table(
        title=escape(
            f"{dataset.id}  {spec['base']}({params}) {spec['noise_model']} eta={spec['noise']:g} seed={spec['seed']}"
        )
    )
    table.add_column("statistic")
    for split in dataset.stats:
        table.add_column(split, justify="right")
    for key, label, fmt in STAT_LABELS:
        table.add_row(label, *(fmt.format(dataset.stats[s].get(key, 0)) for s in dataset.stats))
    symmetry = _symmetry(dataset)
    for key, label, fmt in SYMMETRY_LABELS:
        # "–": not computed (a dataset built before ceilings, or 1-WL that did not settle within its budget)
        cells = (fmt.format(symmetry[s][key]) if key in symmetry.get(s, {}) else "–" for s in dataset.stats)
        table.add_row(label, *cells)
    return table


def _print_stats(dataset: Any) -> None:
    """The statistics table, then for prepared pairs the SHA-256 of each file they were read from."""
    console.print(_stats_table(dataset))
    files = {k: v for s in dataset.stats.values() for k, v in (s.get("source_files") or {}).items()}
    for name, digest in sorted(files.items()):
        console.print(f"  read from {name}  sha256 {digest}", highlight=False, markup=False)


@datasets_app.command("build")
def datasets_build(
    base: Annotated[str, typer.Argument(help="Base dataset name (see `gaptui datasets sources`).")],
    noise: Annotated[float, typer.Option("--noise", help="Noise level eta in [0, 1).")],
    noise_model: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option("--noise-model", help="add_remove or add [default: the base dataset's own]."),
    ] = None,
    train: Annotated[Optional[int], typer.Option("--train", help="Training pairs.")] = None,  # noqa: UP045
    val: Annotated[Optional[int], typer.Option("--val", help="Validation pairs.")] = None,  # noqa: UP045
    seed: Annotated[int, typer.Option("--seed", help="Seed of base graphs, noise and permutations.")] = 0,
    param: Annotated[
        Optional[list[str]],  # noqa: UP045
        typer.Option("--param", "-p", help="Base dataset parameter key=value (repeatable)."),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Rebuild even when cached.")] = False,
    workspace: WorkspaceOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Build an alignment dataset (or find it in the cache) and print its id and statistics."""
    from engine.alignment.datasets import DatasetSpec, build_dataset
    from engine.sources import parse_param_args
    from gaptui.cli.progress import step_progress

    ws = Workspace.resolve(workspace)
    spec = DatasetSpec(base, noise, noise_model, train, val, seed, parse_param_args(param))
    spec.canonical()  # validate before any work or spinner
    with step_progress(f"building {base} at noise {noise:g}", quiet=as_json):
        dataset, built = build_dataset(spec, ws.datasets, ws.raw_data, force=force)
    _note(dataset.meta.get("normalisation_note", ""))
    if as_json:
        record = _dataset_record(dataset, _symmetry(dataset))
        print_json({"id": dataset.id, "path": str(dataset.path), "built": built, **record})
        return
    _print_stats(dataset)
    how = f"built in {dataset.meta['build_seconds']:.2f} s" if built else "already cached"
    console.print(f"dataset [bold]{dataset.id}[/] ({how}) at {escape(str(dataset.path))}", highlight=False)


def _dataset_record(dataset: Any, symmetry: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "spec": dataset.spec,
        "stats": dataset.stats,
        "symmetry": symmetry,
        "normalisation": dataset.meta.get("normalisation", {}),
        "build_seconds": dataset.meta.get("build_seconds"),
        "created": dataset.meta.get("created"),
    }


@datasets_app.command("list")
def datasets_list(workspace: WorkspaceOpt = None, as_json: JsonOpt = False) -> None:
    """List the datasets cached in the workspace."""
    from engine.alignment.datasets import list_datasets

    ws = Workspace.resolve(workspace)
    from engine.alignment.symmetry import cached_stats

    found = list_datasets(ws.datasets)
    if as_json:
        print_json([{"id": d.id, **_dataset_record(d, cached_stats(d))} for d in found])
        return
    if not found:
        console.print(
            f"no datasets in {ws.datasets}; build one with `gaptui datasets build er --noise 0.12`",
            highlight=False,
            markup=False,
        )
        return
    from gaptui.cli.tables import print_table

    header = ("id", "base", "params", "model", "eta", "seed", "train", "val", "orbits", "1-WL", "created")
    cells = []
    for d in found:
        val = (cached_stats(d) or {}).get("val") or {}
        cells.append(
            [
                d.id,
                d.spec["base"],
                " ".join(f"{k}={v}" for k, v in d.spec["params"].items()),
                d.spec["noise_model"],
                f"{d.spec['noise']:g}",
                str(d.spec["seed"]),
                str(d.stats["train"]["pairs"]),
                str(d.stats["val"]["pairs"]),
                f"{val['orbit_ceiling']:.1%}" if "orbit_ceiling" in val else "–",
                f"{val['wl_ceiling']:.1%}" if "wl_ceiling" in val else "–",
                str(d.meta.get("created", "")),
            ]
        )
    print_table(console, f"datasets in {ws.datasets}", header, cells, right=(4, 5, 6, 7, 8, 9))


@datasets_app.command("stats")
def datasets_stats(
    ident: Annotated[str, typer.Argument(metavar="ID", help="Dataset id (or a unique prefix).")],
    workspace: WorkspaceOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show the statistics of a cached dataset."""
    from engine.alignment.datasets import find_dataset

    dataset = find_dataset(Workspace.resolve(workspace).datasets, ident)
    if as_json:
        print_json({"id": dataset.id, "path": str(dataset.path), **_dataset_record(dataset, _symmetry(dataset))})
        return
    _print_stats(dataset)


@datasets_app.command("export")
def datasets_export(
    ident: Annotated[str, typer.Argument(metavar="ID", help="Dataset id (or a unique prefix).")],
    out: Annotated[Path, typer.Option("--out", help="Output .npz file, or folder for --format safetensors.")],
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            help="npz (one file, gaptui's arrays) or safetensors (the authors' six-file layout, truth = identity).",
        ),
    ] = "npz",
    force: Annotated[bool, typer.Option("--force", help="Replace an existing export.")] = False,
    workspace: WorkspaceOpt = None,
) -> None:
    """Export a dataset as one .npz, or as a folder in the safetensors layout of ngmb / ngab (docs/alignment.md)."""
    from engine.alignment.datasets import EXPORT_FORMATS, export_dataset, find_dataset, intact

    if fmt not in EXPORT_FORMATS:
        from engine.errors import unknown

        raise unknown("export format (--format)", fmt, EXPORT_FORMATS)
    ws = Workspace.resolve(workspace)
    dataset = intact(find_dataset(ws.datasets, ident), ws.raw_data)
    path = export_dataset(dataset, out, fmt, force=force)
    console.print(f"wrote {path}", highlight=False, markup=False)


@datasets_app.command("sources")
def datasets_sources(as_json: JsonOpt = False, workspace: WorkspaceOpt = None) -> None:
    """List the base datasets with their parameters and defaults."""
    import dataclasses

    from engine.sources import SOURCES

    rows = []
    for name in SOURCES.names():
        cls = SOURCES.get(name)
        params = {f.name: f.default for f in dataclasses.fields(cls.Params)}
        rows.append(
            {
                "name": name,
                "description": cls.description,
                "params": params,
                "noise_model": cls.noise_model,
                "sizes": list(cls.sizes),
            }
        )
    if as_json:
        print_json(rows)
        return
    table = Table(title="base datasets")
    for col in ("name", "parameters", "noise model", "train/val", "description"):
        table.add_column(col)
    for r in rows:
        sizes = "/".join("all" if s is None else str(s) for s in r["sizes"])
        params = " ".join(f"{k}={v}" for k, v in r["params"].items())
        table.add_row(r["name"], params, r["noise_model"], sizes, r["description"])
    console.print(table)


def models_cmd(
    budget: Annotated[int, typer.Option("--budget", help="Parameter budget.")] = 60_000,
    out_dim: Annotated[int, typer.Option("--out-dim", help="Embedding dimension.")] = 64,
    recipe: Annotated[
        str, typer.Option("--recipe", help="Training recipe the models are built for (gaptui, ngab, paper, legacy).")
    ] = "gaptui",
    as_json: JsonOpt = False,
    workspace: WorkspaceOpt = None,
) -> None:
    """List the registered models with their width and parameter count at a budget, as a recipe builds them, then
    the training-free rows (the Laplacian baseline and the solvers)."""
    from engine import models
    from engine.alignment.features import feature_dim
    from engine.alignment.recipes import SCAFFOLD_FIELDS, check_recipe, resolve

    check_recipe(recipe, "--recipe")
    rows = []
    for name in models.names():
        values = resolve(recipe, name, {})
        scaffold = {k: values[k] for k in SCAFFOLD_FIELDS}
        model = models.build(name, out_dim=out_dim, budget=budget, in_dim=feature_dim(values["features"]), **scaffold)
        rows.append(
            {
                "name": name,
                "params": models.count_parameters(model),
                "width": int(getattr(model, "width", 0)),
                "description": models.describe(name),
            }
        )
    rows.append({"name": "laplacian", "params": 0, "width": out_dim, "description": LAPLACIAN_NOTE})
    from engine.alignment.solvers import SOLVERS

    for solver in SOLVERS.values():
        extra = " (needs pip install 'gaptui[solvers]')" if solver.package else ""
        rows.append({"name": solver.name, "params": 0, "width": 0, "description": solver.description + extra})
    if as_json:
        print_json(rows)
        return
    table = Table(title=f"models (budget {budget:,}, embedding {out_dim}, recipe {recipe})")
    for col in ("name", "params", "width", "description"):
        table.add_column(col, justify="right" if col in ("params", "width") else "left")
    for r in rows:
        table.add_row(r["name"], f"{r['params']:,}", str(r["width"]), r["description"])
    console.print(table)


LAPLACIAN_NOTE = "training-free baseline: Laplacian eigenvector embeddings, then the same LAP"


def evaluate_cmd(
    run: Annotated[str, typer.Argument(metavar="RUN", help="A finished alignment run: id, unique id prefix or hash.")],
    decoder: Annotated[str, typer.Option("--decoder", help="What refines the run's LAP matching: faq.")] = "faq",
    workspace: WorkspaceOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Search on top of a trained model: its LAP matching of each validation pair, refined by FAQ started from it.

    Recorded as a run of its own (row MODEL+faq of the tables, next to MODEL and the solver rows), which depends
    on RUN; the same command again shows it without running it twice.
    """
    from engine.alignment.spec import RunSpec
    from engine.errors import GaptuiError
    from gaptui.cli.train import train_one
    from gaptui.history.store import History
    from gaptui.record import record_task

    ws = Workspace.resolve(workspace)
    with History(ws) as history:
        record = history.get(run)
    if record_task(record) != "alignment":
        raise GaptuiError(f"run {record['id']} is a {record_task(record)} run; --decoder refines alignment runs")
    if record.get("status") != "done":
        raise GaptuiError(f"run {record['id']} is {record.get('status')}, not done: train it to the end first")
    spec = RunSpec.from_dict(record["spec"], f"run {record['id']}")
    if spec.decoder:
        raise GaptuiError(f"run {record['id']} is already a search ({spec.decoder}) on top of a model")
    decoded = RunSpec.from_dict({**spec.to_dict(), "decoder": decoder}, f"--decoder {decoder}")
    decoded.validate(f"--decoder {decoder} on run {record['id']}")
    train_one(ws, decoded, as_json=as_json)


def register(app: typer.Typer) -> None:
    from gaptui.families.alignment.probe_command import probe_cmd

    app.add_typer(datasets_app, name="datasets")
    app.command("models")(models_cmd)
    app.command("probe")(probe_cmd)
    app.command("evaluate")(evaluate_cmd)
