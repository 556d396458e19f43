"""The user's own sources: a folder of edge-list files, and any importable PyG dataset."""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from engine.errors import GaptuiError
from engine.graphs import Graph
from engine.sources import SOURCES, params_dict, parse_params
from engine.sources.user import held_out, parse_edge_list, undirected_edge_index

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")


@pytest.fixture(autouse=True)
def _offline(no_network: list[str]) -> None:
    """Every test here runs with downloads refused (and recorded by ``no_network``)."""


def load(
    source: str,
    n_train: int | None = None,
    n_val: int | None = None,
    /,
    seed: int = 0,
    data: Path | None = None,
    **params,
):
    """The splits of source ``source``; ``params`` go through parse_params as strings; ``data``: the data root."""
    cls = SOURCES.get(source)
    return cls(parse_params(cls, {k: str(v) for k, v in params.items()})).load(
        n_train, n_val, np.random.default_rng(seed), data or Path("/nonexistent-data-root")
    )


def edges(g: Graph) -> list[tuple[int, int]]:
    return [tuple(e) for e in g.edges.tolist()]


def write(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text)
    return path


def path_file(folder: Path, name: str, n: int) -> None:
    write(folder, name, "".join(f"{i} {i + 1}\n" for i in range(n - 1)))


# ---------------------------------------------------------------------------------------------------------------
# Parsing and relabelling.


def test_numeric_labels_relabel_in_numeric_order(tmp_path: Path) -> None:
    parsed = parse_edge_list(write(tmp_path, "g.txt", "# a comment\n% another\n\n2 10\n10\t3\n"))
    assert parsed.labels == ["2", "3", "10"]  # numeric order, not string order ("10" < "2")
    assert parsed.num_nodes == 3 and parsed.pairs.tolist() == [[0, 2], [2, 1]]


def test_string_labels_relabel_in_string_order_with_commas_and_extra_columns(tmp_path: Path) -> None:
    parsed = parse_edge_list(write(tmp_path, "g.csv", "b,a,0.5\n c , b , 1.0\n"))
    assert parsed.labels == ["a", "b", "c"] and parsed.pairs.tolist() == [[1, 0], [2, 1]]


@pytest.mark.parametrize(
    ("text", "pairs"),
    [
        ("source,target\n1,2\n2,3\n", [[0, 1], [1, 2]]),  # named columns
        ("from to\nx y\n", [[0, 1]]),  # named columns above string labels
        ("node_a node_b\n5 6\n", [[0, 1]]),  # any non-numeric first line above integer labels
        ("alice bob\nbob carol\n", [[0, 1], [1, 2]]),  # string labels: the first line is an edge
    ],
)
def test_header_line(tmp_path: Path, text: str, pairs: list[list[int]]) -> None:
    assert parse_edge_list(write(tmp_path, "g.txt", text)).pairs.tolist() == pairs


def test_unparsable_line_names_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path, "bad.edges", "1 2\n# fine\n3\n")
    with pytest.raises(GaptuiError, match=r"bad\.edges:3: expected two node labels .*got '3'"):
        parse_edge_list(path)


def test_undirected_edge_index_counts_only_real_changes() -> None:
    from engine.graphs import simple_graph

    def report(pairs: list[tuple[int, int]], n: int):
        ei, both = undirected_edge_index(np.array(pairs), n)
        graph, rep = simple_graph(n, ei)
        return graph.num_edges, rep.self_loops, rep.duplicates, rep.symmetrised, both

    assert report([(0, 1), (1, 2)], 3) == (2, 0, 0, 0, False)  # each edge listed once: no change
    assert report([(0, 1), (1, 0), (1, 2), (2, 1)], 3) == (2, 0, 0, 0, True)  # both directions: no change
    assert report([(0, 1), (1, 0), (0, 1), (2, 2), (1, 2)], 3) == (2, 1, 2, 0, False)
    assert report([(0, 1), (1, 0), (0, 1), (1, 0)], 2) == (1, 0, 1, 0, True)  # the pair listed twice
    assert report([(1, 1)], 2) == (0, 1, 0, 0, False)


# ---------------------------------------------------------------------------------------------------------------
# The folder source.


def test_folder_normalisation_report(tmp_path: Path) -> None:
    folder = tmp_path / "graphs"
    write(folder, "a.txt", "1 2\n2 3\n3 1\n")  # clean
    write(folder, "b.txt", "1 2\n2 1\n1 2\n3 3\n2 3\n")  # two repeats of 1-2 and a self loop
    write(folder, "c.edges", "1 2\n2 1\n2 3\n3 2\n")  # every edge in both directions: a convention
    write(folder, "notes.md", "not an edge list\n")  # ignored: not an edge-list suffix
    (folder / "._a.txt").write_bytes(b"\x00\x05\x16\x07\xff")  # ignored: hidden (a macOS companion file)
    splits = load("folder", 3, 0, path=folder)
    rep = splits.report
    assert (rep.graphs, rep.changed_graphs, rep.self_loops, rep.duplicates, rep.symmetrised) == (3, 1, 1, 2, 0)
    assert any("both directions" in note and "c.edges" in note for note in rep.notes)
    assert sorted(edges(g) for g in splits.train) == [[(0, 1), (0, 2), (1, 2)], [(0, 1), (1, 2)], [(0, 1), (1, 2)]]
    assert "dropped 1 self loops and 2 duplicate edges, symmetrised 0 one-way edges" in rep.summary()


def test_folder_split_sizes_and_determinism(tmp_path: Path) -> None:
    folder = tmp_path / "graphs"
    for n in range(2, 12):  # ten paths told apart by their order
        path_file(folder, f"g{n:02d}.txt", n)
    default = load("folder", path=folder, seed=1)
    assert (len(default.train), len(default.val)) == (9, 1)  # val = ceil(0.1 * 10)
    orders = sorted(g.num_nodes for g in default.train + default.val)
    assert orders == list(range(2, 12))
    a = load("folder", 3, 2, seed=4, path=folder, val_fraction=0.3)
    b = load("folder", 3, 2, seed=4, path=folder, val_fraction=0.3)
    assert [g.num_nodes for g in a.train] == [g.num_nodes for g in b.train]
    assert [g.num_nodes for g in a.val] == [g.num_nodes for g in b.val]
    assert (len(a.train), len(a.val)) == (3, 2)
    assert not {g.num_nodes for g in a.train} & {g.num_nodes for g in a.val}
    assert len(load("folder", path=folder, val_fraction=0.3).val) == 3
    with pytest.raises(GaptuiError, match=r"--train 10 and the default --val 1 ask for 11 graphs but it holds 10"):
        load("folder", 10, path=folder)
    with pytest.raises(GaptuiError, match="ask for 11 graphs"):
        load("folder", 10, 1, path=folder)


def test_held_out_rounds_up_without_float_noise() -> None:
    assert held_out(0.07, 100) == 7  # 0.07 * 100 is 7.000000000000001
    assert held_out(0.28, 25) == 7
    assert (held_out(0.1, 11), held_out(0.1, 10), held_out(0.0, 10)) == (2, 1, 0)


def test_folder_errors(tmp_path: Path) -> None:
    with pytest.raises(GaptuiError, match=r"--param path=DIR"):
        load("folder")
    with pytest.raises(GaptuiError, match="does not exist"):
        load("folder", path=tmp_path / "missing")
    write(tmp_path / "empty", "README.md", "no graphs here\n")
    with pytest.raises(GaptuiError, match=r"no edge-list files \(\*\.txt, .*\) in .*empty"):
        load("folder", path=tmp_path / "empty")
    write(tmp_path / "one", "only.txt", "1 2\n")
    with pytest.raises(GaptuiError, match="too few .* --param bfs=ORDER"):
        load("folder", path=tmp_path / "one")
    write(tmp_path / "blank", "a.txt", "1 2\n")
    write(tmp_path / "blank", "b.txt", "# nothing but a comment\n")
    with pytest.raises(GaptuiError, match=r"b\.txt is empty \(no nodes\)"):
        load("folder", path=tmp_path / "blank")
    write(tmp_path / "loops", "a.txt", "1 2\n")
    write(tmp_path / "loops", "b.txt", "1 1\n2 2\n")
    with pytest.raises(GaptuiError, match=r"b\.txt is empty \(no edges\)"):
        load("folder", path=tmp_path / "loops")
    with pytest.raises(GaptuiError, match="val_fraction"):
        load("folder", path=tmp_path, val_fraction=1.0)
    with pytest.raises(GaptuiError, match="bfs"):
        load("folder", path=tmp_path, bfs=-1)


def test_folder_bfs_from_one_large_graph(tmp_path: Path) -> None:
    folder = tmp_path / "big"
    write(folder, "cycle.txt", "".join(f"{i} {(i + 1) % 50}\n" for i in range(50)))
    splits = load("folder", 4, 2, seed=2, path=folder, bfs=6)
    assert (len(splits.train), len(splits.val)) == (4, 2)
    # Any 6 connected nodes of a 50-cycle induce a path.
    assert all(g.num_nodes == 6 and g.num_edges == 5 for g in splits.train + splits.val)
    again = load("folder", 4, 2, seed=2, path=folder, bfs=6)
    assert [edges(g) for g in again.train + again.val] == [edges(g) for g in splits.train + splits.val]
    assert len(load("folder", path=folder, bfs=3).train) == 5000  # the BFS defaults


def test_folder_bfs_keeps_train_and_validation_graphs_apart(tmp_path: Path) -> None:
    folder = tmp_path / "two"
    write(folder, "clique.txt", "".join(f"{i} {j}\n" for i in range(5) for j in range(i + 1, 5)))
    write(folder, "star.txt", "".join(f"0 {i}\n" for i in range(1, 8)))
    for seed in range(6):
        splits = load("folder", 5, 3, seed=seed, path=folder, bfs=4, val_fraction=0.5)
        # 4 nodes of the clique induce 6 edges, 4 nodes of the star (centre included) 3.
        train = {g.num_edges for g in splits.train}
        val = {g.num_edges for g in splits.val}
        assert len(train) == 1 and len(val) == 1 and train | val == {3, 6}


def test_folder_bfs_skips_graphs_smaller_than_the_order(tmp_path: Path) -> None:
    folder = tmp_path / "three"
    write(folder, "clique.txt", "".join(f"{i} {j}\n" for i in range(5) for j in range(i + 1, 5)))
    write(folder, "star.txt", "".join(f"0 {i}\n" for i in range(1, 8)))
    write(folder, "tiny.txt", "0 1\n")
    outcomes = set()
    for seed in range(8):
        try:
            splits = load("folder", 3, 2, seed=seed, path=folder, bfs=4)
        except GaptuiError as err:
            # The tiny graph drawn as the only validation graph: nothing to sample from.
            assert "(validation graphs): no graph has the 4 nodes a BFS sample needs (largest: 2)" in str(err)
            outcomes.add("error")
            continue
        assert all(g.num_nodes == 4 for g in splits.train + splits.val)
        if any("smaller than 4 nodes not sampled" in note for note in splits.report.notes):
            outcomes.add("skipped")
    assert outcomes == {"error", "skipped"}


# ---------------------------------------------------------------------------------------------------------------
# The pyg source.


class PathGraphs:
    """A dataset class for the ``pyg`` source: ``count`` paths of 2, 3, ... nodes, stored as PyG stores them."""

    def __init__(self, root: str, count: int = 5, loops: bool = False) -> None:
        import torch
        from torch_geometric.data import Data
        from torch_geometric.utils import to_undirected

        self.root = root
        self.graphs = []
        for n in range(2, count + 2):
            ei = to_undirected(torch.stack([torch.arange(n - 1), torch.arange(1, n)]))
            if loops:
                ei = torch.cat([ei, torch.tensor([[0], [0]])], dim=1)
            self.graphs.append(Data(edge_index=ei, num_nodes=n))

    def __len__(self) -> int:
        return len(self.graphs)

    def __getitem__(self, i: int):
        return self.graphs[i]


SPEC = f"{__name__}:PathGraphs"


def test_pyg_source_passes_extra_params_and_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cls = SOURCES.get("pyg")
    params = parse_params(cls, {"dataset": SPEC, "count": "8", "loops": "true"})
    assert params.extra == {"count": 8, "loops": True}
    assert params_dict(params)["count"] == 8
    seen: list[str] = []
    original = PathGraphs.__init__

    def spy(self, root: str, **kwargs) -> None:
        seen.append(root)
        original(self, root, **kwargs)

    monkeypatch.setattr(PathGraphs, "__init__", spy)
    splits = cls(params).load(None, None, np.random.default_rng(0), tmp_path)
    assert seen == [str((tmp_path / "pyg" / "PathGraphs").resolve())]
    assert (len(splits.train), len(splits.val)) == (7, 1)
    assert sorted(g.num_nodes for g in splits.train + splits.val) == list(range(2, 10))
    assert all(g.num_edges == g.num_nodes - 1 for g in splits.train + splits.val)
    rep = splits.report
    assert (rep.graphs, rep.changed_graphs, rep.self_loops, rep.symmetrised) == (8, 8, 8, 0)
    custom = tmp_path / "elsewhere"
    load("pyg", 1, 1, dataset=SPEC, root=str(custom))
    assert seen[-1] == str(custom.resolve())


def test_pyg_source_is_deterministic_and_bfs_samples(tmp_path: Path) -> None:
    a = load("pyg", 3, 2, seed=9, dataset=SPEC, count=6)
    b = load("pyg", 3, 2, seed=9, dataset=SPEC, count=6)
    assert [g.num_nodes for g in a.train + a.val] == [g.num_nodes for g in b.train + b.val]
    sampled = load("pyg", 6, 2, seed=1, dataset=SPEC, count=6, bfs=4)
    assert all(g.num_nodes == 4 and g.num_edges == 3 for g in sampled.train + sampled.val)


def test_pyg_fake_dataset_without_root() -> None:
    splits = load("pyg", 4, 2, dataset="torch_geometric.datasets:FakeDataset", num_graphs=6, avg_num_nodes=12)
    assert (len(splits.train), len(splits.val)) == (4, 2)
    assert all(g.num_edges > 0 for g in splits.train + splits.val)
    with pytest.raises(GaptuiError, match="takes no root folder"):
        load("pyg", dataset="torch_geometric.datasets:FakeDataset", root="/tmp/x")


def test_pyg_errors(tmp_path: Path, no_network: list[str]) -> None:
    with pytest.raises(GaptuiError, match=r"--param dataset=module\.path:Class"):
        load("pyg")
    with pytest.raises(GaptuiError, match=r"PathGraphs\(root=.*, colour='red'\) rejected its arguments"):
        load("pyg", dataset=SPEC, colour="red")
    with pytest.raises(GaptuiError, match="has no attribute 'Nope'"):
        load("pyg", dataset="torch_geometric.datasets:Nope")
    # Offline (conftest sets GAPTUI_OFFLINE=1): a dataset that must download fails at once, naming its root.
    with pytest.raises(
        GaptuiError,
        match=r"TUDataset\(root=.*name='MUTAG'\) needs to download .*GAPTUI_OFFLINE=1\): place them under .*tu$",
    ):
        load("pyg", dataset="torch_geometric.datasets:TUDataset", name="MUTAG", root=str(tmp_path / "tu"))
    assert no_network == []


def test_user_sources_are_registered() -> None:
    assert SOURCES.get("folder").sizes == (None, None)
    assert SOURCES.get("pyg").open_params and not SOURCES.get("folder").open_params


def test_offline_guard_blocks_urllib_and_name_resolution() -> None:
    import socket

    from engine.sources.user import _downloads_blocked

    lookup, opener = socket.getaddrinfo, urllib.request.urlopen
    with _downloads_blocked("off"):
        with pytest.raises(socket.gaierror, match="off"):
            socket.getaddrinfo("example.org", 443)
        with pytest.raises(urllib.error.URLError, match="off"):
            urllib.request.urlopen("https://example.org")
    assert (socket.getaddrinfo, urllib.request.urlopen) == (lookup, opener)
