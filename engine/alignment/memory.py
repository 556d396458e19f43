"""The memory of an alignment run: its pair dataset and its training batch, estimated from the spec alone.

Two things grow with the parameters: a dataset (its arrays while it is generated and saved) and a training batch
(the dense similarity ``S [B, Nmax, Nmax]`` with its softmax and gradient, and what the model's layers save for
the backward pass per node and per edge, measured by :mod:`engine.models.footprint`). A plan whose estimate cannot
fit in the machine's memory is refused in one line (:class:`engine.memory.MemoryNeed`) before minutes are spent
generating.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engine.memory import MemoryNeed, human
from engine.sources import SOURCES, parse_params

#: Bytes per int64 index; node ids are held as int64 while a dataset is built and trained on.
_INT = 8
#: Float32 copies of ``S`` alive during one training step: scores, masked scores, log-softmax, gradient.
_SIM_COPIES = 4
#: Peak over the saved size while generating (edge lists of G and H, sorting, per-graph temporaries).
_BUILD_OVERHEAD = 3


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes a dataset build and one training batch need, from the mean graph of the dataset."""

    nodes: float
    mean_degree: float
    pairs: int
    dataset_bytes: int
    generation_bytes: int
    batch_bytes: int | None

    @property
    def peak(self) -> int:
        return max(self.dataset_bytes + self.generation_bytes, self.dataset_bytes + (self.batch_bytes or 0))

    def describe(self) -> str:
        text = f"dataset about {human(self.dataset_bytes + self.generation_bytes)}"
        if self.batch_bytes is not None:
            text += f", training batch about {human(self.batch_bytes)}"
        return text


#: ``model_bytes(graphs, nodes, degree)``: what a model's layers hold in one training step (the tensors autograd
#: saves per node and per edge, measured: :mod:`engine.models.footprint`; dense matrices the model declares:
#: :meth:`engine.models.base.ResidualGNN.batch_bytes`), for ``graphs`` graphs of about ``nodes`` nodes and mean
#: degree ``degree``.
ModelBytes = Callable[[int, float, float], int]
#: A worker's own resident memory besides its batch: Python, torch, PyG, the run's code and its dataset (0.34 GB for
#: ``gaptui train`` of a finished run; 0.45-0.55 GB before the first step on connectome-sized pairs, whose GCN and GIN
#: steps peaked 0.08 GB above the estimate with 0.45 GB: benchmarks/bench_memory.py).
PROCESS_BYTES = 550 << 20
#: The peak of a step over the tensors it saves: the gradients flowing back beside them, and the freed blocks the
#: allocator keeps for the next step. Measured peak RSS less the process, over the saved tensors and similarities,
#: 1.53 (GATv2) to 1.64 (GIN) on connectome-sized batches (benchmarks/bench_memory.py).
STEP_SLACK = 1.7


def estimate(
    canonical: dict[str, Any],
    batch_size: int | None = None,
    built: tuple[float, float, int] | None = None,
    model_bytes: ModelBytes | None = None,
    node_bytes: int = 0,
) -> MemoryEstimate | None:
    """The estimate for a canonical dataset spec (and a batch of ``batch_size`` pairs); ``built`` (nodes per graph,
    mean degree, pairs) is what a built dataset's statistics say, for sources that cannot tell their graph sizes
    before loading them (real and user datasets). None when neither tells. ``model_bytes`` adds what the model
    declares per batch (GraphGPS's attention scores, PAN's dense powers) to the batch's estimate; ``node_bytes``
    what the run keeps per node of a pair beside the dataset (positional inputs of G and G~)."""
    source_cls = SOURCES.get(canonical["base"])
    hint = source_cls.size_hint(parse_params(source_cls, canonical["params"]))
    if hint is None and built is None:
        return None
    nodes, degree, dense = hint if hint is not None else (built[0], built[1], False)  # type: ignore[index]
    pairs = int(canonical["n_train"] or 0) + int(canonical["n_val"] or 0)
    if canonical["n_train"] is None:  # all of the source: as many pairs as it has graphs, where it says
        counted = built[2] if hint is None and built is not None else None
        pairs = counted or source_cls.count_hint(parse_params(source_cls, canonical["params"])) or pairs
    # per pair: G and H edge lists (both directions, 2 rows), their pointers, the permutation and the order
    noisy_degree = degree * (1 + canonical["noise"])
    per_pair = (2 * 2 * nodes * (degree + noisy_degree) / 2 + nodes + 4) * _INT
    dataset = int(pairs * (per_pair + nodes * node_bytes))
    # sources that draw a whole n x n matrix per graph, and the pair table of dense Bernoulli draws
    generation = int(max(_BUILD_OVERHEAD * dataset / 2, 12 * nodes * nodes if dense else 0))
    batch = None
    if batch_size is not None:
        b = min(batch_size, max(1, pairs))
        batch = _SIM_COPIES * 4 * b * nodes * nodes + 2 * b * nodes * 512
        if model_bytes is not None:  # G and G~ of each pair; G~'s degree grows with the noise
            batch += model_bytes(2 * b, nodes, degree * (1 + canonical["noise"] / 2))
        batch = int(STEP_SLACK * batch + PROCESS_BYTES)
    return MemoryEstimate(nodes, degree, pairs, dataset, generation, batch)


def pairs_need(
    canonical: dict[str, Any],
    batch_size: int | None = None,
    what: str = "this run",
    built: tuple[float, float, int] | None = None,
    model_bytes: ModelBytes | None = None,
    node_bytes: int = 0,
) -> MemoryNeed | None:
    """The :class:`MemoryNeed` of a pair dataset and its training batch (:func:`estimate`), None when unknown."""
    est = estimate(canonical, batch_size, built, model_bytes, node_bytes)
    if est is None:
        return None
    big = "training batch" if (est.batch_bytes or 0) > est.generation_bytes else "dataset"
    hint = (
        "lower --batch-size or the graph order"
        if big == "training batch"
        else "lower --train/--val or the graph order (n)"
    )
    detail = f"{est.describe()}; graphs of about {est.nodes:,.0f} nodes x {est.pairs:,} pairs"
    key = json.dumps([canonical, batch_size, est.batch_bytes], sort_keys=True, default=str)
    return MemoryNeed(what, f"pairs of {canonical['base']}", est.peak, detail, hint, key)


def check_fits(
    canonical: dict[str, Any],
    batch_size: int | None = None,
    what: str = "this run",
    model_bytes: ModelBytes | None = None,
    node_bytes: int = 0,
) -> None:
    """Refuse a plan whose estimate exceeds the machine's memory, in one line naming both."""
    need = pairs_need(canonical, batch_size, what, model_bytes=model_bytes, node_bytes=node_bytes)
    if need is not None:
        need.check()
