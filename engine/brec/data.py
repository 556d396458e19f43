"""The BREC graph pairs: the seven files shipped with gaptui (or a folder of the same layout), read and checked.

BREC (Wang and Zhang, 2023) holds 400 pairs of non-isomorphic graphs that 1-WL cannot tell apart, in categories of
rising difficulty. gaptui ships BREC's raw files (``engine/brec/data/``, MIT licence, ``LICENSE`` beside them; the
``README.md`` there names the source): graph6 strings, a file per category, pairs either as rows of an ``(N, 2)``
array or as consecutive strings of a flat one. A pair's **id** is its place in BREC's own order (the repository's
``part_dict``: Basic 0-59, Regular 60-159 with the strongly regular ones at 110-159, Extension 160-259, CFI
260-359, 4-vertex condition 360-379, distance regular 380-399), so results name the pairs as BREC does.

``data`` (a run option, a preset's ``[run]`` key) may name another folder with the seven files in this layout (a
customised BREC, as its repository allows); anything that does not read is one :class:`GaptuiError` line naming the
file, the pair and the problem.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.errors import GaptuiError, did_you_mean
from engine.graphs import Graph

#: The folder of the shipped files.
SHIPPED = Path(__file__).resolve().parent / "data"


@dataclass(frozen=True)
class Category:
    """One category of BREC: its key in gaptui (axis value, preset value), its title, its file and the number of
    pairs the shipped file holds."""

    key: str
    title: str
    file: str
    pairs: int


#: BREC's categories in its order (the ids of its pairs run through them in this order).
CATEGORIES: tuple[Category, ...] = (
    Category("basic", "Basic", "basic.npy", 60),
    Category("regular", "Regular", "regular.npy", 50),
    Category("strongly-regular", "Strongly regular", "str.npy", 50),
    Category("extension", "Extension", "extension.npy", 100),
    Category("cfi", "CFI", "cfi.npy", 100),
    Category("4-vertex", "4-vertex condition", "4vtx.npy", 20),
    Category("distance-regular", "Distance regular", "dr.npy", 20),
)
CATEGORY_KEYS = tuple(c.key for c in CATEGORIES)
#: The columns of BREC's published table: its "Regular" holds the four regular categories (140 pairs).
PAPER_PARTS: dict[str, tuple[str, ...]] = {
    "basic": ("basic",),
    "regular": ("regular", "strongly-regular", "4-vertex", "distance-regular"),
    "extension": ("extension",),
    "cfi": ("cfi",),
}
TOTAL = "total"


def category(key: str, where: str = "category") -> Category:
    """The category called ``key``; an unknown one is one error line with a did-you-mean."""
    for c in CATEGORIES:
        if c.key == key:
            return c
    raise GaptuiError(
        f"{where}: '{key}' is not a BREC category{did_you_mean(str(key), CATEGORY_KEYS)}; "
        f"known: {', '.join(CATEGORY_KEYS)}"
    )


@dataclass(frozen=True, eq=False)
class BrecPair:
    """One pair: its BREC id, its category and place in it, and the two graphs."""

    id: int
    category: str
    position: int
    g: Graph
    h: Graph

    @property
    def nodes(self) -> int:
        return max(self.g.num_nodes, self.h.num_nodes)


def data_folder(data: str | None) -> Path:
    """The folder the pairs are read from: the shipped files, or ``data``."""
    if data is None:
        return SHIPPED
    folder = Path(data).expanduser()
    if not folder.is_dir():
        raise GaptuiError(f"data = {data!r}: not a folder (expected one holding BREC's {CATEGORIES[0].file} ...)")
    return folder


def _graph(text: object, path: Path, pair: int, side: int) -> Graph:
    """One graph6 string as a simple undirected graph (networkx reads it)."""
    import networkx as nx

    where = f"{path}: pair {pair}, graph {side + 1}"
    if isinstance(text, (str, np.str_)):
        raw = str(text).strip().encode("ascii", "replace")
    elif isinstance(text, (bytes, np.bytes_)):
        raw = bytes(text).strip()
    else:
        raise GaptuiError(f"{where}: {type(text).__name__} {text!r}: expected a graph6 string")
    raw = raw.removeprefix(b">>graph6<<")
    try:
        nxg = nx.from_graph6_bytes(raw)
    except Exception as exc:  # networkx raises NetworkXError, ValueError or IndexError for bad strings
        shown = raw[:40].decode("ascii", "replace") + ("..." if len(raw) > 40 else "")
        raise GaptuiError(f"{where}: graph6 string '{shown}' does not parse ({type(exc).__name__}: {exc})") from None
    edges = np.array(sorted((min(u, v), max(u, v)) for u, v in nxg.edges() if u != v), dtype=np.int64)
    return Graph(nxg.number_of_nodes(), edges.reshape(-1, 2))


def _pairs_array(path: Path) -> np.ndarray:
    """The file's strings as an ``(N, 2)`` array of pairs (rows, or consecutive strings of a flat array)."""
    if not path.is_file():
        raise GaptuiError(f"{path}: file not found (a BREC data folder holds {', '.join(c.file for c in CATEGORIES)})")
    try:
        array = np.load(path, allow_pickle=False)
    except ValueError as exc:
        raise GaptuiError(f"{path}: not a numpy array of graph6 strings ({exc})") from None
    except OSError as exc:
        raise GaptuiError(f"{path}: unreadable ({exc})") from None
    if not isinstance(array, np.ndarray) or array.dtype.kind not in "SU":
        kind = array.dtype if isinstance(array, np.ndarray) else type(array).__name__
        raise GaptuiError(f"{path}: holds {kind}, expected graph6 strings (str or bytes)")
    if array.size == 0:
        raise GaptuiError(f"{path}: holds no graph6 strings (a category needs at least one pair)")
    if array.ndim == 1 and array.size % 2 == 0:
        return array.reshape(-1, 2)
    if array.ndim == 2 and array.shape[1] == 2:
        return array
    raise GaptuiError(
        f"{path}: shape {tuple(array.shape)}: expected pairs, an (N, 2) array or a flat array of an even number of "
        "graph6 strings (consecutive strings pair up)"
    )


def _stamp(folder: Path, name: str) -> tuple[str, int, int]:
    path = folder / name
    try:
        stat = path.stat()
    except OSError:
        return (str(path), -1, -1)
    return (str(path), stat.st_size, stat.st_mtime_ns)


def load_category(key: str, data: str | None = None) -> tuple[BrecPair, ...]:
    """Every pair of the category ``key`` (its BREC ids: their place in BREC's order), read and checked."""
    folder = data_folder(data)
    cat = category(key)
    first = 0
    for c in CATEGORIES:
        if c.key == key:
            break
        first += len(_pairs_array(folder / c.file)) if data is not None else c.pairs
    return _load(cat.key, first, _stamp(folder, cat.file))


@functools.lru_cache(maxsize=16)
def _load(key: str, first: int, stamp: tuple[str, int, int]) -> tuple[BrecPair, ...]:
    path = Path(stamp[0])
    rows = _pairs_array(path)
    pairs = []
    for i, (a, b) in enumerate(rows):
        pair = BrecPair(first + i, key, i, _graph(a, path, first + i, 0), _graph(b, path, first + i, 1))
        pairs.append(pair)
    return tuple(pairs)


def load_pairs(key: str, data: str | None = None, limit: int | None = None) -> tuple[BrecPair, ...]:
    """The first ``limit`` pairs of category ``key`` (all with None)."""
    pairs = load_category(key, data)
    return pairs if limit is None else pairs[:limit]


def category_sizes(key: str, data: str | None = None) -> tuple[int, int]:
    """(pairs, largest graph order) of the category, for estimates before anything runs."""
    pairs = load_category(key, data)
    return len(pairs), max((p.nodes for p in pairs), default=0)


@functools.lru_cache(maxsize=4)
def _digest(folder: str, stamps: tuple[tuple[str, int, int], ...]) -> str:
    h = hashlib.sha256()
    for path, _, _ in stamps:
        h.update(Path(path).name.encode())
        h.update(Path(path).read_bytes() if Path(path).is_file() else b"")
    return h.hexdigest()


def data_digest(data: str | None = None) -> str:
    """SHA-256 over the seven files (name and bytes): what caches of results on the pairs are keyed by."""
    folder = data_folder(data)
    return _digest(str(folder), tuple(_stamp(folder, c.file) for c in CATEGORIES))
