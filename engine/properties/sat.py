"""Relations that satisfy (or violate) a property, drawn from a SAT solver (python-sat).

Encoding: one Boolean per cell, ``x(i, j) = i * n + j + 1`` (DIMACS numbering, row-major like the adjacency).
Each property is a conjunction of primitive requirements:

================  =============================================================================
requirement       clauses
================  =============================================================================
reflexive         ``x(i, i)`` for every i
irreflexive       ``-x(i, i)``
symmetric         ``-x(i, j) | x(j, i)`` for i != j
antisymmetric     ``-x(i, j) | -x(j, i)`` for i < j
transitive        ``-x(i, j) | -x(j, k) | x(i, k)`` for all i, j, k
connex            ``x(i, j) | x(j, i)`` for i <= j
lone / one out    at most / exactly one true cell per row (sequential-counter cardinality encoding)
lone / one in     the same per column
some in           ``x(0, j) | ... | x(n-1, j)`` per column
================  =============================================================================

Diversity: before each solve every variable, the counter's auxiliaries included, gets a random preferred phase,
true with probability ``d`` where the target density ``d`` is drawn anew for each graph. With phases on the cell
variables only, the auxiliaries of the cardinality encodings steer the solver to the same model again and again
(``function`` and ``bijective`` then return one graph every time). Samples are diverse, not uniform over the
satisfying relations: some relations are much likelier than others, and some properties have few positives up to
isomorphism (a total order on n nodes is unique up to relabelling, there are n! labelled ones).

Negatives (``negate=True``) solve the negation: the requirements are written without auxiliaries (pairwise
at-most-one), a selector ``s_c`` per clause ``c`` implies that ``c`` is false, and one clause asks that some
selector holds. The cell phases are drawn the same way; each selector's phase says whether the cell phases break
its clause, so an assignment that already violates the property is returned as it is and one that satisfies it is
repaired by the solver into a near miss.
"""

from __future__ import annotations

from itertools import combinations

import numpy as np
from pysat.card import CardEnc, EncType
from pysat.formula import CNF, IDPool
from pysat.solvers import Solver

from engine.errors import GaptuiError
from engine.properties.definitions import get_property

#: The primitive requirements of each property (see the module docstring).
REQUIREMENTS: dict[str, tuple[str, ...]] = {
    "reflexive": ("reflexive",),
    "irreflexive": ("irreflexive",),
    "symmetric": ("symmetric",),
    "antisymmetric": ("antisymmetric",),
    "transitive": ("transitive",),
    "connex": ("connex",),
    "functional": ("lone_out",),
    "function": ("one_out",),
    "injective": ("lone_in",),
    "surjective": ("some_in",),
    "bijective": ("one_in",),
    "equivalence": ("reflexive", "symmetric", "transitive"),
    "preorder": ("reflexive", "transitive"),
    "partial_order": ("reflexive", "antisymmetric", "transitive"),
    "total_order": ("reflexive", "antisymmetric", "transitive", "connex"),
    "strict_order": ("irreflexive", "transitive"),
}

#: Target densities are drawn uniformly from this range, one per graph.
DENSITY_RANGE = (0.05, 0.95)
SOLVER = "minisat22"


def cell(n: int, i: int, j: int) -> int:
    """DIMACS variable of cell ``(i, j)`` of an ``n``-node relation."""
    return i * n + j + 1


def _rows(n: int) -> list[list[int]]:
    return [[cell(n, i, j) for j in range(n)] for i in range(n)]


def _columns(n: int) -> list[list[int]]:
    return [[cell(n, i, j) for i in range(n)] for j in range(n)]


def _plain_clauses(req: str, n: int) -> list[list[int]]:
    """Clauses of a requirement over cell variables only (cardinalities pairwise)."""
    x = lambda i, j: cell(n, i, j)  # noqa: E731 - reads like the math
    if req == "reflexive":
        return [[x(i, i)] for i in range(n)]
    if req == "irreflexive":
        return [[-x(i, i)] for i in range(n)]
    if req == "symmetric":
        return [[-x(i, j), x(j, i)] for i in range(n) for j in range(n) if i != j]
    if req == "antisymmetric":
        return [[-x(i, j), -x(j, i)] for i, j in combinations(range(n), 2)]
    if req == "transitive":
        return [[-x(i, j), -x(j, k), x(i, k)] for i in range(n) for j in range(n) for k in range(n)]
    if req == "connex":
        return [[x(i, j), x(j, i)] if i != j else [x(i, i)] for i in range(n) for j in range(i, n)]
    groups = _rows(n) if req.endswith("_out") else _columns(n)
    out: list[list[int]] = []
    for lits in groups:
        if req.startswith(("one", "some")):
            out.append(list(lits))
        if req.startswith(("one", "lone")):
            out.extend([-a, -b] for a, b in combinations(lits, 2))
    return out


def positive_cnf(name: str, n: int) -> CNF:
    """CNF of property ``name`` on ``n`` nodes; lone / one use a sequential-counter encoding with auxiliaries."""
    pool = IDPool(start_from=n * n + 1)
    cnf = CNF()
    for req in REQUIREMENTS[get_property(name).name]:
        if req in ("lone_out", "one_out", "lone_in", "one_in"):
            groups = _rows(n) if req.endswith("_out") else _columns(n)
            encode = CardEnc.atmost if req.startswith("lone") else CardEnc.equals
            for lits in groups:
                enc = encode(lits=lits, bound=1, vpool=pool, encoding=EncType.seqcounter)
                cnf.extend(enc.clauses)
        else:
            cnf.extend(_plain_clauses(req, n))
    cnf.nv = max(cnf.nv, pool.top, n * n)
    return cnf


def negative_cnf(name: str, n: int) -> CNF:
    """CNF of the negation of property ``name``: some requirement clause is false (one selector per clause)."""
    plain = [c for req in REQUIREMENTS[get_property(name).name] for c in _plain_clauses(req, n)]
    cnf = CNF()
    selectors = []
    for k, clause in enumerate(plain):
        s = n * n + 1 + k
        selectors.append(s)
        cnf.extend([-s, -lit] for lit in clause)
    cnf.append(selectors)
    cnf.nv = n * n + len(plain)
    return cnf


class RelationSampler:
    """Draws ``n x n`` relations that satisfy property ``name`` (or violate it with ``negate=True``).

    Use as a context manager (the solver holds native memory) or call :meth:`close`.
    """

    def __init__(self, name: str, n: int, *, negate: bool = False) -> None:
        if n < 1:
            raise GaptuiError(f"n = {n}: a relation needs at least one node")
        self.name = get_property(name).name
        self.n = n
        self.negate = negate
        cnf = negative_cnf(self.name, n) if negate else positive_cnf(self.name, n)
        self.num_vars = cnf.nv
        if negate:
            # [clauses, 3] literals of the requirement clauses (0 pads), in selector order.
            plain = [c for req in REQUIREMENTS[self.name] for c in _plain_clauses(req, n)]
            self._plain = np.zeros((len(plain), max(len(c) for c in plain)), dtype=np.int64)
            for k, clause in enumerate(plain):
                self._plain[k, : len(clause)] = clause
        self._lits = np.arange(1, self.num_vars + 1, dtype=np.int64)
        self._solver = Solver(name=SOLVER, bootstrap_with=cnf.clauses)

    def __enter__(self) -> RelationSampler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._solver.delete()

    def sample(self, rng: np.random.Generator, density: float | None = None) -> np.ndarray:
        """One relation, ``[n, n]`` bool; random phases on every variable around ``density``.

        ``density`` (the share of variables preferred true) defaults to a fresh draw from :data:`DENSITY_RANGE`.
        """
        if density is None:
            density = rng.uniform(*DENSITY_RANGE)
        signs = rng.random(self.num_vars) < density
        if self.negate:
            cells = np.concatenate([[False], signs[: self.n * self.n]])  # index 0 stands for the padding
            lit = self._plain
            true = np.where(lit > 0, cells[np.abs(lit)], ~cells[np.abs(lit)]) & (lit != 0)
            signs[self.n * self.n :] = ~true.any(axis=1)  # selector on exactly where its clause is broken
        self._solver.set_phases(np.where(signs, self._lits, -self._lits).tolist())
        if not self._solver.solve():
            kind = "violate" if self.negate else "satisfy"
            raise GaptuiError(f"no relation on {self.n} nodes can {kind} property '{self.name}'")
        model = np.asarray(self._solver.get_model()[: self.n * self.n])
        return (model > 0).reshape(self.n, self.n)
