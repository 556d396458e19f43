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


def test_bernoulli_hits_are_independent_coins() -> None:
    import engine.graphs as graphs

    rng = np.random.default_rng(11)
    size, p, runs = 40, 0.3, 4000
    counts = np.zeros(size)
    totals = []
    for _ in range(runs):
        hits = graphs.bernoulli_hits(size, p, rng)
        assert hits.dtype == np.int64 and (np.diff(hits) > 0).all() and (hits >= 0).all() and (hits < size).all()
        counts[hits] += 1
        totals.append(hits.size)
    # Each position hit with probability p (sd 0.0072 per position; 4.5 sigma), the count Binomial(size, p).
    assert np.abs(counts / runs - p).max() < 0.033
    assert np.mean(totals) == pytest.approx(size * p, abs=0.2)  # sd of the mean 0.046
    assert np.var(totals) == pytest.approx(size * p * (1 - p), rel=0.1)
    assert graphs.bernoulli_hits(size, 0.0, rng).size == 0
    assert graphs.bernoulli_hits(size, 1.0, rng).tolist() == list(range(size))
    assert graphs.bernoulli_hits(0, 0.5, rng).size == 0


def test_bernoulli_hits_blocks_continue_with_the_same_law(monkeypatch: pytest.MonkeyPatch) -> None:
    import engine.graphs as graphs

    monkeypatch.setattr(graphs, "_HIT_BLOCK", 3)  # many blocks per sequence
    rng = np.random.default_rng(12)
    size, p, runs = 30, 0.4, 4000
    counts = np.zeros(size)
    for _ in range(runs):
        hits = graphs.bernoulli_hits(size, p, rng)
        assert (np.diff(hits) > 0).all() and (hits < size).all()
        counts[hits] += 1
    assert np.abs(counts / runs - p).max() < 0.035


def test_bernoulli_graphs_edge_count_is_binomial_and_slots_uniform() -> None:
    n, p, count = 12, 0.3, 6000
    slots = n * (n - 1) // 2
    graphs = bernoulli_graphs(n, p, count, np.random.default_rng(13))
    assert len(graphs) == count
    per_slot = np.zeros((n, n))
    sizes = []
    for g in graphs:
        e = g.edges
        assert g.num_nodes == n and e.dtype == np.int64 and e.ndim == 2 and e.shape[1] == 2
        assert (e[:, 0] < e[:, 1]).all() and (e[:, 1] < n).all()
        keys = e[:, 0] * n + e[:, 1]
        assert (np.diff(keys) > 0).all()  # sorted (u, v), no duplicates
        per_slot[e[:, 0], e[:, 1]] += 1
        sizes.append(g.num_edges)
    # |E| ~ Binomial(66, 0.3): mean 19.8 (sd of the mean 0.048), variance 13.86 (sd of the estimate 0.25).
    assert np.mean(sizes) == pytest.approx(slots * p, abs=0.2)
    assert np.var(sizes) == pytest.approx(slots * p * (1 - p), abs=1.0)
    # Every pair equally likely: each slot's frequency is p (sd 0.0059; 5 sigma).
    freq = per_slot[np.triu_indices(n, 1)] / count
    assert np.abs(freq - p).max() < 0.03


def test_bernoulli_graphs_is_deterministic_and_handles_extremes() -> None:
    a = bernoulli_graphs(30, 0.2, 20, np.random.default_rng(14))
    b = bernoulli_graphs(30, 0.2, 20, np.random.default_rng(14))
    assert all(np.array_equal(x.edges, y.edges) for x, y in zip(a, b, strict=True))
    full = bernoulli_graphs(5, 1.0, 3, np.random.default_rng(0))
    assert all(g.edges.tolist() == [[u, v] for u in range(5) for v in range(u + 1, 5)] for g in full)
    empty = bernoulli_graphs(5, 0.0, 3, np.random.default_rng(0))
    assert all(g.num_edges == 0 and g.edges.shape == (0, 2) for g in empty)
    assert bernoulli_graphs(5, 0.5, 0, np.random.default_rng(0)) == []


def test_stable_group_keeps_input_order_within_groups() -> None:
    from engine.graphs import stable_group

    rng = np.random.default_rng(15)
    keys = rng.integers(0, 50, 5000).astype(np.int32)
    payload = np.arange(5000, dtype=np.int64)
    ptr, grouped = stable_group(keys, payload, 60)
    assert ptr.shape == (61,) and ptr[-1] == 5000
    for k in range(60):
        part = grouped[ptr[k] : ptr[k + 1]]
        assert (keys[part] == k).all()
        assert (np.diff(part) > 0).all()  # input order kept


def test_connectivity_does_not_depend_on_edge_order() -> None:
    rng = np.random.default_rng(16)
    n = np.array([5, 4, 6, 1])
    # pair 0: path 0-1-2-3-4 (connected); pair 1: two edges 0-1, 2-3 (not); pair 2: triangle + isolated; pair 3: single
    und = [[(0, 1), (1, 2), (2, 3), (3, 4)], [(0, 1), (2, 3)], [(0, 1), (1, 2), (0, 2), (3, 4), (4, 5)], []]
    pairs = [np.array(e, dtype=np.int64).reshape(-1, 2) for e in und]
    parts = [np.concatenate([e, e[:, ::-1]]).T for e in pairs]  # both directions, [2, 2m]
    ptr = np.concatenate([[0], np.cumsum([p.shape[1] for p in parts])])
    ordered = np.concatenate([p[:, np.lexsort((p[1], p[0]))] for p in parts], axis=1)
    shuffled = np.concatenate([p[:, rng.permutation(p.shape[1])] for p in parts], axis=1)
    expected = [True, False, False, True]
    assert is_connected_per_graph(n, ordered, ptr).tolist() == expected
    assert is_connected_per_graph(n, shuffled, ptr).tolist() == expected


def test_connectivity_of_empty_batches_and_graphs() -> None:
    assert is_connected_per_graph(np.zeros(0, int), np.zeros((2, 0), int), np.zeros(1, int)).tolist() == []
    # A graph without nodes has no component (not connected); a single node is one component.
    assert is_connected_per_graph(np.array([0, 1]), np.zeros((2, 0), int), np.zeros(3, int)).tolist() == [False, True]


def test_connected_symmetric_agrees_with_component_counts() -> None:
    from engine.graphs import component_counts, connected_symmetric

    rng = np.random.default_rng(17)
    n = rng.integers(0, 9, 300)
    n[:3] = [0, 1, 2]
    node_ptr = np.concatenate([[0], np.cumsum(n)])
    src, dst = [], []
    for p, order in enumerate(n):
        if order > 1:
            u, v = np.triu_indices(order, 1)
            keep = rng.random(u.size) < 0.25
            src += [u[keep] + node_ptr[p], v[keep] + node_ptr[p]]
            dst += [v[keep] + node_ptr[p], u[keep] + node_ptr[p]]
    s, d = np.concatenate(src), np.concatenate(dst)
    order = np.lexsort((d, s))
    s, d = s[order], d[order].astype(np.int32)
    indptr = np.concatenate([[0], np.cumsum(np.bincount(s, minlength=int(n.sum())))]).astype(np.int32)
    expected = component_counts(n, indptr, d) == 1
    assert connected_symmetric(n, indptr, d).tolist() == expected.tolist()
    assert not expected[0] and expected[1]  # no nodes: not connected; one node: connected
    assert 0 < expected.sum() < n.size
