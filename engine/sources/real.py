"""Real base graphs: molecules (AQSOL, ZINC, PCQM4Mv2) and BFS samples of large networks (CoraFull, ogbn-arxiv).

Only structure is kept: node and edge features, targets and labels are dropped. Each dataset lives in its own
folder ``<data root>/<source name>/``, which is the folder handed to the PyG / OGB loader as its ``root``.

Raw files that are missing are downloaded (PyG does it for AQSOL, ZINC and CoraFull; this module for the OGB
files) unless ``GAPTUI_OFFLINE=1``; when they are missing and cannot be fetched the loader raises one
:class:`GaptuiError` line naming the files to place and the folder to place them in. Every socket operation of a
download is bounded by :data:`DOWNLOAD_TIMEOUT_S`, so a machine without network fails fast instead of hanging.

torch_geometric, rdkit and the OGB files are touched only inside :meth:`Source.load`, so importing this module
(and with it the registry) stays cheap.
"""

from __future__ import annotations

import csv
import gzip
import http.client
import os
import pickle
import shutil
import socket
import urllib.request
import zipfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from engine.cache import discard
from engine.errors import GaptuiError
from engine.graphs import Graph
from engine.sampling import bfs_subgraphs
from engine.sources.base import (
    BaseSplits,
    MoleculeSet,
    MoleculeSource,
    NormalisationReport,
    Source,
    graphs_from_edge_lists,
    molecule_graph,
    register_source,
    split_counts,
)

#: Seconds any single socket operation (connect, read) of a download may block.
DOWNLOAD_TIMEOUT_S = 20.0

#: What a failed or interrupted download raises: socket / URL errors (OSError), broken HTTP responses, and
#: truncated archives.
NETWORK_ERRORS: tuple[type[BaseException], ...] = (OSError, http.client.HTTPException, zipfile.BadZipFile, EOFError)

PCQM4MV2_URL = "https://dgl-data.s3-accelerate.amazonaws.com/dataset/OGB-LSC/pcqm4m-v2.zip"
OGBN_ARXIV_URL = "http://snap.stanford.edu/ogb/data/nodeproppred/arxiv.zip"


def offline() -> bool:
    """Whether downloads are switched off (``GAPTUI_OFFLINE`` set to 1 / true / yes / on)."""
    return os.environ.get("GAPTUI_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


@contextmanager
def socket_timeout(seconds: float = DOWNLOAD_TIMEOUT_S) -> Iterator[None]:
    """Bound every blocking socket call made inside the block (PyG's ``urlopen`` passes no timeout itself).

    The default timeout is process-wide, so it is restored on exit.
    """
    old = socket.getdefaulttimeout()
    socket.setdefaulttimeout(seconds)
    try:
        yield
    finally:
        socket.setdefaulttimeout(old)


def missing_files(folder: Path, files: Sequence[str]) -> list[str]:
    """The names among ``files`` that do not exist in ``folder``, in the given order."""
    return [f for f in files if not (folder / f).is_file()]


def missing_error(name: str, folder: Path, missing: Sequence[str], why: str) -> GaptuiError:
    """The one-line error for raw files that are absent and could not be fetched."""
    return GaptuiError(f"{name}: raw files missing {why}: place {', '.join(missing)} in {folder}")


def check_download_allowed(name: str, folder: Path, files: Sequence[str]) -> list[str]:
    """Return the missing raw files, raising when a download must not be attempted.

    A download is refused when ``GAPTUI_OFFLINE`` is set, and when some of the files are already there: PyG's
    downloaders delete the raw folder first, which would throw away files the user placed by hand.
    """
    missing = missing_files(folder, files)
    if missing and offline():
        raise missing_error(name, folder, missing, "and downloads are off (GAPTUI_OFFLINE=1)")
    if missing and len(missing) < len(files):
        raise missing_error(name, folder, missing, "(not downloading: that would replace the files already there)")
    return missing


@contextmanager
def _cleanup_on_failure(folder: Path) -> Iterator[None]:
    """Remove files and folders created directly in ``folder`` when the block fails.

    A download interrupted half way leaves a truncated archive that PyG would otherwise reuse on the next run.
    """
    folder.mkdir(parents=True, exist_ok=True)
    before = set(os.listdir(folder))
    try:
        yield
    except BaseException:
        for entry in set(os.listdir(folder)) - before:
            path = folder / entry
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        raise


def download_zip(url: str, into: Path) -> None:
    """Download the zip archive at ``url`` and extract it into ``into`` (the archive itself is not kept)."""
    into.mkdir(parents=True, exist_ok=True)
    archive = into / (url.rpartition("/")[2] or "download.zip")
    with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response, open(archive, "wb") as out:
        shutil.copyfileobj(response, out, length=1 << 20)
    try:
        with zipfile.ZipFile(archive) as zf:
            zf.extractall(into)
    finally:
        archive.unlink(missing_ok=True)


def fetch_raw(name: str, folder: Path, files: Sequence[str], dataset_dir: Path, download: Callable[[], None]) -> None:
    """Make sure ``files`` exist in ``folder``, calling ``download`` (with bounded sockets) when none do."""
    missing = check_download_allowed(name, folder, files)
    if not missing:
        return
    try:
        with socket_timeout(), _cleanup_on_failure(dataset_dir):
            download()
    except NETWORK_ERRORS as exc:
        raise missing_error(name, folder, missing, f"and the download failed ({_reason(exc)})") from exc
    still = missing_files(folder, files)
    if still:
        raise missing_error(name, folder, still, "(the download did not provide them)")


def first_items(rows: Sequence[int], count: int = 5) -> str:
    """The first ``count`` of ``rows``, comma-separated, with an ellipsis when there are more."""
    shown = ", ".join(str(r) for r in rows[:count])
    return shown + (", ..." if len(rows) > count else "")


def _reason(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return " ".join(text.split())[:200]


def open_pyg(name: str, folder: Path, files: Sequence[str], dataset_dir: Path, make: Callable[[], Any]) -> Any:
    """Construct a PyG dataset whose raw files are ``files`` in ``folder``.

    The constructor downloads missing raw files itself (only allowed when none are present and not offline)
    and processes them into ``processed/`` once; network and unreadable-file errors become one-line errors. A
    ``processed/`` folder that cannot be read (a truncated or altered file) is moved aside with one warning and
    the raw files processed again.
    """
    missing = check_download_allowed(name, folder, files)
    try:
        return _construct(name, folder, missing, dataset_dir, make)
    except UNREADABLE as exc:
        processed = dataset_dir / "processed"
        if not processed.is_dir():
            raise GaptuiError(f"{name}: cannot read the raw files in {folder}: {_reason(exc)}") from exc
        discard(processed, f"{name}'s processed cache", _reason(exc), then="processing the raw files again")
    try:
        return _construct(name, folder, missing, dataset_dir, make)
    except UNREADABLE as exc:
        raise GaptuiError(f"{name}: cannot read the raw files in {folder}: {_reason(exc)}") from exc


#: What constructing a PyG dataset from damaged raw or processed files raises (``torch.load``: RuntimeError).
UNREADABLE = (*NETWORK_ERRORS, pickle.UnpicklingError, RuntimeError)


def _construct(name: str, folder: Path, missing: list[str], dataset_dir: Path, make: Callable[[], Any]) -> Any:
    try:
        with socket_timeout(), _cleanup_on_failure(dataset_dir):
            return make()
    except NETWORK_ERRORS as exc:
        if missing:
            raise missing_error(name, folder, missing, f"and the download failed ({_reason(exc)})") from exc
        raise


def pyg_item(data: Any, label: str) -> tuple[int, np.ndarray]:
    """``(num_nodes, edge_index [2, E])`` of one PyG ``Data`` object; everything else is dropped."""
    edge_index = getattr(data, "edge_index", None)
    num_nodes = getattr(data, "num_nodes", None)
    if edge_index is None or num_nodes is None:
        raise GaptuiError(f"{label} has no edge_index or no node count: not a homogeneous PyG graph")
    return int(num_nodes), edge_index.detach().cpu().numpy()


def pick(available: int, count: int, rng: np.random.Generator) -> np.ndarray:
    """Sorted indices of ``count`` of ``available`` items: the same draws as :func:`engine.sources.base.subset`."""
    if count >= available:
        return np.arange(available)
    return np.sort(rng.choice(available, size=count, replace=False))


def _molecule_splits(
    name: str, train_ds: Any, val_ds: Any, n_train: int | None, n_val: int | None, rng: np.random.Generator
) -> BaseSplits:
    """Base splits from the official train / validation splits of a PyG molecule dataset."""
    n_train, n_val = split_counts(name, len(train_ds), len(val_ds), n_train, n_val)
    # Pick indices before converting: a split may hold far more molecules than were asked for.
    train_idx = pick(len(train_ds), n_train, rng)
    val_idx = pick(len(val_ds), n_val, rng)
    chosen = [(train_ds, "train", int(i)) for i in train_idx] + [(val_ds, "val", int(i)) for i in val_idx]
    labels = [f"{name} {split} graph {i}" for _, split, i in chosen]
    items = [pyg_item(ds[i], label) for (ds, _, i), label in zip(chosen, labels, strict=True)]
    # Molecules without bonds (single ions, salts) are kept here and left out of alignment pairs, counted.
    graphs, report = graphs_from_edge_lists(items, labels, keep_empty=True)
    return BaseSplits(graphs[:n_train], graphs[n_train:], report)


def pyg_molecules(name: str, splits: dict[str, Any], target_name: str) -> MoleculeSet:
    """A :class:`MoleculeSet` from the official splits of a PyG molecule dataset (``x``: atom type ids).

    Molecules are numbered split by split (train, val, test) in the dataset's order; ``rows`` are those numbers.
    """
    graphs = []
    index: dict[str, np.ndarray] = {}
    for split, ds in splits.items():
        start = len(graphs)
        for i in range(len(ds)):
            data = ds[i]
            num_nodes, edge_index = pyg_item(data, f"{name} {split} graph {i}")
            types = data.x.detach().cpu().numpy().reshape(num_nodes, -1)[:, 0]
            graphs.append(molecule_graph(num_nodes, edge_index, types, float(data.y.reshape(-1)[0])))
        index[split] = np.arange(start, len(graphs), dtype=np.int64)
    return MoleculeSet(graphs, index, np.arange(len(graphs), dtype=np.int64), official=True, target_name=target_name)


AQSOL_FILES = ("train.pickle", "val.pickle", "test.pickle", "atom_dict.pickle", "bond_dict.pickle")


@register_source
class AqSol(MoleculeSource):
    name = "aqsol"
    description = (
        "AQSOL molecules (heavy atoms, bonds; atom types, solubility), official train / val / test splits: "
        "7,836 / 998 in the paper"
    )

    def molecules(self, rng: np.random.Generator, root: Path) -> MoleculeSet:
        from torch_geometric.datasets import AQSOL

        folder = root / self.name

        def make() -> dict[str, Any]:
            return {split: AQSOL(str(folder), split=split) for split in ("train", "val", "test")}

        return pyg_molecules(self.name, open_pyg(self.name, folder / "raw", AQSOL_FILES, folder, make), "solubility")

    def load(self, n_train: int | None, n_val: int | None, rng: np.random.Generator, root: Path) -> BaseSplits:
        from torch_geometric.datasets import AQSOL

        folder = root / self.name

        def make() -> tuple[Any, Any]:
            return AQSOL(str(folder), split="train"), AQSOL(str(folder), split="val")

        train_ds, val_ds = open_pyg(self.name, folder / "raw", AQSOL_FILES, folder, make)
        return _molecule_splits(self.name, train_ds, val_ds, n_train, n_val, rng)


ZINC_FILES = ("train.pickle", "val.pickle", "test.pickle", "train.index", "val.index", "test.index")


@dataclass(frozen=True)
class ZincParams:
    #: The 12k-molecule subset (10,000 train / 1,000 val) instead of the full 250k.
    subset: bool = True


@register_source
class Zinc(MoleculeSource):
    name = "zinc"
    description = (
        "ZINC molecules (heavy atoms, bonds; atom types, constrained solubility), official train / val / test "
        "splits; subset=true is the 12k subset"
    )
    Params = ZincParams

    def molecules(self, rng: np.random.Generator, root: Path) -> MoleculeSet:
        from torch_geometric.datasets import ZINC

        folder = root / self.name
        keep = self.params.subset

        def make() -> dict[str, Any]:
            return {split: ZINC(str(folder), subset=keep, split=split) for split in ("train", "val", "test")}

        return pyg_molecules(self.name, open_pyg(self.name, folder / "raw", ZINC_FILES, folder, make), "penalized logP")

    def load(self, n_train: int | None, n_val: int | None, rng: np.random.Generator, root: Path) -> BaseSplits:
        from torch_geometric.datasets import ZINC

        folder = root / self.name
        keep = self.params.subset

        def make() -> tuple[Any, Any]:
            return ZINC(str(folder), subset=keep, split="train"), ZINC(str(folder), subset=keep, split="val")

        train_ds, val_ds = open_pyg(self.name, folder / "raw", ZINC_FILES, folder, make)
        return _molecule_splits(self.name, train_ds, val_ds, n_train, n_val, rng)


# ---------------------------------------------------------------------------------------------------------------
# PCQM4Mv2: read the raw OGB-LSC files directly; PyG's and OGB's dataset classes convert all 3.7M molecules.


def rdkit_chem() -> Any:
    """``rdkit.Chem``, or a GaptuiError saying how to install it."""
    try:
        from rdkit import Chem
    except ImportError:
        raise GaptuiError("pcqm4mv2 needs rdkit to read SMILES: pip install 'gaptui[rdkit]'") from None
    return Chem


def mol_item(mol: Any) -> tuple[int, np.ndarray]:
    """``(heavy atoms, edge_index [2, 2 * bonds])`` of an rdkit molecule (hydrogens already removed).

    Both directions of every bond are listed (as OGB's ``smiles2graph`` does), so normalisation has nothing to
    report for a well-formed molecule.
    """
    bonds = np.array([(b.GetBeginAtomIdx(), b.GetEndAtomIdx()) for b in mol.GetBonds()], dtype=np.int64).reshape(-1, 2)
    return mol.GetNumAtoms(), np.concatenate([bonds, bonds[:, ::-1]], axis=0).T


def atomic_numbers(mol: Any) -> np.ndarray:
    """Atom types of an rdkit molecule in its atom order: the atomic numbers, int64 ``[atoms]``."""
    return np.array([a.GetAtomicNum() for a in mol.GetAtoms()], dtype=np.int64)


def smiles_item(chem: Any, smiles: str) -> tuple[int, np.ndarray] | None:
    """``(heavy atoms, edge_index [2, 2 * bonds])`` of a SMILES string, or None when rdkit cannot parse it."""
    mol = chem.MolFromSmiles(smiles)
    return None if mol is None else mol_item(mol)


def read_smiles(path: Path, rows: set[int]) -> dict[int, str]:
    """The SMILES of the given data rows (0-based, header excluded) of OGB's ``data.csv.gz``."""
    return {row: values[0] for row, values in read_columns(path, rows, ("smiles",)).items()}


def read_columns(path: Path, rows: set[int], columns: Sequence[str]) -> dict[int, list[str]]:
    """The values of ``columns`` in the given data rows (0-based, header excluded) of OGB's ``data.csv.gz``.

    Streams the file and stops after the last wanted row, so only the sampled molecules are ever parsed.
    """
    out: dict[int, list[str]] = {}
    if not rows:
        return out
    last = max(rows)
    with gzip.open(path, "rt", newline="") as f:
        header = next(csv.reader([f.readline()]), [])
        absent = [c for c in columns if c not in header]
        if absent:
            raise GaptuiError(f"pcqm4mv2: {path} has no '{absent[0]}' column in its header (got {header})")
        cols = [header.index(c) for c in columns]
        for row, line in enumerate(f):
            if row in rows:
                values = next(csv.reader([line]))
                out[row] = [values[c] for c in cols]
                if row >= last:
                    break
    if len(out) < len(rows):
        raise GaptuiError(f"pcqm4mv2: split_dict.pt refers to row {last} but {path} has fewer rows")
    return out


def load_split_dict(path: Path) -> dict[str, np.ndarray]:
    """OGB's ``split_dict.pt``: split name -> int64 row indices into ``data.csv.gz``.

    OGB writes numpy arrays (its PyG loader converts them to tensors after loading), which ``torch.load``'s
    weights-only unpickler refuses by default; allow exactly what int arrays need, under both the numpy 1 and
    the numpy 2 module names, instead of turning the safe unpickler off. Tensors load as they are.
    """
    import torch

    reconstruct = np.array(0).__reduce__()[0]  # numpy's array-rebuild function, whatever its module path
    allowed: list[Any] = [
        reconstruct,
        (reconstruct, "numpy.core.multiarray._reconstruct"),
        (reconstruct, "numpy._core.multiarray._reconstruct"),
        np.ndarray,
        np.dtype,
        bytes,  # an array's raw buffer
    ]
    allowed += [type(np.dtype(t)) for t in (np.int64, np.int32)]
    try:
        with torch.serialization.safe_globals(allowed):
            raw = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, OSError) as exc:
        # torch's message is a page long; its last sentence names what the file holds that was refused.
        text = str(exc)
        detail = text[text.find("WeightsUnpickler error:") :] if "WeightsUnpickler error:" in text else text
        raise GaptuiError(f"pcqm4mv2: cannot read {path}: {_reason(Exception(detail))}") from exc
    if not isinstance(raw, dict) or "train" not in raw or "valid" not in raw:
        raise GaptuiError(f"pcqm4mv2: {path} is not OGB's split dict (expected keys 'train' and 'valid')")
    return {str(k): np.asarray(v, dtype=np.int64).reshape(-1) for k, v in raw.items()}


PCQM4MV2_FILES = ("raw/data.csv.gz", "split_dict.pt")


@dataclass
class _Draw:
    """Sampling state of one split: its candidate rows in random order, how far they were used, rows kept."""

    rows: np.ndarray
    want: int
    pos: int = 0
    kept: list[int] = field(default_factory=list)


def sample_molecules(
    csv_path: Path, splits: list[tuple[np.ndarray, int]], rng: np.random.Generator
) -> tuple[list[list[int]], dict[int, tuple[int, np.ndarray]], NormalisationReport]:
    """Draw ``count`` molecules with at least one bond from each ``(rows, count)`` split, without replacement.

    Each split's rows are walked in one random order; molecules without bonds (an alignment pair needs edges)
    and SMILES rdkit cannot parse are skipped and replaced by the next candidates. A few spare candidates are
    read along, so one pass over ``data.csv.gz`` is the norm. Returns the kept rows of each split (sorted), their
    ``(num_nodes, edge_index)`` items, and a report whose notes count the skipped molecules.
    """
    chem = rdkit_chem()
    from rdkit import RDLogger

    draws = [_Draw(rows[rng.permutation(rows.size)], count) for rows, count in splits]
    items: dict[int, tuple[int, np.ndarray]] = {}
    no_bonds = unparsable = 0
    RDLogger.DisableLog("rdApp.*")  # skipped molecules are counted in the report, not printed one by one
    try:
        while any(len(d.kept) < d.want for d in draws):
            batches = []
            for d in draws:
                need = d.want - len(d.kept)
                batch = d.rows[d.pos : d.pos + need + (max(16, need // 50) if need else 0)]
                if need and batch.size == 0:
                    raise GaptuiError(f"pcqm4mv2: the split holds fewer than {d.want} molecules with bonds")
                d.pos += batch.size
                batches.append(batch)
            smiles = read_smiles(csv_path, {int(r) for b in batches for r in b})
            for d, batch in zip(draws, batches, strict=True):
                for r in batch.tolist():
                    if len(d.kept) == d.want:
                        break
                    item = smiles_item(chem, smiles[r])
                    if item is None:
                        unparsable += 1
                    elif item[1].shape[1] == 0:
                        no_bonds += 1
                    else:
                        items[r] = item
                        d.kept.append(r)
    finally:
        RDLogger.EnableLog("rdApp.*")
    report = NormalisationReport()
    if no_bonds or unparsable:
        report.notes.append(
            f"pcqm4mv2: skipped {no_bonds} molecules without bonds and {unparsable} SMILES rdkit could not parse"
        )
    return [sorted(d.kept) for d in draws], items, report


@register_source
class Pcqm4mV2(MoleculeSource):
    """PCQM4Mv2 (OGB-LSC), read from OGB's raw files; only the sampled SMILES are converted with rdkit.

    Layout as OGB's ``PCQM4Mv2Dataset(root=<root>/pcqm4mv2)`` expects it:
    ``<root>/pcqm4mv2/pcqm4m-v2/raw/data.csv.gz`` (columns idx, smiles, homolumogap) and
    ``<root>/pcqm4mv2/pcqm4m-v2/split_dict.pt`` (split name -> row indices).
    """

    name = "pcqm4mv2"
    description = (
        "PCQM4Mv2 molecules (heavy atoms, bonds) sampled from the OGB-LSC train / valid splits; as molecules: "
        "20,000 / 2,000 sampled, atomic numbers, HOMO-LUMO gap (eV)"
    )
    sizes = (35000, 2000)
    #: Molecules sampled for downstream regression (seed 000, appendix F.1: the PCQM4Mv2 subset).
    molecule_sizes = (20000, 2000)

    def split_dict(self, root: Path) -> tuple[Path, dict[str, np.ndarray]]:
        """The folder of the raw files (fetched unless offline) and OGB's split dict."""
        dataset_dir = root / self.name
        folder = dataset_dir / "pcqm4m-v2"
        fetch_raw(self.name, folder, PCQM4MV2_FILES, dataset_dir, lambda: download_zip(PCQM4MV2_URL, dataset_dir))
        return folder, load_split_dict(folder / "split_dict.pt")

    def molecules(self, rng: np.random.Generator, root: Path) -> MoleculeSet:
        from rdkit import RDLogger

        chem = rdkit_chem()
        folder, split = self.split_dict(root)
        # The subset's sizes, or whole splits when they hold fewer molecules (small fixtures, custom files).
        n_train, n_val = (
            min(want, split[name].size) for want, name in zip(self.molecule_sizes, ("train", "valid"), strict=True)
        )
        picked = {"train": pick(split["train"].size, n_train, rng), "val": pick(split["valid"].size, n_val, rng)}
        wanted = {"train": split["train"][picked["train"]], "val": split["valid"][picked["val"]]}
        values = read_columns(
            folder / "raw" / "data.csv.gz",
            {int(r) for rows in wanted.values() for r in rows},
            ("smiles", "homolumogap"),
        )
        graphs, rows, skipped = [], [], []
        index: dict[str, np.ndarray] = {}
        RDLogger.DisableLog("rdApp.*")  # unparsable SMILES are counted once below, not printed one by one
        try:
            for name, split_rows in wanted.items():
                start = len(graphs)
                for r in sorted(int(x) for x in split_rows):
                    smiles, gap = values[r]
                    mol = chem.MolFromSmiles(smiles)
                    if mol is None:
                        skipped.append(r)
                        continue
                    num_atoms, edge_index = mol_item(mol)
                    graphs.append(molecule_graph(num_atoms, edge_index, atomic_numbers(mol), float(gap)))
                    rows.append(r)
                index[name] = np.arange(start, len(graphs), dtype=np.int64)
        finally:
            RDLogger.EnableLog("rdApp.*")
        notes = []
        if skipped:
            notes.append(
                f"{self.name}: skipped {len(skipped)} SMILES rdkit could not parse (rows {first_items(skipped)})"
            )
        return MoleculeSet(graphs, index, np.array(rows, dtype=np.int64), skipped, notes, True, "HOMO-LUMO gap (eV)")

    def load(self, n_train: int | None, n_val: int | None, rng: np.random.Generator, root: Path) -> BaseSplits:
        folder, split = self.split_dict(root)
        n_train = self.sizes[0] if n_train is None else n_train
        n_val = self.sizes[1] if n_val is None else n_val
        n_train, n_val = split_counts(self.name, split["train"].size, split["valid"].size, n_train, n_val)
        (train_rows, val_rows), items, notes = sample_molecules(
            folder / "raw" / "data.csv.gz", [(split["train"], n_train), (split["valid"], n_val)], rng
        )
        rows = train_rows + val_rows
        graphs, report = graphs_from_edge_lists([items[r] for r in rows], [f"{self.name} row {r}" for r in rows])
        report.notes.extend(notes.notes)
        return BaseSplits(graphs[:n_train], graphs[n_train:], report)


# ---------------------------------------------------------------------------------------------------------------
# One large graph -> independent BFS samples for the train and validation splits.


@dataclass(frozen=True)
class BfsParams:
    #: Nodes per BFS-sampled subgraph (the paper's N' = 100).
    order: int = 100

    def check(self) -> None:
        if self.order < 2:
            raise GaptuiError(f"--param order={self.order}: a BFS sample needs at least 2 nodes")


class _LargeGraph(Source):
    """A single large graph; train and validation graphs are independent BFS samples of ``order`` nodes."""

    Params = BfsParams
    noise_model = "add_remove"
    sizes = (5000, 500)

    def big_graph(self, root: Path) -> tuple[Graph, NormalisationReport]:
        raise NotImplementedError

    def load(self, n_train: int | None, n_val: int | None, rng: np.random.Generator, root: Path) -> BaseSplits:
        n_train = self.sizes[0] if n_train is None else n_train
        n_val = self.sizes[1] if n_val is None else n_val
        graph, report = self.big_graph(root)
        train = bfs_subgraphs(graph, self.params.order, n_train, rng)
        val = bfs_subgraphs(graph, self.params.order, n_val, rng)
        return BaseSplits(train, val, report)


@register_source
class CoraFullSource(_LargeGraph):
    name = "corafull"
    description = "CoraFull citation graph (19,793 nodes), BFS-sampled subgraphs of `order` nodes"

    def big_graph(self, root: Path) -> tuple[Graph, NormalisationReport]:
        from torch_geometric.datasets import CoraFull

        folder = root / self.name
        dataset = open_pyg(self.name, folder / "cora" / "raw", ("cora.npz",), folder, lambda: CoraFull(str(folder)))
        graphs, report = graphs_from_edge_lists([pyg_item(dataset[0], self.name)], [self.name])
        return graphs[0], report


def read_int_csv_gz(path: Path) -> np.ndarray:
    """An OGB raw ``*.csv.gz`` table of integers (no header) as an int64 array ``[rows, columns]``."""
    try:
        with gzip.open(path, "rt") as f:
            return np.loadtxt(f, delimiter=",", dtype=np.int64, ndmin=2)
    except (OSError, EOFError, ValueError) as exc:
        raise GaptuiError(f"cannot read {path}: {_reason(exc)}") from exc


OGBN_ARXIV_FILES = ("edge.csv.gz", "num-node-list.csv.gz")


def _fetch_arxiv(dataset_dir: Path) -> None:
    # The archive unpacks to arxiv/; OGB renames it to the dataset's folder name, ogbn_arxiv/.
    download_zip(OGBN_ARXIV_URL, dataset_dir)
    target = dataset_dir / "ogbn_arxiv"
    if target.exists():
        shutil.rmtree(target)
    (dataset_dir / "arxiv").rename(target)


@register_source
class OgbnArxiv(_LargeGraph):
    """ogbn-arxiv, read from OGB's raw files.

    OGB's ``PygNodePropPredDataset`` is not used: importing ``ogb`` starts a PyPI version check on a thread, its
    downloader and dataset-update check may prompt with ``input()``, and it ``torch.load``s its processed file
    without ``weights_only=False``, which fails on torch >= 2.6. The raw layout is the one OGB uses, so a folder
    OGB already downloaded works as is: ``<root>/ogbn-arxiv/ogbn_arxiv/raw/{edge,num-node-list}.csv.gz``.
    The citation edges are directed; they are taken as undirected and the report counts them as symmetrised.
    """

    name = "ogbn-arxiv"
    description = "ogbn-arxiv citation graph (169,343 nodes, as undirected), BFS-sampled subgraphs of `order` nodes"

    def big_graph(self, root: Path) -> tuple[Graph, NormalisationReport]:
        dataset_dir = root / self.name
        raw = dataset_dir / "ogbn_arxiv" / "raw"
        fetch_raw(self.name, raw, OGBN_ARXIV_FILES, dataset_dir, lambda: _fetch_arxiv(dataset_dir))
        num_nodes = read_int_csv_gz(raw / "num-node-list.csv.gz").reshape(-1)
        if num_nodes.size != 1:
            raise GaptuiError(f"{self.name}: {raw / 'num-node-list.csv.gz'} should hold one node count")
        edges = read_int_csv_gz(raw / "edge.csv.gz")
        if edges.size and edges.shape[1] != 2:
            raise GaptuiError(f"{self.name}: {raw / 'edge.csv.gz'} should have two columns (source, target)")
        graphs, report = graphs_from_edge_lists([(int(num_nodes[0]), edges.reshape(-1, 2).T)], [self.name])
        return graphs[0], report
