"""PCQM4Mv2: molecules read from the OGB-LSC SMILES file through RDKit, sampled by the official split."""

from __future__ import annotations

import csv
import gzip
import pickle
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from engine.errors import GaptuiError
from engine.sources.base import (
    BaseSplits,
    MoleculeSet,
    MoleculeSource,
    NormalisationReport,
    graphs_from_edge_lists,
    molecule_graph,
    register_source,
    split_counts,
)
from engine.sources.fetch import (
    RawFiles,
    download_zip,
    error_reason,
    fetch_raw,
    first_items,
    pick,
)

PCQM4MV2_URL = "https://dgl-data.s3-accelerate.amazonaws.com/dataset/OGB-LSC/pcqm4m-v2.zip"


# PCQM4Mv2: read the raw OGB-LSC files directly; PyG's and OGB's dataset classes convert all 3.7M molecules.


def rdkit_chem(source: str = "pcqm4mv2", extra: str = "rdkit") -> Any:
    """``rdkit.Chem``, or a GaptuiError saying that ``source`` needs it and which extra installs it."""
    try:
        from rdkit import Chem
    except ImportError:
        raise GaptuiError(f"{source} needs rdkit to read SMILES: pip install 'gaptui[{extra}]'") from None
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
        raise GaptuiError(f"pcqm4mv2: cannot read {path}: {error_reason(Exception(detail))}") from exc
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
    #: Molecules sampled for downstream regression (the graph alignment paper, appendix F.1: the PCQM4Mv2 subset).
    molecule_sizes = (20000, 2000)

    def check_files(self, root: Path) -> None:
        folder = root / self.name / "pcqm4m-v2"
        RawFiles(folder, PCQM4MV2_FILES, lambda: PCQM4MV2_URL).check(self.name)
        rdkit_chem()  # read SMILES with: every run would fail without it

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
