"""Noise models: the formulas of the design, their statistics, and the planted permutation."""

from __future__ import annotations

import numpy as np
import pytest

from engine.errors import GaptuiError
from engine.graphs import Graph
from engine.noise import correlate, noise_probabilities
from engine.sources.synthetic import bernoulli_graphs


def test_p_add_matches_hand_computed_values() -> None:
    # N=10 -> 45 pairs; |E|=9 -> 36 non-edges; eta=0.2 -> p_add = 0.2*9/36 = 0.05.
    assert noise_probabilities("add_remove", 0.2, 10, 9) == pytest.approx((0.2, 0.05))
    assert noise_probabilities("add", 0.2, 10, 9) == pytest.approx((0.0, 0.05))
    # ER(100, 8): |E| = 400 expected -> p_add = 0.12*400/(4950-400).
    assert noise_probabilities("add_remove", 0.12, 100, 400)[1] == pytest.approx(48 / 4550)
    assert noise_probabilities("add_remove", 0.0, 10, 9) == (0.0, 0.0)


def test_p_add_above_one_is_refused_with_its_numbers() -> None:
    # Complete graph minus one edge: 44 edges, 1 non-edge; eta*44 > 1 -> p_add > 1.
    with pytest.raises(GaptuiError) as info:
        noise_probabilities("add_remove", 0.05, 10, 44)
    msg = str(info.value)
    assert "p_add" in msg and "0.05*44/(45 - 44)" in msg and "eta <= 0.02273" in msg


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
    import engine.noise as noise

    rng = np.random.default_rng(5)
    graphs = bernoulli_graphs(200, 0.05, 40, rng)
    monkeypatch.setattr(noise, "_DENSE_SLOTS", 100)  # force the sparse path
    _, stats = correlate(graphs, "add_remove", 0.2, rng)
    assert stats.added / stats.edges == pytest.approx(0.2, abs=0.02)
    assert stats.removed / stats.edges == pytest.approx(0.2, abs=0.02)
