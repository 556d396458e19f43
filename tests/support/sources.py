"""Tiny raw files in each real loader's own format (AQSOL, ZINC, CoraFull, ogbn-arxiv, PCQM4Mv2, graspologic's
mice) and a pairs folder in the authors' safetensors layout: the offline fixtures of every test reading real data."""

from __future__ import annotations

import gzip
import pickle
from pathlib import Path

import numpy as np
import torch
from safetensors.numpy import save_file


def both_ways(pairs: list[tuple[int, int]]) -> np.ndarray:
    """``[2, 2E]``: every pair in both directions, as PyG stores undirected molecules."""
    ei = np.array(pairs, dtype=np.int64).reshape(-1, 2)
    return np.concatenate([ei, ei[:, ::-1]]).T.copy()


def _aqsol_graph(n: int, pairs: list[tuple[int, int]], directed: bool = False) -> tuple:
    ei = np.array(pairs, dtype=np.int64).reshape(-1, 2).T if directed else both_ways(pairs)
    return (np.zeros(n, dtype=np.int64), np.ones(ei.shape[1], dtype=np.int64), ei, 0.5)


AQSOL_TRAIN = [
    _aqsol_graph(3, [(0, 1), (1, 2), (0, 2)]),  # triangle
    _aqsol_graph(4, [(0, 1), (1, 2), (2, 3)]),  # path
    _aqsol_graph(2, []),  # no bonds: PyG's AQSOL drops it
    _aqsol_graph(3, [(0, 1), (1, 2)], directed=True),  # bonds stored one way: the report says so
]


AQSOL_VAL = [_aqsol_graph(2, [(0, 1)]), _aqsol_graph(5, [(0, 1), (0, 2), (0, 3), (0, 4)])]


def write_aqsol(root: Path) -> Path:
    """AQSOL's raw pickles under ``root/aqsol/raw`` (a triangle, a path, a bondless and a one-way molecule)."""
    raw = root / "aqsol" / "raw"
    raw.mkdir(parents=True)
    for name, graphs in (("train", AQSOL_TRAIN), ("val", AQSOL_VAL), ("test", AQSOL_VAL[:1])):
        (raw / f"{name}.pickle").write_bytes(pickle.dumps(graphs))
    for name in ("atom_dict", "bond_dict"):
        (raw / f"{name}.pickle").write_bytes(pickle.dumps({}))
    return raw


def _zinc_mol(n: int, pairs: list[tuple[int, int]]) -> dict:
    adj = torch.zeros(n, n, dtype=torch.long)
    for u, v in pairs:
        adj[u, v] = adj[v, u] = 1
    return {
        "atom_type": torch.zeros(n, dtype=torch.long),
        "logP_SA_cycle_normalized": torch.tensor([0.1]),
        "bond_type": adj,
    }


def write_zinc(root: Path) -> None:
    """ZINC's raw pickles and subset index files under ``root/zinc/raw``."""
    raw = root / "zinc" / "raw"
    raw.mkdir(parents=True)
    train = [_zinc_mol(2, [(0, 1)]), _zinc_mol(3, [(0, 1), (1, 2)]), _zinc_mol(4, [(0, 1), (1, 2), (2, 3), (3, 0)])]
    val = [_zinc_mol(3, [(0, 1), (0, 2)]), _zinc_mol(2, [(0, 1)])]
    for name, mols in (("train", train), ("val", val), ("test", val)):
        (raw / f"{name}.pickle").write_bytes(pickle.dumps(mols))
    (raw / "train.index").write_text("0,2\n")
    (raw / "val.index").write_text("1\n")
    (raw / "test.index").write_text("0\n")


CYCLE = [(i, (i + 1) % 30) for i in range(30)]


PATH = [(30 + i, 31 + i) for i in range(9)]


def write_cora(root: Path) -> None:
    """CoraFull's ``cora.npz`` (a 30-cycle, a 10-node path and a self-loop) under ``root/corafull/cora/raw``."""
    import scipy.sparse as sp

    raw = root / "corafull" / "cora" / "raw"
    raw.mkdir(parents=True)
    rows, cols = zip(*(CYCLE + PATH + [(5, 5)]), strict=True)
    adj = sp.csr_matrix((np.ones(len(rows), dtype=np.float32), (rows, cols)), shape=(40, 40))
    attr = sp.csr_matrix(np.eye(40, 3, dtype=np.float32))
    np.savez(
        raw / "cora.npz",
        adj_data=adj.data,
        adj_indices=adj.indices,
        adj_indptr=adj.indptr,
        adj_shape=adj.shape,
        attr_data=attr.data,
        attr_indices=attr.indices,
        attr_indptr=attr.indptr,
        attr_shape=attr.shape,
        labels=np.zeros(40, dtype=np.int64),
    )


def write_arxiv_raw(raw: Path, edges: list[tuple[int, int]], num_nodes: int) -> None:
    """ogbn-arxiv's raw ``edge.csv.gz`` and ``num-node-list.csv.gz`` in ``raw``."""
    raw.mkdir(parents=True, exist_ok=True)
    with gzip.open(raw / "edge.csv.gz", "wt") as f:
        f.writelines(f"{u},{v}\n" for u, v in edges)
    with gzip.open(raw / "num-node-list.csv.gz", "wt") as f:
        f.write(f"{num_nodes}\n")


ARXIV_EDGES = CYCLE + PATH + [(1, 0)]  # one mutual citation: 0 -> 1 and 1 -> 0


SMILES = [
    "CCO",  # 0: 3 atoms, 2 bonds
    "c1ccccc1",  # 1: 6 atoms, 6 bonds
    "CC(=O)O",  # 2: 4 atoms, 3 bonds
    "C",  # 3: one heavy atom, no bonds -> skipped
    "[Na+].[Cl-]",  # 4: two ions, no bonds -> skipped
    "CCN",  # 5: 3 atoms, 2 bonds
    "O=C=O",  # 6: 3 atoms, 2 bonds
    "C1CC1",  # 7: 3 atoms, 3 bonds
    "CCCC",  # 8: 4 atoms, 3 bonds
    "N#N",  # 9: 2 atoms, 1 bond (test-dev)
]


def write_pcqm(root: Path, smiles: list[str], split: dict[str, object]) -> Path:
    """PCQM4Mv2's ``data.csv.gz`` of ``smiles`` and its ``split_dict.pt`` under ``root/pcqm4mv2``."""
    folder = root / "pcqm4mv2" / "pcqm4m-v2"
    (folder / "raw").mkdir(parents=True)
    with gzip.open(folder / "raw" / "data.csv.gz", "wt") as f:
        f.write("idx,smiles,homolumogap\n")
        f.writelines(f"{i},{s},{'' if i > 8 else 3.5}\n" for i, s in enumerate(smiles))
    torch.save(split, folder / "split_dict.pt")
    (folder / "RELEASE_v1.txt").write_text("PCQM4Mv2\n")
    return folder


OFFICIAL_SPLIT = {
    "train": np.arange(6),
    "valid": np.arange(6, 9),
    "test-dev": np.array([9]),
    "test-challenge": np.array([], dtype=np.int64),
}


def pair_edges_both_ways(edges: np.ndarray) -> np.ndarray:
    """``[2, 2m]``: undirected edges ``[m, 2]`` in both directions, sorted, as the safetensors layout stores them."""
    both = np.concatenate([edges, edges[:, ::-1]], axis=0)
    return np.ascontiguousarray(both[np.lexsort((both[:, 1], both[:, 0]))].T, dtype=np.int64)


def random_pair(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Undirected edges ``[m, 2]`` (u < v) of G and of G~ (G with a few edges moved), same node ids."""
    iu = np.triu_indices(n, 1)
    pick = rng.random(iu[0].size) < 0.3
    flip = rng.random(iu[0].size) < 0.05
    g = np.stack(iu, axis=1)[pick]
    h = np.stack(iu, axis=1)[pick ^ flip]
    return g, h


def write_folder(folder: Path, train: int = 12, val: int = 4, n: int = 10, seed: int = 0) -> dict:
    """A folder in the layout, truth = identity; returns ``{split: [(G edges, G~ edges)]}`` as written."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    written: dict[str, list] = {}
    for split, count in (("train", train), ("val", val)):
        pairs = [random_pair(rng, n) for _ in range(count)]
        written[split] = pairs
        save_file(
            {str(k): np.array([n, n], dtype=np.int64) for k in range(count)},
            str(folder / f"{split}-orders.safetensors"),
        )
        save_file(
            {str(k): pair_edges_both_ways(g) for k, (g, _) in enumerate(pairs)},
            str(folder / f"{split}-base-graphs.safetensors"),
        )
        save_file(
            {str(k): pair_edges_both_ways(h) for k, (_, h) in enumerate(pairs)},
            str(folder / f"{split}-corrupted-graphs.safetensors"),
        )
    return written


#: graspologic's mice, small: regions of the atlas and mice per genotype.
NODES = 20
GENOTYPES = {"BTBR": 3, "B6": 3, "CAST": 2}


def write_mice(folder: Path, seed: int = 0) -> dict[str, np.ndarray]:
    """graspologic's ``datasets/mice`` layout: ``participants.csv`` and one ``u v weight`` edge list per mouse, each
    mouse's weights a shared pattern plus its own noise (so mice differ, and mice of one genotype differ less).
    Returns each subject's weight matrix."""
    rng = np.random.default_rng(seed)
    (folder / "edgelists").mkdir(parents=True, exist_ok=True)
    shared = rng.gamma(1.0, 100.0, (NODES, NODES))
    rows = ["participant_id,genotype,sex"]
    weights = {}
    number = 54776
    for genotype, count in GENOTYPES.items():
        pattern = shared * rng.uniform(0.7, 1.3, (NODES, NODES))
        for _ in range(count):
            subject = f"sub-{number}"
            number += 1
            w = np.triu(pattern * rng.uniform(0.8, 1.2, (NODES, NODES)), 1).round()
            w[rng.random((NODES, NODES)) < 0.3] = 0  # absent pairs are not listed
            w = np.triu(w, 1)
            weights[subject] = w + w.T
            lines = [f"{u} {v} {w[u, v]:.1f}" for u, v in zip(*np.nonzero(w), strict=True)]
            (folder / f"edgelists/{subject}_ses-1_dti.edgelist").write_text("\n".join(lines) + "\n")
            rows.append(f"{subject},{genotype},{'male' if number % 2 else 'female'}")
    (folder / "participants.csv").write_text("\n".join(rows) + "\n")
    for name in ("atlas.csv", "blocks.csv"):  # also in the wheel; the source reads neither
        (folder / name).write_text("ROI\n")
    return weights
