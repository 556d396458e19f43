"""The worker process (`python -m engine`): events, files, SIGTERM + resume, failures, bad specs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from engine.events import KINDS, SCHEMA_VERSION, read_events
from tests.support import ROOT

#: Every test here starts the CLI or a worker in a subprocess.
pytestmark = pytest.mark.e2e

DATASET = {"base": "er", "noise": 0.05, "n_train": 40, "n_val": 10, "params": {"n": 24, "degree": 5}}


def _spec(tmp_path: Path, **overrides) -> Path:
    spec = {
        "dataset": DATASET,
        "model": "gcn",
        "epochs": 3,
        "batch_size": 10,
        "budget": 5000,
        "out_dim": 16,
        "datasets_dir": str(tmp_path / "datasets"),
        **overrides,
    }
    path = tmp_path / f"spec-{len(list(tmp_path.glob('spec-*')))}.json"
    path.write_text(json.dumps(spec))
    return path


def _worker(spec: Path, out: Path, **kw) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "engine", "--spec", str(spec), "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        **kw,
    )


def _run(spec: Path, out: Path) -> tuple[int, str, str]:
    proc = _worker(spec, out)
    stdout, stderr = proc.communicate(timeout=300)
    return proc.returncode, stdout, stderr


def test_events_files_and_checkpoint(tmp_path: Path) -> None:
    out = tmp_path / "run"
    code, stdout, _ = _run(_spec(tmp_path), out)
    assert code == 0
    events, _ = read_events(out / "events.jsonl")
    assert [json.loads(line) for line in stdout.splitlines()] == events  # stdout mirrors the file
    assert all(e["v"] == SCHEMA_VERSION and e["event"] in KINDS and isinstance(e["t"], float) for e in events)
    # progress events say where the run is for whoever shows it: the worker prepares it (reads its dataset) first
    preparing = [e.get("what") for e in events[:2] if e.get("phase") == "preparing"]
    assert preparing == [None, "reading its dataset"]
    kinds = [e["event"] for e in events if e["event"] != "progress"]
    assert kinds == ["start", "eval", "epoch", "eval", "epoch", "eval", "epoch", "done"]
    start = next(e for e in events if e["event"] == "start")
    assert start["params"] > 0 and start["n_train"] == 40 and start["n_val"] == 10 and start["resumed_from"] is None
    epochs = [e for e in events if e["event"] == "epoch"]
    assert [e["epoch"] for e in epochs] == [1, 2, 3]
    for e in epochs:
        assert e["train_loss"] > 0 and e["lr"] > 0 and e["seconds"] > 0 and 0 <= e["val_acc"] <= 1
    done = events[-1]
    for key in ("val_lap_acc", "val_argmax_acc", "val_top5_acc", "val_top10_acc", "val_loss", "train_loss"):
        assert key in done["metrics"]
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "done" and result["metrics"] == done["metrics"] and result["params"] == start["params"]
    assert {"torch", "torch_geometric", "numpy", "scipy", "python"} <= set(result["versions"])
    assert " (commit " in result["versions"]["gaptui"] or " (sources " in result["versions"]["gaptui"]  # the code
    ckpt = torch.load(out / "checkpoint.pt", weights_only=True)
    assert ckpt["state"]["epoch"] == 3 and ckpt["run"] == result["run"]
    assert "epoch 3/3" in (out / "log.txt").read_text()
    # a finished run is not redone
    code, stdout, _ = _run(out / "spec.json", out)
    assert code == 0 and stdout == "" and len(read_events(out / "events.jsonl")[0]) == len(events)


@pytest.mark.slow  # 14 s of worker processes; run with -m slow
def test_sigterm_then_resume_continues_from_the_checkpoint(tmp_path: Path) -> None:
    out = tmp_path / "run"
    spec = _spec(tmp_path, epochs=40, dataset={**DATASET, "n_train": 200})
    proc = _worker(spec, out)
    assert proc.stdout is not None
    for line in proc.stdout:  # wait until two epochs are done, then stop it mid-run
        if json.loads(line)["event"] == "epoch" and json.loads(line)["epoch"] == 2:
            break
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=120)
    assert proc.returncode == 143
    events, _ = read_events(out / "events.jsonl")
    cancelled = events[-1]
    assert cancelled["event"] == "cancelled" and cancelled["epoch"] >= 2
    ckpt = torch.load(out / "checkpoint.pt", weights_only=True)
    assert ckpt["state"]["epoch"] == cancelled["epoch"] and ckpt["state"]["step"] == cancelled["step"]

    code, _, _ = _run(spec, out)
    assert code == 0
    events, _ = read_events(out / "events.jsonl")
    starts = [e for e in events if e["event"] == "start"]
    assert len(starts) == 2
    assert starts[1]["resumed_from"] == {
        "epoch": cancelled["epoch"],
        "batch": cancelled["batch"],
        "step": cancelled["step"],
    }
    epochs = [e["epoch"] for e in events if e["event"] == "epoch"]
    assert sorted(epochs) == list(range(1, 41)) and len(epochs) == 40  # no epoch lost or repeated
    assert max(e["step"] for e in events if e["event"] == "epoch") == 40 * 20
    assert events[-1]["event"] == "done"


def test_nan_loss_is_an_error_event_and_nonzero_exit(tmp_path: Path) -> None:
    out = tmp_path / "run"
    code, _, stderr = _run(_spec(tmp_path, model="tests.support.worker_models:NaNModel"), out)
    assert code == 3
    last = read_events(out / "events.jsonl")[0][-1]
    assert last["event"] == "error" and last["kind"] == "nan" and "loss became nan" in last["message"]
    assert json.loads((out / "result.json").read_text())["status"] == "failed"


def test_crash_is_an_error_event_with_the_traceback_in_the_log(tmp_path: Path) -> None:
    out = tmp_path / "run"
    code, _, stderr = _run(_spec(tmp_path, model="tests.support.worker_models:CrashModel"), out)
    assert code == 1
    last = read_events(out / "events.jsonl")[0][-1]
    assert last["event"] == "error" and last["kind"] == "crash" and "injected crash" in last["message"]
    assert "Traceback" in (out / "log.txt").read_text()


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        ({"model": "gatv3"}, "did you mean 'gatv2'?"),
        ({"epochs": "ten"}, "key 'epochs' = 'ten': expected an integer"),
        ({"epoch": 3}, "unknown key 'epoch' (did you mean 'epochs'?)"),
        ({"dataset": {"noise": 0.1}}, "dataset needs keys base and noise"),
        ({"dataset": {**DATASET, "base": "zinkk"}}, "unknown base dataset 'zinkk'"),
        ({"batch_size": 0}, "batch_size = 0 must be >= 1"),
    ],
)
def test_bad_spec_is_one_line_and_exit_2(tmp_path: Path, overrides: dict, needle: str) -> None:
    out = tmp_path / "run"
    code, stdout, stderr = _run(_spec(tmp_path, **overrides), out)
    assert code == 2
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0], stderr
    last = read_events(out / "events.jsonl")[0][-1]
    assert last["event"] == "error" and last["kind"] == "input"


def test_missing_spec_file(tmp_path: Path) -> None:
    code, _, stderr = _run(tmp_path / "nope.json", tmp_path / "run")
    assert code == 2 and "file not found" in stderr


def test_laplacian_baseline_writes_the_same_records(tmp_path: Path) -> None:
    out = tmp_path / "run"
    code, _, _ = _run(_spec(tmp_path, model="laplacian"), out)
    assert code == 0
    events, _ = read_events(out / "events.jsonl")
    assert [e["event"] for e in events if e["event"] != "progress"] == ["start", "eval", "done"]
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "done" and result["params"] == 0
    assert 0 < result["metrics"]["val_lap_acc"] <= 1 and "val_top5_acc" in result["metrics"]


def test_worker_starts_quickly_enough_to_be_cancelled(tmp_path: Path) -> None:
    # SIGTERM during set-up (dataset build, model build) still ends the worker cleanly.
    out = tmp_path / "run"
    proc = _worker(_spec(tmp_path, epochs=200), out)
    # The lock file is taken right after the signal handlers are installed: from then on SIGTERM is handled.
    deadline = time.monotonic() + 120
    while not (out / "worker.lock").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=120)
    assert proc.returncode in (143, 0)
