"""One cell of the property study: (property, pooling, dimension, seed) -> U score.

``generalisation`` and ``sensitivity`` cells train (on GraphRandom / GraphPerturb at the base size) and test; a
``robustness`` cell trains nothing: it tests the model of the ``generalisation`` cell with the same property,
pooling, seed and options (its checkpoint) on GraphPerturb, so the two dimensions share one training, as the
study defines them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from engine.errors import GaptuiError, unknown
from engine.properties.datasets import PropertyDatasetSpec
from engine.properties.definitions import get_property, suite_sizes
from engine.properties.scores import DIMENSIONS, u_score
from engine.properties.training import (
    Emit,
    TrainOptions,
    evaluate_model,
    load_study_data,
    load_trained,
    train_model,
)

#: A dimension's cell trains when it has no model of another cell to reuse.
TRAINED_BY = {"robustness": "generalisation"}


def check_dimension(dimension: str) -> str:
    if dimension not in DIMENSIONS:
        raise unknown("dimension", dimension, DIMENSIONS)
    return dimension


def cell_datasets(
    prop: str, dimension: str, graphs: int, sizes: int | None, negatives: str | None, data_seed: int
) -> list[PropertyDatasetSpec]:
    """The cached datasets a cell reads: its training family at the base size, its test family above."""
    train_family, test_family = DIMENSIONS[check_dimension(dimension)]
    name = get_property(prop).name
    all_sizes = suite_sizes(name)[:sizes]
    out = [PropertyDatasetSpec(name, all_sizes[0], train_family, graphs, negatives, data_seed)]
    out += [PropertyDatasetSpec(name, n, test_family, graphs, negatives, data_seed) for n in all_sizes[1:]]
    return out


def run_cell(
    prop: str,
    pooling: str,
    dimension: str,
    seed: int,
    options: TrainOptions,
    emit: Emit,
    *,
    datasets_dir: Path,
    graphs: int,
    sizes: int | None,
    negatives: str | None,
    data_seed: int,
    published: Path | None = None,
    device: torch.device | str = "cpu",
    checkpoint: Path | None = None,
    trained: Path | None = None,
    should_stop: Callable[[], bool] = lambda: False,
) -> dict[str, Any]:
    """Train (or load ``trained``, the checkpoint of the cell named by :data:`TRAINED_BY`) and test one cell.

    Returns ``u_score``, ``train_acc``, ``train_loss``, ``train_n`` and ``acc_n<n>`` per test size; emits
    ``epoch`` events while training and one ``eval`` event (``accuracy`` per size, ``u_score``, ``seconds``).
    """
    train_family, test_family = DIMENSIONS[check_dimension(dimension)]
    data = load_study_data(
        prop,
        train_family,
        datasets_dir=datasets_dir,
        graphs=graphs,
        sizes=sizes,
        negatives=negatives,
        data_seed=data_seed,
        published=published,
        test_families=(test_family,),
    )
    if dimension in TRAINED_BY:
        if trained is None:
            raise GaptuiError(f"a {dimension} cell tests the model of its {TRAINED_BY[dimension]} cell: none given")
        model = load_trained(trained, pooling, options, device)
        last = {"train_loss": float("nan"), "train_acc": float("nan")}
        result = trained.parent / "result.json"
        if result.exists():
            metrics = json.loads(result.read_text()).get("metrics", {})
            last = {k: float(metrics.get(k, float("nan"))) for k in last}
    else:
        model, last = train_model(
            data.train, pooling, options, seed, emit, device=device, checkpoint=checkpoint, should_stop=should_stop
        )
    t0 = time.perf_counter()
    accuracy = evaluate_model(model, data.tests[test_family], device)
    u = u_score(accuracy)
    emit("eval", accuracy=accuracy, u_score=u, seconds=time.perf_counter() - t0)
    return {"u_score": u, **last, "train_n": data.train.n, **{f"acc_n{n}": acc for n, acc in accuracy.items()}}
