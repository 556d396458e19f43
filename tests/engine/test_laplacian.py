"""Laplacian positional-encoding baseline: spectrum, components, padding, signs, and alignment accuracy."""

from __future__ import annotations

import numpy as np
import pytest

from engine.errors import GaptuiError
from engine.laplacian import canonical_signs, laplacian_eigenpairs, laplacian_embedding, laplacian_scores
from engine.pairs import PairSplit


def both_directions(edges: np.ndarray) -> np.ndarray:
    """Undirected ``[m, 2]`` -> ``[2, 2m]`` both directions, sorted by (source, target) like PairSplit."""
    edges = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    both = np.concatenate([edges, edges[:, ::-1]])
    both = both[np.lexsort((both[:, 1], both[:, 0]))]
    return np.ascontiguousarray(both.T)


def make_split(pairs: list[tuple[int, np.ndarray, np.ndarray, np.ndarray]]) -> PairSplit:
    """A PairSplit from ``(n, undirected edges of G, undirected edges of H, perm)`` per pair, by hand."""
    g = [both_directions(e) for _, e, _, _ in pairs]
    h = [both_directions(e) for _, _, e, _ in pairs]
    return PairSplit(
        num_nodes=np.array([p[0] for p in pairs], dtype=np.int64),
        edge_index_g=np.concatenate(g, axis=1),
        edge_ptr_g=np.concatenate([[0], np.cumsum([x.shape[1] for x in g])]).astype(np.int64),
        edge_index_h=np.concatenate(h, axis=1),
        edge_ptr_h=np.concatenate([[0], np.cumsum([x.shape[1] for x in h])]).astype(np.int64),
        perm=np.concatenate([p[3] for p in pairs]).astype(np.int64),
    )


def relabel(edges: np.ndarray, perm: np.ndarray) -> np.ndarray:
    """Edges of H = G relabelled so that G's node i is H's node perm[i]."""
    out = perm[np.asarray(edges, dtype=np.int64)]
    return np.sort(out, axis=1)


def er_edges(n: int, deg: float, rng: np.random.Generator) -> np.ndarray:
    iu, ju = np.triu_indices(n, 1)
    keep = rng.random(iu.size) < deg / (n - 1)
    return np.stack([iu[keep], ju[keep]], axis=1)


def noised(n: int, edges: np.ndarray, eta: float, rng: np.random.Generator) -> np.ndarray:
    """Remove each edge with probability eta, add eta |E| edges in expectation among the non-edges."""
    adj = np.zeros((n, n), dtype=bool)
    adj[edges[:, 0], edges[:, 1]] = True
    iu, ju = np.triu_indices(n, 1)
    present = adj[iu, ju]
    p_add = eta * present.sum() / (present.size - present.sum())
    keep = np.where(present, rng.random(iu.size) >= eta, rng.random(iu.size) < p_add)
    return np.stack([iu[keep], ju[keep]], axis=1)


def test_path_p4_by_hand() -> None:
    # P4 0-1-2-3: normalised Laplacian eigenvalues 1 - cos(pi j / 3) = 0, 1/2, 3/2, 2; the 0 is dropped.
    values, vectors = laplacian_eigenpairs(4, both_directions([[0, 1], [1, 2], [2, 3]]), k=5)
    np.testing.assert_allclose(values, [0.5, 1.5, 2.0], atol=1e-12)
    r2, r3, r6 = np.sqrt(2), np.sqrt(3), np.sqrt(6)
    # lambda = 3/2 is reversal-symmetric, sum of cubes > 0 fixes the sign: D^{1/2} (1, -1/2, -1/2, 1).
    np.testing.assert_allclose(vectors[:, 1], np.array([1, -1 / r2, -1 / r2, 1]) / r3, atol=1e-12)
    # lambda = 1/2 and 2 are antisymmetric (all odd power sums vanish): the first largest-magnitude entry
    # is made positive.
    np.testing.assert_allclose(vectors[:, 0], np.array([1, 1 / r2, -1 / r2, -1]) / r3, atol=1e-12)
    np.testing.assert_allclose(vectors[:, 2], np.array([-1, r2, -r2, 1]) / r6, atol=1e-12)
    emb = laplacian_embedding(4, both_directions([[0, 1], [1, 2], [2, 3]]), k=5)
    assert emb.shape == (4, 5)
    np.testing.assert_allclose(emb[:, :3], vectors)
    assert not emb[:, 3:].any()  # n - 1 = 3 < k = 5: zero padding


def test_components_and_isolated_nodes() -> None:
    # Triangle {0, 1, 2}, path {3, 4, 5}, isolated 6 and 7.
    edges = [[0, 1], [1, 2], [0, 2], [3, 4], [4, 5]]
    values, vectors = laplacian_eigenpairs(8, both_directions(edges), k=10)
    # One eigenvalue 0 dropped per component with edges (2 of them); isolated nodes keep eigenvalue 1 (e_i).
    np.testing.assert_allclose(values, [1, 1, 1, 1.5, 1.5, 2], atol=1e-12)
    np.testing.assert_allclose(vectors.T @ vectors, np.eye(6), atol=1e-12)
    deg = np.array([2, 2, 2, 1, 2, 1, 0, 0], dtype=float)
    for comp in ([0, 1, 2], [3, 4, 5]):
        trivial = np.zeros(8)
        trivial[comp] = np.sqrt(deg[comp])
        np.testing.assert_allclose(trivial @ vectors, 0, atol=1e-12)  # no trivial direction left
    for node in (6, 7):
        assert np.isclose(np.abs(vectors[node]).max(), 1.0)  # e_6 and e_7 are among the columns
    emb = laplacian_embedding(8, both_directions(edges), k=10)
    assert emb.shape == (8, 10) and not emb[:, 6:].any()


def test_degenerate_graphs() -> None:
    assert laplacian_embedding(0, np.zeros((2, 0), np.int64), k=4).shape == (0, 4)
    np.testing.assert_array_equal(laplacian_embedding(1, np.zeros((2, 0), np.int64), k=3), [[1.0, 0.0, 0.0]])
    values, _ = laplacian_eigenpairs(3, np.zeros((2, 0), np.int64), k=8)  # no edges: L = I, nothing dropped
    np.testing.assert_allclose(values, [1, 1, 1])
    values, _ = laplacian_eigenpairs(2, both_directions([[0, 1]]), k=8)  # K2: {0, 2}, the 0 dropped
    np.testing.assert_allclose(values, [2.0])
    # Self loops, duplicates and one-way edges are normalised away.
    messy = np.array([[0, 1, 1, 2, 2], [1, 0, 1, 3, 3]])
    np.testing.assert_allclose(
        laplacian_embedding(4, messy, k=3),
        laplacian_embedding(4, both_directions([[0, 1], [2, 3]]), k=3),
    )
    with pytest.raises(GaptuiError):
        laplacian_embedding(3, np.array([[0], [5]]), k=2)


def asymmetric_graph(n: int, seed: int) -> np.ndarray:
    """A connected random graph with a simple spectrum and no sign-ambiguous kept eigenvector."""
    rng = np.random.default_rng(seed)
    while True:
        edges = er_edges(n, 3.5, rng)
        edges = np.concatenate([edges, np.stack([np.arange(n - 1), np.arange(1, n)], axis=1)])  # connected
        edges = np.unique(np.sort(edges, axis=1), axis=0)
        values, vectors = laplacian_eigenpairs(n, both_directions(edges), k=n)
        odd = np.abs((vectors**3).sum(axis=0)) / (np.abs(vectors) ** 3).sum(axis=0)
        if np.diff(values).min() > 1e-6 and odd.min() > 1e-4:
            return edges


@pytest.mark.parametrize("n", [9, 14, 30])
def test_permuting_the_graph_permutes_the_embedding(n: int) -> None:
    edges = asymmetric_graph(n, seed=n)
    rng = np.random.default_rng(100 + n)
    perm = rng.permutation(n)
    x_g = laplacian_embedding(n, both_directions(edges), k=64)
    x_h = laplacian_embedding(n, both_directions(relabel(edges, perm)), k=64)
    np.testing.assert_allclose(x_h[perm], x_g, atol=1e-9)  # H's node perm[i] is G's node i

    split = make_split([(n, edges, relabel(edges, perm), perm)])
    scores = laplacian_scores(split, k=64, workers=1)
    assert scores.lap_acc == 1.0 and scores.argmax_acc == 1.0 and scores.num_nodes == n


def test_sign_rule_is_equivariant_and_idempotent() -> None:
    rng = np.random.default_rng(4)
    v = rng.standard_normal((20, 6))
    perm = rng.permutation(20)
    flips = rng.choice([-1.0, 1.0], 6)
    np.testing.assert_allclose(canonical_signs((v * flips)[perm]), canonical_signs(v)[perm])
    np.testing.assert_allclose(canonical_signs(canonical_signs(v)), canonical_signs(v))
    c = canonical_signs(v)
    assert ((c**3).sum(axis=0) > 0).all()
    # The sum of cubes vanishes (1 + 1 - 2 = 0) but the fifth powers do not (2 - 2^(5/3) < 0): p = 5 decides.
    w = np.array([[1.0], [1.0], [-(2.0 ** (1 / 3))]])
    assert abs((w**3).sum()) < 1e-12
    np.testing.assert_allclose(canonical_signs(w), -w)


def test_sparse_solver_agrees_with_dense() -> None:
    n = 160
    edges = asymmetric_graph(n, seed=7)
    dense_vals, dense_vecs = laplacian_eigenpairs(n, both_directions(edges), k=12)
    sparse_vals, sparse_vecs = laplacian_eigenpairs(n, both_directions(edges), k=12, dense_max=0)
    np.testing.assert_allclose(sparse_vals, dense_vals, atol=1e-9)
    np.testing.assert_allclose(sparse_vecs, dense_vecs, atol=1e-6)


def test_er_pairs_accurate_without_noise_and_poor_with_heavy_noise() -> None:
    rng = np.random.default_rng(0)
    n = 60
    clean, noisy = [], []
    for _ in range(6):
        edges = er_edges(n, 8, rng)
        perm = rng.permutation(n)
        clean.append((n, edges, relabel(edges, perm), perm))
        noisy.append((n, edges, relabel(noised(n, edges, 0.5, rng), perm), perm))
    s_clean = laplacian_scores(make_split(clean), k=64)
    s_noisy = laplacian_scores(make_split(noisy), k=64)
    # Without noise only automorphic nodes (e.g. two leaves on one node) can be confused.
    assert s_clean.lap_acc > 0.95 and s_clean.topk_acc[10] > 0.95
    assert s_noisy.lap_acc < 0.2
    assert s_clean.num_pairs == 6 and s_clean.num_nodes == 6 * n
