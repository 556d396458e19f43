"""The training-free baseline: Laplacian eigenvector positional encodings, aligned by LAP on ``X_G X_H^T``.

**Which Laplacian.** The symmetric normalised Laplacian ``L = I - D^{-1/2} A D^{-1/2}`` of the simple
undirected graph (self loops dropped, multi-edges collapsed, one-way edges symmetrised), with the convention
``D^{-1/2}_ii = 0`` for an isolated node: its row of ``L`` is ``e_i``, so an isolated node contributes the
eigenvalue **1** with eigenvector ``e_i``, not a second eigenvalue 0. Eigenvalues lie in ``[0, 2]``.

**Which eigenvectors.** ``L`` is block diagonal over connected components and is decomposed per component.
Every component with at least one edge has exactly one eigenvalue 0 with eigenvector ``D^{1/2} 1``
restricted to the component (normalised); that *trivial* eigenvector carries no positional information and
is dropped, one per such component, chosen combinatorially (by counting components) rather than by thresholding
eigenvalues. Isolated nodes have no trivial eigenvector and keep their ``e_i``. The remaining eigenpairs of all
components are merged, stably sorted by ascending eigenvalue, and the first ``k`` eigenvectors are the
columns of the embedding ``[n, k]`` (each column has unit norm and is zero outside its component). When
fewer than ``k`` remain (``n - #components-with-edges < k``), the missing columns are zeros, so the shape is
always ``[n, k]``.

**Signs.** An eigenvector of a simple eigenvalue is defined up to sign. Each column is flipped so that its
first odd power sum ``sum_i v_i^p``, ``p = 3, 5, 7, 9``, that is clearly non-zero (``|sum v^p| > 1e-6 sum
|v|^p``) is positive. Power sums are invariant under permuting the nodes, so this rule is permutation
equivariant. If all of them vanish the multiset of entries is (numerically) symmetric under negation, and *no*
rule that looks only at the entries can be equivariant; the fallback then makes the first entry of largest
magnitude positive, which depends on node order (e.g. the antisymmetric eigenvectors of a path).

**Repeated eigenvalues.** The eigenspace of a repeated eigenvalue has no canonical basis: we keep whatever
orthonormal basis LAPACK (or ARPACK) returns, which depends on the node order, and the cut at ``k`` may split
such an eigenspace. For isomorphic graphs with a simple spectrum (and no symmetric eigenvectors among the
kept ones) the embeddings agree row-wise after the permutation; otherwise only up to an orthogonal mixing of
the repeated eigenspaces. This, and the sensitivity of eigenvectors to edge noise, is why the baseline is weak.

**Solver.** Components of at most ``dense_max`` nodes use dense :func:`numpy.linalg.eigh` (exact up to
rounding); larger ones use ARPACK in shift-invert mode around ``-1e-3`` (:func:`scipy.sparse.linalg.eigsh`)
for their ``k + 1`` smallest eigenpairs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from scipy.sparse import coo_matrix, csr_matrix, diags, identity
from scipy.sparse.csgraph import connected_components
from scipy.sparse.linalg import eigsh

from engine.errors import GaptuiError
from engine.evaluation import DEFAULT_KS, AlignmentScores, LapEvaluator, pad_batch
from engine.pairs import PairSplit

#: Default number of eigenvectors per node.
DEFAULT_K = 64
#: Components up to this many nodes are decomposed densely.
DENSE_MAX = 3000
#: Odd power sums tried, in order, to fix the sign of an eigenvector.
_SIGN_MOMENTS = (3, 5, 7, 9)
#: A power sum counts as non-zero above this fraction of the matching absolute power sum.
_SIGN_TOL = 1e-6
#: Pairs scored per padded batch by :func:`laplacian_scores`.
_BATCH = 128


def _adjacency(num_nodes: int, edge_index: np.ndarray) -> csr_matrix:
    """Symmetric 0/1 CSR adjacency without self loops, from ``[2, E]`` local ids (any direction, duplicates)."""
    ei = np.asarray(edge_index, dtype=np.int64).reshape(2, -1)
    if ei.size and (ei.min() < 0 or ei.max() >= num_nodes):
        raise GaptuiError(f"edge_index refers to node {int(ei.max())} of a graph with {num_nodes} nodes")
    keep = ei[0] != ei[1]
    src = np.concatenate([ei[0, keep], ei[1, keep]])
    dst = np.concatenate([ei[1, keep], ei[0, keep]])
    adj = coo_matrix((np.ones(src.size), (src, dst)), shape=(num_nodes, num_nodes)).tocsr()
    adj.data[:] = 1.0  # duplicates were summed by the conversion
    return adj


def canonical_signs(vectors: np.ndarray) -> np.ndarray:
    """Flip the columns of ``vectors`` ``[n, m]`` by the sign rule of the module docstring; returns a copy."""
    v = np.array(vectors, dtype=np.float64, copy=True)
    if v.size == 0:
        return v
    sign = np.zeros(v.shape[1])
    for p in _SIGN_MOMENTS:
        moment = (v**p).sum(axis=0)
        scale = (np.abs(v) ** p).sum(axis=0)
        decided = (sign == 0) & (np.abs(moment) > _SIGN_TOL * scale)
        sign[decided] = np.sign(moment[decided])
    undecided = np.flatnonzero(sign == 0)
    if undecided.size:
        # Symmetric value multiset: no equivariant choice exists; the first entry of largest magnitude decides
        # (largest up to rounding, so that the entries +-a of a symmetric vector really tie and the first wins).
        mag = np.abs(v[:, undecided])
        top = (mag >= mag.max(axis=0) * (1.0 - 1e-9)).argmax(axis=0)
        sign[undecided] = np.sign(v[top, undecided])
    sign[sign == 0] = 1.0  # an all-zero column (cannot happen for eigenvectors) stays as it is
    return v * sign


def _component_eigenpairs(lap: csr_matrix, count: int, dense_max: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``count`` smallest eigenpairs ``(values [c], vectors [m, c])`` of one component's Laplacian."""
    m = lap.shape[0]
    if m <= dense_max or count >= m - 1:
        values, vectors = np.linalg.eigh(lap.toarray())
        return values[:count], vectors[:, :count]
    # Shift-invert just below 0: L - sigma I is positive definite, and the eigenvalues nearest sigma are wanted.
    values, vectors = eigsh(lap.tocsc(), k=count, sigma=-1e-3, which="LM")
    order = np.argsort(values, kind="stable")
    return values[order], vectors[:, order]


def laplacian_eigenpairs(
    num_nodes: int, edge_index: np.ndarray, k: int = DEFAULT_K, dense_max: int = DENSE_MAX
) -> tuple[np.ndarray, np.ndarray]:
    """The kept eigenpairs of the normalised Laplacian, unpadded: ``(values [m], vectors [n, m])``, ``m <= k``.

    ``edge_index``: int ``[2, E]``, local ids; both directions are expected but one suffices. Values ascend;
    vectors are orthonormal, sign-canonicalised, and exclude one trivial eigenvector per component with edges
    (see the module docstring for every convention).
    """
    n = int(num_nodes)
    if k < 1:
        raise GaptuiError(f"the Laplacian embedding needs k >= 1 eigenvectors, got {k}")
    if n == 0:
        return np.zeros(0), np.zeros((0, 0))
    adj = _adjacency(n, edge_index)
    deg = np.asarray(adj.sum(axis=1)).ravel()
    inv_sqrt = np.zeros(n)
    np.divide(1.0, np.sqrt(deg), out=inv_sqrt, where=deg > 0)  # isolated nodes: 0 by convention
    lap = (identity(n, format="csr") - diags(inv_sqrt) @ adj @ diags(inv_sqrt)).tocsr()

    _, label = connected_components(adj, directed=False)
    order = np.argsort(label, kind="stable")
    bounds = np.flatnonzero(np.diff(np.concatenate([[-1], label[order], [label.max() + 1]])))
    values: list[np.ndarray] = []
    columns: list[tuple[np.ndarray, np.ndarray]] = []  # (node ids, vectors on them)
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        nodes = order[a:b]
        if nodes.size == 1:
            values.append(np.array([lap[nodes[0], nodes[0]]]))  # 1 for an isolated node
            columns.append((nodes, np.ones((1, 1))))
            continue
        # One more than k: the first eigenpair of a component with edges is its trivial one (eigenvalue 0).
        count = min(k + 1, nodes.size)
        block = lap if nodes.size == n else lap[nodes][:, nodes]  # connected graphs: no slicing needed
        val, vec = _component_eigenpairs(block, count, dense_max)
        values.append(val[1:])
        columns.append((nodes, vec[:, 1:]))

    all_values = np.concatenate(values)
    owner = np.repeat(np.arange(len(columns)), [c[1].shape[1] for c in columns])
    local = np.concatenate([np.arange(c[1].shape[1]) for c in columns])
    pick = np.argsort(all_values, kind="stable")[:k]
    vectors = np.zeros((n, pick.size))
    for j, col in enumerate(pick):
        nodes, vec = columns[owner[col]]
        vectors[nodes, j] = vec[:, local[col]]
    return all_values[pick], canonical_signs(vectors)


def laplacian_embedding(
    num_nodes: int, edge_index: np.ndarray, k: int = DEFAULT_K, dense_max: int = DENSE_MAX
) -> np.ndarray:
    """Laplacian positional encoding ``[num_nodes, k]`` float64 of one graph (conventions: module docstring).

    The columns are the ``k`` eigenvectors of smallest eigenvalue of ``I - D^{-1/2} A D^{-1/2}`` once one
    trivial eigenvector per component with edges is dropped, signs canonicalised, zero columns padding the
    rest when fewer than ``k`` exist. ``edge_index``: int ``[2, E]`` local ids, both directions of each edge.
    """
    _, vectors = laplacian_eigenpairs(num_nodes, edge_index, k, dense_max)
    out = np.zeros((int(num_nodes), k))
    out[:, : vectors.shape[1]] = vectors
    return out


@contextlib.contextmanager
def single_threaded_blas() -> Iterator[None]:
    """Limit BLAS / LAPACK to one thread while many small eigenproblems run side by side.

    OpenBLAS' threads cost far more than they save on ``100 x 100`` matrices, and on a loaded machine their
    spin-waiting made one ``eigh`` 30x slower (34 ms instead of 0.9 ms). The limit is process-wide while it
    holds. Uses ``threadpoolctl`` when installed (it comes with scikit-learn); without it nothing is limited.
    """
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # optional: only speed depends on it
        yield
        return
    with threadpool_limits(limits=1, user_api="blas"):
        yield


def _pair_similarity(split: PairSplit, p: int, k: int, dense_max: int) -> tuple[np.ndarray, np.ndarray]:
    """``(S = X_G X_H^T [n, n], perm [n])`` of pair ``p``."""
    n, ei_g, ei_h, perm = split.pair(p)
    x_g = laplacian_embedding(n, ei_g, k, dense_max)
    x_h = laplacian_embedding(n, ei_h, k, dense_max)
    return x_g @ x_h.T, perm


def laplacian_scores(
    split: PairSplit,
    k: int = DEFAULT_K,
    ks: Iterable[int] = DEFAULT_KS,
    workers: int | None = None,
    dense_max: int = DENSE_MAX,
) -> AlignmentScores:
    """Score the Laplacian baseline on every pair of ``split``: ``S = X_G X_H^T``, LAP / argmax / top-k.

    ``X_G`` and ``X_H`` are :func:`laplacian_embedding` of ``G`` and ``H`` (``[n, k]`` each); accuracies are
    node-weighted over all pairs, exactly as for a trained model (:mod:`engine.evaluation`). The embeddings are
    computed on ``workers`` threads (LAPACK releases the GIL; default: the usable CPUs; ``1``: serially), with
    single-threaded BLAS, and each batch of pairs is scored by a :class:`LapEvaluator` while the next is built.
    """
    if k < 1:
        raise GaptuiError(f"the Laplacian embedding needs k >= 1 eigenvectors, got {k}")
    serial = workers == 1
    evaluator = LapEvaluator("serial" if serial else "thread", workers=workers, ks=ks)
    pool = None if serial else ThreadPoolExecutor(evaluator.workers, thread_name_prefix="laplacian")
    with evaluator, single_threaded_blas():
        try:
            for start in range(0, len(split), _BATCH):
                pairs = range(start, min(len(split), start + _BATCH))
                if pool is None:
                    done = [_pair_similarity(split, p, k, dense_max) for p in pairs]
                else:
                    done = list(pool.map(lambda p: _pair_similarity(split, p, k, dense_max), pairs))
                sim, num_nodes, perm = pad_batch([d[0] for d in done], [d[1] for d in done])
                evaluator.submit(sim, num_nodes, perm)
            return evaluator.result()
        finally:
            if pool is not None:
                pool.shutdown(wait=True)
