"""Symmetry of the base graphs of an alignment dataset, and the ceilings it puts on every method's accuracy.

**Orbit ceiling.** Let ``sigma`` be an automorphism of ``G``. The pair ``(G, H)`` with planted alignment ``pi`` and the
same pair with ``pi o sigma`` are equally likely (the noise models treat every node alike and ``pi`` is uniform),
so no method, trained or not, can tell them apart: given the pair, the truth is uniform over the coset
``pi Aut(G)``. Whatever alignment ``pi_hat`` a method returns, node ``i`` is right with probability
``[pi_hat(i) in pi(orbit(i))] / |orbit(i)|``, hence the expected number of right nodes of a graph is at most its
number of automorphism orbits (each orbit contributes at most ``|orbit| * 1 / |orbit|``). The **orbit ceiling** of a
split is ``sum_g orbits(g) / sum_g n_g`` (node-weighted, as accuracies are), at any noise level. Orbits come from
igraph's BLISS (``Graph.automorphism_group``, generators of ``Aut(G)``): the orbits are the connected components of
the graph joining every node to its image under every generator.

**1-WL ceiling.** A message-passing network whose inputs are functions of the structure (constant or degree inputs)
gives every node of one stable colour class of 1-WL colour refinement the same embedding, so the rows of
``S = X_G X_H^T`` of such nodes tie, and the same argument bounds its expected accuracy by the number of colour
classes: ``sum_g classes(g) / sum_g n_g``. Classes are always unions of orbits, so this ceiling is at most the orbit
ceiling; positional inputs (``rwpe``, ``lap``) or search are not bound by it.

Colour refinement runs on a whole split at once (:func:`wl_colours`): each round, a node's new colour is its old
colour and the sum of a random 64-bit word per neighbour colour (a multiset hash; two different multisets collide
with probability about ``2^-64``), renumbered; it stops when no graph's partition refines further. A round costs
time in proportion to the split's nodes, and refinement can take as many rounds as a graph's diameter (a path of
60,000 nodes: 30,000 rounds), so a split gets at most :data:`WL_BUDGET` node-rounds: a split whose colours have not
settled by then has no 1-WL ceiling (its statistics say ``wl_settled: false``); its orbit ceiling stands.

**orbit_acc.** Node ``i`` counts as right up to symmetry when ``pi_hat(i)`` is the image of a node of its own orbit:
``orbit[pi^-1(pi_hat(i))] == orbit[i]``. It equals the LAP accuracy on graphs without symmetry.

Both are computed once per dataset and cached inside it (``<dataset>/symmetry/``, a fingerprinted entry of
:mod:`engine.cache`): per split the orbit and colour class id of every node of ``G`` (``orbits.npy``, ``wl.npy``,
int32, ids comparable within a graph) and the counts and ceilings in its ``meta.json``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from engine.pairs import PairSplit

#: Bump when the computation changes: an entry of another version is computed again.
SYMMETRY_VERSION = 1
#: The entry's folder inside a dataset.
FOLDER = "symmetry"
ARRAYS = ("orbits", "wl")
#: Node-rounds of colour refinement a split may take (a few seconds): 200 rounds of a 100,000-node split. Random
#: and molecular graphs settle in a few to a few dozen rounds; only long chains and grids run out.
WL_BUDGET = 20_000_000


def automorphism_generators(num_nodes: int, edge_index: np.ndarray) -> np.ndarray:
    """Generators of the automorphism group of one simple undirected graph (igraph's BLISS), int64 ``[k, n]``
    (``k = 0`` for a graph without symmetry). ``edge_index``: ``[2, E]`` local ids (one direction or both)."""
    import igraph

    n = int(num_nodes)
    ei = np.asarray(edge_index, dtype=np.int64).reshape(2, -1)
    ei = ei[:, ei[0] != ei[1]]
    edges = np.unique(np.sort(ei, axis=0), axis=1)  # each undirected edge once, whichever way it was given
    graph = igraph.Graph(n=n, edges=edges.T.tolist())
    return np.asarray(graph.automorphism_group(), dtype=np.int64).reshape(-1, n)


def orbits(num_nodes: int, edge_index: np.ndarray) -> np.ndarray:
    """Automorphism orbit of each node of one graph, int64 ``[n]``, ids numbered by first node."""
    return _first_seen(graph_orbits(np.array([num_nodes]), np.asarray(edge_index).reshape(2, -1), None))


def _first_seen(label: np.ndarray) -> np.ndarray:
    """Relabel ``label`` so that ids follow the order of first appearance (0 for node 0's class...)."""
    _, first, inverse = np.unique(label, return_index=True, return_inverse=True)
    rank = np.empty(first.size, np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(first.size)
    return rank[inverse.reshape(-1)]


def graph_orbits(num_nodes: np.ndarray, edge_index: np.ndarray, edge_ptr: np.ndarray | None) -> np.ndarray:
    """Orbit of every node of a list of graphs (flat arrays as :class:`PairSplit` holds them; ``edge_ptr`` None:
    one graph), ``[sum n]`` int64: the connected components of the graph that joins each node to its image under
    each generator of its graph's automorphism group, all graphs at once (ids are unique across the list)."""
    num_nodes = np.asarray(num_nodes, np.int64)
    total = int(num_nodes.sum())
    ptr = np.concatenate([[0], np.cumsum(num_nodes)])
    edge_ptr = np.array([0, edge_index.shape[1]]) if edge_ptr is None else np.asarray(edge_ptr, np.int64)
    src: list[np.ndarray] = []
    dst: list[np.ndarray] = []
    for p in range(num_nodes.size):
        n = int(num_nodes[p])
        generators = automorphism_generators(n, edge_index[:, edge_ptr[p] : edge_ptr[p + 1]])
        if generators.size:
            src.append(np.tile(np.arange(n), generators.shape[0]) + ptr[p])
            dst.append(generators.ravel() + ptr[p])
    if not src:
        return np.arange(total, dtype=np.int64)
    s, d = np.concatenate(src), np.concatenate(dst)
    link = coo_matrix((np.ones(s.size), (s, d)), shape=(total, total))
    return connected_components(link, directed=False)[1].astype(np.int64)


def wl_colours(
    num_nodes: np.ndarray, edge_index: np.ndarray, edge_ptr: np.ndarray, budget: int | None = WL_BUDGET
) -> np.ndarray | None:
    """Stable 1-WL colour of every node of a list of graphs (flat arrays as :class:`PairSplit` holds them: local
    ids, both directions of each edge), ``[sum n]`` int64; colours are comparable across graphs (the same colour
    means the same refinement history). None when the colours have not settled within ``budget`` node-rounds
    (None: no bound)."""
    num_nodes = np.asarray(num_nodes, np.int64)
    total = int(num_nodes.sum())
    node_ptr = np.concatenate([[0], np.cumsum(num_nodes)])
    shift = np.repeat(node_ptr[:-1], np.diff(np.asarray(edge_ptr, np.int64)))
    src = np.asarray(edge_index[0], np.int64) + shift
    dst = np.asarray(edge_index[1], np.int64) + shift
    order = np.argsort(src, kind="stable")
    src, dst = src[order], dst[order]
    # Each node's neighbour colours are summed as a difference of prefix sums over its run of edges (wrapping).
    ends = np.searchsorted(src, np.arange(total), side="right")
    starts = np.concatenate([[0], ends[:-1]])
    graph_of = np.repeat(np.arange(num_nodes.size), num_nodes)
    colour = np.zeros(total, np.int64)
    classes = _class_count(graph_of, colour)
    rng = np.random.default_rng(0x5EED)
    rounds = None if budget is None else max(1, budget // max(total, 1))
    while rounds is None or rounds > 0:
        rounds = None if rounds is None else rounds - 1
        word = rng.integers(1, np.iinfo(np.int64).max, size=int(colour.max(initial=0)) + 1, dtype=np.uint64)
        prefix = np.concatenate([np.zeros(1, np.uint64), np.cumsum(word[colour[dst]], dtype=np.uint64)])
        signature = prefix[ends] - prefix[starts]  # a multiset hash of the neighbour colours
        colour = _renumber(colour, signature)
        refined = _class_count(graph_of, colour)
        if refined == classes:
            return colour
        classes = refined
    return None


def _renumber(colour: np.ndarray, signature: np.ndarray) -> np.ndarray:
    """Dense ids ``0 ..`` of the distinct ``(colour, signature)`` pairs, in their sorted order."""
    if colour.size == 0:
        return colour
    order = np.lexsort((signature, colour))
    c, s = colour[order], signature[order]
    new = np.concatenate([[False], (c[1:] != c[:-1]) | (s[1:] != s[:-1])])
    out = np.empty_like(colour)
    out[order] = np.cumsum(new)
    return out


def _class_count(graph_of: np.ndarray, colour: np.ndarray) -> int:
    """Distinct (graph, colour) pairs: the number of colour classes summed over graphs."""
    if colour.size == 0:
        return 0
    return int(np.unique(graph_of * (int(colour.max()) + 1) + colour).size)


def per_graph_classes(num_nodes: np.ndarray, label: np.ndarray) -> np.ndarray:
    """Distinct values of ``label`` within each graph, ``[P]`` int64 (orbits or colour classes per graph)."""
    num_nodes = np.asarray(num_nodes, np.int64)
    graph_of = np.repeat(np.arange(num_nodes.size), num_nodes)
    if label.size == 0:
        return np.zeros(num_nodes.size, np.int64)
    pairs = np.unique(np.stack([graph_of, np.asarray(label, np.int64)], axis=1), axis=0)
    return np.bincount(pairs[:, 0], minlength=num_nodes.size).astype(np.int64)


@dataclass(frozen=True)
class SplitSymmetry:
    """Orbits and stable 1-WL classes of the ``G`` of each pair of a split.

    ``orbits`` / ``wl``: int64 ``[sum n]``, ids comparable within a graph only (``wl`` None: refinement did not
    settle within :data:`WL_BUDGET`); ``orbit_counts`` / ``wl_counts``: ``[P]`` per graph."""

    num_nodes: np.ndarray
    orbits: np.ndarray
    wl: np.ndarray | None

    @property
    def orbit_counts(self) -> np.ndarray:
        return per_graph_classes(self.num_nodes, self.orbits)

    @property
    def wl_counts(self) -> np.ndarray | None:
        return None if self.wl is None else per_graph_classes(self.num_nodes, self.wl)

    def stats(self) -> dict[str, Any]:
        """The ceilings (node-weighted shares), the counts behind them and how many graphs have any symmetry."""
        nodes = int(self.num_nodes.sum())
        orbit_counts, wl_counts = self.orbit_counts, self.wl_counts
        stats: dict[str, Any] = {
            "nodes": nodes,
            "orbits": int(orbit_counts.sum()),
            "orbit_ceiling": float(orbit_counts.sum() / nodes) if nodes else float("nan"),
            "symmetric_graphs": int((orbit_counts < self.num_nodes).sum()),
        }
        if wl_counts is None:  # refinement ran out of its budget: no 1-WL ceiling rather than a wrong one
            return {**stats, "wl_settled": False}
        return {
            **stats,
            "wl_classes": int(wl_counts.sum()),
            "wl_ceiling": float(wl_counts.sum() / nodes) if nodes else float("nan"),
            "wl_coarser_graphs": int((wl_counts < orbit_counts).sum()),
        }


def split_symmetry(split: PairSplit) -> SplitSymmetry:
    """Orbits (igraph's BLISS, graph by graph) and stable 1-WL classes (whole split at once) of every ``G``."""
    colours = wl_colours(split.num_nodes, split.edge_index_g, split.edge_ptr_g)
    orbit = graph_orbits(split.num_nodes, split.edge_index_g, split.edge_ptr_g)
    return SplitSymmetry(np.asarray(split.num_nodes, np.int64), orbit, colours)


def dataset_symmetry(dataset: Any, log: Any = None) -> dict[str, SplitSymmetry | dict[str, Any]]:
    """``{split: SplitSymmetry}`` of a cached alignment dataset (:class:`engine.alignment.datasets.Dataset`), read
    from ``<dataset>/symmetry/`` or computed and cached there; plus ``"stats"``: ``{split: stats}``."""
    from engine.cache import open_entry, write_entry

    splits = tuple(dataset.stats)  # the dataset's splits, as it recorded them (train, val)
    final = Path(dataset.path) / FOLDER
    files = tuple(f"{s}/{a}.npy" for s in splits for a in ARRAYS)
    key = {"version": SYMMETRY_VERSION, "dataset": dataset.id, "files": _split_prints(dataset)}
    meta = open_entry(final, "cached dataset symmetry", required=("key", "stats"), files=files)
    if meta is not None and meta["key"] == key:
        out: dict[str, Any] = {}
        for s in splits:
            arrays = {a: np.load(final / s / f"{a}.npy", allow_pickle=False).astype(np.int64) for a in ARRAYS}
            wl = arrays["wl"] if meta["stats"][s].get("wl_settled", True) else None
            out[s] = SplitSymmetry(dataset.split(s).num_nodes, arrays["orbits"], wl)
        return {**out, "stats": meta["stats"]}
    started = time.perf_counter()
    computed = {s: split_symmetry(dataset.split(s)) for s in splits}
    seconds = round(time.perf_counter() - started, 3)
    stats = {s: {**computed[s].stats(), "seconds": seconds} for s in splits}

    def write(tmp: Path) -> dict[str, Any]:
        for s in splits:
            (tmp / s).mkdir(parents=True, exist_ok=True)
            for a in ARRAYS:
                values = getattr(computed[s], a)
                values = np.zeros(0, np.int32) if values is None else values.astype(np.int32)
                np.save(tmp / s / f"{a}.npy", values, allow_pickle=False)
        return {"key": key, "stats": stats}

    try:
        write_entry(final, write, force=meta is not None or final.exists())
    except OSError as exc:  # a read-only cache: the values are still right, only not kept
        if log is not None:
            log(f"symmetry of {dataset.id} not cached ({exc})")
    if log is not None:
        log(f"symmetry of {dataset.id}: computed in {seconds:.2f} s")
    return {**computed, "stats": stats}


def _split_prints(dataset: Any) -> dict[str, str]:
    """The SHA-256 of each ``G`` array the symmetry is computed from, as the dataset recorded them."""
    recorded = dataset.meta.get("files") or {}
    names = ("num_nodes", "edge_index_g", "edge_ptr_g")
    return {
        f"{s}/{a}": str((recorded.get(f"{s}/{a}.npy") or {}).get("sha256", "")) for s in ("train", "val") for a in names
    }


def cached_stats(dataset: Any) -> dict[str, Any] | None:
    """The symmetry statistics per split of a dataset if they are cached (a listing reads them without checking
    or computing anything), else None."""
    from engine.cache import read_meta
    from engine.errors import GaptuiError

    try:
        return read_meta(Path(dataset.path) / FOLDER, ("stats",))["stats"]  # type: ignore[no-any-return]
    except GaptuiError:
        return None
