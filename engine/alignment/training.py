"""Siamese training on alignment pairs (the graph alignment paper, section 3; design section 3).

Both graphs of a pair go through the same model; for pair ``b`` the similarity is ``S_b = X_G X_H^T`` (dense,
padded to the largest pair of the batch, padded columns masked out) and the loss is the row-softmax
cross-entropy of ``S_b`` against the planted permutation, averaged over the real nodes of the batch:

    loss = - 1 / sum_b n_b * sum_b sum_{i < n_b} log softmax(S_b[i, :n_b])[perm_b[i]]
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric import EdgeIndex
from torch_geometric.utils import to_dense_batch

from engine.alignment.features import FEATURES as FEATURES  # re-exported: the base kinds and their widths
from engine.alignment.features import (
    Features,
    PairPositional,
    model_inputs,
    pair_positional,
    parse_features,
    sign_flips,
)
from engine.evaluation import AlignmentScores, LapEvaluator
from engine.loop import TrainState, epoch_order, run_epoch
from engine.pairs import PairSplit

IGNORE = -100


@dataclass
class SiameseBatch:
    """``B`` pairs gathered for one forward pass of both graphs.

    ``edge_index`` holds G's edges (nodes ``0 .. N-1``) and H's edges (nodes ``N .. 2N-1``); ``batch`` maps the
    ``2N`` nodes to graphs ``0 .. 2B-1`` (G of pair b is graph b, H is graph ``B + b``); ``target`` is
    ``[B, Nmax]`` with ``perm`` per pair and :data:`IGNORE` in padding. ``positional`` is the positional block of
    the run's ``features`` ``[2N, P]`` (G's nodes, then H's, each computed from its own graph), None without one.
    """

    edge_index: torch.Tensor
    batch: torch.Tensor
    num_nodes: torch.Tensor
    target: torch.Tensor
    #: Every graph's edges hold both directions of each edge, sorted by (source, target) (checked once per split
    #: by :class:`PairTensors`), so the whole ``edge_index`` is sorted by source and undirected.
    undirected_sorted: bool = False
    positional: torch.Tensor | None = None

    @property
    def size(self) -> int:
        return int(self.num_nodes.shape[0])

    @property
    def total_nodes(self) -> int:
        return int(self.batch.shape[0]) // 2


def _ranges(ptr: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Concatenated ``ptr[i]:ptr[i+1]`` for each ``i`` in ``ids`` (vectorised) and the length of each range."""
    starts = ptr[ids]
    lengths = ptr[ids + 1] - starts
    shift = torch.repeat_interleave(starts - (torch.cumsum(lengths, 0) - lengths), lengths)
    return torch.arange(int(lengths.sum()), device=ptr.device) + shift, lengths


def undirected_sorted(edge_index: np.ndarray, edge_ptr: np.ndarray, node_ptr: np.ndarray) -> bool:
    """Whether each graph's edges (columns ``edge_ptr[p]:edge_ptr[p + 1]`` of ``edge_index``, local ids) hold
    both directions of each edge and lie sorted by (source, target), as the pair builder writes them: one sort of
    the reversed edges of the whole split, once."""
    edges = int(edge_ptr[-1]) if len(edge_ptr) else 0
    if edges == 0:
        return True
    graph = np.repeat(np.arange(len(edge_ptr) - 1), np.diff(edge_ptr))
    offset = np.asarray(node_ptr, dtype=np.int64)[graph]
    src = np.asarray(edge_index[0, :edges], dtype=np.int64) + offset
    dst = np.asarray(edge_index[1, :edges], dtype=np.int64) + offset
    total = int(node_ptr[-1]) + 1
    keys = src * total + dst
    if not bool(np.all(keys[1:] > keys[:-1])):
        return False
    return bool(np.array_equal(np.sort(dst * total + src), keys))


class PairTensors:
    """A :class:`PairSplit` moved to a device once, from which siamese batches are gathered without copies.

    ``features`` with positional parts (:mod:`engine.alignment.features`): their arrays for the G side and the H
    side, ``positional`` (cached with the dataset, see ``dataset_positional``) or computed now, move to the device
    with the split and are sliced into each batch.
    """

    def __init__(
        self,
        split: PairSplit,
        device: torch.device | str = "cpu",
        features: Features | str | None = None,
        positional: PairPositional | None = None,
    ) -> None:
        def t(a: np.ndarray) -> torch.Tensor:
            return torch.as_tensor(np.asarray(a, dtype=np.int64), device=device)

        self.device = torch.device(device)
        self.num_nodes = t(split.num_nodes)
        self.node_ptr = t(split.node_ptr)
        self.edge_index_g, self.edge_ptr_g = t(split.edge_index_g), t(split.edge_ptr_g)
        self.edge_index_h, self.edge_ptr_h = t(split.edge_index_h), t(split.edge_ptr_h)
        self.perm = t(split.perm)
        self.undirected_sorted = all(
            undirected_sorted(edges, ptr, split.node_ptr)
            for edges, ptr in ((split.edge_index_g, split.edge_ptr_g), (split.edge_index_h, split.edge_ptr_h))
        )
        if positional is None and features is not None:
            positional = pair_positional(split, features)
        self.pos_g = self.pos_h = None
        if positional is not None:
            rows = int(np.sum(split.num_nodes))
            if positional.g.shape[0] != rows or positional.h.shape != positional.g.shape:
                raise ValueError(f"positional inputs of {positional.g.shape} / {positional.h.shape}: not {rows} rows")
            self.pos_g = torch.as_tensor(positional.g, dtype=torch.float32, device=device)
            self.pos_h = torch.as_tensor(positional.h, dtype=torch.float32, device=device)

    def __len__(self) -> int:
        return int(self.num_nodes.shape[0])

    def gather(self, ids: torch.Tensor) -> SiameseBatch:
        ids = ids.to(self.device)
        n = self.num_nodes[ids]
        size = int(ids.shape[0])
        offsets = torch.cumsum(n, 0) - n
        total = int(n.sum())
        cols_g, len_g = _ranges(self.edge_ptr_g, ids)
        cols_h, len_h = _ranges(self.edge_ptr_h, ids)
        eg = self.edge_index_g[:, cols_g] + torch.repeat_interleave(offsets, len_g)
        eh = self.edge_index_h[:, cols_h] + torch.repeat_interleave(offsets, len_h) + total
        pair_of_node = torch.repeat_interleave(torch.arange(size, device=self.device), n)
        nodes, _ = _ranges(self.node_ptr, ids)
        local = torch.arange(total, device=self.device) - offsets[pair_of_node]
        target = torch.full((size, int(n.max())), IGNORE, dtype=torch.long, device=self.device)
        target[pair_of_node, local] = self.perm[nodes]
        positional = None
        if self.pos_g is not None and self.pos_h is not None:
            positional = torch.cat([self.pos_g[nodes], self.pos_h[nodes]])
        return SiameseBatch(
            edge_index=torch.cat([eg, eh], dim=1),
            batch=torch.cat([pair_of_node, pair_of_node + size]),
            num_nodes=n,
            target=target,
            undirected_sorted=self.undirected_sorted,
            positional=positional,
        )

    def batches(self, batch_size: int, order: torch.Tensor | None = None, start: int = 0) -> Iterator[SiameseBatch]:
        order = torch.arange(len(self)) if order is None else order
        for lo in range(start * batch_size, len(self), batch_size):
            yield self.gather(order[lo : lo + batch_size])


def node_features(
    kind: Features | str, edge_index: torch.Tensor, num_nodes: int, batch: torch.Tensor | None = None
) -> torch.Tensor:
    """Input features computed from structure alone (:mod:`engine.alignment.features`): ``[N, 1]`` ones or
    ``[N, 2]`` ``(1, log(1 + degree))``, then the positional parts of ``kind`` computed now from each graph of
    ``batch`` (None: one graph), no sign flips."""
    return model_inputs(kind, edge_index, num_nodes, batch=batch)


def siamese_inputs(
    model: nn.Module, batch: SiameseBatch, features: Features | str = "degree", flips: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The model's input ``x [2N, dim]`` and ``edge_index`` for both graphs of every pair of ``batch``: the base
    part of ``features`` from the batch's edges, then its positional block (computed now from each graph when the
    batch has none), times ``flips`` ``[2B, P]`` (one row per graph: G of pair b is row b, H row B + b)."""
    nodes = int(batch.batch.shape[0])
    node_flips = None if flips is None else flips.to(batch.batch.device)[batch.batch]
    x = model_inputs(features, batch.edge_index, nodes, batch.positional, node_flips, batch.batch)
    edge_index = batch.edge_index
    if batch.undirected_sorted and getattr(model, "reads_edge_index", False):
        # A model that says it reads PyG's EdgeIndex flags builds its sparse matrices without sorting.
        edge_index = EdgeIndex(edge_index, sparse_size=(nodes, nodes), sort_order="row", is_undirected=True)
    return x, edge_index


def similarity(
    model: nn.Module, batch: SiameseBatch, features: Features | str = "degree", flips: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Embed both graphs of every pair in one pass; returns ``S [B, Nmax, Nmax]`` and the node mask ``[B, Nmax]``.

    The input is :func:`siamese_inputs`'s. Padded columns of ``S`` are ``-inf`` so that they take no probability
    mass in the row softmax.
    """
    x, edge_index = siamese_inputs(model, batch, features, flips)
    emb = model(x, edge_index, batch.batch)
    # Under a bf16 autocast (the precision option) only the model's forward pass runs in bf16: the similarity,
    # and so the row softmax, the loss and the LAP, are computed in fp32.
    with torch.autocast(emb.device.type, enabled=False):
        emb = emb.float() if emb.dtype in (torch.bfloat16, torch.float16) else emb
        total, size = batch.total_nodes, batch.size
        xg, mask = to_dense_batch(emb[:total], batch.batch[:total], batch_size=size)
        xh, _ = to_dense_batch(emb[total:], batch.batch[total:] - size, batch_size=size)
        sim = torch.bmm(xg, xh.transpose(1, 2))
        return sim.masked_fill(~mask[:, None, :], float("-inf")), mask


def alignment_loss(sim: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Row-softmax cross-entropy against the planted permutation, mean over real nodes (padding ignored)."""
    size, nmax, _ = sim.shape
    return F.cross_entropy(sim.reshape(size * nmax, nmax), target.reshape(-1), ignore_index=IGNORE)


@torch.no_grad()
def evaluate(
    model: nn.Module,
    data: PairTensors,
    batch_size: int,
    evaluator: LapEvaluator,
    features: Features | str = "degree",
) -> tuple[AlignmentScores, float]:
    """Validation metrics and loss (stored eigenvector signs: no flips). Similarities go to the LAP thread pool
    batch by batch, so the LAPs of one batch are solved while the model computes the next."""
    was_training = model.training
    model.eval()
    loss_sum, nodes = 0.0, 0
    evaluator.result()  # drop anything left from an interrupted evaluation
    for batch in data.batches(batch_size):
        sim, mask = similarity(model, batch, features)
        real = int(mask.sum())
        loss_sum += float(alignment_loss(sim, batch.target)) * real
        nodes += real
        evaluator.submit(
            sim.masked_fill(~mask[:, None, :], 0.0).float().cpu(), batch.num_nodes.cpu(), batch.target.cpu()
        )
    scores = evaluator.result()
    model.train(was_training)
    return scores, loss_sum / max(nodes, 1)


def metrics_of(scores: AlignmentScores, loss: float, prefix: str = "val") -> dict[str, float]:
    out = {f"{prefix}_lap_acc": scores.lap_acc, f"{prefix}_argmax_acc": scores.argmax_acc}
    for k, v in scores.topk_acc.items():
        out[f"{prefix}_top{k}_acc"] = v
    out[f"{prefix}_loss"] = loss
    return out


def clip_gradients(model: nn.Module, clip: float, mode: str) -> None:
    if clip <= 0:
        return
    if mode == "value":
        nn.utils.clip_grad_value_(model.parameters(), clip)
    else:
        nn.utils.clip_grad_norm_(model.parameters(), clip)


class SiameseStep:
    """The siamese training step in the three parts the shared loop drives (:func:`engine.loop.run_epoch`):
    the epoch's shuffled batches of pairs, the forward pass (:func:`similarity`, whose similarity is fp32 even
    under autocast) and the update (the loss, backward, clipping, AdamW and the schedule's step).

    ``features`` with a ``lap`` part: each step flips the sign of every eigenvector of every graph (G and H
    apart) at random, drawn from (``seed``, epoch, step) alone (:func:`engine.alignment.features.sign_flips`), so
    a resumed run flips exactly as the uninterrupted one.
    """

    def __init__(
        self,
        model: nn.Module,
        data: PairTensors,
        opt: torch.optim.Optimizer,
        sched: Any,
        *,
        batch_size: int,
        seed: int,
        clip: float,
        clip_mode: str,
        features: Features | str = "degree",
    ) -> None:
        self.model, self.data, self.opt, self.sched = model, data, opt, sched
        self.batch_size, self.seed, self.clip, self.clip_mode = batch_size, seed, clip, clip_mode
        self.features = parse_features(features)

    def batches(self, state: TrainState) -> Iterator[SiameseBatch]:
        self.model.train()
        order = epoch_order(self.seed, state.epoch + 1, len(self.data))
        return self.data.batches(self.batch_size, order, start=state.batch_in_epoch)

    def forward(self, batch: SiameseBatch, state: TrainState) -> tuple[torch.Tensor, torch.Tensor]:
        flips = sign_flips(self.features, 2 * batch.size, self.seed, state.epoch + 1, state.step, self.data.device)
        return similarity(self.model, batch, self.features, flips)

    def update(
        self, batch: SiameseBatch, out: tuple[torch.Tensor, torch.Tensor], state: TrainState
    ) -> tuple[torch.Tensor, torch.Tensor]:
        sim, mask = out
        loss = alignment_loss(sim, batch.target)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        clip_gradients(self.model, self.clip, self.clip_mode)
        self.opt.step()
        if state.step < self.sched.total_steps:
            self.sched.step()
        return loss.detach(), mask.sum()


def train_epoch(
    model: nn.Module,
    data: PairTensors,
    opt: torch.optim.Optimizer,
    sched: Any,
    state: TrainState,
    *,
    batch_size: int,
    seed: int,
    clip: float,
    clip_mode: str,
    features: Features | str = "degree",
    should_stop: Callable[[], bool] = lambda: False,
    precision: str = "fp32",
) -> bool:
    """Run (the rest of) epoch ``state.epoch + 1`` of :class:`SiameseStep` outside a run (benchmarks, the cost
    calibration, tests), through the shared loop's :func:`engine.loop.run_epoch`, as a run's epoch goes. Returns
    False when stopped early by ``should_stop``.

    ``precision`` (``fp32`` or ``bf16``, resolved) is the loop's to apply: under ``bf16`` it runs the model's
    forward pass under bf16 autocast; the similarity and the loss stay fp32, and so do the weights and the
    optimiser state.

    The batch loop is :func:`engine.loop.run_batches`: losses are read back from the device every few steps, and a
    non-finite loss raises :class:`engine.loop.NonFiniteLoss` naming the step that made it.
    """
    step = SiameseStep(
        model, data, opt, sched, batch_size=batch_size, seed=seed, clip=clip, clip_mode=clip_mode, features=features
    )
    return run_epoch(step, state, should_stop, precision, data.device)


#: ``compile = "auto"`` compiles CPU runs of at least this many optimiser steps: compiling takes 5-20 s on a CPU
#: and saves 0.05-1 s per step of 100 pairs (benchmarks/bench_epoch.py), so it pays after a few hundred steps.
AUTO_COMPILE_STEPS = 500

#: Built-in models whose layers still compute a message per edge on the sparse path (ResGatedGraphConv's gates,
#: GATv2Conv's scores): the compiler fuses those passes, 1.2-2.4x per step whatever the thread count. The other
#: built-ins gain from compiling on one thread only (1.1-1.2x); with two or more, their eager sparse-matrix
#: products use the threads and beat the compiled scatter path (benchmarks/bench_epoch.py, README "Training speed").
COMPILE_PAYS_THREADED = frozenset({"gatedgcn", "gatv2"})

#: Built-in models that are no faster compiled even on one thread: GCN's eager step (one sparse product per
#: layer, no sort) took 262 ms against 274 ms compiled for 100 pairs of ER(100, 8).
COMPILE_NEVER_PAYS = frozenset({"gcn"})

#: Built-in models whose compiled step has not been measured against their eager one: ``auto`` leaves them eager
#: (``compile = "on"`` still compiles them).
COMPILE_UNMEASURED = frozenset({"tagcn", "sgc", "pan", "graphgps"})


def wants_compile(mode: str, device: torch.device, steps: int, model: str = "", threads: int | None = None) -> bool:
    """Whether a run of ``model`` trains through ``torch.compile``: ``on``, ``off``, or ``auto``: long runs on a
    CPU, with one torch thread (``threads``, default this process's) or a model in :data:`COMPILE_PAYS_THREADED`;
    never a model in :data:`COMPILE_NEVER_PAYS` or :data:`COMPILE_UNMEASURED`, never an import-path model (only the
    built-ins are known to compile) and never on a GPU, where compiling is opt-in, as its gain there is not
    measured."""
    if mode == "auto":
        threads = torch.get_num_threads() if threads is None else threads
        return (
            device.type == "cpu"
            and steps >= AUTO_COMPILE_STEPS
            and ":" not in model
            and model not in COMPILE_NEVER_PAYS
            and model not in COMPILE_UNMEASURED
            and (threads == 1 or model in COMPILE_PAYS_THREADED)
        )
    return mode == "on"


def compile_model(model: nn.Module, features: Features | str, log: Callable[[str], None]) -> nn.Module:
    """``torch.compile(model)``, compiled now on a tiny batch; the eager model when compiling fails (no C++
    compiler, an unsupported layer), with one log line saying why.

    The compiled module shares ``model``'s parameters: the optimiser, checkpoints and evaluation use ``model``.
    Shapes are dynamic, so batches of any size reuse the compiled code. The warm-up leaves the gradients and the
    random state as they were.

    A built-in model is switched to PyG's gather/scatter layers (``sparse = False``): the compiler fuses those
    (the sparse-matrix path breaks its graphs), and every layer and norm is compiled on its own, since the
    data-dependent self-loop handling of the PyG layers keeps the block loop itself from being traced.
    """
    sparse = getattr(model, "sparse", None)
    if sparse is not None:
        model.sparse = False
    device = next(model.parameters()).device
    if device.type == "cpu":
        # The generated C++ kernels on one thread (their scatters, parallel, contend over atomic adds: 3-4x slower
        # steps on 2 threads than on one); the matrix products between them still use every torch thread.
        import torch._inductor.config

        torch._inductor.config.cpp.threads = 1
    compiled = torch.compile(model, dynamic=True)
    sizes = torch.tensor([5, 6], device=device)
    ring = torch.cat([torch.arange(n, device=device) for n in sizes.tolist()])
    offsets = torch.repeat_interleave(torch.cumsum(sizes, 0) - sizes, sizes)
    nxt = torch.cat([(torch.arange(n, device=device) + 1) % n for n in sizes.tolist()])
    edge_index = torch.stack([ring + offsets, nxt + offsets])
    edge_index = torch.cat([edge_index, edge_index.flip(0)], dim=1)
    batch = torch.repeat_interleave(torch.arange(2, device=device), sizes)
    t0 = time.perf_counter()
    try:
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            x = node_features(features, edge_index, int(sizes.sum()), batch)
            compiled(x, edge_index, batch).sum().backward()
    except Exception as exc:  # noqa: BLE001 - any compiler failure means: train eagerly, and say so
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        log(f"torch.compile failed ({type(exc).__name__}: {first[:200]}); training without it")
        model.zero_grad(set_to_none=True)
        if sparse is not None:
            model.sparse = sparse
        return model
    model.zero_grad(set_to_none=True)
    log(f"model compiled with torch.compile in {time.perf_counter() - t0:.1f} s")
    return compiled


class Stopwatch:
    def __init__(self) -> None:
        self.start = time.perf_counter()

    def __call__(self) -> float:
        return time.perf_counter() - self.start
