"""The ``properties`` task family: global poolings compared on the relation property suite (seed 001).

Spec: :class:`PropertySpec`, one cell (property, pooling, dimension, seed) of the study. A ``robustness`` cell
depends on the ``generalisation`` cell with the same property, pooling, seed and options and tests that cell's
trained model on GraphPerturb (the two dimensions share one training). Data: the cached datasets of
:mod:`engine.properties.datasets`, or a folder in the published CSV layout (``published``). Metric: ``u_score``
(size-weighted accuracy over the test sizes). Tables: one per dimension, poolings x properties; the study's
Table 2 (poolings x dimensions, mean R score) is :meth:`Properties.summary`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from engine.errors import GaptuiError, did_you_mean
from engine.presets import RunPolicy, parse_head
from engine.properties.definitions import PROPERTY_NAMES
from engine.properties.options import TrainOptions
from engine.properties.scores import DIMENSIONS, POOLING_LABELS
from engine.tasks import (
    FAMILIES,
    Axis,
    DerivedTable,
    Figure,
    FormField,
    Input,
    Metric,
    Outcome,
    Placement,
    PresetBase,
    RunContext,
    TableLayout,
    TaskFamily,
    TaskSpec,
    Tunable,
    list_of,
    run_steps,
    unique_values,
)

DIMENSION_ORDER = tuple(DIMENSIONS)
#: The derived table of the study (Table 2) and its metric: U relative to the mean of the poolings compared.
TABLE2 = "Table 2: mean R score"
TABLE2_KEYS = ("pooling", "property", "dimension")
#: The derived table of pooling advice (seed 001, section 4.3): mean R per property class.
ADVICE = "Pooling advice: mean R score per property class"
R_SCORE = Metric("r_score", "R score", higher_is_better=True)


def _default_datasets_dir() -> Path:
    return Path(os.environ.get("GAPTUI_WORKSPACE") or "gaptui-runs") / "datasets"


@dataclass(frozen=True, kw_only=True)
class CellOptions(TrainOptions):
    """The options of a study cell: training (:class:`~engine.properties.training.TrainOptions`, the study's
    defaults) and data: ``graphs`` per dataset, ``sizes`` (keep the first K sizes of the property: train at the
    base, test above; default all 11), ``negatives`` (GraphRandom negatives, ``solver`` or ``random``),
    ``data_seed`` and ``published`` (a folder in the published CSV layout instead of generated data)."""

    graphs: int = 10_000
    sizes: int | None = None
    negatives: str | None = None
    data_seed: int = 0
    published: str | None = None
    #: The options of the training strategies (:mod:`engine.properties.strategies`), each read by one strategy.
    finetune_share: float = 0.5
    progressive_k: int = 2
    adversarial_share: float = 0.5


@dataclass(frozen=True, kw_only=True)
class PropertySpec(TaskSpec, CellOptions):
    """One cell of the property study: (property, pooling, dimension, seed) and its :class:`CellOptions`."""

    property: str
    pooling: str
    dimension: str
    task: str = "properties"
    seed: int = 0
    strategy: str = "standard"
    device: str = "auto"
    datasets_dir: str | None = None

    def validate(self, where: str = "run spec") -> None:
        from engine.properties.datasets import PropertyDatasetSpec, check_builds_fit
        from engine.properties.definitions import get_property
        from engine.properties.poolings import POOLINGS
        from engine.properties.strategies import check_options, check_strategy, dimensions_for
        from engine.properties.study import cell_datasets, check_dimension

        for key in ("seed", "data_seed"):
            if getattr(self, key) < 0:
                raise GaptuiError(f"{where}: {key} = {getattr(self, key)} must be >= 0")
        if self.sizes is not None and self.sizes < 2:
            raise GaptuiError(f"{where}: sizes = {self.sizes}: a cell needs the base size and one larger size")
        check_options(self.finetune_share, self.progressive_k, self.adversarial_share, where)
        try:
            get_property(self.property)
            check_dimension(self.dimension)
            check_strategy(self.strategy)
            if self.dimension not in dimensions_for(self.strategy):
                raise GaptuiError(
                    f"strategy {self.strategy} has no {self.dimension} dimension (its model trains on GraphPerturb "
                    "too, so GraphPerturb is no unseen shift); dimensions: " + ", ".join(dimensions_for(self.strategy))
                )
            if self.strategy == "finetune_perturb" and self.epochs < 2:
                raise GaptuiError(f"finetune_perturb needs epochs >= 2, got {self.epochs}")
            if self.strategy == "progressive" and self.published is not None:
                raise GaptuiError("progressive trains on k + 1 sizes; a published folder has one training size")
            if self.pooling not in POOLINGS:
                POOLINGS.get(self.pooling)
            PropertyDatasetSpec(self.property, 1, "random", self.graphs, self.negatives, self.data_seed).canonical()
            cells = cell_datasets(
                self.property, self.dimension, self.graphs, self.sizes, self.negatives, self.data_seed,
                self.strategy_options(),
            )  # fmt: skip
            check_builds_fit([ds.canonical() for ds in cells], workers=1)
        except GaptuiError as exc:
            raise GaptuiError(f"{where}: {exc}") from None
        for key in ("epochs", "batch_size", "hidden", "layers", "cycle_k"):
            if getattr(self, key) < 1:
                raise GaptuiError(f"{where}: {key} = {getattr(self, key)} must be >= 1")
        if not self.lr > 0:
            raise GaptuiError(f"{where}: lr = {self.lr} must be > 0")
        from engine.loop import check_precision

        check_precision(self.precision, where)
        from engine.typed import check_device

        check_device(self.device, where)
        if self.published is not None and not Path(self.published).is_dir():
            raise GaptuiError(f"{where}: published = {self.published!r} is not a folder")

    def canonical(self) -> dict[str, Any]:
        from engine.properties.datasets import DEFAULT_NEGATIVES

        out = super().canonical()
        out["negatives"] = self.negatives or DEFAULT_NEGATIVES
        if out.get("precision") == "auto":
            del out["precision"]  # hashed only when set, so the ids of runs from before the option stay
        from engine.properties.strategies import ALL_STRATEGY_OPTIONS, STRATEGY_OPTIONS

        # A strategy's options are hashed only with the strategy that reads them, and `standard` not at all, so
        # the ids of runs from before strategies stay.
        used = STRATEGY_OPTIONS.get(out.get("strategy", "standard"), ())
        for key in ALL_STRATEGY_OPTIONS:
            if key not in used:
                out.pop(key, None)
        if out.get("strategy") == "standard":
            del out["strategy"]
        return out

    def strategy_options(self) -> Any:
        """The :class:`~engine.properties.strategies.Strategy` of this cell."""
        from engine.properties.strategies import Strategy

        return Strategy(self.strategy, self.finetune_share, self.progressive_k, self.adversarial_share)

    def options(self) -> TrainOptions:
        fields = {f.name for f in dataclasses.fields(TrainOptions)}
        return TrainOptions(**{k: getattr(self, k) for k in fields})

    def trainer(self) -> PropertySpec | None:
        """The cell whose trained model this one tests (robustness), or None when it trains itself."""
        from engine.properties.strategies import trained_by

        other = trained_by(self.strategy).get(self.dimension)
        return None if other is None else self.replace(dimension=other)


@dataclass(frozen=True, kw_only=True)
class StudyOptions(CellOptions, RunPolicy):
    """The ``[run]`` table of a preset: cell options copied into every spec (``spec_fields()``), plus the run policy
    (:class:`engine.presets.RunPolicy`: how the scheduler treats runs)."""


@dataclass(frozen=True)
class Preset(PresetBase):
    """A property study grid: properties x poolings x dimensions x seeds::

    task = "properties"
    description = "what this grid is for"
    properties = ["reflexive", "transitive"]
    poolings = ["mean", "sopool_bimap"]
    dimensions = ["generalisation", "sensitivity", "robustness"]   # optional: all three
    seeds = [0, 1]

    [run]                     # PropertySpec options shared by every run
    epochs = 20
    graphs = 10000
    """

    task: ClassVar[str] = "properties"
    name: str
    description: str
    properties: tuple[str, ...]
    poolings: tuple[str, ...]
    dimensions: tuple[str, ...]
    seeds: tuple[int, ...]
    run: StudyOptions = field(default_factory=StudyOptions)
    strategies: tuple[str, ...] = ("standard",)
    path: Path | None = None
    #: What planning merged (repeated grid values), one line each, for the user to see.
    notes: tuple[str, ...] = field(default=(), compare=False)

    @property
    def size(self) -> int:
        cells = sum(len(strategy_dimensions(self.dimensions, s)) for s in self.strategies)
        return len(self.properties) * len(self.poolings) * cells * len(self.seeds)

    @property
    def policy(self) -> Any:
        """The ``[run]`` table, which holds the run policy (timeout, retries, pack_seeds) too."""
        return self.run


def strategy_dimensions(dimensions: tuple[str, ...] | list[str], strategy: str) -> list[str]:
    """The cells of one (property, pooling, seed) under ``strategy``: the asked dimensions it has, each after the
    cell whose model it tests (added if absent), in the study's order."""
    from engine.properties.strategies import dimensions_for, trained_by

    uses = trained_by(strategy)
    dims = {d for d in dimensions if d in dimensions_for(strategy)}
    dims |= {uses[d] for d in dims if d in uses}
    return [d for d in DIMENSION_ORDER if d in dims]


#: The family's own top-level keys (the common ones, ``task`` ... ``[run]``, are :mod:`engine.presets`').
OWN_KEYS = ("properties", "poolings", "dimensions", "strategies")
#: The cell options a ``[run]`` table may set beside the policy.
RUN_KEYS = tuple(f.name for f in dataclasses.fields(CellOptions))


def _names(where: str, raw: dict[str, Any], key: str, what: str, known: Any, more: str = "") -> list[str]:
    """The list ``raw[key]`` of names, each one of ``known`` (or, with ``more``, anything containing ``:``)."""
    names = list_of(where, key, raw[key], str, f"{what} names")
    for name in names:
        if name not in known and not (more and ":" in name):
            raise GaptuiError(
                f"{where}: key '{key}' value '{name}' is not a {what}{did_you_mean(name, known)}; "
                f"known: {', '.join(known)}{more}"
            )
    return names


def parse_preset(raw: dict[str, Any], path: Path | None = None) -> Preset:
    from engine.properties.poolings import POOLINGS
    from engine.typed import parse_dataclass

    head = parse_head(raw, path, "properties", OWN_KEYS, RUN_KEYS, required=("properties", "poolings"))
    where, raw = head.where, head.own
    notes: list[str] = []
    props = unique_values(_names(where, raw, "properties", "property", PROPERTY_NAMES), str, "properties", notes)
    poolings = _names(where, raw, "poolings", "pooling", POOLINGS.names(), " or module.path:factory")
    poolings = unique_values(poolings, str, "poolings", notes)
    dims = _names(where, {"dimensions": list(DIMENSION_ORDER), **raw}, "dimensions", "dimension", DIMENSION_ORDER)
    dims = unique_values(dims, str, "dimensions", notes)
    from engine.properties.strategies import STRATEGIES, dimensions_for

    strategies = _names(where, {"strategies": ["standard"], **raw}, "strategies", "training strategy", STRATEGIES)
    strategies = unique_values(strategies, str, "strategies", notes)
    for strategy in strategies:
        if not set(dims) & set(dimensions_for(strategy)):
            raise GaptuiError(
                f"{where}: strategy {strategy} measures none of the dimensions asked ({', '.join(dims)}); it has "
                + ", ".join(dimensions_for(strategy))
            )
        if "robustness" in dims and "robustness" not in dimensions_for(strategy):
            notes.append(f"strategy {strategy}: no robustness cells (its model trains on GraphPerturb too)")
    notes += head.notes  # repeated seeds: notes follow the file's usual key order
    run = parse_dataclass(StudyOptions, {**head.run, **dataclasses.asdict(head.policy)}, f"{where}: [run]")
    preset = Preset(
        name=head.name,
        description=head.description,
        properties=tuple(props),
        poolings=tuple(poolings),
        dimensions=tuple(d for d in DIMENSION_ORDER if d in dims),
        seeds=head.seeds,
        run=run,
        strategies=tuple(strategies),
        path=path,
        notes=tuple(notes),
    )
    grid(preset, Placement(".", "."), limit=1)  # the worker's own checks, once, at parse time
    return preset


def grid(preset: Preset, placement: Placement, limit: int | None = None) -> list[PropertySpec]:
    """Seed-major; a cell that tests another's model (robustness; sensitivity under finetune_perturb) comes right
    after the cell it depends on (added if absent); strategies innermost but for the dimensions."""
    where = str(preset.path or preset.name)
    common = {**preset.run.spec_fields(), "datasets_dir": placement.datasets_dir}
    specs: list[PropertySpec] = []
    for seed in preset.seeds:
        for prop in preset.properties:
            for pooling in preset.poolings:
                for strategy in preset.strategies:
                    for dim in strategy_dimensions(preset.dimensions, strategy):
                        raw = {**common, "property": prop, "pooling": pooling, "dimension": dim, "seed": seed}
                        if strategy != "standard":
                            raw["strategy"] = strategy
                        specs.append(PropertySpec.from_dict(raw, where))
                        if limit is not None and len(specs) >= limit:
                            return specs
    return specs


#: Published folders already read at planning: (cell key, file stats) -> warnings.
_PUBLISHED_CHECKED: dict[str, list[str]] = {}


def _check_published(spec: PropertySpec) -> list[str]:
    """Read the published files of ``spec``'s cell as its run will; GaptuiError for what it would fail on."""
    import json

    import numpy as np

    from engine.properties.study import DIMENSIONS
    from engine.properties.training import load_study_data

    root = Path(spec.published or ".")
    train_family, test_family = DIMENSIONS[spec.dimension]
    files = sorted(p for p in root.rglob(f"{spec.property}*.csv") if p.is_file())
    stats = [(str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in files]
    key = json.dumps([str(root), spec.property, spec.dimension, spec.sizes, stats])
    if key not in _PUBLISHED_CHECKED:
        data = load_study_data(
            spec.property, train_family, datasets_dir=root, sizes=spec.sizes, published=root,
            test_families=(test_family,),
        )  # fmt: skip
        labels = np.unique(data.train.labels)
        _PUBLISHED_CHECKED[key] = (
            [
                f"published = {spec.published}: the training file of '{spec.property}' ({train_family}) holds label "
                f"{int(labels[0])} only: a model learns nothing from it"
            ]
            if labels.size == 1
            else []
        )
    return _PUBLISHED_CHECKED[key]


class Properties(TaskFamily):
    name = "properties"
    title = "relation properties: global poolings on 16 properties, 3 dimensions (seed 001)"
    spec_type = PropertySpec
    metrics = (
        Metric("u_score", "U score", higher_is_better=True, unit="%"),
        Metric("train_acc", "train accuracy", higher_is_better=True, unit="%"),
    )
    default_metric = "u_score"
    axes = (
        Axis("dimension", "dimension", order=DIMENSION_ORDER),
        Axis("pooling", "pooling", order=tuple(POOLING_LABELS)),
        Axis("property", "property", order=PROPERTY_NAMES),
        # Not a run's axis: the columns of the pooling-advice table (a property's class, seed 001's Table 1).
        Axis("property_class", "property class", order=("basic", "function", "combined")),
    )
    table = TableLayout(group="dimension", rows="pooling", columns="property")
    tunable = {
        "lr": Tunable("lr", "float", {"log": [1e-4, 1e-2]}, "AdamW learning rate"),
        "hidden": Tunable("hidden", "int", [32, 64, 128], "the backbone's hidden width"),
    }
    figures = (
        Figure("heatmap"),
        Figure("bars", derived=True),
        Figure("series", prefix="acc_n", label="test graph size n"),
        Figure("cd"),
    )
    import_roles = {"poolings": "pooling"}

    def record_axes(self, spec: PropertySpec) -> dict[str, Any]:
        # A strategy other than standard is part of the row (pooling/strategy), so the tables and Table 2 keep the
        # strategies apart, and `strategy` names it alone; a standard run's axes are those it always had.
        axes = {"dimension": spec.dimension, "pooling": spec.pooling, "property": spec.property}
        if spec.strategy != "standard":
            axes.update(pooling=f"{spec.pooling}/{spec.strategy}", strategy=spec.strategy)
        return axes

    def dependencies(self, spec: PropertySpec) -> tuple[str, ...]:
        trainer = spec.trainer()
        return () if trainer is None else (trainer.hash(),)

    def describe(self, spec: PropertySpec) -> str:
        how = "" if spec.strategy == "standard" else f" {spec.strategy}"
        return f"{spec.property} {spec.pooling}{how} {spec.dimension} seed {spec.seed}"

    def check(self, specs: list[PropertySpec]) -> list[str]:
        """Once per plan: each pooling named by import path is tried on a tiny input, and each published folder's
        files a cell reads are read as its run will (a training file with one label only is a warning)."""
        from engine.properties.poolings import check_pooling

        warnings: list[str] = []
        seen: set[tuple[Any, ...]] = set()
        for spec in specs:
            check_pooling(spec.pooling, spec.hidden)
            if spec.published is None:
                continue
            key = (spec.published, spec.property, spec.dimension, spec.sizes)
            if key not in seen:
                seen.add(key)
                warnings += _check_published(spec)
        return warnings

    def inputs(self, spec: PropertySpec) -> list[Input]:
        if spec.published is not None:
            return []
        from engine.properties.datasets import build_property_dataset, property_dataset_id

        datasets_dir = Path(spec.datasets_dir) if spec.datasets_dir else _default_datasets_dir()
        out = []
        for ds in _cell_datasets(spec):
            ident = property_dataset_id(ds.canonical())
            out.append(Input(f"properties:{ident}", ident, lambda ds=ds: build_property_dataset(ds, datasets_dir)))
        return out

    def run(self, spec: PropertySpec, ctx: RunContext) -> Outcome:
        return run_steps(self.steps(spec, ctx))

    def steps(self, spec: PropertySpec, ctx: RunContext) -> Generator[None, None, Outcome]:
        from engine.loop import device_fields, resolve_device, resolve_precision
        from engine.properties.study import cell_steps
        from engine.properties.training import build_model

        device = resolve_device(spec.device)
        params = sum(p.numel() for p in build_model(spec.pooling, spec.options()).parameters())
        trainer = spec.trainer()
        trained = None if trainer is None else ctx.run_dir_of(trainer.hash()) / "checkpoint.pt"
        start = {"params": params, "device": str(device), "property": spec.property, "dimension": spec.dimension}
        if spec.strategy != "standard":
            start["strategy"] = spec.strategy
        datasets_dir = Path(spec.datasets_dir) if spec.datasets_dir else _default_datasets_dir()
        metrics = yield from cell_steps(
            spec.property, spec.pooling, spec.dimension, spec.seed, spec.options(), ctx,
            datasets_dir=datasets_dir, graphs=spec.graphs, sizes=spec.sizes, negatives=spec.negatives,
            data_seed=spec.data_seed, published=Path(spec.published) if spec.published else None,
            device=device, trained=trained, run=spec.hash(), start=start, strategy=spec.strategy_options(),
        )  # fmt: skip
        ctx.log(f"{self.describe(spec)}: U score {metrics['u_score']:.4f}")
        extra = {**device_fields(device), "precision": resolve_precision(spec.precision, device)}
        return Outcome(metrics=metrics, params=params, extra=extra)

    def derived_tables(self, records: list[dict[str, Any]], metric: str) -> list[DerivedTable]:
        """The study's Table 2: per pooling and dimension, the mean over properties of the R score.

        U is first averaged over seeds per (pooling, property, dimension); R = U / mean U of the poolings present
        for that property and dimension (:mod:`engine.properties.scores`).
        """
        if metric != self.default_metric:
            return []
        from engine.properties.scores import mean_u, r_scores

        runs, kept = [], []
        for rec in records:
            axes, u = rec.get("axes") or {}, (rec.get("metrics") or {}).get("u_score")
            if isinstance(u, (int, float)) and math.isfinite(u) and all(k in axes for k in TABLE2_KEYS):
                runs.append((axes["pooling"], axes["property"], axes["dimension"], float(u)))
                kept.append(rec)
        if not runs:
            return []
        by_cell: dict[tuple[str, str], list[float]] = {}
        for (pooling, _, dimension), r in sorted(r_scores(mean_u(runs)).items()):
            by_cell.setdefault((pooling, dimension), []).append(r)
        values = {cell: tuple(rs) for cell, rs in by_cell.items()}
        tables = [DerivedTable(TABLE2, R_SCORE, "pooling", "dimension", values, "mean ± std over properties")]
        from engine.properties.definitions import CLASS_OF, PROPERTY_CLASSES, advice_line

        # The advice compares poolings as the seed trained them: standard runs only, R among those.
        standard = [run for run, rec in zip(runs, kept, strict=True) if (rec.get("axes") or {}).get("strategy") is None]
        by_class: dict[tuple[str, str], list[float]] = {}
        for (pooling, prop, _), r in sorted(r_scores(mean_u(standard)).items()):
            by_class.setdefault((pooling, CLASS_OF[prop]), []).append(r)
        advice = {cell: tuple(rs) for cell, rs in by_class.items()}
        best = {}
        for cls in PROPERTY_CLASSES:
            means = {p: sum(v) / len(v) for (p, c), v in advice.items() if c == cls}
            if means:
                best[cls] = max(means, key=means.get)
        if advice:
            line = advice_line(best, {p for p, _ in advice})
            stat = f"mean ± std over the class's properties x dimensions, standard runs; {line}"
            tables.append(DerivedTable(ADVICE, R_SCORE, "pooling", "property_class", advice, stat, ties=True))
        return tables

    def parse_preset(self, raw: dict[str, Any], where: str, path: Path | None = None) -> Preset:
        return parse_preset(raw, path)

    def grid(self, preset: Preset, placement: Placement, limit: int | None = None) -> list[PropertySpec]:
        return grid(preset, placement, limit)

    # -------------------------------------------------------------------------------- the New-experiment form

    def form_fields(self) -> tuple[FormField, ...]:
        from engine.properties.form import fields

        return fields()

    def preset_from_form(self, values: dict[str, Any]) -> dict[str, Any]:
        from engine.properties.form import preset_from_form

        return preset_from_form(values)

    def form_values(self, raw: dict[str, Any]) -> dict[str, Any]:
        from engine.properties.form import form_values

        return form_values(raw)

    # -------------------------------------------------------------------------------- cost and memory
    # A cell trains its epochs over its training graphs, each an n x n relation: ``epochs x graphs x n^2`` units,
    # at the seconds per unit of finished runs of its cell (same pooling, dimension and model), whatever their
    # property (its size n), graphs and epochs.

    def cost_cell(self, spec: PropertySpec) -> str:
        skip = ("seed", "epochs", "graphs", "data_seed", "lr", "property", "published")
        return json.dumps({k: v for k, v in spec.canonical().items() if k not in skip}, sort_keys=True, default=str)

    def cost_units(self, spec: PropertySpec) -> float | None:
        train = _cell_datasets(spec)
        return float(spec.epochs * spec.graphs * train[0].n * train[0].n)

    def cost_steps(self, spec: PropertySpec) -> int | None:
        return spec.epochs  # at least one batch an epoch (its split is known once the dataset is built)

    def memory(self, spec: PropertySpec) -> Any:
        """The cell's largest dataset build (every graph as an ``[n, n]`` array while it is generated); a
        published folder is read as it is."""
        from engine.memory import MemoryNeed, human
        from engine.properties.datasets import build_bytes

        if spec.published is not None:
            return None
        datasets = _cell_datasets(spec)
        cells = [ds.canonical() for ds in datasets]
        largest = max(cells, key=build_bytes)
        need = build_bytes(largest)
        detail = f"the largest dataset, {largest['property']} on n = {largest['n']} x {int(largest['graphs']):,} graphs"
        key = json.dumps(largest, sort_keys=True, default=str)
        hint = "lower the graphs per dataset (graphs in the preset)"
        what = f"{spec.property} {spec.dimension}"
        return MemoryNeed(what, "property datasets", need, f"{detail}, {human(need)}", hint, key)

    # -------------------------------------------------------------------------------- reference tables, optimal lines

    #: Table 2 of the property-suite paper (seed 001: mean R score per pooling and dimension), shipped as
    #: gaptui/references/properties.paper.csv.
    reference = "paper"

    def metric(self, key: str) -> Metric:
        # The R score of the derived Table 2, so that a reference of that table can name its metric.
        return R_SCORE if key == R_SCORE.key else super().metric(key)

    def optimal_line(self, derived: str | None) -> str:
        if derived == TABLE2:
            return "optimal dimension (largest best − worst spread)"
        if derived == ADVICE:
            return ""
        return "" if derived else "optimal property (largest best − worst spread)"


FAMILIES.register(Properties())


def _cell_datasets(spec: PropertySpec) -> list[Any]:
    """The datasets a property run's cell trains and tests on (:func:`engine.properties.study.cell_datasets`)."""
    from engine.properties.study import cell_datasets

    return cell_datasets(
        spec.property, spec.dimension, spec.graphs, spec.sizes, spec.negatives, spec.data_seed, spec.strategy_options()
    )
