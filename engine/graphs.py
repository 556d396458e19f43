"""Simple undirected graphs as numpy arrays, and the normalisation every input graph goes through."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

#: Bytes of a :class:`Graph` besides its arrays' contents: the object and two numpy array headers.
_GRAPH_OVERHEAD = 600


def graph_bytes(nodes: float, mean_degree: float) -> int:
    """Bytes one :class:`Graph` of ``nodes`` nodes and ``mean_degree`` holds in memory (edges once, int64, and
    int64 node types), for memory estimates before a source draws or reads its graphs."""
    return int(_GRAPH_OVERHEAD + nodes * (8 * mean_degree + 8))


@dataclass(frozen=True, eq=False)
class Graph:
    """A simple undirected graph.

    ``edges`` is an int64 array of shape ``[m, 2]`` holding each undirected edge once as ``(u, v)`` with
    ``u < v``, rows sorted lexicographically, no duplicates; node ids are ``0 .. num_nodes - 1``.
    Families that need them also carry ``node_types`` (int64 ``[num_nodes]``, e.g. atom types for an
    ``nn.Embedding``) and a graph-level regression ``target``; alignment ignores both.
    """

    num_nodes: int
    edges: np.ndarray
    node_types: np.ndarray | None = None
    target: float | None = None

    @property
    def num_edges(self) -> int:
        return int(self.edges.shape[0])

    def edge_index(self) -> np.ndarray:
        """Both directions of every edge, ``[2, 2m]``, sorted by (source, target)."""
        both = np.concatenate([self.edges, self.edges[:, ::-1]], axis=0)
        order = np.lexsort((both[:, 1], both[:, 0]))
        return np.ascontiguousarray(both[order].T)


@dataclass
class NormalisationReport:
    """What normalisation changed, summed over graphs: counts of dropped or added directed entries."""

    graphs: int = 0
    self_loops: int = 0
    duplicates: int = 0
    symmetrised: int = 0
    changed_graphs: int = 0
    notes: list[str] = field(default_factory=list)

    def add(self, other: NormalisationReport) -> None:
        self.graphs += other.graphs
        self.self_loops += other.self_loops
        self.duplicates += other.duplicates
        self.symmetrised += other.symmetrised
        self.changed_graphs += other.changed_graphs
        self.notes.extend(other.notes)

    @property
    def changed(self) -> bool:
        return self.changed_graphs > 0

    def summary(self) -> str:
        """One line for the user, empty when nothing changed."""
        if not self.changed:
            return ""
        return (
            f"normalised {self.changed_graphs} of {self.graphs} input graphs to simple undirected graphs: "
            f"dropped {self.self_loops} self loops and {self.duplicates} duplicate edges, "
            f"symmetrised {self.symmetrised} one-way edges"
        )

    def to_dict(self) -> dict[str, int]:
        return {
            "graphs": self.graphs,
            "changed_graphs": self.changed_graphs,
            "self_loops": self.self_loops,
            "duplicates": self.duplicates,
            "symmetrised": self.symmetrised,
        }


def simple_graph(num_nodes: int, edge_index: np.ndarray) -> tuple[Graph, NormalisationReport]:
    """Normalise any edge list to a :class:`Graph`: self loops and duplicates dropped, directions symmetrised.

    ``edge_index`` is ``[2, E]`` (PyG layout) or ``[E, 2]``; entries may be directed or undirected. The report
    counts what changed so the caller can tell the user (a PyG dataset storing both directions of each edge is
    *not* a change).
    """
    ei = np.asarray(edge_index, dtype=np.int64)
    if ei.size == 0:
        ei = ei.reshape(2, 0)
    if ei.ndim != 2 or 2 not in ei.shape:
        raise ValueError(f"edge_index must have shape [2, E] or [E, 2], got {list(ei.shape)}")
    if ei.shape[0] != 2:
        ei = ei.T
    num_nodes = int(num_nodes)
    if ei.size and (ei.min() < 0 or ei.max() >= num_nodes):
        raise ValueError(f"edge_index refers to node {int(ei.max())} but the graph has {num_nodes} nodes")
    src, dst = ei
    report = NormalisationReport(graphs=1)
    loops = src == dst
    report.self_loops = int(loops.sum())
    src, dst = src[~loops], dst[~loops]
    # Each directed entry as a key; duplicates are repeated directed keys.
    directed = np.unique(src * num_nodes + dst, return_counts=True)
    report.duplicates = int((directed[1] - 1).sum())
    keys = directed[0]
    reverse = (keys % num_nodes) * num_nodes + keys // num_nodes
    report.symmetrised = int((~np.isin(reverse, keys, assume_unique=True)).sum())
    lo = np.minimum(keys // num_nodes, keys % num_nodes)
    hi = np.maximum(keys // num_nodes, keys % num_nodes)
    und = np.unique(lo * num_nodes + hi)
    edges = np.stack([und // num_nodes, und % num_nodes], axis=1).astype(np.int64)
    report.changed_graphs = int(bool(report.self_loops or report.duplicates or report.symmetrised))
    return Graph(num_nodes, edges), report


def triu_slot(u: np.ndarray, v: np.ndarray, n: np.ndarray | int) -> np.ndarray:
    """Index of the pair ``(u, v)``, ``u < v``, among the ``n(n-1)/2`` upper-triangular slots (row-major)."""
    u = np.asarray(u, dtype=np.int64)
    return u * n - u * (u + 1) // 2 + (np.asarray(v, dtype=np.int64) - u - 1)


def triu_pair(k: np.ndarray, n: np.ndarray | int) -> tuple[np.ndarray, np.ndarray]:
    """Inverse of :func:`triu_slot`: the pair ``(u, v)`` of slot ``k`` in a graph of order ``n``."""
    k = np.asarray(k, dtype=np.int64)
    n = np.asarray(n, dtype=np.int64)
    total = n * (n - 1) // 2
    # Count slots from the end: slot k lies in the row whose tail block (rows u..n-2) first holds total - k.
    r = total - 1 - k
    t = ((np.sqrt(8.0 * r + 1.0) - 1.0) / 2.0).astype(np.int64)
    # Fix rounding: t is the largest integer with t(t+1)/2 <= r.
    t += ((t + 1) * (t + 2) // 2 <= r).astype(np.int64)
    t -= (t * (t + 1) // 2 > r).astype(np.int64)
    u = n - 2 - t
    v = k - (u * n - u * (u + 1) // 2) + u + 1
    return u, v


#: Most geometric gaps drawn at once by :func:`bernoulli_hits` (bounds its memory). The random stream depends on
#: it: changing it changes the datasets built from a seed (bump engine.alignment.datasets.FORMAT_VERSION).
_HIT_BLOCK = 1 << 22


def bernoulli_hits(size: int, p: float, rng: np.random.Generator) -> np.ndarray:
    """Sorted int64 positions in ``[0, size)`` hit by independent Bernoulli(``p``) coins, one per position.

    Drawn as geometric gaps, one draw per hit instead of one coin per position: with ``E ~ Exp(1)`` and
    ``lambda = -log(1 - p)``, ``floor(E / lambda) + 1`` is Geometric(p) on ``{1, 2, ...}`` exactly, since
    ``P(gap > k) = P(E >= k lambda) = (1 - p)^k``, so the partial sums are the hits of i.i.d. coins. Gaps are
    drawn in blocks of at most ``_HIT_BLOCK`` (memory stays bounded); a block continues from the last hit, which by
    the memorylessness of the coins does not change the law.
    """
    size = int(size)
    if size <= 0 or p <= 0:
        return np.empty(0, dtype=np.int64)
    if p >= 1:
        return np.arange(size, dtype=np.int64)
    with np.errstate(divide="ignore", over="ignore"):
        scale = -1.0 / np.log1p(-p)
    if not np.isfinite(scale):
        # p is subnormal: a hit among fewer than 2^63 positions has probability below 1e-300.
        return np.empty(0, dtype=np.int64)
    # Exp(1) draws stay below 64 (the ziggurat's tail is -log of a 53-bit uniform, plus its 7.7 start), so
    # a block's sum of gaps can only leave int64 when p is tiny.
    overflow_guard = scale >= ((2**62 - size) / _HIT_BLOCK - 1) / 64
    parts: list[np.ndarray] = []
    last = -1  # the position of the last hit so far
    while True:
        mean = (size - 1 - last) * p
        block = int(min(_HIT_BLOCK, mean + 6.0 * np.sqrt(mean) + 16))
        gaps = rng.standard_exponential(block)
        gaps *= scale
        gaps += 1.0  # floor(x + 1) = floor(x) + 1 for x >= 0
        if overflow_guard:
            # A gap past the end ends the sequence anyway; capping it keeps the cumulative sum within int64.
            np.minimum(gaps, size + 1.0, out=gaps)
        hits = gaps.astype(np.int64)  # floor, the gaps being >= 1
        hits[0] += last
        np.cumsum(hits, out=hits)
        inside = int(np.searchsorted(hits, size))
        parts.append(hits[:inside])
        if inside < block:
            break
        last = int(hits[-1])
    return np.concatenate(parts) if len(parts) > 1 else parts[0]


def stable_group(keys: np.ndarray, payload: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Counting sort: ``payload [K]`` grouped by ``keys [K]`` (``0 <= key < size``), stable within a group.

    Returns ``(ptr [size + 1], grouped [K])``: group ``k`` is ``grouped[ptr[k]:ptr[k + 1]]``, in input order.
    O(K + size), no comparison sort: scipy's CSR -> CSC conversion of a one-row matrix is exactly this bucket
    sort (it visits the entries in order, so ties keep their order; tests/engine/test_graphs.py checks that it does).
    """
    from scipy.sparse import csr_array

    keys = np.asarray(keys)
    index = np.int32 if max(int(keys.size), int(size)) < np.iinfo(np.int32).max else np.int64
    one_row = csr_array(
        (payload, keys.astype(index, copy=False), np.array([0, keys.size], dtype=index)), shape=(1, int(size))
    )
    by_key = one_row.tocsc()
    return by_key.indptr, by_key.data


def component_counts(num_nodes: np.ndarray, indptr: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """Connected components per graph, ``[P]``, of a batch given as one CSR over global node ids.

    ``indptr [sum(num_nodes) + 1]`` and ``indices`` hold each graph's nodes consecutively (graph ``p`` owns
    nodes ``node_ptr[p] .. node_ptr[p + 1] - 1``); edges are read as undirected. A graph without nodes has 0.
    """
    from scipy.sparse import csr_array
    from scipy.sparse.csgraph import connected_components

    num_nodes = np.asarray(num_nodes, dtype=np.int64)
    total = int(num_nodes.sum())
    adj = csr_array((np.ones(indices.size), indices, indptr), shape=(total, total))
    count, labels = connected_components(adj, directed=False)
    # A component never spans two graphs, so each label maps to one graph.
    graph_of_component = np.zeros(count, dtype=np.int64)
    graph_of_component[labels] = np.repeat(np.arange(len(num_nodes)), num_nodes)
    return np.bincount(graph_of_component, minlength=len(num_nodes))


def connected_symmetric(num_nodes: np.ndarray, indptr: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """Whether each graph of a batch is connected, bool ``[P]``, for a *symmetric* CSR over global node ids.

    ``indptr [sum(num_nodes) + 1]``, ``indices``: each edge stored in both directions, graph ``p`` owning nodes
    ``node_ptr[p] .. node_ptr[p + 1] - 1``. Adds the root of :func:`connected_from_root` as an extra last node.
    """
    num_nodes = np.asarray(num_nodes, dtype=np.int64)
    node_ptr = np.concatenate([[0], np.cumsum(num_nodes)]).astype(np.int64)
    firsts = node_ptr[:-1][num_nodes > 0].astype(indices.dtype)
    ptr = np.empty(indptr.size + 1, dtype=np.result_type(indptr.dtype, indices.dtype))
    ptr[:-1] = indptr
    ptr[-1] = indptr[-1] + firsts.size
    return connected_from_root(num_nodes, ptr, np.concatenate([indices, firsts]))


def connected_from_root(num_nodes: np.ndarray, indptr: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """Whether each graph of a batch is connected, bool ``[P]``, given a symmetric CSR plus a root.

    ``indptr [sum(num_nodes) + 2]``, ``indices``: the batch's edges in both directions on global node ids, then
    one last node, the root, with an edge to the first node of every graph that has nodes. One breadth-first
    search from the root: a graph is connected when the search reaches all of its nodes (a graph without nodes
    is not). About half the work of :func:`component_counts`, which also builds and walks the transpose.
    """
    from scipy.sparse import csr_array
    from scipy.sparse.csgraph import breadth_first_order

    num_nodes = np.asarray(num_nodes, dtype=np.int64)
    root = indptr.size - 2
    adj = csr_array((np.ones(indices.size), indices, indptr), shape=(root + 1, root + 1))
    reached = breadth_first_order(adj, root, directed=True, return_predecessors=False)[1:]
    graph_of_node = np.repeat(np.arange(num_nodes.size), num_nodes)
    return (np.bincount(graph_of_node[reached], minlength=num_nodes.size) == num_nodes) & (num_nodes > 0)


def is_connected_per_graph(num_nodes: np.ndarray, edge_index: np.ndarray, ptr: np.ndarray) -> np.ndarray:
    """Whether each graph of a concatenated batch is connected. ``edge_index`` holds local ids per graph.

    ``num_nodes [P]``, ``edge_index [2, E]`` (directed entries, read as undirected), ``ptr [P + 1]``; returns
    bool ``[P]``.
    """
    num_nodes = np.asarray(num_nodes, dtype=np.int64)
    edge_index = np.asarray(edge_index).astype(np.int64, copy=False)
    offsets = np.concatenate([[0], np.cumsum(num_nodes)]).astype(np.int64)[:-1]
    total = int(num_nodes.sum())
    index = np.int32 if max(total, edge_index.shape[1]) < np.iinfo(np.int32).max else np.int64
    shift = np.repeat(offsets, np.diff(ptr))
    src = edge_index[0] + shift
    dst = (edge_index[1] + shift).astype(index)
    if src.size and (np.diff(src) >= 0).all():
        # Sources already ascending (the PairSplit layout): the CSR is the edge list itself.
        indptr = np.zeros(total + 1, dtype=index)
        np.cumsum(np.bincount(src, minlength=total), out=indptr[1:])
    else:
        indptr, dst = stable_group(src, dst, total)
    return component_counts(num_nodes, indptr, dst) == 1
