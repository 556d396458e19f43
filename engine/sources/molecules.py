"""Molecule sources of the user's own files (``molecules``: a CSV of SMILES or an SDF) and synthetic
molecule-like graphs whose target is structural (``ringmol``).

Both are molecule sources (atom types and a regression target, for downstream tasks) and alignment base datasets
(``gaptui train --base molecules -p path=mols.csv --noise 0.15``).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engine.errors import GaptuiError
from engine.files import fingerprint
from engine.sources.base import MoleculeSet, MoleculeSource, molecule_graph, register_source, seeded_splits
from engine.sources.real import atomic_numbers, first_items, mol_item, rdkit_chem
from engine.user_files import read_user_bytes

MOLECULE_SUFFIXES = (".csv", ".sdf")
#: Words of a split column, and the split each means.
SPLIT_WORDS = {"train": "train", "training": "train", "val": "val", "valid": "val", "validation": "val", "test": "test"}


def check_fractions(name: str, val_fraction: float, test_fraction: float) -> None:
    for key, value in (("val_fraction", val_fraction), ("test_fraction", test_fraction)):
        if not 0 <= value < 1:
            raise GaptuiError(f"--param {key}={value} ({name}): expected a fraction in [0, 1)")
    if val_fraction + test_fraction >= 1:
        raise GaptuiError(
            f"--param val_fraction={val_fraction} and test_fraction={test_fraction} ({name}): "
            "together they leave nothing to train on"
        )


@dataclass(frozen=True)
class MoleculesParams:
    #: A ``.csv`` file with a SMILES column, or an ``.sdf`` file.
    path: str = ""
    #: The CSV column holding SMILES.
    smiles: str = "smiles"
    #: The CSV column or SDF property holding the regression target; empty: no target (alignment only).
    target: str = ""
    #: A CSV column or SDF property naming each molecule's split (train / val / test); empty: seeded splits.
    split: str = ""
    #: Shares of the molecules held out for validation and test when the splits are drawn from the seed.
    val_fraction: float = 0.1
    test_fraction: float = 0.1

    def check(self) -> None:
        check_fractions("molecules", self.val_fraction, self.test_fraction)


@dataclass
class _Record:
    """One molecule record of a file: where it starts, the molecule (or None), and its named fields."""

    line: int
    mol: Any
    fields: dict[str, str]
    #: The SMILES text of a CSV record (None for an SDF block).
    smiles: str | None = None


@register_source
class Molecules(MoleculeSource):
    name = "molecules"
    description = (
        "your molecules: path=FILE.csv (SMILES column `smiles`) or FILE.sdf; target=COLUMN or SDF property; "
        "heavy atoms, atomic numbers; splits from split=COLUMN or seeded"
    )
    Params = MoleculesParams

    def molecules(self, rng: np.random.Generator, root: Path) -> MoleculeSet:
        p = self.params
        path = self._path()
        chem = rdkit_chem(self.name)
        from rdkit import RDLogger

        RDLogger.DisableLog("rdApp.*")  # bad rows are reported once below, not one rdkit message each
        try:
            text = _read_text(path)
            records = self._read_csv(path, text, chem) if path.suffix.lower() == ".csv" else _read_sdf(text, chem)
        finally:
            RDLogger.EnableLog("rdApp.*")
        graphs, rows, labels = [], [], []
        bad: list[tuple[int, int]] = []  # (row, line)
        reasons: dict[str, int] = {}
        for row, rec in enumerate(records):
            reason = self._unreadable(rec)
            if reason:
                bad.append((row, rec.line))
                reasons[reason] = reasons.get(reason, 0) + 1
                continue
            label = SPLIT_WORDS[rec.fields.get(p.split, "").strip().lower()] if p.split else "train"
            target = _number(rec.fields.get(p.target, "")) if p.target else math.nan
            num_atoms, edge_index = mol_item(rec.mol)
            graphs.append(molecule_graph(num_atoms, edge_index, atomic_numbers(rec.mol), target))
            rows.append(row)
            labels.append(label)
        if not graphs:
            why = ", ".join(f"{count} {reason}" for reason, count in reasons.items()) or "the file holds none"
            raise GaptuiError(f"molecules: no readable molecule in {path} ({len(records)} records: {why})")
        notes = []
        if bad:
            why = ", ".join(f"{count} {reason}" for reason, count in reasons.items())
            notes.append(
                f"molecules: skipped {len(bad)} of {len(records)} records of {path.name} ({why}): "
                f"lines {first_items([line for _, line in bad])}"
            )
        if p.split:
            names = np.array(labels)
            splits = {s: np.flatnonzero(names == s) for s in ("train", "val", "test") if (names == s).any()}
            if "train" not in splits or "val" not in splits:
                raise GaptuiError(
                    f"molecules: column '{p.split}' of {path} must name at least one train and one val row"
                )
        else:
            splits = seeded_splits(len(graphs), p.val_fraction, p.test_fraction, rng)
        return MoleculeSet(
            graphs, splits, np.array(rows, dtype=np.int64), [r for r, _ in bad], notes, bool(p.split), p.target or ""
        )

    def check_files(self, root: Path) -> None:
        """Read the file once per content (size and modification time) and params: what :meth:`molecules` refuses
        is refused at planning, with the same line."""
        path = self._path()
        stat = path.stat()
        key = json.dumps([str(path), stat.st_size, stat.st_mtime_ns, dataclasses.asdict(self.params)])
        if key not in _CHECKED:
            try:
                self.molecules(np.random.default_rng(0), root)
                _CHECKED[key] = ""
            except GaptuiError as exc:
                _CHECKED[key] = str(exc)
        if _CHECKED[key]:
            raise GaptuiError(_CHECKED[key])

    def source_files(self, root: Path) -> dict[str, str]:
        try:
            path = self._path()
            return {path.name: fingerprint(path)["sha256"]}
        except (GaptuiError, OSError):
            return {}

    def _path(self) -> Path:
        p = self.params
        if not p.path:
            raise GaptuiError("molecules: name the file with --param path=FILE.csv or path=FILE.sdf")
        path = Path(p.path).expanduser().resolve()
        if not path.is_file():
            raise GaptuiError(f"molecules: {path} {'is not a file' if path.exists() else 'does not exist'}")
        if path.suffix.lower() not in MOLECULE_SUFFIXES:
            raise GaptuiError(f"molecules: {path} is neither a .csv nor an .sdf file")
        return path

    def _unreadable(self, rec: _Record) -> str:
        """Why a record gives no molecule (counted per reason), or "" when it does."""
        p = self.params
        if rec.mol is None or rec.mol.GetNumAtoms() == 0:
            return "unparsable SMILES" if rec.smiles is not None else "unparsable molecule blocks"
        if p.target and math.isnan(_number(rec.fields.get(p.target, ""))):
            return f"with a non-numeric '{p.target}'"
        if p.split and rec.fields.get(p.split, "").strip().lower() not in SPLIT_WORDS:
            return f"with a '{p.split}' that is not train / val / test"
        return ""

    def _read_csv(self, path: Path, text: str, chem: Any) -> list[_Record]:
        col = self.params.smiles
        reader = csv.DictReader(io.StringIO(text, newline=""))
        header = reader.fieldnames or []
        for key, value in (("smiles", col), ("target", self.params.target), ("split", self.params.split)):
            if value and value not in header:
                raise GaptuiError(
                    f"molecules: --param {key}={value}: {path} has no column '{value}' (columns: {', '.join(header)})"
                )
        records = []
        line = reader.line_num + 1
        for fields in reader:
            smiles = (fields.get(col) or "").strip()
            records.append(_Record(line, chem.MolFromSmiles(smiles) if smiles else None, fields, smiles))
            line = reader.line_num + 1
        return records


#: Planning-time checks of molecule files already made: key (file, size, mtime, params) -> error ("" when fine).
_CHECKED: dict[str, str] = {}


def _read_text(path: Path) -> str:
    """The text of a molecule file: UTF-8 (a byte-order mark dropped); binary or other encodings refused."""
    raw = read_user_bytes(path, "a molecule file is a CSV or SDF text file")
    if b"\x00" in raw[:8192]:
        raise GaptuiError(f"molecules: {path} is a binary file, not {path.suffix.lower()[1:].upper()} text")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise GaptuiError(f"molecules: {path} is not UTF-8 text (byte {exc.start}); save it as UTF-8") from None


def _read_sdf(text: str, chem: Any) -> list[_Record]:
    lines = text.splitlines()
    records = []
    start = 0
    for i, line in enumerate(lines + ["$$$$"]):
        if line.strip() != "$$$$":
            continue
        block = lines[start:i]
        if any(s.strip() for s in block):
            mol_end = next((j for j, s in enumerate(block) if s.startswith("M  END")), len(block) - 1)
            molblock = "\n".join(block[: mol_end + 1])
            mol = chem.MolFromMolBlock(molblock, removeHs=True)
            records.append(_Record(start + 1, mol, _sdf_fields(block[mol_end + 1 :])))
        start = i + 1
    return records


def _sdf_fields(lines: list[str]) -> dict[str, str]:
    """The data items after a molfile's ``M  END``: ``> <name>`` then its value lines, up to a blank line."""
    out: dict[str, str] = {}
    name = None
    for text in lines:
        if text.startswith(">"):
            lo, hi = text.find("<"), text.find(">", text.find("<") + 1)
            name = text[lo + 1 : hi] if 0 <= lo < hi else None
            if name is not None:
                out[name] = ""
        elif name is not None and text.strip():
            out[name] = (out[name] + "\n" + text).strip()
        elif not text.strip():
            name = None
    return out


def _number(text: str) -> float:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return math.nan
    return value if math.isfinite(value) else math.nan


@dataclass(frozen=True)
class RingmolParams:
    #: Atoms per molecule (all carbon).
    n: int = 20
    #: Largest number of six-membered rings per molecule; each molecule draws 0..max_rings uniformly.
    max_rings: int = 2
    #: Molecules generated.
    count: int = 1000
    val_fraction: float = 0.1
    test_fraction: float = 0.1

    def check(self) -> None:
        if self.max_rings < 0 or self.count < 3:
            raise GaptuiError(f"ringmol: expected max_rings >= 0 and count >= 3, got {self.max_rings} and {self.count}")
        if self.n < 6 * self.max_rings + 1:
            raise GaptuiError(
                f"--param n={self.n} (ringmol): {self.max_rings} rings need at least {6 * self.max_rings + 1} atoms"
            )
        check_fractions("ringmol", self.val_fraction, self.test_fraction)


@register_source
class RingMolecules(MoleculeSource):
    """Molecule-like graphs whose target is purely structural: a chain of carbons with k six-membered rings hanging
    off random chain atoms (one bond each), ``n`` atoms in all, every atom of the same type; target = k.

    Every molecule has ``n`` atoms, so the share of ring atoms determines k: a mean-pooled model can read it
    from positional encodings, while without them it sees ``n`` identical tokens and can only predict a constant.
    """

    name = "ringmol"
    description = "synthetic molecule-like graphs: a carbon chain with 0..max_rings 6-rings attached; target = rings"
    Params = RingmolParams

    @classmethod
    def size_hint(cls, params: Any) -> tuple[float, float, bool] | None:
        # n - 1 chain and ring bonds plus one bond per ring, max_rings / 2 rings on average
        return float(params.n), 2 * (params.n - 1 + params.max_rings / 2) / params.n, False

    @classmethod
    def count_hint(cls, params: Any) -> int | None:
        return int(params.count)

    def molecules(self, rng: np.random.Generator, root: Path) -> MoleculeSet:
        p = self.params
        graphs = []
        for _ in range(p.count):
            k = int(rng.integers(p.max_rings + 1))
            chain = p.n - 6 * k
            edges = [(i, i + 1) for i in range(chain - 1)]
            for r in range(k):
                first = chain + 6 * r
                edges += [(first + j, first + (j + 1) % 6) for j in range(6)]
                edges.append((int(rng.integers(chain)), first))
            edge_index = np.array(edges, dtype=np.int64).reshape(-1, 2).T
            graphs.append(molecule_graph(p.n, edge_index, np.full(p.n, 6), float(k)))
        splits = seeded_splits(p.count, p.val_fraction, p.test_fraction, rng)
        return MoleculeSet(graphs, splits, np.arange(p.count, dtype=np.int64), target_name="rings")
