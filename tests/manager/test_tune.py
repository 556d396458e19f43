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
from tests.support import ROOT  # noqa: E402
from tests.support.cli import run_cli  # noqa: E402
from tests.support.fakes import FakeHistory, FakeScheduler  # noqa: E402
from tests.support.presets import tune_preset  # noqa: E402


def _studies(ws: Path) -> dict[str, object]:
    storage = f"sqlite:///{ws / 'tune' / 'study.db'}"
    return {s.study_name: optuna.load_study(study_name=s.study_name, storage=storage)
            for s in optuna.get_all_study_summaries(storage)}  # fmt: skip


@pytest.mark.e2e
def test_a_study_gives_each_row_its_trials_then_the_final_rows_join_the_table(tmp_path: Path) -> None:
    preset, ws = tune_preset(tmp_path), tmp_path / "ws"
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
    chosen = run_cli("history", "-w", str(ws), "--json", "--limit", "0", "--filter", "study=study")
    assert len(json.loads(chosen.stdout)) == 4
    other = run_cli("history", "-w", str(ws), "--json", "--limit", "0", "--filter", "study=other")
    assert json.loads(other.stdout) == []
    empty = run_cli("table", "-w", str(ws), "--format", "json")
    assert json.loads(empty.stdout) == []  # trials are not rows of the default tables

    final = run_cli("tune", "--preset", str(preset), "--final", "--cpu-jobs", "2", "-w", str(ws))
    assert final.returncode == 0, final.stderr
    tuned = json.loads(run_cli("table", "-w", str(ws), "--format", "json", "--tuned").stdout)
    (table,) = tuned
    # no default run yet: only the tuned rows (then the dataset's ceilings, rows of their own)
    assert [r for r in table["rows"] if not r.startswith("ceiling")] == ["gcn (tuned)", "gin (tuned)"]
    trained = [cell for cell in table["cells"] if not cell["model"].startswith("ceiling")]
    assert len(trained) == 4 and all(cell["runs"] == 2 for cell in trained)  # every cell, every seed
    pytest.importorskip("matplotlib")
    out = tmp_path / "report"
    made = run_cli("report", "--out", str(out), "--tuned", "-w", str(ws))
    assert made.returncode == 0, made.stderr
    text = (out / "report.md").read_text()
    assert "## Tuning" in text and "| study | er[degree=4,n=20] / gcn | 2/2 | 0 | 0 | layers in [2, 3]; lr log" in text
    best = reported["er[degree=4,n=20] / gcn"]
    assert f"| {best['best_value']:.4f} |" in text and "gcn (tuned)" in text


@pytest.mark.e2e
def test_a_manager_killed_mid_study_is_finished_by_the_same_command(tmp_path: Path) -> None:
    preset, ws = tune_preset(tmp_path, models='["gcn"]', trials=3), tmp_path / "ws"
    command = [sys.executable, "-m", "gaptui", "tune", "--preset", str(preset), "--cpu-jobs", "1", "-w", str(ws)]
    env = {**os.environ, "GAPTUI_OFFLINE": "1"}
    manager = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:  # one trial's run finished and the next one's started: kill then
            runs = list((ws / "runs").glob("*")) if (ws / "runs").is_dir() else []
            if len(runs) >= 2 and any((r / "result.json").exists() for r in runs):
                break
            if manager.poll() is not None:
                pytest.fail("the study finished before it could be interrupted")
            time.sleep(0.1)
        manager.send_signal(signal.SIGKILL)
        manager.wait(30)
    finally:
        if manager.poll() is None:
            manager.kill()
    (study,) = _studies(ws).values()  # read once the manager is gone
    left = [t for t in study.trials if t.state == optuna.trial.TrialState.RUNNING]
    assert len(left) == 1 and len(study.trials) == 2  # trial 0 told, trial 1 asked and in flight
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
    "grid too small": (
        'trials = 3\nsampler = "grid"\n[tune.space]\nlayers = [2, 3]',
        r"has 2 combination\(s\) for row",
    ),
    "bad seed": ("trials = 2\nseeds = [7]\n[tune.space]\nlayers = [2]", r"seed 7 is not a seed of the preset"),
    "seconds without a budget": ("trials = 2\nseconds = 60\n[tune.space]\nlayers = [2]", r"'seconds' goes with budget"),
    "budget without seconds": ('trials = 2\nbudget = "seconds"\n[tune.space]\nlayers = [2]', r"needs the training"),
    "startup without pruner": ("trials = 2\nprune_startup = 1\n[tune.space]\nlayers = [2]", r"goes with pruner"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_tune_tables_are_one_error_naming_the_file_and_key(tmp_path: Path, case: str) -> None:
    from gaptui.tune.settings import load_tune
    from gaptui.workspace import Workspace

    body, message = BAD[case]
    path = tune_preset(tmp_path, '["gcn"]')
    text = path.read_text()
    path.write_text(text[: text.index("[tune]")] + "[tune]\n" + body + "\n")
    with pytest.raises(GaptuiError, match=message) as caught:
        load_tune(str(path), Workspace.resolve(tmp_path / "ws"))
    assert str(caught.value).startswith(f"{path}: ") and "\n" not in str(caught.value)


@pytest.mark.e2e
def test_a_changed_study_is_refused_unless_renamed(tmp_path: Path) -> None:
    from gaptui.tune.settings import load_tune
    from gaptui.tune.studies import open_studies
    from gaptui.workspace import Workspace

    ws = Workspace.resolve(tmp_path / "ws")
    preset = tune_preset(tmp_path, models='["gcn"]', trials=3)
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


def test_the_median_pruner_stops_a_trial_below_the_median_and_records_it_pruned(tmp_path: Path) -> None:
    from gaptui.tune.search import Pending, Search
    from gaptui.tune.settings import load_tune
    from gaptui.workspace import Workspace

    ws = Workspace.resolve(tmp_path / "ws")
    preset = tune_preset(tmp_path, models='["gcn"]', trials=3)
    preset.write_text(preset.read_text().replace("seed = 3\n", 'seed = 3\npruner = "median"\nprune_startup = 1\n'))
    settings = load_tune(str(preset), ws)[1]
    (row,) = settings.rows
    scheduler, history = FakeScheduler(), FakeHistory({})
    search = Search(ws, settings, scheduler, history, capacity=1)
    study = search.studies[row.key]
    study.add_trial(
        optuna.trial.create_trial(
            params={"layers": 2, "lr": 1e-3},
            distributions={d.key: d.distribution() for d in settings.space[row.key]},
            value=0.9,
            intermediate_values={1: 0.5, 2: 0.7, 3: 0.9},
        )
    )
    trial = study.ask({d.key: d.distribution() for d in settings.space[row.key]})
    pending = Pending(row, trial, settings.trial_specs(row, trial.params))
    (spec,) = pending.specs
    run_dir = ws.root / "runs" / "r0"
    run_dir.mkdir(parents=True)
    events = [{"v": 1, "event": "eval", "epoch": e, "val_lap_acc": v} for e, v in ((1, 0.55), (2, 0.3))]
    (run_dir / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    history.records[spec.hash()] = {"hash": spec.hash(), "status": "running", "run_dir": "runs/r0", "tune": {}}
    search.pending[(row.key, trial.number)] = pending
    search.prune()
    assert scheduler.cancelled == [spec.hash()] and not search.pending  # above the median at 1, below it at 2
    assert study.trials[-1].state == optuna.trial.TrialState.PRUNED
    assert study.trials[-1].intermediate_values == {1: 0.55, 2: 0.3}
    assert history.records[spec.hash()]["tune"]["pruned"] is True


@pytest.mark.e2e
def test_a_seconds_budget_stops_asking_once_a_row_trained_its_seconds(tmp_path: Path) -> None:
    preset, ws = tune_preset(tmp_path, models='["gcn"]', trials=20), tmp_path / "ws"
    preset.write_text(preset.read_text().replace("seed = 3\n", 'seed = 3\nbudget = "seconds"\nseconds = 0.001\n'))
    ran = run_cli("tune", "--preset", str(preset), "--cpu-jobs", "1", "--json", "-w", str(ws))
    assert ran.returncode == 0, ran.stderr
    (row,) = json.loads(ran.stdout)["rows"]
    assert row["complete"] == 1 and row["training_seconds"] > 0.001  # one trial spent the row's seconds


def test_a_grid_study_tells_its_last_grid_point_without_error(tmp_path: Path) -> None:
    from gaptui.tune.search import Search
    from gaptui.tune.settings import load_tune
    from gaptui.workspace import Workspace

    ws = Workspace.resolve(tmp_path / "ws")
    preset = tune_preset(tmp_path, models='["gcn"]', trials=2)
    preset.write_text(
        preset.read_text()
        .replace('sampler = "random"', 'sampler = "grid"')
        .replace("lr = { log = [1e-4, 1e-2] }\n", "")
    )
    settings = load_tune(str(preset), ws)[1]
    (row,) = settings.rows
    history = FakeHistory({})
    search = Search(ws, settings, FakeScheduler(), history, capacity=2)
    search._queue = lambda specs: None  # no scheduler here: the runs are filed below as done
    search.fill()
    assert len(search.pending) == 2
    for value, pending in zip((0.4, 0.6), search.pending.values(), strict=True):
        for spec in pending.specs:
            history.records[spec.hash()] = {"hash": spec.hash(), "status": "done", "metrics": {"val_lap_acc": value}}
    search.collect()  # the second tell completes the grid: Optuna's Study.stop must not escape
    study = search.studies[row.key]
    assert sorted(t.params["layers"] for t in study.trials) == [2, 3] and search.done()
    assert {t.state for t in study.trials} == {optuna.trial.TrialState.COMPLETE}


@pytest.mark.parametrize(
    ("preset", "space", "rows", "column"),
    [
        ("properties-smoke", "lr = { log = [1e-4, 1e-2] }\nhidden = [16, 32]", {"mean", "sopool_bimap"}, "symmetric"),
        ("gape-smoke", "lr = { log = [1e-4, 2e-3] }\nheads = [1, 2]", {"none", "lap", "rwpe", "gape"}, None),
    ],
)
def test_every_family_tunes_its_own_rows_from_its_declared_keys(
    tmp_path: Path, preset: str, space: str, rows: set[str], column: str | None
) -> None:
    from gaptui.presets import find_preset
    from gaptui.tune.settings import load_tune
    from gaptui.workspace import Workspace

    path = tmp_path / f"{preset}.toml"
    path.write_text(find_preset(preset).read_text() + f"\n[tune]\ntrials = 2\n[tune.space]\n{space}\n")
    settings = load_tune(str(path), Workspace.resolve(tmp_path / "ws"))[1]
    assert rows <= {row.label for row in settings.rows}
    if column is not None:
        assert settings.at == column  # the middle column of the preset
    row = settings.rows[0]
    first = {d.key: d.values[-1] for d in settings.space[row.key]}
    (spec,) = settings.trial_specs(row, first)
    raw = spec.to_dict()
    for key, value in first.items():
        assert raw[key] == value  # the sampled values are the trial's spec fields
