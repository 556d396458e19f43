"""Training and evaluation of one (property, pooling, seed, training family) run of the property study.

AdamW (lr 1e-3), batch 64, 20 epochs, binary cross-entropy on the logit of :class:`IDGNNFast`; accuracy at a 0.5
probability threshold. The model trains on the base size of ``train_family`` and is tested at every larger size
of the test families of its dimensions (:mod:`engine.properties.scores`): a GraphRandom run reports
generalisation and robustness, a GraphPerturb run sensitivity.

Data come from the cache (built on demand, :mod:`engine.properties.datasets`) or, with ``published`` set, from a
folder in the published CSV layout (:mod:`engine.properties.published`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from engine.errors import GaptuiError, unknown
from engine.properties.backbone import IDGNNFast
from engine.properties.datasets import FAMILIES, GRAPHS_PER_DATASET, PropertyDatasetSpec, build_property_dataset
from engine.properties.definitions import get_property, suite_sizes
from engine.properties.options import TrainOptions
from engine.properties.poolings import POOLINGS
from engine.properties.scores import DIMENSIONS, dimensions_of

Emit = Callable[..., Any]


@dataclass(frozen=True)
class LabelledGraphs:
    """Graphs of one size: ``adjacency`` ``[G, n, n]`` bool, ``labels`` ``[G]`` 0/1."""

    n: int
    adjacency: np.ndarray
    labels: np.ndarray


@dataclass(frozen=True)
class StudyData:
    """The training set and the test sets (per test family, per size) of one run."""

    train: LabelledGraphs
    tests: dict[str, list[LabelledGraphs]]


def load_study_data(
    prop: str,
    train_family: str,
    *,
    datasets_dir: Path,
    graphs: int = GRAPHS_PER_DATASET,
    sizes: int | None = None,
    negatives: str | None = None,
    data_seed: int = 0,
    published: Path | None = None,
    test_families: tuple[str, ...] | None = None,
) -> StudyData:
    """Train set at the base size and test sets at the larger sizes, from the cache or a published folder.

    ``test_families`` defaults to those of the dimensions that ``train_family`` serves.
    """
    name = get_property(prop).name
    if train_family not in FAMILIES:
        raise unknown("training family", train_family, FAMILIES)
    if test_families is None:
        test_families = tuple(sorted({DIMENSIONS[d][1] for d in dimensions_of(train_family)}))
    if published is not None:
        from engine.properties.published import published_test_sizes, read_published_test, read_published_train

        def load(family: str, n: int | None) -> LabelledGraphs:
            data = read_published_train(published, family, name) if n is None else read_published_test(
                published, family, name, n
            )  # fmt: skip
            return LabelledGraphs(data.n, data.adjacency, data.labels)

        train = load(train_family, None)
        tests = {}
        for family in test_families:
            found = [n for n in published_test_sizes(published, family, name) if n > train.n]
            if not found:
                raise GaptuiError(f"{published}: no test files larger than n = {train.n} for '{name}' ({family})")
            tests[family] = [load(family, n) for n in found[: None if sizes is None else sizes - 1]]
        return StudyData(train, tests)

    all_sizes = suite_sizes(name)[:sizes]
    if len(all_sizes) < 2:
        raise GaptuiError(f"sizes = {sizes}: a run needs the base size and at least one larger test size")

    def cached(family: str, n: int) -> LabelledGraphs:
        spec = PropertyDatasetSpec(name, n, family, graphs, negatives, data_seed)
        dataset, _ = build_property_dataset(spec, datasets_dir)
        return LabelledGraphs(n, dataset.adjacency(), dataset.labels())

    return StudyData(
        cached(train_family, all_sizes[0]),
        {family: [cached(family, n) for n in all_sizes[1:]] for family in test_families},
    )


def _tensors(graphs: LabelledGraphs, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    return (
        torch.as_tensor(graphs.adjacency, device=device),
        torch.as_tensor(graphs.labels.astype(np.float32), device=device),
    )


@torch.no_grad()
def accuracy(model: IDGNNFast, graphs: LabelledGraphs, device: torch.device, batch_size: int = 256) -> float:
    """Share of graphs whose predicted label (logit > 0) is right."""
    model.eval()
    adj, labels = _tensors(graphs, device)
    correct = 0
    for lo in range(0, len(labels), batch_size):
        logits = model(adj[lo : lo + batch_size])
        correct += int(((logits > 0).float() == labels[lo : lo + batch_size]).sum())
    return correct / len(labels)


class Stopped(Exception):
    """Training stopped on request after ``epoch`` complete epochs (the checkpoint holds them)."""

    def __init__(self, epoch: int) -> None:
        super().__init__(f"stopped after epoch {epoch}")
        self.epoch = epoch


def build_model(pooling: str, options: TrainOptions, device: torch.device | str = "cpu") -> IDGNNFast:
    if pooling not in POOLINGS:
        POOLINGS.get(pooling)  # raises the did-you-mean error
    return IDGNNFast(pooling, options.hidden, options.layers, options.cycle_k).to(torch.device(device))


def train_model(
    train: LabelledGraphs,
    pooling: str,
    options: TrainOptions,
    seed: int,
    emit: Emit,
    *,
    device: torch.device | str = "cpu",
    checkpoint: Path | None = None,
    should_stop: Callable[[], bool] = lambda: False,
) -> tuple[IDGNNFast, dict[str, float]]:
    """Train on ``train``; returns the model and its last epoch's ``train_loss`` and ``train_acc``.

    Emits ``epoch`` events (``epoch``, ``train_loss``, ``train_acc``, ``seconds``). With ``checkpoint``, state is
    saved after every epoch and a later call resumes from it (same result as an uninterrupted run);
    :class:`Stopped` is raised between batches when ``should_stop()`` turns true.
    """
    device = torch.device(device)
    torch.manual_seed(seed)
    model = build_model(pooling, options, device)
    opt = torch.optim.AdamW(model.parameters(), lr=options.lr, weight_decay=options.weight_decay)
    adj, labels = _tensors(train, device)
    start_epoch = 0
    last = {"train_loss": float("nan"), "train_acc": float("nan")}
    if checkpoint is not None and checkpoint.exists():
        state = torch.load(checkpoint, map_location=device, weights_only=True)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        start_epoch = int(state["epoch"])
        last = dict(state["last"])
    generator = torch.Generator().manual_seed(seed)
    for _ in range(start_epoch):
        torch.randperm(len(labels), generator=generator)  # replay the batch orders of finished epochs
    for epoch in range(start_epoch + 1, options.epochs + 1):
        t0 = time.perf_counter()
        model.train()
        order = torch.randperm(len(labels), generator=generator).to(device)
        loss_sum, correct = 0.0, 0
        for lo in range(0, len(order), options.batch_size):
            if should_stop():
                raise Stopped(epoch - 1)
            ids = order[lo : lo + options.batch_size]
            logits = model(adj[ids])
            loss = F.binary_cross_entropy_with_logits(logits, labels[ids])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            loss_sum += float(loss.detach()) * len(ids)
            correct += int(((logits.detach() > 0).float() == labels[ids]).sum())
        last = {"train_loss": loss_sum / len(order), "train_acc": correct / len(order)}
        if not np.isfinite(last["train_loss"]):
            raise FloatingPointError(f"non-finite training loss at epoch {epoch}")
        if checkpoint is not None:
            tmp = checkpoint.with_name(f".{checkpoint.name}.tmp-{os.getpid()}")
            state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": epoch, "last": last}
            torch.save(state, tmp)
            os.replace(tmp, checkpoint)
        emit("epoch", epoch=epoch, seconds=time.perf_counter() - t0, **last)
    return model, last


def load_trained(
    checkpoint: Path, pooling: str, options: TrainOptions, device: torch.device | str = "cpu"
) -> IDGNNFast:
    """The model saved by :func:`train_model` in ``checkpoint`` (for evaluation only)."""
    try:
        state = torch.load(checkpoint, map_location=torch.device(device), weights_only=True)
    except FileNotFoundError:
        raise GaptuiError(f"{checkpoint}: no trained model there (has its training run finished?)") from None
    if int(state["epoch"]) < options.epochs:
        raise GaptuiError(f"{checkpoint}: trained for {state['epoch']} of {options.epochs} epochs only")
    model = build_model(pooling, options, device)
    model.load_state_dict(state["model"])
    return model


def evaluate_model(
    model: IDGNNFast, sets: list[LabelledGraphs], device: torch.device | str = "cpu"
) -> dict[int, float]:
    """Accuracy per size."""
    return {g.n: accuracy(model, g, torch.device(device)) for g in sets}
