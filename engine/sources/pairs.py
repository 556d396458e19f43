"""Prepared alignment pairs in the safetensors layout of the paper's authors (``ngmb`` / ``ngab``), read and written.

The layout is one folder of six files, three per split (``train``, ``val``)::

    {split}-orders.safetensors             "0" .. "n-1" -> int64 [2]: [order of G, order of G~]
    {split}-base-graphs.safetensors        "0" .. "n-1" -> int64 [2, E]: the edges of G, both directions
    {split}-corrupted-graphs.safetensors   "0" .. "n-1" -> int64 [2, E~]: the edges of G~, both directions

Node ``i`` of G~ is node ``i`` of G: the truth is the identity. The ``pairs`` source reads such a folder (``path=``)
or a dataset of the authors' Hub repository (``hub=NAME``, downloaded into ``<data root>/pairs/NAME/``); the
dataset builder then relabels each G~ by a seeded permutation, as it does for its own pairs, so that identity
targets cannot favour a matcher that breaks ties by index, and records the SHA-256 of every source file.
:func:`write_layout` writes a split back in this layout with the permutation undone, for the authors' loops.

Every check a folder must pass is made before a pair is used, each failure one :class:`GaptuiError` line naming
the file and the pair: missing files, keys that are not ``0 .. n-1``, a key in one file and not the others,
tensors of the wrong shape or type, node ids outside the order, self loops, edges listed in one direction only
(unless ``directed = true``: each listed edge is then read as undirected) and pairs whose two graphs differ in
order.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.errors import GaptuiError
from engine.files import fingerprint, staged_files
from engine.graphs import Graph, NormalisationReport, simple_graph
from engine.sources.base import BaseSplits, Source, register_source, split_counts
from engine.sources.fetch import download_blocked, error_reason, pick
from engine.user_files import open_user_file

SPLITS = ("train", "val")
KINDS = ("orders", "base-graphs", "corrupted-graphs")
#: The six files of one dataset, in the order they are listed to the user.
FILES = tuple(f"{split}-{kind}.safetensors" for split in SPLITS for kind in KINDS)
#: The Hugging Face dataset repository holding the authors' prepared datasets, one folder per dataset.
HUB_REPO = "alagesse/graph-alignment-benchmark-data"
_HUB_NAME = re.compile(r"[\w.\[\],=+-]+")


@dataclass(frozen=True)
class PairsParams:
    #: Folder holding the six safetensors files.
    path: str = ""
    #: Name of a dataset (a folder) of the Hub repository ``repo``; downloaded into ``<data root>/pairs/NAME/``.
    hub: str = ""
    #: The Hub repository ``hub`` names a dataset of.
    repo: str = HUB_REPO
    #: Accept edges listed in one direction only, each read as an undirected edge.
    directed: bool = False

    def check(self, named: bool = False) -> None:
        """Refuse a bad hub name and both a path and a hub; with ``named``, also neither (the defaults alone
        are valid parameters, for labels)."""
        if (self.path and self.hub) or (named and not (self.path or self.hub)):
            raise GaptuiError(
                "pairs: give either --param path=DIR (a folder of the six safetensors files) or --param hub=NAME "
                f"(a dataset of {self.repo}), not {'both' if self.path else 'neither'}"
            )
        if self.hub and (not _HUB_NAME.fullmatch(self.hub) or self.hub in (".", "..")):
            raise GaptuiError(f"--param hub={self.hub} (pairs): expected a dataset name, with no '/' or spaces")


@dataclass
class SplitPairs:
    """The pairs of one split as read: G and G~ per pair, node ``i`` of one being node ``i`` of the other."""

    base: list[Graph]
    corrupted: list[Graph]


def pairs_folder(params: PairsParams, root: Path) -> Path:
    """The folder the six files are read from: ``path``, or ``<data root>/pairs/<hub name>``."""
    if params.hub:
        return Path(root) / "pairs" / params.hub
    return Path(params.path).expanduser().resolve()


#: The safetensors element types a layout file may hold (integers: orders and node ids), with their sizes.
INTEGER_DTYPES = {"I8": 1, "U8": 1, "I16": 2, "U16": 2, "I32": 4, "U32": 4, "I64": 8, "U64": 8}
#: The largest header a safetensors file may declare (the format's own readers cap it at 100 MB).
MAX_HEADER = 100_000_000
_PAIR_KEY = re.compile(r"0|[1-9][0-9]*")


def _check_header(path: Path) -> None:
    """Check what the header of safetensors file ``path`` declares against the file itself, before any tensor is
    read: a regular file, a header that fits in it, integer tensors only, each tensor's declared shape the size of
    its bytes and those bytes inside the file. One GaptuiError line naming the file (and the tensor) otherwise."""
    from engine.memory import refuse_over_memory

    expected = "expected a file of the safetensors layout (docs/alignment.md)"

    def unreadable(why: str) -> GaptuiError:
        return GaptuiError(f"{path}: not a readable safetensors file ({why})")

    with open_user_file(path, expected, limit=1 << 62) as (fh, size):
        length = int.from_bytes(fh.read(8), "little")
        if size < 8:
            raise unreadable(f"{size} bytes, too short for a header")
        if length > min(size - 8, MAX_HEADER):
            raise unreadable(f"its header declares {length:,} bytes but the file holds {size:,}")
        refuse_over_memory(f"reading {path}", size, f"a file of {size:,} bytes", "give a smaller dataset")
        raw = fh.read(length)
    try:
        header = json.loads(raw)
    except ValueError:
        raise unreadable("its header is not valid JSON") from None
    if not isinstance(header, dict):
        raise unreadable("its header is not a table of tensors")
    room = size - 8 - length
    for key, entry in header.items():
        if key == "__metadata__":
            continue
        _check_entry(path, key, entry, room)


def _check_entry(path: Path, key: str, entry: object, room: int) -> None:
    where = f"{path}: tensor '{key}'"
    if not isinstance(entry, dict):
        raise GaptuiError(f"{where}: its header entry is not a table (dtype, shape, data_offsets)")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if dtype not in INTEGER_DTYPES:
        raise GaptuiError(
            f"{where} is {dtype}: expected an integer type ({', '.join(INTEGER_DTYPES)}): orders and node ids are "
            "whole numbers"
        )
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
        raise GaptuiError(f"{where}: shape {shape!r} is not a list of sizes >= 0")
    if not (
        isinstance(offsets, list)
        and len(offsets) == 2
        and all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
        and 0 <= offsets[0] <= offsets[1]
    ):
        raise GaptuiError(f"{where}: data_offsets {offsets!r} are not [start, end] with 0 <= start <= end")
    declared = math.prod(shape) * INTEGER_DTYPES[dtype]
    if declared != offsets[1] - offsets[0] or offsets[1] > room:
        raise GaptuiError(
            f"{where} declares {dtype} {shape} ({declared:,} bytes) at bytes {offsets[0]:,}..{offsets[1]:,} but the "
            f"file holds {room:,} bytes of tensors: a truncated or damaged file"
        )


def _load_file(path: Path) -> dict[str, np.ndarray]:
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    _check_header(path)
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError, TypeError) as exc:
        raise GaptuiError(f"{path}: not a readable safetensors file ({error_reason(exc)})") from None


def _check_keys(folder: Path, split: str, tensors: Mapping[str, Mapping[str, np.ndarray]]) -> list[str]:
    """The keys ``"0" .. "n-1"`` shared by the three files of ``split``, else the error naming file and key."""
    orders_file = f"{split}-orders.safetensors"
    keys = tensors["orders"]
    for key in keys:
        if not _PAIR_KEY.fullmatch(key) or int(key) >= len(keys):
            raise GaptuiError(
                f"{folder / orders_file}: key '{key}' is not one of 0 .. {len(keys) - 1}: the keys of a split "
                "are the pair numbers 0 .. n-1"
            )
    for kind in KINDS[1:]:
        other = tensors[kind]
        extra = sorted(set(other) - set(keys), key=lambda k: (len(k), k))
        missing = sorted(set(keys) - set(other), key=lambda k: (len(k), k))
        name = folder / f"{split}-{kind}.safetensors"
        if extra:
            raise GaptuiError(f"{name}: pair '{extra[0]}' is not in {orders_file} ({len(extra)} such key(s))")
        if missing:
            raise GaptuiError(f"{name}: pair '{missing[0]}' of {orders_file} is missing ({len(missing)} missing)")
    return [str(i) for i in range(len(keys))]


def _edges(
    name: Path, key: str, value: np.ndarray, order: int, directed: bool, which: str
) -> tuple[Graph, NormalisationReport]:
    """The graph of one edge tensor after its checks (see the module docstring)."""
    if value.ndim != 2 or value.shape[0] != 2 or not np.issubdtype(value.dtype, np.integer):
        raise GaptuiError(
            f"{name}: pair {key}: expected an integer edge index of shape [2, E], got {value.dtype} {list(value.shape)}"
        )
    ei = value.astype(np.int64)
    if ei.size and (ei.min() < 0 or ei.max() >= order):
        bad = int(ei.max()) if ei.max() >= order else int(ei.min())
        raise GaptuiError(
            f"{name}: pair {key}: the edges refer to node {bad} but the orders file gives {which} {order} nodes"
        )
    loops = ei[0] == ei[1]
    if loops.any():
        raise GaptuiError(f"{name}: pair {key}: self loop at node {int(ei[0][loops][0])}")
    if not directed:
        forward = np.unique(ei[0] * order + ei[1])
        backward = np.unique(ei[1] * order + ei[0])
        lone = np.setdiff1d(forward, backward)
        if lone.size:
            u, v = divmod(int(lone[0]), order)
            raise GaptuiError(
                f"{name}: pair {key}: edge ({u}, {v}) is listed without ({v}, {u}) ({lone.size} such edge(s)): "
                "the layout lists both directions of each undirected edge; pass --param directed=true to read "
                "each listed edge as undirected"
            )
    return simple_graph(order, ei)


def check_order(orders_file: Path, key: str, order: int) -> None:
    """Refuse (one line) a pair whose declared order this machine cannot align, before anything of that order is
    allocated: training and evaluation hold its ``order x order`` float32 similarity matrix."""
    from engine.memory import refuse_over_memory

    refuse_over_memory(
        f"{orders_file}: pair {key}",
        4 * order * order,
        f"order {order:,}: its {order:,} x {order:,} similarity matrix",
        "an alignment pair of this order cannot be trained or evaluated here; check the orders file",
    )


def read_split(folder: Path, split: str, directed: bool = False) -> tuple[SplitPairs, NormalisationReport]:
    """Read and check the three files of ``split`` in ``folder``."""
    tensors = {kind: _load_file(folder / f"{split}-{kind}.safetensors") for kind in KINDS}
    keys = _check_keys(folder, split, tensors)
    orders_file = folder / f"{split}-orders.safetensors"
    if not keys:
        what = "training" if split == "train" else "validation"
        raise GaptuiError(
            f"{orders_file}: no pair: the {split} split is empty (its runs would train or score on nothing); "
            f"give at least one {what} pair"
        )
    report = NormalisationReport()
    base: list[Graph] = []
    corrupted: list[Graph] = []
    for key in keys:
        orders = tensors["orders"][key]
        if orders.shape != (2,) or not np.issubdtype(orders.dtype, np.integer):
            raise GaptuiError(
                f"{orders_file}: pair {key}: expected two integer orders [order of G, order of G~], got "
                f"{orders.dtype} {list(orders.shape)}"
            )
        n, n_tilde = int(orders[0]), int(orders[1])
        if n != n_tilde:
            raise GaptuiError(
                f"{orders_file}: pair {key}: G has {n} nodes and G~ {n_tilde}; an alignment pair needs graphs of "
                "one order"
            )
        if n < 0:
            raise GaptuiError(f"{orders_file}: pair {key}: order {n}; expected a node count >= 0")
        check_order(orders_file, key, n)
        for kind, out, which in (("base-graphs", base, "G"), ("corrupted-graphs", corrupted, "G~")):
            graph, rep = _edges(folder / f"{split}-{kind}.safetensors", key, tensors[kind][key], n, directed, which)
            report.add(rep)
            out.append(graph)
    return SplitPairs(base, corrupted), report


def source_files(folder: Path) -> dict[str, str]:
    """``{file name: SHA-256}`` of the six files in ``folder``."""
    return {name: fingerprint(folder / name)["sha256"] for name in FILES}


def missing_layout(folder: Path) -> list[str]:
    return [name for name in FILES if not (folder / name).is_file()]


def hub_endpoint() -> str:
    """The Hugging Face Hub's address (``HF_ENDPOINT``, as huggingface_hub reads it)."""
    return os.environ.get("HF_ENDPOINT") or "https://huggingface.co"


def fetch_hub(params: PairsParams, root: Path) -> Path:
    """The folder of the Hub dataset ``params.hub``, its missing files downloaded first (only those six)."""
    folder = pairs_folder(params, root)
    missing = missing_layout(folder)
    if not missing:
        return folder
    place = f"place {', '.join(missing)} (from {params.repo}, folder {params.hub}) in {folder}"
    if why := download_blocked(hub_endpoint()):  # at once: huggingface_hub would retry for half a minute
        raise GaptuiError(f"pairs: hub={params.hub}: {why}; {place}")
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:
        raise GaptuiError(
            f"pairs: hub={params.hub} needs huggingface_hub (pip install 'gaptui[hub]'), or {place}"
        ) from None
    folder.mkdir(parents=True, exist_ok=True)
    for name in missing:
        try:
            # local_dir keeps the repository's folders: <root>/pairs/<hub name>/<file>, no symlinks into a cache.
            hf_hub_download(params.repo, f"{params.hub}/{name}", repo_type="dataset", local_dir=folder.parent)
        except Exception as exc:  # noqa: BLE001 - network, HTTP and missing-entry errors of huggingface_hub alike
            raise GaptuiError(
                f"pairs: hub={params.hub}: cannot download {name} ({error_reason(exc)}); {place}"
            ) from None
    return folder


@register_source
class PreparedPairs(Source):
    name = "pairs"
    description = (
        "prepared pairs in the authors' safetensors layout (ngmb / ngab): six files {train,val}-{orders,"
        "base-graphs,corrupted-graphs}.safetensors in path=DIR, or hub=NAME from their Hugging Face repository; "
        "--noise labels the pairs (they are not noised again)"
    )
    Params = PairsParams
    sizes = (None, None)

    def folder(self, root: Path) -> Path:
        self.params.check(named=True)
        if self.params.hub:
            return fetch_hub(self.params, root)
        folder = pairs_folder(self.params, root)
        if not folder.is_dir():
            what = "is not a folder" if folder.exists() else "does not exist"
            raise GaptuiError(f"pairs: {folder} {what}")
        missing = missing_layout(folder)
        if missing:
            raise GaptuiError(f"pairs: {folder} lacks {', '.join(missing)} (the six files of the safetensors layout)")
        return folder

    def source_files(self, root: Path) -> dict[str, str]:
        folder = pairs_folder(self.params, root)
        return {} if missing_layout(folder) else source_files(folder)

    def check_files(self, root: Path) -> None:
        self.params.check(named=True)
        if self.params.hub:
            folder = pairs_folder(self.params, root)
            if missing_layout(folder) and download_blocked(hub_endpoint()):
                fetch_hub(self.params, root)  # raises the line naming the folder and the files
            return
        folder = self.folder(root)
        for split in SPLITS:
            read_split(folder, split, self.params.directed)

    def load(self, n_train: int | None, n_val: int | None, rng: np.random.Generator, root: Path) -> BaseSplits:
        folder = self.folder(root)
        read = {split: read_split(folder, split, self.params.directed) for split in SPLITS}
        counts = split_counts(f"pairs {folder}", len(read["train"][0].base), len(read["val"][0].base), n_train, n_val)
        report = NormalisationReport()
        chosen: dict[str, SplitPairs] = {}
        for split, count in zip(SPLITS, counts, strict=True):
            pairs, rep = read[split]
            report.add(rep)
            idx = pick(len(pairs.base), count, rng)
            chosen[split] = SplitPairs([pairs.base[i] for i in idx], [pairs.corrupted[i] for i in idx])
        return BaseSplits(
            chosen["train"].base,
            chosen["val"].base,
            report,
            partners={split: chosen[split].corrupted for split in SPLITS},
            files=source_files(folder),
        )


def write_layout(
    folder: Path, splits: Mapping[str, object], force: bool = False, extra: Mapping[str, str] | None = None
) -> Path:
    """Write ``splits`` (``{"train": PairSplit, "val": PairSplit}``) into ``folder`` in the safetensors layout, with
    the ``extra`` text files (``{name: text}``, such as ``gaptui-dataset.json``) beside them.

    Each pair's H is relabelled back through its permutation, so node ``i`` of G~ is node ``i`` of G. Any file of
    the same name (a layout file or an extra one) is replaced only with ``force``; the files are written whole or
    not at all, as the group of one command.
    """
    from safetensors.numpy import save_file

    folder = Path(folder)
    extra = dict(extra or {})
    if folder.exists() and not folder.is_dir():
        raise GaptuiError(f"--out {folder}: is a file; expected a folder for the six safetensors files")
    present = [name for name in (*FILES, *extra) if (folder / name).exists() or (folder / name).is_symlink()]
    if present and not force:
        raise GaptuiError(f"--out {folder} already holds {present[0]}; choose another folder or pass --force")
    folder.mkdir(parents=True, exist_ok=True)
    with staged_files() as stage:
        for name, text in extra.items():
            stage(folder / name).write_text(text, encoding="utf-8")
        for split in SPLITS:
            data = splits[split]
            orders: dict[str, np.ndarray] = {}
            base: dict[str, np.ndarray] = {}
            corrupted: dict[str, np.ndarray] = {}
            for p in range(len(data)):  # type: ignore[arg-type]
                n, g, h, perm = data.pair(p)  # type: ignore[attr-defined]
                inverse = np.empty(n, dtype=np.int64)
                inverse[perm] = np.arange(n, dtype=np.int64)
                back = inverse[h]
                order = np.lexsort((back[1], back[0]))
                orders[str(p)] = np.array([n, n], dtype=np.int64)
                base[str(p)] = np.ascontiguousarray(g, dtype=np.int64)
                corrupted[str(p)] = np.ascontiguousarray(back[:, order], dtype=np.int64)
            for kind, tensors in (("orders", orders), ("base-graphs", base), ("corrupted-graphs", corrupted)):
                save_file(tensors, str(stage(folder / f"{split}-{kind}.safetensors")))
    return folder
