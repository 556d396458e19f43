"""A trained property model applied to someone's own directed graphs (the property benchmark, section 5.1).

Input files:

- an **edge list**: one edge ``u v`` per line (whitespace or a comma between; ``#`` starts a comment; node names
  are any words, numbered in order of appearance; ``u u`` is a self-loop). One graph per file.
- a **CSV of triples** ``head,relation,tail`` (an optional header line ``head,relation,tail``): one directed graph
  per relation, on the entities that relation links (a knowledge graph's relations, each checked on its own).

A file with the ``.csv`` suffix, or whose first data line has three comma-separated fields, is read as triples.
:func:`score_graph` gives the model's probability that the property holds and, besides, the exact checker's
verdict; :func:`explain` the edges whose removal moves that probability most (the candidates for review).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from engine.errors import GaptuiError
from engine.properties.backbone import IDGNNFast
from engine.user_files import read_user_bytes


@dataclass
class UserGraph:
    """One graph read from a file: its nodes' names and ``[n, n]`` bool adjacency (``A[i, j]``: ``i -> j``)."""

    file: str
    nodes: list[str]
    adjacency: np.ndarray
    relation: str | None = None
    edges: list[tuple[int, int]] = field(default_factory=list)


def _split(line: str) -> list[str]:
    return [part for part in re.split(r"[,\s]+", line.strip()) if part]


#: Bytes per adjacency cell of one graph in a forward pass of the model: the bool input, its float32 copy, and
#: the float64 power, product and input of the cycle counts (:func:`engine.properties.backbone.cycle_counts`).
FORWARD_CELL_BYTES = 1 + 4 + 3 * 8
#: What one batch of ``--explain`` (graphs, each less one edge) may hold, whatever the graph's order.
EXPLAIN_BATCH_BYTES = 1 << 30


def check_order(file: str, nodes: int, relation: str | None = None) -> None:
    """Refuse (one line) a graph whose forward pass cannot fit in this machine's memory, before its ``n x n``
    adjacency is allocated."""
    from engine.memory import human, refuse_over_memory

    name = f"{file} ({relation})" if relation else file
    need = nodes * nodes * FORWARD_CELL_BYTES
    detail = f"{nodes:,} nodes: {nodes:,}^2 adjacency cells of {FORWARD_CELL_BYTES} bytes, about {human(need)}"
    refuse_over_memory(f"scoring {name}", need, detail, "score a smaller graph (fewer distinct node names)")


def _graph(file: str, pairs: list[tuple[str, str]], relation: str | None) -> UserGraph:
    index: dict[str, int] = {}
    for u, v in pairs:
        index.setdefault(u, len(index))
        index.setdefault(v, len(index))
    check_order(file, len(index), relation)
    a = np.zeros((len(index), len(index)), dtype=bool)
    for u, v in pairs:
        a[index[u], index[v]] = True
    edges = [(int(i), int(j)) for i, j in zip(*np.nonzero(a), strict=True)]
    return UserGraph(file, list(index), a, relation, edges)


def read_graphs(path: Path) -> list[UserGraph]:
    """The graphs of ``path`` (see the module docstring); GaptuiError naming the file (and line) otherwise."""
    where = str(path)
    expected = "expected an edge list or a CSV of triples"
    raw = read_user_bytes(Path(path), expected)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise GaptuiError(f"{where}: not a text file ({expected})") from None
    lines = [(k, line.split("#", 1)[0].strip()) for k, line in enumerate(text.splitlines(), 1)]
    lines = [(k, line) for k, line in lines if line]
    if not lines:
        raise GaptuiError(f"{where}: no edges (expected lines 'u v', or 'head,relation,tail' triples)")
    first = [p.strip().lower() for p in lines[0][1].split(",")]
    triples = path.suffix.lower() == ".csv" or len(first) == 3
    if triples:
        if first == ["head", "relation", "tail"]:
            lines = lines[1:]
        by_relation: dict[str, list[tuple[str, str]]] = {}
        for k, line in lines:
            parts = [p.strip() for p in line.split(",")]
            if len(parts) != 3 or not all(parts):
                raise GaptuiError(f"{where}, line {k}: expected 'head,relation,tail', got {line[:60]!r}")
            by_relation.setdefault(parts[1], []).append((parts[0], parts[2]))
        if not by_relation:
            raise GaptuiError(f"{where}: a header and no triples")
        return [_graph(where, pairs, relation) for relation, pairs in by_relation.items()]
    pairs = []
    for k, line in lines:
        parts = _split(line)
        if len(parts) != 2:
            raise GaptuiError(f"{where}, line {k}: expected an edge 'u v', got {line[:60]!r}")
        pairs.append((parts[0], parts[1]))
    return [_graph(where, pairs, None)]


@torch.no_grad()
def probabilities(model: IDGNNFast, adjacency: np.ndarray, batch_size: int = 128) -> np.ndarray:
    """``sigmoid(logit)`` of ``model`` for each of ``adjacency`` (``[G, n, n]`` bool, one size)."""
    model.eval()
    out = []
    for lo in range(0, len(adjacency), batch_size):
        logits = model(torch.as_tensor(adjacency[lo : lo + batch_size]))
        out.append(torch.sigmoid(logits.float()).numpy())
    return np.concatenate(out).astype(np.float64)


def explain(model: IDGNNFast, graph: UserGraph, top: int = 5) -> list[dict[str, object]]:
    """The ``top`` edges whose removal changes the model's probability most: ``edge`` (node names), the
    probability ``without`` it and the ``change`` (without - with), largest ``|change|`` first."""
    if not graph.edges:
        return []
    base = float(probabilities(model, graph.adjacency[None])[0])
    n = len(graph.nodes)
    # a bounded batch of copies at a time (never every edge's copy at once: 10,000 edges of 2,500 nodes are 62 GB)
    batch = max(1, min(128, EXPLAIN_BATCH_BYTES // max(1, n * n * FORWARD_CELL_BYTES)))
    without = np.empty(len(graph.edges), dtype=np.float64)
    for lo in range(0, len(graph.edges), batch):
        chunk = graph.edges[lo : lo + batch]
        removed = np.repeat(graph.adjacency[None], len(chunk), axis=0)
        for k, (i, j) in enumerate(chunk):
            removed[k, i, j] = False
        without[lo : lo + len(chunk)] = probabilities(model, removed, batch_size=batch)
    order = np.argsort(-np.abs(without - base), kind="stable")[:top]
    return [
        {
            "edge": [graph.nodes[graph.edges[k][0]], graph.nodes[graph.edges[k][1]]],
            "without": float(without[k]),
            "change": float(without[k] - base),
        }
        for k in order
    ]
