"""ID-GNN-Fast for relations: cycle-count node features, a direction-aware GIN, one global pooling.

Node features are the counts of closed walks through each node, ``diag(A^k)`` for ``k = 1 .. K``, taken from the
raw directed adjacency. (The GraphGym version adds self-loops first; that erases the diagonal that reflexive and
irreflexive depend on, so we do not.) ``diag(A^1)`` is the self-loop indicator. The counts grow like ``n^(k-1)``,
so the network sees ``log(1 + count)``.

Each of the 5 GIN layers sees both edge directions (dense, since every graph of a batch has the same size):

    h_i' = h_i + MLP( [(1 + eps) h_i  ||  sum_{j: i -> j} h_j  ||  sum_{j: j -> i} h_j] )

then a global pooling (:mod:`engine.properties.poolings`) and a two-layer head give one logit per graph.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from engine.properties.options import CYCLE_K
from engine.properties.poolings import build_pooling


def cycle_counts(adjacency: Tensor, k: int = CYCLE_K) -> Tensor:
    """``[B, n, n]`` 0/1 adjacency -> ``[B, n, k]`` with ``[..., j - 1] = diag(A^j)`` (exact counts, float64)."""
    a = adjacency.to(torch.float64)
    power = a
    out = [torch.diagonal(power, dim1=-2, dim2=-1)]
    for _ in range(1, k):
        power = power @ a
        out.append(torch.diagonal(power, dim1=-2, dim2=-1))
    return torch.stack(out, dim=-1)


class DirectedGINLayer(nn.Module):
    """One GIN layer over in- and out-neighbours; ``h`` ``[B, n, d]``, ``adjacency`` ``[B, n, n]`` -> ``[B, n, d]``."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.eps = nn.Parameter(torch.zeros(1))
        self.mlp = nn.Sequential(
            nn.Linear(3 * channels, channels),
            nn.BatchNorm1d(channels),
            nn.ReLU(),
            nn.Linear(channels, channels),
            nn.ReLU(),
        )

    def forward(self, h: Tensor, adjacency: Tensor) -> Tensor:
        successors = adjacency @ h  # row i sums h_j over i -> j
        predecessors = adjacency.transpose(1, 2) @ h  # row i sums h_j over j -> i
        z = torch.cat([(1 + self.eps) * h, successors, predecessors], dim=-1)
        b, n, _ = z.shape
        return h + self.mlp(z.reshape(b * n, -1)).reshape(b, n, -1)


class IDGNNFast(nn.Module):
    """Relation classifier: ``[B, n, n]`` adjacency -> ``[B]`` logits (1 = has the property)."""

    def __init__(self, pooling: str, hidden: int = 64, layers: int = 5, cycle_k: int = CYCLE_K) -> None:
        super().__init__()
        self.cycle_k = cycle_k
        self.encode = nn.Linear(cycle_k, hidden)
        self.layers = nn.ModuleList(DirectedGINLayer(hidden) for _ in range(layers))
        self.pool, pooled = build_pooling(pooling, hidden)
        self.head = nn.Sequential(nn.Linear(pooled, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def forward(self, adjacency: Tensor) -> Tensor:
        a = adjacency.to(torch.float32)
        h = self.encode(torch.log1p(cycle_counts(adjacency, self.cycle_k)).to(torch.float32))
        for layer in self.layers:
            h = layer(h, a)
        b, n, d = h.shape
        index = torch.arange(b, device=h.device).repeat_interleave(n)
        pooled = self.pool(h.reshape(b * n, d), index, dim_size=b)
        return self.head(pooled).squeeze(-1)
