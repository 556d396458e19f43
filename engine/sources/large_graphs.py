"""Large networks sampled by BFS into base graphs: CoraFull (PyG) and ogbn-arxiv (the OGB files)."""

from __future__ import annotations

import gzip
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.errors import GaptuiError
from engine.graphs import Graph
from engine.sampling import bfs_subgraphs
from engine.sources.base import (
    BaseSplits,
    NormalisationReport,
    Source,
    graphs_from_edge_lists,
    register_source,
)
from engine.sources.fetch import (
    RawFiles,
    download_zip,
    error_reason,
    fetch_raw,
    open_pyg,
    pyg_item,
    pyg_url,
)

OGBN_ARXIV_URL = "http://snap.stanford.edu/ogb/data/nodeproppred/arxiv.zip"


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

    def check_files(self, root: Path) -> None:
        folder = root / self.name / "cora" / "raw"
        RawFiles(folder, ("cora.npz",), lambda: pyg_url("CitationFull", "cora")).check(self.name)

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
        raise GaptuiError(f"cannot read {path}: {error_reason(exc)}") from exc


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

    def check_files(self, root: Path) -> None:
        RawFiles(root / self.name / "ogbn_arxiv" / "raw", OGBN_ARXIV_FILES, lambda: OGBN_ARXIV_URL).check(self.name)

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
