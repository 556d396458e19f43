"""The authors' safetensors pair layout: import as the ``pairs`` base, its checks, the Hub, and the export."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from engine.alignment.datasets import DatasetSpec, build_dataset, export_dataset
from engine.errors import GaptuiError
from engine.sources import fetch
from engine.sources.pairs import FILES, PairsParams, PreparedPairs
from tests.support.cli import run_cli
from tests.support.sources import write_folder


def _edge_set(edges: np.ndarray) -> set[tuple[int, int]]:
    """The undirected edges of an edge index ``[2, E]`` or an edge list ``[m, 2]``."""
    a = np.asarray(edges)
    rows = a.T if a.shape[0] == 2 else a
    return {(min(u, v), max(u, v)) for u, v in rows.tolist()}


def _in_g_frame(h: np.ndarray, perm: np.ndarray) -> set[tuple[int, int]]:
    """The edges of H with its nodes named as G's (``perm[i]`` is the node of H matching node ``i`` of G)."""
    inverse = np.empty_like(perm)
    inverse[perm] = np.arange(perm.size)
    return _edge_set(inverse[h])


def test_import_relabels_each_corrupted_graph_and_records_the_files(tmp_path: Path) -> None:
    folder = tmp_path / "pairs"
    written = write_folder(folder)
    dataset, built = build_dataset(DatasetSpec("pairs", 0.05, params={"path": str(folder)}), tmp_path / "ds")
    assert built and dataset.spec["noise"] == 0.05 and dataset.id.startswith("pairs-n5-")
    identity_pairs = 0
    for split in ("train", "val"):
        data = dataset.split(split)
        assert len(data) == len(written[split])
        for p, (g, h) in enumerate(written[split]):
            n, g_index, h_index, perm = data.pair(p)
            assert n == 10 and _edge_set(g_index) == _edge_set(g)
            # never noised again: G~ as written, only relabelled by the planted permutation
            assert _in_g_frame(h_index, perm) == _edge_set(h)
            identity_pairs += np.array_equal(perm, np.arange(n))
        stats = dataset.stats[split]
        files = {name for name in FILES if name.startswith(f"{split}-")}
        assert set(stats["source_files"]) == files
        for name in files:
            assert stats["source_files"][name] == hashlib.sha256((folder / name).read_bytes()).hexdigest()
        removed = sum(len(_edge_set(g) - _edge_set(h)) for g, h in written[split])
        assert stats["removed_edges"] == removed  # measured from the files, not drawn
    assert identity_pairs == 0  # the truth is a permutation, not the identity
    again, built_again = build_dataset(DatasetSpec("pairs", 0.05, params={"path": str(folder)}), tmp_path / "ds")
    assert not built_again and again.id == dataset.id


def test_fewer_pairs_than_the_folder_holds_are_a_seeded_subset(tmp_path: Path) -> None:
    folder = tmp_path / "pairs"
    write_folder(folder)
    spec = DatasetSpec("pairs", 0.1, n_train=5, n_val=2, params={"path": str(folder)})
    dataset, _ = build_dataset(spec, tmp_path / "ds")
    assert dataset.stats["train"]["pairs"] == 5 and dataset.stats["val"]["pairs"] == 2
    with pytest.raises(GaptuiError, match=r"--train 50 asks for more graphs than the split holds \(12\)"):
        build_dataset(DatasetSpec("pairs", 0.1, n_train=50, params={"path": str(folder)}), tmp_path / "ds")


def _rewrite(folder: Path, name: str, change) -> None:
    tensors = load_file(str(folder / name))
    change(tensors)
    save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, str(folder / name))


def _self_loop(t: dict) -> None:
    t["2"] = np.concatenate([t["2"], np.array([[3], [3]])], axis=1)


def _one_way(t: dict) -> None:
    t["1"] = np.concatenate([t["1"], np.array([[0], [9]])], axis=1)
    t["1"] = t["1"][:, ~((t["1"][0] == 9) & (t["1"][1] == 0))]


def _node_out_of_range(t: dict) -> None:
    t["0"] = np.concatenate([t["0"], np.array([[2, 10], [10, 2]])], axis=1)


CASES = {
    "extra key": (
        "train-orders.safetensors",
        lambda t: t.update({"12": np.array([10, 10])}),
        r"pair '12' of .* is missing",
    ),
    "not a pair number": (
        "train-orders.safetensors",
        lambda t: t.update({"x": np.array([10, 10])}),
        r"key 'x' is not one of 0 \.\. 12",
    ),
    "key only in one file": (
        "val-base-graphs.safetensors",
        lambda t: t.update({"7": t["0"]}),
        r"val-base-graphs\.safetensors: pair '7' is not in val-orders",
    ),
    "missing key": (
        "val-corrupted-graphs.safetensors",
        lambda t: t.pop("3"),
        r"val-corrupted-graphs\.safetensors: pair '3' of val-orders\.safetensors is missing",
    ),
    "orders differ": (
        "train-orders.safetensors",
        lambda t: t.update({"4": np.array([10, 11])}),
        r"train-orders\.safetensors: pair 4: G has 10 nodes and G~ 11",
    ),
    "node beyond the order": (
        "train-base-graphs.safetensors",
        _node_out_of_range,
        r"train-base-graphs\.safetensors: pair 0: the edges refer to node 10 but the orders file gives G 10 nodes",
    ),
    "self loop": (
        "train-corrupted-graphs.safetensors",
        _self_loop,
        r"train-corrupted-graphs\.safetensors: pair 2: self loop at node 3",
    ),
    "one direction only": (
        "val-base-graphs.safetensors",
        _one_way,
        r"val-base-graphs\.safetensors: pair 1: edge \(0, 9\) is listed without \(9, 0\)",
    ),
    "wrong shape": (
        "train-base-graphs.safetensors",
        lambda t: t.update({"5": t["5"].T.copy()}),
        r"pair 5: expected an integer edge index of shape \[2, E\]",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_bad_folder_is_one_error_naming_the_file_and_the_pair(tmp_path: Path, case: str) -> None:
    folder = tmp_path / "pairs"
    write_folder(folder)
    name, change, message = CASES[case]
    _rewrite(folder, name, change)
    with pytest.raises(GaptuiError, match=message) as caught:
        build_dataset(DatasetSpec("pairs", 0.1, params={"path": str(folder)}), tmp_path / "ds")
    assert "\n" not in str(caught.value)
    assert not (tmp_path / "ds").exists() or not any((tmp_path / "ds").iterdir())


def test_directed_true_reads_one_way_edges_as_undirected(tmp_path: Path) -> None:
    folder = tmp_path / "pairs"
    write_folder(folder)
    _rewrite(folder, "val-base-graphs.safetensors", _one_way)
    dataset, _ = build_dataset(
        DatasetSpec("pairs", 0.1, params={"path": str(folder), "directed": "true"}), tmp_path / "ds"
    )
    n, g_index, _, _ = dataset.split("val").pair(1)
    assert (0, 9) in _edge_set(g_index)
    assert dataset.meta["normalisation"]["symmetrised"] == 1
    assert "symmetrised 1 one-way edges" in dataset.meta["normalisation_note"]


def test_missing_files_and_garbage_are_one_line(tmp_path: Path) -> None:
    folder = tmp_path / "pairs"
    write_folder(folder)
    (folder / "val-orders.safetensors").unlink()
    with pytest.raises(GaptuiError, match=r"lacks val-orders\.safetensors"):
        build_dataset(DatasetSpec("pairs", 0.1, params={"path": str(folder)}), tmp_path / "ds")
    (folder / "val-orders.safetensors").write_text("not a tensor file")
    with pytest.raises(GaptuiError, match=r"val-orders\.safetensors: not a readable safetensors file"):
        build_dataset(DatasetSpec("pairs", 0.1, params={"path": str(folder)}), tmp_path / "ds")
    with pytest.raises(GaptuiError, match="give either --param path=DIR .* not neither"):
        build_dataset(DatasetSpec("pairs", 0.1), tmp_path / "ds")
    with pytest.raises(GaptuiError, match="not both"):
        DatasetSpec("pairs", 0.1, params={"path": str(folder), "hub": "x"}).canonical()
    with pytest.raises(GaptuiError, match="expected a dataset name"):
        DatasetSpec("pairs", 0.1, params={"hub": "../etc"}).canonical()


def test_hub_offline_names_the_folder_and_the_six_files(tmp_path: Path) -> None:
    with pytest.raises(GaptuiError) as caught:
        build_dataset(DatasetSpec("pairs", 0.1, params={"hub": "ER100"}), tmp_path / "ds", tmp_path / "data")
    text = str(caught.value)
    assert f"in {tmp_path / 'data' / 'pairs' / 'ER100'}" in text and "GAPTUI_OFFLINE=1" in text
    assert all(name in text for name in FILES)


def test_hub_downloads_only_the_six_files_then_imports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub

    remote = tmp_path / "remote" / "ER100"
    write_folder(remote)
    asked: list[tuple] = []

    def fake_download(repo_id, filename, repo_type=None, local_dir=None, **kwargs):
        asked.append((repo_id, filename, repo_type))
        target = Path(local_dir) / filename
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(tmp_path / "remote" / filename, target)
        return str(target)

    monkeypatch.delenv("GAPTUI_OFFLINE")
    monkeypatch.setattr(fetch, "reachable", lambda url: True)  # the Hub answers (its downloads are faked here)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake_download)
    dataset, _ = build_dataset(DatasetSpec("pairs", 0.1, params={"hub": "ER100"}), tmp_path / "ds", tmp_path / "data")
    assert sorted(f for _, f, _ in asked) == sorted(f"ER100/{name}" for name in FILES)
    assert {r for r, _, t in asked} == {"alagesse/graph-alignment-benchmark-data"} and {t for *_, t in asked} == {
        "dataset"
    }
    assert sorted(p.name for p in (tmp_path / "data" / "pairs" / "ER100").iterdir()) == sorted(FILES)
    assert dataset.stats["train"]["pairs"] == 12
    asked.clear()
    PreparedPairs(PairsParams(hub="ER100")).folder(tmp_path / "data")
    assert asked == []  # present files are not fetched again

    def refuse(*args, **kwargs):
        raise OSError("Name or service not known")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", refuse)
    with pytest.raises(
        GaptuiError, match=r"cannot download train-orders\.safetensors \(Name or service not known\); place"
    ):
        PreparedPairs(PairsParams(hub="ER200")).folder(tmp_path / "data")


def test_export_is_the_layout_with_the_permutation_undone_and_imports_to_the_same_pairs(tmp_path: Path) -> None:
    spec = DatasetSpec("er", 0.1, n_train=16, n_val=4, params={"n": 12, "degree": 4})
    source, _ = build_dataset(spec, tmp_path / "ds")
    out = export_dataset(source, tmp_path / "export", "safetensors")
    assert sorted(p.name for p in out.iterdir()) == sorted([*FILES, "gaptui-dataset.json"])
    assert json.loads((out / "gaptui-dataset.json").read_text())["id"] == source.id
    orders = load_file(str(out / "train-orders.safetensors"))
    assert sorted(orders, key=int) == [str(i) for i in range(16)] and orders["0"].dtype == np.int64
    imported, _ = build_dataset(DatasetSpec("pairs", 0.1, params={"path": str(out)}), tmp_path / "ds")
    for split in ("train", "val"):
        a, b = source.split(split), imported.split(split)
        corrupted = load_file(str(out / f"{split}-corrupted-graphs.safetensors"))
        for p in range(len(a)):
            n, g, h, perm = a.pair(p)
            n2, g2, h2, perm2 = b.pair(p)
            assert n == n2 and np.array_equal(g, g2)
            assert _in_g_frame(h, perm) == _in_g_frame(h2, perm2) == _edge_set(corrupted[str(p)])
    with pytest.raises(GaptuiError, match="already holds .*pass --force"):
        export_dataset(source, out, "safetensors")
    export_dataset(source, out, "safetensors", force=True)


@pytest.mark.e2e
def test_cli_export_import_and_train_on_imported_pairs(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    built = run_cli(
        "datasets",
        "build",
        "er",
        "--noise",
        "0.1",
        "--train",
        "12",
        "--val",
        "4",
        "-p",
        "n=12",
        "-w",
        str(ws),
        "--json",
    )
    assert built.returncode == 0, built.stderr
    ident = json.loads(built.stdout)["id"]
    out = tmp_path / "export"
    exported = run_cli("datasets", "export", ident, "--format", "safetensors", "--out", str(out), "-w", str(ws))
    assert exported.returncode == 0, exported.stderr
    again = run_cli("datasets", "export", ident, "--format", "safetensors", "--out", str(out), "-w", str(ws))
    assert again.returncode != 0 and again.stderr.count("error:") == 1 and "--force" in again.stderr
    bad = run_cli("datasets", "export", ident, "--format", "parquet", "--out", str(out), "-w", str(ws))
    assert bad.returncode != 0 and "parquet" in bad.stderr and "safetensors" in bad.stderr
    trained = run_cli(
        "train",
        "--base",
        "pairs",
        "-p",
        f"path={out}",
        "--noise",
        "0.1",
        "--model",
        "gcn",
        "--epochs",
        "2",
        "--batch-size",
        "4",
        "-w",
        str(ws),
    )
    assert trained.returncode == 0, trained.stderr
    assert "val_lap_acc" in trained.stdout
    stats = run_cli("datasets", "list", "-w", str(ws), "--json")
    bases = {d["spec"]["base"] for d in json.loads(stats.stdout)}
    assert bases == {"er", "pairs"}


@pytest.mark.e2e
def test_a_preset_runs_on_imported_pairs(tmp_path: Path) -> None:
    folder = tmp_path / "pairs"
    write_folder(folder, train=16, val=4, n=12)
    preset = tmp_path / "pairs.toml"
    preset.write_text(
        'description = "the authors\' layout as a base"\nnoise = [0.05]\nmodels = ["gcn"]\nseeds = [0]\n'
        "laplacian = false\n\n[run]\nepochs = 2\nbatch_size = 8\nbudget = 3000\nout_dim = 8\n\n"
        f'[[datasets]]\nbase = "pairs"\nparams = {{ path = "{folder}" }}\n'
    )
    ws = tmp_path / "ws"
    ran = run_cli("run", "--preset", str(preset), "-w", str(ws))
    assert ran.returncode == 0, ran.stderr
    table = run_cli("table", "-w", str(ws), "--format", "json")
    assert table.returncode == 0, table.stderr
    assert "pairs[path=" in table.stdout and "gcn" in table.stdout
