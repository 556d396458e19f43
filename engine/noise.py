"""Correlated pairs (seed 000, section 4): noise G into G~, then relabel G~ by a uniformly random permutation.

For a base graph with ``N`` nodes and ``|E|`` undirected edges, with ``T = N(N-1)/2`` node pairs, each edge is
removed independently with probability ``p_remove`` and each non-edge added independently with probability
``p_add = eta |E| / (T - |E|)``, so that ``eta |E|`` edges are added in expectation:

- ``add_remove``: ``p_remove = eta`` (the degree stays stable on average);
- ``add``: ``p_remove = 0`` (sparse graphs such as molecules stay connected).

The pair is stored as ``(G, H, perm)`` with ``H`` the noised graph relabelled so that node ``i`` of ``G``
corresponds to node ``perm[i]`` of ``H``; the target of training is ``perm``, never the identity.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.errors import GaptuiError
from engine.graphs import Graph, is_connected_per_graph, triu_pair, triu_slot
from engine.pairs import PairSplit

NOISE_MODELS = ("add_remove", "add")
#: Graphs with more node pairs than this draw their added edges sparsely instead of one coin per pair.
_DENSE_SLOTS = 1 << 22


def check_noise(eta: float, where: str = "--noise") -> float:
    eta = float(eta)
    if not (0.0 <= eta < 1.0) or not np.isfinite(eta):
        raise GaptuiError(f"{where} {eta:g}: the noise level must lie in [0, 1), e.g. 0.12 for 12%")
    return eta


def check_noise_model(model: str, where: str = "--noise-model") -> str:
    if model not in NOISE_MODELS:
        from engine.errors import unknown

        raise unknown(f"noise model ({where})", model, NOISE_MODELS)
    return model


def noise_probabilities(model: str, eta: float, num_nodes: int, num_edges: int) -> tuple[float, float]:
    """``(p_remove, p_add)`` for one graph; refuses ``p_add > 1`` with the numbers that make it so."""
    p_remove, p_add = noise_probability_arrays(model, eta, np.array([num_nodes]), np.array([num_edges]))
    return float(p_remove[0]), float(p_add[0])


def noise_probability_arrays(
    model: str, eta: float, num_nodes: np.ndarray, num_edges: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Vectorised :func:`noise_probabilities` over graphs: ``(p_remove [P], p_add [P])``."""
    check_noise_model(model)
    check_noise(eta)
    n = np.asarray(num_nodes, dtype=np.int64)
    m = np.asarray(num_edges, dtype=np.int64)
    pairs = n * (n - 1) // 2
    free = pairs - m
    p_remove = np.full(n.shape, eta if model == "add_remove" else 0.0)
    if eta == 0.0:
        return p_remove, np.zeros(n.shape)
    bad = np.flatnonzero((m > 0) & (eta * m > free))
    if bad.size:
        i = int(bad[0])
        nn, mm, tt, ff = int(n[i]), int(m[i]), int(pairs[i]), int(free[i])
        raise GaptuiError(
            f"noise {eta:g} is too high for graph {i} (N={nn}, |E|={mm}): "
            f"p_add = eta*|E|/(N(N-1)/2 - |E|) = {eta:g}*{mm}/({tt} - {mm}) = {eta * mm / max(ff, 1):.4g} > 1 "
            f"(this graph allows eta <= {ff / mm:.4g})"
        )
    p_add = np.divide(eta * m, free, out=np.zeros(n.shape), where=free > 0)
    return p_remove, p_add


@dataclass(frozen=True)
class NoiseStats:
    """Realised noise, summed over the pairs of a split."""

    pairs: int
    edges: int
    removed: int
    added: int
    disconnected_h: int

    def to_dict(self, split: PairSplit) -> dict[str, float | int]:
        n = split.num_nodes
        deg_g = np.diff(split.edge_ptr_g) / n
        deg_h = np.diff(split.edge_ptr_h) / n
        return {
            "pairs": self.pairs,
            "mean_order": float(n.mean()) if len(n) else 0.0,
            "mean_degree": float(deg_g.mean()) if len(n) else 0.0,
            "mean_degree_h": float(deg_h.mean()) if len(n) else 0.0,
            "edges": self.edges,
            "removed_fraction": self.removed / self.edges if self.edges else 0.0,
            "added_fraction": self.added / self.edges if self.edges else 0.0,
            "disconnected_h_share": self.disconnected_h / self.pairs if self.pairs else 0.0,
        }


def _both_directions(edges: np.ndarray, graph_of_edge: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Undirected local edges of many graphs -> ``[2, 2M]`` both directions sorted per graph, and ``ptr``."""
    width = int(edges.max()) + 1 if edges.size else 1
    gid = graph_of_edge.astype(np.int64) * width
    # One int64 key per directed edge, (graph, source, target) in mixed radix: a single sort orders all three.
    key = np.concatenate([(gid + edges[:, 0]) * width + edges[:, 1], (gid + edges[:, 1]) * width + edges[:, 0]])
    key.sort()
    index = np.empty((2, key.size), dtype=np.int64)
    np.floor_divide(key, width, out=index[0])
    np.remainder(key, width, out=index[1])
    np.remainder(index[0], width, out=index[0])
    ptr = np.zeros(count + 1, dtype=np.int64)
    np.cumsum(2 * np.bincount(graph_of_edge, minlength=count), out=ptr[1:])
    return index, ptr


def _added_dense(
    n: np.ndarray, p_add: np.ndarray, edge_slots: np.ndarray, edge_graph: np.ndarray, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """One Bernoulli(p_add) coin per non-edge of each graph; returns (graph index, slot) of added edges."""
    slots = n * (n - 1) // 2
    start = np.concatenate([[0], np.cumsum(slots)])
    coins = rng.random(int(start[-1])) < np.repeat(p_add, slots)
    coins[start[edge_graph] + edge_slots] = False
    hit = np.flatnonzero(coins)
    graph = np.searchsorted(start, hit, side="right") - 1
    return graph, hit - start[graph]


def _added_sparse(n: int, p_add: float, edge_slots: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Slots of the edges added to one large graph: Binomial count, then a uniform subset of non-edges.

    Same distribution as one coin per non-edge, without materialising all ``n(n-1)/2`` pairs.
    """
    slots = n * (n - 1) // 2
    free = slots - edge_slots.size
    want = int(rng.binomial(free, p_add))
    taken = np.sort(edge_slots)
    chosen = np.empty(0, dtype=np.int64)
    while chosen.size < want:
        draw = rng.integers(0, slots, size=2 * (want - chosen.size) + 16)
        draw = draw[~np.isin(draw, taken)]
        _, first = np.unique(draw, return_index=True)
        draw = draw[np.sort(first)]
        draw = draw[~np.isin(draw, chosen)]
        chosen = np.concatenate([chosen, draw[: want - chosen.size]])
    return chosen


def correlate(graphs: list[Graph], model: str, eta: float, rng: np.random.Generator) -> tuple[PairSplit, NoiseStats]:
    """Build one alignment pair per base graph: noise, then a uniform random relabelling of the noised graph."""
    count = len(graphs)
    n = np.array([g.num_nodes for g in graphs], dtype=np.int64)
    m = np.array([g.num_edges for g in graphs], dtype=np.int64)
    p_remove, p_add = noise_probability_arrays(model, eta, n, m)
    edges = np.concatenate([g.edges for g in graphs]) if count else np.empty((0, 2), np.int64)
    edge_graph = np.repeat(np.arange(count), m)
    edge_slots = triu_slot(edges[:, 0], edges[:, 1], n[edge_graph])

    keep = rng.random(edges.shape[0]) >= p_remove[edge_graph] if model == "add_remove" else np.ones(len(edges), bool)

    # Added edges: dense coins for small graphs in chunks of bounded memory, sparse draws for large ones.
    add_graph: list[np.ndarray] = []
    add_slot: list[np.ndarray] = []
    slots = n * (n - 1) // 2
    small = np.flatnonzero(slots <= _DENSE_SLOTS)
    edge_bounds = np.concatenate([[0], np.cumsum(m)])
    chunk_start = 0
    while chunk_start < small.size:
        budget = np.cumsum(slots[small[chunk_start:]])
        stop = chunk_start + max(1, int(np.searchsorted(budget, _DENSE_SLOTS, side="right")))
        ids = small[chunk_start:stop]
        local = np.full(count, -1, dtype=np.int64)
        local[ids] = np.arange(ids.size)
        sel = np.flatnonzero(local[edge_graph] >= 0)
        local_graph = local[edge_graph[sel]]
        g_idx, s_idx = _added_dense(n[ids], p_add[ids], edge_slots[sel], local_graph, rng)
        add_graph.append(ids[g_idx])
        add_slot.append(s_idx)
        chunk_start = stop
    for i in np.flatnonzero(slots > _DENSE_SLOTS):
        s = _added_sparse(int(n[i]), float(p_add[i]), edge_slots[edge_bounds[i] : edge_bounds[i + 1]], rng)
        add_graph.append(np.full(s.size, i, dtype=np.int64))
        add_slot.append(s)
    added_graph = np.concatenate(add_graph) if add_graph else np.empty(0, np.int64)
    added_slot = np.concatenate(add_slot) if add_slot else np.empty(0, np.int64)
    au, av = triu_pair(added_slot, n[added_graph])

    # Uniform permutation per graph: the rank of a uniform key among the graph's nodes.
    node_graph = np.repeat(np.arange(count), n)
    node_start = np.concatenate([[0], np.cumsum(n)])
    order = np.lexsort((rng.random(node_graph.size), node_graph))
    perm = np.empty(node_graph.size, dtype=np.int64)
    perm[order] = np.arange(node_graph.size) - node_start[node_graph[order]]

    h_graph = np.concatenate([edge_graph[keep], added_graph])
    h_local = np.concatenate([edges[keep], np.stack([au, av], axis=1)])
    h_perm = perm[h_local + node_start[h_graph, None]]

    g_index, g_ptr = _both_directions(edges, edge_graph, count)
    h_index, h_ptr = _both_directions(h_perm, h_graph, count)
    split = PairSplit(n, g_index, g_ptr, h_index, h_ptr, perm)
    connected = is_connected_per_graph(n, h_index, h_ptr) if count else np.empty(0, bool)
    stats = NoiseStats(
        pairs=count,
        edges=int(m.sum()),
        removed=int((~keep).sum()),
        added=int(added_slot.size),
        disconnected_h=int((~connected).sum()),
    )
    return split, stats
