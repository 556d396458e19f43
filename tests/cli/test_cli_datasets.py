"""`gaptui datasets ...` run as a user runs it: in a subprocess."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.support.cli import run_cli

#: Every test here starts the CLI or a worker in a subprocess.
pytestmark = pytest.mark.e2e

SMALL = ["--train", "20", "--val", "5", "--param", "n=30", "--param", "degree=4"]


def test_build_json_list_stats_export(workspace: Path, tmp_path: Path) -> None:
    res = run_cli("datasets", "build", "er", "--noise", "0.12", *SMALL, "--json", "--workspace", str(workspace))
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["id"].startswith("er-n12-") and doc["built"] is True
    assert doc["stats"]["train"]["pairs"] == 20 and doc["stats"]["val"]["pairs"] == 5
    again = json.loads(
        run_cli("datasets", "build", "er", "--noise", "0.12", *SMALL, "--json", "-w", str(workspace)).stdout
    )
    assert again["id"] == doc["id"] and again["built"] is False

    listed = run_cli("datasets", "list", "--json", "--workspace", str(workspace))
    assert [d["id"] for d in json.loads(listed.stdout)] == [doc["id"]]
    stats = run_cli("datasets", "stats", doc["id"], "--json", "--workspace", str(workspace))
    assert json.loads(stats.stdout)["stats"] == doc["stats"]
    text = run_cli("datasets", "stats", doc["id"], "--workspace", str(workspace))
    assert "removed / |E|" in text.stdout and "disconnected H" in text.stdout

    out = tmp_path / "export.npz"
    res = run_cli("datasets", "export", doc["id"][:9], "--out", str(out), "--workspace", str(workspace))
    assert res.returncode == 0, res.stderr
    assert np.load(out)["train_num_nodes"].tolist() == [30] * 20


def test_workspace_from_environment(tmp_path: Path) -> None:
    ws = tmp_path / "envws"
    res = run_cli(
        "datasets",
        "build",
        "tree",
        "--noise",
        "0.1",
        "--train",
        "3",
        "--val",
        "1",
        "--json",
        env={"GAPTUI_WORKSPACE": str(ws)},
    )
    assert res.returncode == 0, res.stderr
    assert (ws / "datasets" / json.loads(res.stdout)["id"] / "meta.json").exists()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["er", "--noise", "1.0"], "must lie in [0, 1)"),
        (["er", "--noise", "-0.1"], "must lie in [0, 1)"),
        (["erdos", "--noise", "0.1"], "did you mean 'er'?"),
        (["er", "--noise", "0.1", "--param", "degre=3"], "did you mean 'degree'?"),
        (["er", "--noise", "0.1", "--param", "n=abc"], "expected an integer, got 'abc'"),
        (["er", "--noise", "0.1", "--param", "novalue"], "expected key=value"),
        (["er", "--noise", "0.1", "--noise-model", "remove"], "unknown noise model"),
        (["aqsol", "--noise", "0.1"], "place train.pickle"),
        (["folder", "--noise", "0.1"], "path"),
    ],
)
def test_bad_input_exits_2_with_one_line(workspace: Path, args: list[str], needle: str) -> None:
    res = run_cli("datasets", "build", *args, "--workspace", str(workspace))
    assert res.returncode == 2
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("error:") and needle in lines[0]
    assert not (workspace / "datasets").exists() or not any((workspace / "datasets").iterdir())


def test_unknown_dataset_id(workspace: Path) -> None:
    res = run_cli("datasets", "stats", "nope", "--workspace", str(workspace))
    assert res.returncode == 2 and "no dataset 'nope'" in res.stderr
