"""A trained ``brec`` run on the shared epoch loop: one "epoch" of the loop is one pair of the category.

For each pair (:mod:`engine.brec.rpc`): the model is initialised afresh (from the run's seed and the pair's id), the
optimiser and its plateau scheduler start again, and the model trains for up to ``epochs`` passes over the ``2q``
relabelled copies in batches of ``batch_size`` graphs (consecutive copies ``G_i, H_i``, in order, as BREC), on
the cosine-embedding loss with target -1 (``max(0, cos(f(G_i), f(H_i)) - margin)``), until a pass's mean loss
falls below ``loss_threshold``; then the T^2 test and the reliability check give the pair's verdict (the loop's
``eval`` event, with the running counts). The shared loop brings resume at the exact batch (the task's own state,
the verdicts so far and the pass in progress, is in the checkpoint), stop, the non-finite-loss check and packed
seeds (which take turns pair by pair).

The model is any zoo model (``engine.models.build``, ``out_dim`` = 16) whose node embeddings are pooled per graph
(``readout``, sum by default); inputs are the run's ``features`` computed for each relabelled copy from its own
edges (so ``lap:K`` sees the basis an eigensolver gives that copy: what the reliability check is there to catch).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from engine.brec.data import BrecPair
from engine.brec.rpc import Comparison, Copy, pair_copies, t_squared
from engine.brec.spec import BrecSpec
from engine.loop import EpochTask, TrainState


class GraphEmbedder(nn.Module):
    """A node embedder and a readout: ``(x [N, in], edge_index [2, E], batch [N], graphs) -> [graphs, out_dim]``."""

    def __init__(self, nodes: nn.Module, readout: str) -> None:
        super().__init__()
        self.nodes = nodes
        self.readout = readout

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor, batch: torch.Tensor, graphs: int) -> torch.Tensor:
        from torch_geometric.nn import global_add_pool, global_max_pool, global_mean_pool

        pool = {"sum": global_add_pool, "mean": global_mean_pool, "max": global_max_pool}[self.readout]
        return pool(self.nodes(x, edge_index, batch), batch, size=graphs)


def build_embedder(spec: BrecSpec) -> GraphEmbedder:
    from engine.alignment.features import feature_dim
    from engine.models import build

    nodes = build(
        spec.model, out_dim=spec.out_dim, budget=spec.budget, in_dim=feature_dim(spec.features), **spec.model_kwargs
    )
    return GraphEmbedder(nodes, spec.readout)


@dataclass(frozen=True)
class Batch:
    """Consecutive copies as one disjoint graph: inputs, edges, graph of each node, number of graphs."""

    x: torch.Tensor
    edge_index: torch.Tensor
    batch: torch.Tensor
    graphs: int


def make_batches(copies: list[Copy], features: str, size: int, device: torch.device) -> list[Batch]:
    """The copies in batches of ``size`` graphs, each copy's inputs from its own edges."""
    import numpy as np

    from engine.alignment.features import model_inputs, positional_encoding

    out = []
    for lo in range(0, len(copies), size):
        chunk = copies[lo : lo + size]
        nodes = np.array([c.num_nodes for c in chunk])
        ptr = np.concatenate([[0], np.cumsum(nodes)])
        edges = np.concatenate([c.edge_index for c in chunk], axis=1)
        edge_ptr = np.concatenate([[0], np.cumsum([c.edge_index.shape[1] for c in chunk])])
        positional = torch.as_tensor(positional_encoding(features, nodes, edges, edge_ptr))
        offsets = np.repeat(ptr[:-1], np.diff(edge_ptr))
        edge_index = torch.as_tensor(edges + offsets, dtype=torch.long)
        x = model_inputs(features, edge_index, int(ptr[-1]), positional=positional)
        batch = torch.repeat_interleave(torch.arange(len(chunk)), torch.as_tensor(nodes))
        out.append(Batch(x.to(device), edge_index.to(device), batch.to(device), len(chunk)))
    return out


def init_seed(seed: int, pair_id: int) -> int:
    """The seed of a pair's fresh model: a function of the run's seed and the pair."""
    return (int(seed) * 1_000_003 + int(pair_id) * 7919 + 17) % (1 << 63)


class PairTraining(EpochTask):
    """RPC over the pairs of one run (see the module docstring)."""

    def __init__(self, spec: BrecSpec, pairs: tuple[BrecPair, ...], device: torch.device) -> None:
        self.spec, self.pairs, self.device = spec, pairs, device
        torch.manual_seed(init_seed(spec.seed, pairs[0].id if pairs else 0))
        self.model = build_embedder(spec).to(device)
        self.width = int(getattr(self.model.nodes, "width", 0))
        self.opt = torch.optim.Adam(self.model.parameters(), lr=spec.lr, weight_decay=spec.weight_decay)
        self.sched = torch.optim.lr_scheduler.ReduceLROnPlateau(self.opt)
        self._fresh_opt = _copy_state(self.opt.state_dict())
        self._fresh_sched = _copy_state(self.sched.state_dict())
        self.threshold = spec.threshold_value()
        self.epochs = len(pairs)
        self.per_pass = math.ceil(2 * spec.relabellings / spec.batch_size)
        self.steps_per_epoch = spec.epochs * self.per_pass
        self.results: list[dict[str, Any]] = []
        self.progress = _fresh_progress()
        self._data: tuple[int, list[Batch], list[Batch]] | None = None

    # ------------------------------------------------------------------ the loop's parts

    def parts(self) -> dict[str, Any]:
        return {"model": self.model, "optimizer": self.opt, "scheduler": self.sched}

    def _pair_data(self, index: int) -> tuple[list[Batch], list[Batch]]:
        if self._data is None or self._data[0] != index:
            pair, spec = self.pairs[index], self.spec
            copies = pair_copies(pair.g, pair.h, spec.relabellings, spec.data_seed, pair.id)
            train = make_batches(copies.train, spec.features, spec.batch_size, self.device)
            same = make_batches(copies.reliability, spec.features, spec.batch_size, self.device)
            self._data = (index, train, same)
        return self._data[1], self._data[2]

    def _start_pair(self, index: int) -> None:
        """A fresh model, optimiser and scheduler for pair ``index``."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(init_seed(self.spec.seed, self.pairs[index].id))
            fresh = build_embedder(self.spec).state_dict()
        self.model.load_state_dict(fresh)
        self.opt.load_state_dict(_copy_state(self._fresh_opt))
        self.sched.load_state_dict(_copy_state(self._fresh_sched))
        self.progress = _fresh_progress()

    def batches(self, state: TrainState) -> Any:
        index = state.epoch
        if state.batch_in_epoch == 0:
            self._start_pair(index)
        train, _ = self._pair_data(index)
        self.model.train()
        for b in range(state.batch_in_epoch, self.spec.epochs * self.per_pass):
            if self.progress["stopped"]:
                return
            yield train[b % self.per_pass], b % self.per_pass == self.per_pass - 1

    def forward(self, item: tuple[Batch, bool], state: TrainState) -> torch.Tensor:
        batch = item[0]
        return self.model(batch.x, batch.edge_index, batch.batch, batch.graphs)

    def update(self, item: tuple[Batch, bool], out: torch.Tensor, state: TrainState) -> tuple[torch.Tensor, int]:
        batch, last = item
        out = out.float()
        pairs = batch.graphs // 2
        target = -torch.ones(pairs, device=out.device)
        loss = nn.functional.cosine_embedding_loss(out[0::2], out[1::2], target, margin=self.spec.margin)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        progress = self.progress
        progress["loss_sum"] += float(loss.detach()) * pairs
        if last:  # the end of a pass over the copies: BREC's epoch loss, early stop and plateau step
            mean = progress["loss_sum"] / self.spec.relabellings
            progress.update(loss_sum=0.0, passes=progress["passes"] + 1, last_loss=mean)
            if mean < self.spec.loss_threshold:
                progress["stopped"] = True
            else:
                self.sched.step(mean)
        return loss.detach(), pairs

    # ------------------------------------------------------------------ the verdict of a pair

    @torch.no_grad()
    def _embed(self, batches: list[Batch]) -> torch.Tensor:
        return torch.cat([self.model(b.x, b.edge_index, b.batch, b.graphs).float() for b in batches])

    def evaluate(self, epoch: int, summary: dict[str, float]) -> dict[str, float]:
        index = epoch - 1
        train, same = self._pair_data(index)
        self.model.eval()
        pair_emb, same_emb = self._embed(train), self._embed(same)
        statistic = self.spec.statistic
        comparison = Comparison(
            t_squared(pair_emb[0::2], pair_emb[1::2], statistic),
            t_squared(same_emb[0::2], same_emb[1::2], statistic),
            self.threshold,
        )
        pair = self.pairs[index]
        self.results.append(
            {
                "id": pair.id,
                "nodes": pair.nodes,
                **comparison.to_dict(),
                "separated": comparison.separated,
                "passes": self.progress["passes"],
                "loss": self.progress["last_loss"],
            }
        )
        self._data = None
        return self.metrics()

    def metrics(self) -> dict[str, float]:
        """The running counts of the verdicts so far (the run's metrics once every pair is done)."""
        done = len(self.results)
        distinguished = sum(r["distinguished"] for r in self.results)
        t2 = [r["t2"] for r in self.results if math.isfinite(r["t2"])]
        reliability = [r["reliability_t2"] for r in self.results if math.isfinite(r["reliability_t2"])]
        return {
            "accuracy": distinguished / done if done else 0.0,
            "distinguished": float(distinguished),
            "pairs": float(done),
            "reliability_failures": float(sum(not r["reliable"] for r in self.results)),
            "t2_median": statistics.median(t2) if t2 else math.nan,
            "reliability_t2_max": max(reliability) if reliability else math.nan,
        }

    # ------------------------------------------------------------------ events and checkpoints

    def summary(self, state: TrainState) -> dict[str, float]:
        return {"train_loss": state.mean_loss, "passes": float(self.progress["passes"])}

    def epoch_fields(self, evaluated: dict[str, float] | None) -> dict[str, Any]:
        last = self.results[-1] if self.results else {}
        return {"pair": last.get("id"), "t2": last.get("t2"), "distinguished_pair": last.get("distinguished")}

    def start_fields(self) -> dict[str, Any]:
        from engine.models import count_parameters

        return {
            "model": self.spec.model,
            "params": count_parameters(self.model),
            "width": self.width,
            "category": self.spec.category,
            "pairs": len(self.pairs),
            "threshold": self.threshold,
            "device": str(self.device),
        }

    def checkpoint_fields(self) -> dict[str, Any]:
        return {"brec_results": list(self.results), "brec_progress": dict(self.progress)}

    def load_checkpoint(self, ckpt: dict[str, Any]) -> None:
        self.results = list(ckpt.get("brec_results", []))
        self.progress = {**_fresh_progress(), **dict(ckpt.get("brec_progress", {}))}

    def failure_fields(self) -> dict[str, Any]:
        return {"category": self.spec.category, "model": self.spec.model, "pairs_done": len(self.results)}


def _fresh_progress() -> dict[str, Any]:
    return {"loss_sum": 0.0, "passes": 0, "stopped": False, "last_loss": math.nan}


def _copy_state(state: dict[str, Any]) -> dict[str, Any]:
    import copy

    return copy.deepcopy(state)
