"""Simple undirected graphs as numpy arrays, and the normalisation every input graph goes through."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True, eq=False)
class Graph:
    """A simple undirected graph.

    ``edges`` is an int64 array of shape ``[m, 2]`` holding each undirected edge once as ``(u, v)`` with
    ``u < v``, rows sorted lexicographically, no duplicates; node ids are ``0 .. num_nodes - 1``.
    """

    num_nodes: int
    edges: np.ndarray

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


def is_connected_per_graph(num_nodes: np.ndarray, edge_index: np.ndarray, ptr: np.ndarray) -> np.ndarray:
    """Whether each graph of a concatenated batch is connected. ``edge_index`` holds local ids per graph."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    num_nodes = np.asarray(num_nodes, dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(num_nodes)[:-1]])
    graph_of_edge = np.repeat(np.arange(len(num_nodes)), np.diff(ptr))
    glob = edge_index + offsets[graph_of_edge]
    total = int(num_nodes.sum())
    adj = coo_matrix((np.ones(glob.shape[1], dtype=np.int8), (glob[0], glob[1])), shape=(total, total))
    count, labels = connected_components(adj, directed=False)
    # A component never spans two graphs, so each label maps to one graph.
    graph_of_component = np.zeros(count, dtype=np.int64)
    graph_of_component[labels] = np.repeat(np.arange(len(num_nodes)), num_nodes)
    components = np.bincount(graph_of_component, minlength=len(num_nodes))
    return components == 1
