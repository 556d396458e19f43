"""The ``gape`` task family: a downstream molecule transformer with positional encodings (the graph alignment
paper, Table 1).

Spec: :class:`engine.gape.spec.GapeSpec` (a molecule dataset, a PE, the transformer's hyper-parameters, a seed).
A ``gape:<run>`` PE depends on that alignment run: the scheduler starts the downstream run once it is done.
Axes: downstream dataset x PE; one table, PEs as rows, datasets as columns, lowest MAE best.
Presets express the whole chain: per dataset one pretraining alignment run (Table F.7), then every PE x seed.
"""

from __future__ import annotations

import json
from collections.abc import Generator
from functools import partial
from pathlib import Path
from typing import Any

from engine.gape.preset import PE_ORDER, GapePreset, dataset_label, grid, parse_preset
from engine.gape.spec import GapeSpec
from engine.placement import datasets_folder
from engine.tasks.cost import CostModel
from engine.tasks.declarations import Axis, Figure, Metric, References, Setting, TableLayout, Tunable
from engine.tasks.family import TaskFamily
from engine.tasks.form import FormModule
from engine.tasks.registry import FAMILIES
from engine.tasks.run import Input, Outcome, RunContext
from engine.tasks.spec import Placement


class GapeCosts(CostModel):
    """A GAPE grid's pretraining runs are alignment runs (alignment's cost model); a downstream run costs its epochs
    (or its optimiser steps, when the spec counts steps) at the seconds per unit of finished runs of its cell (same
    dataset, PE kind and model options)."""

    def cell(self, spec: GapeSpec) -> str:
        canonical = spec.canonical()
        skip = ("seed", "epochs", "steps", "warmup_steps", "lr", "weight_decay", "eval_every")
        cell = {k: v for k, v in canonical.items() if k not in skip}
        cell["pe"] = spec.pe_spec().kind  # which pretraining run gave the GAPE does not change the seconds
        cell["unit"] = "steps" if spec.steps else "epochs"
        return json.dumps(cell, sort_keys=True, default=str)

    def units(self, spec: GapeSpec) -> float | None:
        return float(spec.steps or spec.epochs)

    def steps(self, spec: GapeSpec) -> int | None:
        return spec.steps or spec.epochs  # at least one batch an epoch

    def memory(self, spec: GapeSpec) -> Any:
        """The molecules (as graphs and flat arrays) and one batch through the transformer: attention scores of
        every layer (``[B, heads, L, L]``, kept for the backward pass) and the layers' activations. The molecule
        count and size come from the source's parameters, or from the built dataset (real and user files)."""
        from engine.gape.data import molecule_id, molecule_source, molecules_bytes
        from engine.memory import MemoryNeed, human
        from engine.sources import parse_params

        ds = spec.molecule_spec()
        canonical = ds.canonical()
        cls = molecule_source(ds.base)
        params = parse_params(cls, ds.params)
        hint, count = cls.size_hint(params), cls.count_hint(params)
        atoms, degree, longest = (hint[0], hint[1], hint[0]) if hint is not None else (0.0, 2.2, 0.0)
        folder = datasets_folder(spec.datasets_dir)
        meta_path = folder / "molecules" / molecule_id(canonical) / "meta.json"
        if meta_path.exists():
            try:
                meta = json.loads(meta_path.read_text())
                count, atoms, longest = int(meta["molecules"]), float(meta["mean_atoms"]), float(meta["max_atoms"])
            except (OSError, ValueError, KeyError, TypeError):
                pass
        if not count or not atoms:
            return None
        data = molecules_bytes(count, atoms, degree)
        batch, length = min(spec.batch_size, count), max(longest, atoms)
        width = max(8.0, (spec.budget / (12 * spec.layers)) ** 0.5)
        attention = 2 * 4 * batch * spec.heads * length * length * spec.layers
        activations = 4 * 12 * batch * length * width * spec.layers
        need = int(data + attention + activations)
        detail = (
            f"{count:,} molecules of about {atoms:,.0f} atoms {human(data)}, a batch of {batch} through "
            f"{spec.layers} layers {human(attention + activations)}"
        )
        key = json.dumps([canonical, spec.batch_size, spec.layers, spec.heads, spec.budget], sort_keys=True)
        hint_line = "lower batch_size, layers or the number of molecules"
        return MemoryNeed(f"gape on {dataset_label(spec)}", f"molecules of {ds.base}", need, detail, hint_line, key)


class Gape(TaskFamily):
    name = "gape"
    title = "GAPE: molecule regression by a transformer with positional encodings (Table 1)"
    spec_type = GapeSpec
    metrics = (
        Metric("val_mae", "val MAE", False),
        Metric("test_mae", "test MAE", False),
        Metric("best_val_mae", "best val MAE", False),
        Metric("test_mae_at_best", "test MAE at best val", False),
        Metric("train_loss", "train MAE", False),
    )
    default_metric = "val_mae"
    axes = (Axis("dataset", "dataset"), Axis("pe", "PE", order=PE_ORDER))
    table = TableLayout(group=None, rows="pe", columns="dataset", statistic="mean")
    protocol = (
        Setting("epochs", "epochs", ("epochs",)),
        Setting("steps", "steps", ("steps",)),
        Setting("batch", "batch", ("batch_size",)),
        Setting("budget", "budget", ("budget",)),
    )
    tunable = {
        "lr": Tunable("lr", "float", {"log": [1e-4, 2e-3]}, "the transformer's AdamW learning rate"),
        "layers": Tunable("layers", "int", [4, 8, 12], "transformer layers (width follows the budget)"),
        "heads": Tunable("heads", "int", [4, 8], "attention heads"),
    }
    figures = (Figure("bars"), Figure("curves"), Figure("cd"))
    import_roles = {"model": "pretraining model", "base": "base dataset", "dataset": "dataset class"}
    #: Table 1 of the graph alignment paper, shipped as gaptui/references/gape.paper.csv. No optimal line:
    #: the columns are datasets, and the dataset that separates the PEs most means nothing.
    references = References("paper")
    form = FormModule("engine.gape.form")
    cost_model = GapeCosts

    def record_axes(self, spec: GapeSpec) -> dict[str, Any]:
        return {"dataset": dataset_label(spec), "pe": spec.pe_spec().kind}

    def describe(self, spec: GapeSpec) -> str:
        pe = spec.pe_spec()
        shown = pe.kind.replace("gape", f"gape:{pe.run[:12]}", 1) if pe.run else pe.kind
        return f"{dataset_label(spec)} PE {shown} seed {spec.seed}"

    def dependencies(self, spec: GapeSpec) -> tuple[str, ...]:
        run = spec.pe_spec().run
        return (run,) if run else ()

    def check(self, specs: list[GapeSpec]) -> list[str]:
        """The molecule file of each dataset not yet in the cache, read once: what its build would refuse."""
        from engine.gape.data import molecule_id
        from engine.sources import check_sources_files, data_root

        seen: set[str] = set()
        datasets = []
        for spec in specs:
            ds = spec.molecule_spec()
            canonical = ds.canonical()
            key = json.dumps([canonical, spec.data_root], sort_keys=True)
            folder = Path(spec.datasets_dir) / "molecules" / molecule_id(canonical) if spec.datasets_dir else None
            cached = folder is not None and (folder / "meta.json").exists()
            if key in seen or cached:
                continue
            seen.add(key)
            datasets.append((ds.base, canonical["params"], data_root(spec.data_root)))
        check_sources_files(datasets)
        return []

    def inputs(self, spec: GapeSpec) -> list[Input]:
        from engine.gape.data import build_molecules

        ds = spec.molecule_spec()
        key = "molecules:" + json.dumps(ds.canonical(), sort_keys=True)
        datasets_dir = Path(spec.datasets_dir) if spec.datasets_dir else None
        if datasets_dir is None:
            return []
        raw = Path(spec.data_root) if spec.data_root else None
        return [Input(key, f"{ds.base} molecules", partial(build_molecules, ds, datasets_dir, raw))]

    def steps(self, spec: GapeSpec, ctx: RunContext) -> Generator[None, None, Outcome]:
        from engine.gape.train import gape_steps

        if spec.runs_dir is None and spec.pe_spec().run:
            spec = spec.replace(runs_dir=str(ctx.run_dir.parent))
        return gape_steps(spec, ctx)

    def parse_preset(self, raw: dict[str, Any], where: str, path: Path | None = None) -> GapePreset:
        return parse_preset(raw, path, where)

    def grid(self, preset: GapePreset, placement: Placement, limit: int | None = None) -> list[Any]:
        return grid(preset, placement, limit)


FAMILIES.register(Gape())
