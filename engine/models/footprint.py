"""What a model's training step holds in memory per node, per edge and per node pair, measured on tiny batches.

A training step keeps, until its backward pass, every tensor autograd saved in the forward pass. For a
message-passing layer that works on edges (GATv2's attention, GatedGCN's edge gates) those are ``[edges, width]``
tensors, several per layer: on the mouse connectomes (332 nodes, mean degree 33, 100 pairs a batch: 2.2 million
directed edges over G and G~) GATv2 and GatedGCN saved about 1.8 KB per edge, 4 GB a step, while the node states and
the similarity matrices the estimate counted came to 0.2 GB. The layers alone know what they save, so it is
measured: the model runs forward and backward on three tiny random batches, the bytes of the distinct tensors
autograd saved (parameters excluded) are fitted as ``per_node * N + per_edge * E + per_square * sum(n^2)``, and the
largest single tensor any operation produced (the messages of a layer, freed before the next one) is added per
edge. A few milliseconds per model after its width search (cached per model and options); the result scales
linearly to any batch.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

#: The tiny batches measured: (graphs, nodes per graph, mean degree). Two differ in degree only, two in order only.
PROBES = ((4, 24, 4.0), (4, 24, 12.0), (4, 48, 4.0))


@dataclass(frozen=True)
class Footprint:
    """Bytes one forward + backward keeps per node, per directed edge and per node pair of a graph (``n^2``)."""

    per_node: float
    per_edge: float
    per_square: float

    def bytes(self, graphs: int, nodes: float, degree: float) -> int:
        """What a step over ``graphs`` graphs of ``nodes`` nodes and mean degree ``degree`` holds."""
        n = graphs * nodes
        return int(self.per_node * n + self.per_edge * n * degree + self.per_square * graphs * nodes * nodes)


def _random_batch(graphs: int, nodes: int, degree: float, in_dim: int, seed: int) -> tuple[Any, Any, Any]:
    import torch

    gen = torch.Generator().manual_seed(seed)
    parts = []
    per_graph = int(round(nodes * degree / 2))
    for g in range(graphs):
        src = torch.randint(0, nodes, (per_graph,), generator=gen)
        dst = (src + torch.randint(1, nodes, (per_graph,), generator=gen)) % nodes
        parts.append(torch.stack([torch.cat([src, dst]), torch.cat([dst, src])]) + g * nodes)
    edge_index = torch.cat(parts, dim=1)
    batch = torch.arange(graphs).repeat_interleave(nodes)
    x = torch.randn(graphs * nodes, in_dim, generator=gen)
    return x, edge_index, batch


def _step_bytes(model: Any, x: Any, edge_index: Any, batch: Any) -> tuple[int, int, int]:
    """(bytes of the distinct tensors saved for backward, the largest edge-sized output of any op, edges)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: set[int] = set()
    saved = 0
    edges = int(edge_index.shape[1])
    largest = 0

    def pack(t: Any) -> Any:
        nonlocal saved
        ptr = t.untyped_storage().data_ptr()
        if ptr not in params and ptr not in seen:
            seen.add(ptr)
            saved += t.untyped_storage().nbytes()
        return t

    class Largest(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            nonlocal largest
            out = func(*args, **(kwargs or {}))
            for t in out if isinstance(out, (tuple, list)) else (out,):
                if isinstance(t, torch.Tensor) and t.layout == torch.strided and t.dim() and t.shape[0] >= edges:
                    largest = max(largest, t.numel() * t.element_size())
            return out

    with Largest(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(x, edge_index, batch)
        loss = out.float().square().mean()
    loss.backward()
    return saved, largest, edges


def measure(model: Any, in_dim: int, probes: Iterable[tuple[int, int, float]] = PROBES) -> Footprint:
    """The :class:`Footprint` of ``model`` (a built module taking ``(x, edge_index, batch)``), by a least-squares
    fit over ``probes``."""
    import numpy as np
    import torch

    rows, saved, per_edge_peak = [], [], 0.0
    was_training = model.training
    model.train()
    try:
        with torch.random.fork_rng():
            for i, (graphs, nodes, degree) in enumerate(probes):
                x, edge_index, batch = _random_batch(graphs, nodes, degree, in_dim, seed=i)
                kept, largest, edges = _step_bytes(model, x, edge_index, batch)
                model.zero_grad(set_to_none=True)
                rows.append([graphs * nodes, edges, graphs * nodes * nodes])
                saved.append(kept)
                per_edge_peak = max(per_edge_peak, largest / max(edges, 1))
    finally:
        model.train(was_training)
    coef, *_ = np.linalg.lstsq(np.asarray(rows, dtype=float), np.asarray(saved, dtype=float), rcond=None)
    per_node, per_edge, per_square = (max(0.0, float(c)) for c in coef)
    return Footprint(per_node, per_edge + per_edge_peak, per_square)


@functools.lru_cache(maxsize=128)
def _cached(name: str, out_dim: int, budget: int, in_dim: int, options: tuple[tuple[str, Any], ...]) -> Footprint:
    import torch

    from engine import models

    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = models.build(name, out_dim=out_dim, budget=budget, in_dim=in_dim, **dict(options))
    return measure(model, in_dim)


def step_footprint(name: str, out_dim: int, budget: int, in_dim: int, options: dict[str, Any]) -> Footprint:
    """The footprint of built-in model ``name`` as :func:`engine.models.build` makes it (cached)."""
    frozen = tuple(sorted((k, v if not isinstance(v, list) else tuple(v)) for k, v in options.items()))
    return _cached(name, out_dim, budget, in_dim, frozen)
