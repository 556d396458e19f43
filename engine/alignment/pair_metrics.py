"""How good an alignment is beyond node accuracy, per pair and over a split: solved pairs, kept edges, symmetry.

For a pair ``(G, H)`` with planted alignment ``perm`` (node ``i`` of ``G`` is node ``perm[i]`` of ``H``) and a
predicted one ``pi_hat`` (the LAP's matching, or a solver's permutation):

- ``lap_acc``: ``#{i : pi_hat[i] == perm[i]} / n``; a pair is **solved** when it is at least :data:`SOLVED_AT`.
- ``edge_overlap``: edges of ``G`` kept by ``pi_hat`` (``(pi_hat[u], pi_hat[v])`` an edge of ``H``) divided by the
  edges of ``G`` the planted alignment keeps. It is the objective of the alignment problem relative to the
  truth's: 1.0 is as good as the truth, and it may exceed 1 (at high noise another alignment can keep more edges
  than the planted one). NaN for a pair whose planted alignment keeps no edge.
- ``orbit_acc``: nodes mapped to the image of a node of their own automorphism orbit of ``G``
  (:mod:`engine.alignment.symmetry`): right up to a symmetry no method can break.

Over a split: ``solved`` is the share of pairs solved; ``edge_overlap`` the kept edges of all pairs over the
planted alignment's kept edges of all pairs (edge-weighted, as accuracies are node-weighted); ``orbit_acc`` is
node-weighted. Every count is vectorised over the whole split (one sort of ``H``'s edge keys).
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.pairs import PairSplit

#: A pair counts as solved from this LAP accuracy on.
SOLVED_AT = 0.9
#: Columns of the per-pair file ``val_pairs.csv`` of a run folder, in order.
COLUMNS = ("pair", "nodes", "lap_acc", "orbit_acc", "edges", "kept_edges", "planted_kept_edges", "edge_overlap")


@dataclass(frozen=True)
class PairMetrics:
    """Per-pair counts of one split (each ``[P]`` int64, pairs in split order) and, for solvers, the seconds each
    pair took (``[P]`` float, or None)."""

    nodes: np.ndarray
    lap_correct: np.ndarray
    orbit_correct: np.ndarray | None
    edges: np.ndarray
    kept: np.ndarray
    planted_kept: np.ndarray
    seconds: np.ndarray | None = None

    @property
    def lap_acc(self) -> np.ndarray:
        return self.lap_correct / np.maximum(self.nodes, 1)

    @property
    def edge_overlap(self) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(self.planted_kept > 0, self.kept / np.maximum(self.planted_kept, 1), np.nan)

    def summary(self, prefix: str = "val") -> dict[str, float]:
        """``{prefix}_solved``, ``{prefix}_edge_overlap``, ``{prefix}_orbit_acc`` (when orbits were given) and
        ``seconds_per_pair`` (for solvers) over the split; nothing for an empty split."""
        if not self.nodes.size:
            return {}
        out = {f"{prefix}_solved": float((self.lap_acc >= SOLVED_AT - 1e-12).mean())}
        if self.planted_kept.sum() > 0:
            out[f"{prefix}_edge_overlap"] = float(self.kept.sum() / self.planted_kept.sum())
        if self.orbit_correct is not None:
            out[f"{prefix}_orbit_acc"] = float(self.orbit_correct.sum() / max(int(self.nodes.sum()), 1))
        if self.seconds is not None:
            out["seconds_per_pair"] = float(self.seconds.mean())
        return out

    def csv_text(self) -> str:
        """The per-pair table (:data:`COLUMNS`, plus ``seconds`` for solvers) as CSV text."""
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(COLUMNS + (("seconds",) if self.seconds is not None else ()))
        orbit = self.orbit_correct / np.maximum(self.nodes, 1) if self.orbit_correct is not None else None
        for p in range(self.nodes.size):
            row: list[Any] = [p, int(self.nodes[p]), _num(self.lap_acc[p])]
            row += [_num(orbit[p]) if orbit is not None else "", int(self.edges[p]), int(self.kept[p])]
            row += [int(self.planted_kept[p]), _num(self.edge_overlap[p])]
            if self.seconds is not None:
                row.append(f"{self.seconds[p]:.4f}")
            writer.writerow(row)
        return out.getvalue()


def _num(x: float) -> str:
    return "" if not np.isfinite(x) else f"{x:.4f}"


def kept_edges(split: PairSplit, assignment: np.ndarray) -> np.ndarray:
    """Per pair, the undirected edges of ``G`` whose image under ``assignment`` (``[sum n]``, local ids) is an
    edge of ``H``, ``[P]`` int64."""
    ptr = split.node_ptr
    total = max(int(ptr[-1]), 1)
    pair_g = np.repeat(np.arange(len(split)), np.diff(split.edge_ptr_g))
    pair_h = np.repeat(np.arange(len(split)), np.diff(split.edge_ptr_h))
    h_keys = (split.edge_index_h[0] + ptr[pair_h]) * total + (split.edge_index_h[1] + ptr[pair_h])
    u, v = split.edge_index_g[0] + ptr[pair_g], split.edge_index_g[1] + ptr[pair_g]
    mapped = np.asarray(assignment, np.int64) + np.repeat(ptr[:-1], split.num_nodes)
    hit = np.isin(mapped[u] * total + mapped[v], h_keys)
    # Both directions of each edge are listed: each undirected edge counts twice.
    return np.bincount(pair_g[hit], minlength=len(split)).astype(np.int64) // 2


def pair_metrics(
    split: PairSplit, assignment: np.ndarray, orbits: np.ndarray | None = None, seconds: np.ndarray | None = None
) -> PairMetrics:
    """The per-pair metrics of a predicted ``assignment`` (``[sum n]``, node ``i`` of pair ``p``'s ``G`` matched to
    node ``assignment[node_ptr[p] + i]`` of its ``H``) on ``split``; ``orbits`` (``[sum n]``, ids comparable within a
    graph: :class:`engine.alignment.symmetry.SplitSymmetry`) gives ``orbit_acc``."""
    assignment = np.asarray(assignment, np.int64)
    ptr = split.node_ptr
    if assignment.shape != split.perm.shape:
        raise ValueError(f"assignment has {assignment.shape[0]} entries for {split.perm.shape[0]} nodes")
    pair_of = np.repeat(np.arange(len(split)), split.num_nodes)
    right = assignment == split.perm
    lap_correct = np.bincount(pair_of[right], minlength=len(split)).astype(np.int64)
    orbit_correct = None
    if orbits is not None:
        # The G node whose planted image is pi_hat(i): pi^-1(pi_hat(i)), by inverting perm within each pair.
        inverse = np.empty_like(split.perm)
        inverse[split.perm + ptr[pair_of]] = np.arange(split.perm.size) - ptr[pair_of]
        source = inverse[assignment + ptr[pair_of]] + ptr[pair_of]
        same = np.asarray(orbits)[source] == np.asarray(orbits)
        orbit_correct = np.bincount(pair_of[same], minlength=len(split)).astype(np.int64)
    edges = np.diff(split.edge_ptr_g).astype(np.int64) // 2
    return PairMetrics(
        nodes=np.asarray(split.num_nodes, np.int64),
        lap_correct=lap_correct,
        orbit_correct=orbit_correct,
        edges=edges,
        kept=kept_edges(split, assignment),
        planted_kept=kept_edges(split, split.perm),
        seconds=None if seconds is None else np.asarray(seconds, np.float64),
    )
