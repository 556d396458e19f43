"""Alignment's own commands: ``gaptui datasets build | list | stats | export | sources`` and ``gaptui models``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.markup import escape
from rich.table import Table

from gaptui.cli_common import JsonOpt, WorkspaceOpt, console, err_console, print_json
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

    ws = Workspace.resolve(workspace)
    spec = DatasetSpec(base, noise, noise_model, train, val, seed, parse_param_args(param))
    spec.canonical()  # validate before any work or spinner
    if as_json:
        dataset, built = build_dataset(spec, ws.datasets, ws.raw_data, force=force)
    else:
        with err_console.status(f"building {base} at noise {noise:g} ..."):
            dataset, built = build_dataset(spec, ws.datasets, ws.raw_data, force=force)
    _note(dataset.meta.get("normalisation_note", ""))
    if as_json:
        print_json({"id": dataset.id, "path": str(dataset.path), "built": built, **_dataset_record(dataset)})
        return
    _print_stats(dataset)
    how = f"built in {dataset.meta['build_seconds']:.2f} s" if built else "already cached"
    console.print(f"dataset [bold]{dataset.id}[/] ({how}) at {escape(str(dataset.path))}", highlight=False)


def _dataset_record(dataset: Any) -> dict[str, Any]:
    return {
        "spec": dataset.spec,
        "stats": dataset.stats,
        "normalisation": dataset.meta.get("normalisation", {}),
        "build_seconds": dataset.meta.get("build_seconds"),
        "created": dataset.meta.get("created"),
    }


@datasets_app.command("list")
def datasets_list(workspace: WorkspaceOpt = None, as_json: JsonOpt = False) -> None:
    """List the datasets cached in the workspace."""
    from engine.alignment.datasets import list_datasets

    ws = Workspace.resolve(workspace)
    found = list_datasets(ws.datasets)
    if as_json:
        print_json([{"id": d.id, **_dataset_record(d)} for d in found])
        return
    if not found:
        console.print(
            f"no datasets in {ws.datasets}; build one with `gaptui datasets build er --noise 0.12`",
            highlight=False,
            markup=False,
        )
        return
    table = Table(title=escape(f"datasets in {ws.datasets}"))
    for col in ("id", "base", "params", "model", "eta", "seed", "train", "val", "created"):
        table.add_column(col, justify="right" if col in ("eta", "seed", "train", "val") else "left")
    for d in found:
        s = d.spec
        table.add_row(
            d.id,
            s["base"],
            escape(" ".join(f"{k}={v}" for k, v in s["params"].items())),
            s["noise_model"],
            f"{s['noise']:g}",
            str(s["seed"]),
            str(d.stats["train"]["pairs"]),
            str(d.stats["val"]["pairs"]),
            d.meta.get("created", ""),
        )
    console.print(table)


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
        print_json({"id": dataset.id, "path": str(dataset.path), **_dataset_record(dataset)})
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
    """List the registered models with their width and parameter count at a budget, as a recipe builds them."""
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


def register(app: typer.Typer) -> None:
    app.add_typer(datasets_app, name="datasets")
    app.command("models")(models_cmd)
