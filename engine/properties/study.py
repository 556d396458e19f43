"""One cell of the property study: (property, pooling, dimension, seed) -> U score.

``generalisation`` and ``sensitivity`` cells train (on GraphRandom / GraphPerturb at the base size) and test; a
``robustness`` cell trains nothing: it tests the model of the ``generalisation`` cell with the same property,
pooling, seed and options (its checkpoint) on GraphPerturb, so the two dimensions share one training, as the
study defines them. A training strategy (:mod:`engine.properties.strategies`) changes what a trained cell sees
(and, for ``finetune_perturb``, which cell trains: :func:`~engine.properties.strategies.trained_by`).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

import torch

from engine.errors import GaptuiError, unknown
from engine.properties.datasets import PropertyDatasetSpec
from engine.properties.definitions import get_property, suite_sizes
from engine.properties.scores import DIMENSIONS, u_score
from engine.properties.strategies import STANDARD, Strategy, test_sizes, train_sizes, trained_by
from engine.properties.training import (
    Emit,
    TrainOptions,
    evaluate_model,
    load_study_data,
    load_trained,
    train_steps,
)
from engine.tasks.run import RunContext, run_steps

#: A dimension's cell trains when it has no model of another cell to reuse (the standard strategy's; see
#: :func:`~engine.properties.strategies.trained_by` for the others).
TRAINED_BY = trained_by("standard")


def check_dimension(dimension: str) -> str:
    if dimension not in DIMENSIONS:
        raise unknown("dimension", dimension, DIMENSIONS)
    return dimension


def cell_datasets(
    prop: str,
    dimension: str,
    graphs: int,
    sizes: int | None,
    negatives: str | None,
    data_seed: int,
    strategy: Strategy = STANDARD,
) -> list[PropertyDatasetSpec]:
    """The cached datasets a cell reads: its training family at the sizes it trains on (the base size; base ..
    base + k for ``progressive``; GraphRandom and GraphPerturb at the base for ``finetune_perturb``), its test
    family above them."""
    train_family, test_family = DIMENSIONS[check_dimension(dimension)]
    name = get_property(prop).name
    all_sizes = suite_sizes(name)[:sizes]
    trained = train_sizes(all_sizes, strategy.name, strategy.progressive_k)
    families = ("random", "perturb") if strategy.name == "finetune_perturb" else (train_family,)
    out = [PropertyDatasetSpec(name, n, f, graphs, negatives, data_seed) for f in families for n in trained]
    tested = test_sizes(all_sizes, strategy.name, strategy.progressive_k)
    out += [PropertyDatasetSpec(name, n, test_family, graphs, negatives, data_seed) for n in tested]
    return out


def cell_steps(
    prop: str,
    pooling: str,
    dimension: str,
    seed: int,
    options: TrainOptions,
    ctx: RunContext,
    *,
    datasets_dir: Path,
    graphs: int,
    sizes: int | None,
    negatives: str | None,
    data_seed: int,
    published: Path | None = None,
    device: torch.device | str = "cpu",
    trained: Path | None = None,
    run: str = "",
    start: dict[str, Any] | None = None,
    strategy: Strategy = STANDARD,
) -> Generator[None, None, dict[str, Any]]:
    """Train in the shared loop, yielding after each epoch (or load ``trained``, the checkpoint of the cell named
    by :data:`TRAINED_BY`), then test one cell; its checkpoint is in ``ctx.run_dir``.

    Returns ``u_score``, ``train_acc``, ``train_loss``, ``train_n`` and ``acc_n<n>`` per test size; emits ``start``
    (with the ``start`` fields), ``epoch`` events while training and one ``eval`` event (``accuracy`` per size,
    ``u_score``, ``seconds``). The seeds of a pack read the cell's data once.
    """
    train_family, test_family = DIMENSIONS[check_dimension(dimension)]
    where = [prop, train_family, test_family, str(datasets_dir), graphs, sizes, negatives, data_seed, str(published)]
    where += [list(strategy.key())] if strategy != STANDARD else []
    key = "properties-data:" + json.dumps(where)
    if key not in ctx.shared:
        ctx.shared[key] = load_study_data(
            prop,
            train_family,
            datasets_dir=datasets_dir,
            graphs=graphs,
            sizes=sizes,
            negatives=negatives,
            data_seed=data_seed,
            published=published,
            test_families=(test_family,),
            strategy=strategy,
        )
    data = ctx.shared[key]
    uses = trained_by(strategy.name)
    start = {"model": pooling, **(start or {})}
    if dimension in uses:
        if trained is None:
            raise GaptuiError(f"a {dimension} cell tests the model of its {uses[dimension]} cell: none given")
        ctx.emit("start", run=run, **start, epochs=options.epochs, pid=os.getpid())
        model = load_trained(trained, pooling, options, device)
        last = {"train_loss": float("nan"), "train_acc": float("nan")}
        result = trained.parent / "result.json"
        if result.exists():
            metrics = json.loads(result.read_text()).get("metrics", {})
            last = {k: float(metrics.get(k, float("nan"))) for k in last}
    else:
        model, last = yield from train_steps(
            data.train, pooling, options, seed, ctx, device=device, run=run, start=start,
            strategy=strategy, more_train=data.more_train, check=get_property(prop),
        )  # fmt: skip
    t0 = time.perf_counter()
    accuracy = evaluate_model(model, data.tests[test_family], device)
    u = u_score(accuracy)
    ctx.emit("eval", accuracy=accuracy, u_score=u, seconds=time.perf_counter() - t0)
    train_n = {"train_n": data.train.n}
    if strategy.name == "progressive":
        train_n["train_n_max"] = max(g.n for g in (data.train, *data.more_train))
    return {"u_score": u, **last, **train_n, **{f"acc_n{n}": acc for n, acc in accuracy.items()}}


def run_cell(
    prop: str,
    pooling: str,
    dimension: str,
    seed: int,
    options: TrainOptions,
    emit: Emit,
    *,
    checkpoint: Path | None = None,
    should_stop: Callable[[], bool] = lambda: False,
    **cell: Any,
) -> dict[str, Any]:
    """:func:`cell_steps` alone, outside a worker, with its checkpoint at ``checkpoint`` (a temporary folder's
    when None); ``cell``: the keyword arguments of :func:`cell_steps`."""
    with tempfile.TemporaryDirectory() if checkpoint is None else contextlib.nullcontext(checkpoint.parent) as out:
        ctx = RunContext(Path(out), emit, lambda _text: None, should_stop)
        return run_steps(cell_steps(prop, pooling, dimension, seed, options, ctx, **cell))
