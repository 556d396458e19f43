"""Training-free graph matching solvers: the rows an alignment table measures learning against.

Each solver aligns one pair ``(G, H)`` from the two adjacency matrices ``A`` and ``B`` alone (no features, no
training) and is scored exactly as a trained model: the same LAP, the same metrics (:mod:`engine.evaluation`,
:mod:`engine.alignment.pair_metrics`).

- ``grampa`` (Fan, Mao, Wu and Xu 2019, "Spectral graph matching and regularized quadratic relaxations"): with the
  eigendecompositions ``A = sum_i lambda_i u_i u_i^T`` and ``B = sum_j mu_j v_j v_j^T`` of the centred and
  normalised adjacency matrices (``(A - p (J - I)) / sqrt(n p (1 - p))``, ``p`` each graph's own edge density),
  the similarity ``X = sum_ij w(lambda_i, mu_j) u_i u_i^T J v_j v_j^T``, ``w = 1 / ((lambda - mu)^2 + eta^2)``,
  computed as ``U (W o (U^T 1)(V^T 1)^T) V^T`` in ``O(n^3)``; then the LAP on ``X``. Option ``eta`` (0.2, the
  paper's choice), ``centre`` (true).
- ``umeyama`` (Umeyama 1988): ``|U| |V|^T`` with both eigenbases sorted by eigenvalue, then the LAP.
- ``faq`` (Vogelstein et al. 2015, scipy's :func:`scipy.optimize.quadratic_assignment`): the Frank-Wolfe
  relaxation of ``max_P trace(A P B P^T)`` (the edges an alignment keeps), started from ``init``: ``grampa``
  (GRAMPA's alignment as a permutation matrix, the default), ``umeyama`` or ``barycenter`` (the flat doubly
  stochastic matrix); ``maxiter`` (30) and ``tol`` (0.03) are scipy's. Its output is a permutation: it reports
  LAP accuracy (of that permutation), not argmax or top-k accuracies.
- ``rrwm`` (Cho, Lee and Lee 2010) through pygmtools (``pip install 'gaptui[solvers]'``): a reweighted random walk
  on the affinity matrix ``K = B (x) A`` (``K[(a, i), (b, j)] = 1`` when ``ij`` is an edge of ``G`` and ``ab`` one of
  ``H``), ``n^2 x n^2`` float32, so ``n^4 * 4`` bytes a pair (400 MB at ``n = 100``): the memory check refuses it
  where that does not fit. Options ``maxiter`` (50), ``sk_iter`` (20), ``alpha`` (0.2), ``beta`` (30):
  pygmtools' defaults. Then the LAP on its soft matching.

Every solver is deterministic (no seed), so a table plans it once per cell, as the Laplacian baseline. Pairs are
solved in a pool (:func:`solve_split`): threads by default (scipy and LAPACK release the GIL in their kernels) or
spawned processes.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from engine.errors import GaptuiError, did_you_mean
from engine.laplacian import single_threaded_blas
from engine.pairs import PairSplit

if TYPE_CHECKING:
    from engine.evaluation import AlignmentScores

#: The extra that installs the optional solvers' packages.
EXTRA = "solvers"
#: Pools :func:`solve_split` can run pairs on.
POOLS = ("thread", "process", "serial")
#: Pairs whose similarities go to the LAP evaluator at once.
_BATCH = 64


@dataclass(frozen=True)
class GrampaOptions:
    eta: float = 0.2
    centre: bool = True

    def check(self, where: str) -> None:
        if not self.eta > 0:
            raise GaptuiError(f"{where}: grampa option eta = {self.eta} must be > 0")


@dataclass(frozen=True)
class UmeyamaOptions:
    def check(self, where: str) -> None:
        pass


#: What ``faq`` may start from.
FAQ_INITS = ("grampa", "umeyama", "barycenter")


@dataclass(frozen=True)
class FaqOptions:
    init: str = "grampa"
    maxiter: int = 30
    tol: float = 0.03

    def check(self, where: str) -> None:
        if self.init not in FAQ_INITS:
            raise GaptuiError(
                f"{where}: faq option init '{self.init}' is not one of {', '.join(FAQ_INITS)}"
                f"{did_you_mean(self.init, FAQ_INITS)}"
            )
        if self.maxiter < 1:
            raise GaptuiError(f"{where}: faq option maxiter = {self.maxiter} must be >= 1")
        if not self.tol > 0:
            raise GaptuiError(f"{where}: faq option tol = {self.tol} must be > 0")


@dataclass(frozen=True)
class RrwmOptions:
    maxiter: int = 50
    sk_iter: int = 20
    alpha: float = 0.2
    beta: float = 30.0

    def check(self, where: str) -> None:
        for key in ("maxiter", "sk_iter"):
            if getattr(self, key) < 1:
                raise GaptuiError(f"{where}: rrwm option {key} = {getattr(self, key)} must be >= 1")
        if not 0 < self.alpha <= 1 or not self.beta > 0:
            raise GaptuiError(f"{where}: rrwm options need 0 < alpha <= 1 and beta > 0")


@dataclass(frozen=True)
class Solver:
    """A registered solver: its options, whether it scores every node pair (a similarity: argmax and top-k are
    defined) or returns a permutation, the package it needs (``""``: none beyond gaptui's own) and a line."""

    name: str
    options: type
    similarity: bool
    package: str
    description: str


SOLVERS: dict[str, Solver] = {
    s.name: s
    for s in (
        Solver("grampa", GrampaOptions, True, "", "GRAMPA spectral similarity (Fan et al. 2019), then the LAP"),
        Solver("umeyama", UmeyamaOptions, True, "", "Umeyama's eigenvector similarity |U||V|^T, then the LAP"),
        Solver("faq", FaqOptions, False, "", "FAQ (scipy's quadratic_assignment), from GRAMPA by default"),
        Solver("rrwm", RrwmOptions, True, "pygmtools", "reweighted random walks (pygmtools), then the LAP"),
    )
}


def is_solver(model: Any) -> bool:
    return isinstance(model, str) and model in SOLVERS


def solver_options(name: str, raw: dict[str, Any], where: str = "solver") -> Any:
    """The typed options of solver ``name`` from ``raw`` (a spec's ``model_kwargs``); one ``error:`` line for an
    unknown option or a bad value."""
    solver = SOLVERS[name]
    options = _parse(solver.options, raw, f"{where}: solver {name}")
    options.check(where)
    return options


def _parse(cls: type, raw: dict[str, Any], where: str) -> Any:
    from engine.typed import parse_dataclass

    return parse_dataclass(cls, raw, where)


def non_default(name: str, raw: dict[str, Any]) -> dict[str, Any]:
    """``raw`` without the options equal to their defaults (what a run id hashes and a row label shows), in the
    options' declared order; unknown keys are kept for the spec's check to name."""
    fields = {f.name: f.default for f in dataclasses.fields(SOLVERS[name].options)}
    known = {k: raw[k] for k in fields if k in raw and raw[k] != fields[k]}
    return {**known, **{k: v for k, v in raw.items() if k not in fields}}


def check_package(name: str, where: str = "solver") -> None:
    """Refuse, in one line, a solver whose package is not installed."""
    package = SOLVERS[name].package
    if not package:
        return
    import importlib.util

    if importlib.util.find_spec(package) is None:
        raise GaptuiError(f"{where}: solver {name} needs the package {package}: pip install 'gaptui[{EXTRA}]'")


# ------------------------------------------------------------------------------------------------ one pair


def adjacency(n: int, edge_index: np.ndarray) -> np.ndarray:
    """Dense symmetric 0/1 float64 ``[n, n]`` adjacency from ``[2, E]`` local ids (one direction suffices)."""
    a = np.zeros((n, n))
    ei = np.asarray(edge_index, np.int64).reshape(2, -1)
    a[ei[0], ei[1]] = 1.0
    a[ei[1], ei[0]] = 1.0
    np.fill_diagonal(a, 0.0)
    return a


def centred(a: np.ndarray) -> np.ndarray:
    """``(A - p (J - I)) / sqrt(n p (1 - p))`` with ``p`` the graph's edge density (``A`` itself for an empty or
    complete graph, whose density leaves nothing to centre)."""
    n = a.shape[0]
    p = a.sum() / max(n * (n - 1), 1)
    if not 0 < p < 1:
        return a
    out = (a - p) / np.sqrt(n * p * (1 - p))
    np.fill_diagonal(out, 0.0)
    return out


def grampa_similarity(a: np.ndarray, b: np.ndarray, options: GrampaOptions = GrampaOptions()) -> np.ndarray:
    """GRAMPA's similarity ``X [n, n]`` of two adjacency matrices (module docstring)."""
    if options.centre:
        a, b = centred(a), centred(b)
    lam, u = np.linalg.eigh(a)
    mu, v = np.linalg.eigh(b)
    weights = 1.0 / ((lam[:, None] - mu[None, :]) ** 2 + options.eta**2)
    return u @ (weights * np.outer(u.sum(axis=0), v.sum(axis=0))) @ v.T


def umeyama_similarity(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Umeyama's similarity ``|U| |V|^T`` (eigenvectors of both graphs in ascending eigenvalue order)."""
    _, u = np.linalg.eigh(a)
    _, v = np.linalg.eigh(b)
    return np.abs(u) @ np.abs(v).T


def permutation_matrix(assignment: np.ndarray) -> np.ndarray:
    """The ``[n, n]`` 0/1 matrix ``P[i, assignment[i]] = 1``."""
    n = assignment.shape[0]
    p = np.zeros((n, n))
    p[np.arange(n), assignment] = 1.0
    return p


def faq(
    a: np.ndarray, b: np.ndarray, options: FaqOptions = FaqOptions(), start: np.ndarray | None = None
) -> np.ndarray:
    """FAQ's alignment ``[n]`` of ``a`` to ``b`` from ``start`` (an assignment), else from ``options.init``."""
    from scipy.optimize import quadratic_assignment

    from engine.evaluation import lap_assignment

    n = a.shape[0]
    if n < 2:
        return np.zeros(n, np.int64)
    if start is not None:
        p0: Any = permutation_matrix(start)
    elif options.init == "barycenter":
        p0 = "barycenter"
    else:
        sim = grampa_similarity(a, b) if options.init == "grampa" else umeyama_similarity(a, b)
        p0 = permutation_matrix(lap_assignment(sim))
    ask = {"maximize": True, "P0": p0, "maxiter": options.maxiter, "tol": options.tol, "shuffle_input": False}
    return np.asarray(quadratic_assignment(a, b, method="faq", options=ask).col_ind, np.int64)


def rrwm_similarity(a: np.ndarray, b: np.ndarray, options: RrwmOptions = RrwmOptions()) -> np.ndarray:
    """RRWM's soft matching ``[n, n]`` (pygmtools, numpy backend) on ``K = B (x) A``."""
    import pygmtools

    n = a.shape[0]
    k = np.kron(b.astype(np.float32), a.astype(np.float32))
    soft = pygmtools.rrwm(
        k, n, n, max_iter=options.maxiter, sk_iter=options.sk_iter, alpha=options.alpha, beta=options.beta,
        backend="numpy",
    )  # fmt: skip
    return np.asarray(soft, np.float64)


def rrwm_bytes(nodes: float) -> int:
    """Bytes RRWM holds for one pair of ``nodes`` nodes: the float32 affinity and pygmtools' copy of it."""
    return int(2 * 4 * float(nodes) ** 4)


@dataclass(frozen=True)
class PairSolution:
    """What solving one pair gives: the alignment ``[n]`` of a solver that returns a permutation (``faq``), or the
    similarity ``[n, n]`` the LAP rounds (the others: the evaluator solves that LAP, as for a trained model), and
    the seconds the solver took."""

    assignment: np.ndarray | None
    similarity: np.ndarray | None
    seconds: float


def solve_pair(
    name: str, options: Any, n: int, ei_g: np.ndarray, ei_h: np.ndarray, start: np.ndarray | None = None
) -> PairSolution:
    """Solve one pair with solver ``name`` (``start``: an initial alignment, for ``faq`` only)."""
    t0 = time.perf_counter()
    a, b = adjacency(n, ei_g), adjacency(n, ei_h)
    if name == "faq":
        return PairSolution(faq(a, b, options, start), None, time.perf_counter() - t0)
    if name == "grampa":
        sim = grampa_similarity(a, b, options)
    elif name == "umeyama":
        sim = umeyama_similarity(a, b)
    else:
        sim = rrwm_similarity(a, b, options)
    return PairSolution(None, sim, time.perf_counter() - t0)


Job = tuple[str, Any, int, np.ndarray, np.ndarray, "np.ndarray | None"]


def _solve_job(job: Job) -> PairSolution:
    return solve_pair(*job)


def _solve_in_process(job: Job) -> PairSolution:
    """A task of a spawned pool process: BLAS limited to one thread there for good (the pool's pairs run side by
    side, one per process)."""
    global _BLAS_LIMITED
    if not _BLAS_LIMITED:
        try:
            from threadpoolctl import threadpool_limits

            threadpool_limits(limits=1, user_api="blas")
        except ImportError:  # optional: only speed depends on it
            pass
        _BLAS_LIMITED = True
    return solve_pair(*job)


_BLAS_LIMITED = False


# ------------------------------------------------------------------------------------------------ a split


def usable_cpus() -> int:
    return max(1, len(os.sched_getaffinity(0)))


def solve_split(
    split: PairSplit,
    name: str,
    options: Any,
    *,
    workers: int | None = None,
    pool: str = "thread",
    starts: np.ndarray | None = None,
) -> Iterator[tuple[int, PairSolution]]:
    """Solve every pair of ``split``; yields ``(pair, solution)`` in pair order. ``workers``: pool size (default:
    the usable CPUs, fewer for ``rrwm`` where its affinity matrices would not fit in memory); ``pool``: ``thread``,
    ``process`` (spawned) or ``serial``; ``starts``: ``[sum n]`` initial alignments (``faq`` from a model)."""
    if pool not in POOLS:
        raise GaptuiError(f"unknown solver pool '{pool}'; known: {', '.join(POOLS)}{did_you_mean(pool, POOLS)}")
    workers = workers or usable_cpus()
    if name == "rrwm":
        workers = _rrwm_workers(split, workers)
    ptr = split.node_ptr

    def jobs() -> Iterable[Job]:
        for p in range(len(split)):
            n, ei_g, ei_h, _ = split.pair(p)
            start = None if starts is None else starts[ptr[p] : ptr[p + 1]]
            yield name, options, n, ei_g, ei_h, start

    if pool == "serial" or workers == 1 or len(split) <= 1:
        with single_threaded_blas():
            yield from enumerate(map(_solve_job, jobs()))
        return
    executor: Executor
    task = _solve_job
    if pool == "process":
        from engine.pools import process_pool

        executor, task = process_pool(workers), _solve_in_process
    else:
        executor = ThreadPoolExecutor(workers, thread_name_prefix=f"solver-{name}")
    with executor, single_threaded_blas():
        # A bounded window of pairs in flight: results come back in order, memory stays that of a few pairs.
        window = 4 * workers
        pending: list[Any] = []
        it = iter(jobs())
        done = 0
        for job in it:
            pending.append(executor.submit(task, job))
            if len(pending) >= window:
                yield done, pending.pop(0).result()
                done += 1
        for fut in pending:
            yield done, fut.result()
            done += 1


def _rrwm_workers(split: PairSplit, workers: int) -> int:
    """As many RRWM pairs at once as half of this machine's memory holds (at least one)."""
    from engine.memory import machine_memory

    total = machine_memory()
    largest = int(split.num_nodes.max()) if len(split) else 0
    if total is None or largest == 0:
        return workers
    return max(1, min(workers, int(total // 2 // max(rrwm_bytes(largest), 1))))


def score_split(
    split: PairSplit,
    name: str,
    options: Any,
    *,
    ks: Iterable[int],
    workers: int | None = None,
    pool: str = "thread",
    starts: np.ndarray | None = None,
) -> tuple[AlignmentScores, np.ndarray]:
    """Scores of solver ``name`` on every pair of ``split`` (node-weighted, as a trained model's; argmax and top-k
    only for a similarity solver) and the seconds each pair took ``[P]``. A similarity solver's matrices go to a
    :class:`~engine.evaluation.LapEvaluator` in batches while the next pairs are solved."""
    from engine.evaluation import LapEvaluator, pad_batch

    seconds = np.zeros(len(split))
    solutions = solve_split(split, name, options, workers=workers, pool=pool, starts=starts)
    ptr = split.node_ptr
    if not SOLVERS[name].similarity:
        assignment = np.zeros(int(ptr[-1]), np.int64)
        for p, solution in solutions:
            assignment[ptr[p] : ptr[p + 1]] = solution.assignment
            seconds[p] = solution.seconds
        return assignment_scores(split, assignment), seconds
    with LapEvaluator("thread", workers=workers, ks=ks) as evaluator:
        sims: list[np.ndarray] = []
        perms: list[np.ndarray] = []
        for p, solution in solutions:
            seconds[p] = solution.seconds
            sims.append(solution.similarity)  # type: ignore[arg-type]
            perms.append(split.perm[ptr[p] : ptr[p + 1]])
            if len(sims) == _BATCH or p == len(split) - 1:
                evaluator.submit(*pad_batch(sims, perms))
                sims, perms = [], []
        return evaluator.result(), seconds


def assignment_scores(split: PairSplit, assignment: np.ndarray) -> AlignmentScores:
    """Scores of a permutation per pair (``[sum n]``, local ids): LAP counts and matches only (a permutation has no
    argmax or top-k of its own)."""
    from engine.evaluation import AlignmentScores

    pair_of = np.repeat(np.arange(len(split)), split.num_nodes)
    right = np.bincount(pair_of[assignment == split.perm], minlength=len(split)).astype(np.int64)
    return AlignmentScores(
        num_pairs=len(split),
        num_nodes=int(split.num_nodes.sum()),
        lap_correct=int(right.sum()),
        pair_nodes=np.asarray(split.num_nodes, np.int64),
        pair_lap_correct=right,
        assignment=np.asarray(assignment, np.int64),
    )
