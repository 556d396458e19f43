"""Training and evaluation of one (property, pooling, seed, training family) run of the property study.

AdamW (lr 1e-3), batch 64, 20 epochs, binary cross-entropy on the logit of :class:`IDGNNFast`; accuracy at a 0.5
probability threshold. The model trains on the base size of ``train_family`` and is tested at every larger size
of the test families of its dimensions (:mod:`engine.properties.scores`): a GraphRandom run reports
generalisation and robustness, a GraphPerturb run sensitivity.

Data come from the cache (built on demand, :mod:`engine.properties.datasets`) or, with ``published`` set, from a
folder in the published CSV layout (:mod:`engine.properties.published`).
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from engine.checkpoints import read_checkpoint
from engine.errors import GaptuiError, unknown
from engine.hardware import RunOptions
from engine.loop import EpochTask, TrainState, epoch_steps
from engine.properties.backbone import IDGNNFast
from engine.properties.datasets import FAMILIES, GRAPHS_PER_DATASET, PropertyDatasetSpec, build_property_dataset
from engine.properties.definitions import get_property, suite_sizes
from engine.properties.options import TrainOptions
from engine.properties.poolings import POOLINGS
from engine.properties.scores import DIMENSIONS, dimensions_of
from engine.properties.strategies import (
    STANDARD,
    Strategy,
    adversarial_batch,
    entry_epoch,
    finetune_epochs,
    test_sizes,
    train_sizes,
)
from engine.tasks.run import RunContext, run_steps

Emit = Callable[..., Any]


@dataclass(frozen=True)
class LabelledGraphs:
    """Graphs of one size: ``adjacency`` ``[G, n, n]`` bool, ``labels`` ``[G]`` 0/1."""

    n: int
    adjacency: np.ndarray
    labels: np.ndarray


@dataclass(frozen=True)
class StudyData:
    """The training set and the test sets (per test family, per size) of one run; ``more_train``: the further
    training sets of a strategy (GraphPerturb-Train for ``finetune_perturb``, the larger sizes for
    ``progressive``)."""

    train: LabelledGraphs
    tests: dict[str, list[LabelledGraphs]]
    more_train: tuple[LabelledGraphs, ...] = ()


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
    strategy: Strategy = STANDARD,
) -> StudyData:
    """Train set at the base size and test sets at the larger sizes, from the cache or a published folder.

    ``test_families`` defaults to those of the dimensions that ``train_family`` serves. ``strategy``: the further
    training sets it reads (:mod:`engine.properties.strategies`); the test sizes are those above every size
    trained on.
    """
    name = get_property(prop).name
    if train_family not in FAMILIES:
        raise unknown("training family", train_family, FAMILIES)
    if test_families is None:
        test_families = tuple(sorted({DIMENSIONS[d][1] for d in dimensions_of(train_family)}))
    if published is not None:
        if strategy.name == "progressive":
            raise GaptuiError(f"{published}: a published folder has one training size; progressive needs k + 1")
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
        more = (load("perturb", None),) if strategy.name == "finetune_perturb" else ()
        return StudyData(train, tests, more)

    all_sizes = suite_sizes(name)[:sizes]
    if len(all_sizes) < 2:
        raise GaptuiError(f"sizes = {sizes}: a run needs the base size and at least one larger test size")

    def cached(family: str, n: int) -> LabelledGraphs:
        spec = PropertyDatasetSpec(name, n, family, graphs, negatives, data_seed)
        dataset, _ = build_property_dataset(spec, datasets_dir)
        return LabelledGraphs(n, dataset.adjacency(), dataset.labels())

    trained = train_sizes(all_sizes, strategy.name, strategy.progressive_k)
    tested = test_sizes(all_sizes, strategy.name, strategy.progressive_k)
    tests = {family: [cached(family, n) for n in tested] for family in test_families}
    if strategy.name == "finetune_perturb":
        return StudyData(cached("random", trained[0]), tests, (cached("perturb", trained[0]),))
    if strategy.name == "progressive":
        each = max(2, (graphs // len(trained)) // 2 * 2)
        sets = [cached(train_family, n) for n in trained]
        sets = [LabelledGraphs(g.n, g.adjacency[:each], g.labels[:each]) for g in sets]
        return StudyData(sets[0], tests, tuple(sets[1:]))
    return StudyData(cached(train_family, trained[0]), tests)


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


def build_model(pooling: str, options: TrainOptions, device: torch.device | str = "cpu") -> IDGNNFast:
    if pooling not in POOLINGS:
        POOLINGS.get(pooling)  # raises the did-you-mean error
    return IDGNNFast(pooling, options.hidden, options.layers, options.cycle_k).to(torch.device(device))


class PropertyTraining(EpochTask):
    """The study's step for the shared loop (:mod:`engine.loop`): binary cross-entropy epochs with AdamW over
    shuffled batches of the training graphs; ``train_loss`` and ``train_acc`` per epoch, no evaluation (a cell
    is tested once, after training, at the larger sizes). ``strategy`` (:mod:`engine.properties.strategies`)
    decides which of ``train`` and ``more_train`` an epoch feeds, and ``check`` (the property's checker) labels
    the flipped copies of an adversarial batch."""

    def __init__(
        self,
        train: LabelledGraphs,
        pooling: str,
        options: TrainOptions,
        seed: int,
        device: torch.device,
        start: dict[str, Any] | None = None,
        *,
        strategy: Strategy = STANDARD,
        more_train: tuple[LabelledGraphs, ...] = (),
        check: Callable[[np.ndarray], np.ndarray] | None = None,
    ) -> None:
        torch.manual_seed(seed)
        self.seed, self.options, self.start, self.strategy = seed, options, dict(start or {}), strategy
        if strategy.name == "adversarial" and check is None:
            raise GaptuiError("adversarial training needs the property's checker to label its flipped graphs")
        if strategy.name in ("finetune_perturb", "progressive") and not more_train:
            raise GaptuiError(f"{strategy.name} training needs its further training sets")
        self.check = check
        self.model = build_model(pooling, options, device)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=options.lr, weight_decay=options.weight_decay)
        self.sets = [train, *more_train]
        self.tensors = [_tensors(g, device) for g in self.sets]
        self.adj, self.labels = self.tensors[0]
        self.epochs = options.epochs
        self.steps_per_epoch = len(self.batch_plan(1))

    def parts(self) -> dict[str, Any]:
        return {"model": self.model, "optimizer": self.opt}

    def order(self, epoch: int, count: int | None = None, stream: int = 0) -> torch.Tensor:
        """The batch order of ``epoch`` (1-based): the ``epoch``-th permutation of ``count`` graphs (the first
        set's by default) drawn from a generator seeded with the run's seed (``stream`` > 0: the seed and the set,
        for a progressive set), a pure function of (seed, stream, epoch)."""
        count = len(self.labels) if count is None else count
        generator = torch.Generator().manual_seed(self.seed if stream == 0 else self.seed * 1009 + stream)
        for _ in range(epoch - 1):
            torch.randperm(count, generator=generator)
        return torch.randperm(count, generator=generator).to(self.labels.device)

    def active_sets(self, epoch: int) -> list[int]:
        """The training sets epoch ``epoch`` (1-based) feeds, in order."""
        name = self.strategy.name
        if name == "finetune_perturb":
            return [0] if epoch <= self.epochs - finetune_epochs(self.epochs, self.strategy.finetune_share) else [1]
        if name == "progressive":
            k = len(self.sets) - 1
            return [j for j in range(k + 1) if entry_epoch(j, k, self.epochs) <= epoch]
        return [0]

    def batch_plan(self, epoch: int) -> list[tuple[int, torch.Tensor]]:
        """The epoch's batches as (training set, graph ids), smallest size first for a progressive epoch."""
        size, out = self.options.batch_size, []
        for j in self.active_sets(epoch):
            count = len(self.sets[j].labels)
            stream = j if self.strategy.name == "progressive" else 0
            order = self.order(epoch, count, stream)
            out += [(j, order[lo : lo + size]) for lo in range(0, count, size)]
        return out

    def batches(self, state: TrainState) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """The epoch's remaining batches as (adjacency, labels); an adversarial batch with its flipped copies."""
        epoch = state.epoch + 1
        plan = self.batch_plan(epoch)
        self.model.train()
        for i in range(state.batch_in_epoch, len(plan)):
            j, ids = plan[i]
            adj_all, labels_all = self.tensors[j]
            adj, labels = adj_all[ids], labels_all[ids]
            if self.strategy.name == "adversarial":
                rng = np.random.default_rng([self.seed, epoch, i])
                flipped, flipped_labels = adversarial_batch(
                    self.sets[j].adjacency[ids.cpu().numpy()], self.strategy.adversarial_share, self.check, rng
                )
                adj = torch.cat([adj, torch.as_tensor(flipped, device=adj.device)])
                labels = torch.cat([labels, torch.as_tensor(flipped_labels.astype(np.float32), device=adj.device)])
            yield adj, labels

    def forward(self, batch: tuple[torch.Tensor, torch.Tensor], state: TrainState) -> torch.Tensor:
        return self.model(batch[0])

    def update(
        self, batch: tuple[torch.Tensor, torch.Tensor], out: torch.Tensor, state: TrainState
    ) -> tuple[torch.Tensor, int]:
        labels = batch[1]
        logits = out.float()  # the loss in fp32 whatever the forward's precision
        loss = F.binary_cross_entropy_with_logits(logits, labels)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        correct = int(((logits.detach() > 0).float() == labels).sum())
        state.tally["correct"] = state.tally.get("correct", 0) + correct
        return loss.detach(), len(labels)

    def summary(self, state: TrainState) -> dict[str, float]:
        return {"train_loss": state.mean_loss, "train_acc": state.tally.get("correct", 0) / max(state.loss_nodes, 1)}

    def start_fields(self) -> dict[str, Any]:
        return self.start


def train_steps(
    train: LabelledGraphs,
    pooling: str,
    options: TrainOptions,
    seed: int,
    ctx: RunContext,
    *,
    device: torch.device | str = "cpu",
    run: str = "",
    start: dict[str, Any] | None = None,
    strategy: Strategy = STANDARD,
    more_train: tuple[LabelledGraphs, ...] = (),
    check: Callable[[np.ndarray], np.ndarray] | None = None,
) -> Generator[None, None, tuple[IDGNNFast, dict[str, float]]]:
    """Train on ``train`` in the shared loop (checkpoint in ``ctx.run_dir``, resumed from it), yielding after each
    epoch; returns the model and its last epoch's ``train_loss`` and ``train_acc``. ``start``: extra fields of
    the ``start`` event; ``strategy``, ``more_train`` and ``check``: see :class:`PropertyTraining`."""
    device = torch.device(device)
    task = PropertyTraining(
        train, pooling, options, seed, device, start, strategy=strategy, more_train=more_train, check=check
    )
    result = yield from epoch_steps(task, ctx, run, RunOptions(precision=options.precision, device=str(device)))
    return task.model, {k: result.metrics.get(k, float("nan")) for k in ("train_loss", "train_acc")}


def train_model(
    train: LabelledGraphs,
    pooling: str,
    options: TrainOptions,
    seed: int,
    emit: Emit,
    *,
    device: torch.device | str = "cpu",
    run_dir: Path | None = None,
    should_stop: Callable[[], bool] = lambda: False,
) -> tuple[IDGNNFast, dict[str, float]]:
    """:func:`train_steps` alone, outside a worker: the checkpoint goes to ``run_dir`` (resumed from it; a
    temporary folder when None); :class:`~engine.tasks.Cancelled` when ``should_stop()`` turned true."""
    with tempfile.TemporaryDirectory() if run_dir is None else contextlib.nullcontext(run_dir) as folder:
        ctx = RunContext(Path(folder), emit, lambda _text: None, should_stop)
        return run_steps(train_steps(train, pooling, options, seed, ctx, device=device))


def load_trained(
    checkpoint: Path, pooling: str, options: TrainOptions, device: torch.device | str = "cpu"
) -> IDGNNFast:
    """The model saved in ``checkpoint`` by :func:`train_steps` (for evaluation only)."""
    if not checkpoint.exists():
        raise GaptuiError(f"{checkpoint}: no trained model there (has its training run finished?)")
    ckpt = read_checkpoint(checkpoint, torch.device(device))
    epoch = int(ckpt["state"]["epoch"])
    if epoch < options.epochs:
        raise GaptuiError(f"{checkpoint}: trained for {epoch} of {options.epochs} epochs only")
    model = build_model(pooling, options, device)
    model.load_state_dict(ckpt["model"])
    return model


def evaluate_model(
    model: IDGNNFast, sets: list[LabelledGraphs], device: torch.device | str = "cpu"
) -> dict[int, float]:
    """Accuracy per size."""
    return {g.n: accuracy(model, g, torch.device(device)) for g in sets}
