"""Noise models: the formulas of the design, their statistics, and the planted permutation."""

from __future__ import annotations

import numpy as np
import pytest

from engine.alignment.noise import capped_graphs, correlate, noise_probabilities
from engine.errors import GaptuiError
from engine.graphs import Graph
from engine.sources.synthetic import bernoulli_graphs


def test_p_add_matches_hand_computed_values() -> None:
    # N=10 -> 45 pairs; |E|=9 -> 36 non-edges; eta=0.2 -> p_add = 0.2*9/36 = 0.05.
    assert noise_probabilities("add_remove", 0.2, 10, 9) == pytest.approx((0.2, 0.05))
    assert noise_probabilities("add", 0.2, 10, 9) == pytest.approx((0.0, 0.05))
    # ER(100, 8): |E| = 400 expected -> p_add = 0.12*400/(4950-400).
    assert noise_probabilities("add_remove", 0.12, 100, 400)[1] == pytest.approx(48 / 4550)
    assert noise_probabilities("add_remove", 0.0, 10, 9) == (0.0, 0.0)


def test_p_add_above_one_is_capped_at_one() -> None:
    # Complete graph minus one edge: 44 edges, 1 non-edge; eta*44 > 1 would give p_add = 2.2: capped at 1.
    assert noise_probabilities("add_remove", 0.05, 10, 44) == (0.05, 1.0)
    assert noise_probabilities("add", 0.05, 10, 44) == (0.0, 1.0)
    # eta*|E| equal to the non-edges is not capped: p_add = 1 exactly, the expectation still eta*|E|.
    assert noise_probabilities("add", 0.5, 4, 4) == (0.0, 1.0)
    # Complete graphs (a triangle, a 2-atom molecule) have nothing to add: p_add = 0, not 1/(1 - 1).
    assert noise_probabilities("add", 0.1, 3, 3) == (0.0, 0.0)
    assert noise_probabilities("add", 0.1, 2, 1) == (0.0, 0.0)
    n, m = np.array([10, 10, 4, 3, 2, 1, 5]), np.array([44, 9, 4, 3, 1, 0, 0])
    assert capped_graphs(0.05, n, m).tolist() == [True, False, False, True, True, False, False]
    assert capped_graphs(0.5, n, m).tolist() == [True, False, False, True, True, False, False]
    assert capped_graphs(0.0, n, m).tolist() == [False] * 7


@pytest.mark.parametrize("eta", [-0.1, 1.0, 1.5, float("nan")])
def test_eta_outside_unit_interval_is_refused(eta: float) -> None:
    with pytest.raises(GaptuiError, match=r"\[0, 1\)"):
        noise_probabilities("add", eta, 10, 9)


@pytest.mark.parametrize(("model", "eta"), [("add_remove", 0.12), ("add_remove", 0.3), ("add", 0.15)])
def test_realised_fractions_match_eta(model: str, eta: float) -> None:
    rng = np.random.default_rng(1)
    graphs = bernoulli_graphs(60, 6 / 59, 400, rng)
    _, stats = correlate(graphs, model, eta, rng)
    removed = stats.removed / stats.edges
    added = stats.added / stats.edges
    # ~72,000 edges: the binomial standard deviation of each fraction is below 0.002; allow 4 sigma.
    expected_removed = eta if model == "add_remove" else 0.0
    assert removed == pytest.approx(expected_removed, abs=0.008)
    assert added == pytest.approx(eta, abs=0.008)


def test_added_edges_are_uniform_over_non_edges() -> None:
    # A fixed path graph on 6 nodes: each of its 10 non-edges must be added equally often.
    path = Graph(6, np.array([[0, 1], [1, 2], [2, 3], [3, 4], [4, 5]]))
    rng = np.random.default_rng(2)
    split, _ = correlate([path] * 4000, "add", 0.5, rng)
    counts: dict[tuple[int, int], int] = {}
    for p in range(len(split)):
        n, eg, eh, perm = split.pair(p)
        inverse = np.argsort(perm)
        for u, v in inverse[eh].T:
            if u < v:
                counts[(int(u), int(v))] = counts.get((int(u), int(v)), 0) + 1
    non_edges = [(u, v) for u in range(6) for v in range(u + 1, 6) if v != u + 1]
    p_add = 0.5 * 5 / 10
    for key in non_edges:
        assert counts[key] / 4000 == pytest.approx(p_add, abs=0.03)
    for u in range(5):  # the add model never removes an edge
        assert counts[(u, u + 1)] == 4000


def test_permutation_recovers_the_noised_graph_and_is_not_identity() -> None:
    rng = np.random.default_rng(3)
    graphs = bernoulli_graphs(30, 0.2, 50, rng)
    split, _ = correlate(graphs, "add_remove", 0.1, rng)
    identities = 0
    for p in range(len(split)):
        n, eg, eh, perm = split.pair(p)
        assert sorted(perm.tolist()) == list(range(n))
        identities += int((perm == np.arange(n)).all())
        # Undo the relabelling: node perm[i] of H is node i of the noised graph.
        inverse = np.argsort(perm)
        noised = {(int(a), int(b)) for a, b in inverse[eh].T}
        base = {(int(a), int(b)) for a, b in eg.T}
        assert all((b, a) in noised for a, b in noised)  # H is stored with both directions
        # The only differences between G and the unpermuted H are the noise flips, a small share.
        assert len(base ^ noised) < 0.5 * len(base)
        assert len(base & noised) > 0.6 * len(base)
    assert identities == 0


def test_edges_of_h_are_sorted_so_order_leaks_nothing() -> None:
    rng = np.random.default_rng(4)
    split, _ = correlate(bernoulli_graphs(20, 0.3, 5, rng), "add_remove", 0.1, rng)
    for p in range(len(split)):
        _, eg, eh, _ = split.pair(p)
        for ei in (eg, eh):
            keys = ei[0] * 1000 + ei[1]
            assert (np.diff(keys) > 0).all()


def test_large_graph_uses_sparse_sampler_with_the_same_law(monkeypatch: pytest.MonkeyPatch) -> None:
    import engine.alignment.draws as draws

    rng = np.random.default_rng(5)
    graphs = bernoulli_graphs(200, 0.05, 40, rng)
    monkeypatch.setattr(draws, "DENSE_SLOTS", 100)  # force the sparse path
    _, stats = correlate(graphs, "add_remove", 0.2, rng)
    assert stats.added / stats.edges == pytest.approx(0.2, abs=0.02)
    assert stats.removed / stats.edges == pytest.approx(0.2, abs=0.02)


def _noised_in_g_labels(split, p: int) -> set[tuple[int, int]]:
    """Pair ``p``'s H mapped back to G's labels, as a set of undirected edges ``(u, v)``, ``u < v``."""
    _, _, eh, perm = split.pair(p)
    inverse = np.argsort(perm)
    return {(int(a), int(b)) for a, b in inverse[eh].T if a < b}


def _path(n: int) -> Graph:
    return Graph(n, np.stack([np.arange(n - 1), np.arange(1, n)], axis=1))


def test_counts_per_pair_are_binomial() -> None:
    # Path on 6 nodes: 5 edges, 10 non-edges. eta 0.4: removed ~ Binomial(5, 0.4), added ~ Binomial(10, 0.2).
    runs = 6000
    split, stats = correlate([_path(6)] * runs, "add_remove", 0.4, np.random.default_rng(21))
    base = {(u, u + 1) for u in range(5)}
    removed, added = [], []
    for p in range(runs):
        noised = _noised_in_g_labels(split, p)
        removed.append(len(base - noised))
        added.append(len(noised - base))
    assert sum(removed) == stats.removed and sum(added) == stats.added
    # 4.5 sd of each estimate: means 0.014 / 0.016, variances 0.020 / 0.029.
    assert np.mean(removed) == pytest.approx(5 * 0.4, abs=0.065)
    assert np.var(removed) == pytest.approx(5 * 0.4 * 0.6, abs=0.09)
    assert np.mean(added) == pytest.approx(10 * 0.2, abs=0.075)
    assert np.var(added) == pytest.approx(10 * 0.2 * 0.8, abs=0.13)


def test_removals_are_uniform_over_edges() -> None:
    runs = 4000
    split, _ = correlate([_path(6)] * runs, "add_remove", 0.3, np.random.default_rng(22))
    kept = np.zeros(5)
    for p in range(runs):
        noised = _noised_in_g_labels(split, p)
        kept += [(u, u + 1) in noised for u in range(5)]
    assert np.abs(1 - kept / runs - 0.3).max() < 0.035  # sd 0.0072 per edge


def test_dense_additions_use_exact_coins() -> None:
    # 6 nodes, 9 edges, 6 non-edges; eta 0.6 -> p_add = 0.6 * 9 / 6 = 0.9 > 1/2: the coin path.
    edges = np.array([[0, 1], [0, 2], [0, 3], [1, 2], [1, 4], [2, 5], [3, 4], [3, 5], [4, 5]])
    graph = Graph(6, edges)
    runs = 3000
    split, stats = correlate([graph] * runs, "add", 0.6, np.random.default_rng(23))
    base = {(int(a), int(b)) for a, b in edges}
    non_edges = [(u, v) for u in range(6) for v in range(u + 1, 6) if (u, v) not in base]
    counts = dict.fromkeys(non_edges, 0)
    for p in range(runs):
        noised = _noised_in_g_labels(split, p)
        assert base <= noised  # the add model never removes
        for key in noised - base:
            counts[key] += 1
    assert all(abs(c / runs - 0.9) < 0.025 for c in counts.values())  # sd 0.0055
    assert stats.added == sum(counts.values())


def test_graphs_above_the_chunk_size_draw_alone_with_the_same_law(monkeypatch: pytest.MonkeyPatch) -> None:
    import engine.alignment.noise as noise

    monkeypatch.setattr(noise, "_CHUNK_SLOTS", 10)  # every graph is "large": geometric gaps over its non-edges
    runs = 3000
    split, stats = correlate([_path(6)] * runs, "add_remove", 0.5, np.random.default_rng(24))
    base = {(u, u + 1) for u in range(5)}
    counts: dict[tuple[int, int], int] = {}
    for p in range(runs):
        for key in _noised_in_g_labels(split, p) - base:
            counts[key] = counts.get(key, 0) + 1
    assert len(counts) == 10
    assert all(abs(c / runs - 0.25) < 0.04 for c in counts.values())  # sd 0.0079
    assert stats.removed / stats.edges == pytest.approx(0.5, abs=0.03)


def test_many_small_chunks_keep_the_law(monkeypatch: pytest.MonkeyPatch) -> None:
    import engine.alignment.noise as noise

    # A chunk every 2-3 graphs: the table of taken pairs is reused (and must be cleared) many times.
    monkeypatch.setattr(noise, "_CHUNK", 25)
    monkeypatch.setattr(noise, "_CHUNK_SLOTS", 40)
    runs = 3000
    split, stats = correlate([_path(6)] * runs, "add", 0.5, np.random.default_rng(25))
    base = {(u, u + 1) for u in range(5)}
    counts: dict[tuple[int, int], int] = {}
    for p in range(runs):
        noised = _noised_in_g_labels(split, p)
        assert base <= noised
        for key in noised - base:
            counts[key] = counts.get(key, 0) + 1
    assert len(counts) == 10
    assert all(abs(c / runs - 0.25) < 0.04 for c in counts.values())
    assert stats.added == sum(counts.values())


def test_subsets_fill_almost_full_graphs() -> None:
    # 5 nodes, 8 of 10 pairs taken, p_add = 0.2 * 8 / 2 = 0.8: coins. At eta 0.1, p_add = 0.4: subsets whose
    # count is often the whole (2-slot) complement, the hardest case for rejection.
    edges = np.array([[0, 1], [0, 2], [0, 3], [1, 2], [1, 3], [2, 3], [2, 4], [3, 4]])
    graph = Graph(5, edges)
    runs = 4000
    for eta, p_add in ((0.1, 0.4), (0.2, 0.8)):
        split, stats = correlate([graph] * runs, "add", eta, np.random.default_rng(26))
        counts = {(0, 4): 0, (1, 4): 0}
        both = 0
        for p in range(runs):
            new = _noised_in_g_labels(split, p) - {(int(a), int(b)) for a, b in edges}
            both += len(new) == 2
            for key in new:
                counts[key] += 1
        assert all(abs(c / runs - p_add) < 0.04 for c in counts.values())  # sd <= 0.0078
        assert both / runs == pytest.approx(p_add**2, abs=0.035)  # independent coins; sd <= 0.0075
        assert stats.added == sum(counts.values())


def test_permutations_are_uniform() -> None:
    import itertools

    runs = 6000
    split, _ = correlate([_path(3)] * runs, "add", 0.0, np.random.default_rng(26))
    seen: dict[tuple[int, ...], int] = {}
    for p in range(runs):
        key = tuple(split.pair(p)[3].tolist())
        seen[key] = seen.get(key, 0) + 1
    assert sorted(seen) == sorted(itertools.permutations(range(3)))
    assert all(abs(c / runs - 1 / 6) < 0.025 for c in seen.values())  # sd 0.0048


def test_mixed_orders_give_valid_pairs_and_exact_connectivity_stats() -> None:
    from engine.graphs import is_connected_per_graph

    rng = np.random.default_rng(27)
    graphs = [g for order in (4, 7, 12, 5, 30, 9) for g in bernoulli_graphs(order, 0.3, 40, rng)]
    graphs = [graphs[i] for i in rng.permutation(len(graphs))]
    split, stats = correlate(graphs, "add_remove", 0.2, rng)
    assert split.num_nodes.tolist() == [g.num_nodes for g in graphs]
    for p, g in enumerate(graphs):
        n, eg, eh, perm = split.pair(p)
        assert sorted(perm.tolist()) == list(range(n))
        assert eg.T.tolist() == g.edge_index().T.tolist()
        keys = eh[0] * n + eh[1]
        assert (np.diff(keys) > 0).all() and (eh < n).all() and (eh[0] != eh[1]).all()
        assert {(a, b) for a, b in eh.T.tolist()} == {(b, a) for a, b in eh.T.tolist()}
    connected = is_connected_per_graph(split.num_nodes, split.edge_index_h, split.edge_ptr_h)
    assert stats.disconnected_h == int((~connected).sum())
    assert stats.edges == sum(g.num_edges for g in graphs)
    assert stats.edges - stats.removed + stats.added == split.edge_index_h.shape[1] // 2


def test_same_rng_gives_identical_pairs() -> None:
    graphs = bernoulli_graphs(30, 0.2, 50, np.random.default_rng(30))
    a, sa = correlate(graphs, "add_remove", 0.12, np.random.default_rng(31))
    b, sb = correlate(graphs, "add_remove", 0.12, np.random.default_rng(31))
    assert sa == sb
    assert all(np.array_equal(x, y) for x, y in zip(a.arrays().values(), b.arrays().values(), strict=True))


def test_unsorted_edge_lists_are_sorted_and_bad_ones_refused() -> None:
    rng = np.random.default_rng(32)
    graphs = bernoulli_graphs(15, 0.3, 20, rng)
    shuffled = [Graph(g.num_nodes, g.edges[rng.permutation(g.num_edges)]) for g in graphs]
    # The add model draws nothing per edge, so the input order of the edges cannot matter.
    a, _ = correlate(graphs, "add", 0.2, np.random.default_rng(33))
    b, _ = correlate(shuffled, "add", 0.2, np.random.default_rng(33))
    assert all(np.array_equal(x, y) for x, y in zip(a.arrays().values(), b.arrays().values(), strict=True))
    with pytest.raises(ValueError, match="u < v"):
        correlate([Graph(4, np.array([[0, 1], [2, 1]]))], "add", 0.1, rng)
    with pytest.raises(ValueError, match="twice"):
        correlate([Graph(4, np.array([[0, 1], [1, 2], [0, 1]]))], "add", 0.1, rng)


def test_empty_inputs() -> None:
    split, stats = correlate([], "add_remove", 0.1, np.random.default_rng(0))
    assert len(split) == 0 and stats.pairs == 0 and split.edge_index_h.shape == (2, 0)
    lonely = [Graph(1, np.zeros((0, 2), dtype=np.int64)), Graph(3, np.zeros((0, 2), dtype=np.int64))]
    split, stats = correlate(lonely, "add", 0.1, np.random.default_rng(0))
    assert split.edge_ptr_g.tolist() == [0, 0, 0] and split.edge_ptr_h.tolist() == [0, 0, 0]
    assert stats.disconnected_h == 1  # the single node is connected, the three isolated nodes are not


# issue 19, real molecules


def _graph(n: int, edges: list[tuple[int, int]]) -> Graph:
    return Graph(n, np.array(edges, dtype=np.int64).reshape(-1, 2))


#: (graph, capped at eta = 0.4): expected additions eta*|E| where the graph can take them, else all its non-edges.
SMALL = [
    (_path(6), False),  # 5 edges, 10 non-edges: p_add 0.2 (drawn as a subset)
    (_path(3), False),  # 2 edges, 1 non-edge: p_add 0.8 (coins)
    (_graph(4, [(0, 1), (0, 2), (0, 3)]), False),  # star: 3 edges, 3 non-edges, p_add 0.4
    (_graph(4, [(0, 1), (1, 2), (2, 3), (0, 3)]), False),  # square: 4 edges, 2 non-edges, p_add 0.8
    (_graph(3, [(0, 1), (0, 2), (1, 2)]), True),  # triangle: complete, nothing to add
    (_graph(2, [(0, 1)]), True),  # a 2-atom molecule: complete
    (_graph(4, [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3)]), True),  # K4 minus an edge: 0.4*5 > 1 non-edge
]


@pytest.mark.parametrize("model", ["add", "add_remove"])
def test_capped_graphs_gain_every_non_edge_and_the_others_eta_times_their_edges(model: str) -> None:
    eta, copies = 0.4, 1500
    graphs = [g for g, _ in SMALL] * copies
    split, stats = correlate(graphs, model, eta, np.random.default_rng(5))
    assert stats.capped == copies * sum(c for _, c in SMALL)
    added: dict[int, list[int]] = {k: [] for k in range(len(SMALL))}
    removed: dict[int, list[int]] = {k: [] for k in range(len(SMALL))}
    for p in range(len(graphs)):
        k = p % len(SMALL)
        graph = SMALL[k][0]
        base = {(int(u), int(v)) for u, v in graph.edges}
        noised = _noised_in_g_labels(split, p)
        added[k].append(len(noised - base))
        removed[k].append(len(base - noised))
        if SMALL[k][1]:
            # p_add = 1: every non-edge is added, so H is complete except for the removed edges.
            everything = {(u, v) for u in range(graph.num_nodes) for v in range(u + 1, graph.num_nodes)}
            assert noised == everything - (base - noised)
    for k, (graph, capped) in enumerate(SMALL):
        m, free = graph.num_edges, graph.num_nodes * (graph.num_nodes - 1) // 2 - graph.num_edges
        if capped:
            assert set(added[k]) == {free}
        else:
            # The expectation stays eta*|E| (Binomial(free, eta*|E|/free)); 4.5 standard deviations of the mean.
            p_add = eta * m / free
            assert np.mean(added[k]) == pytest.approx(eta * m, abs=4.5 * np.sqrt(free * p_add * (1 - p_add) / copies))
        p_remove = eta if model == "add_remove" else 0.0
        sd = np.sqrt(m * p_remove * (1 - p_remove) / copies)
        assert np.mean(removed[k]) == pytest.approx(m * p_remove, abs=4.5 * sd + 1e-12)
    assert stats.added == sum(map(sum, added.values())) and stats.removed == sum(map(sum, removed.values()))
