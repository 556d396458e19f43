"""The published CSV layout: export -> import round trip, reader errors, parallel resumable suite builds, CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from engine.errors import GaptuiError
from engine.properties.datasets import cached_property_dataset
from engine.properties.published import (
    published_test_sizes,
    read_csv,
    read_published_test,
    read_published_train,
    write_csv,
)
from engine.properties.suite import build_suite, export_suite, export_targets, suite_specs


@pytest.fixture(scope="module")
def small_suite(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list]:
    cache = tmp_path_factory.mktemp("cache")
    specs = suite_specs(["reflexive", "function"], graphs=40, sizes=3, seed=5)
    build_suite(specs, cache, workers=1)
    return cache, specs


def test_export_then_import_is_bit_identical(small_suite: tuple[Path, list], tmp_path: Path) -> None:
    cache, specs = small_suite
    out = tmp_path / "published"
    export_suite(export_targets(out, specs), cache)
    assert (out / "GraphRandom-Train" / "reflexive.csv").exists()
    assert (out / "GraphPerturb-Test" / "function" / "function_new8.csv").exists()
    for spec in specs:
        dataset = cached_property_dataset(spec, cache)
        base = min(s.n for s in specs if (s.property, s.family) == (spec.property, spec.family))
        if spec.n == base:
            back = read_published_train(out, spec.family, spec.property)
        else:
            back = read_published_test(out, spec.family, spec.property, spec.n)
        assert back.adjacency.dtype == bool and back.n == spec.n
        assert np.array_equal(back.adjacency, dataset.adjacency())
        assert np.array_equal(back.labels, dataset.labels())
        again = tmp_path / "again.csv"
        write_csv(again, back.adjacency, back.labels)
        assert again.read_bytes() == back.path.read_bytes()
    assert published_test_sizes(out, "random", "function") == [7, 8]


def test_row_format(tmp_path: Path) -> None:
    a = np.array([[[True, False], [False, True]]])
    write_csv(tmp_path / "x.csv", a, np.array([1]))
    assert (tmp_path / "x.csv").read_text() == "1,0,0,1,1\n"


def test_irregular_but_valid_files_read_the_same(tmp_path: Path) -> None:
    (tmp_path / "a.csv").write_bytes(b"1,0,0,1,1\r\n0,1,1,0,0\r\n")
    (tmp_path / "b.csv").write_text("1, 0, 0, 1, 1\n0, 1, 1, 0, 0")
    adj_a, lab_a = read_csv(tmp_path / "a.csv")
    adj_b, lab_b = read_csv(tmp_path / "b.csv")
    assert np.array_equal(adj_a, adj_b) and np.array_equal(lab_a, lab_b) and list(lab_a) == [1, 0]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1,0,0,1,1\n0,1,1\n", r"x.csv:2: 3 values; the first row has 5"),
        ("1,0,1\n", r"x.csv:1: 3 values per row; expected n\*n adjacency values \+ 1 label"),
        ("1,0,0,2,1\n", r"x.csv:1: values must be 0 or 1"),
        ("1,0,a,1,1\n", r"x.csv:1: expected comma-separated 0/1 values"),
        ("", r"x.csv: no graphs"),
    ],
)
def test_bad_csv_names_file_and_line(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "x.csv").write_text(text)
    with pytest.raises(GaptuiError, match=message):
        read_csv(tmp_path / "x.csv")


def test_suite_build_runs_in_processes_and_resumes(tmp_path: Path) -> None:
    specs = suite_specs(["symmetric", "injective"], ["random"], graphs=20, sizes=2)
    seen = []
    first = build_suite(specs, tmp_path, workers=2, on_done=seen.append)
    assert len(first) == len(seen) == 4 and all(r.built for r in first)
    again = build_suite(specs, tmp_path, workers=2)
    assert not any(r.built for r in again)
    assert {r.dataset_id for r in again} == {r.dataset_id for r in first}


def _gaptui(*args: str, ws: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GAPTUI_WORKSPACE": str(ws)}
    code = "from gaptui.cli.app import main; main()"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.e2e
def test_cli_export_writes_the_layout_and_never_overwrites(tmp_path: Path) -> None:
    out = tmp_path / "pub"
    args = ("properties", "export", "--out", str(out), "-p", "irreflexive", "-f", "perturb", "--graphs", "20")
    done = _gaptui(*args, "--sizes", "2", "--json", ws=tmp_path / "ws")
    assert done.returncode == 0, done.stderr
    files = json.loads(done.stdout)["files"]
    assert sorted(Path(f).relative_to(out).as_posix() for f in files) == [
        "GraphPerturb-Test/irreflexive/irreflexive_new6.csv",
        "GraphPerturb-Train/irreflexive.csv",
    ]
    before = (out / "GraphPerturb-Train" / "irreflexive.csv").read_bytes()
    refused = _gaptui(*args, "--sizes", "2", "--seed", "9", ws=tmp_path / "ws")
    assert refused.returncode == 2
    assert refused.stderr.startswith("error: --out") and "already exists" in refused.stderr
    assert (out / "GraphPerturb-Train" / "irreflexive.csv").read_bytes() == before
    bad = _gaptui("properties", "build", "-p", "symetric", ws=tmp_path / "ws")
    assert bad.returncode == 2 and "did you mean 'symmetric'" in bad.stderr
