"""benchmarks/gpu_check.py: without a GPU one line and exit 0; its verdict and table from measured rows."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ROOT

SCRIPT = ROOT / "benchmarks" / "gpu_check.py"


def _module():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.e2e
def test_without_a_gpu_it_says_so_in_one_line_and_exits_0(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: the measuring path runs instead")
    out = tmp_path / "check.json"
    res = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out)], capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().splitlines() == ["gpu_check: no CUDA GPU visible to torch here; nothing measured"]
    assert json.loads(out.read_text())["gpu"] is None


def test_auto_is_recommended_only_when_faster_and_as_accurate_for_every_model(tmp_path: Path) -> None:
    g = _module()
    rows = [
        {"model": m, "mode": mode, "epoch_s": s, "lap_acc": a}
        for m in ("gcn", "gin")
        for mode, s, a in (("fp32", 1.0, 0.50), ("tf32", 0.8, 0.503), ("bf16", 0.7, 0.48))
    ]
    verdict = g.decide(rows, tolerance=1.0)
    assert verdict["tf32"]["recommend"] and verdict["tf32"]["speedup"]["gcn"] == pytest.approx(1.25)
    assert not verdict["bf16"]["recommend"] and "more than 1 points" in verdict["bf16"]["why"]
    rows[-1] = {**rows[-1], "epoch_s": 1.2, "lap_acc": 0.5}  # gin's bf16: slower
    rows[2] = {**rows[2], "lap_acc": 0.5}
    assert "not faster for every model" in g.decide(rows, 1.0)["bf16"]["why"]
    assert g.decide(rows[:4], 1.0)["bf16"] == {"recommend": False, "why": "not measured for every model"}
    report = {"gpu": "test", "seconds": 1.0, "epochs": rows, "sharing": [], "auto": verdict}
    text = g.table(report)
    assert "gcn         1.000    0.800    0.700    1.25x   1.43x   50.0/50.3/50.0" in text
    events = tmp_path / "events.jsonl"
    events.write_text(
        "\n".join(
            json.dumps(e)
            for e in (
                {"event": "epoch", "seconds": 9.0},
                {"event": "epoch", "seconds": 2.0},
                {"event": "eval", "val_lap_acc": 0.4},
                {"event": "epoch", "seconds": 4.0},
                {"event": "eval", "val_lap_acc": 0.6},
            )
        )
    )
    assert g.epoch_seconds(events) == (3.0, 0.6)  # the first (warm-up) epoch left out
