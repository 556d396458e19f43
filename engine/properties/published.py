"""The published CSV layout of the property suite: export from the cache, read back for training.

Layout under one folder (``Family`` is ``GraphRandom`` or ``GraphPerturb``)::

    <Family>-Train/<property>.csv                       the base size (training set)
    <Family>-Test/<property>/<property>_new<n>.csv      every larger size n (test sets)

One graph per row, no header: the ``n * n`` adjacency values row-major (``0``/``1``, ``A[i][j] = 1`` means
``i -> j``) then the label (``1`` = satisfies the property), comma-separated, ``\\n`` line ends. ``n`` follows from
the number of values per row. Reading a file written here gives back the same arrays, and writing them again
gives the same bytes.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.errors import GaptuiError
from engine.properties.definitions import get_property
from engine.user_files import read_user_bytes

FAMILY_FOLDERS = {"random": "GraphRandom", "perturb": "GraphPerturb"}


def published_train_path(root: Path, family: str, prop: str) -> Path:
    return Path(root) / f"{FAMILY_FOLDERS[family]}-Train" / f"{prop}.csv"


def published_test_path(root: Path, family: str, prop: str, n: int) -> Path:
    return Path(root) / f"{FAMILY_FOLDERS[family]}-Test" / prop / f"{prop}_new{n}.csv"


def csv_bytes(adjacency: np.ndarray, labels: np.ndarray) -> bytes:
    """The CSV text of ``adjacency`` (``[G, n, n]`` bool) and ``labels`` (``[G]`` 0/1)."""
    g = adjacency.shape[0]
    values = np.concatenate([adjacency.reshape(g, -1), np.asarray(labels).reshape(g, 1)], axis=1).astype(np.uint8)
    text = np.empty((g, 2 * values.shape[1]), dtype=np.uint8)
    text[:, 0::2] = values + ord("0")
    text[:, 1::2] = ord(",")
    text[:, -1] = ord("\n")
    return text.tobytes()


def write_csv(path: Path, adjacency: np.ndarray, labels: np.ndarray) -> None:
    """Write one dataset file; with :func:`engine.files.staged_files`, ``path`` is a temporary sibling."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(csv_bytes(adjacency, labels))


def read_csv(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """``(adjacency [G, n, n] bool, labels [G] uint8)`` from one file of the layout."""
    if not Path(path).exists():
        raise GaptuiError(f"{path}: file not found")
    raw = read_user_bytes(Path(path), "a published file is a CSV of rows of n*n + 1 values 0/1")
    body = raw.replace(b"\r\n", b"\n")
    fast = _read_regular(body)
    if fast is not None:
        return fast
    lines = body.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    if not lines:
        raise GaptuiError(f"{path}: no graphs (the file is empty)")
    rows = []
    width = None
    for number, line in enumerate(lines, start=1):
        fields = line.split(b",")
        try:
            row = np.array([int(f) for f in fields], dtype=np.int64)
        except ValueError:
            raise GaptuiError(f"{path}:{number}: expected comma-separated 0/1 values, got {line[:40]!r}") from None
        if width is None:
            width = len(row)
            n = math.isqrt(width - 1)
            if width < 2 or n * n != width - 1:
                raise GaptuiError(f"{path}:{number}: {width} values per row; expected n*n adjacency values + 1 label")
        if len(row) != width:
            raise GaptuiError(f"{path}:{number}: {len(row)} values; the first row has {width}")
        if ((row != 0) & (row != 1)).any():
            raise GaptuiError(f"{path}:{number}: values must be 0 or 1")
        rows.append(row)
    values = np.stack(rows)
    n = math.isqrt(values.shape[1] - 1)
    return values[:, :-1].astype(bool).reshape(-1, n, n), values[:, -1].astype(np.uint8)


def _read_regular(body: bytes) -> tuple[np.ndarray, np.ndarray] | None:
    """Vectorised reading of a well-formed file (single-digit 0/1 fields, equal rows); None for anything else."""
    if not body.endswith(b"\n"):
        body += b"\n"
    row_chars = body.find(b"\n") + 1
    if row_chars < 4 or len(body) % row_chars:
        return None
    grid = np.frombuffer(body, dtype=np.uint8).reshape(-1, row_chars)
    digits = grid[:, 0::2]
    width = digits.shape[1]
    n = math.isqrt(width - 1)
    regular = (
        n * n == width - 1
        and (grid[:, 1:-1:2] == ord(",")).all()
        and (grid[:, -1] == ord("\n")).all()
        and ((digits == ord("0")) | (digits == ord("1"))).all()
    )
    if not regular:
        return None
    values = digits - ord("0")
    return values[:, :-1].astype(bool).reshape(-1, n, n), values[:, -1].astype(np.uint8)


@dataclass(frozen=True)
class PublishedSet:
    """One dataset file read back: ``adjacency`` ``[G, n, n]`` bool, ``labels`` ``[G]`` uint8."""

    path: Path
    adjacency: np.ndarray
    labels: np.ndarray

    @property
    def n(self) -> int:
        return int(self.adjacency.shape[1])


def read_published_train(root: Path, family: str, prop: str) -> PublishedSet:
    path = published_train_path(root, family, get_property(prop).name)
    return PublishedSet(path, *read_csv(path))


def published_test_sizes(root: Path, family: str, prop: str) -> list[int]:
    """The test sizes present for ``prop`` (from the ``<property>_new<n>.csv`` names), ascending."""
    folder = Path(root) / f"{FAMILY_FOLDERS[family]}-Test" / prop
    pattern = re.compile(rf"{re.escape(prop)}_new(\d+)\.csv")
    found = [int(m.group(1)) for p in folder.glob("*.csv") if (m := pattern.fullmatch(p.name))]
    return sorted(found)


def read_published_test(root: Path, family: str, prop: str, n: int) -> PublishedSet:
    path = published_test_path(root, family, get_property(prop).name, n)
    data = PublishedSet(path, *read_csv(path))
    if data.n != n:
        raise GaptuiError(f"{path}: rows hold {data.n}-node graphs, the file name says {n}")
    return data
