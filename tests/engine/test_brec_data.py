"""BREC's pairs as gaptui ships them, the exact WL tests on them (their published counts), and bad data folders
(one error line naming the file, the pair and the problem)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from engine.brec.data import CATEGORIES, SHIPPED, category, data_digest, load_category, load_pairs
from engine.brec.wl import fwl2, group_rows, verdicts, wl1
from engine.errors import GaptuiError
from engine.graphs import Graph
from tests.support.cli import run_cli


def test_the_shipped_pairs_are_brecs_400_with_their_licence_and_ids_in_brecs_order() -> None:
    assert (SHIPPED / "LICENSE").read_text().startswith("MIT License")
    assert "GraphPKU/BREC" in (SHIPPED / "README.md").read_text()
    ids = [p.id for c in CATEGORIES for p in load_category(c.key)]
    assert ids == list(range(400))
    counts = {c.key: len(load_category(c.key)) for c in CATEGORIES}
    assert counts == {c.key: c.pairs for c in CATEGORIES}
    assert [load_category(k)[0].id for k in ("basic", "strongly-regular", "cfi", "distance-regular")] == [
        0,
        110,
        260,
        380,
    ]
    assert max(p.nodes for p in load_category("cfi")) == 198
    # BREC's pairs are graphs of one order and size each (1-WL sees at least that)
    assert all(p.g.num_nodes == p.h.num_nodes and p.g.num_edges == p.h.num_edges for c in CATEGORIES
               for p in load_category(c.key))  # fmt: skip


def test_1wl_tells_none_of_the_400_pairs_apart() -> None:
    assert sum(wl1(p.g, p.h)[0] for c in CATEGORIES for p in load_category(c.key)) == 0


def test_3wl_on_the_small_categories_matches_brecs_table() -> None:
    found = {key: sum(fwl2(p.g, p.h)[0] for p in load_category(key)) for key in ("basic", "regular", "extension")}
    assert found == {"basic": 60, "regular": 50, "extension": 100}
    # strongly regular graphs with equal parameters: 2-FWL's colouring is stable after one round
    assert sum(fwl2(p.g, p.h)[0] for p in load_pairs("strongly-regular", limit=10)) == 0


@pytest.mark.e2e
@pytest.mark.slow  # about a minute on a loaded core: the CFI pairs reach 198 nodes
def test_3wl_tells_270_of_400_pairs_apart_as_the_paper_reports(tmp_path: Path) -> None:
    res = run_cli("brec", "wl", "--test", "3-wl", "--json", "-w", str(tmp_path / "ws"))
    assert res.returncode == 0, res.stderr
    counts = json.loads(res.stdout)["3-wl"]
    assert {k: v[0] for k, v in counts.items()} == {
        "basic": 60, "regular": 50, "strongly-regular": 0, "extension": 100, "cfi": 60, "4-vertex": 0,
        "distance-regular": 0, "total": 270,
    }  # fmt: skip


def _cycle(n: int) -> Graph:
    return Graph(n, np.array([(min(i, (i + 1) % n), max(i, (i + 1) % n)) for i in range(n)], dtype=np.int64))


def test_the_tests_on_small_known_pairs() -> None:
    c6, two_c3 = _cycle(6), Graph(6, np.array([[0, 1], [0, 2], [1, 2], [3, 4], [3, 5], [4, 5]]))
    assert wl1(c6, two_c3) == (False, 1)  # both 2-regular: 1-WL is stable at once
    assert fwl2(c6, two_c3)[0]  # 2-FWL sees the triangles
    assert not fwl2(c6, _cycle(6))[0] and not wl1(c6, _cycle(6))[0]
    assert wl1(c6, _cycle(7)) == (True, 0)  # different orders: no round needed


def test_rows_are_grouped_exactly_even_when_every_hash_collides(monkeypatch: pytest.MonkeyPatch) -> None:
    import engine.brec.wl as wl

    rows = np.random.default_rng(3).integers(0, 4, size=(500, 6))
    expected = np.unique(rows, axis=0, return_inverse=True)[1].reshape(-1)

    def same_partition(a: np.ndarray, b: np.ndarray) -> bool:
        return len(set(zip(a.tolist(), b.tolist(), strict=True))) == len(set(a.tolist())) == len(set(b.tolist()))

    assert same_partition(group_rows(rows), expected)
    wl._weights.cache_clear()
    monkeypatch.setattr(wl, "_weights", lambda width: np.zeros(width, dtype=np.uint64))  # one hash for every row
    assert same_partition(group_rows(rows), expected)


def test_verdicts_are_cached_per_test_and_category_and_read_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import engine.brec.wl as wl

    pairs = load_pairs("basic", limit=3)
    first = verdicts("3-wl", pairs, data_digest(), tmp_path)
    assert [v.distinguished for v in first] == [True, True, True]
    monkeypatch.setattr(wl, "verdict", lambda row, pair: pytest.fail("computed again"))
    assert [v.distinguished for v in verdicts("3-wl", pairs, data_digest(), tmp_path)] == [True, True, True]
    (cache,) = (tmp_path / "brec").glob("3-wl-basic-*.json")
    cache.write_text(cache.read_text().replace("true", "false", 1))  # tampered: moved aside, computed again
    monkeypatch.setattr(wl, "verdict", lambda row, pair: wl.Verdict(pair.id, True, 1, 0.0))
    assert [v.distinguished for v in verdicts("3-wl", pairs, data_digest(), tmp_path)] == [True, True, True]
    assert list((tmp_path / "brec").glob("3-wl-basic-*.corrupt-*"))


def _folder(tmp_path: Path) -> Path:
    folder = tmp_path / "brec-data"
    shutil.copytree(SHIPPED, folder)
    return folder


def test_a_folder_of_brecs_layout_is_read_and_bad_files_are_named_with_the_pair(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    assert len(load_category("cfi", str(folder))) == 100 and data_digest(str(folder)) == data_digest()
    basic = np.load(folder / "basic.npy")
    basic[7] = "I??"  # pair 3, graph 2: 10 nodes need 8 more characters
    np.save(folder / "basic.npy", basic)
    with pytest.raises(GaptuiError, match=r"basic\.npy: pair 3, graph 2: graph6 string 'I\?\?' does not parse"):
        load_category("basic", str(folder))
    np.save(folder / "dr.npy", np.array(["A_", "A_", "A_"]))
    with pytest.raises(GaptuiError, match=r"dr\.npy: shape \(3,\): expected pairs, an \(N, 2\) array"):
        load_category("distance-regular", str(folder))
    np.save(folder / "4vtx.npy", np.array([], dtype=str))
    with pytest.raises(GaptuiError, match=r"4vtx\.npy: holds no graph6 strings"):
        load_category("4-vertex", str(folder))
    np.save(folder / "4vtx.npy", np.arange(4))
    with pytest.raises(GaptuiError, match=r"4vtx\.npy: holds int64, expected graph6 strings"):
        load_category("4-vertex", str(folder))
    (folder / "cfi.npy").unlink()
    with pytest.raises(GaptuiError, match=r"cfi\.npy: file not found"):
        load_category("cfi", str(folder))
    with pytest.raises(GaptuiError, match=r"'cfl' is not a BREC category \(did you mean 'cfi'\?\)"):
        category("cfl")


@pytest.mark.e2e
def test_the_cli_refuses_a_bad_data_folder_in_one_line(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    regular = np.load(folder / "regular.npy")
    np.save(folder / "regular.npy", regular.reshape(25, 4))
    res = run_cli("brec", "list", "--data", str(folder))
    assert res.returncode == 2
    (line,) = res.stderr.strip().splitlines()
    assert line.startswith(f"error: {folder / 'regular.npy'}: shape (25, 4): expected pairs")
    res = run_cli("brec", "wl", "--category", "regullar", "-w", str(tmp_path / "ws"))
    assert res.returncode == 2
    assert res.stderr.strip() == (
        "error: --category: 'regullar' is not a BREC category (did you mean 'regular'?); known: basic, regular, "
        "strongly-regular, extension, cfi, 4-vertex, distance-regular"
    )
