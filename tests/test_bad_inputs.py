"""The table of bad inputs: each one gets one `error:` line naming the culprit, exit status 2, and nothing the user
had is changed. Every case runs the CLI in a subprocess on real files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_cli
from tests.test_analysis import rec

TINY_PRESET = """
noise = [0.1]
models = {models}
seeds = {seeds}
[run]
epochs = 1
batch_size = 10
budget = 3000
{run}
[[datasets]]
base = "er"
params = {{ n = 12, degree = 3 }}
train = 10
val = 4
"""
RECORD = {
    "id": "0123456789ab",
    "hash": "0123456789ab" + "0" * 52,
    "status": "done",
    "tags": ["keep"],
    "task": "alignment",
    "axes": {"dataset": "er", "noise": 0.1, "model": "gcn"},
}


def _preset(tmp: Path, models: str = '["gcn"]', seeds: str = "[0]", run: str = "") -> str:
    path = tmp / "p.toml"
    path.write_text(TINY_PRESET.format(models=models, seeds=seeds, run=run))
    return str(path)


def _history(tmp: Path, content: bytes) -> str:
    ws = tmp / "ws"
    ws.mkdir()
    (ws / "history.json").write_bytes(content)
    return str(ws)


def _with_record(tmp: Path) -> str:
    return _history(tmp, json.dumps({"meta": {"1": {"schema": 2}}, "runs": {"1": RECORD}}).encode())


def _a_file(tmp: Path) -> str:
    (tmp / "file").write_text("not a folder")
    return str(tmp / "file")


TRAIN = ["train", "--base", "er", "--noise", "0.1", "--model", "gcn", "--train", "10", "--val", "4", "-p", "n=12"]

#: (case id, setup(tmp) -> the values its arguments use, arguments, expected text of the one error line)
CASES: list[tuple[str, Callable[[Path], str], list[str], str]] = [
    ("workspace is a file", _a_file, ["history", "--workspace", "{}"], "is a file, not a folder"),
    (
        "workspace is a file (build)",
        _a_file,
        ["datasets", "build", "er", "--noise", "0.1", "--workspace", "{}"],
        "is a file, not a folder",
    ),
    ("binary history", lambda t: _history(t, b"\x89PNG\r\n\x1a\n\x00\xff"), ["history", "-w", "{}"], "not UTF-8 text"),
    (
        "history of the wrong shape",
        lambda t: _history(t, b'{"runs": {"1": {"foo": 1}}}'),
        ["history", "-w", "{}"],
        "run record 1 lacks id, hash, status",
    ),
    (
        "history tables not tables",
        lambda t: _history(t, b'{"runs": [1, 2]}'),
        ["show", "abc", "-w", "{}"],
        "table 'runs' is not a table of records",
    ),
    ("binary history in the app", lambda t: _history(t, b"\xff\xfe\x00garbage"), ["--workspace", "{}"], "not UTF-8"),
    (
        "binary preset",
        lambda t: (t / "b.toml").write_bytes(b"\xff\x00\xfe") and str(t / "b.toml"),
        ["run", "--preset", "{}", "--dry-run"],
        "not UTF-8 text",
    ),
    ("preset is a directory", lambda t: str(t), ["run", "--preset", "{}", "--dry-run"], "is a directory"),
    (
        "shipped preset named as a file",
        lambda t: "smoke.toml",
        ["run", "--preset", "{}", "--dry-run"],
        "to use the shipped preset, write --preset smoke",
    ),
    ("negative data seed", lambda t: "-1", [*TRAIN, "--data-seed", "{}"], "dataset seed -1: expected a seed >= 0"),
    ("negative seed", lambda t: "-1", [*TRAIN, "--seed", "{}"], "seed = -1 must be >= 0"),
    (
        "negative preset seed",
        lambda t: _preset(t, seeds="[0, -3]"),
        ["run", "--preset", "{}", "--dry-run"],
        "key 'seeds' holds -3: expected seeds >= 0",
    ),
    (
        "negative timeout in a preset",
        lambda t: _preset(t, run="timeout = -5"),
        ["run", "--preset", "{}", "--dry-run"],
        "timeout = -5: expected seconds > 0",
    ),
    ("negative --timeout", lambda t: "-1", ["run", "--preset", "smoke", "--timeout", "{}"], "timeout = -1"),
    (
        "negative weight decay",
        lambda t: _preset(t, run="weight_decay = -0.1"),
        ["run", "--preset", "{}", "--dry-run"],
        "weight_decay = -0.1 must be >= 0",
    ),
    (
        "negative clip",
        lambda t: _preset(t, run="clip = -1.0"),
        ["run", "--preset", "{}", "--dry-run"],
        "clip = -1.0 must be >= 0",
    ),
    (
        "user model that does not import",
        lambda t: _preset(t, models='["nosuchpkg.models:Net"]'),
        ["run", "--preset", "{}", "--dry-run"],
        "cannot import module 'nosuchpkg.models'",
    ),
    (
        "dataset too large for memory",
        lambda t: str(t / "ws"),
        ["datasets", "build", "er", "--noise", "0.1", "--train", "1000000000", "-w", "{}"],
        "of memory (dataset about",
    ),
    (
        "training batch too large for memory",
        lambda t: str(t / "ws"),
        ["train", "--base", "er", "--noise", "0.1", "--model", "gcn", "-p", "n=200000", "--train", "1", "-w", "{}"],
        "lower --batch-size or the graph order",
    ),
    ("empty tag", _with_record, ["tag", "0123", "", "-w", "{}"], "tag '': expected a non-empty word"),
    ("removing a missing tag", _with_record, ["tag", "0123", "-nosuch", "-w", "{}"], "has no tag 'nosuch'"),
    (
        "export into a file's folder",
        _a_file,
        ["export", "--out", "{}/tables", "-w", "{}.ws"],
        "a path component is a file, not a folder",
    ),
    # issue 19, real molecules
    (
        "molecules without bonds only (train)",
        lambda t: _single_atoms(t),
        ["train", "--base", "molecules", "-p", "path={}", "--noise", "0.1", "--model", "gin", "--epochs", "1"],
        "has no training pair: all 8 training graphs have fewer than 2 nodes or no edges",
    ),
    (
        "molecules without bonds only (datasets build)",
        lambda t: _single_atoms(t),
        ["datasets", "build", "molecules", "-p", "path={}", "--noise", "0.1"],
        "which carry no alignment signal",
    ),
    # issue 19, files, messages and size guards
    (
        "not an integer (Click)",
        lambda t: str(t / "ws"),
        ["properties", "build", "--graphs", "abc", "-w", "{}"],
        "gaptui properties build: invalid value for '--graphs'",
    ),
    (
        "not an integer in run",
        lambda t: "abc",
        ["run", "--preset", "smoke", "--time", "{}"],
        "invalid value for '--time'",
    ),
    ("missing required option", lambda t: "0.1", ["train", "--noise", "{}"], "gaptui train: missing option '--base'"),
    ("unknown option", lambda t: "x", ["history", "--nosuch", "{}"], "no such option: --nosuch"),
    (
        "negative seed of a property build",
        lambda t: str(t / "ws"),
        ["properties", "build", "--seed", "-1", "-w", "{}"],
        "dataset seed -1: expected a seed >= 0",
    ),
    (
        "negative seed of an embedding",
        lambda t: str(t),
        ["gape", "embed", "abc", "--dataset", "ringmol", "--out", "{}/e.npz", "--seed", "-1", "-w", "{}/ws"],
        "--seed -1: expected a seed >= 0",
    ),
    (
        "property datasets too large for memory",
        lambda t: str(t / "ws"),
        ["properties", "build", "--graphs", "1000000000000", "-w", "{}"],
        "of memory (",
    ),
    (
        "embedding too large for memory",
        lambda t: str(t),
        ["gape", "embed", "abc", "--dataset", "ringmol", "-p", "count=1000000000000", "--out", "{}/e.npz"],
        "embedding ringmol needs about",
    ),
    (
        "binary reference",
        lambda t: (t / "r.csv").write_bytes(b"\xff\xfe\x00\x01") and str(t / "r.csv"),
        ["table", "--reference", "{}", "-w", "{}.ws"],
        "not UTF-8 text (byte 0); a reference is a CSV text file",
    ),
    (
        "reference with other columns",
        lambda t: (t / "r.csv").write_text("a,b\n1,2\n") and str(t / "r.csv"),
        ["table", "--reference", "{}", "-w", "{}.ws"],
        "header lacks column(s) dataset, model, noise, median, std",
    ),
    (
        "reference that has none of the history",
        lambda t: _history_of(t, [rec("gcn", 0.5, 0.05, dataset="tree")]),
        ["table", "--reference", "paper", "-w", "{}"],
        "the history's finished runs cover datasets tree, models gcn, noise 0.5; the reference covers datasets er",
    ),
    (
        "binary run spec",
        lambda t: (t / "run").mkdir() or (t / "run" / "spec.json").write_bytes(b"\x80\x81") and str(t / "run"),
        ["gape", "embed", "{}", "--dataset", "er", "--out", "{}/e.npz"],
        "not UTF-8 text (byte 0); a run spec is a JSON text file",
    ),
]


def _single_atoms(tmp: Path) -> str:
    """A CSV of ten molecules without a bond (single atoms, ions, a salt): no alignment pair can come of it."""
    path = tmp / "atoms.csv"
    path.write_text(
        "smiles\n" + "\n".join(["C", "O", "[Na+]", "N", "[Na+].[Cl-]", "Cl", "[NH4+]", "I", "F", "S"]) + "\n"
    )
    return str(path)


def _history_of(tmp: Path, records: list[dict]) -> str:
    from gaptui.history import History
    from gaptui.workspace import Workspace

    ws = Workspace.resolve(tmp / "ws")
    ws.root.mkdir(parents=True)
    with History(ws, write=True) as history:
        history.put_many(records)
    return str(ws.root)


@pytest.mark.parametrize(("setup", "args", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, setup, args: list[str], expected: str) -> None:
    value = setup(tmp_path)
    before = _snapshot(tmp_path)
    res = run_cli(*[a.replace("{}", value) for a in args], cwd=tmp_path)
    # notes (what a preset merged, the code it runs) may come first; the error is one line
    lines = [line for line in res.stderr.strip().splitlines() if not line.startswith("note: ")]
    assert res.returncode == 2, res.stderr
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], res.stderr
    assert "Traceback" not in res.stderr
    assert _snapshot(tmp_path) == before  # nothing the user had was changed


def _snapshot(folder: Path) -> dict[str, bytes]:
    # lock files say who holds a workspace; they are not the user's data
    return {str(p): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file() and p.suffix != ".lock"}


def test_disk_full_keeps_the_history_and_leaves_no_temp_file(tmp_path: Path) -> None:
    ws = Path(_with_record(tmp_path))
    before = (ws / "history.json").read_bytes()
    # The filesystem fills up under `gaptui note`: every fsync fails with ENOSPC.
    code = (
        "import errno, os, sys\n"
        "def full(fd): raise OSError(errno.ENOSPC, 'No space left on device')\n"
        "os.fsync = full\n"
        "from gaptui.cli import main\n"
        "sys.argv = ['gaptui', 'note', '0123', 'hello', '--workspace', sys.argv[1]]\n"
        "main()\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code, str(ws)], capture_output=True, text=True, cwd=ROOT, env={**os.environ}
    )
    assert res.returncode == 2, res.stderr
    assert res.stderr.strip().splitlines() == [
        f"error: disk full at {ws / 'history.json'} (while writing the history (it was left as it was))"
    ]
    assert (ws / "history.json").read_bytes() == before
    assert sorted(p.name for p in ws.iterdir() if p.name.endswith(".tmp")) == []


def test_preset_with_a_byte_order_mark_loads(tmp_path: Path) -> None:
    path = tmp_path / "bom.toml"
    path.write_bytes(b"\xef\xbb\xbf" + TINY_PRESET.format(models='["gcn"]', seeds="[0]", run="").encode())
    res = run_cli("run", "--preset", str(path), "--dry-run", "--no-estimate", "--workspace", str(tmp_path / "ws"))
    assert res.returncode == 0, res.stderr
    assert "1 runs" in res.stdout and "memory: er batch 10: peak about" in res.stdout


def test_more_cpu_jobs_than_cores_warns(tmp_path: Path) -> None:
    res = run_cli(
        "run",
        "--preset",
        "smoke",
        "--dry-run",
        "--no-estimate",
        "--cpu-jobs",
        "999",
        "--workspace",
        str(tmp_path / "ws"),
    )
    assert res.returncode == 0, res.stderr
    assert res.stderr.startswith("warning: --cpu-jobs 999 is more than the ") and "cores of this machine" in res.stderr


def test_help_still_works_and_a_group_without_a_command_shows_its_help(tmp_path: Path) -> None:
    res = run_cli("properties", "build", "--help", cwd=tmp_path)
    assert res.returncode == 0 and "--graphs" in res.stdout and res.stderr == "", res.stderr
    res = run_cli("properties", cwd=tmp_path)
    assert "build" in res.stdout + res.stderr and "error:" not in res.stderr
