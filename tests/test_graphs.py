"""Normalisation of input graphs and the BFS sampler (Algorithm 1)."""

from __future__ import annotations

import numpy as np
import pytest

from engine.errors import GaptuiError
from engine.graphs import Graph, is_connected_per_graph, simple_graph
from engine.sampling import adjacency, bfs_nodes, bfs_subgraph, bfs_subgraphs
from engine.sources.base import graphs_from_edge_lists
from engine.sources.synthetic import bernoulli_graphs


def test_simple_graph_reports_what_changed() -> None:
    # self loop (2,2), duplicate (0,1)x2, one-way edge 3->4, and a proper two-way edge 1<->2
    ei = np.array([[0, 0, 2, 3, 1, 2], [1, 1, 2, 4, 2, 1]])
    g, rep = simple_graph(5, ei)
    assert g.edges.tolist() == [[0, 1], [1, 2], [3, 4]]
    assert (rep.self_loops, rep.duplicates, rep.changed_graphs) == (1, 1, 1)
    assert rep.symmetrised == 2  # 0->1 and 3->4 had no reverse
    assert "self loops" in rep.summary()


def test_symmetric_pyg_layout_is_not_a_change() -> None:
    g = Graph(4, np.array([[0, 1], [1, 2], [2, 3]]))
    same, rep = simple_graph(4, g.edge_index())
    assert same.edges.tolist() == g.edges.tolist()
    assert not rep.changed and rep.summary() == ""


def test_empty_graphs_are_refused() -> None:
    with pytest.raises(GaptuiError, match="no nodes"):
        graphs_from_edge_lists([(0, np.zeros((2, 0)))])
    with pytest.raises(GaptuiError, match="my.txt is empty .no edges"):
        graphs_from_edge_lists([(3, np.array([[1], [1]]))], names=["my.txt"])


def _line_graph(n: int) -> Graph:
    return Graph(n, np.stack([np.arange(n - 1), np.arange(1, n)], axis=1))


def test_bfs_sample_has_exact_order_and_induced_edges() -> None:
    rng = np.random.default_rng(0)
    big = bernoulli_graphs(500, 3 / 499, 1, rng)[0]
    adj = adjacency(big).toarray().astype(bool)
    for _ in range(20):
        nodes = bfs_nodes(adjacency(big), 60, rng)
        assert nodes.size == 60 and np.unique(nodes).size == 60
        sub = bfs_subgraph(big, 60, np.random.default_rng(int(rng.integers(1 << 30))))
        assert sub.num_nodes == 60
    # induced: exactly the edges of the big graph among the chosen nodes
    nodes = bfs_nodes(adjacency(big), 60, np.random.default_rng(7))
    sub = bfs_subgraph(big, 60, np.random.default_rng(7))
    expected = adj[np.ix_(nodes, nodes)]
    got = np.zeros((60, 60), bool)
    got[sub.edges[:, 0], sub.edges[:, 1]] = True
    assert np.array_equal(np.triu(expected, 1), got)


def test_bfs_takes_whole_frontiers_before_truncating() -> None:
    # A star: the centre's frontier is all leaves; from the centre a sample of 5 is centre + 4 random leaves.
    star = Graph(11, np.stack([np.zeros(10, int), np.arange(1, 11)], axis=1))
    adj = adjacency(star)
    seen_leaves = set()
    for seed in range(200):
        nodes = bfs_nodes(adj, 5, np.random.default_rng(seed))
        assert 0 in nodes  # from a leaf the next frontier is the centre; from the centre, the leaves
        seen_leaves.update(int(x) for x in nodes if x)
    assert seen_leaves == set(range(1, 11))  # truncation is random, not "lowest ids first"
    # On a path started anywhere, the sample is a contiguous interval (BFS grows both ways).
    path = adjacency(_line_graph(50))
    for seed in range(50):
        nodes = bfs_nodes(path, 9, np.random.default_rng(seed))
        assert nodes.max() - nodes.min() == 8


def test_bfs_restarts_in_another_component() -> None:
    # Two disjoint triangles and an isolated node: a sample of 7 must take all of them.
    g = Graph(7, np.array([[0, 1], [1, 2], [0, 2], [3, 4], [4, 5], [3, 5]]))
    for seed in range(10):
        nodes = bfs_nodes(adjacency(g), 7, np.random.default_rng(seed))
        assert nodes.tolist() == list(range(7))
    sub = bfs_subgraphs(g, 4, 5, np.random.default_rng(0))
    assert all(s.num_nodes == 4 for s in sub)
    with pytest.raises(GaptuiError, match="cannot take 8 nodes"):
        bfs_nodes(adjacency(g), 8, np.random.default_rng(0))


def test_connectivity_per_graph() -> None:
    n = np.array([3, 3, 1])
    ei = np.array([[0, 1, 1, 2, 0, 1], [1, 0, 2, 1, 1, 0]])
    ptr = np.array([0, 4, 6, 6])
    assert is_connected_per_graph(n, ei, ptr).tolist() == [True, False, True]
