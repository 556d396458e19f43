"""Real molecules with no download: MOSES (``moses``, from the molsets wheel) and QM9 (``qm9``, from qm9pack).

Both wheels carry their data (:mod:`engine.sources.packaged` finds it without importing them); only a seeded subset
is converted through RDKit by default, and the molecule dataset is then cached like any other.

- **MOSES** (molsets 0.3.1, MIT; Polykovskiy et al., "Molecular Sets (MOSES)", Frontiers in Pharmacology 2020):
  1,936,962 SMILES of drug-like molecules filtered from ZINC Clean Leads, in ``moses/dataset/data/`` as three
  gzipped CSVs with one ``SMILES`` column: ``train.csv.gz`` (1,584,663), ``test.csv.gz`` (176,074) and
  ``test_scaffolds.csv.gz`` (176,225, scaffolds absent from train). The subset draws ``train`` molecules from
  train, ``val`` from test and ``test`` from ``test_split`` (test or test_scaffolds; disjoint from val). MOSES has
  no target: ``target`` computes one with RDKit, ``penalized_logp`` by default (Crippen logP minus the synthetic
  accessibility score minus the size of the largest ring beyond six atoms, the ZINC benchmark's target), or
  ``logp``, ``qed``, ``none``. Rows are numbered over train, test and test_scaffolds in that order.
- **QM9** (qm9pack 1.0.3, MIT; Ramakrishnan et al., "Quantum chemistry structures and properties of 134 kilo
  molecules", Scientific Data 2014): 130,831 molecules in ``qm9pack/data/qm9_part1.csv`` .. ``qm9_part3.csv``
  (a ``SMILES`` column and the DFT properties, e.g. ``HOMO_LUMO_gap_au`` in Hartree). The subset draws ``count``
  molecules; splits are drawn from the seed. Rows are numbered over the three parts in order.
"""

from __future__ import annotations

import csv
import gzip
import importlib.util
import io
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engine.errors import GaptuiError, did_you_mean
from engine.sources.base import MoleculeSet, MoleculeSource, molecule_graph, register_source, seeded_splits
from engine.sources.fetch import first_items
from engine.sources.molecules import check_fractions
from engine.sources.packaged import PackagedData
from engine.sources.pcqm import atomic_numbers, mol_item, rdkit_chem

MOSES_FILES = ("train.csv.gz", "test.csv.gz", "test_scaffolds.csv.gz")
MOSES = PackagedData(
    source="moses",
    distribution="molsets",
    folder="moses/dataset/data",
    files=MOSES_FILES,
    install=(
        "pip install 'gaptui[moses]' && pip install --no-deps molsets==0.3.1 (its pinned pomegranate 0.12.0 no "
        "longer builds, and the data needs none of its dependencies)"
    ),
)
QM9_FILES = ("qm9_part1.csv", "qm9_part2.csv", "qm9_part3.csv")
QM9 = PackagedData(
    source="qm9", distribution="qm9pack", folder="qm9pack/data", files=QM9_FILES, install="pip install 'gaptui[qm9]'"
)
MOSES_TARGETS = ("penalized_logp", "logp", "qed", "none")


def _check_count(name: str, key: str, value: int) -> None:
    if value < 0:
        raise GaptuiError(f"--param {key}={value} ({name}): expected a count >= 0 (0: every molecule of the file)")


def data_lines(path: Path) -> int:
    """Lines after the header of a CSV (gzipped when its name ends in ``.gz``): one pass counting newlines."""
    opener: Callable[..., Any] = gzip.open if path.suffix == ".gz" else open
    count, last = 0, b"\n"
    with opener(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            count += block.count(b"\n")
            last = block[-1:]
    return max(count + (last != b"\n") - 1, 0)  # a last line without its newline counts too


def read_rows(path: Path, rows: set[int], columns: Iterable[str], source: str) -> dict[int, list[str]]:
    """The values of ``columns`` in the given data rows (0-based, header excluded) of a CSV (gzipped or not),
    parsing only those rows; a missing column is one error line naming the file and its columns."""
    opener: Callable[..., Any] = gzip.open if path.suffix == ".gz" else open
    out: dict[int, list[str]] = {}
    if not rows:
        return out
    last = max(rows)
    with opener(path, "rt", newline="", encoding="utf-8") as fh:
        header = next(csv.reader([fh.readline()]), [])
        wanted = list(columns)
        for column in wanted:
            if column not in header:
                raise GaptuiError(
                    f"{source}: {path} has no column '{column}'{did_you_mean(column, header)}; columns: "
                    f"{', '.join(header[:12])}{', ...' if len(header) > 12 else ''}"
                )
        index = [header.index(c) for c in wanted]
        for row, line in enumerate(fh):
            if row in rows:
                values = next(csv.reader(io.StringIO(line)), [])
                out[row] = [values[i] if i < len(values) else "" for i in index]
                if row >= last:
                    break
    return out


def _draw(available: int, count: int, rng: np.random.Generator, exclude: np.ndarray | None = None) -> np.ndarray:
    """``count`` sorted row indices of ``available`` (every row for 0), none of ``exclude``."""
    pool = np.arange(available) if exclude is None else np.setdiff1d(np.arange(available), exclude)
    if count == 0 or count >= pool.size:
        return pool
    return np.sort(rng.choice(pool, size=count, replace=False))


def sa_scorer() -> Any:
    """RDKit's synthetic accessibility scorer (``Contrib/SA_Score/sascorer.py``, Ertl and Schuffenhauer 2009)."""
    from rdkit.Chem import RDConfig

    path = Path(RDConfig.RDContribDir) / "SA_Score" / "sascorer.py"
    if not path.is_file():
        raise GaptuiError(
            f"moses: target=penalized_logp needs RDKit's SA_Score contribution ({path} is missing); "
            "choose --param target=logp, qed or none"
        )
    spec = importlib.util.spec_from_file_location("gaptui_sascorer", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def moses_target(kind: str) -> Callable[[Any], float]:
    """The RDKit property ``kind`` of a molecule (MOSES ships none)."""
    from rdkit.Chem import QED, Crippen

    if kind == "logp":
        return lambda mol: float(Crippen.MolLogP(mol))
    if kind == "qed":
        return lambda mol: float(QED.qed(mol))
    if kind == "none":
        return lambda mol: math.nan
    scorer = sa_scorer()

    def penalized_logp(mol: Any) -> float:
        rings = [len(r) for r in mol.GetRingInfo().AtomRings()]
        return float(Crippen.MolLogP(mol) - scorer.calculateScore(mol) - max(0, max(rings, default=0) - 6))

    return penalized_logp


@dataclass
class Converted:
    """Molecules converted from SMILES: graphs, their source rows, and the rows skipped (unparsable or no target)."""

    graphs: list[Any]
    rows: list[int]
    skipped: list[int]


def convert(source: str, items: list[tuple[int, str, Any]], target: Callable[[Any], float] | None) -> Converted:
    """``(row, SMILES, target value or None)`` items into molecule graphs (heavy atoms, RDKit order, atomic
    numbers); ``target`` computes the value from the molecule when the item has none. Unparsable SMILES and
    non-numeric targets are skipped (their rows kept)."""
    from rdkit import RDLogger

    chem = rdkit_chem(source, source)
    out = Converted([], [], [])
    RDLogger.DisableLog("rdApp.*")  # skipped molecules are counted once by the caller, not printed one by one
    try:
        for row, smiles, value in items:
            mol = chem.MolFromSmiles(smiles) if smiles else None
            number = _number(value) if value is not None else (target(mol) if mol is not None and target else math.nan)
            if mol is None or mol.GetNumAtoms() == 0 or (value is not None and math.isnan(number)):
                out.skipped.append(row)
                continue
            num_atoms, edge_index = mol_item(mol)
            out.graphs.append(molecule_graph(num_atoms, edge_index, atomic_numbers(mol), number))
            out.rows.append(row)
    finally:
        RDLogger.EnableLog("rdApp.*")
    return out


def _number(text: str) -> float:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return math.nan
    return value if math.isfinite(value) else math.nan


def _skipped_note(source: str, skipped: list[int], total: int, why: str) -> list[str]:
    if not skipped:
        return []
    return [f"{source}: skipped {len(skipped)} of {total} molecules ({why}): rows {first_items(skipped)}"]


@dataclass(frozen=True)
class MosesParams:
    #: A folder laid out as molsets' ``moses/dataset/data``; empty: the installed molsets'.
    path: str = ""
    #: Molecules drawn from MOSES train, test (val) and ``test_split`` (test); 0: every molecule of the file.
    train: int = 10000
    val: int = 1000
    test: int = 1000
    #: Where the test molecules come from: ``test`` (random held-out) or ``test_scaffolds`` (unseen scaffolds).
    test_split: str = "test"
    #: The regression target, computed with RDKit: penalized_logp, logp, qed or none.
    target: str = "penalized_logp"

    def check(self) -> None:
        for key in ("train", "val", "test"):
            _check_count("moses", key, getattr(self, key))
        if self.test_split not in ("test", "test_scaffolds"):
            raise GaptuiError(f"--param test_split={self.test_split} (moses): expected test or test_scaffolds")
        if self.target not in MOSES_TARGETS:
            raise GaptuiError(
                f"--param target={self.target} (moses): expected one of {', '.join(MOSES_TARGETS)}"
                f"{did_you_mean(self.target, MOSES_TARGETS)}"
            )


@register_source
class Moses(MoleculeSource):
    name = "moses"
    description = (
        "MOSES drug-like molecules (ZINC-derived, from the molsets wheel, no download): a seeded 10,000 / 1,000 / "
        "1,000 subset; target=penalized_logp (RDKit), logp, qed or none"
    )
    Params = MosesParams

    @classmethod
    def size_hint(cls, params: Any) -> tuple[float, float, bool] | None:
        return 20.5, 2.14, False  # measured on 2,000 MOSES training molecules

    @classmethod
    def count_hint(cls, params: Any) -> int | None:
        counts = (params.train, params.val, params.test)
        return None if 0 in counts else sum(counts)

    def check_files(self, root: Path) -> None:
        MOSES.locate(self.params.path)
        rdkit_chem(self.name, self.name)

    def molecules(self, rng: np.random.Generator, root: Path) -> MoleculeSet:
        p = self.params
        folder = MOSES.locate(p.path)
        sizes = {name: data_lines(folder / name) for name in MOSES_FILES}
        offsets = dict(zip(MOSES_FILES, np.cumsum([0, *sizes.values()])[:-1].tolist(), strict=True))
        test_file = f"{p.test_split}.csv.gz"
        drawn = {"train": ("train.csv.gz", _draw(sizes["train.csv.gz"], p.train, rng))}
        drawn["val"] = ("test.csv.gz", _draw(sizes["test.csv.gz"], p.val, rng))
        shared = drawn["val"][1] if test_file == "test.csv.gz" else None
        drawn["test"] = (test_file, _draw(sizes[test_file], p.test, rng, exclude=shared))
        target = moses_target(p.target)
        graphs: list[Any] = []
        rows: list[int] = []
        skipped: list[int] = []
        splits: dict[str, np.ndarray] = {}
        for split, (name, picked) in drawn.items():
            smiles = read_rows(folder / name, set(picked.tolist()), ("SMILES",), self.name)
            base = offsets[name]
            done = convert(self.name, [(base + r, smiles[r][0], None) for r in picked.tolist()], target)
            splits[split] = np.arange(len(graphs), len(graphs) + len(done.graphs), dtype=np.int64)
            graphs += done.graphs
            rows += done.rows
            skipped += done.skipped
        if not splits["train"].size or not splits["val"].size:
            raise GaptuiError(f"moses: no readable molecule in the train or val draw from {folder}")
        notes = _skipped_note(self.name, skipped, len(graphs) + len(skipped), "SMILES RDKit could not parse")
        target_name = "none" if p.target == "none" else p.target.replace("_", " ")
        return MoleculeSet(graphs, splits, np.array(rows, dtype=np.int64), skipped, notes, True, target_name)


@dataclass(frozen=True)
class Qm9Params:
    #: A folder laid out as qm9pack's ``qm9pack/data``; empty: the installed qm9pack's.
    path: str = ""
    #: Molecules drawn (0: all 130,831).
    count: int = 20000
    #: The regression target: a numeric column of ``qm9_part*.csv`` (HOMO_LUMO_gap_au, Dipole_debye, ...).
    target: str = "HOMO_LUMO_gap_au"
    val_fraction: float = 0.1
    test_fraction: float = 0.1

    def check(self) -> None:
        _check_count("qm9", "count", self.count)
        check_fractions("qm9", self.val_fraction, self.test_fraction)


@register_source
class Qm9(MoleculeSource):
    name = "qm9"
    description = (
        "QM9 molecules (from the qm9pack wheel, no download): a seeded subset of count=20,000 of 130,831; "
        "target=HOMO_LUMO_gap_au or another column; seeded splits"
    )
    Params = Qm9Params

    @classmethod
    def size_hint(cls, params: Any) -> tuple[float, float, bool] | None:
        return 9.0, 2.25, False  # measured on 2,000 QM9 molecules

    @classmethod
    def count_hint(cls, params: Any) -> int | None:
        return int(params.count) or 130831

    def check_files(self, root: Path) -> None:
        QM9.locate(self.params.path)
        rdkit_chem(self.name, self.name)

    def molecules(self, rng: np.random.Generator, root: Path) -> MoleculeSet:
        p = self.params
        folder = QM9.locate(p.path)
        sizes = [data_lines(folder / name) for name in QM9_FILES]
        picked = _draw(sum(sizes), p.count, rng)
        items: list[tuple[int, str, Any]] = []
        start = 0
        for name, size in zip(QM9_FILES, sizes, strict=True):
            local = picked[(picked >= start) & (picked < start + size)] - start
            values = read_rows(folder / name, set(local.tolist()), ("SMILES", p.target), self.name)
            items += [(start + r, *values[r]) for r in local.tolist()]
            start += size
        done = convert(self.name, items, None)
        if len(done.graphs) < 3:
            raise GaptuiError(f"qm9: {len(done.graphs)} readable molecules in {folder}; a split needs at least 3")
        splits = seeded_splits(len(done.graphs), p.val_fraction, p.test_fraction, rng)
        why = f"SMILES RDKit could not parse or a non-numeric {p.target}"
        notes = _skipped_note(self.name, done.skipped, len(items), why)
        return MoleculeSet(
            done.graphs, splits, np.array(done.rows, dtype=np.int64), done.skipped, notes, False, p.target
        )
