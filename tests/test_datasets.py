"""Alignment datasets: cache, determinism, atomic builds, stats and the export format."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from engine.datasets import DatasetSpec, build_dataset, export_npz, find_dataset, list_datasets
from engine.errors import GaptuiError
from engine.pairs import ARRAYS


def _files_digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*.npy"))
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
    import engine.datasets as datasets

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
    import engine.datasets as datasets

    current, _ = build_dataset(small(), tmp_path)
    monkeypatch.setattr(datasets, "FORMAT_VERSION", datasets.FORMAT_VERSION - 1)
    older, built = build_dataset(small(), tmp_path)
    assert built and older.id != current.id  # datasets of the old generator are never served as new ones
