"""The ``alignment`` task family: siamese GNN training for graph alignment (paper sections 3-5, Table D.3).

Spec: :class:`engine.alignment.spec.RunSpec` (a base dataset, a noise level and model, a model or the training-free
``laplacian`` baseline). Data: the cached pair datasets of :mod:`engine.alignment.datasets`. Axes: dataset
label x noise x model; tables: one per dataset, models as rows, noise levels as columns, the Laplacian baseline
never marked. Presets (:mod:`engine.alignment.preset`) expand datasets x noise x models x seeds (see :class:`Preset`).
"""

from __future__ import annotations

import json
from collections.abc import Generator
from pathlib import Path
from typing import Any

from engine.alignment.preset import BASELINE, PAPER_ORDER, Preset, dataset_label, grid, model_label, parse_preset
from engine.alignment.run import AlignmentRun, dataset_dirs
from engine.alignment.spec import RunSpec
from engine.tasks import (
    FAMILIES,
    Axis,
    Figure,
    Input,
    Metric,
    Outcome,
    Placement,
    RunContext,
    TableLayout,
    TaskFamily,
    run_steps,
)

# ------------------------------------------------------------------------------------------------ the family


class Alignment(TaskFamily):
    name = "alignment"
    title = "graph alignment: siamese GNN embeddings matched by LAP (Table D.3)"
    spec_type = RunSpec
    metrics = (
        Metric("val_lap_acc", "LAP acc", True, "%"),
        Metric("val_argmax_acc", "argmax acc", True, "%"),
        Metric("val_top5_acc", "top-5 acc", True, "%"),
        Metric("val_top10_acc", "top-10 acc", True, "%"),
        Metric("val_loss", "val loss", False),
        Metric("train_loss", "train loss", False),
    )
    default_metric = "val_lap_acc"
    axes = (
        Axis("dataset", "dataset"),
        Axis("noise", "noise", numeric=True, prefix="η="),
        Axis("model", "model", order=(BASELINE, *PAPER_ORDER)),
    )
    table = TableLayout(group="dataset", rows="model", columns="noise", baselines=(BASELINE,))
    figures = (Figure("lines"), Figure("gap"), Figure("curves"), Figure("cd"))
    reference = "paper"
    import_roles = {"models": "model", "model_options": "model", "base": "base dataset", "dataset": "dataset class"}

    def metric(self, key: str) -> Metric:
        # Any other top-k accuracy a spec asked for (topk = [3]) is a share like the declared ones.
        if key.startswith("val_top") and key.endswith("_acc") and key[7:-4].isdigit():
            return Metric(key, f"top-{key[7:-4]} acc", True, "%")
        return super().metric(key)

    def record_axes(self, spec: RunSpec) -> dict[str, Any]:
        ds = spec.dataset_spec().canonical()
        return {"dataset": dataset_label(ds), "noise": ds["noise"], "model": model_label(spec)}

    def is_baseline(self, spec: RunSpec) -> bool:
        return spec.model == BASELINE

    def dependant_artefacts(self, spec: RunSpec) -> tuple[str, ...]:
        from engine.worker import CHECKPOINT

        # A GAPE run embeds with the trained model; the training-free baseline has none.
        return () if self.is_baseline(spec) else (CHECKPOINT,)

    def describe(self, spec: RunSpec) -> str:
        axes = self.record_axes(spec)
        return f"{axes['dataset']} noise {axes['noise']:g} {axes['model']} seed {spec.seed}"

    def check(self, specs: list[RunSpec]) -> list[str]:
        """The files of each base dataset not yet in the cache (a molecule file...), once per dataset."""
        from engine.alignment.datasets import dataset_id
        from engine.sources import check_source_files, data_root

        seen: set[str] = set()
        for spec in specs:
            ds = spec.dataset_spec()
            datasets_dir, raw_root = dataset_dirs(spec)
            key = json.dumps([ds.base, ds.params, str(raw_root)], sort_keys=True)
            if key in seen or (datasets_dir / dataset_id(ds.canonical()) / "meta.json").exists():
                continue
            seen.add(key)
            check_source_files(ds.base, ds.params, data_root(raw_root))
        return []

    def inputs(self, spec: RunSpec) -> list[Input]:
        from functools import partial

        from engine.alignment.datasets import build_dataset

        ds = spec.dataset_spec()
        key = "alignment-dataset:" + json.dumps(ds.canonical(), sort_keys=True)
        return [Input(key, f"{ds.base} at noise {ds.noise:g}", partial(build_dataset, ds, *dataset_dirs(spec)))]

    def run(self, spec: RunSpec, ctx: RunContext) -> Outcome:
        return run_steps(self.steps(spec, ctx))

    def steps(self, spec: RunSpec, ctx: RunContext) -> Generator[None, None, Outcome]:
        return AlignmentRun(spec, ctx).steps()

    def parse_preset(self, raw: dict[str, Any], where: str, path: Path | None = None) -> Preset:
        return parse_preset(raw, path)

    def grid(self, preset: Preset, placement: Placement, limit: int | None = None) -> list[RunSpec]:
        return grid(preset, placement, limit)

    # -------------------------------------------------------------------------------- reference tables, optimal lines

    def reference_problem(self, coordinates: dict[str, Any]) -> str:
        noise = coordinates.get("noise")
        return f"noise {noise:g} is outside [0, 1)" if isinstance(noise, float) and not 0 <= noise < 1 else ""

    def optimal_line(self, derived: str | None) -> str:
        # Section 5: the noise level at which the models are most separated.
        return "" if derived else "optimal noise (largest best − worst spread)"


FAMILIES.register(Alignment())
