"""The ``properties`` task family: global poolings compared on the relation property suite (the property benchmark).

Spec: :class:`PropertySpec`, one cell (property, pooling, dimension, seed) of the study. A ``robustness`` cell
depends on the ``generalisation`` cell with the same property, pooling, seed and options and tests that cell's
trained model on GraphPerturb (the two dimensions share one training). Data: the cached datasets of
:mod:`engine.properties.datasets`, or a folder in the published CSV layout (``published``). Metric: ``u_score``
(size-weighted accuracy over the test sizes). Tables: one per dimension, poolings x properties; the study's
Table 2 (poolings x dimensions, mean R score) is :meth:`Properties.summary`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Generator, Mapping
from pathlib import Path
from typing import Any

from engine.placement import datasets_folder
from engine.properties.definitions import CLASS_OF, PROPERTY_CLASSES, PROPERTY_NAMES
from engine.properties.preset import DIMENSION_ORDER, Preset, grid, parse_preset
from engine.properties.scores import POOLING_LABELS
from engine.properties.spec import PropertySpec, cell_datasets_of
from engine.tasks.cost import CostModel
from engine.tasks.declarations import Axis, DerivedTable, Figure, Metric, References, Setting, TableLayout, Tunable
from engine.tasks.family import TaskFamily
from engine.tasks.form import FormModule
from engine.tasks.registry import FAMILIES
from engine.tasks.run import Input, Outcome, RunContext
from engine.tasks.spec import Placement

#: The derived table of the study (Table 2) and its metric: U relative to the mean of the poolings compared.
TABLE2 = "Table 2: mean R score"
TABLE2_KEYS = ("pooling", "property", "dimension")
#: The derived table of pooling advice (the property benchmark, section 4.3): mean R per property class.
ADVICE = "Pooling advice: mean R score per property class"
R_SCORE = Metric("r_score", "R score", higher_is_better=True)


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


class PropertyCosts(CostModel):
    """A cell trains its epochs over its training graphs, each an n x n relation: ``epochs x graphs x n^2`` units, at
    the seconds per unit of finished runs of its cell (same pooling, dimension and model), whatever their property
    (its size n), graphs and epochs."""

    def cell(self, spec: PropertySpec) -> str:
        skip = ("seed", "epochs", "graphs", "data_seed", "lr", "property", "published")
        return json.dumps({k: v for k, v in spec.canonical().items() if k not in skip}, sort_keys=True, default=str)

    def units(self, spec: PropertySpec) -> float | None:
        train = cell_datasets_of(spec)
        return float(spec.epochs * spec.graphs * train[0].n * train[0].n)

    def steps(self, spec: PropertySpec) -> int | None:
        return spec.epochs  # at least one batch an epoch (its split is known once the dataset is built)

    def memory(self, spec: PropertySpec) -> Any:
        """The cell's largest dataset build (every graph as an ``[n, n]`` array while it is generated); a
        published folder is read as it is."""
        from engine.memory import MemoryNeed, human
        from engine.properties.datasets import build_bytes

        if spec.published is not None:
            return None
        datasets = cell_datasets_of(spec)
        cells = [ds.canonical() for ds in datasets]
        largest = max(cells, key=build_bytes)
        need = build_bytes(largest)
        detail = f"the largest dataset, {largest['property']} on n = {largest['n']} x {int(largest['graphs']):,} graphs"
        key = json.dumps(largest, sort_keys=True, default=str)
        hint = "lower the graphs per dataset (graphs in the preset)"
        what = f"{spec.property} {spec.dimension}"
        return MemoryNeed(what, "property datasets", need, f"{detail}, {human(need)}", hint, key)


def property_class_of(spec: Mapping[str, Any]) -> str | None:
    """The class of a run's property (``basic``, ``function``, ``combined``), from its spec dict."""
    return CLASS_OF.get(str(spec.get("property")))


class Properties(TaskFamily):
    name = "properties"
    title = "relation properties: global poolings on 16 properties, 3 dimensions (the property benchmark)"
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
        # A property's class (the property benchmark's Table 1), the columns of the pooling-advice table; records
        # filed before it was recorded read it from their spec.
        Axis(
            "property_class",
            "property class",
            order=tuple(PROPERTY_CLASSES),
            of_spec=property_class_of,
            derived=True,
        ),
    )
    table = TableLayout(group="dimension", rows="pooling", columns="property")
    protocol = (
        Setting("epochs", "epochs", ("epochs",)),
        Setting("batch", "batch", ("batch_size",)),
        Setting("graphs", "graphs", ("graphs",)),
    )
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
    #: Table 2 of the property benchmark (mean R score per pooling and dimension), shipped as
    #: gaptui/references/properties.paper.csv.
    references = References("paper")
    optimal = {
        None: "optimal property (largest best − worst spread)",
        TABLE2: "optimal dimension (largest best − worst spread)",
    }
    form = FormModule("engine.properties.form")
    cost_model = PropertyCosts

    def metric(self, key: str) -> Metric:
        # The R score of the derived Table 2, so that a reference of that table can name its metric.
        return R_SCORE if key == R_SCORE.key else super().metric(key)

    def record_axes(self, spec: PropertySpec) -> dict[str, Any]:
        # A strategy other than standard is part of the row (pooling/strategy), so the tables and Table 2 keep the
        # strategies apart, and `strategy` names it alone; a standard run's axes are those it always had.
        axes = {"dimension": spec.dimension, "pooling": spec.pooling, "property": spec.property}
        axes["property_class"] = CLASS_OF.get(spec.property)
        if spec.strategy != "standard":
            axes.update(pooling=f"{spec.pooling}/{spec.strategy}", strategy=spec.strategy)
        return axes

    def dependencies(self, spec: PropertySpec) -> tuple[str, ...]:
        trainer = spec.trainer()
        return () if trainer is None else (trainer.run_id(),)

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

        datasets_dir = datasets_folder(spec.datasets_dir)
        out = []
        for ds in cell_datasets_of(spec):
            ident = property_dataset_id(ds.canonical())
            out.append(Input(f"properties:{ident}", ident, lambda ds=ds: build_property_dataset(ds, datasets_dir)))
        return out

    def steps(self, spec: PropertySpec, ctx: RunContext) -> Generator[None, None, Outcome]:
        from engine.hardware import device_fields, resolve_device, resolve_precision
        from engine.properties.study import cell_steps
        from engine.properties.training import build_model

        device = resolve_device(spec.device)
        params = sum(p.numel() for p in build_model(spec.pooling, spec.options()).parameters())
        trainer = spec.trainer()
        trained = None if trainer is None else ctx.run_dir_of(trainer.run_id()) / "checkpoint.pt"
        start = {"params": params, "device": str(device), "property": spec.property, "dimension": spec.dimension}
        if spec.strategy != "standard":
            start["strategy"] = spec.strategy
        datasets_dir = datasets_folder(spec.datasets_dir)
        metrics = yield from cell_steps(
            spec.property, spec.pooling, spec.dimension, spec.seed, spec.options(), ctx,
            datasets_dir=datasets_dir, graphs=spec.graphs, sizes=spec.sizes, negatives=spec.negatives,
            data_seed=spec.data_seed, published=Path(spec.published) if spec.published else None,
            device=device, trained=trained, run=spec.run_id(), start=start, strategy=spec.strategy_options(),
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
        from engine.properties.definitions import advice_line

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
        return parse_preset(raw, path, where)

    def grid(self, preset: Preset, placement: Placement, limit: int | None = None) -> list[PropertySpec]:
        return grid(preset, placement, limit)


FAMILIES.register(Properties())
