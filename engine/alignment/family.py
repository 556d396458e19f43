"""The ``alignment`` task family: siamese GNN training for graph alignment (paper sections 3-5, Table D.3).

Spec: :class:`engine.alignment.spec.RunSpec` (a base dataset, a noise level and model, a model or the training-free
``laplacian`` baseline). Data: the cached pair datasets of :mod:`engine.alignment.datasets`. Axes: dataset
label x noise x model x recipe; tables: one per dataset, models as rows, noise levels as columns, the Laplacian
baseline never marked, a cell whose runs differ in recipe marked. Presets (:mod:`engine.alignment.preset`)
expand datasets x noise x models x seeds (see :class:`Preset`).
"""

from __future__ import annotations

import json
from collections.abc import Generator, Mapping
from pathlib import Path
from typing import Any

from engine.alignment.preset import BASELINE, ROW_ORDER, Preset, dataset_label, grid, model_label, parse_preset
from engine.alignment.recipes import RECIPES, spec_recipe_label
from engine.alignment.run import AlignmentRun, dataset_dirs
from engine.alignment.spec import RunSpec
from engine.cost import CostModel
from engine.tasks.declarations import Axis, Figure, Metric, References, TableLayout, TrainFlags, Tunable
from engine.tasks.family import TaskFamily
from engine.tasks.form import FormModule
from engine.tasks.registry import FAMILIES
from engine.tasks.run import Input, Outcome, RunContext
from engine.tasks.spec import Placement
from engine.typed import ascii_count

# ------------------------------------------------------------------------------------------------ the family


def is_baseline(spec: RunSpec) -> bool:
    return spec.model == BASELINE


def noise_problem(coordinates: Mapping[str, Any]) -> str:
    """A reference row's noise outside [0, 1) is no cell of the family."""
    noise = coordinates.get("noise")
    return f"noise {noise:g} is outside [0, 1)" if isinstance(noise, float) and not 0 <= noise < 1 else ""


#: ``gaptui train`` flag -> RunSpec field, for the flags that set a field of the same meaning.
TRAIN_FIELDS = (
    "model",
    "epochs",
    "batch_size",
    "features",
    "input_layer",
    "norm",
    "compile",
    "precision",
    "seed",
    "device",
)
#: ``gaptui train`` flag -> DatasetSpec field.
TRAIN_DATASET_FIELDS = {"noise_model": "noise_model", "train": "n_train", "val": "n_val", "data_seed": "seed"}


def train_spec(flags: Mapping[str, Any], placement: Placement) -> dict[str, Any]:
    """The alignment run that ``gaptui train --base B --noise ETA --model M`` and its other flags describe."""
    from engine.alignment.recipes import DEFAULT_RECIPE
    from engine.sources import parse_param_args

    dataset = {"base": flags["base"], "noise": flags["noise"], "params": parse_param_args(flags.get("param"))}
    dataset |= {key: flags[flag] for flag, key in TRAIN_DATASET_FIELDS.items() if flag in flags}
    return {
        "task": Alignment.name,
        "dataset": dataset,
        **{key: flags[key] for key in TRAIN_FIELDS if key in flags},
        # the current default recipe, named: a spec dict without one reads as written before recipes
        "recipe": flags.get("recipe", DEFAULT_RECIPE),
        "datasets_dir": placement.datasets_dir,
        "data_root": placement.data_root,
    }


class AlignmentCosts(CostModel):
    """An alignment run costs its epochs at the throughput measured for its model and data on each slot
    (:mod:`engine.alignment.throughput`); the training-free baseline costs none."""

    calibration_module = "engine.alignment.throughput"

    def cell(self, spec: RunSpec) -> str:
        from engine.alignment.throughput import cell_key

        return cell_key(spec)

    def units(self, spec: RunSpec) -> float | None:
        return 0 if is_baseline(spec) else spec.epochs

    def steps(self, spec: RunSpec) -> int | None:
        if is_baseline(spec):
            return 0
        pairs = spec.dataset.get("n_train") or 1  # a real dataset's split is known once it is built: one batch
        return spec.epochs * -(-int(pairs) // spec.batch_size)

    def evaluations(self, spec: RunSpec) -> int:
        from engine.alignment.throughput import run_evaluations

        return run_evaluations(spec)

    def label(self, spec: RunSpec) -> str:
        return BASELINE if is_baseline(spec) else model_label(spec)

    def estimate(self, specs: list[RunSpec], ctx: Any) -> Any:
        from engine.alignment.throughput import estimate_costs

        return estimate_costs(self.family, specs, ctx)

    def overhead_probe(self, placement: Placement, count: int) -> list[RunSpec]:
        from engine.alignment.throughput import overhead_probe

        return overhead_probe(placement.datasets_dir, placement.data_root, count)

    def memory(self, spec: RunSpec) -> Any:
        """The dataset and a training batch (:func:`engine.memory.pairs_need`); a real or user dataset's size from
        its built statistics (None until it is built: the launch checks it again then)."""
        from engine.alignment.datasets import dataset_id, open_dataset
        from engine.errors import GaptuiError
        from engine.memory import pairs_need

        if is_baseline(spec):
            return None
        canonical = spec.dataset_spec().canonical()
        built = None
        folder = dataset_dirs(spec)[0] / dataset_id(canonical)
        if (folder / "meta.json").exists():
            try:
                stats = open_dataset(folder).stats
                pairs = sum(int((stats.get(split) or {}).get("pairs", 0)) for split in ("train", "val"))
                built = (float(stats["train"]["mean_order"]), float(stats["train"]["mean_degree"]), pairs)
            except (GaptuiError, KeyError, TypeError, ValueError):
                built = None
        noise = f"noise {canonical['noise']:g}"
        what = f"{model_label(spec)} on {dataset_label(canonical)} at {noise} (batch {spec.batch_size})"
        return pairs_need(canonical, spec.batch_size, what, built, spec.model_bytes(), spec.node_bytes())


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
        Axis("model", "model", order=(BASELINE, *ROW_ORDER)),
        Axis("recipe", "recipe", order=tuple(RECIPES), of_spec=spec_recipe_label),
    )
    table = TableLayout(group="dataset", rows="model", columns="noise", baselines=(BASELINE,), uniform=("recipe",))
    tunable = {
        "lr": Tunable("lr", "float", {"log": [1e-4, 1e-2]}, "AdamW learning rate"),
        "weight_decay": Tunable("weight_decay", "float", {"log": [1e-6, 1e-2]}, "AdamW weight decay"),
        "layers": Tunable("model_kwargs.layers", "int", [3, 4, 5], "message-passing layers (width follows the budget)"),
        "dropout": Tunable("model_kwargs.dropout", "float", {"range": [0.0, 0.3]}, "dropout on each block's update"),
    }
    figures = (Figure("lines"), Figure("gap"), Figure("curves"), Figure("cd"))
    #: Table D.3 of the alignment paper, shipped as gaptui/references/alignment.paper.csv.
    references = References("paper", problem=noise_problem)
    #: Section 5: the noise level at which the models are most separated.
    optimal = {None: "optimal noise (largest best − worst spread)"}
    form = FormModule("engine.alignment.form")
    cost_model = AlignmentCosts
    train_flags = TrainFlags(("base", "noise", "model"), train_spec)
    import_roles = {"models": "model", "model_options": "model", "base": "base dataset", "dataset": "dataset class"}

    def metric(self, key: str) -> Metric:
        # Any other top-k accuracy a spec asked for (topk = [3]) is a share like the declared ones.
        if key.startswith("val_top") and key.endswith("_acc") and ascii_count(key[7:-4]) is not None:
            return Metric(key, f"top-{key[7:-4]} acc", True, "%")
        return super().metric(key)

    def record_axes(self, spec: RunSpec) -> dict[str, Any]:
        ds = spec.dataset_spec().canonical()
        axes = {"dataset": dataset_label(ds), "noise": ds["noise"], "model": model_label(spec)}
        return {**axes, "recipe": spec.recipe_label}

    def is_baseline(self, spec: RunSpec) -> bool:
        return is_baseline(spec)

    def dependant_artefacts(self, spec: RunSpec) -> tuple[str, ...]:
        from engine.loop import CHECKPOINT

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
        cells: set[str] = set()
        for spec in specs:
            if spec.seedless() in cells:  # the run's seed is not its dataset's
                continue
            cells.add(spec.seedless())
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
        from engine.alignment.features import parse_features, prepare_positional

        ds = spec.dataset_spec()
        key = "alignment-dataset:" + json.dumps(ds.canonical(), sort_keys=True)
        out = [Input(key, f"{ds.base} at noise {ds.noise:g}", partial(build_dataset, ds, *dataset_dirs(spec)))]
        positional = parse_features(spec.features).positional
        if positional:  # cached here, before workers start: a cache that fails its check is said here, not in a log
            parts = "+".join(p.text for p in positional)
            build = partial(prepare_positional, ds, parts, *dataset_dirs(spec))
            out.append(Input(f"{key}:positional:{parts}", f"{parts} of {ds.base} at noise {ds.noise:g}", build))
        return out

    def steps(self, spec: RunSpec, ctx: RunContext) -> Generator[None, None, Outcome]:
        return AlignmentRun(spec, ctx).steps()

    def parse_preset(self, raw: dict[str, Any], where: str, path: Path | None = None) -> Preset:
        return parse_preset(raw, path)

    def grid(self, preset: Preset, placement: Placement, limit: int | None = None) -> list[RunSpec]:
        return grid(preset, placement, limit)


FAMILIES.register(Alignment())
