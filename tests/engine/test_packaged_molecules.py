"""The ``moses`` and ``qm9`` molecule bases, read from files laid out as the molsets and qm9pack wheels lay them out
(small fixtures: CI installs neither wheel)."""

from __future__ import annotations

import csv
import gzip
import json
import math
from pathlib import Path

import numpy as np
import pytest

from engine.alignment.datasets import DatasetSpec, build_dataset
from engine.errors import GaptuiError
from engine.gape.data import MoleculeSpec, build_molecules
from engine.sources import SOURCES, parse_params
from tests.support.cli import run_cli
from tests.support.packages import fake_distribution, hidden_distributions

pytest.importorskip("rdkit")

MOSES_SMILES = [
    "CCCS(=O)c1ccc2[nH]c(=NC(=O)OC)[nH]c2c1",
    "CC(C)(C)C(=O)C(Oc1ccc(Cl)cc1)n1ccnc1",
    "Cc1c(Cl)cccc1Nc1ncccc1C(=O)OCC(O)CO",
    "COc1ccc(-c2cc(=O)c3c(O)c(OC)c(OC)cc3o2)cc1O",
    "O=C(C1CCCCC1)N1CC(=O)N2CCCc3ccccc3C2C1",
    "COc1ccccc1OC(=O)c1ccccc1OC(C)=O",
    "CC1C2CCC(C2)C1CN(CCO)C(=O)c1ccc(Cl)cc1",
    "Clc1ccccc1CN1CCC2(CC1)OCCO2",
    "not a smiles",
    "CC(=O)Nc1ccc(O)cc1",
    "C1CCCCCCCC1",  # a nine-membered ring: penalised 3 in penalized logP
    "CCO",
]


def write_moses(folder: Path) -> Path:
    """molsets' ``moses/dataset/data`` layout: three gzipped CSVs with one ``SMILES`` column."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, rows in (
        ("train", MOSES_SMILES),
        ("test", MOSES_SMILES[:6]),
        ("test_scaffolds", MOSES_SMILES[6:]),
    ):
        with gzip.open(folder / f"{name}.csv.gz", "wt") as fh:
            fh.write("SMILES\n" + "\n".join(rows) + "\n")
    for name in ("test_stats.npz", "test_scaffolds_stats.npz"):  # also in the wheel; not read
        (folder / name).write_bytes(b"")
    return folder


QM9_HEADER = [
    "XYZ_file", "Index", "SMILES", "InChi", "N_atoms", "Stoichiometry", "Elements", "XYZ_Ang", "Mulliken_pop",
    "Harmonic_Freq_cmi", "RotA_GHz", "RotB_GHz", "RotC_GHz", "Dipole_debye", "Polarizability_bohr3", "HOMO_au",
    "LUMO_au", "HOMO_LUMO_gap_au", "R2_bohr2",
]  # fmt: skip
QM9_SMILES = ["C", "N", "O", "C#C", "C#N", "C=O", "CC", "CO", "CC#C", "CC#N", "CC=O", "NC=O", "CCC", "CCO", "x"]


def write_qm9(folder: Path) -> Path:
    """qm9pack's ``qm9pack/data`` layout: the molecules in three CSV parts (quoted fields, lists as text)."""
    folder.mkdir(parents=True, exist_ok=True)
    parts = [QM9_SMILES[:5], QM9_SMILES[5:10], QM9_SMILES[10:]]
    index = 1
    for number, smiles in enumerate(parts, start=1):
        with open(folder / f"qm9_part{number}.csv", "w", newline="") as fh:
            writer = csv.writer(fh, quoting=csv.QUOTE_NONNUMERIC)
            writer.writerow(QM9_HEADER)
            for s in smiles:
                gap = "n/a" if s == "CO" else 0.1 * index
                row = [f"dsgdb9nsd_{index:06d}.xyz", index, s, "InChI=1S/x", 5, "[1,0,0,0,0]", "['C']"]
                row += ["[[0.0,0.0,0.0]]", "[0.1]", "[1.0,2.0]", 1.0, 2.0, 3.0, 0.5, 13.2, -0.3, 0.1, gap, 35.0]
                writer.writerow(row)
                index += 1
    (folder / "qm9_polarizability.csv").write_text("XYZ_file,A_xx\n")
    return folder


def molecules(name: str, seed: int = 0, **params: object):
    cls = SOURCES.get(name)
    source = cls(parse_params(cls, {k: str(v) for k, v in params.items()}))
    return source.molecules(np.random.default_rng(seed), Path("."))


def test_moses_draws_a_seeded_subset_of_each_file_with_an_rdkit_target(tmp_path: Path) -> None:
    from rdkit import Chem
    from rdkit.Chem import Crippen

    from engine.sources.packaged_molecules import sa_scorer

    folder = write_moses(tmp_path / "moses" / "dataset" / "data")
    mols = molecules("moses", path=folder, train=5, val=2, test=2)
    assert {k: v.size for k, v in mols.splits.items()} == {"train": 5, "val": 2, "test": 2}
    # rows are numbered over train (12), test (6) and test_scaffolds (6); val and test (both from test) disjoint
    val_rows, test_rows = mols.rows[mols.splits["val"]], mols.rows[mols.splits["test"]]
    assert set(val_rows) <= set(range(12, 18)) and set(test_rows) <= set(range(12, 18))
    assert not set(val_rows) & set(test_rows)
    again = molecules("moses", path=folder, train=5, val=2, test=2)
    assert np.array_equal(mols.rows, again.rows)  # seeded
    everything = molecules("moses", path=folder, train=0, val=0, test=0, test_split="test_scaffolds")
    # "not a smiles" is row 8 of train and row 2 of test_scaffolds (12 + 6 + 2)
    assert everything.skipped == [8, 20] and "skipped 2 of 24 molecules" in everything.notes[0]
    nine = next(g for g, r in zip(everything.graphs, everything.rows, strict=True) if r == 10)
    mol = Chem.MolFromSmiles("C1CCCCCCCC1")
    assert nine.target == pytest.approx(Crippen.MolLogP(mol) - sa_scorer().calculateScore(mol) - 3)
    assert nine.node_types.tolist() == [6] * 9 and nine.num_edges == 9
    logp = molecules("moses", path=folder, train=0, val=1, test=1, target="logp")
    assert logp.target_name == "logp" and all(math.isfinite(g.target) for g in logp.graphs)


def test_qm9_reads_a_column_as_target_and_counts_what_it_skips(tmp_path: Path) -> None:
    folder = write_qm9(tmp_path / "qm9pack" / "data")
    mols = molecules("qm9", path=folder, count=0, val_fraction=0.2, test_fraction=0.2)
    # "x" does not parse and "CO" has no number: rows 14 and 7 skipped; rows counted over the three parts
    assert mols.skipped == [7, 14] and mols.rows.tolist() == [r for r in range(15) if r not in (7, 14)]
    assert [g.target for g in mols.graphs[:3]] == pytest.approx([0.1, 0.2, 0.3])
    assert mols.graphs[0].num_nodes == 1 and mols.graphs[0].num_edges == 0  # methane: one heavy atom
    subset = molecules("qm9", path=folder, count=6, target="Dipole_debye")
    assert len(subset.graphs) + len(subset.skipped) == 6 and all(g.target == 0.5 for g in subset.graphs)
    with pytest.raises(GaptuiError, match="has no column 'HOMO_LUMO_gap' \\(did you mean 'HOMO_LUMO_gap_au'\\?\\)"):
        molecules("qm9", path=folder, target="HOMO_LUMO_gap")


def test_both_are_alignment_bases_and_downstream_molecule_sets(tmp_path: Path) -> None:
    moses = write_moses(tmp_path / "moses")
    qm9 = write_qm9(tmp_path / "qm9")
    dataset, _ = build_dataset(
        DatasetSpec("moses", 0.1, params={"path": str(moses), "train": "0", "val": "3", "test": "2"}), tmp_path / "ds"
    )
    # train = 0: every row of train.csv.gz (a draw of some rows would depend on the seed the folder's path gives)
    assert (
        dataset.stats["train"]["pairs"] == len(MOSES_SMILES) - 1 and dataset.stats["val"]["pairs"] == 3
    )  # 1 unreadable
    qm9_pairs, _ = build_dataset(DatasetSpec("qm9", 0.1, params={"path": str(qm9), "count": "0"}), tmp_path / "ds")
    assert qm9_pairs.stats["train"]["left_out"] >= 1  # molecules of one heavy atom have no bond to align
    data, built = build_molecules(MoleculeSpec("qm9", {"path": str(qm9), "count": "0"}), tmp_path / "ds")
    assert built and data.meta["target"] == "HOMO_LUMO_gap_au" and data.has_split("test")


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"target": "logq"}, "--param target=logq (moses): expected one of penalized_logp, logp, qed, none"),
        ({"test_split": "scaffolds"}, "--param test_split=scaffolds (moses): expected test or test_scaffolds"),
        ({"train": -1}, "--param train=-1 (moses): expected a count >= 0"),
    ],
)
def test_bad_moses_parameters_are_one_line(params: dict, expected: str) -> None:
    cls = SOURCES.get("moses")
    with pytest.raises(GaptuiError) as err:
        parse_params(cls, {k: str(v) for k, v in params.items()})
    assert str(err.value).startswith(expected)


@pytest.mark.e2e
def test_without_the_wheels_the_lines_say_what_to_install(tmp_path: Path) -> None:
    env = hidden_distributions(tmp_path, "molsets", "qm9pack")
    qm9 = run_cli("datasets", "build", "qm9", "--noise", "0.1", "-w", str(tmp_path / "ws"), env=env)
    assert qm9.returncode == 2 and qm9.stdout == ""
    assert qm9.stderr.startswith("error: qm9 reads the data files of the qm9pack package, which is not installed: ")
    assert "pip install 'gaptui[qm9]'" in qm9.stderr and len(qm9.stderr.strip().splitlines()) == 1
    moses = run_cli("datasets", "build", "moses", "--noise", "0.1", "-w", str(tmp_path / "ws"), env=env)
    assert moses.returncode == 2
    assert "pip install 'gaptui[moses]' && pip install --no-deps molsets==0.3.1" in moses.stderr


@pytest.mark.e2e
def test_the_installed_wheels_data_is_found_without_importing_them(tmp_path: Path) -> None:
    site = tmp_path / "site"
    write_moses(site / "moses" / "dataset" / "data")
    write_qm9(site / "qm9pack" / "data")
    for package in ("moses", "qm9pack"):
        (site / package / "__init__.py").write_text(f"raise ImportError('{package} must not be imported')\n")
    fake_distribution(site, "molsets", "0.3.1")
    fake_distribution(site, "qm9pack", "1.0.3")
    env = {"PYTHONPATH": str(site)}
    ws = str(tmp_path / "ws")
    for base, params in (("moses", ["-p", "train=6", "-p", "val=2", "-p", "test=2"]), ("qm9", ["-p", "count=0"])):
        res = run_cli("datasets", "build", base, "--noise", "0.1", "-w", ws, *params, "--json", env=env)
        assert res.returncode == 0, res.stderr
        assert json.loads(res.stdout)["stats"]["train"]["pairs"] > 0


def test_gape_s_downstream_task_runs_on_moses_without_a_network(tmp_path: Path, no_network: list[str]) -> None:
    import torch

    from engine.gape.spec import GapeSpec
    from engine.gape.train import run_gape

    torch.set_num_threads(1)
    moses = write_moses(tmp_path / "moses")
    spec = GapeSpec(
        dataset={"base": "moses", "params": {"path": str(moses), "train": 8, "val": 3, "test": 2}},
        pe="rwpe",
        layers=1,
        heads=2,
        budget=3000,
        epochs=1,
        batch_size=4,
        device="cpu",
        datasets_dir=str(tmp_path),
    )
    (tmp_path / "run").mkdir()
    result = run_gape(spec, tmp_path / "run", lambda name, **fields: None)
    assert result["status"] == "done" and math.isfinite(result["metrics"]["test_mae"]) and not no_network
