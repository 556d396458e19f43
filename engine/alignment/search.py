"""Alignment runs that train nothing: the Laplacian baseline, the solvers, and search on top of a trained model.

Each scores the validation pairs of its dataset and reports what a trained run reports (:func:`final_metrics`):
the LAP accuracy and, where it has a similarity, argmax and top-k accuracies; ``val_solved``, ``val_edge_overlap``
and ``val_orbit_acc`` (:mod:`engine.alignment.pair_metrics`); the dataset's ceilings (``val_orbit_ceiling``,
``val_wl_ceiling``: :mod:`engine.alignment.symmetry`); a solver also its ``seconds_per_pair``. The per-pair values go
to ``val_pairs.csv`` in the run folder. A trained run reports the same through :func:`final_metrics` too.
"""

from __future__ import annotations

import os
import time
from typing import Any

from engine.alignment.pair_metrics import PairMetrics, pair_metrics
from engine.evaluation import AlignmentScores
from engine.pairs import PairSplit
from engine.tasks.run import Outcome

#: The per-pair file of a run folder.
PAIRS_FILE = "val_pairs.csv"


def symmetry_of(run: Any, dataset: Any) -> dict[str, Any]:
    """The dataset's symmetry (:func:`engine.alignment.symmetry.dataset_symmetry`), once per worker process."""
    from engine.alignment.symmetry import dataset_symmetry

    key = f"alignment-symmetry:{dataset.id}"
    if key not in run.ctx.shared:
        run.ctx.shared[key] = dataset_symmetry(dataset, run.ctx.log)
    return run.ctx.shared[key]  # type: ignore[no-any-return]


def ceiling_metrics(symmetry: dict[str, Any]) -> dict[str, float]:
    """The validation split's ceilings as run metrics."""
    stats = symmetry["stats"]["val"]
    ceilings = {"val_orbit_ceiling": stats["orbit_ceiling"]}
    if "wl_ceiling" in stats:  # absent where 1-WL did not settle within its budget
        ceilings["val_wl_ceiling"] = stats["wl_ceiling"]
    return ceilings


def structure(split: PairSplit, scores: AlignmentScores, symmetry: dict[str, Any], seconds: Any = None) -> PairMetrics:
    """The per-pair metrics of ``scores``' matchings on ``split`` (the LAP solved once, by the evaluator)."""
    return pair_metrics(split, scores.assignment, symmetry["val"].orbits, seconds)


def scores_metrics(scores: AlignmentScores, similarity: bool) -> dict[str, float]:
    """``val_lap_acc`` and, for a similarity, ``val_argmax_acc`` and ``val_top{k}_acc``."""
    from engine.alignment.training import metrics_of

    metrics = metrics_of(scores, float("nan"))
    metrics.pop("val_loss")
    if not similarity:  # a permutation has no argmax or ranking of its own
        metrics = {"val_lap_acc": metrics["val_lap_acc"]}
    return metrics


def write_pairs(run: Any, pairs: PairMetrics) -> None:
    from engine.files import atomic_write_text

    atomic_write_text(run.ctx.run_dir / PAIRS_FILE, pairs.csv_text())


def reference_run(run: Any, dataset: Any) -> Outcome:
    """The Laplacian baseline or a solver on the validation pairs (``run``: an
    :class:`engine.alignment.run.AlignmentRun`)."""
    from engine.alignment.solvers import SOLVERS, score_split, solver_options
    from engine.alignment.spec import LAPLACIAN

    spec, ctx = run.spec, run.ctx
    laplacian = spec.model == LAPLACIAN
    k = run.out_dim(dataset) if laplacian else 0
    val = dataset.split("val")
    _emit_start(run, dataset, spec.model, len(val), width=k)
    t0 = time.perf_counter()
    metrics: dict[str, float] = {}
    if len(val):  # without validation pairs there is no metric: it stays missing, never a 0 % score
        seconds = None
        if laplacian:
            from engine.laplacian import laplacian_scores

            scores = laplacian_scores(val, k=k, ks=spec.topk)
        else:
            options = solver_options(spec.model, spec.model_kwargs, "run spec")
            scores, seconds = score_split(val, spec.model, options, ks=spec.topk)
        pairs = structure(val, scores, symmetry_of(run, dataset), seconds)
        similarity = laplacian or SOLVERS[spec.model].similarity
        metrics = {**scores_metrics(scores, similarity), **pairs.summary()}
        ctx.emit("eval", epoch=0, seconds=round(time.perf_counter() - t0, 3), **metrics)
        write_pairs(run, pairs)
        metrics |= ceiling_metrics(symmetry_of(run, dataset))
    what = f"laplacian baseline (k={k})" if laplacian else f"solver {spec.model}"
    ctx.log(f"{what}: val LAP accuracy {metrics.get('val_lap_acc', float('nan')):.4f}")
    return _outcome(run, dataset, metrics, params=0, width=k)


def decoder_run(run: Any, dataset: Any) -> Outcome:
    """Search on top of a model: the trained run this spec decodes (its dependency) matches each validation pair
    by its LAP, and FAQ starts from that matching."""
    from engine.alignment.solvers import FaqOptions, score_split
    from engine.gape.embed import load_frozen

    spec, ctx = run.spec, run.ctx
    parent = spec.undecoded()
    frozen = load_frozen(ctx.run_dir_of(parent.run_id()))
    val = dataset.split("val")
    label = f"{spec.model}+{spec.decoder}"
    params = sum(p.numel() for p in frozen.model.parameters())
    _emit_start(run, dataset, label, len(val), width=frozen.out_dim, params=params)
    t0 = time.perf_counter()
    metrics: dict[str, float] = {}
    if len(val):
        model_scores = model_lap(frozen, val, spec.batch_size, spec.topk)
        scores, seconds = score_split(val, "faq", FaqOptions(), ks=spec.topk, starts=model_scores.assignment)
        pairs = structure(val, scores, symmetry_of(run, dataset), seconds)
        metrics = {**scores_metrics(scores, False), **pairs.summary(), "val_model_lap_acc": model_scores.lap_acc}
        ctx.emit("eval", epoch=0, seconds=round(time.perf_counter() - t0, 3), **metrics)
        write_pairs(run, pairs)
        metrics |= ceiling_metrics(symmetry_of(run, dataset))
    ctx.log(
        f"{label} (from run {parent.run_id()[:12]}): the model's LAP "
        f"{metrics.get('val_model_lap_acc', float('nan')):.4f}, then FAQ {metrics.get('val_lap_acc', float('nan')):.4f}"
    )
    return _outcome(run, dataset, metrics, params=params, width=frozen.out_dim)


def model_lap(frozen: Any, split: PairSplit, batch_size: int, ks: Any) -> AlignmentScores:
    """A frozen model's scores on ``split`` exactly as its run evaluated them (the same batches of pairs, so a
    model normalising over a whole batch sees the same batches; the LAP's matchings kept)."""
    from engine.alignment.training import PairTensors, evaluate
    from engine.evaluation import LapEvaluator

    data = PairTensors(split, frozen.device, features=frozen.features)
    with LapEvaluator(ks=ks) as evaluator:
        return evaluate(frozen.model, data, batch_size, evaluator, frozen.features)[0]


def _emit_start(run: Any, dataset: Any, model: str, pairs: int, *, width: int, params: int = 0) -> None:
    run.ctx.emit(
        "start",
        run=run.spec.run_id(),
        model=model,
        params=params,
        width=width,
        device="cpu",
        dataset=dataset.id,
        n_train=0,
        n_val=pairs,
        epochs=0,
        steps_per_epoch=0,
        resumed_from=None,
        pid=os.getpid(),
    )


def _outcome(run: Any, dataset: Any, metrics: dict[str, float], *, params: int, width: int) -> Outcome:
    from engine.hardware import device_fields, resolve_device

    spec = run.spec
    extra = {**device_fields(resolve_device(spec.device)), "dataset": dataset.id, "model": spec.model}
    extra |= {"width": width, "epochs": 0}
    extra["dataset_seed"] = spec.dataset.get("seed", 0)
    if spec.decoder:
        extra["decoder"] = spec.decoder
        extra["decodes"] = spec.undecoded().run_id()
    return Outcome(metrics=metrics, params=params, extra=extra)
