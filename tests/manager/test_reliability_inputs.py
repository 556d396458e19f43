"""Hostile and faulty inputs of the newest surfaces (the ``pairs`` base and its export, ``properties score``, preset
code, positional inputs): one size check before any allocation from a declared size, one reader of regular files,
typed fields, nothing of the user's replaced, nothing left behind. Each case is one ``error:`` line (exit 2), or a
``warning:``, never a traceback."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from engine.alignment.datasets import DatasetSpec, build_dataset
from engine.errors import GaptuiError
from tests.support.cli import gaptui
from tests.support.sources import write_folder


def _safetensors(path: Path, header: dict, payload: bytes = b"") -> None:
    """A file in the safetensors format with exactly this header (whatever it declares) and payload."""
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + payload)


def _keys(path: Path, keys: list[str]) -> None:
    """Orders of 10 nodes under ``keys`` (the pair numbers the file claims)."""
    header, payload = {}, b""
    for key in keys:
        header[key] = {"dtype": "I64", "shape": [2], "data_offsets": [len(payload), len(payload) + 16]}
        payload += np.array([10, 10], dtype=np.int64).tobytes()
    _safetensors(path, header, payload)


def _orders(path: Path, order: int) -> None:
    """The orders file of ``path``'s split with pair 0 declaring ``order`` nodes."""
    tensors = load_file(str(path))
    tensors["0"] = np.array([order, order], dtype=np.int64)
    save_file(tensors, str(path))


PAIRS_CASES = [
    (  # 96 bytes declaring a [2, 5e8] int64 tensor: 8 GB it does not hold
        "declared tensor larger than the file",
        "val-base-graphs.safetensors",
        lambda p: _safetensors(
            p, {"0": {"dtype": "I64", "shape": [2, 500_000_000], "data_offsets": [0, 8 * 10**9]}}, b"\0" * 16
        ),  # fmt: skip
        "declares I64 [2, 500000000] (8,000,000,000 bytes)",
    ),
    (
        "header longer than the file",
        "train-orders.safetensors",
        lambda p: p.write_bytes(struct.pack("<Q", 1 << 60) + b"{}"),
        "not a readable safetensors file (its header declares 1,152,921,504,606,846,976 bytes",
    ),
    (
        "bfloat16 orders",
        "val-orders.safetensors",
        lambda p: _safetensors(p, {"0": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]}}, b"\0" * 4),
        "tensor '0' is BF16: expected an integer type",
    ),
    (
        "a key in Arabic-Indic digits",
        "val-orders.safetensors",
        lambda p: _keys(p, ["0", "1", "2", "\u0663"]),
        "key '\u0663' is not one of 0 .. 3",
    ),  # fmt: skip
    (
        "a key in superscript digits",
        "val-orders.safetensors",
        lambda p: _keys(p, ["0", "1", "2", "\u00b2"]),
        "key '\u00b2' is not one of 0 .. 3",
    ),  # fmt: skip
    (
        "an order of 10^12 nodes",
        "val-orders.safetensors",
        lambda p: _orders(p, 10**12),
        "pair 0 needs about",
    ),  # fmt: skip
    (
        "an empty validation split",
        "val-orders.safetensors",
        lambda p: _keys(p, []),
        "no pair: the val split is empty",
    ),  # fmt: skip
    (
        "a folder where a file should be",
        "val-orders.safetensors",
        lambda p: (p.unlink(), p.mkdir()),
        "lacks val-orders.safetensors",
    ),  # fmt: skip
]


@pytest.mark.parametrize(("name", "target", "spoil", "expected"), PAIRS_CASES, ids=[c[0] for c in PAIRS_CASES])
def test_a_hostile_pairs_folder_is_one_line_before_any_allocation(
    tmp_path: Path, name: str, target: str, spoil, expected: str
) -> None:
    folder = tmp_path / "pairs"
    write_folder(folder)
    if target.startswith("val-") and name in ("a key in Arabic-Indic digits", "a key in superscript digits"):
        for kind in ("base-graphs", "corrupted-graphs"):  # the other two files of the split hold the same keys
            path = folder / f"val-{kind}.safetensors"

            tensors = load_file(str(path))
            tensors["\u0663" if "Arabic" in name else "\u00b2"] = tensors.pop("3")
            save_file(tensors, str(path))
    spoil(folder / target)
    if "empty" in name:
        for kind in ("base-graphs", "corrupted-graphs"):
            _safetensors(folder / f"val-{kind}.safetensors", {})
    with pytest.raises(GaptuiError, match=None) as caught:
        build_dataset(DatasetSpec("pairs", 0.1, params={"path": str(folder)}), tmp_path / "ds")
    assert expected in str(caught.value) and "\n" not in str(caught.value)
    assert not (tmp_path / "ds").exists() or not any((tmp_path / "ds").iterdir())


def test_the_pairs_command_line_gives_the_same_one_line(tmp_path: Path, monkeypatch, capsys) -> None:
    folder = tmp_path / "pairs"
    write_folder(folder)
    _orders(folder / "train-orders.safetensors", 10**12)
    ran = gaptui(monkeypatch, capsys, "datasets", "build", "pairs", "--noise", "0.1", "-p", f"path={folder}",
                 "-w", str(tmp_path / "ws"))  # fmt: skip
    assert "train-orders.safetensors: pair 0 needs about" in ran.one_error()


def test_replaced_pair_files_are_built_again_never_served_from_the_cache(tmp_path: Path, capfd) -> None:
    folder = tmp_path / "pairs"
    write_folder(folder, seed=0)
    spec = DatasetSpec("pairs", 0.1, params={"path": str(folder)})
    first, _ = build_dataset(spec, tmp_path / "ds")
    old = first.meta["source_files"]
    write_folder(folder, seed=1)  # the same folder, other pairs
    second, built = build_dataset(spec, tmp_path / "ds")
    assert built and "changed since (SHA-256): building it again" in capfd.readouterr().err
    assert second.meta["source_files"] != old
    assert second.stats["train"]["source_files"] == {k: v for k, v in second.meta["source_files"].items()
                                                       if k.startswith("train-")}  # fmt: skip
    again, built_again = build_dataset(spec, tmp_path / "ds")
    assert not built_again and again.meta["source_files"] == second.meta["source_files"]


# ------------------------------------------------------------------------------------------ files the user names


def _fifo(tmp: Path) -> str:
    os.mkfifo(tmp / "pipe.txt")
    return str(tmp / "pipe.txt")


def _huge(tmp: Path) -> str:
    with open(tmp / "huge.txt", "wb") as fh:  # sparse: takes no disk
        fh.truncate((1 << 30) + 1)
    return str(tmp / "huge.txt")


SCORE_FILES = [
    ("/dev/zero", lambda t: "/dev/zero", "/dev/zero: not a regular file (a character device)"),
    ("a FIFO", _fifo, "pipe.txt: not a regular file (a FIFO)"),
    ("a folder", lambda t: str(t), ": a folder, not a file"),
    ("a file over 1 GiB", _huge, "1,073,741,825 bytes, more than the 1,073,741,824 read from such a file"),
    ("a missing file", lambda t: str(t / "none.txt"), "no such file or folder"),
]


@pytest.mark.parametrize(("name", "make", "expected"), SCORE_FILES, ids=[c[0] for c in SCORE_FILES])
def test_score_reads_only_regular_files_of_bounded_size(
    tmp_path: Path, monkeypatch, capsys, name: str, make, expected: str
) -> None:
    path = make(tmp_path)
    ran = gaptui(monkeypatch, capsys, "properties", "score", "anyrun", path, "-w", str(tmp_path / "ws"))
    assert expected in ran.one_error()  # the file is refused before the run is even looked up


def test_every_reader_of_user_files_refuses_a_fifo(tmp_path: Path) -> None:
    from engine.properties.published import read_csv
    from engine.sources.user import parse_edge_list
    from gaptui.presets import read_preset_file

    fifo = Path(_fifo(tmp_path))
    for read in (read_csv, parse_edge_list, read_preset_file):
        with pytest.raises(GaptuiError, match="not a regular file"):
            read(fifo)


def test_a_graph_of_too_many_nodes_is_refused_before_its_adjacency(tmp_path: Path) -> None:
    from engine.properties.scoring import read_graphs

    path = tmp_path / "wide.txt"  # 400,000 distinct nodes: a 160 GB adjacency, about 4.6 TB scored
    path.write_text("".join(f"a{i} b{i}\n" for i in range(200_000)))
    with pytest.raises(GaptuiError, match=r"scoring .*wide\.txt needs about .*\(400,000 nodes"):
        read_graphs(path)


def test_explain_holds_a_bounded_batch_of_graphs_whatever_their_count(monkeypatch) -> None:
    import torch

    from engine.properties import scoring
    from engine.properties.backbone import IDGNNFast

    torch.manual_seed(0)
    model = IDGNNFast("mean", hidden=8, layers=1)
    rng = np.random.default_rng(0)
    n = 40
    adjacency = rng.random((n, n)) < 0.1
    edges = [(int(i), int(j)) for i, j in zip(*np.nonzero(adjacency), strict=True)]
    graph = scoring.UserGraph("g.txt", [f"v{i}" for i in range(n)], adjacency, None, edges)
    monkeypatch.setattr(scoring, "EXPLAIN_BATCH_BYTES", 7 * n * n * scoring.FORWARD_CELL_BYTES)
    copies: list[int] = []
    repeat = np.repeat

    def counted(a, count, axis=None):
        copies.append(int(count))
        return repeat(a, count, axis=axis)

    monkeypatch.setattr(np, "repeat", counted)
    explained = scoring.explain(model, graph, top=len(edges))
    assert len(edges) > 7 and max(copies) <= 7  # never one copy per edge at once (2,500 nodes: 70 GB)
    base = scoring.probabilities(model, adjacency[None])[0]
    for e in explained:
        u, v = (graph.nodes.index(x) for x in e["edge"])
        without = adjacency.copy()
        without[u, v] = False
        assert e["without"] == pytest.approx(scoring.probabilities(model, without[None])[0], abs=1e-6)
        assert e["change"] == pytest.approx(e["without"] - base, abs=1e-6)


def test_names_in_files_are_shown_as_written_never_as_markup(tmp_path: Path, monkeypatch, capsys) -> None:
    import torch

    import gaptui.families.properties.commands as commands
    from engine.properties.backbone import IDGNNFast

    torch.manual_seed(0)
    model = IDGNNFast("mean", hidden=8, layers=1)
    spec = SimpleNamespace(property="irreflexive", pooling="mean")
    monkeypatch.setattr(commands, "_scoring_model", lambda run, ws: ({"id": "r1", "metrics": {}}, spec, model))
    edges = tmp_path / "x[bold]y.txt"
    edges.write_text("a b\nb c\n")
    triples = tmp_path / "kg.csv"
    triples.write_text("head,relation,tail\na,[/bold]closing,b\nb,[red]red[/red],c\n")
    ran = gaptui(monkeypatch, capsys, "properties", "score", "r1", str(edges), str(triples), "-w", str(tmp_path))
    assert ran.code == 0, ran.err
    assert "x[bold]y.txt" in ran.out and "[/bold]closing" in ran.out and "[red]red[/red]" in ran.out


# ------------------------------------------------------------------------------------------ digits and numbers


DIGITS = [
    ("--param in Arabic-Indic digits", ["-p", "n=\u0661\u0662"], "expected an integer, got '\u0661\u0662'"),
    ("--gpus in Arabic-Indic digits", ["--gpus", "\u0661"], "expected a comma-separated list of GPU indices"),
    ("positional K in superscript", ["--features", "degree+lap:\u00b2"], "K '\u00b2' of 'lap' is not a whole number"),
]


@pytest.mark.parametrize(("name", "extra", "expected"), DIGITS, ids=[c[0] for c in DIGITS])
def test_digits_are_ascii_digits(tmp_path: Path, monkeypatch, capsys, name: str, extra, expected: str) -> None:
    args = ["train", "--base", "er", "--noise", "0.1", "--model", "gcn", "--epochs", "1", "--train", "4", "--val", "2"]
    if "--gpus" in name:
        args = ["run", "--preset", "smoke", "--dry-run"]
    elif "--param" not in name:
        args += ["-p", "n=12"]
    ran = gaptui(monkeypatch, capsys, *args, *extra, "-w", str(tmp_path / "ws"))
    assert expected in ran.one_error()
    assert not (tmp_path / "ws" / "runs").exists()


def test_an_empty_validation_split_or_a_baseline_with_inputs_is_refused(tmp_path: Path, monkeypatch, capsys) -> None:
    base = ["train", "--base", "er", "--noise", "0.1", "-p", "n=12", "--train", "4", "-w", str(tmp_path / "ws")]
    ran = gaptui(monkeypatch, capsys, *base, "--model", "gcn", "--val", "0", "--epochs", "1")
    assert "--val 0: a dataset needs at least one validation pair" in ran.one_error()
    ran = gaptui(monkeypatch, capsys, *base, "--model", "laplacian", "--val", "2", "--features", "degree+lap:8")
    assert "model laplacian with lap:8: the training-free baseline takes no model options" in ran.one_error()
    assert not (tmp_path / "ws" / "runs").exists()


def test_a_preset_with_positional_run_features_plans_its_baseline_without_them(tmp_path: Path) -> None:
    from engine.alignment.family import Alignment
    from engine.alignment.preset import grid, parse_preset
    from engine.tasks import Placement

    raw = {"noise": [0.1], "models": ["gcn"], "laplacian": True, "seeds": [0], "run": {"features": "degree+lap:4",
           "epochs": 1}, "datasets": [{"base": "er", "params": {"n": 12}, "train": 4, "val": 2}]}  # fmt: skip
    specs = grid(parse_preset(raw, tmp_path / "p.toml"), Placement(str(tmp_path), str(tmp_path)))
    baseline = next(s for s in specs if s.model == "laplacian")
    assert baseline.features == "degree" and Alignment().record_axes(baseline)["model"] == "laplacian"


def test_a_run_that_ends_without_a_metric_fails() -> None:
    from engine.alignment.family import Alignment
    from engine.tasks import RunFailed
    from engine.worker import check_metrics

    for metrics in ({}, {"val_lap_acc": float("nan")}, {"train_loss": 0.3}, {"val_lap_acc": "0.5"}):
        with pytest.raises(RunFailed, match="ended without a value for its metric val_lap_acc"):
            check_metrics(Alignment(), metrics)
    check_metrics(Alignment(), {"val_lap_acc": 0.5})


# ------------------------------------------------------------------------------------------ export: data, leftovers


@pytest.fixture
def dataset_ws(tmp_path: Path) -> tuple[Path, str]:
    ws = tmp_path / "ws"
    dataset, _ = build_dataset(DatasetSpec("er", 0.1, n_train=4, n_val=2, params={"n": 12}), ws / "datasets")
    return ws, dataset.id


def test_export_never_replaces_the_users_own_json(dataset_ws, tmp_path: Path, monkeypatch, capsys) -> None:
    ws, ident = dataset_ws
    out = tmp_path / "mine"
    out.mkdir()
    (out / "gaptui-dataset.json").write_text('{"my": "notes"}')
    ran = gaptui(monkeypatch, capsys, "datasets", "export", ident, "--format", "safetensors", "--out", str(out),
                 "-w", str(ws))  # fmt: skip
    assert "already holds gaptui-dataset.json; choose another folder or pass --force" in ran.one_error()
    assert sorted(p.name for p in out.iterdir()) == ["gaptui-dataset.json"]
    assert (out / "gaptui-dataset.json").read_text() == '{"my": "notes"}'


@pytest.mark.e2e
def test_export_removes_what_a_killed_export_left_and_writes_files_as_open_would(
    dataset_ws, tmp_path: Path, monkeypatch, capsys
) -> None:
    from engine.files import new_file_mode

    ws, ident = dataset_ws
    out = tmp_path / "out"
    out.mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = dead.stdout.strip()
    stale = [out / f".train-orders.safetensors.{pid}.tmp", out / f".gaptui-dataset.json.{pid}.tmp"]
    for path in stale:  # what a SIGKILLed export leaves: hidden temporary files of a process that is gone
        path.write_bytes(b"x" * 1000)
    ran = gaptui(monkeypatch, capsys, "datasets", "export", ident, "--format", "safetensors", "--out", str(out),
                 "-w", str(ws))  # fmt: skip
    assert ran.code == 0, ran.err
    assert not any(p.name.endswith(".tmp") for p in out.iterdir())
    modes = {p.name: p.stat().st_mode & 0o777 for p in out.iterdir()}
    assert len(modes) == 7 and set(modes.values()) == {new_file_mode()}, modes  # not 0600 beside a 0644 JSON


def test_a_corrupt_positional_cache_is_said_by_the_command_that_plans_the_runs(tmp_path: Path, capfd) -> None:
    from engine.alignment.spec import RunSpec
    from gaptui.runner import prepare

    spec = RunSpec.from_dict({"dataset": {"base": "er", "noise": 0.1, "n_train": 4, "n_val": 2,
                              "params": {"n": 12}}, "model": "gcn", "features": "degree+lap:4", "epochs": 1,
                              "datasets_dir": str(tmp_path / "ds"), "data_root": str(tmp_path)})  # fmt: skip
    assert prepare([spec]) == {}
    (entry,) = [p for p in (tmp_path / "ds").glob("*/positional/val-lap4-*") if p.is_dir()]
    (entry / "g.npy").write_bytes((entry / "g.npy").read_bytes()[:-8])  # torn
    capfd.readouterr()
    assert prepare([spec]) == {}
    err = capfd.readouterr().err
    assert "warning: cached positional inputs" in err and "is corrupt" in err and "moved aside" in err


# ------------------------------------------------------------------------------------------ preset code


def test_a_workspace_cannot_say_which_preset_code_is_trusted(tmp_path: Path) -> None:
    import hashlib

    from gaptui.preset_code import TRUST_FILE, is_trusted, review_preset
    from gaptui.workspace import Workspace

    ws = Workspace(tmp_path / "received")
    preset = ws.root / "presets" / "x.toml"
    preset.parent.mkdir(parents=True)
    (tmp_path / "evil.py").write_text("raise SystemExit('imported')\n")
    preset.write_text('noise = [0.1]\nmodels = ["evil:Model"]\n[[datasets]]\nbase = "er"\n')
    sha = hashlib.sha256(preset.read_bytes()).hexdigest()
    entry = {"file": str(preset), "sha256": sha, "allowed": "2026-01-01T00:00:00Z"}
    (ws.root / TRUST_FILE).write_text(json.dumps({sha: entry, str(preset.resolve()): entry}))
    assert not is_trusted(review_preset("x", ws))
