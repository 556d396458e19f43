"""BFS subgraph sampling of a large graph (the graph alignment paper, Appendix B, Algorithm 1)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from scipy.sparse import csr_matrix

from engine.errors import GaptuiError
from engine.graphs import Graph


def adjacency(graph: Graph) -> csr_matrix:
    """Symmetric CSR adjacency of a graph."""
    ei = graph.edge_index()
    data = np.ones(ei.shape[1], dtype=np.int8)
    from scipy.sparse import csr_matrix

    return csr_matrix((data, (ei[0], ei[1])), shape=(graph.num_nodes, graph.num_nodes))


def bfs_nodes(adj: csr_matrix, order: int, rng: np.random.Generator) -> np.ndarray:
    """Node set of one BFS sample of exactly ``order`` nodes, sorted.

    Grows from a uniformly random start by whole frontiers (all neighbours of the nodes taken so far); the last
    frontier is truncated uniformly at random so the sample has exactly ``order`` nodes; when a component is
    exhausted the search restarts from a uniformly random node not yet taken.
    """
    n = adj.shape[0]
    if order > n:
        raise GaptuiError(f"BFS sampling: cannot take {order} nodes from a graph of {n} nodes")
    taken = np.zeros(n, dtype=bool)
    chosen: list[np.ndarray] = []
    count = 0
    frontier = np.empty(0, dtype=np.int64)
    while count < order:
        if frontier.size == 0:
            free = np.flatnonzero(~taken)
            frontier = free[rng.integers(free.size)].reshape(1)
        else:
            neigh = adj[frontier].indices
            frontier = np.unique(neigh[~taken[neigh]])
            if frontier.size == 0:
                continue
        if count + frontier.size > order:
            frontier = rng.choice(frontier, size=order - count, replace=False)
        taken[frontier] = True
        chosen.append(frontier)
        count += frontier.size
    return np.sort(np.concatenate(chosen))


def induced_subgraph(adj: csr_matrix, nodes: np.ndarray) -> Graph:
    """The subgraph induced by ``nodes`` (sorted), relabelled ``0 .. len(nodes) - 1`` in that order."""
    sub = adj[nodes][:, nodes].tocoo()
    keep = sub.row < sub.col
    edges = np.stack([sub.row[keep], sub.col[keep]], axis=1).astype(np.int64)
    edges = edges[np.lexsort((edges[:, 1], edges[:, 0]))]
    return Graph(int(len(nodes)), edges)


def bfs_subgraph(graph: Graph, order: int, rng: np.random.Generator) -> Graph:
    """One BFS-sampled induced subgraph of exactly ``order`` nodes."""
    adj = adjacency(graph)
    return induced_subgraph(adj, bfs_nodes(adj, order, rng))


def bfs_subgraphs(graph: Graph, order: int, count: int, rng: np.random.Generator) -> list[Graph]:
    """``count`` independent BFS samples of ``order`` nodes (the adjacency is built once)."""
    adj = adjacency(graph)
    return [induced_subgraph(adj, bfs_nodes(adj, order, rng)) for _ in range(count)]
