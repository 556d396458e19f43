"""Real-dataset sources, offline, on tiny fixtures written in each loader's own raw format."""

from __future__ import annotations

import io
import sys
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

import numpy as np
import pytest

from engine.errors import GaptuiError
from engine.graphs import Graph
from engine.sources import SOURCES, BaseSplits, parse_params
from engine.sources.real import read_smiles, smiles_item
from tests.support.sources import (
    ARXIV_EDGES,
    OFFICIAL_SPLIT,
    SMILES,
    write_aqsol,
    write_arxiv_raw,
    write_cora,
    write_pcqm,
    write_zinc,
)

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")


@pytest.fixture(autouse=True)
def _offline(no_network: list[str]) -> None:
    """Every test here runs with downloads refused (and recorded by ``no_network``)."""


def load(name: str, root: Path, n_train: int | None = None, n_val: int | None = None, seed: int = 0, **params):
    cls = SOURCES.get(name)
    source = cls(parse_params(cls, {k: str(v) for k, v in params.items()}))
    return source.load(n_train, n_val, np.random.default_rng(seed), root)


def edge_sets(graphs: list[Graph]) -> list[tuple[int, list[tuple[int, int]]]]:
    return [(g.num_nodes, [tuple(e) for e in g.edges.tolist()]) for g in graphs]


# ---------------------------------------------------------------------------------------------------------------
# AQSOL: pickled lists of (x, edge_attr, edge_index, y) tuples, as in the benchmarking-gnns release.


def test_aqsol_all_of_each_split(tmp_path: Path) -> None:
    write_aqsol(tmp_path)
    splits = load("aqsol", tmp_path)
    assert isinstance(splits, BaseSplits)
    assert edge_sets(splits.train) == [
        (3, [(0, 1), (0, 2), (1, 2)]),
        (4, [(0, 1), (1, 2), (2, 3)]),
        (3, [(0, 1), (1, 2)]),
    ]
    assert edge_sets(splits.val) == [(2, [(0, 1)]), (5, [(0, 1), (0, 2), (0, 3), (0, 4)])]
    report = splits.report
    assert (report.graphs, report.changed_graphs, report.symmetrised, report.duplicates) == (5, 1, 2, 0)


def test_aqsol_subset_is_deterministic(tmp_path: Path) -> None:
    write_aqsol(tmp_path)
    a = load("aqsol", tmp_path, n_train=2, n_val=1, seed=3)
    b = load("aqsol", tmp_path, n_train=2, n_val=1, seed=3)
    assert (len(a.train), len(a.val)) == (2, 1)
    assert edge_sets(a.train) == edge_sets(b.train) and edge_sets(a.val) == edge_sets(b.val)
    every_train = edge_sets(load("aqsol", tmp_path).train)
    assert all(g in every_train for g in edge_sets(a.train))
    with pytest.raises(GaptuiError, match="more graphs than the split holds"):
        load("aqsol", tmp_path, n_train=4)


def test_aqsol_missing_files_offline_names_files_and_folder(tmp_path: Path, no_network: list[str]) -> None:
    with pytest.raises(GaptuiError) as err:
        load("aqsol", tmp_path)
    message = str(err.value)
    assert "\n" not in message
    for name in ("train.pickle", "val.pickle", "test.pickle", "atom_dict.pickle", "bond_dict.pickle"):
        assert name in message
    assert str(tmp_path / "aqsol" / "raw") in message and "GAPTUI_OFFLINE" in message
    assert no_network == []


def test_aqsol_failed_download_names_files_and_leaves_no_partial_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_network: list[str]
) -> None:
    monkeypatch.delenv("GAPTUI_OFFLINE")
    with pytest.raises(GaptuiError, match=r"download failed .*network disabled.*place train\.pickle") as err:
        load("aqsol", tmp_path)
    assert str(tmp_path / "aqsol" / "raw") in str(err.value)
    assert len(no_network) == 1 and "aqsol" in no_network[0]
    assert not list((tmp_path / "aqsol").iterdir())


def test_partial_raw_files_are_never_replaced_by_a_download(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_network: list[str]
) -> None:
    monkeypatch.delenv("GAPTUI_OFFLINE")
    raw = write_aqsol(tmp_path)
    (raw / "bond_dict.pickle").unlink()
    with pytest.raises(GaptuiError, match=r"not downloading.*place bond_dict\.pickle in "):
        load("aqsol", tmp_path)
    assert no_network == [] and (raw / "train.pickle").exists()


# ---------------------------------------------------------------------------------------------------------------
# ZINC: pickled lists of dicts holding a dense bond-type matrix, plus comma-separated subset index files.


def test_zinc_subset_and_full(tmp_path: Path) -> None:
    write_zinc(tmp_path)
    sub = load("zinc", tmp_path)
    assert edge_sets(sub.train) == [(2, [(0, 1)]), (4, [(0, 1), (0, 3), (1, 2), (2, 3)])]
    assert edge_sets(sub.val) == [(2, [(0, 1)])]
    assert not sub.report.changed
    full = load("zinc", tmp_path, subset=False)
    assert [g.num_nodes for g in full.train] == [2, 3, 4] and [g.num_nodes for g in full.val] == [3, 2]
    one = load("zinc", tmp_path, n_train=1, n_val=1, subset=False, seed=5)
    assert edge_sets(one.train) == edge_sets(load("zinc", tmp_path, n_train=1, n_val=1, subset=False, seed=5).train)


def test_zinc_missing_files(tmp_path: Path) -> None:
    with pytest.raises(GaptuiError, match=r"zinc: raw files missing .*train\.pickle.*val\.index, test\.index in "):
        load("zinc", tmp_path)


# ---------------------------------------------------------------------------------------------------------------
# CoraFull: the gnn-benchmark npz layout (CSR adjacency and attributes); BFS samples of the one graph.

# A 30-cycle and a 10-path, with a self loop and edges stored one way (PyG's loader drops / symmetrises them).


def _is_path(g: Graph) -> bool:
    degrees = np.bincount(g.edges.reshape(-1), minlength=g.num_nodes)
    return g.num_edges == g.num_nodes - 1 and sorted(degrees.tolist()) == [1, 1] + [2] * (g.num_nodes - 2)


def test_corafull_bfs_samples(tmp_path: Path) -> None:
    write_cora(tmp_path)
    splits = load("corafull", tmp_path, n_train=7, n_val=3, order=5)
    assert (len(splits.train), len(splits.val)) == (7, 3)
    # Every connected 5-node piece of a long cycle or a path is a path: 5 nodes, 4 edges.
    assert all(g.num_nodes == 5 and _is_path(g) for g in splits.train + splits.val)
    assert (splits.report.graphs, splits.report.changed_graphs) == (1, 0)
    again = load("corafull", tmp_path, n_train=7, n_val=3, order=5)
    assert edge_sets(again.train + again.val) == edge_sets(splits.train + splits.val)


def test_corafull_big_graph_and_defaults(tmp_path: Path) -> None:
    write_cora(tmp_path)
    cls = SOURCES.get("corafull")
    assert (cls.noise_model, cls.sizes) == ("add_remove", (5000, 500))
    graph, _ = cls(parse_params(cls, {})).big_graph(tmp_path)
    assert graph.num_nodes == 40 and graph.num_edges == 39
    with pytest.raises(GaptuiError, match="cannot take 50 nodes from a graph of 40"):
        load("corafull", tmp_path, n_train=1, n_val=1, order=50)


def test_corafull_missing_file(tmp_path: Path) -> None:
    with pytest.raises(GaptuiError, match=r"place cora\.npz in .*corafull/cora/raw$"):
        load("corafull", tmp_path)


# ---------------------------------------------------------------------------------------------------------------
# ogbn-arxiv: OGB's raw csv.gz files (directed citation edges, one node count).


def test_ogbn_arxiv_reads_raw_files(tmp_path: Path) -> None:
    write_arxiv_raw(tmp_path / "ogbn-arxiv" / "ogbn_arxiv" / "raw", ARXIV_EDGES, 42)
    cls = SOURCES.get("ogbn-arxiv")
    graph, report = cls(parse_params(cls, {"order": "5"})).big_graph(tmp_path)
    # 42 nodes (two isolated), 39 undirected edges; every citation but the mutual pair was one-way.
    assert graph.num_nodes == 42 and graph.num_edges == 39
    assert (report.symmetrised, report.duplicates, report.self_loops) == (38, 0, 0)
    splits = load("ogbn-arxiv", tmp_path, n_train=4, n_val=2, order=5, seed=1)
    assert (len(splits.train), len(splits.val)) == (4, 2)
    assert all(g.num_nodes == 5 for g in splits.train + splits.val)
    again = load("ogbn-arxiv", tmp_path, n_train=4, n_val=2, order=5, seed=1)
    assert edge_sets(again.train + again.val) == edge_sets(splits.train + splits.val)


def test_ogbn_arxiv_missing_files(tmp_path: Path) -> None:
    raw = tmp_path / "ogbn-arxiv" / "ogbn_arxiv" / "raw"
    with pytest.raises(GaptuiError) as err:
        load("ogbn-arxiv", tmp_path)
    assert str(err.value).endswith(f"place edge.csv.gz, num-node-list.csv.gz in {raw}")


def _zip_bytes(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return buf.getvalue()


def test_ogbn_arxiv_download_unpacks_into_ogb_layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    staged = tmp_path / "staged"
    write_arxiv_raw(staged, ARXIV_EDGES, 42)
    archive = _zip_bytes({f"arxiv/raw/{p.name}": p.read_bytes() for p in staged.iterdir()})
    urls: list[str] = []

    def serve(url, *args, **kwargs):
        urls.append(url)
        assert kwargs.get("timeout"), "downloads must not block without a timeout"
        return io.BytesIO(archive)

    monkeypatch.delenv("GAPTUI_OFFLINE")
    monkeypatch.setattr(urllib.request, "urlopen", serve)
    root = tmp_path / "data"
    splits = load("ogbn-arxiv", root, n_train=2, n_val=1, order=4)
    assert urls == ["http://snap.stanford.edu/ogb/data/nodeproppred/arxiv.zip"]
    assert (root / "ogbn-arxiv" / "ogbn_arxiv" / "raw" / "edge.csv.gz").is_file()
    assert sorted(p.name for p in (root / "ogbn-arxiv").iterdir()) == ["ogbn_arxiv"]  # archive removed
    assert [g.num_nodes for g in splits.train + splits.val] == [4, 4, 4]


# ---------------------------------------------------------------------------------------------------------------
# PCQM4Mv2: OGB-LSC's raw data.csv.gz and split_dict.pt; only the sampled SMILES go through rdkit.


@pytest.mark.parametrize("as_tensors", [False, True])
def test_pcqm4mv2_samples_molecules_with_bonds(tmp_path: Path, as_tensors: bool) -> None:
    pytest.importorskip("rdkit")
    split = {k: torch.from_numpy(v) if as_tensors else v for k, v in OFFICIAL_SPLIT.items()}
    write_pcqm(tmp_path, SMILES, split)
    splits = load("pcqm4mv2", tmp_path, n_train=4, n_val=3)
    # The train split has exactly four molecules with bonds: rows 0, 1, 2, 5, in row order.
    assert [(g.num_nodes, g.num_edges) for g in splits.train] == [(3, 2), (6, 6), (4, 3), (3, 2)]
    assert [(g.num_nodes, g.num_edges) for g in splits.val] == [(3, 2), (3, 3), (4, 3)]
    assert edge_sets(splits.train[:1]) == [(3, [(0, 1), (1, 2)])]
    assert not splits.report.changed and splits.report.graphs == 7
    assert splits.report.notes == ["pcqm4mv2: skipped 2 molecules without bonds and 0 SMILES rdkit could not parse"]


def test_pcqm4mv2_sampling_is_deterministic_and_walks_past_bondless_molecules(tmp_path: Path) -> None:
    pytest.importorskip("rdkit")
    # 30 bond-less molecules around two with bonds: the first batch of candidates may miss them.
    smiles = ["C"] * 30 + ["CC", "CCC"] + ["CCCC"] * 3
    write_pcqm(tmp_path, smiles, {"train": np.arange(32), "valid": np.arange(32, 35)})
    for seed in range(4):
        splits = load("pcqm4mv2", tmp_path, n_train=2, n_val=2, seed=seed)
        assert [g.num_nodes for g in splits.train] == [2, 3]
        assert [g.num_nodes for g in splits.val] == [4, 4]
    a = load("pcqm4mv2", tmp_path, n_train=1, n_val=1, seed=7)
    b = load("pcqm4mv2", tmp_path, n_train=1, n_val=1, seed=7)
    assert edge_sets(a.train + a.val) == edge_sets(b.train + b.val)
    with pytest.raises(GaptuiError, match="fewer than 3 molecules with bonds"):
        load("pcqm4mv2", tmp_path, n_train=3, n_val=1)
    with pytest.raises(GaptuiError, match="more graphs than the split holds"):
        load("pcqm4mv2", tmp_path, n_train=33, n_val=1)


def test_pcqm4mv2_reads_a_numpy1_split_dict(tmp_path: Path) -> None:
    pytest.importorskip("rdkit")
    # The official file was pickled under numpy 1, whose array-rebuild function lived in numpy.core.
    reconstruct = np.array(0).__reduce__()[0]
    module = reconstruct.__module__
    reconstruct.__module__ = "numpy.core.multiarray"
    try:
        folder = write_pcqm(tmp_path, SMILES, OFFICIAL_SPLIT)
    finally:
        reconstruct.__module__ = module
    assert b"numpy.core.multiarray" in zipfile.ZipFile(folder / "split_dict.pt").read("split_dict/data.pkl")
    assert len(load("pcqm4mv2", tmp_path, n_train=1, n_val=1).train) == 1


def test_pcqm4mv2_defaults_and_missing_files(tmp_path: Path) -> None:
    cls = SOURCES.get("pcqm4mv2")
    assert (cls.noise_model, cls.sizes) == ("add", (35000, 2000))
    folder = tmp_path / "pcqm4mv2" / "pcqm4m-v2"
    with pytest.raises(GaptuiError) as err:
        load("pcqm4mv2", tmp_path)
    assert str(err.value).endswith(f"place raw/data.csv.gz, split_dict.pt in {folder}")


def test_pcqm4mv2_without_rdkit_says_how_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_pcqm(tmp_path, SMILES, OFFICIAL_SPLIT)
    monkeypatch.setitem(sys.modules, "rdkit", None)
    with pytest.raises(GaptuiError, match=r"pip install 'gaptui\[rdkit\]'"):
        load("pcqm4mv2", tmp_path, n_train=1, n_val=1)


def test_read_smiles_and_smiles_item(tmp_path: Path) -> None:
    chem = pytest.importorskip("rdkit.Chem")
    write_pcqm(tmp_path, SMILES, OFFICIAL_SPLIT)
    path = tmp_path / "pcqm4mv2" / "pcqm4m-v2" / "raw" / "data.csv.gz"
    assert read_smiles(path, {1, 4}) == {1: "c1ccccc1", 4: "[Na+].[Cl-]"}
    with pytest.raises(GaptuiError, match="refers to row 10"):
        read_smiles(path, {10})
    num_nodes, edge_index = smiles_item(chem, "CC(=O)O")
    assert num_nodes == 4 and edge_index.shape == (2, 6)  # both directions of 3 bonds
    assert smiles_item(chem, "not a smiles") is None


def test_real_sources_are_registered_with_the_papers_settings() -> None:
    expected = {
        "aqsol": ("add", (None, None)),
        "zinc": ("add", (None, None)),
        "pcqm4mv2": ("add", (35000, 2000)),
        "corafull": ("add_remove", (5000, 500)),
        "ogbn-arxiv": ("add_remove", (5000, 500)),
    }
    for name, (noise, sizes) in expected.items():
        cls = SOURCES.get(name)
        assert (cls.name, cls.noise_model, cls.sizes) == (name, noise, sizes)
        assert cls.description
