"""A grid whose real datasets are missing is refused before anything is recorded, dry run included: one line per
dataset naming it, the folder and the files to place there; without network, downloads are not even tried (the
Hub's retries included)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from engine.errors import GaptuiError
from engine.sources import check_sources_files, fetch
from tests.support.cli import run_cli

#: Real datasets of a grid, as a preset names them (their sizes small: nothing is built here).
REAL = """
task = "alignment"
name = "real"
noise = [0.1]
models = ["gcn"]
seeds = [0, 1]

[run]
epochs = 1

[[datasets]]
base = "er"
params = { n = 12, degree = 3 }
train = 8
val = 4

[[datasets]]
base = "aqsol"
train = 8
val = 4

[[datasets]]
base = "ogbn-arxiv"
params = { order = 12 }
train = 8
val = 4
"""


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine whose every connection fails (as without a network), downloads not switched off."""

    def refuse(*_args: object, **_kwargs: object) -> socket.socket:
        raise OSError("Network is unreachable")

    monkeypatch.delenv("GAPTUI_OFFLINE", raising=False)
    monkeypatch.setattr(fetch, "_reachable", {})
    monkeypatch.setattr(fetch.socket, "create_connection", refuse)


def test_missing_real_datasets_are_one_line_each_without_network(tmp_path: Path, no_network: None) -> None:
    with pytest.raises(GaptuiError) as info:
        check_sources_files([("er", {}, tmp_path), ("aqsol", {}, tmp_path), ("ogbn-arxiv", {}, tmp_path)])
    assert str(info.value).splitlines() == [
        "aqsol: raw files missing and there is no network (cannot reach www.dropbox.com): place train.pickle, "
        f"val.pickle, test.pickle, atom_dict.pickle, bond_dict.pickle in {tmp_path / 'aqsol' / 'raw'}",
        "ogbn-arxiv: raw files missing and there is no network (cannot reach snap.stanford.edu): place "
        f"edge.csv.gz, num-node-list.csv.gz in {tmp_path / 'ogbn-arxiv' / 'ogbn_arxiv' / 'raw'}",
    ]


def test_files_in_place_need_no_network(tmp_path: Path, no_network: None) -> None:
    raw = tmp_path / "ogbn-arxiv" / "ogbn_arxiv" / "raw"
    raw.mkdir(parents=True)
    for name in ("edge.csv.gz", "num-node-list.csv.gz"):
        (raw / name).write_bytes(b"")
    check_sources_files([("ogbn-arxiv", {}, tmp_path)])  # nothing to fetch: no error, whatever the network


@pytest.mark.e2e
def test_a_grid_missing_real_datasets_is_refused_and_nothing_recorded(tmp_path: Path) -> None:
    preset = tmp_path / "real.toml"
    preset.write_text(REAL)
    ws = tmp_path / "ws"
    for dry in (["--dry-run"], []):
        res = run_cli("run", "--preset", str(preset), "-w", str(ws), *dry)  # GAPTUI_OFFLINE=1: no download
        assert res.returncode == 2, res.stdout + res.stderr
        lines = res.stderr.strip().splitlines()
        assert lines == [
            "error: aqsol: raw files missing and downloads are off (GAPTUI_OFFLINE=1): place train.pickle, "
            f"val.pickle, test.pickle, atom_dict.pickle, bond_dict.pickle in {ws.resolve() / 'data' / 'aqsol' / 'raw'}",
            "error: ogbn-arxiv: raw files missing and downloads are off (GAPTUI_OFFLINE=1): place edge.csv.gz, "
            f"num-node-list.csv.gz in {ws.resolve() / 'data' / 'ogbn-arxiv' / 'ogbn_arxiv' / 'raw'}",
        ], res.stderr
        assert not (ws / "history.json").exists() and not (ws / "runs").exists()


@pytest.mark.e2e
def test_a_hub_dataset_without_network_fails_at_once_in_one_line(tmp_path: Path) -> None:
    # A Hub nothing listens on: without the probe, huggingface_hub retries for half a minute before its error.
    env = {"GAPTUI_OFFLINE": "", "HF_ENDPOINT": "http://127.0.0.1:9"}
    args = ["train", "--base", "pairs", "-p", "hub=NAME", "--noise", "0.12", "--model", "gin", "-w", str(tmp_path)]
    res = run_cli(*args, env=env, timeout=60)
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "error: pairs: hub=NAME: there is no network (cannot reach 127.0.0.1); place train-orders.safetensors"
    ), res.stderr
    assert not (tmp_path / "history.json").exists()  # refused before the run was recorded


#: A GAPE chain whose pretraining model cannot meet its budget: no alignment preset checked it at parse.
UNBUILDABLE = """
task = "gape"
name = "unbuildable"
pes = ["none", "gape"]
seeds = [0]

[[datasets]]
base = "ringmol"
params = { count = 40 }

[datasets.pretrain]
model = "gin"
out_dim = 8
budget = 3000
epochs = 1
"""


@pytest.mark.e2e
def test_a_model_no_width_can_build_is_refused_before_the_grid_records_anything(tmp_path: Path) -> None:
    preset = tmp_path / "unbuildable.toml"
    preset.write_text(UNBUILDABLE)
    ws = tmp_path / "ws"
    for dry in (["--dry-run", "--no-estimate"], []):
        res = run_cli("run", "--preset", str(preset), "-w", str(ws), *dry)
        lines = res.stderr.strip().splitlines()
        assert res.returncode == 2 and len(lines) == 1, res.stdout + res.stderr
        assert lines[0].startswith("error: gin on ringmol[count=40]: model 'gin': no width gives 3,000 trainable")
        assert not (ws / "history.json").exists()
