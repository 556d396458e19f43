"""The ``alignment`` task family: siamese GNN training for graph alignment (paper sections 3-5, Table D.3).

Spec: :class:`engine.alignment.spec.RunSpec` (a base dataset, a noise level and model, a model, the training-free
``laplacian`` baseline or a solver of :mod:`engine.alignment.solvers`, optionally a decoder searching on top of a
trained model). Data: the cached pair datasets of :mod:`engine.alignment.datasets`. Axes: dataset label x noise x
model x recipe; tables: one per dataset, models as rows, noise levels as columns, the reference rows (Laplacian
baseline, solvers, search on a model) never marked, the dataset's symmetry ceilings as rows of their own. The
protocol (epochs, pairs, batch, budget, noise model) is shown under every table and in the history. Presets
(:mod:`engine.alignment.preset`) expand datasets x noise x models x seeds (see :class:`Preset`).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Generator, Mapping
from pathlib import Path
from typing import Any

from engine.alignment.preset import (
    BASELINE,
    REFERENCE_ORDER,
    ROW_ORDER,
    Preset,
    dataset_label,
    grid,
    is_reference_row,
    model_label,
    parse_preset,
    typed_value,
)
from engine.alignment.recipes import RECIPE_FIELDS, RECIPES, spec_recipe_label
from engine.alignment.run import AlignmentRun, dataset_dirs
from engine.alignment.spec import RunSpec
from engine.errors import GaptuiError
from engine.tasks.cost import CostModel
from engine.tasks.declarations import (
    Axis,
    Bound,
    Figure,
    Metric,
    References,
    Setting,
    TableLayout,
    TrainFlags,
    Tunable,
)
from engine.tasks.family import TaskFamily
from engine.tasks.form import FormModule
from engine.tasks.registry import FAMILIES
from engine.tasks.run import Input, Outcome, RunContext
from engine.tasks.spec import Placement
from engine.typed import ascii_count

# ------------------------------------------------------------------------------------------------ the family


def is_baseline(spec: RunSpec) -> bool:
    """A run planned once per cell: the Laplacian baseline and the solvers, which draw nothing from the seed."""
    return not spec.trained


#: The metrics the symmetry ceilings bound (any method's accuracy; not orbit_acc, solved or edge overlap).
BOUNDED = ("val_lap_acc", "val_argmax_acc", "val_top1_acc")


def noise_problem(coordinates: Mapping[str, Any]) -> str:
    """A reference row's noise outside [0, 1) is no cell of the family."""
    noise = coordinates.get("noise")
    return f"noise {noise:g} is outside [0, 1)" if isinstance(noise, float) and not 0 <= noise < 1 else ""


_MODEL_ROWS: dict[str, str] = {}


def model_row_problem(label: Any) -> str:
    """Why a reference row's model is no row a run can have, ``""`` when one can: ``ggnn[steps=2]`` is the row of a
    ``ggnn`` run with the model option ``steps = 2`` (the label a run of that spec gets, :func:`model_label`); an
    unknown model, an unknown option, or a label written otherwise (``ggnn[steps = 2]``) is a problem. Rows with
    positional inputs or a decoder (``graphgps+rwpe:16``, ``gin+faq``) and solver rows are taken as written."""
    if not isinstance(label, str) or "+" in label or label == BASELINE or label.partition("[")[0] in REFERENCE_ORDER:
        return ""
    if label not in _MODEL_ROWS:
        name, bracket, rest = label.partition("[")
        options = {}
        for item in filter(None, rest.removesuffix("]").split(",")) if bracket else ():
            key, _, value = item.partition("=")
            options[key] = typed_value(value)
        spec = {"task": "alignment", "dataset": {"base": "er", "noise": 0.1}, "model": name, "seed": 0}
        try:
            _check_model_options(name, options)
            made = model_label(RunSpec.from_dict({**spec, "model_kwargs": options}))
            _MODEL_ROWS[label] = "" if made == label else f"model '{label}' reads '{made}' as a run's row"
        except GaptuiError as exc:
            _MODEL_ROWS[label] = f"model '{label}' is no row a run can have: {exc}"
    return _MODEL_ROWS[label]


def _check_model_options(name: str, options: Mapping[str, Any]) -> None:
    """A built-in model's options as a row names them: each one the model has, with a value it takes."""
    from engine import models

    if name not in models.names():
        return
    known = models.info(name).options
    for key, value in options.items():
        if key not in known:
            raise GaptuiError(f"model '{name}' has no option '{key}'; options: {', '.join(sorted(known))}")
        try:
            known[key].check(value)
        except ValueError as exc:
            raise GaptuiError(f"model '{name}' option {key}={value!r}: {exc}") from None


def reference_problem(coordinates: Mapping[str, Any]) -> str:
    """A reference row is no cell of the family: its noise is outside [0, 1) or its model is no run's row."""
    return noise_problem(coordinates) or model_row_problem(coordinates.get("model"))


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
        return spec.epochs if spec.trains else 0

    def steps(self, spec: RunSpec) -> int | None:
        if not spec.trains:
            return 0
        pairs = spec.dataset.get("n_train") or 1  # a real dataset's split is known once it is built: one batch
        return spec.epochs * -(-int(pairs) // spec.batch_size)

    def evaluations(self, spec: RunSpec) -> int:
        from engine.alignment.throughput import run_evaluations

        return run_evaluations(spec)

    def label(self, spec: RunSpec) -> str:
        return model_label(spec)

    def estimate(self, specs: list[RunSpec], ctx: Any) -> Any:
        from engine.alignment.throughput import estimate_costs

        return estimate_costs(self.family, specs, ctx)

    def overhead_probe(self, placement: Placement, count: int) -> list[RunSpec]:
        from engine.alignment.throughput import overhead_probe

        return overhead_probe(placement.datasets_dir, placement.data_root, count)

    def memory(self, spec: RunSpec) -> Any:
        """The dataset and a training batch (:func:`engine.alignment.memory.pairs_need`); a real or user dataset's
        size from its built statistics (None until it is built: the launch checks it again then)."""
        from engine.alignment.datasets import dataset_id, open_dataset
        from engine.alignment.memory import pairs_need

        if not spec.trains:
            return spec.solver_need(self._built_order(spec))
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

    def _built_order(self, spec: RunSpec) -> float | None:
        """The largest graph order of a built dataset (what a solver's per-pair memory grows with), else None."""
        from engine.alignment.datasets import dataset_id, open_dataset

        folder = dataset_dirs(spec)[0] / dataset_id(spec.dataset_spec().canonical())
        if not (folder / "meta.json").exists():
            return None
        try:
            stats = open_dataset(folder).stats
            return float(max(stats[s].get("max_order", stats[s]["mean_order"]) for s in ("train", "val")))
        except (GaptuiError, KeyError, TypeError, ValueError):
            return None


def check_model(spec: RunSpec) -> None:
    """Build the model of ``spec`` as its worker will (its width searched for its budget), once per distinct
    model: GaptuiError naming the run and what is wrong. Baselines and ``module.path:Class`` models (smoke-tested
    by their worker, in its environment) are not built here."""
    from engine.alignment.features import feature_dim
    from engine.alignment.throughput import out_dim

    if is_baseline(spec) or ":" in spec.model:
        return
    options = json.dumps(spec.model_options(), sort_keys=True, default=str)
    try:
        _build_once(spec.model, out_dim(spec), spec.budget, feature_dim(spec.features), options)
    except GaptuiError as exc:
        raise GaptuiError(f"{model_label(spec)} on {dataset_label(spec.dataset_spec().canonical())}: {exc}") from None


@functools.lru_cache(maxsize=256)
def _build_once(model: str, out_dim: int, budget: int, in_dim: int, options: str) -> None:
    from engine import models

    models.build(model, out_dim=out_dim, budget=budget, in_dim=in_dim, **json.loads(options))


class Alignment(TaskFamily):
    name = "alignment"
    title = "graph alignment: siamese GNN embeddings matched by LAP (Table D.3)"
    spec_type = RunSpec
    metrics = (
        Metric("val_lap_acc", "LAP acc", True, "%"),
        Metric("val_argmax_acc", "argmax acc", True, "%"),
        Metric("val_top5_acc", "top-5 acc", True, "%"),
        Metric("val_top10_acc", "top-10 acc", True, "%"),
        Metric("val_solved", "solved pairs", True, "%"),
        Metric("val_edge_overlap", "edge overlap", True),
        Metric("val_orbit_acc", "orbit acc", True, "%"),
        Metric("val_loss", "val loss", False),
        Metric("train_loss", "train loss", False),
        Metric("seconds_per_pair", "seconds per pair", False, "s"),
    )
    default_metric = "val_lap_acc"
    axes = (
        Axis("dataset", "dataset"),
        Axis("noise", "noise", numeric=True, prefix="η="),
        Axis("model", "model", order=(*REFERENCE_ORDER, *ROW_ORDER)),
        # The recipe names the eleven recipe fields: runs of one cell that differ in them read as two recipes.
        Axis("recipe", "recipe", order=tuple(RECIPES), of_spec=spec_recipe_label, covers=RECIPE_FIELDS),
    )
    protocol = (
        Setting("epochs", "epochs", ("epochs",)),
        Setting("pairs", "pairs", ("dataset.n_train", "dataset.n_val")),
        Setting("batch", "batch", ("batch_size",)),
        Setting("budget", "budget", ("budget",)),
        Setting("noise_model", "noise model", ("dataset.noise_model",)),
    )
    table = TableLayout(
        group="dataset",
        rows="model",
        columns="noise",
        baselines=(REFERENCE_ORDER[0],),
        reference=is_reference_row,
        reference_note="reference: training-free, or search on a trained model",
        bounds=(
            Bound("val_orbit_ceiling", "ceiling: orbits", BOUNDED, "the most any method can expect: orbits / nodes"),
            Bound("val_wl_ceiling", "ceiling: 1-WL", BOUNDED, "the same for message passing: 1-WL classes / nodes"),
        ),
    )
    tunable = {
        "lr": Tunable("lr", "float", {"log": [1e-4, 1e-2]}, "AdamW learning rate"),
        "weight_decay": Tunable("weight_decay", "float", {"log": [1e-6, 1e-2]}, "AdamW weight decay"),
        "layers": Tunable("model_kwargs.layers", "int", [3, 4, 5], "message-passing layers (width follows the budget)"),
        "dropout": Tunable("model_kwargs.dropout", "float", {"range": [0.0, 0.3]}, "dropout on each block's update"),
    }
    figures = (Figure("lines"), Figure("gap"), Figure("curves"), Figure("cd"))
    #: Table D.3 of the alignment paper, shipped as gaptui/references/alignment.paper.csv.
    references = References("paper", problem=reference_problem)
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

    def dependencies(self, spec: RunSpec) -> tuple[str, ...]:
        # Search on top of a model reads the trained run of the same spec without its decoder.
        return (spec.undecoded().run_id(),) if spec.decoder else ()

    def dependant_artefacts(self, spec: RunSpec) -> tuple[str, ...]:
        from engine.checkpoints import CHECKPOINT

        # A GAPE or decoding run embeds with the trained model; the training-free runs have none.
        return (CHECKPOINT,) if spec.trains else ()

    def describe(self, spec: RunSpec) -> str:
        axes = self.record_axes(spec)
        return f"{axes['dataset']} noise {axes['noise']:g} {axes['model']} seed {spec.seed}"

    def check(self, specs: list[RunSpec]) -> list[str]:
        """The files of each base dataset not yet in the cache (a molecule file, a real dataset's raw files that
        cannot be downloaded now...), once per dataset; and each model as its runs build it (a budget no width
        meets, a bad option), once per model: a GAPE grid's pretraining runs come from no alignment preset."""
        from engine.alignment.datasets import dataset_id
        from engine.sources import check_sources_files, data_root

        seen: set[str] = set()
        cells: set[str] = set()
        datasets = []
        for spec in specs:
            if spec.seedless() in cells:  # the run's seed is not its dataset's
                continue
            cells.add(spec.seedless())
            check_model(spec)
            ds = spec.dataset_spec()
            datasets_dir, raw_root = dataset_dirs(spec)
            key = json.dumps([ds.base, ds.params, str(raw_root)], sort_keys=True)
            if key in seen or (datasets_dir / dataset_id(ds.canonical()) / "meta.json").exists():
                continue
            seen.add(key)
            datasets.append((ds.base, ds.params, data_root(raw_root)))
        check_sources_files(datasets)  # every dataset missing its files named, one line each
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
        return parse_preset(raw, path, where)

    def grid(self, preset: Preset, placement: Placement, limit: int | None = None) -> list[RunSpec]:
        return grid(preset, placement, limit)


FAMILIES.register(Alignment())
