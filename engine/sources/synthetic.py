"""Synthetic base graphs: generated from the seed alone, never touching the network."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from engine.errors import GaptuiError
from engine.graphs import Graph, bernoulli_hits, simple_graph, triu_pair
from engine.sources.base import BaseSplits, NormalisationReport, Source, register_source


def _check_order(name: str, n: int, low: int = 2) -> None:
    if n < low:
        raise GaptuiError(f"--param n={n} ({name}): a graph needs at least {low} nodes")


def _edges_from_pairs(n: int, u: np.ndarray, v: np.ndarray) -> Graph:
    graph, _ = simple_graph(n, np.stack([u, v]))
    return graph


def bernoulli_graphs(n: int, p: float, count: int, rng: np.random.Generator) -> list[Graph]:
    """``count`` G(n, p) graphs, each pair of nodes an edge independently with probability ``p``.

    The ``count * n(n-1)/2`` pair coins of all graphs, in graph-major then row-major slot order, are one
    sequence of independent Bernoulli(p) coins, whose hits :func:`bernoulli_hits` draws directly (one random
    number per edge instead of one per pair, the same law). The hits come out sorted, so each graph's edges are
    already in the sorted ``(u, v)`` order of :class:`Graph` and all graphs share one ``[|E|, 2]`` buffer.
    """
    slots = n * (n - 1) // 2
    hits = bernoulli_hits(count * slots, p, rng)
    bounds = np.searchsorted(hits, np.arange(count + 1, dtype=np.int64) * slots).tolist()
    local = hits - np.repeat(np.arange(count, dtype=np.int64) * slots, np.diff(bounds))
    if local.size >= slots:
        # Many edges per possible pair: look the pairs up in a table rather than inverting each slot.
        table = np.stack(np.triu_indices(n, 1), axis=1)
        edges = np.take(table, local, axis=0)  # several times faster than table[local] for [T, 2]
    else:
        edges = np.stack(triu_pair(local, n), axis=1)
    return [Graph(n, edges[lo:hi]) for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)]


class _Synthetic(Source):
    """I.i.d. graphs: the two splits are simply the first ``n_train`` and the next ``n_val`` draws."""

    #: Whether generating one graph draws an ``n x n`` matrix (memory grows with the square of the order).
    dense_generation: ClassVar[bool] = False

    @classmethod
    def size_hint(cls, params: Any) -> tuple[float, float, bool] | None:
        return float(params.n), cls.mean_degree(params), cls.dense_generation

    @classmethod
    def mean_degree(cls, params: Any) -> float:
        return float(params.degree)

    def one(self, rng: np.random.Generator) -> Graph:
        raise NotImplementedError

    def many(self, count: int, rng: np.random.Generator) -> list[Graph]:
        return [self.one(rng) for _ in range(count)]

    def load(self, n_train: int | None, n_val: int | None, rng: np.random.Generator, root: Path) -> BaseSplits:
        n_train = self.sizes[0] if n_train is None else n_train
        n_val = self.sizes[1] if n_val is None else n_val
        graphs = self.many(n_train + n_val, rng)
        for i, g in enumerate(graphs):
            if g.num_edges == 0:
                raise GaptuiError(
                    f"{self.name} {self.params}: generated graph {i} has no edges; raise the degree or the order"
                )
        return BaseSplits(graphs[:n_train], graphs[n_train:], NormalisationReport(graphs=len(graphs)))


@dataclass(frozen=True)
class ERParams:
    n: int = 100
    degree: float = 8.0

    def check(self) -> None:
        _check_order("er", self.n)
        if not 0 < self.degree <= self.n - 1:
            raise GaptuiError(f"--param degree={self.degree} (er): expected 0 < degree <= n-1 = {self.n - 1}")


@register_source
class ErdosRenyi(_Synthetic):
    name = "er"
    description = "Erdos-Renyi G(n, p) with p = degree / (n - 1) (the paper's default: n=100, degree 8)"
    Params = ERParams

    def many(self, count: int, rng: np.random.Generator) -> list[Graph]:
        return bernoulli_graphs(self.params.n, self.params.degree / (self.params.n - 1), count, rng)


@dataclass(frozen=True)
class BAParams:
    n: int = 100
    m: int = 4

    def check(self) -> None:
        _check_order("ba", self.n)
        if not 1 <= self.m < self.n:
            raise GaptuiError(f"--param m={self.m} (ba): expected 1 <= m < n = {self.n}")


@register_source
class BarabasiAlbert(_Synthetic):
    name = "ba"
    description = "Barabasi-Albert preferential attachment, m edges per new node (average degree about 2m)"
    Params = BAParams

    @classmethod
    def mean_degree(cls, params: Any) -> float:
        return 2.0 * params.m

    def one(self, rng: np.random.Generator) -> Graph:
        n, m = self.params.n, self.params.m
        # Start from a star on m + 1 nodes so every early node has degree >= 1, then attach proportionally
        # to degree by sampling uniformly from the list of edge endpoints.
        src = [0] * m
        dst = list(range(1, m + 1))
        ends = src + dst
        for node in range(m + 1, n):
            targets: set[int] = set()
            while len(targets) < m:
                targets.add(ends[int(rng.integers(len(ends)))])
            for t in targets:
                src.append(node)
                dst.append(t)
                ends.extend((node, t))
        return _edges_from_pairs(n, np.array(src), np.array(dst))


@dataclass(frozen=True)
class WSParams:
    n: int = 100
    k: int = 8
    p: float = 0.1

    def check(self) -> None:
        _check_order("ws", self.n, 3)
        if self.k < 2 or self.k % 2 or self.k >= self.n:
            raise GaptuiError(f"--param k={self.k} (ws): expected an even ring degree with 2 <= k < n")
        if not 0 <= self.p <= 1:
            raise GaptuiError(f"--param p={self.p} (ws): expected a probability in [0, 1]")


@register_source
class WattsStrogatz(_Synthetic):
    name = "ws"
    description = "Watts-Strogatz small world: ring of degree k, each edge rewired with probability p"
    Params = WSParams
    dense_generation = True

    @classmethod
    def mean_degree(cls, params: Any) -> float:
        return float(params.k)

    def one(self, rng: np.random.Generator) -> Graph:
        n, k, p = self.params.n, self.params.k, self.params.p
        adj = np.zeros((n, n), dtype=bool)
        nodes = np.arange(n)
        for j in range(1, k // 2 + 1):
            adj[nodes, (nodes + j) % n] = True
        adj |= adj.T
        for j in range(1, k // 2 + 1):
            for u in range(n):
                v = (u + j) % n
                if adj[u, v] and rng.random() < p:
                    free = np.flatnonzero(~adj[u])
                    free = free[free != u]
                    if free.size:
                        w = int(free[rng.integers(free.size)])
                        adj[u, v] = adj[v, u] = False
                        adj[u, w] = adj[w, u] = True
        u, v = np.nonzero(np.triu(adj, 1))
        return Graph(n, np.stack([u, v], axis=1).astype(np.int64))


@dataclass(frozen=True)
class SBMParams:
    n: int = 100
    blocks: int = 4
    p_in: float = 0.2
    p_out: float = 0.02

    def check(self) -> None:
        _check_order("sbm", self.n)
        if not 1 <= self.blocks <= self.n:
            raise GaptuiError(f"--param blocks={self.blocks} (sbm): expected 1 <= blocks <= n")
        for key in ("p_in", "p_out"):
            if not 0 <= getattr(self, key) <= 1:
                raise GaptuiError(f"--param {key}={getattr(self, key)} (sbm): expected a probability in [0, 1]")


@register_source
class StochasticBlockModel(_Synthetic):
    name = "sbm"
    description = "stochastic block model: equal blocks, edge probability p_in inside and p_out across"
    Params = SBMParams
    dense_generation = True

    @classmethod
    def mean_degree(cls, params: Any) -> float:
        block = params.n / params.blocks
        return (block - 1) * params.p_in + (params.n - block) * params.p_out

    def one(self, rng: np.random.Generator) -> Graph:
        n = self.params.n
        block = np.arange(n) * self.params.blocks // n
        u, v = np.triu_indices(n, 1)
        prob = np.where(block[u] == block[v], self.params.p_in, self.params.p_out)
        hit = rng.random(u.size) < prob
        return Graph(n, np.stack([u[hit], v[hit]], axis=1).astype(np.int64))


@dataclass(frozen=True)
class RegularParams:
    n: int = 100
    degree: int = 8

    def check(self) -> None:
        _check_order("regular", self.n)
        if not 1 <= self.degree < self.n or (self.n * self.degree) % 2:
            raise GaptuiError(f"--param degree={self.degree} (regular): expected 1 <= degree < n with n * degree even")


@register_source
class RandomRegular(_Synthetic):
    name = "regular"
    description = "random d-regular graph (stub pairing with rejection of loops and multi-edges)"
    Params = RegularParams

    def one(self, rng: np.random.Generator) -> Graph:
        # Steger-Wormald pairing: pair random remaining stubs, keep only suitable pairs, restart when stuck.
        n, d = self.params.n, self.params.degree
        for _ in range(1000):
            edges = self._try_pairing(n, d, rng)
            if edges is not None:
                return _edges_from_pairs(n, edges[:, 0], edges[:, 1])
        raise GaptuiError(f"regular: no simple {d}-regular graph on {n} nodes found; lower the degree")

    @staticmethod
    def _try_pairing(n: int, d: int, rng: np.random.Generator) -> np.ndarray | None:
        present: set[tuple[int, int]] = set()
        stubs = np.repeat(np.arange(n), d)
        while stubs.size:
            stubs = rng.permutation(stubs)
            left: list[int] = []
            for a, b in stubs.reshape(-1, 2).tolist():
                key = (min(a, b), max(a, b))
                if a != b and key not in present:
                    present.add(key)
                else:
                    left.extend((a, b))
            if len(left) == stubs.size:
                return None
            stubs = np.array(left, dtype=np.int64)
        return np.array(sorted(present), dtype=np.int64)


@dataclass(frozen=True)
class GeometricParams:
    n: int = 100
    degree: float = 8.0

    def check(self) -> None:
        _check_order("geometric", self.n)
        if not 0 < self.degree < (self.n - 1) * np.pi / 4:
            raise GaptuiError(
                f"--param degree={self.degree} (geometric): expected 0 < degree < (n-1)*pi/4 on the unit torus"
            )


@register_source
class RandomGeometric(_Synthetic):
    name = "geometric"
    description = "random geometric graph on the unit torus, radius set so the expected degree is `degree`"
    Params = GeometricParams
    dense_generation = True

    def one(self, rng: np.random.Generator) -> Graph:
        n = self.params.n
        radius = np.sqrt(self.params.degree / ((n - 1) * np.pi))
        pts = rng.random((n, 2))
        diff = np.abs(pts[:, None, :] - pts[None, :, :])
        diff = np.minimum(diff, 1.0 - diff)
        close = (diff**2).sum(-1) <= radius**2
        u, v = np.nonzero(np.triu(close, 1))
        return Graph(n, np.stack([u, v], axis=1).astype(np.int64))


@dataclass(frozen=True)
class TreeParams:
    n: int = 100

    def check(self) -> None:
        _check_order("tree", self.n)


@register_source
class RandomTree(_Synthetic):
    name = "tree"
    description = "uniform random labelled tree (Pruefer sequence); noise adds edges only"
    Params = TreeParams

    @classmethod
    def mean_degree(cls, params: Any) -> float:
        return 2.0 * (params.n - 1) / params.n

    noise_model = "add"

    def one(self, rng: np.random.Generator) -> Graph:
        n = self.params.n
        if n == 2:
            return Graph(2, np.array([[0, 1]], dtype=np.int64))
        import heapq

        seq = rng.integers(0, n, size=n - 2)
        degree = np.ones(n, dtype=np.int64)
        np.add.at(degree, seq, 1)
        leaves = [i for i in range(n) if degree[i] == 1]
        heapq.heapify(leaves)
        src, dst = [], []
        for x in seq:
            leaf = heapq.heappop(leaves)
            src.append(leaf)
            dst.append(int(x))
            degree[x] -= 1
            if degree[x] == 1:
                heapq.heappush(leaves, int(x))
        a, b = heapq.heappop(leaves), heapq.heappop(leaves)
        src.append(a)
        dst.append(b)
        return _edges_from_pairs(n, np.array(src), np.array(dst))
