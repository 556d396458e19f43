"""Exact Weisfeiler-Lehman tests of BREC's pairs: 1-WL (colour refinement) and 3-WL, computed as 2-FWL.

Both refine the colours of the two graphs of a pair together (one palette, so equal colours mean the same thing in
both) and compare the colour histograms after every round: a pair is **distinguished** as soon as they differ, and
not distinguished once a round refines neither graph's partition (the stable colouring, with equal histograms).

- **1-WL**: a node's new colour is (its colour, the multiset of its neighbours' colours); all nodes start alike.
- **3-WL as 2-FWL** (the folklore 2-WL, as expressive as 3-WL; BREC's own non-GNN code does the same): every
  ordered pair ``(i, j)`` starts with its isomorphism type (``i = j``, edge, non-edge) and its new colour is (its
  colour, the multiset over ``w`` of ``(c(i, w), c(w, j))``).

**Exact and vectorised.** A round builds each node's (pair's) signature as a row of integers (the multiset as a
sorted row), over both graphs at once in numpy: for 2-FWL the ``[2, n, n, n]`` array of ``c(i, w) k + c(w, j)``,
sorted along ``w``. Equal rows must get equal colours and different rows different ones: rows are hashed (a dot
product with random odd 64-bit weights, wrapping), grouped by hash, and every row is then compared with its group's
first row; a collision (never seen) falls back to grouping the rows themselves. No hash decides a colour.

**Cost.** 2-FWL holds about three ``2 n^3`` int64 arrays at its peak (:func:`wl_bytes`: 373 MB for the 198-node CFI
pairs) and took 13 s for the 100 CFI pairs on one core (0.1-4 s a pair); the other categories take under 25 s
together (``benchmarks/bench_brec_wl.py``). **Cache.** Verdicts are kept per (test, category, data digest) in
``<datasets>/brec/``, a fingerprinted JSON file (:mod:`engine.cache`), so a run asks for each pair once.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engine.brec.data import BrecPair
from engine.graphs import Graph

#: The training-free reference rows: their table label and the test they run.
WL_ROWS = ("1-wl", "3-wl")
#: Bump when a test's computation changes: cached verdicts of an older version are not read.
WL_VERSION = 1
#: int64 arrays of ``2 n^3`` entries alive at 2-FWL's peak (the codes, the signatures, the check of the groups).
_FWL_COPIES = 3
_INT = 8


@dataclass(frozen=True)
class Verdict:
    """A test's answer for one pair: distinguished or not, after how many refinement rounds, in how long."""

    id: int
    distinguished: bool
    rounds: int
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return {"distinguished": self.distinguished, "rounds": self.rounds, "seconds": round(self.seconds, 4)}


@functools.lru_cache(maxsize=8)
def _weights(width: int) -> np.ndarray:
    rng = np.random.default_rng(0x5EED_B5EC)
    return rng.integers(0, 2**63, size=width, dtype=np.int64).view(np.uint64) | np.uint64(1)


def group_rows(rows: np.ndarray) -> np.ndarray:
    """Colour ids ``0 .. k-1`` of the rows of the int64 array ``rows [m, w]``: equal rows get equal ids, different
    rows different ids (exact; see the module docstring)."""
    rows = np.ascontiguousarray(rows, dtype=np.int64)
    hashed = rows.view(np.uint64) @ _weights(rows.shape[1])
    _, first, ids = np.unique(hashed, return_index=True, return_inverse=True)
    ids = ids.reshape(-1)
    leaders = first[ids]
    step = max(1, (1 << 24) // max(rows.shape[1], 1))  # compare in chunks: no third full copy of the rows
    for lo in range(0, rows.shape[0], step):
        if not np.array_equal(rows[lo : lo + step], rows[leaders[lo : lo + step]]):
            blob = rows.view(np.dtype((np.void, rows.dtype.itemsize * rows.shape[1]))).reshape(-1)
            return np.unique(blob, return_inverse=True)[1].reshape(-1)
    return ids


def _histograms_differ(colours: np.ndarray, split: int, k: int) -> bool:
    return not np.array_equal(np.bincount(colours[:split], minlength=k), np.bincount(colours[split:], minlength=k))


def wl1(g: Graph, h: Graph) -> tuple[bool, int]:
    """1-WL on the pair: (distinguished, rounds)."""
    if g.num_nodes != h.num_nodes or g.num_edges != h.num_edges:
        return True, 0
    n = g.num_nodes
    total = 2 * n
    src = np.concatenate([g.edges[:, 0], g.edges[:, 1], h.edges[:, 0] + n, h.edges[:, 1] + n])
    dst = np.concatenate([g.edges[:, 1], g.edges[:, 0], h.edges[:, 1] + n, h.edges[:, 0] + n])
    order = np.argsort(src, kind="stable")
    src, dst = src[order], dst[order]
    degree = np.bincount(src, minlength=total)
    width = int(degree.max(initial=0))
    slot = np.arange(src.size) - np.repeat(np.cumsum(degree) - degree, degree)
    neighbours = np.full((total, width), total, dtype=np.int64)  # ``total``: no neighbour (a sentinel colour)
    neighbours[src, slot] = dst
    colours, k, rounds = np.zeros(total, dtype=np.int64), 1, 0
    while True:
        rounds += 1
        extended = np.append(colours, -1)
        seen = np.sort(extended[neighbours], axis=1)
        colours_next = group_rows(np.concatenate([colours[:, None], seen], axis=1))
        k_next = int(colours_next.max()) + 1
        if _histograms_differ(colours_next, n, k_next):
            return True, rounds
        if k_next == k:
            return False, rounds
        colours, k = colours_next, k_next


def _dense(graph: Graph) -> np.ndarray:
    adj = np.zeros((graph.num_nodes, graph.num_nodes), dtype=np.int64)
    adj[graph.edges[:, 0], graph.edges[:, 1]] = 1
    adj[graph.edges[:, 1], graph.edges[:, 0]] = 1
    return adj


def fwl2(g: Graph, h: Graph) -> tuple[bool, int]:
    """2-FWL (as expressive as 3-WL) on the pair: (distinguished, rounds)."""
    if g.num_nodes != h.num_nodes or g.num_edges != h.num_edges:
        return True, 0
    n = g.num_nodes
    colours = np.stack([_dense(g), _dense(h)]) * 2 + np.eye(n, dtype=np.int64)[None]  # 0 non-edge, 1 i = j, 2 edge
    k, rounds = 3, 0
    while True:
        rounds += 1
        codes = colours[:, :, None, :] * k + colours.transpose(0, 2, 1)[:, None, :, :]  # [g, i, j, w]
        codes.sort(axis=-1)
        rows = np.concatenate([colours[..., None], codes], axis=-1).reshape(2 * n * n, n + 1)
        del codes
        flat = group_rows(rows)
        del rows
        k_next = int(flat.max()) + 1
        if _histograms_differ(flat, n * n, k_next):
            return True, rounds
        if k_next == k:
            return False, rounds
        colours, k = flat.reshape(2, n, n), k_next


TESTS: dict[str, Callable[[Graph, Graph], tuple[bool, int]]] = {"1-wl": wl1, "3-wl": fwl2}


def wl_bytes(row: str, nodes: int) -> int:
    """Peak bytes of test ``row`` on a pair of ``nodes``-node graphs."""
    if row == "3-wl":
        return _FWL_COPIES * 2 * nodes**3 * _INT + 64 * nodes * nodes * _INT
    return 64 * nodes * nodes * _INT


def verdict(row: str, pair: BrecPair) -> Verdict:
    started = time.perf_counter()
    distinguished, rounds = TESTS[row](pair.g, pair.h)
    return Verdict(pair.id, distinguished, rounds, time.perf_counter() - started)


def cache_path(cache_dir: Path, row: str, category: str, digest: str) -> Path:
    return Path(cache_dir) / "brec" / f"{row}-{category}-v{WL_VERSION}-{digest[:16]}.json"


def verdicts(
    row: str,
    pairs: Sequence[BrecPair],
    digest: str,
    cache_dir: Path | None = None,
    progress: Callable[[Verdict, int], None] | None = None,
) -> list[Verdict]:
    """Test ``row``'s verdict on each of ``pairs`` (of one category), read from the cache where it holds them and
    computed (then cached) where not; ``progress(verdict, done)`` after each computed one."""
    from engine.cache import open_sealed_json, write_sealed_json

    if not pairs:
        return []
    category = pairs[0].category
    path = cache_path(cache_dir, row, category, digest) if cache_dir is not None else None
    known: dict[str, Any] = {}
    if path is not None:
        cached = open_sealed_json(path, f"{row} cache of {category}")
        if cached is not None and cached.get("data") == digest and isinstance(cached.get("pairs"), dict):
            known = dict(cached["pairs"])
    out: list[Verdict] = []
    fresh = 0
    for pair in pairs:
        hit = known.get(str(pair.id))
        if isinstance(hit, dict) and isinstance(hit.get("distinguished"), bool):
            out.append(Verdict(pair.id, hit["distinguished"], int(hit.get("rounds", 0)), float(hit.get("seconds", 0))))
            continue
        v = verdict(row, pair)
        known[str(pair.id)] = v.to_dict()
        out.append(v)
        fresh += 1
        if progress is not None:
            progress(v, len(out))
    if path is not None and fresh:
        path.parent.mkdir(parents=True, exist_ok=True)
        doc = {"version": WL_VERSION, "test": row, "category": category, "data": digest, "pairs": known}
        write_sealed_json(path, doc, indent=1, sort_keys=True)
    return out
