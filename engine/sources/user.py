"""The user's own base graphs: a folder of edge-list files (``folder``) or any importable PyG dataset (``pyg``).

Both split a collection of graphs into train / validation graphs at random, or, with ``bfs=N'``, draw BFS
subgraphs of ``N'`` nodes from the collection (one large graph: train and validation are independent samples of
it; several graphs: the graphs are split first, so no graph feeds both splits).
"""

from __future__ import annotations

import inspect
import math
import re
import socket
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from scipy.sparse import csr_matrix

from engine.errors import GaptuiError
from engine.files import fingerprint
from engine.graphs import Graph, NormalisationReport
from engine.registry import import_object
from engine.sampling import adjacency, bfs_nodes, induced_subgraph
from engine.sources.base import BaseSplits, Source, graphs_from_edge_lists, register_source
from engine.sources.real import NETWORK_ERRORS, offline, pyg_item, socket_timeout
from engine.user_files import read_user_text

#: Default train / validation counts when BFS-sampling (the paper's scheme for large graphs).
BFS_SIZES = (5000, 500)

Fetch = Callable[[np.ndarray], tuple[list[Graph], NormalisationReport]]


def _check_split_params(name: str, bfs: int, val_fraction: float) -> None:
    if bfs < 0 or bfs == 1:
        raise GaptuiError(f"--param bfs={bfs} ({name}): expected 0 (graphs as they are) or a BFS order >= 2")
    if not 0 <= val_fraction < 1:
        raise GaptuiError(f"--param val_fraction={val_fraction} ({name}): expected a fraction in [0, 1)")


def held_out(val_fraction: float, count: int) -> int:
    """``ceil(val_fraction * count)``, immune to float noise such as ``0.07 * 100 == 7.000000000000001``."""
    return math.ceil(round(val_fraction * count, 9))


def _bfs_samples(
    label: str, graphs: list[Graph], order: int, count: int, rng: np.random.Generator, report: NormalisationReport
) -> list[Graph]:
    """``count`` BFS subgraphs of ``order`` nodes, each from a graph drawn uniformly among those large enough."""
    if count == 0:
        return []
    eligible = [g for g in graphs if g.num_nodes >= order]
    if not eligible:
        largest = max(g.num_nodes for g in graphs)
        raise GaptuiError(
            f"{label}: no graph has the {order} nodes a BFS sample needs (largest: {largest}); lower --param bfs"
        )
    if len(eligible) < len(graphs):
        report.notes.append(f"{label}: {len(graphs) - len(eligible)} graphs smaller than {order} nodes not sampled")
    # Adjacencies are built on first use only: a few draws from many graphs touch few of them.
    adj: dict[int, csr_matrix] = {}
    out: list[Graph] = []
    for _ in range(count):
        i = int(rng.integers(len(eligible)))
        if i not in adj:
            adj[i] = adjacency(eligible[i])
        out.append(induced_subgraph(adj[i], bfs_nodes(adj[i], order, rng)))
    return out


def collection_splits(
    label: str,
    count: int,
    fetch: Fetch,
    n_train: int | None,
    n_val: int | None,
    rng: np.random.Generator,
    bfs: int = 0,
    val_fraction: float = 0.1,
) -> BaseSplits:
    """Split a collection of ``count`` graphs (``fetch(indices)`` returns them) into base splits.

    ``bfs == 0``: the graphs themselves, shuffled with ``rng``; ``n_val`` defaults to
    ``ceil(val_fraction * count)`` and ``n_train`` to the rest. ``bfs > 0``: ``n_train`` / ``n_val`` (default
    5000 / 500) BFS subgraphs of ``bfs`` nodes; a single graph feeds both splits with independent samples,
    several graphs are first divided into train and validation graphs by ``val_fraction``.
    """
    if count == 0:
        raise GaptuiError(f"{label} holds no graphs")
    if bfs:
        return _bfs_splits(label, count, fetch, n_train, n_val, rng, bfs, val_fraction)
    val_default = n_val is None
    n_val = held_out(val_fraction, count) if n_val is None else n_val
    if n_train is None:
        n_train = count - n_val
        if n_train < 1:
            raise GaptuiError(
                f"{label} holds {count} graph(s): too few for {n_val} validation graph(s) and at least one "
                f"training graph; add graphs or BFS-sample subgraphs with --param bfs=ORDER"
            )
    if n_train + n_val > count:
        asked = f"--train {n_train} and {'the default ' if val_default else ''}--val {n_val}"
        raise GaptuiError(f"{label}: {asked} ask for {n_train + n_val} graphs but it holds {count}")
    perm = rng.permutation(count)
    val_idx = np.sort(perm[:n_val])
    train_idx = np.sort(perm[n_val : n_val + n_train])
    graphs, report = fetch(np.concatenate([train_idx, val_idx]))
    return BaseSplits(graphs[:n_train], graphs[n_train:], report)


def _bfs_splits(
    label: str,
    count: int,
    fetch: Fetch,
    n_train: int | None,
    n_val: int | None,
    rng: np.random.Generator,
    order: int,
    val_fraction: float,
) -> BaseSplits:
    n_train = BFS_SIZES[0] if n_train is None else n_train
    n_val = BFS_SIZES[1] if n_val is None else n_val
    if count == 1:
        graphs, report = fetch(np.arange(1))
        train_pool = val_pool = graphs
    else:
        # Keep at least one graph on each side that is asked for samples, and no graph on both sides.
        k_val = max(held_out(val_fraction, count), 1 if n_val else 0)
        k_val = min(k_val, count - 1 if n_train else count)
        perm = rng.permutation(count)
        val_idx, train_idx = np.sort(perm[:k_val]), np.sort(perm[k_val:])
        graphs, report = fetch(np.concatenate([train_idx, val_idx]))
        train_pool, val_pool = graphs[: train_idx.size], graphs[train_idx.size :]
    train = _bfs_samples(f"{label} (train graphs)", train_pool, order, n_train, rng, report)
    val = _bfs_samples(f"{label} (validation graphs)", val_pool, order, n_val, rng, report)
    return BaseSplits(train, val, report)


# ---------------------------------------------------------------------------------------------------------------
# Edge-list files.

EDGE_LIST_SUFFIXES = (".txt", ".edges", ".edgelist", ".csv", ".tsv")
_INTEGER = re.compile(r"[+-]?\d+")
#: Column names that mark a first line as a header even in a file whose node labels are not integers.
_HEADER_WORDS = frozenset(
    {"source", "target", "src", "dst", "from", "to", "node1", "node2", "node_1", "node_2", "u", "v", "head", "tail"}
)


@dataclass
class EdgeList:
    """One parsed edge-list file.

    ``pairs`` is ``[m, 2]`` int64, one row per listed edge in file order (self loops and repeats included),
    node ids ``0 .. num_nodes - 1``; ``labels[i]`` is the file's label of node ``i``.
    """

    num_nodes: int
    pairs: np.ndarray
    labels: list[str]


def parse_edge_list(path: Path) -> EdgeList:
    """Read an edge-list file: one edge per line, two node labels separated by whitespace and / or a comma.

    Blank lines and lines starting with ``#`` or ``%`` are skipped; further columns (weights, timestamps) are
    ignored. A first line whose labels are not integers is a header when every other line has integer labels
    or when it names columns (``source,target``, ``u v``, ...). Labels are relabelled ``0 .. n-1`` in numeric
    order when all are integers (compared as numbers: ``01`` and ``1`` are one node), else in string order.
    A node appears only through its edges: isolated nodes cannot be listed.
    """
    text = read_user_text(path, "an edge list is a text file of node pairs")
    flat: list[str] = []  # two labels per edge, in file order
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#%":
            continue
        tokens = line.replace(",", " ").split()
        if '"' in line or "'" in line:
            tokens = [t for t in (t.strip("\"'") for t in tokens) if t]
        if len(tokens) < 2:
            shown = line if len(line) <= 60 else line[:57] + "..."
            raise GaptuiError(
                f"{path}:{lineno}: expected two node labels separated by whitespace or a comma, got '{shown}'"
            )
        flat += tokens[:2]
    if flat and _is_header(flat):
        flat = flat[2:]
    labels = np.array(flat, dtype=str)
    try:
        keys = labels.astype(np.int64)  # every label an integer: numeric order
    except (ValueError, OverflowError):
        keys = labels
    uniq, inverse = np.unique(keys, return_inverse=True)
    return EdgeList(int(uniq.size), inverse.reshape(-1, 2).astype(np.int64), [str(u) for u in uniq])


def _is_header(flat: list[str]) -> bool:
    """Whether the first line (``flat[:2]``) is a header rather than an edge."""
    if all(_INTEGER.fullmatch(label) for label in flat[:2]):
        return False
    if {label.lower() for label in flat[:2]} <= _HEADER_WORDS:
        return True
    return len(flat) > 2 and all(_INTEGER.fullmatch(label) for label in flat[2:])


def undirected_edge_index(pairs: np.ndarray, num_nodes: int) -> tuple[np.ndarray, bool]:
    """An ``edge_index [2, E]`` for :func:`graphs_from_edge_lists` that makes its report honest for edge lists.

    Every listed line is an undirected edge, so an edge listed once is no change; a line repeating an edge is a
    duplicate, a line ``u u`` a self loop. Files that list every edge in both directions (each direction equally
    often, as PyG exports do) are read as one edge per pair of lines, so only repeats beyond that count. The
    returned index holds the self loops as listed and, per distinct edge ``u < v``, ``(u, v)`` once per listing
    plus ``(v, u)`` once, so normalisation counts exactly ``listings - 1`` duplicates and nothing symmetrised.
    The flag says whether the both-directions reading was used.
    """
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    loops = pairs[:, 0] == pairs[:, 1]
    edges = pairs[~loops]
    n = max(int(num_nodes), 1)
    directed, counts = np.unique(edges[:, 0] * n + edges[:, 1], return_counts=True)
    reverse = (directed % n) * n + directed // n
    at = np.minimum(np.searchsorted(directed, reverse), max(directed.size - 1, 0))
    both_ways = bool(directed.size and np.array_equal(directed[at], reverse) and np.array_equal(counts[at], counts))
    lo, hi = edges.min(axis=1), edges.max(axis=1)
    undirected, listings = np.unique(lo * n + hi, return_counts=True)
    if both_ways:
        listings = listings // 2
    u, v = undirected // n, undirected % n
    forward = np.repeat(np.stack([u, v], axis=1), listings, axis=0)
    backward = np.stack([v, u], axis=1)
    return np.concatenate([pairs[loops], forward, backward], axis=0).T, both_ways


@dataclass(frozen=True)
class _SplitParams:
    """How a user's collection of graphs becomes train / validation base graphs."""

    #: 0: the graphs as they are; N' >= 2: BFS-sampled subgraphs of N' nodes.
    bfs: int = 0
    #: Share of the graphs held out for validation (rounded up).
    val_fraction: float = 0.1


@dataclass(frozen=True)
class FolderParams(_SplitParams):
    #: Folder of edge-list files, one graph per file.
    path: str = ""

    def check(self) -> None:
        _check_split_params("folder", self.bfs, self.val_fraction)


@register_source
class EdgeListFolder(Source):
    name = "folder"
    description = (
        "your graphs: a folder of edge-list files (*.txt, *.edges, *.edgelist, *.csv, *.tsv), one graph per "
        "file; split at random by val_fraction, or BFS-sampled with bfs=N'"
    )
    Params = FolderParams
    sizes = (None, None)

    def _files(self) -> tuple[Path, list[Path]]:
        if not self.params.path:
            raise GaptuiError("folder: name the folder of edge-list files with --param path=DIR")
        folder = Path(self.params.path).expanduser().resolve()
        if not folder.is_dir():
            what = "is not a folder" if folder.exists() else "does not exist"
            raise GaptuiError(f"folder: {folder} {what}")
        # Hidden files are skipped: editors and macOS leave ".name.txt" companions that are not edge lists.
        files = sorted(
            (
                p
                for p in folder.iterdir()
                if p.is_file() and p.suffix.lower() in EDGE_LIST_SUFFIXES and not p.name.startswith(".")
            ),
            key=lambda p: p.name,
        )
        return folder, files

    def source_files(self, root: Path) -> dict[str, str]:
        try:
            return {p.name: fingerprint(p)["sha256"] for p in self._files()[1]}
        except (GaptuiError, OSError):
            return {}

    def load(self, n_train: int | None, n_val: int | None, rng: np.random.Generator, root: Path) -> BaseSplits:
        folder, files = self._files()
        if not files:
            raise GaptuiError(
                f"folder: no edge-list files ({', '.join('*' + s for s in EDGE_LIST_SUFFIXES)}) in {folder}"
            )
        items: list[tuple[int, np.ndarray]] = []
        both_ways: list[str] = []
        for path in files:
            parsed = parse_edge_list(path)
            edge_index, symmetric = undirected_edge_index(parsed.pairs, parsed.num_nodes)
            items.append((parsed.num_nodes, edge_index))
            if symmetric:
                both_ways.append(path.name)
        # Every file is normalised (and refused when empty) up front, so errors do not depend on the seed.
        graphs, report = graphs_from_edge_lists(items, [str(p) for p in files])
        if both_ways:
            report.notes.append(
                f"folder: {len(both_ways)} files list every edge in both directions; read as one edge per pair "
                f"(first: {both_ways[0]})"
            )
        return collection_splits(
            f"folder {folder}",
            len(graphs),
            lambda idx: ([graphs[int(i)] for i in idx], report),
            n_train,
            n_val,
            rng,
            self.params.bfs,
            self.params.val_fraction,
        )


# ---------------------------------------------------------------------------------------------------------------
# Any importable PyG dataset.


@dataclass(frozen=True)
class PygParams(_SplitParams):
    #: The dataset class (or factory) as ``module.path:Class``, e.g. ``torch_geometric.datasets:TUDataset``.
    dataset: str = ""
    #: Its ``root`` folder; empty: ``<data root>/pyg/<Class>``.
    root: str = ""

    def check(self) -> None:
        _check_split_params("pyg", self.bfs, self.val_fraction)


@contextmanager
def _downloads_blocked(reason: str) -> Iterator[None]:
    """Make every download inside the block fail at once.

    PyG datasets download through ``urllib.request.urlopen`` (``download_url``) or through fsspec / aiohttp
    (``fs.cp``, e.g. TUDataset), so both name resolution and ``urlopen`` are refused; nothing else in gaptui
    uses the network while a dataset loads. Both are process-wide and restored on exit.
    """

    def refuse_url(*args: Any, **kwargs: Any) -> Any:
        raise urllib.error.URLError(reason)

    def refuse_lookup(*args: Any, **kwargs: Any) -> Any:
        raise socket.gaierror(reason)

    original_urlopen, original_lookup = urllib.request.urlopen, socket.getaddrinfo
    urllib.request.urlopen = refuse_url  # type: ignore[assignment]
    socket.getaddrinfo = refuse_lookup  # type: ignore[assignment]
    try:
        yield
    finally:
        urllib.request.urlopen = original_urlopen
        socket.getaddrinfo = original_lookup


def _accepts(factory: Any, keyword: str) -> bool:
    """Whether ``factory`` names ``keyword`` as a parameter (a ``**kwargs`` catch-all does not count)."""
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return False
    return keyword in params and params[keyword].kind not in (
        inspect.Parameter.VAR_KEYWORD,
        inspect.Parameter.VAR_POSITIONAL,
        inspect.Parameter.POSITIONAL_ONLY,
    )


@register_source
class PygDataset(Source):
    name = "pyg"
    description = (
        "any PyG dataset: dataset=module.path:Class, other --param key=value go to its constructor; split at "
        "random by val_fraction, or BFS-sampled with bfs=N'"
    )
    Params = PygParams
    sizes = (None, None)
    open_params = True

    def load(self, n_train: int | None, n_val: int | None, rng: np.random.Generator, root: Path) -> BaseSplits:
        spec = self.params.dataset
        if not spec:
            raise GaptuiError(
                "pyg: name the dataset with --param dataset=module.path:Class "
                "(e.g. torch_geometric.datasets:TUDataset with --param name=MUTAG)"
            )
        factory = import_object(spec)
        cls_name = getattr(factory, "__name__", spec.rpartition(":")[2])
        if not callable(factory):
            raise GaptuiError(f"pyg: '{spec}' is not a class or function")
        kwargs: dict[str, Any] = {}
        if _accepts(factory, "root"):
            folder = Path(self.params.root).expanduser() if self.params.root else root / "pyg" / cls_name
            kwargs["root"] = str(folder.resolve())
        elif self.params.root:
            raise GaptuiError(f"pyg: {cls_name} takes no root folder; drop --param root")
        kwargs.update(getattr(self.params, "extra", {}) or {})
        shown = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
        dataset = self._construct(factory, cls_name, kwargs, shown)
        try:
            count = len(dataset)
            _ = dataset.__getitem__
        except (TypeError, AttributeError):
            raise GaptuiError(f"pyg: {cls_name}({shown}) is not a sequence of graphs") from None

        def fetch(idx: np.ndarray) -> tuple[list[Graph], NormalisationReport]:
            labels = [f"{cls_name} graph {int(i)}" for i in idx]
            return graphs_from_edge_lists(
                [pyg_item(dataset[int(i)], lab) for i, lab in zip(idx, labels, strict=True)], labels, keep_empty=True
            )

        return collection_splits(
            f"pyg {cls_name}", count, fetch, n_train, n_val, rng, self.params.bfs, self.params.val_fraction
        )

    @staticmethod
    def _construct(factory: Any, cls_name: str, kwargs: dict[str, Any], shown: str) -> Any:
        call = f"{cls_name}({shown})"
        blocked = offline()
        try:
            with socket_timeout():
                if blocked:
                    with _downloads_blocked("downloads are off (GAPTUI_OFFLINE=1)"):
                        return factory(**kwargs)
                return factory(**kwargs)
        except TypeError as exc:
            raise GaptuiError(
                f"pyg: {call} rejected its arguments ({exc}); pass constructor arguments as --param key=value"
            ) from exc
        except NETWORK_ERRORS as exc:
            where = f" under {kwargs['root']}" if "root" in kwargs else ""
            if blocked:
                raise GaptuiError(
                    f"pyg: {call} needs to download its files but downloads are off (GAPTUI_OFFLINE=1): "
                    f"place them{where}"
                ) from exc
            detail = " ".join(str(exc).split())[:200]
            raise GaptuiError(f"pyg: {call} could not fetch or read its files{where}: {detail}") from exc
        except (AssertionError, ValueError, KeyError) as exc:
            # Third-party constructors validate their arguments with these; the arguments came from the user.
            detail = " ".join(str(exc).split())[:200] or "an argument check failed"
            raise GaptuiError(f"pyg: {call} failed ({type(exc).__name__}: {detail}); check the --param values") from exc
