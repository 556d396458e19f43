"""Molecule datasets PyG downloads and reads: AQSOL and ZINC (structure only; targets kept for GAPE)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engine.sources.base import (
    BaseSplits,
    MoleculeSet,
    MoleculeSource,
    graphs_from_edge_lists,
    molecule_graph,
    register_source,
    split_counts,
)
from engine.sources.fetch import (
    RawFiles,
    open_pyg,
    pick,
    pyg_item,
    pyg_url,
)


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

    def check_files(self, root: Path) -> None:
        RawFiles(root / self.name / "raw", AQSOL_FILES, lambda: pyg_url("AQSOL")).check(self.name)

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

    def check_files(self, root: Path) -> None:
        RawFiles(root / self.name / "raw", ZINC_FILES, lambda: pyg_url("ZINC")).check(self.name)

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
