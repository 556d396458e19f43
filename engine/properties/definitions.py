"""The 16 relation properties of the property suite, as in Alloy's ``util/relation``, with a plain checker each.

A graph is a relation ``r`` on ``n`` nodes given by its adjacency matrix ``A`` (``n x n``, row-major,
``A[i, j] = 1`` means ``i -> j``; the diagonal holds self-loops). Every checker takes a boolean array of shape
``[n, n]`` or ``[B, n, n]`` and returns a boolean (or ``[B]`` booleans). The checkers are deliberately direct
transcriptions of the definitions (no solver, no shared code with :mod:`engine.properties.sat`), so that they can
re-check every generated graph independently.

============== =======================================================================================
property       definition (for all nodes i, j, k)
============== =======================================================================================
reflexive      A[i, i] = 1
irreflexive    A[i, i] = 0
symmetric      A[i, j] = A[j, i]
antisymmetric  i != j  =>  not (A[i, j] and A[j, i])          (self-loops allowed: ``r & ~r in iden``)
transitive     A[i, j] and A[j, k]  =>  A[i, k]
connex         A[i, j] or A[j, i]  (i = j included, so connex implies reflexive)
functional     every node has at most one successor          (row sums <= 1; Alloy ``lone x.r``)
function       every node has exactly one successor          (row sums = 1; ``one x.r``)
injective      every node has at most one predecessor        (column sums <= 1; ``lone r.x``)
surjective     every node has at least one predecessor       (column sums >= 1; ``some r.x``)
bijective      every node has exactly one predecessor        (column sums = 1; ``one r.x``)
equivalence    reflexive, symmetric, transitive
preorder       reflexive, transitive
partial_order  reflexive, antisymmetric, transitive
total_order    partial order and connex
strict_order   irreflexive, transitive
============== =======================================================================================

Alloy's ``bijective[r, s]`` constrains predecessors only (``all x: s | one r.x``); a bijection in the
function sense is ``function`` and ``bijective`` together, which is not one of the 16.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from engine.errors import unknown

Checker = Callable[[np.ndarray], "np.ndarray | np.bool_"]


def _diag(a: np.ndarray) -> np.ndarray:
    return np.diagonal(a, axis1=-2, axis2=-1)


def _off_diagonal(n: int) -> np.ndarray:
    return ~np.eye(n, dtype=bool)


def _all(mask: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    return np.all(mask, axis=axes)


def is_reflexive(a: np.ndarray) -> np.ndarray:
    return np.all(_diag(a), axis=-1)


def is_irreflexive(a: np.ndarray) -> np.ndarray:
    return ~np.any(_diag(a), axis=-1)


def is_symmetric(a: np.ndarray) -> np.ndarray:
    return _all(a == np.swapaxes(a, -1, -2), (-2, -1))


def is_antisymmetric(a: np.ndarray) -> np.ndarray:
    both = a & np.swapaxes(a, -1, -2) & _off_diagonal(a.shape[-1])
    return ~np.any(both, axis=(-2, -1))


def is_transitive(a: np.ndarray) -> np.ndarray:
    # (A @ A)[i, k] > 0 iff some j has i -> j -> k; each such pair must be an edge.
    af = a.astype(np.float32)
    two_step = (af @ af) > 0
    return ~np.any(two_step & ~a, axis=(-2, -1))


def is_connex(a: np.ndarray) -> np.ndarray:
    return _all(a | np.swapaxes(a, -1, -2), (-2, -1))


def _row_sums(a: np.ndarray) -> np.ndarray:
    return a.sum(axis=-1)


def _column_sums(a: np.ndarray) -> np.ndarray:
    return a.sum(axis=-2)


def is_functional(a: np.ndarray) -> np.ndarray:
    return np.all(_row_sums(a) <= 1, axis=-1)


def is_function(a: np.ndarray) -> np.ndarray:
    return np.all(_row_sums(a) == 1, axis=-1)


def is_injective(a: np.ndarray) -> np.ndarray:
    return np.all(_column_sums(a) <= 1, axis=-1)


def is_surjective(a: np.ndarray) -> np.ndarray:
    return np.all(_column_sums(a) >= 1, axis=-1)


def is_bijective(a: np.ndarray) -> np.ndarray:
    return np.all(_column_sums(a) == 1, axis=-1)


def is_preorder(a: np.ndarray) -> np.ndarray:
    return is_reflexive(a) & is_transitive(a)


def is_equivalence(a: np.ndarray) -> np.ndarray:
    return is_preorder(a) & is_symmetric(a)


def is_partial_order(a: np.ndarray) -> np.ndarray:
    return is_preorder(a) & is_antisymmetric(a)


def is_total_order(a: np.ndarray) -> np.ndarray:
    return is_partial_order(a) & is_connex(a)


def is_strict_order(a: np.ndarray) -> np.ndarray:
    return is_irreflexive(a) & is_transitive(a)


# Labelled relations on n nodes with the property (OEIS where no closed form): they decide the base sizes.
_TRANSITIVE = (1, 2, 13, 171, 3994, 154303, 9415189, 878222530)  # A006905
_PREORDERS = (1, 1, 4, 29, 355, 6942, 209527, 9535241)  # A000798
_POSETS = (1, 1, 3, 19, 219, 4231, 130023, 6129859)  # A001035
_BELL = (1, 1, 2, 5, 15, 52, 203, 877, 4140, 21147, 115975, 678570)  # A000110


def _from_table(table: tuple[int, ...]) -> Callable[[int], int]:
    # Past the table every count is far above any threshold we use (the sequences grow super-exponentially).
    return lambda n: table[n] if n < len(table) else 10**18


@dataclass(frozen=True)
class Property:
    """One relation property: its name (CLI and file name), a one-line definition and its checker."""

    name: str
    definition: str
    check: Checker
    count: Callable[[int], int]

    def __call__(self, a: np.ndarray) -> np.ndarray:
        return self.check(np.asarray(a, dtype=bool))


PROPERTIES: dict[str, Property] = {
    p.name: p
    for p in (
        Property("reflexive", "every node has a self-loop", is_reflexive, lambda n: 2 ** (n * (n - 1))),
        Property("irreflexive", "no node has a self-loop", is_irreflexive, lambda n: 2 ** (n * (n - 1))),
        Property("symmetric", "i -> j implies j -> i", is_symmetric, lambda n: 2 ** (n * (n + 1) // 2)),
        Property(
            "antisymmetric",
            "i -> j and j -> i only when i = j",
            is_antisymmetric,
            lambda n: 2**n * 3 ** (n * (n - 1) // 2),
        ),
        Property("transitive", "i -> j -> k implies i -> k", is_transitive, _from_table(_TRANSITIVE)),
        Property("connex", "i -> j or j -> i for every i, j (i = j too)", is_connex, lambda n: 3 ** (n * (n - 1) // 2)),
        Property("functional", "every node has at most one successor", is_functional, lambda n: (n + 1) ** n),
        Property("function", "every node has exactly one successor", is_function, lambda n: n**n),
        Property("injective", "every node has at most one predecessor", is_injective, lambda n: (n + 1) ** n),
        Property("surjective", "every node has at least one predecessor", is_surjective, lambda n: (2**n - 1) ** n),
        Property("bijective", "every node has exactly one predecessor", is_bijective, lambda n: n**n),
        Property("equivalence", "reflexive, symmetric and transitive", is_equivalence, _from_table(_BELL)),
        Property("preorder", "reflexive and transitive", is_preorder, _from_table(_PREORDERS)),
        Property("partial_order", "reflexive, antisymmetric and transitive", is_partial_order, _from_table(_POSETS)),
        Property("total_order", "a partial order that is connex", is_total_order, math.factorial),
        Property("strict_order", "irreflexive and transitive", is_strict_order, _from_table(_POSETS)),
    )
}
PROPERTY_NAMES: tuple[str, ...] = tuple(PROPERTIES)

#: The seed's three classes of properties (its Table 1), for the pooling advice of its section 4.3.
PROPERTY_CLASSES: dict[str, tuple[str, ...]] = {
    "basic": ("reflexive", "irreflexive", "symmetric", "antisymmetric", "transitive", "connex"),
    "function": ("functional", "function", "injective", "surjective", "bijective"),
    "combined": ("equivalence", "preorder", "partial_order", "total_order", "strict_order"),
}
CLASS_OF: dict[str, str] = {name: cls for cls, names in PROPERTY_CLASSES.items() for name in names}
#: The seed's pooling advice per class (section 4.3): the poolings it recommends (none: "case by case").
SEED_ADVICE: dict[str, tuple[str, ...]] = {
    "basic": (),
    "function": ("set2set",),
    "combined": ("gmt", "set_transformer"),
}


def advice_line(best: dict[str, str], compared: set[str]) -> str:
    """Our best pooling per class (``best``: class -> pooling, among ``compared``) beside the seed's advice, saying
    where they agree (``not compared`` where none of the poolings it advises ran)."""
    parts = []
    for cls, ours in best.items():
        seed = SEED_ADVICE[cls]
        said = " or ".join(seed) if seed else "case by case"
        if not seed:
            verdict = "no advice to agree with"
        elif not set(seed) & compared:
            verdict = "not compared: none of its poolings ran"
        else:
            verdict = "agrees" if ours in seed else "differs"
        parts.append(f"{cls}: ours {ours}, seed {said} ({verdict})")
    return "; ".join(parts)


#: Positives per dataset of the published suite, and how many labelled positives a size must have per positive
#: drawn: four times as many, so that rejecting duplicates stays cheap with a solver that does not sample uniformly.
POSITIVES_PER_DATASET = 5_000
BASE_MARGIN = 4
#: Sizes per property: base .. base + SIZE_SPAN (train at the base, test at every larger size).
SIZE_SPAN = 10
MAX_NODES = 30


def get_property(name: str) -> Property:
    """The property called ``name`` (GaptuiError with a did-you-mean otherwise)."""
    if name not in PROPERTIES:
        raise unknown("property", name, PROPERTIES)
    return PROPERTIES[name]


def base_size(name: str, positives: int = POSITIVES_PER_DATASET, margin: int = BASE_MARGIN) -> int:
    """Smallest ``n`` with at least ``margin * positives`` labelled relations that satisfy property ``name``."""
    prop = get_property(name)
    n = 1
    while prop.count(n) < margin * positives:
        n += 1
    return n


#: The base size of each property for the published suite (documented in the README).
BASE_SIZES: dict[str, int] = {name: base_size(name) for name in PROPERTY_NAMES}


def suite_sizes(name: str) -> list[int]:
    """The sizes of property ``name`` in the suite: ``base .. base + SIZE_SPAN``, capped at :data:`MAX_NODES`."""
    base = BASE_SIZES[get_property(name).name]
    return list(range(base, min(base + SIZE_SPAN, MAX_NODES) + 1))
