"""Alignment metrics of a similarity matrix: LAP accuracy, row-argmax accuracy and top-k accuracy.

A model embeds ``G`` and ``H`` of a pair into ``X_G, X_H`` (``[n, d]``); ``S = X_G X_H^T`` (``[n, n]``) scores
node ``i`` of ``G`` against node ``j`` of ``H``. The planted truth is ``perm``: node ``i`` of ``G`` is node
``perm[i]`` of ``H`` (see :class:`engine.pairs.PairSplit`). Per row ``i`` of a pair:

- **LAP**: ``pi_hat`` maximises ``sum_i S[i, pi_hat[i]]`` over permutations (a one-to-one matching, solved by
  :func:`scipy.optimize.linear_sum_assignment`); row ``i`` is correct iff ``pi_hat[i] == perm[i]``.
- **argmax**: row ``i`` is correct iff ``argmax_j S[i, j] == perm[i]``; ties go to the lowest column index
  (numpy's rule), so a row of equal scores counts as correct only when ``perm[i]`` is that lowest column.
- **top-k**: ``rank_i = #{j != perm[i] : S[i, j] >= S[i, perm[i]]}``; row ``i`` is correct iff ``rank_i < k``.
  Ties count *against* the model (conservative): the true column must beat every tied column to be ranked
  ahead of them, so a collapsed model that scores every column alike gets top-k 0 for every ``k < n``. Hence
  top-1 <= argmax accuracy, with equality when rows have no ties at their maximum.

Accuracies are **node-weighted over all pairs**: correct rows of all pairs / nodes of all pairs (a pair of 200
nodes weighs twice a pair of 100), never the mean of per-pair accuracies. :class:`AlignmentScores` keeps the
integer counts so that merging batches is exact.

Batches are dense and padded: ``sim [B, Nmax, Nmax]`` with pair ``b`` in the top-left ``num_nodes[b]`` square;
padded rows and columns are never read (argmax and top-k mask the padded columns, the LAP only sees the
``n x n`` block), so their values do not matter.

Parallelism: scipy's LAP solver releases the GIL. Measured on an idle 2-core machine, 500 pairs of 100 x 100
(float32): LAPs alone 129 ms serially, 65 ms on two threads; a whole batch (LAPs + argmax / top-k) 147 ms
with :func:`evaluate_batch`, 82 ms with ``LapEvaluator("thread")`` and 101 ms with ``LapEvaluator("process")``,
which pays for pickling every matrix (plus about 0.2 s to spawn its workers). Threads are therefore the default.
Submitted next to a CPU training loop (15 ms steps), the 500 pairs were scored within about 180 ms while the
training steps slowed by well under 1 ms each. The training loop hands a batch to :meth:`LapEvaluator.submit`
and carries on; :meth:`LapEvaluator.result` gathers.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.optimize import linear_sum_assignment

from engine.errors import GaptuiError

#: Top-k cut-offs reported by default.
DEFAULT_KS: tuple[int, ...] = (1, 5, 10)
#: Executor kinds of :class:`LapEvaluator`.
EXECUTORS = ("thread", "process", "serial")
#: Matrix entries handled at once by the vectorised argmax / top-k (bounds their temporaries to ~100 MB).
_RANK_BLOCK = 1 << 23


def lap_assignment(sim: np.ndarray) -> np.ndarray:
    """The permutation maximising the total similarity of an ``n x n`` matrix.

    Returns ``pi_hat`` (int64 ``[n]``) with ``pi_hat[i]`` the column matched to row ``i``, maximising
    ``sum_i sim[i, pi_hat[i]]``. Raises ``ValueError`` for a non-square or non-finite matrix.
    """
    sim = np.asarray(sim)
    if sim.ndim != 2 or sim.shape[0] != sim.shape[1]:
        raise ValueError(f"lap_assignment needs a square matrix, got shape {sim.shape}")
    if not np.isfinite(sim).all():
        raise ValueError("lap_assignment: the similarity matrix has non-finite entries")
    rows, cols = linear_sum_assignment(sim, maximize=True)
    # rows comes back as arange(n) for a square matrix; scatter anyway so the contract never depends on it.
    pi_hat = np.empty(sim.shape[0], dtype=np.int64)
    pi_hat[rows] = cols
    return pi_hat


@dataclass
class AlignmentScores:
    """Alignment metrics summed over pairs, as integer counts; accuracies are derived node-weighted.

    - ``num_pairs``: pairs evaluated; ``num_nodes``: their nodes (rows) in total.
    - ``lap_correct`` / ``argmax_correct``: rows whose LAP / row-argmax match is the true one.
    - ``topk_correct``: ``{k: rows whose true match ranks among the top k}`` (conservative ties, see module).
    - ``pair_nodes`` / ``pair_lap_correct``: int64 ``[num_pairs]``, per pair in the order scored; ``assignment``:
      int64 ``[num_nodes]``, the LAP's match of every row, per pair in that order (local column ids). What the
      structural metrics of :mod:`engine.alignment.pair_metrics` read, so that the LAP is solved once.

    ``lap_acc``, ``argmax_acc`` and ``topk_acc`` are fractions in ``[0, 1]`` of *all nodes pooled over pairs*;
    0.0 when nothing was evaluated. Merge batches with :meth:`merge` (or ``+``, or :meth:`total`).
    """

    num_pairs: int = 0
    num_nodes: int = 0
    lap_correct: int = 0
    argmax_correct: int = 0
    topk_correct: dict[int, int] = field(default_factory=dict)
    pair_nodes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64), compare=False, repr=False)
    pair_lap_correct: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64), compare=False, repr=False)
    assignment: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64), compare=False, repr=False)

    @property
    def lap_acc(self) -> float:
        return self.lap_correct / self.num_nodes if self.num_nodes else 0.0

    @property
    def argmax_acc(self) -> float:
        return self.argmax_correct / self.num_nodes if self.num_nodes else 0.0

    @property
    def topk_acc(self) -> dict[int, float]:
        return {k: (c / self.num_nodes if self.num_nodes else 0.0) for k, c in sorted(self.topk_correct.items())}

    def merge(self, other: AlignmentScores) -> AlignmentScores:
        """Scores of both sets of pairs together (node-weighted). An empty side adopts the other's ``k``s."""
        if self.num_pairs and other.num_pairs and set(self.topk_correct) != set(other.topk_correct):
            raise ValueError(
                f"cannot merge scores with different top-k cut-offs {sorted(self.topk_correct)} "
                f"and {sorted(other.topk_correct)}"
            )
        keys = set(self.topk_correct) | set(other.topk_correct)
        return AlignmentScores(
            num_pairs=self.num_pairs + other.num_pairs,
            num_nodes=self.num_nodes + other.num_nodes,
            lap_correct=self.lap_correct + other.lap_correct,
            argmax_correct=self.argmax_correct + other.argmax_correct,
            topk_correct={k: self.topk_correct.get(k, 0) + other.topk_correct.get(k, 0) for k in sorted(keys)},
            pair_nodes=np.concatenate([self.pair_nodes, other.pair_nodes]),
            pair_lap_correct=np.concatenate([self.pair_lap_correct, other.pair_lap_correct]),
            assignment=np.concatenate([self.assignment, other.assignment]),
        )

    def __add__(self, other: AlignmentScores) -> AlignmentScores:
        return self.merge(other)

    @classmethod
    def total(cls, scores: Iterable[AlignmentScores]) -> AlignmentScores:
        """Merge any number of scores (an empty iterable gives empty scores)."""
        out = cls()
        for s in scores:
            out = out.merge(s)
        return out

    def to_dict(self) -> dict[str, float | int]:
        """Flat metrics for logs: ``lap_acc``, ``argmax_acc``, ``top{k}_acc`` (fractions), and the counts."""
        out: dict[str, float | int] = {
            "lap_acc": self.lap_acc,
            "argmax_acc": self.argmax_acc,
        }
        out.update({f"top{k}_acc": v for k, v in self.topk_acc.items()})
        out.update({"num_pairs": self.num_pairs, "num_nodes": self.num_nodes})
        return out


# ----------------------------------------------------------------------------------------------------------
# Input normalisation


def _to_numpy(x: Any) -> np.ndarray:
    """A numpy view (or copy) of a numpy array, a torch tensor (any device, grad or not) or a nested list.

    torch is never imported here, so worker processes of a process pool start without it.
    """
    if type(x).__module__.startswith("torch"):
        x = x.detach()
        # numpy has no bfloat16: widen half types to float32 (exact) before leaving torch.
        if x.dtype.is_floating_point and x.dtype.itemsize < 4:
            x = x.float()
        return x.cpu().numpy()
    return np.asarray(x)


@dataclass(frozen=True)
class _Batch:
    """A validated batch: ``sim [B, Nmax, Nmax]`` float, ``num_nodes [B]`` int64, ``perm [B, Nmax]`` int64."""

    sim: np.ndarray
    num_nodes: np.ndarray
    perm: np.ndarray


def _prepare(sim: Any, num_nodes: Any, perm: Any, copy: bool = False) -> _Batch:
    """Check shapes, permutations and finiteness of a padded batch.

    ``perm`` may also be a list of ``[n_b]`` arrays; ``copy`` detaches the result from the caller's memory.
    """
    s = _to_numpy(sim)
    if s.ndim == 2:  # a single pair
        s = s[None]
    if s.ndim != 3 or s.shape[1] != s.shape[2]:
        raise ValueError(f"similarity batch must be [B, Nmax, Nmax], got shape {s.shape}")
    if not np.issubdtype(s.dtype, np.floating):
        s = s.astype(np.float64)
    bsz, nmax = s.shape[0], s.shape[1]
    n = np.atleast_1d(_to_numpy(num_nodes)).astype(np.int64)
    if n.shape != (bsz,):
        raise ValueError(f"num_nodes must have shape [{bsz}], got {n.shape}")
    if ((n < 0) | (n > nmax)).any():
        raise ValueError(f"num_nodes must lie in [0, {nmax}], got {n.tolist()}")

    if isinstance(perm, (list, tuple)):
        if len(perm) != bsz:
            raise ValueError(f"perm: expected {bsz} arrays, got {len(perm)}")
        p = np.full((bsz, nmax), -1, dtype=np.int64)
        for b, pb in enumerate(perm):
            pb = _to_numpy(pb).astype(np.int64).reshape(-1)
            if pb.shape[0] != n[b]:
                raise ValueError(f"perm of pair {b} has {pb.shape[0]} entries for {n[b]} nodes")
            p[b, : n[b]] = pb
    else:
        p = _to_numpy(perm).astype(np.int64)
        if p.ndim == 1 and bsz == 1:
            p = p[None]
        if p.ndim != 2 or p.shape[0] != bsz or p.shape[1] < nmax:
            raise ValueError(f"perm must be [B, >= Nmax] = [{bsz}, >= {nmax}], got {p.shape}")
        p = p[:, :nmax]

    cols = np.arange(nmax)
    real = cols[None, :] < n[:, None]  # [B, Nmax] real rows (== real columns)
    # Each pair's perm must be a permutation of 0..n-1: sorted real entries equal arange(n).
    sorted_p = np.sort(np.where(real, p, np.iinfo(np.int64).max), axis=1)
    ok = (~real | (sorted_p == cols[None, :])).all(axis=1)
    if not ok.all():
        bad = int(np.flatnonzero(~ok)[0])
        raise ValueError(f"perm of pair {bad} is not a permutation of 0..{n[bad] - 1}")
    # Only the real blocks: a model may well fill its padding with -inf or NaN.
    if not (np.isfinite(s) | ~(real[:, :, None] & real[:, None, :])).all():
        raise GaptuiError("similarity matrix has non-finite entries (NaN or inf) in a real block: the model diverged")
    if copy:
        s = np.array(s, copy=True)
    return _Batch(np.ascontiguousarray(s), n, np.ascontiguousarray(p))


# ----------------------------------------------------------------------------------------------------------
# The two halves of the work: vectorised ranks, and one LAP per pair


#: Per-pair argmax-correct rows ``[B]`` and ``{k: top-k-correct rows [B]}``.
_Ranks = tuple[np.ndarray, dict[int, np.ndarray]]


def _rank_counts(batch: _Batch, ks: Sequence[int]) -> _Ranks:
    """Per pair: rows whose argmax is the truth ``[B]``, and ``{k: rows with rank < k}`` (each ``[B]``).

    Vectorised over pairs and rows, in blocks of at most ``_RANK_BLOCK`` matrix entries so that the boolean
    temporaries stay small for large graphs.
    """
    s, n, p = batch.sim, batch.num_nodes, batch.perm
    bsz, nmax = s.shape[0], s.shape[1]
    argmax_ok = np.zeros(bsz, np.int64)
    topk = {k: np.zeros(bsz, np.int64) for k in ks}
    if nmax == 0:
        return argmax_ok, topk
    cols = np.arange(nmax)
    pairs_per_block = max(1, _RANK_BLOCK // (nmax * nmax))
    rows_per_block = nmax if pairs_per_block > 1 else max(1, _RANK_BLOCK // nmax)
    neg_inf = np.array(-np.inf, dtype=s.dtype)
    for b0 in range(0, bsz, pairs_per_block):
        b1 = min(bsz, b0 + pairs_per_block)
        col_mask = (cols[None, :] < n[b0:b1, None])[:, None, :]  # [b, 1, Nmax] real columns
        for r0 in range(0, nmax, rows_per_block):
            r1 = min(nmax, r0 + rows_per_block)
            blk = s[b0:b1, r0:r1]  # [b, r, Nmax]
            real_rows = cols[None, r0:r1] < n[b0:b1, None]  # [b, r]
            target = np.where(real_rows, p[b0:b1, r0:r1], 0)  # padded rows look at column 0, then are dropped
            true_val = np.take_along_axis(blk, target[:, :, None], axis=2)  # [b, r, 1]
            hit = (np.where(col_mask, blk, neg_inf).argmax(axis=2) == target) & real_rows
            argmax_ok[b0:b1] += hit.sum(axis=1)
            # Other real columns scoring >= the true one (the true column always ties with itself: - 1).
            rank = ((blk >= true_val) & col_mask).sum(axis=2) - 1
            for k in ks:
                topk[k][b0:b1] += ((rank < k) & real_rows).sum(axis=1)
    return argmax_ok, topk


def _lap_correct_range(sim: np.ndarray, num_nodes: np.ndarray, perm: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """LAP-correct rows of each pair of a (sub-)batch ``[b]`` int64, and the matches of all their rows
    ``[sum n]`` int64; runs in a worker thread or process."""
    out = np.zeros(sim.shape[0], dtype=np.int64)
    matches = np.zeros(int(num_nodes.sum()), dtype=np.int64)
    at = 0
    for b in range(sim.shape[0]):
        n = int(num_nodes[b])
        if n == 0:
            continue
        # Only the real n x n block: padding can never be matched.
        _, cols = linear_sum_assignment(sim[b, :n, :n], maximize=True)
        out[b] = int((cols == perm[b, :n]).sum())
        matches[at : at + n] = cols
        at += n
    return out, matches


def _lap_chunks(num_nodes: np.ndarray, parts: int) -> list[tuple[int, int]]:
    """Contiguous ranges of pairs of about equal LAP cost (taken as ``n^3``), at most ``parts`` of them."""
    bsz = num_nodes.shape[0]
    if bsz == 0:
        return []
    parts = max(1, min(parts, bsz))
    cost = np.cumsum(num_nodes.astype(np.float64) ** 3)
    if cost[-1] == 0:
        return [(0, bsz)]
    cuts = np.searchsorted(cost, cost[-1] * np.arange(1, parts) / parts, side="right")
    bounds = np.unique(np.concatenate([[0], cuts, [bsz]]))
    return [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:], strict=True) if b > a]


def _assemble(
    batch: _Batch, ks: Sequence[int], laps: Sequence[tuple[np.ndarray, np.ndarray]], ranks: _Ranks
) -> AlignmentScores:
    """Sum per-pair counts (LAP ``[B]`` with the matches of each chunk of pairs, argmax ``[B]``, top-k
    ``{k: [B]}``) into scores of the batch."""
    argmax_ok, topk = ranks
    lap = np.concatenate([c for c, _ in laps]) if laps else np.zeros(0, np.int64)
    return AlignmentScores(
        num_pairs=int(batch.num_nodes.shape[0]),
        num_nodes=int(batch.num_nodes.sum()),
        lap_correct=int(lap.sum()),
        argmax_correct=int(argmax_ok.sum()),
        topk_correct={k: int(topk[k].sum()) for k in ks},
        pair_nodes=batch.num_nodes.astype(np.int64),
        pair_lap_correct=lap,
        assignment=np.concatenate([m for _, m in laps]) if laps else np.zeros(0, np.int64),
    )


def _check_ks(ks: Iterable[int]) -> tuple[int, ...]:
    out = tuple(sorted({int(k) for k in ks}))
    if any(k < 1 for k in out):
        raise ValueError(f"top-k cut-offs must be >= 1, got {list(ks)}")
    return out


def evaluate_batch(
    sim: Any, num_nodes: Any, perm: Any, ks: Iterable[int] = DEFAULT_KS, executor: Executor | None = None
) -> AlignmentScores:
    """Score one padded batch synchronously.

    ``sim``: float ``[B, Nmax, Nmax]`` (numpy or torch, any device; ``[n, n]`` for one pair); ``num_nodes``:
    ``[B]``; ``perm``: int ``[B, Nmax]`` padded with anything, or a list of ``B`` arrays ``[n_b]``.
    ``executor``: a pool to run the LAPs on, split into chunks of pairs (``None``: serially in this thread).
    Raises :class:`GaptuiError` on non-finite similarities in a real block and ``ValueError`` on malformed
    shapes or permutations.
    """
    ks = _check_ks(ks)
    batch = _prepare(sim, num_nodes, perm)
    if executor is None:
        return _assemble(batch, ks, [_lap_correct_range(*_slice(batch, 0, None))], _rank_counts(batch, ks))
    workers = int(getattr(executor, "_max_workers", 1) or 1)
    chunks = _lap_chunks(batch.num_nodes, 4 * workers)
    futs = [executor.submit(_lap_correct_range, *_slice(batch, a, b)) for a, b in chunks]
    ranks = _rank_counts(batch, ks)  # in this thread, while the pool solves the LAPs
    return _assemble(batch, ks, [f.result() for f in futs], ranks)


def _slice(batch: _Batch, a: int, b: int | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return batch.sim[a:b], batch.num_nodes[a:b], batch.perm[a:b]


def _gather(parts: list[Future], combine: Callable[[list[Any]], Any]) -> Future:
    """A future resolved with ``combine(results)`` once every part is done, or with a part's error."""
    out: Future = Future()
    out.set_running_or_notify_cancel()
    left = [len(parts)]
    lock = threading.Lock()

    def done(_: Future) -> None:
        with lock:
            left[0] -= 1
            if left[0] or out.done():
                return
        try:
            out.set_result(combine([p.result() for p in parts]))
        except BaseException as exc:  # noqa: BLE001 - handed to whoever waits on the future
            out.set_exception(exc)

    if not parts:
        out.set_result(combine([]))
    for p in parts:
        p.add_done_callback(done)
    return out


class LapEvaluator:
    """Scores batches in the background while the training loop carries on.

    ``submit(sim, num_nodes, perm)`` validates and copies the batch (so the caller may reuse or free its
    tensors) and returns at once a :class:`~concurrent.futures.Future` of its :class:`AlignmentScores`;
    the vectorised argmax / top-k run as one task and the LAPs as a few chunks of pairs of about equal cost.
    ``result()`` waits for every batch submitted since the last ``result()`` and returns their merged scores.
    ``evaluate(...)`` is the synchronous form. Use as a context manager, or call :meth:`close`.

    ``kind``: ``"thread"`` (default; scipy's LAP releases the GIL), ``"process"`` (spawned workers; every
    sub-batch is pickled to them, slower for 100-node pairs; like any spawned pool it needs the calling script
    to guard its entry point with ``if __name__ == "__main__":``) or ``"serial"`` (no pool; ``submit``
    computes before returning). ``workers``: pool size (default: the CPUs this process may use).
    """

    def __init__(self, kind: str = "thread", workers: int | None = None, ks: Iterable[int] = DEFAULT_KS):
        if kind not in EXECUTORS:
            raise ValueError(f"unknown evaluator kind {kind!r}; known: {', '.join(EXECUTORS)}")
        self.kind = kind
        self.ks = _check_ks(ks)
        self.workers = max(1, workers or len(os.sched_getaffinity(0)))
        self._lap_pool: Executor | None = None
        self._rank_pool: Executor | None = None
        if kind == "thread":
            self._lap_pool = ThreadPoolExecutor(self.workers, thread_name_prefix="lap-eval")
            self._rank_pool = self._lap_pool
        elif kind == "process":
            from engine.pools import process_pool

            # spawned, not forked (see engine.pools), and never outliving this process
            self._lap_pool = process_pool(self.workers)
            # Ranks stay in this process: shipping the whole batch would cost more than computing them.
            self._rank_pool = ThreadPoolExecutor(1, thread_name_prefix="lap-rank")
        self._pending: list[Future] = []

    def submit(self, sim: Any, num_nodes: Any, perm: Any) -> Future:
        """Hand off one padded batch (shapes as :func:`evaluate_batch`); returns the future of its scores.

        Validation errors (shapes, permutations, non-finite similarities) are raised here, at once.
        """
        fut = self._submit(_prepare(sim, num_nodes, perm, copy=True))
        self._pending.append(fut)
        return fut

    def result(self) -> AlignmentScores:
        """Merged scores of all batches submitted since the last call; waits for them, re-raises errors."""
        pending, self._pending = self._pending, []
        return AlignmentScores.total(f.result() for f in pending)

    def evaluate(self, sim: Any, num_nodes: Any, perm: Any) -> AlignmentScores:
        """Score one batch now, on the pool; independent of what :meth:`result` will return."""
        return self._submit(_prepare(sim, num_nodes, perm)).result()

    def _submit(self, batch: _Batch) -> Future:
        ks = self.ks
        if self._lap_pool is None or self._rank_pool is None:
            if self.kind != "serial":
                raise RuntimeError("LapEvaluator is closed")
            fut: Future = Future()
            fut.set_running_or_notify_cancel()
            fut.set_result(_assemble(batch, ks, [_lap_correct_range(*_slice(batch, 0, None))], _rank_counts(batch, ks)))
            return fut
        # Ranks first: the FIFO queue starts them before the LAP chunks, so they never wait behind them.
        ranks = self._rank_pool.submit(_rank_counts, batch, ks)
        chunks = _lap_chunks(batch.num_nodes, 4 * self.workers)
        laps = [self._lap_pool.submit(_lap_correct_range, *_slice(batch, a, b)) for a, b in chunks]

        def combine(results: list[Any]) -> AlignmentScores:
            return _assemble(batch, ks, results[1:], results[0])

        return _gather([ranks, *laps], combine)

    def close(self) -> None:
        """Wait for running work and shut the pools down."""
        for pool in {id(p): p for p in (self._rank_pool, self._lap_pool) if p is not None}.values():
            pool.shutdown(wait=True)
        self._lap_pool = self._rank_pool = None

    def __enter__(self) -> LapEvaluator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def pad_batch(
    sims: Sequence[np.ndarray], perms: Sequence[np.ndarray], fill: float = 0.0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pack per-pair ``[n_b, n_b]`` matrices and ``[n_b]`` targets into ``(sim [B, Nmax, Nmax], num_nodes
    [B], perm [B, Nmax])``; padding is ``fill`` in ``sim`` and ``-1`` in ``perm`` (never read)."""
    n = np.array([np.shape(s)[0] for s in sims], dtype=np.int64)
    nmax = int(n.max()) if n.size else 0
    dtype = np.result_type(*[np.asarray(s).dtype for s in sims]) if sims else np.float64
    sim = np.full((len(sims), nmax, nmax), fill, dtype=dtype)
    perm = np.full((len(sims), nmax), -1, dtype=np.int64)
    for b, (s, p) in enumerate(zip(sims, perms, strict=True)):
        sim[b, : n[b], : n[b]] = s
        perm[b, : n[b]] = p
    return sim, n, perm
