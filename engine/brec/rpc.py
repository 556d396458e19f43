"""RPC, BREC's reliable paired comparison: relabelled copies of a pair, Hotelling's T^2 on their embedding
differences, and the reliability check on copies of one graph.

For a pair ``(G, H)`` and ``q`` relabellings (``relabellings``, BREC's 32): the model embeds ``q`` relabelled
copies ``G_1 .. G_q`` and ``H_1 .. H_q`` (the first copy of each is the graph as given, the others distinct random
relabellings with their edge lists shuffled too, as BREC builds them), and ``d_i = f(G_i) - f(H_i)`` in
``R^d`` (``d = out_dim``, BREC's 16). With ``dbar`` their mean and ``S`` their sample covariance (``q - 1``
denominator), the statistic is

- ``reference`` (the default): ``dbar^T S^+ dbar``, what BREC's code computes (``S^+`` the pseudo-inverse,
  float32, torch's default cut-off), compared with 72.34;
- ``hotelling``: Hotelling's one-sample statistic ``q dbar^T S^+ dbar``, compared with the same threshold.

The threshold (``threshold``; default from ``alpha``, BREC's 0.05) is the ``1 - alpha`` quantile of Hotelling's
``T^2(d, q - 1)`` distribution, ``(q - 1) d / (q - d) F_{d, q-d}(1 - alpha)``: 72.34 for q = 32, d = 16, the number
BREC's code hard-codes. Since that code leaves out the factor ``q``, its test at 72.34 is Hotelling's at 32 x 72.34
(p ~ 5.5e-12 rather than 0.05): far stricter than its nominal level, and robust to the rounding noise two
relabellings of one graph make. ``hotelling`` is the textbook test at level ``alpha``. See docs/brec.md.

A pair is **distinguished** when its statistic exceeds the threshold and differs from the reliability statistic
(torch's ``isclose`` with ``atol = 1e-6``, as BREC), and the **reliability check** passes: the same model, on
``q`` pairs of relabelled copies of one graph of the pair (which one drawn at random), gives a statistic below the
threshold. A pair that fails the check is never counted as distinguished; a run with any failure is unreliable.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from engine.errors import GaptuiError
from engine.graphs import Graph

if TYPE_CHECKING:
    import torch

STATISTICS = ("reference", "hotelling")
#: BREC's tolerance between a pair's statistic and its reliability statistic (``torch.isclose(atol=...)``).
EPSILON_CMP = 1e-6
#: Random relabellings drawn for each distinct one kept, at most (graphs with many automorphisms repeat some).
_TRIES = 50


def hotelling_threshold(relabellings: int, dim: int, alpha: float) -> float:
    """The ``1 - alpha`` quantile of Hotelling's ``T^2(dim, relabellings - 1)``: 72.34 for (32, 16, 0.05)."""
    from scipy.stats import f

    q, d = relabellings, dim
    if q <= d:
        raise GaptuiError(
            f"relabellings = {q} with out_dim = {d}: Hotelling's threshold needs more relabellings than dimensions "
            "(or give threshold = T explicitly)"
        )
    return float((q - 1) * d / (q - d) * f.ppf(1.0 - alpha, d, q - d))


def t_squared(x: torch.Tensor, y: torch.Tensor, statistic: str = "reference") -> float:
    """The statistic of the differences ``x - y`` (``[q, d]`` embeddings of the two sides), float32 as BREC."""
    import torch

    diff = (x - y).float()
    mean = diff.mean(0, keepdim=True)
    cov = torch.cov(diff.T)
    value = float((mean @ torch.linalg.pinv(cov) @ mean.T).reshape(()))
    return value * diff.shape[0] if statistic == "hotelling" else value


@dataclass(frozen=True)
class Comparison:
    """The answer of RPC for one pair."""

    t2: float
    reliability_t2: float
    threshold: float

    @property
    def reliable(self) -> bool:
        return self.reliability_t2 < self.threshold

    @property
    def separated(self) -> bool:
        """The pair's statistic says "different" (BREC's ``isomorphic_flag``), whatever the reliability check."""
        close = abs(self.t2 - self.reliability_t2) <= EPSILON_CMP + 1e-5 * abs(self.reliability_t2)
        return self.t2 > self.threshold and not close

    @property
    def distinguished(self) -> bool:
        return self.separated and self.reliable

    def to_dict(self) -> dict[str, Any]:
        return {
            "t2": self.t2,
            "reliability_t2": self.reliability_t2,
            "distinguished": self.distinguished,
            "reliable": self.reliable,
        }


@dataclass(frozen=True)
class Copy:
    """A relabelled copy of a graph: its order and both directions of each edge (``[2, 2m]``, shuffled)."""

    num_nodes: int
    edge_index: np.ndarray


def relabel(graph: Graph, perm: np.ndarray, rng: np.random.Generator) -> Copy:
    """``graph`` with node ``i`` renamed ``perm[i]`` and its edge list in a random order."""
    edges = perm[graph.edges]
    both = np.concatenate([edges, edges[:, ::-1]], axis=0)
    return Copy(graph.num_nodes, np.ascontiguousarray(both[rng.permutation(len(both))].T))


def relabellings(graph: Graph, count: int, rng: np.random.Generator) -> list[Copy]:
    """``count`` copies of ``graph``: the graph as given, then distinct random relabellings (distinct adjacency
    matrices) while the graph has that many; repeats only when it has fewer."""
    n = graph.num_nodes
    copies = [relabel(graph, np.arange(n), rng)]
    seen = {_key(graph.edges, np.arange(n))}
    tries = 0
    while len(copies) < count:
        perm = rng.permutation(n)
        key = _key(graph.edges, perm)
        tries += 1
        if key in seen and tries < _TRIES * count:
            continue
        seen.add(key)
        copies.append(relabel(graph, perm, rng))
    return copies


def _key(edges: np.ndarray, perm: np.ndarray) -> bytes:
    mapped = np.sort(perm[edges], axis=1)
    return np.unique(mapped[:, 0] * (int(perm.size) + 1) + mapped[:, 1]).tobytes()


def pair_rng(data_seed: int, pair_id: int) -> np.random.Generator:
    """The generator of one pair's relabellings: a function of the data seed and the pair, not of the model seed."""
    return np.random.default_rng(np.random.SeedSequence([int(data_seed), int(pair_id), 0xB5EC]))


@dataclass(frozen=True)
class PairCopies:
    """What RPC feeds the model for one pair: ``train`` interleaves ``G_1, H_1, G_2, H_2 ...`` (``2q`` copies, also
    tested), ``reliability`` interleaves ``2q`` copies of one graph of the pair (``which``: 0 for G, 1 for H)."""

    train: list[Copy]
    reliability: list[Copy]
    which: int


def pair_copies(g: Graph, h: Graph, q: int, data_seed: int, pair_id: int) -> PairCopies:
    rng = pair_rng(data_seed, pair_id)
    gs, hs = relabellings(g, q, rng), relabellings(h, q, rng)
    which = int(rng.integers(2))
    same = relabellings((g, h)[which], 2 * q, rng)
    return PairCopies([c for pair in zip(gs, hs, strict=True) for c in pair], same, which)
