"""The brec family through the seam: presets and their errors, the grid, the run ids, memory estimates and refusals
(3-WL on large pairs, attention on big batches), and a small grid run by the CLI as a user runs it, twice."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import networkx as nx
import numpy as np
import pytest

from engine.brec.data import SHIPPED
from engine.brec.spec import BrecSpec
from engine.errors import GaptuiError
from engine.tasks import family
from engine.tasks.spec import Placement
from gaptui.presets import load_preset
from tests.support.cli import run_cli

CPU = ("--gpus", "none", "--cpu-jobs", "2")


def _write(tmp_path: Path, text: str, name: str = "b.toml") -> Path:
    path = tmp_path / name
    path.write_text('task = "brec"\n' + text)
    return path


def test_the_shipped_presets_plan_the_zoo_and_the_smoke_grid() -> None:
    zoo, smoke = load_preset("brec"), load_preset("brec-smoke")
    assert len(zoo.models) == 14 and "graphgps+lap:8" in zoo.models and zoo.pack_seeds == 10
    assert zoo.size == 7 * (2 + 14 * 10)
    specs = family("brec").grid(smoke, Placement("/tmp/d", "/tmp/r"))
    assert [s.model for s in specs[:7]] == ["3-wl"] * 7  # the exact rows first, once per category
    assert {s.features for s in specs if s.model == "graphgps"} == {"degree+rwpe:16"}
    assert len(specs) == smoke.size == 7 + 2 * 7 * 2 and len({s.hash() for s in specs}) == len(specs)


@pytest.mark.e2e
def test_preset_errors_name_the_file_the_key_and_the_value(tmp_path: Path) -> None:
    cases = {
        'models = ["gin"]\ncategories = ["cfl"]\nseeds = [0]\n': r"key 'categories' value: 'cfl' is not a BREC "
        r"category \(did you mean 'cfi'\?\)",
        'models = ["gni"]\nseeds = [0]\n': r"model 'gni' is not a model \(did you mean 'gin'\?\)",
        'models = ["gin"]\nwl = ["2-wl"]\nseeds = [0]\n': r"key 'wl' value '2-wl' is not one of 1-wl, 3-wl",
        "models = []\nwl = []\nseeds = [0]\n": r"names no model and 'wl' no test",
        'models = ["gin"]\nseeds = [0]\n[run]\nstatistic = "t"\n': r"statistic 't' is not one of reference, hotelling",
        'models = ["gin"]\nseeds = [0]\n[run]\nrelabellings = 8\n': r"relabellings = 8 with out_dim = 16",
        'models = ["gin"]\nseeds = [0]\n[run]\nbatch_size = 7\n': r"batch_size = 7: expected an even number",
    }
    for text, error in cases.items():
        path = _write(tmp_path, text)
        with pytest.raises(GaptuiError, match=error) as caught:
            load_preset(str(path))
        assert str(caught.value).startswith(str(path)) and "\n" not in str(caught.value)
    res = run_cli("run", "--preset", str(_write(tmp_path, 'models = ["gin"]\ncategories = ["cfl"]\nseeds = [0]\n')),
                  "--dry-run", "-w", str(tmp_path / "ws"), *CPU)  # fmt: skip
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1 and "did you mean 'cfi'" in res.stderr


def test_an_exact_row_is_one_run_whatever_the_training_options() -> None:
    a = BrecSpec.from_dict({"model": "3-WL", "category": "cfi", "lr": 0.1, "epochs": 3})
    b = BrecSpec.from_dict({"model": "3-wl", "category": "cfi"})
    assert a.hash() == b.hash() and a.canonical() == {"task": "brec", "model": "3-wl", "category": "cfi",
                                                       "pairs": None, "data": None}  # fmt: skip
    c, d = (
        BrecSpec.from_dict({"model": "gin", "category": "cfi"}),
        BrecSpec.from_dict({"model": "gin", "category": "cfi", "lr": 1e-3}),
    )
    assert c.hash() != d.hash() and c.reseeded(3).hash() == c.replace(seed=3).hash()
    assert family("brec").record_axes(
        BrecSpec.from_dict({"model": "graphgps", "category": "basic", "pairs": 2, "features": "rwpe:16+degree"})
    ) == {  # fmt: skip
        "subset": "first 2 pairs",
        "model": "graphgps+rwpe:16",
        "category": "basic",
    }


def test_memory_is_estimated_and_refused_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    import engine.memory
    from engine.memory import check_memory

    costs = family("brec").costs
    wl = costs.memory(BrecSpec.from_dict({"model": "3-wl", "category": "cfi"}))
    assert wl.need == pytest.approx(3 * 2 * 198**3 * 8, rel=0.1)  # about 373 MB at the 198-node CFI pairs
    gps = BrecSpec.from_dict({"model": "graphgps", "category": "cfi", "batch_size": 64})
    attention = costs.memory(gps)
    assert attention.need > 2 * 4 * 64 * 198**2 * 4  # the attention scores of every layer, kept for backward
    monkeypatch.setattr(engine.memory, "machine_memory", lambda: 300 << 20)
    with pytest.raises(GaptuiError) as caught:
        check_memory([BrecSpec.from_dict({"model": "3-wl", "category": "cfi"})])
    assert str(caught.value).startswith("3-wl on cfi (pairs up to 198 nodes) needs about ")
    assert str(caught.value).endswith("but this machine has 300.0 MB; leave 3-wl out of the preset's wl, or lower "
                                      "pairs below the largest cfi pairs")  # fmt: skip
    with pytest.raises(GaptuiError, match=r"^graphgps on cfi \(batch 64 graphs of up to 198 nodes\) needs about"):
        check_memory([gps])
    check_memory([BrecSpec.from_dict({"model": "3-wl", "category": "cfi", "pairs": 1})])  # 74 nodes: fits


@pytest.mark.e2e
def test_the_cli_refuses_3wl_on_pairs_too_large_for_this_machine(tmp_path: Path) -> None:
    folder = tmp_path / "big"
    shutil.copytree(SHIPPED, folder)
    big = [nx.to_graph6_bytes(g, header=False).strip() for g in (nx.cycle_graph(1500), nx.cycle_graph(1500))]
    np.save(folder / "cfi.npy", np.array([big], dtype=object).astype(bytes))
    preset = _write(
        tmp_path, f'models = []\ncategories = ["cfi"]\nwl = ["3-wl"]\nseeds = [0]\n[run]\ndata = "{folder}"\n'
    )
    res = run_cli("run", "--preset", str(preset), "--dry-run", "-w", str(tmp_path / "ws"), *CPU)
    assert res.returncode == 2, res.stdout
    (line,) = res.stderr.strip().splitlines()
    assert line.startswith(
        "error: 3-wl on cfi (pairs up to 1500 nodes) needs about 151.9 GB of memory "
        "(2-FWL arrays of 2 n^3 integers at n = 1500)"
    )


SMALL = """
description = "two models and the exact rows on the first basic pair"
models = ["gin", "gcn+rwpe:8"]
categories = ["basic"]
seeds = [0, 1]

[run]
pairs = 1
epochs = 1
budget = 8000
relabellings = 20
batch_size = 10
pack_seeds = 2
"""


@pytest.mark.e2e
def test_a_small_grid_runs_tables_reports_and_resumes(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    preset = _write(tmp_path, SMALL)
    res = run_cli("run", "--preset", str(preset), "-w", str(ws), *CPU, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "first pair — pairs distinguished" in res.stdout
    table = json.loads(run_cli("brec", "table", "--format", "json", "-w", str(ws)).stdout)
    (only,) = table
    cells = {(c["model"], c["category"]): (c["median"], c["pairs"]) for c in only["cells"]}
    assert only["subset"] == "first pair" and only["unreliable"] == []
    assert cells[("1-wl", "basic")] == (0, 1) and cells[("3-wl", "basic")] == (1, 1)
    assert cells[("gin", "basic")] == (0, 1) and cells[("gcn+rwpe:8", "basic")] == (1, 1)
    report = run_cli("report", "--out", str(tmp_path / "report"), "-w", str(ws))
    assert report.returncode == 0, report.stderr
    text = (tmp_path / "report" / "report.md").read_text()
    assert "## BREC's table in counts (first pair)" in text and "| gcn+rwpe:8 | 1/1" in text
    assert "The history holds no finished alignment runs to compare with" in text
    assert (tmp_path / "report" / "figures" / "brec-heatmap-first-pair.png").exists()
    again = run_cli("run", "--preset", str(preset), "-w", str(ws), *CPU)
    assert again.returncode == 0 and "6 runs, 6 already done" in again.stderr and "0 to run" in again.stderr
