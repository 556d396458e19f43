"""`gaptui tune`: equal trials per row on an Optuna SQLite study, resumable after SIGKILL, then the final rows."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

optuna = pytest.importorskip("optuna")

from engine.errors import GaptuiError  # noqa: E402
from tests.conftest import ROOT, run_cli  # noqa: E402

PRESET = """description = "a tiny study"
noise = [0.05, 0.2]
models = {models}
seeds = [0, 1]
laplacian = false

[run]
epochs = 2
batch_size = 20
budget = 3000
out_dim = 8

[[datasets]]
base = "er"
params = {{ n = 20, degree = 4 }}
train = 40
val = 10

[tune]
trials = {trials}
at = 0.2
sampler = "random"
seed = 3
[tune.space]
lr = {{ log = [1e-4, 1e-2] }}
layers = [2, 3]
"""


def _preset(tmp_path: Path, models: str = '["gcn", "gin"]', trials: int = 2, extra: str = "") -> Path:
    path = tmp_path / "study.toml"
    path.write_text(PRESET.format(models=models, trials=trials) + extra)
    return path


def _studies(ws: Path) -> dict[str, object]:
    storage = f"sqlite:///{ws / 'tune' / 'study.db'}"
    return {s.study_name: optuna.load_study(study_name=s.study_name, storage=storage)
            for s in optuna.get_all_study_summaries(storage)}  # fmt: skip


def test_a_study_gives_each_row_its_trials_then_the_final_rows_join_the_table(tmp_path: Path) -> None:
    preset, ws = _preset(tmp_path), tmp_path / "ws"
    dry = run_cli("tune", "--preset", str(preset), "--dry-run", "-w", str(ws))
    assert dry.returncode == 0, dry.stderr
    assert "2 row(s), 2 trial(s) per row, 1 run(s) per trial, at noise 0.2; 4 run(s)" in dry.stdout
    assert "lr log [0.0001, 0.01]" in dry.stdout and "memory peak" in dry.stdout
    assert not (ws / "tune").exists()  # a dry run writes nothing

    ran = run_cli("tune", "--preset", str(preset), "--cpu-jobs", "2", "-w", str(ws))
    assert ran.returncode == 0, ran.stderr
    studies = _studies(ws)
    assert sorted(studies) == ["study:er[degree=4,n=20] / gcn", "study:er[degree=4,n=20] / gin"]
    for study in studies.values():
        states = [t.state for t in study.trials]
        assert states == [optuna.trial.TrialState.COMPLETE] * 2  # the same trials for every row
    status = run_cli("tune", "--preset", str(preset), "--status", "--json", "-w", str(ws))
    reported = {r["row"]: r for r in json.loads(status.stdout)["rows"]}
    for name, study in studies.items():
        row = reported[name.partition(":")[2]]
        assert row["best_value"] == pytest.approx(study.best_value) and row["best_params"] == study.best_params
        assert row["best_trial"] == study.best_trial.number and row["complete"] == 2
    records = json.loads(run_cli("history", "-w", str(ws), "--json", "--limit", "0").stdout)
    assert len(records) == 4 and all("study=study" in r["tags"] for r in records)
    empty = run_cli("table", "-w", str(ws), "--format", "json")
    assert json.loads(empty.stdout) == []  # trials are not rows of the default tables

    final = run_cli("tune", "--preset", str(preset), "--final", "--cpu-jobs", "2", "-w", str(ws))
    assert final.returncode == 0, final.stderr
    tuned = json.loads(run_cli("table", "-w", str(ws), "--format", "json", "--tuned").stdout)
    (table,) = tuned
    assert table["rows"] == ["gcn (tuned)", "gin (tuned)"]  # no default run yet: only the tuned rows
    assert len(table["cells"]) == 4 and all(cell["runs"] == 2 for cell in table["cells"])  # every cell, every seed


def test_a_manager_killed_mid_study_is_finished_by_the_same_command(tmp_path: Path) -> None:
    preset, ws = _preset(tmp_path, models='["gcn"]', trials=3), tmp_path / "ws"
    command = [sys.executable, "-m", "gaptui", "tune", "--preset", str(preset), "--cpu-jobs", "1", "-w", str(ws)]
    env = {**os.environ, "GAPTUI_OFFLINE": "1"}
    manager = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:  # wait for one told trial and one in flight, then kill
            if (ws / "tune" / "study.db").exists():
                try:
                    trials = next(iter(_studies(ws).values())).trials
                except (StopIteration, Exception):  # noqa: BLE001 - the database is being created
                    trials = []
                states = {t.state for t in trials}
                if optuna.trial.TrialState.COMPLETE in states and optuna.trial.TrialState.RUNNING in states:
                    break
            if manager.poll() is not None:
                pytest.fail("the study finished before it could be interrupted")
            time.sleep(0.2)
        manager.send_signal(signal.SIGKILL)
        manager.wait(30)
    finally:
        if manager.poll() is None:
            manager.kill()
    again = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert "took up 1 trial(s) left running" in again.stderr
    (study,) = _studies(ws).values()
    assert [t.state for t in study.trials] == [optuna.trial.TrialState.COMPLETE] * 3
    assert [t.number for t in study.trials] == [0, 1, 2]  # no trial asked twice, none lost
    records = json.loads(run_cli("history", "-w", str(ws), "--json", "--limit", "0").stdout)
    assert sorted(r["status"] for r in records) == ["done"] * 3


BAD = {
    "unknown key": ('trials = 2\nsamplr = "tpe"', r"\[tune\]: unknown key 'samplr' \(did you mean 'sampler'\?\)"),
    "not tunable": ("trials = 2\n[tune.space]\nheads = [2]", r"'heads' is not a tunable key of alignment"),
    "inverted": ("trials = 2\n[tune.space]\nlr = { range = [0.1, 0.01] }", r"empty or inverted range"),
    "log at zero": ("trials = 2\n[tune.space]\nlr = { log = [0.0, 0.01] }", r"a log range needs bounds > 0"),
    "no trials": ("trials = 0\n[tune.space]\nlayers = [2]", r"key 'trials' = 0: expected a count"),
    "no such cell": (
        "trials = 2\nat = 0.3\n[tune.space]\nlayers = [2]",
        r"key 'at' = 0.3: the preset has no noise 0.3",
    ),
    "grid of a range": (
        'trials = 2\nsampler = "grid"\n[tune.space]\nlr = { log = [1e-4, 1e-2] }',
        r"sampler = 'grid' needs lists of values; 'lr' is a range",
    ),
    "no space": ("trials = 2", r"no space for row"),
    "bad seed": ("trials = 2\nseeds = [7]\n[tune.space]\nlayers = [2]", r"seed 7 is not a seed of the preset"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_tune_tables_are_one_error_naming_the_file_and_key(tmp_path: Path, case: str) -> None:
    from gaptui.tuning import load_tune
    from gaptui.workspace import Workspace

    body, message = BAD[case]
    text = PRESET.format(models='["gcn"]', trials=2)
    path = tmp_path / "study.toml"
    path.write_text(text[: text.index("[tune]")] + "[tune]\n" + body + "\n")
    with pytest.raises(GaptuiError, match=message) as caught:
        load_tune(str(path), Workspace.resolve(tmp_path / "ws"))
    assert str(caught.value).startswith(f"{path}: ") and "\n" not in str(caught.value)


def test_a_changed_study_is_refused_unless_renamed(tmp_path: Path) -> None:
    from gaptui.tuning import load_tune, open_studies
    from gaptui.workspace import Workspace

    ws = Workspace.resolve(tmp_path / "ws")
    preset = _preset(tmp_path, models='["gcn"]', trials=3)
    open_studies(ws, load_tune(str(preset), ws)[1])
    preset.write_text(preset.read_text().replace("layers = [2, 3]", "layers = [2, 3, 4]"))
    with pytest.raises(GaptuiError, match=r"\[tune\] changed since study 'study' began \(space\)"):
        open_studies(ws, load_tune(str(preset), ws)[1])
    open_studies(ws, load_tune(str(preset), ws, study="wider")[1])  # a new name is a new study
    preset.write_text(
        preset.read_text().replace("layers = [2, 3, 4]", "layers = [2, 3]").replace("trials = 3", "trials = 2")
    )
    with pytest.raises(GaptuiError, match="trials lowered from 3 to 2"):
        open_studies(ws, load_tune(str(preset), ws)[1])
    res = run_cli("run", "--preset", str(preset), "--dry-run", "--no-estimate", "-w", str(tmp_path / "ws"))
    assert res.returncode == 0, res.stderr  # a preset with [tune] still runs as a grid
