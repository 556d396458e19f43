"""The table of bad inputs: each one gets one `error:` line naming the culprit, exit status 2, and nothing the user
had is changed. Every case runs the CLI's entry point on real files in this process; a few of them (one per way an
error reaches the user) also run through ``python -m gaptui`` in a subprocess (marked e2e)."""

from __future__ import annotations

import errno
import importlib
import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import tomllib

from tests.support.cli import Ran, gaptui, run_cli
from tests.support.presets import alignment_preset, tune_preset
from tests.support.sources import write_folder

RECORD = {
    "id": "0123456789ab",
    "hash": "0123456789ab" + "0" * 52,
    "status": "done",
    "tags": ["keep"],
    "task": "alignment",
    "axes": {"dataset": "er", "noise": 0.1, "model": "gcn"},
}


def _grid(
    tmp: Path, models: str = '["gcn"]', seeds: str = "[0]", run: str = "", base: str = "er", params: str = ""
) -> str:
    """The table's alignment grid (one noise level, one epoch, 12-node ER graphs), written as ``tmp/p.toml``:
    ``models`` and ``seeds`` as TOML text, ``run`` raw lines of [run], ``base`` and ``params`` another dataset."""
    dataset: dict[str, object] = {"params": {"n": 12, "degree": 3}, "train": 10, "val": 4}
    if base != "er":
        dataset |= {"base": base, "params": tomllib.loads(f"p = {params}")["p"]}
    options = {"epochs": 1, "budget": 3000, "out_dim": None}
    return str(
        alignment_preset(
            tmp, "p", noise=[0.1], models=json.loads(models), seeds=json.loads(seeds), laplacian=None,
            description=None, run=options, run_lines=run + "\n", dataset=dataset,
        )
    )  # fmt: skip


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


DRY = ["run", "--preset", "{}", "--dry-run", "--no-estimate"]
GAPE_PRESET = """task = "gape"
pes = ["none", "rwpe"]
seeds = {seeds}
[[datasets]]
base = "molecules"
params = {{ path = "{path}", target = "y"{split} }}
seed = {seed}
{extra}
"""
STUDY_PRESET = """task = "properties"
properties = ["symmetric"]
poolings = {poolings}
dimensions = ["generalisation"]
seeds = {seeds}
[run]
epochs = 1
graphs = 20
sizes = 2
hidden = 8
{run}
"""
#: An import-path pooling module: ``scalar`` returns one number, ``broken`` raises, ``good`` is a mean.
POOL_MODULE = """import torch
from torch_geometric.nn import aggr


class _Scalar(torch.nn.Module):
    def forward(self, x, index, dim_size=None):
        return x.sum()


class _Broken(torch.nn.Module):
    def forward(self, x, index, dim_size=None):
        raise RuntimeError("shapes do not match")


def scalar(channels):
    return _Scalar()


def broken(channels):
    return _Broken()


def good(channels):
    return aggr.MeanAggregation()
"""
#: Published rows: 2-node graphs (4 adjacency values + label) for training, 3-node ones for testing.
PUBLISHED_TRAIN = "1,0,0,1,1\n0,1,0,0,0\n1,1,1,1,1\n0,1,1,0,0\n"
PUBLISHED_TEST = "1,0,0,0,1,0,0,0,1,1\n0,1,0,0,0,0,0,0,0,0\n"


def _gape(
    tmp: Path,
    name: str,
    content: bytes | None = None,
    split: bool = False,
    seeds: str = "[0, 1, 2, 3]",
    seed: str = "0",
    extra: str = "",
) -> str:
    """A gape preset of 8 runs (2 PEs x 4 seeds) on the molecule file ``name`` (written when ``content`` is set)."""
    if content is not None:
        (tmp / name).write_bytes(content)
    text = GAPE_PRESET.format(
        path=tmp / name, seeds=seeds, seed=seed, split=', split = "fold"' if split else "", extra=extra
    )
    (tmp / "g.toml").write_text(text)
    return str(tmp / "g.toml")


def _study(
    tmp: Path,
    poolings: str = '["mean"]',
    seeds: str = "[0]",
    run: str = "",
    module: str | None = None,
    published: dict[str, str | None] | None = None,
) -> str:
    """A one-cell property study preset; ``module`` is written as tinypool.py, ``published`` overrides the files
    of a published folder (``train``, ``test``: text, or None for no file)."""
    if module is not None:
        (tmp / "tinypool.py").write_text(module)
    if published is not None:
        files = {"train": PUBLISHED_TRAIN, "test": PUBLISHED_TEST, **published}
        root = tmp / "pub"
        (root / "GraphRandom-Test" / "symmetric").mkdir(parents=True)
        (root / "GraphRandom-Train").mkdir()
        for key, path in (
            ("train", root / "GraphRandom-Train" / "symmetric.csv"),
            ("test", root / "GraphRandom-Test" / "symmetric" / "symmetric_new3.csv"),
        ):
            if files[key] is not None:
                path.write_bytes(files[key].encode("latin-1"))
        run += f'\npublished = "{root}"'
    (tmp / "s.toml").write_text(STUDY_PRESET.format(poolings=poolings, seeds=seeds, run=run))
    return str(tmp / "s.toml")


def _huge_pairs(tmp: Path) -> str:
    """A pairs folder whose first training pair declares 10^12 nodes."""
    from safetensors.numpy import load_file, save_file

    write_folder(tmp / "pairs")
    orders = load_file(str(tmp / "pairs" / "train-orders.safetensors"))
    orders["0"] = np.array([10**12, 10**12], dtype=np.int64)
    save_file(orders, str(tmp / "pairs" / "train-orders.safetensors"))
    return str(tmp / "pairs")


def _bad_tune(tmp: Path) -> str:
    return str(tune_preset(tmp, '["gcn"]', space="dropout = { range = [0.1, 5.0] }"))


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
        lambda t: _grid(t, seeds="[0, -3]"),
        ["run", "--preset", "{}", "--dry-run"],
        "key 'seeds' holds -3: expected seeds >= 0",
    ),
    (
        "negative timeout in a preset",
        lambda t: _grid(t, run="timeout = -5"),
        ["run", "--preset", "{}", "--dry-run"],
        "timeout = -5: expected seconds > 0",
    ),
    ("negative --timeout", lambda t: "-1", ["run", "--preset", "smoke", "--timeout", "{}"], "timeout = -1"),
    (
        "negative weight decay",
        lambda t: _grid(t, run="weight_decay = -0.1"),
        ["run", "--preset", "{}", "--dry-run"],
        "weight_decay = -0.1 must be >= 0",
    ),
    (
        "negative clip",
        lambda t: _grid(t, run="clip = -1.0"),
        ["run", "--preset", "{}", "--dry-run"],
        "clip = -1.0 must be >= 0",
    ),
    (
        "user model that does not import",
        lambda t: _grid(t, models='["nosuchpkg.models:Net"]'),
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
    # issue 19, planning-time checks and molecule files
    (
        "missing molecule file, 8 runs: one line",
        lambda t: _gape(t, "nosuch.csv"),
        DRY,
        "nosuch.csv does not exist",
    ),
    (
        "binary molecule file",
        lambda t: _gape(t, "mols.csv", b"smiles,y\n\x00\x01\x02\xff\n"),
        DRY,
        "mols.csv is a binary file, not CSV text",
    ),
    (
        "non-UTF-8 molecule file",
        lambda t: _gape(t, "mols.csv", "smiles,y\nCCO,1\nCCN,\u00e9\n".encode("latin-1")),
        DRY,
        "mols.csv is not UTF-8 text (byte 19)",
    ),
    (
        "binary molecule SDF",
        lambda t: _gape(t, "mols.sdf", b"\x89PNG\r\n\x1a\n\x00\xff"),
        DRY,
        "mols.sdf is a binary file, not SDF text",
    ),
    (
        "molecule file without the column",
        lambda t: _gape(t, "mols.csv", b"SMILES,y\nCCO,1\n"),
        DRY,
        "mols.csv has no column 'smiles' (columns: SMILES, y)",
    ),
    (
        "no readable molecule, counted per reason",
        lambda t: _gape(t, "mols.csv", b"smiles,y,fold\nxx,1,train\nCCO,abc,train\nyy,2,val\nCCN,3,later\n", True),
        DRY,
        "mols.csv (4 records: 2 unparsable SMILES, 1 with a non-numeric 'y', "
        "1 with a 'fold' that is not train / val / test)",
    ),
    (
        "missing molecule file as an alignment base",
        lambda t: _grid(t, base="molecules", params='{ path = "nosuch.sdf" }'),
        DRY,
        "nosuch.sdf does not exist",
    ),
    (
        "pooling module that does not import",
        lambda t: _study(t, poolings='["mean", "nosuchpkg.pool:Factory"]'),
        DRY,
        "pooling 'nosuchpkg.pool:Factory': cannot import module 'nosuchpkg.pool'",
    ),
    (
        "pooling attribute that does not exist",
        lambda t: _study(t, poolings='["tinypool:nothing"]', module=POOL_MODULE),
        DRY,
        "pooling 'tinypool:nothing': module 'tinypool' has no attribute 'nothing'",
    ),
    (
        "pooling whose module returns one number",
        lambda t: _study(t, poolings='["tinypool:scalar"]', module=POOL_MODULE),
        DRY,
        "pooling 'tinypool:scalar': its module returned [] for 2 graphs; expected [2, width]",
    ),
    (
        "pooling whose module fails",
        lambda t: _study(t, poolings='["tinypool:broken"]', module=POOL_MODULE),
        DRY,
        "pooling 'tinypool:broken': its module fails on two tiny graphs",
    ),
    (
        "published train file with rows of the wrong length",
        lambda t: _study(t, published={"train": "0,1,0,1\n"}),
        DRY,
        "4 values per row; expected n*n adjacency values + 1 label",
    ),
    (
        "published train file with a value other than 0/1",
        lambda t: _study(t, published={"train": "0,1,0,2,1\n"}),
        DRY,
        "values must be 0 or 1",
    ),
    ("published train file empty", lambda t: _study(t, published={"train": ""}), DRY, "no graphs (the file is empty)"),
    ("published train file missing", lambda t: _study(t, published={"train": None}), DRY, "file not found"),
    ("published test files missing", lambda t: _study(t, published={"test": None}), DRY, "no test files larger than"),
    (
        "published test file with another size",
        lambda t: _study(t, published={"test": PUBLISHED_TRAIN}),
        DRY,
        "rows hold 2-node graphs, the file name says 3",
    ),
    (
        "published binary file",
        lambda t: _study(t, published={"train": "\x00\xff\x00"}),
        DRY,
        "expected comma-separated 0/1 values",
    ),
    (
        "a string where a number goes (study)",
        lambda t: _study(t, run='lr = "fast"'),
        DRY,
        "[run]: key 'lr' = 'fast'",
    ),
    (
        "a string where a number goes (gape)",
        lambda t: _gape(t, "nosuch.csv", extra='[datasets.run]\nepochs = "many"'),
        DRY,
        "key 'epochs' = 'many'",
    ),
    (
        "a string where a number goes (gape dataset seed)",
        lambda t: _gape(t, "nosuch.csv", seed='"one"'),
        DRY,
        "datasets[0]: key 'seed' = 'one': expected a seed >= 0",
    ),
    (
        "a string where a number goes (alignment)",
        lambda t: _grid(t, run='weight_decay = "x"'),
        DRY,
        "key 'weight_decay' = 'x'",
    ),
    ("negative seed (study)", lambda t: _study(t, seeds="[0, -2]"), DRY, "key 'seeds' holds -2: expected seeds >= 0"),
    (
        "negative data seed (study)",
        lambda t: _study(t, run="data_seed = -4"),
        DRY,
        "data_seed = -4 must be >= 0",
    ),
    ("negative seed (gape)", lambda t: _gape(t, "nosuch.csv", seeds="[-1]"), DRY, "key 'seeds' holds -1"),
    (
        "negative dataset seed (gape)",
        lambda t: _gape(t, "nosuch.csv", seed="-3"),
        DRY,
        "datasets[0]: key 'seed' = -3: expected a seed >= 0",
    ),
    (
        "-j 0",
        lambda t: "0",
        ["properties", "build", "-p", "symmetric", "--graphs", "20", "-j", "{}"],
        "--workers (-j) 0: expected at least 1 process",
    ),
    (
        "-j -1",
        lambda t: "-1",
        ["properties", "build", "-p", "symmetric", "--graphs", "20", "-j", "{}"],
        "--workers (-j) -1: expected at least 1 process",
    ),
    (
        "GPU slot this machine does not have",
        lambda t: "999",
        ["run", "--preset", "smoke", "--dry-run", "--no-estimate", "--gpus", "{}"],
        "--gpus 999: GPU 999 is not on this machine",
    ),
    (
        "device gpu (train)",
        lambda t: "gpu",
        [*TRAIN, "--device", "{}"],
        "device 'gpu': expected auto, cpu, cuda or cuda:N",
    ),
    (
        "device gpu (gape embed)",
        lambda t: str(t),
        ["gape", "embed", "abc", "--dataset", "ringmol", "--out", "{}/e.npz", "--device", "gpu", "-w", "{}/ws"],
        "--device: device 'gpu': expected auto, cpu, cuda or cuda:N",
    ),
    ("empty --task (history)", lambda t: "", ["history", "--task", "{}"], "--task '': expected a task family name"),
    ("empty --task (table)", lambda t: "", ["table", "--task", "{}"], "--task '': expected a task family name"),
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
    ("missing required option", lambda t: "0.1", ["train", "--noise", "{}"], "gaptui train: missing --base, --model"),
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
        "binary run spec",
        lambda t: (t / "run").mkdir() or (t / "run" / "spec.json").write_bytes(b"\x80\x81") and str(t / "run"),
        ["gape", "embed", "{}", "--dataset", "er", "--out", "{}/e.npz"],
        "not UTF-8 text (byte 0); a run spec is a JSON text file",
    ),
    # one preset schema: the [run] policy is checked alike in every family
    (
        "pack_seeds 0 in a study preset",
        lambda t: _study(t, run="pack_seeds = 0"),
        DRY,
        "[run]: pack_seeds = 0: expected a count >= 1 (1: one run per process)",
    ),
    # a string is never taken where a number goes, a float never as a count, in every family's keys
    ("quoted number in [run]", lambda t: _grid(t, run='lr = "0.01"'), DRY, "got the string '0.01'"),
    ("quoted count in [run]", lambda t: _grid(t, run='pack_seeds = "2"'), DRY, "got the string '2'"),
    ("float count in [run]", lambda t: _grid(t, run="pack_seeds = 1e3"), DRY, "got the float 1000.0 (write 1000)"),
    (
        "quoted dataset parameter",
        lambda t: (
            _grid(t)
            and (t / "p.toml").write_text((t / "p.toml").read_text().replace("n = 12", 'n = "12"'))
            and str(t / "p.toml")
        ),
        DRY,
        "params n='12' (er): expected an integer, got the string '12'",
    ),
    ("quoted number in a study", lambda t: _study(t, run='batch_size = "64"'), DRY, "got the string '64'"),
    (
        "quoted number in a gape dataset",
        lambda t: (
            _gape(t, "m.csv", b"smiles,y\nCCO,1\n", extra="")
            and (t / "g.toml").write_text(
                (t / "g.toml").read_text().replace('target = "y"', 'target = "y", val_fraction = "0.2"')
            )
            and str(t / "g.toml")
        ),
        DRY,
        "params val_fraction='0.2' (molecules): expected a number, got the string '0.2'",
    ),
    # a run or grid that would take months is refused before anything is recorded (--force insists)
    (
        "train of billions of epochs",
        lambda t: "",
        [*TRAIN, "--epochs", "3000000000", "-w", "{}ws"],
        "3,000,000,000 optimiser steps, at least 34 d 17 h at 1 ms a step, over the limit of 30 d 0 h",
    ),
    (
        "grid of billions of epochs",
        lambda t: (
            _grid(t, models='["gcn", "gin"]')
            and (t / "p.toml").write_text((t / "p.toml").read_text().replace("epochs = 1", "epochs = 2000000000"))
            and str(t / "p.toml")
        ),
        ["run", "--preset", "{}", "-w", "ws", "--gpus", "none"],
        "4,000,000,000 optimiser steps, at least 46 d 7 h at 1 ms a step, over the limit of 30 d 0 h; lower its",
    ),
    # runs are chosen alike everywhere: numbers as numbers, a base name for its parameterised datasets, case
    ("--filter seed not a number", lambda t: "", ["history", "--filter", "seed=x", "-w", "{}ws"], "seed takes a"),
    # the newest surfaces, as a subprocess: the exit status and no traceback (the in-process cases are in
    # test_reliability_inputs.py and test_reliability_records.py)
    (
        "score /dev/zero",
        lambda t: "",
        ["properties", "score", "r1", "/dev/zero", "-w", "{}ws"],
        "/dev/zero: not a regular file (a character device)",
    ),  # fmt: skip
    (
        "pairs of 10^12 nodes",
        _huge_pairs,
        ["datasets", "build", "pairs", "--noise", "0.1", "-p", "path={}", "-w", "ws"],
        "train-orders.safetensors: pair 0 needs about",
    ),  # fmt: skip
    (
        "tune bound no model accepts",
        _bad_tune,
        ["tune", "--preset", "{}", "--dry-run", "-w", "ws"],
        "[tune] space: key 'dropout' = 5.0",
    ),  # fmt: skip
]


def _single_atoms(tmp: Path) -> str:
    """A CSV of ten molecules without a bond (single atoms, ions, a salt): no alignment pair can come of it."""
    path = tmp / "atoms.csv"
    path.write_text(
        "smiles\n" + "\n".join(["C", "O", "[Na+]", "N", "[Na+].[Cl-]", "Cl", "[NH4+]", "I", "F", "S"]) + "\n"
    )
    return str(path)


#: Cases run through ``python -m gaptui`` as well: one per way an error reaches the user (a GaptuiError, Click's
#: usage errors, an OSError, the terminal app's start, a size guard), so the real entry point is held to the table too.
SUBPROCESS = {
    "binary preset",
    "not an integer (Click)",
    "missing required option",
    "workspace is a file",
    "binary history in the app",
    "dataset too large for memory",
}
#: Cases only a subprocess runs: ``gaptui --workspace W`` opens the terminal app, which a test process must not.
ONLY_SUBPROCESS = {"binary history in the app"}


def _case(tmp_path: Path, setup, args: list[str]) -> tuple[list[str], dict[str, bytes]]:
    value = setup(tmp_path)
    return [a.replace("{}", value) for a in args], _snapshot(tmp_path)


@pytest.mark.parametrize(
    ("setup", "args", "expected"),
    [c[1:] for c in CASES if c[0] not in ONLY_SUBPROCESS],
    ids=[c[0] for c in CASES if c[0] not in ONLY_SUBPROCESS],
)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], setup, args, expected: str
) -> None:
    """Each case through the CLI's entry point in this process (the code path a subprocess takes, without the cost
    of starting Python, torch and PyG per case)."""
    argv, before = _case(tmp_path, setup, args)
    monkeypatch.chdir(tmp_path)
    with _local_modules(tmp_path):
        ran = gaptui(monkeypatch, capsys, *argv)
    assert expected in ran.one_error(), ran.err  # one error line (notes may come first), exit 2, no traceback
    assert _snapshot(tmp_path) == before  # nothing the user had was changed


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("setup", "args", "expected"),
    [c[1:] for c in CASES if c[0] in SUBPROCESS],
    ids=[c[0] for c in CASES if c[0] in SUBPROCESS],
)
def test_bad_input_through_python_m_gaptui(tmp_path: Path, setup, args: list[str], expected: str) -> None:
    argv, before = _case(tmp_path, setup, args)
    res = run_cli(*argv, cwd=tmp_path)
    # notes (what a preset merged, the code it runs) may come first; the error is one line
    lines = [line for line in res.stderr.strip().splitlines() if not line.startswith("note: ")]
    assert res.returncode == 2, res.stderr
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], res.stderr
    assert "Traceback" not in res.stderr
    assert _snapshot(tmp_path) == before


@contextmanager
def _local_modules(folder: Path) -> Iterator[None]:
    """What a case leaves in the interpreter is forgotten after it, as a process ending forgets it: the folders it
    put on ``sys.path`` (a preset's own folder, to find a user's pooling file) and the modules it imported from its
    folder, so the next case finds its own file and not this one's."""
    path = list(sys.path)
    try:
        yield
    finally:
        sys.path[:] = path
        for name, module in list(sys.modules.items()):
            if str(getattr(module, "__file__", None) or "").startswith(str(folder)):
                del sys.modules[name]
        for entry in [e for e in sys.path_importer_cache if str(e).startswith(str(folder))]:
            del sys.path_importer_cache[entry]
        importlib.invalidate_caches()


def _snapshot(folder: Path) -> dict[str, bytes]:
    # lock files say who holds a workspace; they are not the user's data
    return {str(p): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file() and p.suffix != ".lock"}


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Callable[..., Ran]:
    """``gaptui ARGS`` in this process, from the test's folder (as the table's cases run)."""
    monkeypatch.chdir(tmp_path)

    def run(*args: str) -> Ran:
        with _local_modules(tmp_path):
            return gaptui(monkeypatch, capsys, *args)

    return run


def test_disk_full_keeps_the_history_and_leaves_no_temp_file(
    tmp_path: Path, cli: Callable[..., Ran], monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = Path(_with_record(tmp_path))
    before = (ws / "history.json").read_bytes()

    def full(fd: int) -> None:  # the filesystem fills up under `gaptui note`: every fsync fails
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    res = cli("note", "0123", "hello", "--workspace", str(ws))
    assert res.code == 2, res.err
    assert res.err.strip().splitlines() == [
        f"error: disk full at {ws / 'history.json'} (while writing the history (it was left as it was))"
    ]
    assert (ws / "history.json").read_bytes() == before
    assert sorted(p.name for p in ws.iterdir() if p.name.endswith(".tmp")) == []


def test_preset_with_a_byte_order_mark_loads(tmp_path: Path, cli: Callable[..., Ran]) -> None:
    path = tmp_path / "bom.toml"
    path.write_bytes(b"\xef\xbb\xbf" + Path(_grid(tmp_path)).read_bytes())
    res = cli("run", "--preset", str(path), "--dry-run", "--no-estimate", "--workspace", str(tmp_path / "ws"))
    assert res.code == 0, res.err
    assert "1 runs" in res.out and "memory peak of pairs of er: gcn on er" in res.out


def test_more_cpu_jobs_than_cores_warns(tmp_path: Path, cli: Callable[..., Ran]) -> None:
    res = cli("run", "--preset", "smoke", "--dry-run", "--no-estimate", "--cpu-jobs", "999", "-w", str(tmp_path / "ws"))
    assert res.code == 0, res.err
    assert res.err.startswith("warning: --cpu-jobs 999 is more than the ") and "cores of this machine" in res.err


# issue 19, planning-time checks and molecule files


def test_repeated_grid_values_are_merged_with_one_note_each(tmp_path: Path, cli: Callable[..., Ran]) -> None:
    (tmp_path / "mols.csv").write_text("smiles,y\n" + "".join(f"{'C' * k}O,{k}\n" for k in range(1, 11)))
    preset = tmp_path / "g.toml"
    preset.write_text(
        GAPE_PRESET.format(path=tmp_path / "mols.csv", seeds="[0, 0]", seed=0, split="", extra="").replace(
            'pes = ["none", "rwpe"]', 'pes = ["none", "rwpe", "rwpe"]'
        )
    )
    res = cli("run", "--preset", str(preset), "--dry-run", "--no-estimate")
    assert res.code == 0, res.err
    assert res.err.strip().splitlines() == [
        f"note: {preset}: key 'pes' repeats rwpe: merged (a grid is a set of runs)",
        f"note: {preset}: key 'seeds' repeats 0: merged (a grid is a set of runs)",
    ]
    assert "2 runs" in res.out


def test_published_folder_and_import_path_pooling_that_pass_plan_and_one_label_warns(
    tmp_path: Path, cli: Callable[..., Ran]
) -> None:
    preset = _study(tmp_path, poolings='["tinypool:good", "tinypool:good"]', module=POOL_MODULE, published={})
    res = cli("run", "--preset", preset, "--dry-run", "--no-estimate")
    assert res.code == 0, res.err
    assert res.err.strip().splitlines() == [
        f"note: {preset}: this preset runs code from tinypool:good (pooling; tinypool from "
        f"{tmp_path / 'tinypool.py'}, not an installed package)",
        f"note: {preset}: key 'poolings' repeats tinypool:good: merged (a grid is a set of runs)",
    ]
    assert "1 runs" in res.out
    (tmp_path / "pub" / "GraphRandom-Train" / "symmetric.csv").write_text("1,0,0,1,1\n0,0,0,0,1\n")
    res = cli("run", "--preset", preset, "--dry-run", "--no-estimate")
    assert res.code == 0, res.err
    assert res.err.strip().splitlines()[-1] == (
        f"warning: published = {tmp_path / 'pub'}: the training file of 'symmetric' (random) holds label 1 only: "
        "a model learns nothing from it"
    )


def test_a_bad_molecule_file_is_refused_once_before_any_record(tmp_path: Path, cli: Callable[..., Ran]) -> None:
    """8 runs of a missing molecule file: one error line, exit 2, no record and no run folder (not a dry run)."""
    ws = tmp_path / "ws"
    res = cli("run", "--preset", _gape(tmp_path, "nosuch.csv"), "-w", str(ws), "--gpus", "none")
    assert res.code == 2, res.err
    assert res.err.strip().splitlines() == [f"error: molecules: {tmp_path / 'nosuch.csv'} does not exist"]
    records = json.loads((ws / "history.json").read_text()).get("runs", {}) if (ws / "history.json").exists() else {}
    assert records == {}
    assert not (ws / "runs").exists() or not any((ws / "runs").iterdir())


def test_a_molecule_csv_with_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    from engine.sources import SOURCES, parse_params

    path = tmp_path / "bom.csv"
    path.write_bytes(b"\xef\xbb\xbfsmiles,y\nCCO,1.5\nCCN,2\nc1ccccc1,3\n")
    source = SOURCES.get("molecules")(parse_params(SOURCES.get("molecules"), {"path": str(path), "target": "y"}))
    mols = source.molecules(np.random.default_rng(0), tmp_path)
    assert [g.target for g in mols.graphs] == [1.5, 2.0, 3.0] and mols.notes == []


def test_help_still_works_and_a_group_without_a_command_shows_its_help(cli: Callable[..., Ran]) -> None:
    res = cli("properties", "build", "--help")
    assert res.code == 0 and "--graphs" in res.out and res.err == "", res.err
    res = cli("properties")
    assert "build" in res.out + res.err and "error:" not in res.err
