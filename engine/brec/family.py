"""The ``brec`` task family: which pairs of BREC (Wang and Zhang, 2023) a model tells apart, by RPC.

Spec: :class:`engine.brec.spec.BrecSpec`, a model (or an exact ``1-wl``/``3-wl`` test) on the pairs of one
category. Data: the pairs shipped in ``engine/brec/data`` (:mod:`engine.brec.data`). Metric: ``accuracy``, the
share of the category's pairs distinguished (RPC, reliability check passed); ``distinguished`` and ``pairs``
count them. Tables: models x categories, the WL rows as training-free baselines; derived: BREC's own table
(Basic, Regular, Extension, CFI and the total, as the paper prints it), compared with the paper's 3-WL row.
gaptui's report adds BREC's table in counts with the reliability failures marked, and Kendall's tau between each
model's alignment accuracy and its BREC total (``gaptui/families/brec/report.py``).
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

from engine.alignment.preset import ROW_ORDER
from engine.brec.data import CATEGORY_KEYS, PAPER_PARTS, TOTAL, load_pairs
from engine.brec.preset import BrecPreset, grid, parse_preset
from engine.brec.spec import BrecSpec, model_label
from engine.brec.wl import WL_ROWS, wl_bytes
from engine.placement import datasets_folder
from engine.tasks.cost import CostModel
from engine.tasks.declarations import Axis, DerivedTable, Figure, Metric, References, TableLayout, Tunable
from engine.tasks.family import TaskFamily
from engine.tasks.form import FormModule
from engine.tasks.registry import FAMILIES
from engine.tasks.run import Outcome, RunContext
from engine.tasks.spec import Placement

#: The derived table in BREC's layout: the share of pairs distinguished per column of the paper's table.
PAPER_TABLE = "BREC's table: pairs distinguished per category of the paper"
#: The ``subset`` of runs that test every pair of their category.
ALL_PAIRS = "all pairs"
ACCURACY = Metric("accuracy", "pairs distinguished", True, "%")
#: Bytes a node of a training batch holds through the layers (activations kept for the backward pass).
_NODE_BYTES = 4 * 512
#: Row order: the exact tests, then the zoo as the alignment tables order it.
_ROW_ORDER = (*WL_ROWS, *ROW_ORDER)


def subset_of(pairs: int | None) -> str:
    """``all pairs``, or ``first N pairs`` of a run that tests the first ``pairs`` of its category."""
    if pairs is None:
        return ALL_PAIRS
    return "first pair" if pairs == 1 else f"first {pairs} pairs"


def datasets_dir(spec: BrecSpec) -> Path:
    """Where the exact rows' verdicts are cached: the grid's datasets folder (the worker's default without one)."""
    return datasets_folder(spec.datasets_dir)


class BrecCosts(CostModel):
    """A trained run costs its passes over the copies of its pairs, ``(epochs + 2) x 2q x`` the nodes of its pairs
    (the two extra passes: the test and the reliability check); an exact test ``n^3`` (3-WL) or ``n^2`` (1-WL) per
    pair. The seconds per unit come from finished runs of the same model and options, whatever their category."""

    def cell(self, spec: BrecSpec) -> str:
        skip = ("seed", "category", "pairs", "data_seed")
        return json.dumps({k: v for k, v in spec.canonical().items() if k not in skip}, sort_keys=True, default=str)

    def units(self, spec: BrecSpec) -> float | None:
        pairs = load_pairs(spec.category, spec.data, spec.pairs)
        if spec.is_wl:
            power = 3 if spec.model == "3-wl" else 2
            return float(sum(p.nodes**power for p in pairs))
        return float((spec.epochs + 2) * 2 * spec.relabellings * sum(p.nodes for p in pairs))

    def steps(self, spec: BrecSpec) -> int | None:
        if spec.is_wl:
            return 0
        pairs = len(load_pairs(spec.category, spec.data, spec.pairs))
        return pairs * math.ceil(2 * spec.relabellings / spec.batch_size)  # one pass each at least (early stop)

    def label(self, spec: BrecSpec) -> str:
        return model_label(spec)

    def memory(self, spec: BrecSpec) -> Any:
        """3-WL: its arrays on the largest pair (373 MB at CFI's 198 nodes); a trained run: a batch of its largest
        graphs through the model (attention models add their ``n x n`` scores per layer) and the copies."""
        from engine.memory import MemoryNeed, human

        nodes = max(p.nodes for p in load_pairs(spec.category, spec.data, spec.pairs))
        if spec.is_wl:
            need = wl_bytes(spec.model, nodes)
            detail = f"{'2-FWL arrays of 2 n^3 integers' if spec.model == '3-wl' else 'colour rows'} at n = {nodes}"
            hint = f"leave {spec.model} out of the preset's wl, or lower pairs below the largest {spec.category} pairs"
            what = f"{spec.model} on {spec.category} (pairs up to {nodes} nodes)"
            return MemoryNeed(what, f"brec {spec.model}", need, detail, hint, f"{spec.model}:{nodes}")
        from engine.alignment.features import feature_dim
        from engine.models import MODELS

        graphs = min(spec.batch_size, 2 * spec.relabellings)  # a batch never holds more than the copies
        batch = graphs * nodes * _NODE_BYTES
        if ":" not in spec.model and spec.model in MODELS:
            cls = MODELS.get(spec.model)
            batch += int(cls.batch_bytes(cls.resolve_options(spec.model_options()), graphs, nodes))
        copies = 4 * spec.relabellings * nodes * (4 * feature_dim(spec.features) + 64)
        need = batch + copies
        what = f"{model_label(spec)} on {spec.category} (batch {graphs} graphs of up to {nodes} nodes)"
        detail = f"training batch about {human(batch)}, relabelled copies about {human(copies)}"
        key = json.dumps([model_label(spec), spec.model_kwargs, graphs, nodes, spec.features], default=str)
        return MemoryNeed(what, "brec pairs", need, detail, "lower batch_size in the preset's [run]", key)


class Brec(TaskFamily):
    name = "brec"
    title = "BREC: which of 400 1-WL-indistinguishable pairs a model tells apart (RPC, Wang and Zhang 2023)"
    spec_type = BrecSpec
    metrics = (
        ACCURACY,
        Metric("distinguished", "distinguished pairs", True),
        Metric("pairs", "pairs tested", True),
        Metric("reliability_failures", "reliability failures", False),
        Metric("t2_median", "median T^2 of the pairs", True),
        Metric("reliability_t2_max", "largest reliability T^2", False),
        Metric("train_loss", "train loss (last pair)", False),
    )
    default_metric = "accuracy"
    axes = (
        # The pairs a run tested: its category's whole, or its first few (a preset's ``pairs``): one table each, so
        # a part of a category is never read as the whole (nor compared with the paper's table).
        Axis("subset", "pairs", order=(ALL_PAIRS,), of_spec=lambda raw: subset_of(raw.get("pairs"))),
        Axis("model", "model", order=_ROW_ORDER),
        Axis("category", "category", order=CATEGORY_KEYS),
        # Not a run's axis: the columns of BREC's own table (the derived table).
        Axis("part", "BREC category", order=(*PAPER_PARTS, TOTAL)),
    )
    table = TableLayout(group="subset", rows="model", columns="category", baselines=WL_ROWS)
    # Heatmaps: a zoo of 14 rows and the exact ones stays legible in cells (grouped bars run out of styles).
    figures = (Figure("heatmap"), Figure("heatmap", derived=True))
    tunable = {
        "lr": Tunable("lr", "float", {"log": [1e-5, 1e-2]}, "Adam learning rate of each pair's model"),
        "weight_decay": Tunable("weight_decay", "float", {"log": [1e-6, 1e-2]}, "Adam weight decay"),
        "epochs": Tunable("epochs", "int", [10, 20, 40], "passes over a pair's copies (early stop aside)"),
    }
    #: BREC's published table (the 3-WL row and the 1-WL bound), shipped as gaptui/references/brec.paper.csv.
    references = References("paper")
    form = FormModule("engine.brec.form")
    cost_model = BrecCosts
    import_roles = {"models": "model", "model_options": "model"}
    report = "gaptui.families.brec.report"

    def record_axes(self, spec: BrecSpec) -> dict[str, Any]:
        return {"subset": subset_of(spec.pairs), "model": model_label(spec), "category": spec.category}

    def is_baseline(self, spec: BrecSpec) -> bool:
        return spec.is_wl

    def describe(self, spec: BrecSpec) -> str:
        pairs = "" if spec.pairs is None else f" (first {'pair' if spec.pairs == 1 else f'{spec.pairs} pairs'})"
        seed = "" if spec.is_wl else f" seed {spec.seed}"
        return f"{model_label(spec)} on {spec.category}{pairs}{seed}"

    def check(self, specs: list[BrecSpec]) -> list[str]:
        """Once per plan: every category's file of every data folder is read (a bad file is one error line)."""
        for data, cat in sorted({(s.data or "", s.category) for s in specs}):
            load_pairs(cat, data or None)
        return []

    def steps(self, spec: BrecSpec, ctx: RunContext) -> Generator[None, None, Outcome]:
        if spec.is_wl:
            return self._wl_run(spec, ctx)
        return (yield from self._trained_run(spec, ctx))

    def _wl_run(self, spec: BrecSpec, ctx: RunContext) -> Outcome:
        from engine.brec.data import data_digest
        from engine.brec.wl import verdicts

        pairs = load_pairs(spec.category, spec.data, spec.pairs)
        ctx.emit("start", run=spec.run_id(), model=spec.model, params=0, category=spec.category, pairs=len(pairs),
                 epochs=0, steps_per_epoch=0, resumed_from=None, pid=os.getpid())  # fmt: skip
        self.costs.memory(spec).check()
        started = time.perf_counter()

        def progress(v: Any, done: int) -> None:
            verdict = "distinguished" if v.distinguished else "not distinguished"
            ctx.log(f"{spec.model} pair {v.id}: {verdict} after {v.rounds} rounds ({v.seconds:.2f}s)")

        found = verdicts(spec.model, pairs, data_digest(spec.data), datasets_dir(spec), progress)
        count = sum(v.distinguished for v in found)
        metrics = {
            "accuracy": count / len(found) if found else 0.0,
            "distinguished": float(count),
            "pairs": float(len(found)),
            "reliability_failures": 0.0,
        }
        ctx.emit("eval", epoch=0, seconds=round(time.perf_counter() - started, 3), **metrics)
        ctx.log(f"{spec.model} on {spec.category}: {count} of {len(found)} pairs distinguished")
        results = [{"id": v.id, **v.to_dict()} for v in found]
        return Outcome(metrics=metrics, params=0, extra={"model": spec.model, "pairs": results, "device": "cpu"})

    def _trained_run(self, spec: BrecSpec, ctx: RunContext) -> Generator[None, None, Outcome]:
        from engine.brec.training import PairTraining
        from engine.hardware import device_fields, resolve_device
        from engine.loop import epoch_steps
        from engine.models import count_parameters

        device = resolve_device(spec.device)
        pairs = load_pairs(spec.category, spec.data, spec.pairs)
        task = PairTraining(spec, pairs, device)
        result = yield from epoch_steps(task, ctx, spec.run_id(), spec.run_options())
        metrics = {**result.metrics, **task.metrics()}
        ctx.log(f"{self.describe(spec)}: {int(metrics['distinguished'])} of {len(pairs)} pairs distinguished, "
                f"{int(metrics['reliability_failures'])} reliability failures")  # fmt: skip
        extra = {**device_fields(device), "precision": result.precision, "threshold": task.threshold}
        extra |= {"width": task.width, "pairs": task.results}
        return Outcome(metrics=metrics, params=count_parameters(task.model), extra=extra)

    def derived_tables(self, records: list[dict[str, Any]], metric: str) -> list[DerivedTable]:
        """BREC's own table: per model and seed, the share of the pairs distinguished in each of the paper's
        categories (Regular = the four regular ones) and over all of them; a column only where every category it
        holds has a finished run of that seed (a WL row's one run stands for every seed)."""
        if metric != self.default_metric:
            return []
        counts: dict[tuple[str, str, Any], dict[str, tuple[float, float]]] = {}
        for rec in records:
            axes, values = rec.get("axes") or {}, rec.get("metrics") or {}
            found, tested = values.get("distinguished"), values.get("pairs")
            if not isinstance(found, (int, float)) or not isinstance(tested, (int, float)) or not tested:
                continue
            seed = None if axes.get("model") in WL_ROWS else rec.get("seed")
            key = (str(axes.get("subset", ALL_PAIRS)), str(axes.get("model")), seed)
            counts.setdefault(key, {})[str(axes.get("category"))] = (float(found), float(tested))
        shares: dict[str, dict[tuple[str, Any], list[float]]] = {}
        for (subset, row, _), by_category in sorted(counts.items(), key=lambda kv: tuple(map(str, kv[0]))):
            for part, members in {**PAPER_PARTS, TOTAL: CATEGORY_KEYS}.items():
                if all(m in by_category for m in members):
                    found = sum(by_category[m][0] for m in members)
                    tested = sum(by_category[m][1] for m in members)
                    shares.setdefault(subset, {}).setdefault((row, part), []).append(found / tested)
        statistic = "mean ± std over seeds"
        return [
            DerivedTable(
                PAPER_TABLE if subset == ALL_PAIRS else f"{PAPER_TABLE} ({subset} of each)",
                ACCURACY,
                "model",
                "part",
                {cell: tuple(v) for cell, v in values.items()},
                statistic,
                ties=True,
                baselines=WL_ROWS,
            )  # fmt: skip
            for subset, values in sorted(shares.items(), key=lambda kv: kv[0] != ALL_PAIRS)
        ]

    def parse_preset(self, raw: dict[str, Any], where: str, path: Path | None = None) -> BrecPreset:
        return parse_preset(raw, path, where)

    def grid(self, preset: BrecPreset, placement: Placement, limit: int | None = None) -> list[BrecSpec]:
        return grid(preset, placement, limit)


FAMILIES.register(Brec())
