"""Symmetry ceilings: orbits and 1-WL classes against independent oracles, the bound proved empirically, and the
structural metrics (solved, edge overlap, orbit accuracy) of a matching."""

from __future__ import annotations

import numpy as np
import pytest

from engine.alignment.noise import correlate
from engine.alignment.pair_metrics import kept_edges, pair_metrics
from engine.alignment.solvers import score_split, solver_options
from engine.alignment.symmetry import graph_orbits, orbits, split_symmetry, wl_colours
from engine.evaluation import lap_assignment
from engine.graphs import Graph


def _partition(labels: np.ndarray) -> set[frozenset[int]]:
    return {frozenset(np.flatnonzero(labels == v).tolist()) for v in np.unique(labels)}


def _graph(n: int, edges: list[tuple[int, int]]) -> Graph:
    e = np.array(sorted((min(a, b), max(a, b)) for a, b in edges), dtype=np.int64).reshape(-1, 2)
    return Graph(n, e)


def test_orbits_match_the_automorphisms_networkx_enumerates() -> None:
    nx = pytest.importorskip("networkx")
    from networkx.algorithms.isomorphism import GraphMatcher

    rng = np.random.default_rng(0)
    for _ in range(60):
        n = int(rng.integers(2, 8))
        g = nx.gnp_random_graph(n, float(rng.random()), seed=int(rng.integers(1 << 30)))
        expected = {frozenset([v]) for v in range(n)}
        for mapping in GraphMatcher(g, g).isomorphisms_iter():
            for a, b in mapping.items():
                block_a = next(s for s in expected if a in s)
                block_b = next(s for s in expected if b in s)
                if block_a is not block_b:
                    expected = (expected - {block_a, block_b}) | {block_a | block_b}
        edges = np.array(list(g.edges()), dtype=np.int64).T.reshape(2, -1)
        assert _partition(orbits(n, edges)) == expected


@pytest.mark.filterwarnings("ignore::UserWarning")  # networkx 3.5 notes that its hashes changed
def test_wl_classes_match_networkx_refinement() -> None:
    nx = pytest.importorskip("networkx")

    rng = np.random.default_rng(1)
    for _ in range(60):
        n = int(rng.integers(2, 12))
        g = nx.gnp_random_graph(n, float(rng.random()), seed=int(rng.integers(1 << 30)))
        hashes = nx.weisfeiler_lehman_subgraph_hashes(g, iterations=n + 1)
        final = np.array([hashes[v][-1] if hashes[v] else "isolated" for v in range(n)])
        edges = np.array(list(g.edges()), dtype=np.int64).T.reshape(2, -1)
        both = np.concatenate([edges, edges[::-1]], axis=1)
        colours = wl_colours(np.array([n]), both, np.array([0, both.shape[1]]))
        assert _partition(colours) == _partition(final)


def test_classic_graphs_have_their_known_orbits() -> None:
    cycle = [(i, (i + 1) % 6) for i in range(6)]
    path = [(i, i + 1) for i in range(5)]
    star = [(0, i) for i in range(1, 6)]
    for edges, count in ((cycle, 1), (path, 3), (star, 2)):
        ei = np.array(edges).T
        assert len(set(orbits(6, ei).tolist())) == count
    # Two triangles: swapping them is an automorphism, so one orbit, as in the hexagon.
    two_triangles = np.array([(0, 1), (1, 2), (2, 0), (3, 4), (4, 5), (5, 3)]).T
    assert len(set(orbits(6, two_triangles).tolist())) == 1
    # Orbits of several graphs at once are those of each graph alone, never shared between graphs.
    both = graph_orbits(
        np.array([6, 6]), np.concatenate([two_triangles, np.array(path).T], axis=1), np.array([0, 6, 11])
    )
    assert len(set(both[:6].tolist())) == 1 and len(set(both[6:].tolist())) == 3
    assert not set(both[:6].tolist()) & set(both[6:].tolist())


SYMMETRIC = [
    _graph(8, [(i, (i + 1) % 8) for i in range(8)]),  # cycle: 1 orbit
    _graph(7, [(i, i + 1) for i in range(6)]),  # path: 4 orbits
    _graph(6, [(0, i) for i in range(1, 6)]),  # star: 2 orbits
    _graph(9, [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (5, 0), (0, 6), (3, 7), (6, 8)]),  # a ring with substituents
]


def _relabelled(count: int, seed: int):
    """``count`` noise-free pairs of each symmetric graph, each under its own random relabelling."""
    return correlate([g for g in SYMMETRIC for _ in range(count)], "add_remove", 0.0, np.random.default_rng(seed))[0]


def test_orbit_indicator_embeddings_reach_the_orbit_ceiling_and_no_method_exceeds_it() -> None:
    split = _relabelled(150, seed=7)
    symmetry = split_symmetry(split)
    ceiling = symmetry.stats()["orbit_ceiling"]
    assert ceiling < 0.6  # the test graphs are symmetric enough for the bound to bite
    ptr = split.node_ptr
    # The best any permutation-equivariant embedding can do: one indicator per orbit of G, carried over to H by
    # the truth (so H's rows are exactly G's, relabelled); ties inside an orbit are all the LAP can see.
    assignment = np.zeros(int(ptr[-1]), np.int64)
    for p in range(len(split)):
        n, _, _, perm = split.pair(p)
        orbit = symmetry.orbits[ptr[p] : ptr[p + 1]]
        x_g = (orbit[:, None] == np.unique(orbit)[None, :]).astype(float)
        x_h = np.zeros_like(x_g)
        x_h[perm] = x_g
        assignment[ptr[p] : ptr[p + 1]] = lap_assignment(x_g @ x_h.T)
    indicator = pair_metrics(split, assignment, symmetry.orbits)
    reached = indicator.lap_correct.sum() / indicator.nodes.sum()
    spread = 3 * np.sqrt(ceiling * (1 - ceiling) / len(split))  # a generous bound on the sampling error
    assert abs(reached - ceiling) < spread
    assert indicator.orbit_correct.sum() == indicator.nodes.sum()  # right up to symmetry, every node
    # Nothing exceeds it: the solvers see the same pairs and do no better on average.
    for name in ("grampa", "umeyama", "faq"):
        scores, _ = score_split(split, name, solver_options(name, {}), ks=(1,), workers=1)
        assert scores.lap_acc < ceiling + spread, name


def test_the_wl_ceiling_is_at_most_the_orbit_ceiling_and_both_are_cached_stats() -> None:
    split = _relabelled(3, seed=1)
    stats = split_symmetry(split).stats()
    assert stats["wl_ceiling"] <= stats["orbit_ceiling"] <= 1.0
    assert stats["orbits"] == 3 * (1 + 4 + 2 + 7)
    assert stats["symmetric_graphs"] == 12


def test_edge_overlap_orbit_accuracy_and_solved_of_a_matching() -> None:
    graphs = [_graph(4, [(0, 1), (1, 2), (2, 3)]), _graph(4, [(0, 1), (0, 2), (0, 3)])]
    split = correlate(graphs, "add_remove", 0.0, np.random.default_rng(3))[0]
    truth = split.perm.copy()
    assert kept_edges(split, truth).tolist() == [3, 3]
    metrics = pair_metrics(split, truth, split_symmetry(split).orbits)
    assert metrics.summary() == {"val_solved": 1.0, "val_edge_overlap": 1.0, "val_orbit_acc": 1.0}
    # The path reversed is an automorphism: every node wrong, every edge kept, every node right up to symmetry.
    wrong = truth.copy()
    wrong[:4] = truth[:4][::-1]
    metrics = pair_metrics(split, wrong, split_symmetry(split).orbits)
    assert metrics.lap_correct.tolist() == [0, 4]
    assert metrics.kept.tolist() == [3, 3] and metrics.orbit_correct.tolist() == [4, 4]
    assert metrics.summary()["val_solved"] == 0.5
    assert "pair,nodes,lap_acc,orbit_acc" in metrics.csv_text().splitlines()[0]


def test_colour_refinement_that_does_not_settle_within_its_budget_gives_no_wl_ceiling() -> None:
    """A path needs about n / 2 rounds to settle; past the budget there is no 1-WL ceiling, never a coarse one."""
    import engine.alignment.symmetry as symmetry

    n = 200
    path = np.array([np.arange(n - 1), np.arange(1, n)], dtype=np.int64)
    both = np.concatenate([path, path[::-1]], axis=1)
    sizes, ptr = np.array([n]), np.array([0, both.shape[1]])
    settled = wl_colours(sizes, both, ptr)
    assert settled is not None and len(np.unique(settled)) == n // 2  # mirror images only
    assert wl_colours(sizes, both, ptr, budget=20 * n) is None  # 20 rounds: not settled
    unsettled = symmetry.SplitSymmetry(sizes, np.arange(n) % (n // 2), None)
    stats = unsettled.stats()
    assert stats["wl_settled"] is False and stats["orbit_ceiling"] == 0.5
    assert not {"wl_ceiling", "wl_classes"} & set(stats)
    from engine.alignment.search import ceiling_metrics

    assert ceiling_metrics({"stats": {"val": stats}}) == {"val_orbit_ceiling": 0.5}  # no 1-WL row, no wrong one
