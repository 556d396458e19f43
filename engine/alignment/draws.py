"""Random draws for many graphs at once, the sampling steps of correlated pairs (:mod:`engine.alignment.noise`).

Each graph draws its own: a uniform subset of its free node pairs (:func:`uniform_subsets`), one Bernoulli coin per
node pair where most are added (:func:`coin_hits`), a uniform permutation of its nodes
(:func:`uniform_permutations`); the graphs of a batch are drawn together, a few numpy calls for all of them.
"""

from __future__ import annotations

import numpy as np

from engine.graphs import triu_slot

# The random stream depends on this size (coins are drawn per block): changing it changes the datasets built from
# a seed, so bump engine.alignment.datasets.FORMAT_VERSION with it.
#: Most coins drawn at once for the graphs whose non-edges are added with probability above 1/2.
DENSE_SLOTS = 1 << 22


def offsets(sizes: np.ndarray) -> np.ndarray:
    """``[len + 1]`` int64 exclusive prefix sums: where each of consecutive blocks of ``sizes`` starts."""
    out = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=out[1:])
    return out


def uniform_subsets(
    want: np.ndarray,
    free: np.ndarray,
    slot_ptr: np.ndarray,
    taken: np.ndarray,
    owner: np.ndarray,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """For each graph ``g`` of a chunk, ``want[g]`` distinct pairs drawn uniformly among its ``free[g]`` untaken ones.

    ``want``, ``free`` ``[P]``; graph ``g`` owns the pair slots ``slot_ptr[g] .. slot_ptr[g + 1] - 1`` of the
    chunk; ``taken`` (bool, the edges marked) and ``owner`` (int scratch) cover those slots. Returns
    ``(graph, slot)``, both ``[sum(want)]``, the slots chunk-wide, and marks them taken.

    Rejection in rounds: each graph still short draws uniform slots (exact integers), as many as should give
    what it lacks; a draw is kept if its slot is free and is the one draw of the round that ``owner`` keeps for
    that slot, and a graph keeps its first such draws up to what it lacks. Which draws survive depends only on
    where equal and taken values sit in the i.i.d. sequence, never on the free values themselves, so by symmetry
    the chosen set is a uniform subset of the free slots.
    """
    graphs: list[np.ndarray] = []
    slots: list[np.ndarray] = []
    need, left = want.copy(), free.copy()
    short = np.flatnonzero(need > 0)
    while short.size:
        sizes = slot_ptr[short + 1] - slot_ptr[short]
        # Draw what is lacking; where most slots are taken, about lacking * sizes / left so that the graph
        # does not need a round per slot (the surplus is cut below).
        ratio = sizes / left[short]
        lacking = need[short]
        draws = np.where(ratio > 2, (lacking * ratio * 1.05).astype(np.int64) + 2, lacking)
        graph = np.repeat(short, draws)
        if sizes.min() == sizes.max():
            # One bound for all (graphs of one order): numpy's scalar-bound path is several times faster.
            draw = slot_ptr[graph] + rng.integers(0, int(sizes[0]), size=graph.size)
        else:
            draw = slot_ptr[graph] + rng.integers(0, np.repeat(sizes, draws))
        index = np.arange(draw.size, dtype=owner.dtype)
        owner[draw] = index
        keep = owner[draw] == index
        keep &= ~taken[draw]
        if (draws > lacking).any():
            # Rank of each kept draw within its graph's draws: keep the first ones, up to what the graph lacks.
            rank = np.cumsum(keep)
            rank -= np.repeat(np.concatenate([[0], rank])[offsets(draws)[:-1]], draws)
            keep &= rank <= np.repeat(lacking, draws)
        draw, graph = draw[keep], graph[keep]
        taken[draw] = True
        graphs.append(graph)
        slots.append(draw)
        got = np.bincount(graph, minlength=need.size)
        need -= got
        left -= got
        short = np.flatnonzero(need > 0)
    if not graphs:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    return np.concatenate(graphs), np.concatenate(slots)


def coin_hits(
    ids: np.ndarray, p_add: np.ndarray, n: np.ndarray, edge_list: list[np.ndarray], rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Added edges of the graphs ``ids`` by one Bernoulli(p_add) coin per node pair, for ``p_add > 1/2``.

    There more than half of the non-edges are added, so a coin per pair costs at most twice the output, where
    drawing a subset would reject more and more draws. Coins are drawn in blocks of at most ``DENSE_SLOTS``
    pairs (bounded memory whatever the graph size); coins falling on edges are discarded, which leaves exactly
    one independent coin per non-edge. Returns ``(graph [A], slot [A])`` sorted, ``slot`` within the graph.
    """
    if ids.size == 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    sizes = n[ids] * (n[ids] - 1) // 2
    cum = offsets(sizes)
    edges = np.concatenate([edge_list[i] for i in ids]).reshape(-1, 2)
    counts = np.fromiter((edge_list[i].shape[0] for i in ids), dtype=np.int64, count=ids.size)
    taken = np.sort(triu_slot(edges[:, 0], edges[:, 1], np.repeat(n[ids], counts)) + np.repeat(cum[:-1], counts))
    graphs: list[np.ndarray] = []
    slots: list[np.ndarray] = []
    for a in range(0, int(cum[-1]), DENSE_SLOTS):
        b = min(a + DENSE_SLOTS, int(cum[-1]))
        s0 = int(np.searchsorted(cum, a, side="right")) - 1
        s1 = int(np.searchsorted(cum, b, side="left"))
        lens = np.minimum(cum[s0 + 1 : s1 + 1], b) - np.maximum(cum[s0:s1], a)
        hit = np.flatnonzero(rng.random(b - a) < np.repeat(p_add[ids[s0:s1]], lens)) + a
        if taken.size:
            pos = np.minimum(np.searchsorted(taken, hit), taken.size - 1)
            hit = hit[taken[pos] != hit]
        seg = np.searchsorted(cum, hit, side="right") - 1
        graphs.append(ids[seg])
        slots.append(hit - cum[seg])
    return np.concatenate(graphs), np.concatenate(slots)


def uniform_permutations(n: np.ndarray, node_ptr: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One uniform permutation of ``0 .. n_p - 1`` per graph, concatenated: ``[sum(n)]`` int64.

    Graphs of equal order are shuffled together, one Fisher-Yates shuffle per row of a ``[graphs, order]``
    array (``Generator.permuted``), so the cost is a few numpy calls per distinct order.
    """
    perm = np.empty(int(node_ptr[-1]), dtype=np.int64)
    by_order = np.argsort(n, kind="stable")
    cuts = np.flatnonzero(np.diff(n[by_order])) + 1
    for group in np.split(by_order, cuts):
        order = int(n[group[0]])
        rows = rng.permuted(np.tile(np.arange(order, dtype=np.int64), (group.size, 1)), axis=1)
        if group.size == n.size:
            perm[:] = rows.ravel()
        else:
            perm[(node_ptr[group][:, None] + np.arange(order)).ravel()] = rows.ravel()
    return perm
