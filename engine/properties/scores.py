"""The study's three dimensions and its scores (the property benchmark, section 3).

========================  =====================  =====================
dimension                 trained on             tested on
========================  =====================  =====================
``generalisation``        GraphRandom, base n    GraphRandom, larger n
``sensitivity``           GraphPerturb, base n   GraphPerturb, larger n
``robustness``            GraphRandom, base n    GraphPerturb, larger n
========================  =====================  =====================

``U_score = sum_j acc_j * n_j / sum_j n_j`` over the test sizes ``n_j`` (larger graphs weigh more), for one
(pooling, property, dimension). ``R_score = U / mean of U over the poolings compared`` for that property and
dimension: above 1 is better than the average method. Table 2 of the study averages R over the properties.
One training on GraphRandom serves both generalisation and robustness.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

import numpy as np

#: The poolings compared by the study, in its order (then the hybrids of its section 4.3), with their table labels
#: (registered in :mod:`engine.properties.poolings`; listed here so that reading them imports no torch).
POOLING_LABELS: dict[str, str] = {
    "mean": "Mean",
    "sum": "Sum",
    "deepsets": "DeepSets",
    "set2set": "Set2Set",
    "attention": "Soft attention",
    "set_transformer": "Set Transformer",
    "gmt": "GMT",
    "sopool_bimap": "SoPool-BiMap",
    "sopool_attentional": "SoPool-Attentional",
    "hybrid": "Hybrid",
    "hybrid_learned": "Hybrid (learned a)",
}

#: dimension -> (training family, test family)
DIMENSIONS: dict[str, tuple[str, str]] = {
    "generalisation": ("random", "random"),
    "sensitivity": ("perturb", "perturb"),
    "robustness": ("random", "perturb"),
}


def dimensions_of(train_family: str) -> list[str]:
    """The dimensions one training run on ``train_family`` measures."""
    return [d for d, (train, _) in DIMENSIONS.items() if train == train_family]


def u_score(accuracy_by_size: Mapping[int, float]) -> float:
    """Size-weighted mean accuracy: ``sum_j acc_j n_j / sum_j n_j``."""
    if not accuracy_by_size:
        raise ValueError("U_score needs at least one test size")
    sizes = np.array(list(accuracy_by_size), dtype=np.float64)
    acc = np.array(list(accuracy_by_size.values()), dtype=np.float64)
    return float((acc * sizes).sum() / sizes.sum())


def mean_u(records: Iterable[tuple[str, str, str, float]]) -> dict[tuple[str, str, str], float]:
    """``(pooling, property, dimension, U)`` of single runs (seeds) -> mean U per ``(pooling, property, dimension)``."""
    groups: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for pooling, prop, dim, u in records:
        groups[(pooling, prop, dim)].append(u)
    return {key: float(np.mean(values)) for key, values in groups.items()}


def r_scores(u: Mapping[tuple[str, str, str], float]) -> dict[tuple[str, str, str], float]:
    """``R = U / mean over poolings of U`` for each (property, dimension)."""
    by_cell: dict[tuple[str, str], list[float]] = defaultdict(list)
    for (_, prop, dim), value in u.items():
        by_cell[(prop, dim)].append(value)
    means = {cell: float(np.mean(values)) for cell, values in by_cell.items()}
    return {(pool, prop, dim): value / means[(prop, dim)] for (pool, prop, dim), value in u.items()}


def table2(r: Mapping[tuple[str, str, str], float]) -> dict[tuple[str, str], float]:
    """Mean R score over properties per ``(pooling, dimension)``."""
    groups: dict[tuple[str, str], list[float]] = defaultdict(list)
    for (pool, _, dim), value in r.items():
        groups[(pool, dim)].append(value)
    return {key: float(np.mean(values)) for key, values in groups.items()}
