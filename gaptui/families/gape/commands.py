"""``gaptui gape ...``: graph alignment positional encodings (GAPE) for downstream tasks."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from engine.errors import GaptuiError
from gaptui.cli.common import JsonOpt, WorkspaceOpt, console, err_console, print_json
from gaptui.workspace import Workspace

gape_app = typer.Typer(help="Graph alignment positional encodings: embed graphs with a trained alignment model.")


@gape_app.command("embed")
def gape_embed(
    run: Annotated[str, typer.Argument(help="A finished alignment run: its id (or a unique prefix) or its folder.")],
    dataset: Annotated[str, typer.Option("--dataset", help="Source to embed (any base dataset, e.g. molecules).")],
    out: Annotated[Path, typer.Option("--out", help="Output file (.npz).")],
    param: Annotated[
        Optional[list[str]],  # noqa: UP045
        typer.Option("--param", "-p", help="Source parameter key=value (repeatable)."),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of seeded splits and samples of the source.")] = 0,
    device: Annotated[str, typer.Option("--device", help="cpu or cuda[:N].")] = "cpu",
    force: Annotated[bool, typer.Option("--force", help="Replace --out when it exists.")] = False,
    workspace: WorkspaceOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Apply the frozen model of a finished alignment run to every graph of a source and write the embeddings.

    The .npz holds num_nodes [G] (source order), pe float32 [sum(num_nodes), d] (graphs stacked in that order),
    skipped (source rows left out) and run (the run's spec hash).
    """
    ws = Workspace.resolve(workspace)
    out = Path(out)
    # Checked before torch is imported: a refused --out costs nothing.
    if out.suffix != ".npz":
        raise GaptuiError(f"--out {out}: expected a file name ending in .npz")
    if out.exists() and not force:
        raise GaptuiError(f"--out {out} exists; choose another name or pass --force to replace it")
    if seed < 0:
        raise GaptuiError(f"--seed {seed}: expected a seed >= 0")
    from engine.hardware import RunOptions

    RunOptions(device=device).check("--device")
    from engine.gape.embed import check_embedding_fits, embed_source, load_frozen, resolve_run, write_embeddings
    from engine.hardware import resolve_device
    from engine.sources import parse_param_args

    params = parse_param_args(param)
    check_embedding_fits(dataset, params, seed)  # again with the model's width once it is loaded
    frozen = load_frozen(resolve_run(run, ws.runs), resolve_device(device))
    started = time.perf_counter()
    result = embed_source(frozen, dataset, params, seed=seed, datasets_dir=ws.datasets, raw_root=ws.raw_data)
    seconds = time.perf_counter() - started
    for note in result.notes:
        err_console.print(f"[yellow]note:[/] {escape(note)}", highlight=False)
    write_embeddings(out, result.num_nodes, result.pe, result.skipped, result.run, force=force)
    summary = {
        "out": str(out.resolve()),
        "run": result.run,
        "graphs": int(result.num_nodes.size),
        "nodes": int(result.num_nodes.sum()),
        "dim": int(result.pe.shape[1]),
        "skipped": int(result.skipped.size),
        "seconds": round(seconds, 3),
    }
    if as_json:
        print_json(summary)
        return
    console.print(
        f"embedded {summary['graphs']:,} graphs ({summary['nodes']:,} nodes, d={summary['dim']}) with run "
        f"{result.run[:12]} in {seconds:.2f} s; {summary['skipped']} rows skipped -> {escape(summary['out'])}",
        highlight=False,
    )


def register(app: typer.Typer) -> None:
    app.add_typer(gape_app, name="gape")
