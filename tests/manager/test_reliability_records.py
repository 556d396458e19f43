"""The newest surfaces as they meet hostile input: ``gaptui tune`` (sizes, bounds, its database, its trials), history
records of the wrong types (every reader, the app included), and ``export --wandb`` (its ledger, its folder). Each
case is one ``error:`` line (exit 2) or a ``warning:`` that leaves a record out; never a traceback, nothing of the
user's replaced, nothing written outside the folder the user named."""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path

import pytest

optuna = pytest.importorskip("optuna")

from engine.errors import GaptuiError  # noqa: E402
from gaptui.history.store import History  # noqa: E402
from gaptui.workspace import Workspace  # noqa: E402
from tests.support.cli import gaptui, run_cli  # noqa: E402
from tests.support.fakes import FakeHistory, FakeScheduler  # noqa: E402
from tests.support.presets import (  # noqa: E402
    PROBE,  # noqa: E402
    tune_preset,
)
from tests.support.records import alignment_history, fixed_records, history_of, trial_records  # noqa: E402
from tests.support.tui import SIZE, notices  # noqa: E402

# ------------------------------------------------------------------------------------------ tune: sizes and bounds


def test_a_billion_trials_is_a_count_never_a_billion_specs(tmp_path: Path, monkeypatch, capsys) -> None:
    preset, ws = tune_preset(tmp_path, '["gcn"]', trials=1_000_000_000), tmp_path / "ws"
    ran = gaptui(monkeypatch, capsys, "tune", "--preset", str(preset), "--dry-run", "-w", str(ws))
    assert ran.code == 0, ran.err
    assert "1000000000 trial(s) per row" in ran.out and "1,000,000,000 run(s)" in ran.out
    assert "4,000,000,000 optimiser steps" in ran.out and "over the limit of 30 d" in ran.out
    ran = gaptui(monkeypatch, capsys, "tune", "--preset", str(preset), "--gpus", "none", "-w", str(ws))
    assert "study study: 4,000,000,000 optimiser steps" in ran.one_error() and "--force" in ran.one_error()
    assert not ws.exists()  # refused before anything was written


BOUNDS = [
    ("dropout no model accepts", "dropout = { range = [0.1, 5.0] }", "key 'dropout' = 5.0 (row er[degree=4,n=20] /"),
    ("10^12 layers", "layers = [2, 1000000000000]", "key 'layers' = 1000000000000"),
]


@pytest.mark.parametrize(("name", "space", "expected"), BOUNDS, ids=[b[0] for b in BOUNDS])
def test_a_bound_no_run_accepts_is_refused_by_the_dry_run(
    tmp_path: Path, monkeypatch, capsys, name: str, space: str, expected: str
) -> None:
    preset = tune_preset(tmp_path, '["gcn"]', space=space)
    ran = gaptui(monkeypatch, capsys, "tune", "--preset", str(preset), "--dry-run", "-w", str(tmp_path / "ws"))
    line = ran.one_error()
    assert line.startswith(f"error: {preset}: [tune] space: ") and expected in line


def test_a_trial_whose_runs_cannot_be_built_fails_once_and_is_never_taken_up_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gaptui.tune.search import Search
    from gaptui.tune.settings import TuneSettings, load_tune

    ws = Workspace.resolve(tmp_path / "ws")
    settings = load_tune(str(tune_preset(tmp_path, '["gcn"]')), ws)[1]
    (row,) = settings.rows
    search = Search(ws, settings, FakeScheduler(), FakeHistory({}), capacity=1)

    def refuse(self, row, params):  # what a value no model accepts did at run time before the bounds were checked
        raise GaptuiError(f"{settings.where}: [tune]: model 'gcn': layers=3 is invalid")

    monkeypatch.setattr(TuneSettings, "trial_specs", refuse)
    with pytest.raises(
        GaptuiError, match=r"\[tune\] space: row .* trial 0 \(layers .*\): model 'gcn'.* recorded failed"
    ):
        search.fill()
    (trial,) = search.studies[row.key].trials
    assert trial.state == optuna.trial.TrialState.FAIL
    assert search.resume() == 0  # a later command never retakes it


def test_a_final_killed_half_way_reads_k_of_n_in_its_tuned_cells(tmp_path: Path) -> None:
    from gaptui import analysis
    from gaptui.run_records import new_record
    from gaptui.tune.results import RowResult, table_view, tag_final
    from gaptui.tune.settings import load_tune

    ws = Workspace.resolve(tmp_path / "ws")
    settings = load_tune(str(tune_preset(tmp_path, '["gcn"]')), ws)[1]
    (row,) = settings.rows
    result = RowResult(row, 2, 0, 0, 0, 0.5, {"layers": 2, "lr": 1e-3}, 0, [0.5])
    specs = settings.final_specs(row, result.best_params)  # 2 noise levels x 2 seeds
    records = [new_record(spec, ws) for spec in specs]
    for record in records[:3]:  # the fourth was queued when --final was killed
        record.update(status="done", metrics={"val_lap_acc": 0.5})
    with History(ws, write=True) as history:
        history.put_many(records)
        tag_final(history, settings, [(result, specs)])
        rows = table_view(history.records(), tuned=True)
    (table,) = analysis.build_tables(rows, "val_lap_acc", task="alignment")
    texts = sorted(c.text(table.metric) for c in table.cells.values())
    assert [t.endswith("(1/2)") for t in texts] == [False, True], texts


# ------------------------------------------------------------------------------------------ tune: its database


def test_status_writes_nothing_and_preset_code_is_named_before_any_import(tmp_path: Path, monkeypatch, capsys) -> None:

    code = tmp_path / "code"
    code.mkdir()
    (code / "gaptui_probe_tune.py").write_text(PROBE)
    monkeypatch.syspath_prepend(str(code))
    monkeypatch.delitem(__import__("sys").modules, "gaptui_probe_tune", raising=False)
    preset = tune_preset(tmp_path, models='["gcn", "gaptui_probe_tune:Model"]')
    for ws in (tmp_path / "ws%41", tmp_path / "w?s#x"):  # characters a database URL would read otherwise
        for flag in ("--status", "--dry-run"):
            ran = gaptui(monkeypatch, capsys, "tune", "--preset", str(preset), flag, "-w", str(ws))
            assert ran.code == 0, ran.err
            note = f"note: {preset}: this preset runs code from gaptui_probe_tune:Model"
            assert note in ran.err and ran.err.index(note) < ran.err.find("probe module imported") + len(ran.err)
            monkeypatch.delitem(__import__("sys").modules, "gaptui_probe_tune", raising=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["code", "study.toml"]  # no workspace, no wsA/, no db


def test_the_study_database_is_in_the_workspace_named_whatever_its_characters(tmp_path: Path) -> None:
    from gaptui.tune.settings import load_tune
    from gaptui.tune.studies import open_studies

    for name in ("ws%41", "w?s", "a{b}", "x#y&z=1"):
        ws = Workspace.resolve(tmp_path / name)
        settings = load_tune(str(tune_preset(tmp_path, '["gcn"]')), ws)[1]
        open_studies(ws, settings)
        assert (tmp_path / name / "tune" / "study.db").is_file(), name
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["study.toml", "ws%41", "w?s", "a{b}", "x#y&z=1"])


@pytest.fixture
def read_only_view(tmp_path: Path):
    """``(folder, its read-only view)``: a read-only bind mount of a folder (needs root to mount)."""
    import os

    if os.geteuid() != 0:
        pytest.skip("mounting needs root")
    folder, view = tmp_path / "rw", tmp_path / "ro"
    folder.mkdir()
    view.mkdir()
    if subprocess.run(["mount", "--bind", str(folder), str(view)], capture_output=True).returncode:
        pytest.skip("cannot bind-mount here")
    try:
        if subprocess.run(["mount", "-o", "remount,bind,ro", str(view)], capture_output=True).returncode:
            pytest.skip("cannot make a bind mount read-only here")
        yield folder, view
    finally:
        subprocess.run(["umount", "-l", str(view)], capture_output=True)  # lazily: a test may hold a file open


@pytest.mark.e2e
def test_a_read_only_workspace_is_one_line_and_its_status_still_reads(
    tmp_path: Path, read_only_view, monkeypatch, capsys
) -> None:
    from gaptui.tune.settings import load_tune
    from gaptui.tune.studies import open_studies

    folder, view = read_only_view
    preset = tune_preset(tmp_path, '["gcn"]')
    ws = Workspace.resolve(folder / "ws")
    open_studies(ws, load_tune(str(preset), ws)[1])
    with History(ws, write=True):
        pass
    status = gaptui(monkeypatch, capsys, "tune", "--preset", str(preset), "--status", "-w", str(view / "ws"))
    assert status.code == 0 and "0/2 trials" in status.out, status.err
    ran = gaptui(monkeypatch, capsys, "tune", "--preset", str(preset), "--gpus", "none", "-w", str(view / "ws"))
    assert "read-only" in ran.one_error()


# ------------------------------------------------------------------------------------------ records of wrong types


def _tuned(record: dict) -> dict:
    return {**record, "tune": {"study": "study", "row": "er / gcn", "trials": [0], "of": 2, "metric": "val_lap_acc"}}


FAULTS = [
    ("axes a list", lambda r: {**r, "axes": ["er", 0.04, "gcn"]}, "its axes is list"),
    ("an axis a table", lambda r: {**r, "axes": {**r["axes"], "model": {"x": 1}}}, "its axis 'model' is dict"),
    ("tune a string", lambda r: {**r, "tune": "study"}, "its tune is str"),
    (
        "tune.trials a string",
        lambda r: {**_tuned(r), "tune": {**_tuned(r)["tune"], "trials": "12"}},
        "its tune.trials is str",
    ),  # fmt: skip
    (
        "tune.trials of text",
        lambda r: {**_tuned(r), "tune": {**_tuned(r)["tune"], "trials": ["a"]}},
        "its tune.trials hold str",
    ),  # fmt: skip
    ("metrics a list", lambda r: {**r, "metrics": [0.5]}, "its metrics is list"),
    ("a metric that is text", lambda r: {**r, "metrics": {"val_lap_acc": "0.5"}}, "its metric 'val_lap_acc' is str"),
    ("run_dir a number", lambda r: {**r, "run_dir": 5}, "its run_dir is int"),
    ("tags a number", lambda r: {**r, "tags": 5}, "its tags is int"),
    ("duration text", lambda r: {**r, "duration": "5 s"}, "its duration is str"),
    ("params text", lambda r: {**r, "params": "many"}, "its params is str"),
    ("task a number", lambda r: {**r, "task": 5}, "its task is int"),
    ("seed text", lambda r: {**r, "seed": "zero"}, "its seed is str"),
    ("spec a list", lambda r: {**r, "spec": [1]}, "its spec is list"),
    ("an id that is a path", lambda r: {**r, "id": "../x"}, "its id is str '../x'"),
]


@pytest.mark.parametrize(("name", "spoil", "expected"), FAULTS, ids=[f[0] for f in FAULTS])
def test_a_record_of_the_wrong_types_is_left_out_of_every_command_with_one_warning(
    tmp_path: Path, monkeypatch, capsys, name: str, spoil, expected: str
) -> None:
    records = alignment_history(tmp_path)
    records[0] = spoil(copy.deepcopy(records[0]))
    ws = Workspace.resolve(tmp_path / "ws")
    with History(ws, write=True) as history:
        history.put_many(records)
    before = ws.history.read_bytes()
    warning = f"warning: history record {records[0]['id']} left out: {expected}"
    preset = tune_preset(tmp_path, '["gcn"]')
    commands = (["history"], ["history", "--json"], ["table"], ["stats"], ["tune", "--preset", str(preset), "--status"])
    for args in commands:
        ran = gaptui(monkeypatch, capsys, *args, "-w", str(ws.root))
        assert ran.code == 0, (args, ran.err)
        warnings = [line for line in ran.err.splitlines() if line.startswith("warning: ")]
        assert len(warnings) == 1 and warnings[0].startswith(warning), (args, ran.err)
    listed = json.loads(gaptui(monkeypatch, capsys, "history", "--json", "--limit", "0", "-w", str(ws.root)).out)
    assert len(listed) == len(records) - 1
    assert "left out" in gaptui(monkeypatch, capsys, "show", records[0]["id"], "-w", str(ws.root)).one_error()
    assert ws.history.read_bytes() == before  # left alone on disk


@pytest.mark.asyncio
async def test_the_app_opens_every_section_on_records_of_the_wrong_types(tmp_path: Path) -> None:
    from gaptui.tui.app import GaptuiApp

    ws = Workspace(tmp_path / "ws")
    trials = trial_records(ws)
    faulty = [
        {**trials[0], "hash": "f" * 64, "id": "faulty000001", "tune": {**trials[0]["tune"], "trials": "12"}},
        {**trials[1], "hash": "e" * 64, "id": "faulty000002", "axes": ["er", 0.1]},
        {**trials[2], "hash": "d" * 64, "id": "faulty000003", "run_dir": 7, "metrics": {"val_lap_acc": "x"}},
    ]
    with History(ws, write=True) as history:
        history.put_many(fixed_records(ws) + trials + faulty)
    app = GaptuiApp(ws)
    async with app.run_test(size=SIZE) as pilot:
        for key in ("f3", "f4", "f5", "f2"):
            await pilot.press(key)
            await pilot.pause()
        assert not any(r["id"].startswith("faulty") for r in app.book)
        assert any("history record faulty00000" in n and "2 more" in n for n in notices(app))
        await pilot.press("ctrl+q")


# ------------------------------------------------------------------------------------------ export --wandb


@pytest.fixture
def no_wandb_login(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    for key, value in {"HOME": str(home), "WANDB_API_KEY": "", "NETRC": str(home / ".netrc")}.items():
        monkeypatch.setenv(key, value)
    for key in ("WANDB_MODE", "WANDB_SERVICE", "XDG_CACHE_HOME", "WANDB_CACHE_DIR", "WANDB_DATA_DIR", "WANDB_DIR"):
        monkeypatch.delenv(key, raising=False)
    return home


LEDGERS = [
    ("an id that globs", {"p": {"h": {"id": "*", "status": "started", "attempt": 1}}}, "id '*' is not a W&B run id"),
    ("an id with a slash", {"p": {"h": {"id": "../x", "status": "done"}}}, "id '../x' is not a W&B run id"),
    ("an unknown status", {"p": {"h": {"id": "a-1", "status": "half"}}}, "status 'half' is not one of"),
    ("an attempt in words", {"p": {"h": {"id": "a-1", "status": "done", "attempt": "one"}}}, "attempt 'one'"),
    ("an entry that is a list", {"p": {"h": ["a-1", "done"]}}, "the entry is list"),
    ("runs that are a list", {"p": [1]}, "not a table of projects, each a table of runs"),
]


@pytest.mark.parametrize(("name", "ledger", "expected"), LEDGERS, ids=[c[0] for c in LEDGERS])
def test_a_hand_edited_ledger_is_one_line_before_anything_is_logged_or_moved(
    tmp_path: Path, no_wandb_login: Path, name: str, ledger: dict, expected: str
) -> None:
    pytest.importorskip("wandb")
    from gaptui.wandb_export import LEDGER, export_wandb

    folder = tmp_path / "out"
    (folder / "wandb" / "offline-run-20260101_000000-keep").mkdir(parents=True)
    (folder / LEDGER).write_text(json.dumps(ledger))
    with pytest.raises(GaptuiError, match=None) as caught:
        export_wandb(alignment_history(tmp_path)[:2], "p", folder=folder)
    assert expected in str(caught.value) and str(folder / LEDGER) in str(caught.value)
    assert [p.name for p in (folder / "wandb").iterdir()] == ["offline-run-20260101_000000-keep"]  # not set aside


def test_two_exports_into_one_folder_never_log_a_run_twice(tmp_path: Path, no_wandb_login: Path) -> None:
    pytest.importorskip("wandb")
    from engine.files import FileLock
    from gaptui.wandb_export import LOCK, export_wandb

    folder = tmp_path / "out"
    other = FileLock(folder / LOCK, "gaptui export --wandb p")
    assert other.acquire()  # another export holds the folder
    try:
        with pytest.raises(GaptuiError, match=r"is in use by another W&B export \(gaptui export --wandb p"):
            export_wandb(alignment_history(tmp_path)[:2], "p", folder=folder)
    finally:
        other.release()
    assert not (folder / "wandb").exists()


@pytest.mark.e2e
def test_an_offline_export_writes_only_under_the_folder_named(tmp_path: Path, no_wandb_login: Path) -> None:
    pytest.importorskip("wandb")

    ws = history_of(tmp_path, alignment_history(tmp_path)[:2])
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    out = tmp_path / "out"
    res = run_cli("export", "--wandb", "p", "--wandb-dir", str(out), "-w", str(ws), cwd=cwd)
    assert res.returncode == 0, res.stderr
    assert "logged 2 run(s)" in res.stdout
    assert list(no_wandb_login.rglob("*")) == [] and list(cwd.rglob("*")) == []  # no debug log under HOME
    assert len(list((out / "wandb").glob("offline-run-*"))) == 2
