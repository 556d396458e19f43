"""Correlated pairs (the graph alignment paper, section 4): noise G into G~, then relabel G~ by a uniformly random
permutation.

For a base graph with ``N`` nodes and ``|E|`` undirected edges, with ``T = N(N-1)/2`` node pairs, each edge is
removed independently with probability ``p_remove`` and each non-edge added independently with probability
``p_add = eta |E| / (T - |E|)``, so that ``eta |E|`` edges are added in expectation:

- ``add_remove``: ``p_remove = eta`` (the degree stays stable on average);
- ``add``: ``p_remove = 0`` (sparse graphs such as molecules stay connected).

A graph too dense to take ``eta |E|`` added edges (``eta |E| > T - |E|``: a triangle, a 2-atom molecule, any
complete graph) is *capped*: ``p_add = 1``, every non-edge is added (before removals its noised graph is complete),
and it adds ``T - |E| < eta |E|`` edges. Removals are unchanged. Capped graphs are counted in :class:`NoiseStats`.

The pair is stored as ``(G, H, perm)`` with ``H`` the noised graph relabelled so that node ``i`` of ``G``
corresponds to node ``perm[i]`` of ``H``; the target of training is ``perm``, never the identity.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.alignment.draws import coin_hits, offsets, uniform_permutations, uniform_subsets
from engine.errors import GaptuiError
from engine.graphs import Graph, bernoulli_hits, connected_from_root, stable_group, triu_pair
from engine.pairs import PairSplit

NOISE_MODELS = ("add_remove", "add")
# The random stream depends on these sizes (draws happen per block and per chunk, with engine.alignment.draws'
# DENSE_SLOTS): changing one changes the datasets built from a seed, so bump
# engine.alignment.datasets.FORMAT_VERSION with it.
#: Nodes plus edges per chunk of graphs assembled together: small enough for the chunk's arrays to stay in cache.
_CHUNK = 1 << 18
#: Node pairs per chunk at most (the chunk's table of taken pairs). A graph with more pairs than this is a
#: chunk of its own and draws its added edges by geometric gaps over its non-edges instead.
_CHUNK_SLOTS = 1 << 22


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
    """``(p_remove, p_add)`` for one graph, ``p_add`` capped at 1 (see :func:`capped_graphs`)."""
    p_remove, p_add = noise_probability_arrays(model, eta, np.array([num_nodes]), np.array([num_edges]))
    return float(p_remove[0]), float(p_add[0])


def capped_graphs(eta: float, num_nodes: np.ndarray, num_edges: np.ndarray) -> np.ndarray:
    """Bool ``[P]``: the graphs whose ``eta |E|`` exceeds their non-edges ``N(N-1)/2 - |E|``, so that the formula
    would give ``p_add > 1`` (``1/0`` for a complete graph); their ``p_add`` is capped at 1."""
    n = np.asarray(num_nodes, dtype=np.int64)
    m = np.asarray(num_edges, dtype=np.int64)
    return (m > 0) & (eta * m > n * (n - 1) // 2 - m)


def noise_probability_arrays(
    model: str, eta: float, num_nodes: np.ndarray, num_edges: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Vectorised :func:`noise_probabilities` over graphs: ``(p_remove [P], p_add [P])``.

    ``p_add = min(1, eta |E| / (N(N-1)/2 - |E|))``; a complete graph, with no non-edge, gets 0 (nothing to add).
    """
    check_noise_model(model)
    check_noise(eta)
    n = np.asarray(num_nodes, dtype=np.int64)
    m = np.asarray(num_edges, dtype=np.int64)
    free = n * (n - 1) // 2 - m
    p_remove = np.full(n.shape, eta if model == "add_remove" else 0.0)
    if eta == 0.0:
        return p_remove, np.zeros(n.shape)
    p_add = np.divide(eta * m, free, out=np.zeros(n.shape), where=free > 0)
    np.minimum(p_add, 1.0, out=p_add)
    return p_remove, p_add


@dataclass(frozen=True)
class NoiseStats:
    """Realised noise, summed over the pairs of a split."""

    pairs: int
    edges: int
    removed: int
    added: int
    disconnected_h: int
    #: Graphs too dense to take eta*|E| added edges, whose p_add was capped at 1 (:func:`capped_graphs`).
    capped: int = 0

    def to_dict(self, split: PairSplit) -> dict[str, float | int]:
        n = split.num_nodes
        deg_g = np.diff(split.edge_ptr_g) / n
        deg_h = np.diff(split.edge_ptr_h) / n
        return {
            "pairs": self.pairs,
            "mean_order": float(n.mean()) if len(n) else 0.0,
            "max_order": int(n.max()) if len(n) else 0,
            "mean_degree": float(deg_g.mean()) if len(n) else 0.0,
            "mean_degree_h": float(deg_h.mean()) if len(n) else 0.0,
            "edges": self.edges,
            "removed_fraction": self.removed / self.edges if self.edges else 0.0,
            "added_fraction": self.added / self.edges if self.edges else 0.0,
            "disconnected_h_share": self.disconnected_h / self.pairs if self.pairs else 0.0,
            "removed_edges": self.removed,
            "added_edges": self.added,
            "capped_graphs": self.capped,
        }


def _upper_rows(lo: np.ndarray, hi: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Undirected edges ``lo < hi`` (any order; ``hi == size`` marks an entry to drop) sorted by ``(lo, hi)``:
    ``(lo [K], hi [K])`` of the kept ones.

    A two-pass LSD radix sort by bucket passes, O(K + size) instead of a comparison sort: group by ``hi``
    (dropped entries fall into the extra last bucket and are cut off), then the CSR -> CSC conversion of that
    ``hi``-major matrix lists, for each ``lo``, its ``hi`` values in ascending order.
    """
    from scipy.sparse import csr_array

    ptr, lo_by_hi = stable_group(hi, lo, size + 1)
    kept = lo_by_hi[: int(ptr[size])]
    # The entries carry their own lo as data, so the result also gives each entry's row without a repeat.
    upper = csr_array((kept, kept, ptr[: size + 1]), shape=(size, size)).tocsc()
    return upper.data, upper.indices


def _both_directions(lo: np.ndarray, hi: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Undirected edges ``lo < hi`` sorted by ``(lo, hi)`` -> symmetric CSR ``(indptr [size + 1], targets [2K])``,
    each row's targets ascending, in one stable bucket pass by source.

    Fed first the reversed edges (``hi -> lo`` in ``(lo, hi)`` order, so each source receives its smaller
    targets ascending), then the edges themselves (each source receiving its larger targets ascending).
    """
    return stable_group(np.concatenate([hi, lo]), np.concatenate([lo, hi]), size)


def _slot_pairs(
    slot: np.ndarray, order: np.ndarray, table: tuple[np.ndarray, np.ndarray] | None
) -> tuple[np.ndarray, np.ndarray]:
    """``(u, v)`` of pair slots ``[A]`` in graphs of orders ``[A]``; ``table`` is ``triu_indices`` of the one order."""
    if table is None:
        return triu_pair(slot, order)
    return table[0][slot], table[1][slot]


def _write_local(
    out: np.ndarray, indptr: np.ndarray, targets: np.ndarray, node_ptr: np.ndarray, local: np.ndarray
) -> None:
    """Chunk CSR ``(indptr [N + 1], targets [K])`` -> per-pair local ids in ``out [2, K]`` (int64).

    ``node_ptr [P + 1]`` delimits the chunk's graphs, ``local [N]`` is each node's id within its graph.
    """
    out[0] = np.repeat(local, np.diff(indptr))
    shift = np.repeat(node_ptr[:-1].astype(targets.dtype), np.diff(indptr[node_ptr]))
    np.subtract(targets, shift, out=out[1])


def _chunks(weight: np.ndarray, slots: np.ndarray, big: np.ndarray) -> list[tuple[int, int]]:
    """Consecutive ``[start, stop)`` ranges of graphs, of total ``weight`` at most about ``_CHUNK`` and total
    ``slots`` at most ``_CHUNK_SLOTS``; each ``big`` graph is a range of its own."""
    cum_weight, cum_slots = np.cumsum(weight), np.cumsum(slots)
    bigs = np.flatnonzero(big)
    out = []
    start = 0
    while start < weight.size:
        if big[start]:
            stop = start + 1
        else:
            base_weight = int(cum_weight[start - 1]) if start else 0
            base_slots = int(cum_slots[start - 1]) if start else 0
            stop = min(
                int(np.searchsorted(cum_weight, base_weight + _CHUNK, side="right")),
                int(np.searchsorted(cum_slots, base_slots + _CHUNK_SLOTS, side="right")),
                int(bigs[np.searchsorted(bigs, start)]) if bigs.size and bigs[-1] > start else weight.size,
            )
            stop = max(start + 1, stop)
        out.append((start, stop))
        start = stop
    return out


def _empty_split() -> tuple[PairSplit, NoiseStats]:
    none = np.zeros(0, dtype=np.int64)
    index = np.zeros((2, 0), dtype=np.int64)
    ptr = np.zeros(1, dtype=np.int64)
    return PairSplit(none, index, ptr, index.copy(), ptr.copy(), none.copy()), NoiseStats(0, 0, 0, 0, 0)


@dataclass(frozen=True)
class _Draws:
    """The changes :func:`correlate` draws first, for all graphs: they decide the output sizes."""

    #: Removed edges, ascending indices into the graphs' concatenated edges; ``removed_ptr [P + 1]`` per graph.
    removed: np.ndarray
    removed_ptr: np.ndarray
    #: ``[P]`` edges each graph adds as a uniform subset of its non-edges (:func:`uniform_subsets`).
    want: np.ndarray
    #: Graph with more than ``_CHUNK_SLOTS`` pairs -> ranks of the non-edges it adds.
    big_ranks: dict[int, np.ndarray]
    #: Edges added by coins (:func:`coin_hits`): ``(graph, slot)``, ``coin_ptr [P + 1]`` per graph.
    coin_graph: np.ndarray
    coin_slot: np.ndarray
    coin_ptr: np.ndarray
    #: ``[sum(n)]`` one uniform permutation per graph (:func:`uniform_permutations`).
    perm: np.ndarray
    #: ``[P]`` edges each graph adds, however drawn.
    added: np.ndarray


@dataclass(frozen=True)
class _Chunk:
    """Graphs ``c0 .. c1 - 1`` assembled together, on chunk-global node ids."""

    c0: int
    c1: int
    nc: np.ndarray
    mc: np.ndarray
    cnode_ptr: np.ndarray
    cslot_ptr: np.ndarray
    size: int
    node_type: type
    #: The graphs' edges, concatenated (graph-local ids).
    edges: np.ndarray
    #: ``[size]`` the chunk-global id of the first node of each node's graph, and each node's id in its graph.
    node_offset: np.ndarray
    local: np.ndarray


def _draw_changes(
    model: str,
    n: np.ndarray,
    edge_list: list[np.ndarray],
    node_ptr: np.ndarray,
    edge_ptr: np.ndarray,
    free: np.ndarray,
    big: np.ndarray,
    p_remove: np.ndarray,
    p_add: np.ndarray,
    rng: np.random.Generator,
) -> _Draws:
    """Draw the removals, the added-edge counts and coins, and the permutations of all graphs, in this order."""
    count = n.size
    dense = ~big & (p_add > 0.5)
    subset = ~big & ~dense & (p_add > 0)
    removed = (
        bernoulli_hits(int(edge_ptr[-1]), float(p_remove[0]), rng)
        if model == "add_remove"
        else np.empty(0, dtype=np.int64)
    )
    want = np.zeros(count, dtype=np.int64)
    want[subset] = rng.binomial(free[subset], p_add[subset])
    big_ids = np.flatnonzero(big & (p_add > 0))
    big_ranks = {int(i): bernoulli_hits(int(free[i]), float(p_add[i]), rng) for i in big_ids}
    coin_graph, coin_slot = coin_hits(np.flatnonzero(dense), p_add, n, edge_list, rng)
    perm = uniform_permutations(n, node_ptr, rng)

    removed_ptr = np.searchsorted(removed, edge_ptr)
    coin_ptr = np.searchsorted(coin_graph, np.arange(count + 1))
    added = want + np.diff(coin_ptr)
    added[big_ids] = [big_ranks[int(i)].size for i in big_ids]
    return _Draws(removed, removed_ptr, want, big_ranks, coin_graph, coin_slot, coin_ptr, perm, added)


def _chunk_scratch(chunks: list[tuple[int, int]], slots: np.ndarray, big: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The chunks' table of taken pairs, and the scratch of uniform_subsets, reused chunk after chunk."""
    table_size = max(int(slots[c0:c1].sum()) if not big[c0] else 0 for c0, c1 in chunks)
    taken = np.zeros(table_size, dtype=bool)
    owner = np.empty(table_size, dtype=np.int32 if table_size < np.iinfo(np.int32).max else np.int64)
    return taken, owner


def _pair_table(
    n: np.ndarray, slots: np.ndarray, added: np.ndarray, big: np.ndarray
) -> tuple[np.ndarray, np.ndarray] | None:
    """Slot -> (u, v) table when all graphs have one order (and the table is small next to the work), else None."""
    if n.min() == n.max() and slots[0] <= max(int(added.sum()), 1 << 10) and not big[0]:
        return np.triu_indices(int(n[0]), 1)
    return None


def _chunk_of(
    c0: int, c1: int, n: np.ndarray, m: np.ndarray, node_ptr: np.ndarray, slots: np.ndarray, edge_list: list[np.ndarray]
) -> _Chunk:
    """Lay out graphs ``c0 .. c1 - 1`` as one chunk; ValueError for an edge (u, v) with u >= v."""
    nc, mc = n[c0:c1], m[c0:c1]
    cnode_ptr = node_ptr[c0 : c1 + 1] - node_ptr[c0]
    cslot_ptr = offsets(slots[c0:c1])
    size = int(cnode_ptr[-1])
    node_type = np.int32 if size < np.iinfo(np.int32).max else np.int64
    edges = np.concatenate(edge_list[c0:c1]) if c1 - c0 > 1 else edge_list[c0]

    if (edges[:, 0] >= edges[:, 1]).any():
        raise ValueError("correlate expects simple graphs with edges (u, v), u < v")
    node_offset = np.repeat(cnode_ptr[:-1], nc)
    local = np.arange(size, dtype=np.int64) - node_offset
    return _Chunk(c0, c1, nc, mc, cnode_ptr, cslot_ptr, size, node_type, edges, node_offset, local)


def _chunk_g_edges(chunk: _Chunk, draws: _Draws, edge_ptr: np.ndarray) -> tuple[np.ndarray, ...]:
    """The chunk's edges sorted by slot, ``(eu, ev, gu, gv, gslot, drop)``, ``drop`` the positions of the removed."""
    nc, cnode_ptr, local = chunk.nc, chunk.cnode_ptr, chunk.local
    # Chunk-global ids of the edges' ends: int64 for gathers (which convert narrower indices first), the
    # narrow node type for the bucket passes. Each edge's slot in the chunk is row_base[u] + v.
    row_base = np.repeat(chunk.cslot_ptr[:-1] - cnode_ptr[:-1], nc) + local * (np.repeat(nc, nc) - 1)
    row_base -= local * (local + 1) // 2 + 1
    edge_offset = np.repeat(cnode_ptr[:-1], chunk.mc)
    eu, ev = chunk.edges[:, 0] + edge_offset, chunk.edges[:, 1] + edge_offset
    gu, gv = eu.astype(chunk.node_type), ev.astype(chunk.node_type)
    gslot = row_base[eu] + ev
    drop = draws.removed[draws.removed_ptr[chunk.c0] : draws.removed_ptr[chunk.c1]] - edge_ptr[chunk.c0]
    if gslot.size > 1 and (gslot[1:] <= gslot[:-1]).any():
        # Graph.edges should already be sorted: sort if not (what follows relies on it), refuse duplicates.
        order = np.argsort(gslot, kind="stable")
        eu, ev, gu, gv, gslot = eu[order], ev[order], gu[order], gv[order], gslot[order]
        if (gslot[1:] == gslot[:-1]).any():
            raise ValueError("correlate expects simple graphs: a graph lists an edge twice")
        dropped = np.zeros(gslot.size, dtype=bool)
        dropped[drop] = True
        drop = np.flatnonzero(dropped[order])
    return eu, ev, gu, gv, gslot, drop


def _chunk_added_edges(
    chunk: _Chunk,
    gslot: np.ndarray,
    draws: _Draws,
    big: np.ndarray,
    free: np.ndarray,
    taken: np.ndarray,
    owner: np.ndarray,
    pairs: tuple[np.ndarray, np.ndarray] | None,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """The chunk's added edges as chunk-global ``(u, v)``: by rank, uniform subset and coins, as drawn."""
    c0, c1, cslot_ptr = chunk.c0, chunk.c1, chunk.cslot_ptr
    # Added edges, as (chunk graph, chunk slot).
    if big[c0]:
        # Non-edge rank -> slot: skip the edges before it, those with slot - (edges before it) <= rank.
        rank = draws.big_ranks.get(c0, np.empty(0, dtype=np.int64))
        ag = np.zeros(rank.size, dtype=np.int64)
        aslot = rank + np.searchsorted(gslot - np.arange(gslot.size), rank, side="right")
    else:
        table = taken[: int(cslot_ptr[-1])]
        table[gslot] = True
        ag, aslot = uniform_subsets(draws.want[c0:c1], free[c0:c1], cslot_ptr, table, owner, rng)
        table[:] = False
    coin_ptr = draws.coin_ptr
    if coin_ptr[c1] > coin_ptr[c0]:
        cg = draws.coin_graph[coin_ptr[c0] : coin_ptr[c1]] - c0
        ag = np.concatenate([ag, cg])
        aslot = np.concatenate([aslot, cslot_ptr[cg] + draws.coin_slot[coin_ptr[c0] : coin_ptr[c1]]])
    au, av = _slot_pairs(aslot - cslot_ptr[ag], chunk.nc[ag], pairs)
    au += chunk.cnode_ptr[ag]
    av += chunk.cnode_ptr[ag]
    return au, av


def _write_h_chunk(
    out: np.ndarray,
    chunk: _Chunk,
    to_h: np.ndarray,
    eu: np.ndarray,
    ev: np.ndarray,
    au: np.ndarray,
    av: np.ndarray,
    drop: np.ndarray,
    local: np.ndarray,
) -> np.ndarray:
    """Write the chunk's H into ``out`` (local ids); returns whether each of its graphs H is connected."""
    size, node_type, cnode_ptr, nc = chunk.size, chunk.node_type, chunk.cnode_ptr, chunk.nc
    # H: kept and added edges relabelled by perm, oriented lo < hi; removed ones go to the dropped bucket.
    kept = eu.size
    hi = np.empty(kept + au.size, dtype=node_type)
    lo = np.empty(kept + au.size, dtype=node_type)
    x, y = to_h[eu], to_h[ev]
    np.maximum(x, y, out=hi[:kept])
    np.minimum(x, y, out=lo[:kept])
    x, y = to_h[au], to_h[av]
    np.maximum(x, y, out=hi[kept:])
    np.minimum(x, y, out=lo[kept:])
    hi[drop] = size
    lo, hi = _upper_rows(lo, hi, size)
    # Both directions as for G, plus the root of connected_from_root (node `size`, sorted last).
    firsts = cnode_ptr[:-1][nc > 0].astype(node_type)
    h_indptr, h_targets = stable_group(
        np.concatenate([hi, lo, np.full(firsts.size, size, dtype=node_type)]),
        np.concatenate([lo, hi, firsts]),
        size + 1,
    )
    entries = 2 * lo.size
    _write_local(out, h_indptr[: size + 1], h_targets[:entries], cnode_ptr, local)
    return connected_from_root(nc, h_indptr, h_targets)


def correlate(graphs: list[Graph], model: str, eta: float, rng: np.random.Generator) -> tuple[PairSplit, NoiseStats]:
    """Build one alignment pair per base graph: noise, then a uniform random relabelling of the noised graph.

    ``graphs``: ``P`` simple graphs. Returns the :class:`PairSplit` of the ``P`` pairs and their
    :class:`NoiseStats`. Every random choice has the law of the description in the module docstring (one
    independent coin per edge and per non-edge, a uniform permutation per pair), drawn with about one random
    number per change instead of one per node pair:

    - removals: the hits of one Bernoulli(p_remove) sequence over all edges (:func:`bernoulli_hits`);
    - additions: per graph a Binomial(non-edges, p_add) count, then a uniform subset of that many non-edges
      (:func:`uniform_subsets`); coins for the graphs with ``p_add > 1/2`` (:func:`coin_hits`), and for a
      graph with more than ``_CHUNK_SLOTS`` node pairs the hits of a Bernoulli sequence over its non-edges;
    - permutations: a Fisher-Yates shuffle per graph (:func:`uniform_permutations`).

    The pairs are assembled by chunks of graphs small enough for their arrays to stay in cache, on
    chunk-global node ids, with bucket passes instead of sorts.
    """
    count = len(graphs)
    n = np.fromiter((g.num_nodes for g in graphs), dtype=np.int64, count=count)
    edge_list = [g.edges for g in graphs]
    m = np.fromiter((e.shape[0] for e in edge_list), dtype=np.int64, count=count)
    p_remove, p_add = noise_probability_arrays(model, eta, n, m)
    if count == 0:
        return _empty_split()
    node_ptr, edge_ptr = offsets(n), offsets(m)
    slots = n * (n - 1) // 2
    free = slots - m
    big = slots > _CHUNK_SLOTS

    # What decides the output sizes is drawn first, for all graphs.
    draws = _draw_changes(model, n, edge_list, node_ptr, edge_ptr, free, big, p_remove, p_add, rng)
    g_ptr, h_ptr = 2 * edge_ptr, 2 * offsets(m - np.diff(draws.removed_ptr) + draws.added)
    g_index = np.empty((2, int(g_ptr[-1])), dtype=np.int64)
    h_index = np.empty((2, int(h_ptr[-1])), dtype=np.int64)
    connected = np.empty(count, dtype=bool)

    chunks = _chunks(n + m, np.where(big, 0, slots), big)
    taken, owner = _chunk_scratch(chunks, slots, big)
    pairs = _pair_table(n, slots, draws.added, big)

    for c0, c1 in chunks:
        chunk = _chunk_of(c0, c1, n, m, node_ptr, slots, edge_list)
        eu, ev, gu, gv, gslot, drop = _chunk_g_edges(chunk, draws, edge_ptr)
        au, av = _chunk_added_edges(chunk, gslot, draws, big, free, taken, owner, pairs, rng)
        local = chunk.local.astype(chunk.node_type)

        g_indptr, g_targets = _both_directions(gu, gv, chunk.size)
        _write_local(g_index[:, g_ptr[c0] : g_ptr[c1]], g_indptr, g_targets, chunk.cnode_ptr, local)

        to_h = (draws.perm[node_ptr[c0] : node_ptr[c1]] + chunk.node_offset).astype(chunk.node_type)
        connected[c0:c1] = _write_h_chunk(h_index[:, h_ptr[c0] : h_ptr[c1]], chunk, to_h, eu, ev, au, av, drop, local)

    split = PairSplit(n, g_index, g_ptr, h_index, h_ptr, draws.perm)
    stats = NoiseStats(
        pairs=count,
        edges=int(edge_ptr[-1]),
        removed=int(draws.removed.size),
        added=int(draws.added.sum()),
        disconnected_h=int((~connected).sum()),
        capped=int(capped_graphs(eta, n, m).sum()),
    )
    return split, stats


def relabel(graphs: list[Graph], partners: list[Graph], rng: np.random.Generator) -> tuple[PairSplit, NoiseStats]:
    """Alignment pairs of prepared graphs: ``partners[p]`` (node ``i`` of it being node ``i`` of ``graphs[p]``)
    relabelled by a uniform random permutation per pair, as :func:`correlate` relabels the graphs it noises.

    Nothing is noised: the returned :class:`NoiseStats` measure the changes the partners already carry (edges of G
    missing from G~ and edges of G~ absent from G, under the identity correspondence).
    """
    from scipy.sparse import coo_array
    from scipy.sparse.csgraph import connected_components

    if not graphs:
        return _empty_split()
    g_parts, h_parts, perms = [], [], []
    removed = added = disconnected = 0
    for graph, partner in zip(graphs, partners, strict=True):
        size = graph.num_nodes
        perm = rng.permutation(size).astype(np.int64)
        g_keys = graph.edges[:, 0] * size + graph.edges[:, 1]
        h_keys = partner.edges[:, 0] * size + partner.edges[:, 1]
        removed += int(np.setdiff1d(g_keys, h_keys, assume_unique=True).size)
        added += int(np.setdiff1d(h_keys, g_keys, assume_unique=True).size)
        u, v = partner.edges.T
        adj = coo_array((np.ones(u.size), (u, v)), shape=(size, size))
        disconnected += int(connected_components(adj, directed=False, return_labels=False) > 1)
        g_parts.append(graph.edge_index())
        h_parts.append(Graph(size, np.sort(perm[partner.edges], axis=1)).edge_index())
        perms.append(perm)
    n = np.array([g.num_nodes for g in graphs], dtype=np.int64)
    g_ptr = offsets(np.array([p.shape[1] for p in g_parts], dtype=np.int64))
    h_ptr = offsets(np.array([p.shape[1] for p in h_parts], dtype=np.int64))
    g_index, h_index = np.concatenate(g_parts, axis=1), np.concatenate(h_parts, axis=1)
    split = PairSplit(n, g_index, g_ptr, h_index, h_ptr, np.concatenate(perms))
    edges = int(sum(g.num_edges for g in graphs))
    return split, NoiseStats(pairs=len(graphs), edges=edges, removed=removed, added=added, disconnected_h=disconnected)
