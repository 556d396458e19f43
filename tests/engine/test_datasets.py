"""Alignment datasets: cache, determinism, atomic builds, stats and the export format."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from engine.alignment.datasets import DatasetSpec, build_dataset, export_npz, find_dataset, list_datasets
from engine.errors import GaptuiError
from engine.pairs import ARRAYS
from tests.support.sources import write_aqsol


def _files_digest(folder: Path) -> dict[str, str]:
    """The dataset's own arrays (the caches derived from them, such as ``symmetry/``, left out)."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*.npy"))
        if p.relative_to(folder).parts[0] in ("train", "val")
    }


def small(seed: int = 0, noise: float = 0.1, **kw) -> DatasetSpec:
    return DatasetSpec("er", noise, n_train=30, n_val=10, seed=seed, params={"n": "40", "degree": "5"}, **kw)


def test_same_seed_gives_identical_files_and_id(tmp_path: Path) -> None:
    a, built_a = build_dataset(small(), tmp_path / "a")
    b, built_b = build_dataset(small(), tmp_path / "b")
    assert built_a and built_b
    assert a.id == b.id
    assert _files_digest(a.path) == _files_digest(b.path)
    c, _ = build_dataset(small(seed=1), tmp_path / "a")
    assert c.id != a.id
    assert _files_digest(c.path) != _files_digest(a.path)


def test_cache_hit_and_string_params_equal_typed(tmp_path: Path) -> None:
    a, built = build_dataset(small(), tmp_path)
    typed = DatasetSpec("er", 0.1, n_train=30, n_val=10, params={"n": 40, "degree": 5.0})
    b, built_again = build_dataset(typed, tmp_path)
    assert built and not built_again and a.id == b.id
    assert [d.id for d in list_datasets(tmp_path)] == [a.id]
    assert find_dataset(tmp_path, a.id[:8]).id == a.id


def test_noise_levels_share_base_graphs(tmp_path: Path) -> None:
    lo, _ = build_dataset(small(noise=0.04), tmp_path)
    hi, _ = build_dataset(small(noise=0.3), tmp_path)
    a, b = lo.split("train"), hi.split("train")
    assert np.array_equal(a.edge_index_g, b.edge_index_g)
    assert not np.array_equal(a.edge_index_h, b.edge_index_h)
    assert hi.stats["train"]["removed_fraction"] > lo.stats["train"]["removed_fraction"]


def test_stats_describe_each_split(tmp_path: Path) -> None:
    ds, _ = build_dataset(small(), tmp_path)
    for split, pairs in (("train", 30), ("val", 10)):
        st = ds.stats[split]
        assert st["pairs"] == pairs
        assert st["mean_order"] == 40
        assert 3 < st["mean_degree"] < 7
        assert 0 <= st["disconnected_h_share"] <= 1
        loaded = ds.split(split)
        assert len(loaded) == pairs
        assert st["mean_degree"] == pytest.approx(float(np.mean(np.diff(loaded.edge_ptr_g) / 40)))


def test_failed_build_leaves_no_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import engine.alignment.datasets as datasets

    calls = {"n": 0}
    real = datasets.correlate

    def flaky(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:  # the validation split
            raise RuntimeError("disk full")
        return real(*args, **kwargs)

    monkeypatch.setattr(datasets, "correlate", flaky)
    with pytest.raises(RuntimeError):
        build_dataset(small(), tmp_path)
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setattr(datasets, "correlate", real)
    ds, built = build_dataset(small(), tmp_path)
    assert built and sorted(p.name for p in tmp_path.iterdir()) == [ds.id]


def test_export_npz_layout(tmp_path: Path) -> None:
    ds, _ = build_dataset(small(), tmp_path)
    out = export_npz(ds, tmp_path / "out" / "pairs.npz")
    data = np.load(out)
    assert sorted(data.files) == sorted(f"{s}_{a}" for s in ("train", "val") for a in ARRAYS)
    for s, count in (("train", 30), ("val", 10)):
        n = data[f"{s}_num_nodes"]
        assert n.shape == (count,)
        assert data[f"{s}_edge_ptr_g"].shape == (count + 1,)
        assert data[f"{s}_edge_index_g"].shape == (2, data[f"{s}_edge_ptr_g"][-1])
        assert data[f"{s}_perm"].shape == (n.sum(),)
        # pair 0: local ids, both directions of each edge
        e = data[f"{s}_edge_index_h"][:, data[f"{s}_edge_ptr_h"][0] : data[f"{s}_edge_ptr_h"][1]]
        assert e.max() < n[0]
        assert {(a, b) for a, b in e.T} == {(b, a) for a, b in e.T}
    with pytest.raises(GaptuiError, match=r"\.npz"):
        export_npz(ds, tmp_path / "pairs.txt")


def test_bad_sizes_are_refused(tmp_path: Path) -> None:
    with pytest.raises(GaptuiError, match="--train"):
        build_dataset(DatasetSpec("er", 0.1, n_train=-1), tmp_path)
    with pytest.raises(GaptuiError, match="noise model"):
        build_dataset(DatasetSpec("er", 0.1, noise_model="remove"), tmp_path)


def test_stats_match_the_saved_pairs(tmp_path: Path) -> None:
    from engine.graphs import is_connected_per_graph

    ds, _ = build_dataset(small(noise=0.2), tmp_path)
    for split in ("train", "val"):
        st, pairs = ds.stats[split], ds.split(split)
        connected = is_connected_per_graph(pairs.num_nodes, pairs.edge_index_h, pairs.edge_ptr_h)
        assert st["disconnected_h_share"] == pytest.approx(float((~connected).mean()))
        edges_g = pairs.edge_index_g.shape[1] // 2
        edges_h = pairs.edge_index_h.shape[1] // 2
        assert st["edges"] == edges_g
        # |E_H| = |E_G| - removed + added
        assert edges_h == pytest.approx(edges_g * (1 - st["removed_fraction"] + st["added_fraction"]), abs=1e-6)
        for p in range(len(pairs)):
            n, eg, eh, perm = pairs.pair(p)
            assert sorted(perm.tolist()) == list(range(n))
            for ei in (eg, eh):
                assert (np.diff(ei[0] * n + ei[1]) > 0).all()


def test_format_version_keys_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import engine.alignment.datasets as datasets

    current, _ = build_dataset(small(), tmp_path)
    monkeypatch.setattr(datasets, "FORMAT_VERSION", datasets.FORMAT_VERSION - 1)
    older, built = build_dataset(small(), tmp_path)
    assert built and older.id != current.id  # datasets of the old generator are never served as new ones


# issue 19, real molecules


@pytest.mark.parametrize(
    ("spec", "ident", "digest"),
    [
        (
            DatasetSpec("er", 0.12, n_train=50, n_val=10, seed=3, params={"n": 30}),
            "er-n12-6ca34fc7c8ed",
            "84a92bc3b38b3940",
        ),
        (DatasetSpec("er", 0.3, "add", 20, 5, seed=1, params={"n": 20}), "er-n30-12640a1139eb", "76a35c05d6d2a555"),
        (DatasetSpec("ringmol", 0.15, params={"count": 100}), "ringmol-n15-0acde96fb915", "ad6d60060b51fdff"),
        (DatasetSpec("tree", 0.1, n_train=30, n_val=5), "tree-n10-e39c04880820", "85c90c12a5f514dc"),
    ],
)
def test_datasets_without_capped_or_empty_graphs_keep_their_ids_and_bytes(
    tmp_path: Path, spec: DatasetSpec, ident: str, digest: str
) -> None:
    # Pinned before p_add was capped and graphs without edges were left out: neither may change these datasets.
    # (A deliberate change of the random stream bumps FORMAT_VERSION, which changes the ids, and these values.)
    import json

    dataset, _ = build_dataset(spec, tmp_path)
    files = json.dumps(_files_digest(dataset.path), sort_keys=True).encode()
    assert (dataset.id, hashlib.sha256(files).hexdigest()[:16]) == (ident, digest)
    assert dataset.stats["train"]["capped_graphs"] == 0 and dataset.stats["train"]["left_out"] == 0


def test_graphs_too_dense_for_the_noise_are_capped_not_refused(tmp_path: Path) -> None:
    # ER(10, degree 8): about 40 of 45 pairs are edges, far fewer non-edges than eta*|E| = 20: every graph is capped
    # (this dataset was refused with "p_add = eta*|E|/(...) > 1" before). Capped graphs gain all their non-edges.
    spec = DatasetSpec("er", 0.5, n_train=20, n_val=5, params={"n": 10, "degree": 8})
    dataset, _ = build_dataset(spec, tmp_path)
    for name in ("train", "val"):
        stats, split = dataset.stats[name], dataset.split(name)
        assert stats["capped_graphs"] == stats["pairs"] == len(split)
        free = 45 * len(split) - stats["edges"]
        assert stats["added_edges"] == free and stats["added_fraction"] == pytest.approx(free / stats["edges"])
        assert 0 < stats["removed_edges"] < stats["edges"]
        # H = the complete graph minus the removed edges.
        assert split.edge_index_h.shape[1] // 2 == 45 * len(split) - stats["removed_edges"]


def test_aqsol_with_a_triangle_and_a_two_atom_molecule_builds(tmp_path: Path) -> None:
    # The AQSOL fixture holds a triangle (train) and a 2-atom molecule (val): complete graphs with nothing to add,
    # which refused the whole dataset at any noise before p_add was capped.

    write_aqsol(tmp_path / "raw")
    dataset, _ = build_dataset(DatasetSpec("aqsol", 0.1), tmp_path / "datasets", tmp_path / "raw")
    assert [dataset.stats[s]["capped_graphs"] for s in ("train", "val")] == [1, 1]
    assert [dataset.stats[s]["pairs"] for s in ("train", "val")] == [3, 2]
