"""The Textual app driven through Pilot: compose and launch a grid, follow it, cancel, detach and re-attach, the
read-only mode, the pure helpers behind the form, and snapshots of the main screens."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import tomllib
from textual.pilot import Pilot
from textual.widgets import Input, Select, SelectionList, Static, TabbedContent

from engine.alignment.form import parse_noise_level
from engine.alignment.preset import dump_preset
from engine.errors import GaptuiError
from gaptui.history.store import History, read_records
from gaptui.presets import load_preset
from gaptui.tui.app import GaptuiApp
from gaptui.tui.planning import FormDraft, SlotConfig, form_fields_of, parse_seeds
from gaptui.tui.screens.confirm import ChoiceScreen
from gaptui.tui.screens.history import HistoryScreen, matches
from gaptui.tui.screens.new_experiment import NewExperimentScreen
from gaptui.tui.screens.preset_picker import PresetPicker
from gaptui.tui.screens.ranking import RankingScreen, export_path
from gaptui.tui.screens.run_detail import RunDetailScreen
from gaptui.tui.widgets.banner import ReadOnlyBanner
from gaptui.tui.widgets.ranking_grid import RankingGrid
from gaptui.tui.widgets.record_table import RecordTable
from gaptui.workspace import Workspace
from tests.support import ROOT
from tests.support.presets import PROBE, tiny_preset
from tests.support.records import run_events, seeded_workspace
from tests.support.tui import SIZE, notices, tasks_done, type_into
from tests.support.waiting import wait_until

# ------------------------------------------------------------------------------------------ helpers


#: Seconds a wait gives up after. A wait returns as soon as its event happens; this bound only decides when a test
#: that will never see it fails. One bound for every wait, set for the slowest machine the suite runs on (every
#: test of it on one loaded core, where starting a worker or importing the model registry takes minutes), rather
#: than a guess per wait tuned on a quiet machine.
WAIT_BOUND = 600.0


def kill_group(pid: int | None) -> None:
    """SIGTERM a worker's process group (test clean-up; the worker checkpoints and exits)."""
    if pid:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGTERM)


# ------------------------------------------------------------------------------------------ pure helpers


@pytest.mark.e2e
def test_the_engine_and_the_cli_never_import_textual() -> None:
    code = (
        "import sys, engine.worker, engine.alignment.training, engine.alignment.datasets, gaptui.cli.app; "
        "assert 'textual' not in sys.modules, sorted(m for m in sys.modules if m.startswith('textual'))"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=WAIT_BOUND)
    assert res.returncode == 0, res.stderr


def test_the_cli_opens_the_tui_without_a_command(monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    import gaptui.tui.app as tui_app
    from gaptui.cli.app import app as cli

    calls: list[Any] = []
    monkeypatch.setattr(tui_app, "run_app", lambda workspace=None: calls.append(workspace))
    runner = CliRunner()
    assert runner.invoke(cli, []).exit_code == 0
    assert runner.invoke(cli, ["tui", "--workspace", "somewhere"]).exit_code == 0
    assert calls == [None, Path("somewhere")]
    assert "tui" in runner.invoke(cli, ["--help"]).output


def test_form_parsers() -> None:
    from engine.tasks import family

    assert [parse_noise_level(x) for x in ("0.05", "12%", "30")] == [0.05, 0.12, 0.3]
    assert parse_seeds("0-2, 5 1") == [0, 1, 2, 5]
    with pytest.raises(GaptuiError, match="noise level"):
        parse_noise_level("abc")
    with pytest.raises(GaptuiError, match="must lie in"):
        parse_noise_level("150%")
    with pytest.raises(GaptuiError, match="seeds"):
        parse_seeds("x")
    fields = family("alignment").form.fields()
    row = {"base": "er", "params": "n=16 degree=4", "noise_model": None, "train": "20", "val": "6", "seed": "0"}
    values = {"datasets": [row], "noise": [0.2, 0.05], "models": ["gcn", "laplacian"], "seeds": "0-1"}
    values |= {"epochs": "2", "out_dim": "8"}
    draft = FormDraft("alignment", name="mine", fields=values, cpu_jobs="2")
    preset = draft.preset()
    assert preset.datasets[0].params == {"n": 16, "degree": 4} and preset.datasets[0].train == 20
    assert preset.noise == (0.2, 0.05) and preset.models == ("gcn",) and preset.laplacian
    assert preset.seeds == (0, 1) and preset.run.epochs == 2 and preset.run.out_dim == 8
    assert draft.slot_config() == SlotConfig(None, 1, 2)
    # a loaded preset fills the form and gives back the same preset
    document = draft.document()
    shown = form_fields_of(family("alignment").form.form_values(document), fields)
    again = FormDraft("alignment", name="mine", fields=shown, base=document)
    assert again.document() == document and again.preset() == preset
    with pytest.raises(GaptuiError, match="no parameter 'm'"):
        FormDraft("alignment", fields={**values, "datasets": [{**row, "params": "m=3"}]}).preset()
    with pytest.raises(GaptuiError, match="^the form: key 'models' is empty"):  # the form, not a file, is at fault
        FormDraft("alignment", fields={**values, "models": []}).preset()


def test_history_filter_matches_every_word() -> None:
    record = {
        "task": "alignment",
        "axes": {"dataset": "er[n=16]", "model": "gcn", "noise": 0.12},
        "spec": {"dataset": {"base": "er"}},
        "status": "done",
        "tags": ["paper"],
    }
    assert matches(record, ["gcn", "done"]) and matches(record, ["paper"]) and matches(record, ["η=0.12"])
    assert matches(record, ["alignment", "er"]) and not matches(record, ["gin"])


# ------------------------------------------------------------------------------------------ the app, end to end


@pytest.mark.e2e  # starts worker processes
@pytest.mark.asyncio
async def test_compose_launch_follow_and_rank_a_smoke_grid(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    app = GaptuiApp(ws)
    async with app.run_test(size=SIZE) as pilot:
        assert app.current_mode == "new"  # an empty workspace opens on the form
        form = app.screen
        assert isinstance(form, NewExperimentScreen)
        await wait_until(pilot, lambda: form.query_one("#models", SelectionList).option_count > 0, what="models")
        # load the bundled smoke preset through its Select, then edit it in the form
        form.query_one("#preset", Select).value = "smoke"
        await wait_until(pilot, lambda: form.query_one("#name", Input).value == "smoke", what="preset loaded")
        # the preset's dataset rows replace the form's (mounted after the name is filled in)
        await wait_until(pilot, lambda: "n=20" in form.query_one("DatasetRow .params", Input).value, what="rows")
        await type_into(pilot, form.query_one("DatasetRow .params", Input), "n=16 degree=4")
        await type_into(pilot, form.query_one("DatasetRow .train", Input), "20")
        await type_into(pilot, form.query_one("DatasetRow .val", Input), "6")
        await type_into(pilot, form.query_one("#out-dim", Input), "8")
        await type_into(pilot, form.query_one("#cpu-jobs", Input), "2")
        assert sorted(form.query_one("#models", SelectionList).selected) == ["gcn", "gin"]
        await wait_until(pilot, lambda: form.summary is not None and form.summary.size == 4, what="grid summary")
        assert form.summary.existing == 0 and form.summary.estimate_seconds is None
        assert "grid 4 runs · 0 in history" in str(form.query_one("#plan", Static).render())

        await pilot.press("ctrl+l")
        await wait_until(pilot, lambda: app.current_mode == "runs", what="the Runs section")
        runs = app.runs_screen
        # live curve data streams in from the scheduler's events
        await wait_until(pilot, lambda: any(len(f.epochs) >= 1 for f in runs.feeds.values()), what="epoch events")
        await wait_until(
            pilot,
            lambda: len(app.book) == 4 and all(r["status"] == "done" for r in app.book),
            what="the grid to finish",
        )
        assert runs.table.row_count == 4
        records = list(app.book)
        assert {r["axes"]["dataset"] for r in records} == {"er[degree=4,n=16]"}
        assert {(r["axes"]["model"], r["axes"]["noise"]) for r in records} == {
            (m, n) for m in ("gcn", "gin") for n in (0.05, 0.2)
        }
        for record in records:
            assert record["spec"]["epochs"] == 2 and record["spec"]["out_dim"] == 8
            assert record["spec"]["dataset"]["n_train"] == 20 and record["spec"]["budget"] == 5000
            assert len(runs.feeds[record["hash"]].epochs) == 2
        assert {r["hash"] for r in read_records(ws)} == {r["hash"] for r in records}

        await pilot.press("f4")  # its first visit: mounted now
        await wait_until(pilot, lambda: isinstance(app.screen, HistoryScreen) and app.screen.ready, what="History")
        history = app.screen
        assert isinstance(history, HistoryScreen) and history.table.row_count == 4
        assert "4 of 4 runs" in str(history.query_one("#history-info", Static).render())

        await pilot.press("f5")
        await wait_until(pilot, lambda: isinstance(app.screen, RankingScreen) and app.screen.ready, what="Ranking")
        ranking = app.screen
        # the two models, then the dataset's symmetry ceilings as rows of their own
        await wait_until(pilot, lambda: ranking.query_one(RankingGrid).row_count == 4, what="ranking rows")
        grid = ranking.query_one(RankingGrid)
        assert [str(k.value) for k in grid.rows] == ["gcn", "gin", "ceiling: orbits", "ceiling: 1-WL"]
        cells = [str(c) for row in range(2) for c in grid.get_row_at(row)[1:]]
        assert sum("**" in c for c in cells) >= 2  # one best per noise level

        # the form now knows the grid is done
        await pilot.press("f2")
        await wait_until(pilot, lambda: form.summary is not None and form.summary.done == 4, what="summary")
        assert form.summary.to_run == 0 and form.summary.estimate_seconds is not None
        await pilot.press("ctrl+q")  # nothing in flight: quits without asking
    assert app.return_code == 0 and not app.detached


@pytest.mark.asyncio
async def test_save_writes_a_preset_that_run_accepts_and_never_overwrites_silently(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    (ws.root / "presets").mkdir(parents=True)
    (ws.root / "presets" / "bad.toml").write_text('noise = [0.1]\nmodels = ["gcn"]\nseeds = [0]\nepochs = 3\n')
    app = GaptuiApp(ws)
    async with app.run_test(size=SIZE) as pilot:
        form = app.screen
        assert isinstance(form, NewExperimentScreen)
        await wait_until(pilot, lambda: form.query_one("#models", SelectionList).option_count > 0, what="models")
        # a preset that does not validate: the worker's GaptuiError is shown verbatim
        form.query_one("#preset", Select).value = "bad"
        await wait_until(pilot, lambda: any("unknown key 'epochs'" in n for n in notices(app)), what="the error")
        assert any(n.startswith(str(ws.root / "presets" / "bad.toml")) for n in notices(app))
        await form.apply_document(tomllib.loads(dump_preset(tiny_preset(models=("gcn", "gin")))), "tiny")
        await type_into(pilot, form.query_one("#name", Input), "mine")
        await pilot.press("ctrl+s")
        path = ws.root / "presets" / "mine.toml"
        await wait_until(pilot, path.exists, what="the preset file")
        await tasks_done(app)
        saved = load_preset(str(path), ws)
        assert saved.name == "mine" and saved.models == ("gcn", "gin") and saved.datasets[0].params["n"] == 16
        path.write_text(path.read_text() + "# edited by hand\n")
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert isinstance(app.screen, ChoiceScreen)  # asks before overwriting
        await pilot.press("n")
        await tasks_done(app)
        assert path.read_text().endswith("# edited by hand\n")
        await pilot.press("ctrl+q")


@pytest.mark.e2e  # starts worker processes
@pytest.mark.asyncio
async def test_cancel_a_running_run(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    app = GaptuiApp(ws)
    async with app.run_test(size=SIZE) as pilot:
        assert app.launch(tiny_preset(epochs=5000, noise=(0.05,)), SlotConfig(cpu_jobs=1))
        await pilot.press("f3")
        runs = app.runs_screen
        await wait_until(pilot, lambda: any(len(f.epochs) >= 1 for f in runs.feeds.values()), what="a first epoch")
        (run_hash,) = list(runs.feeds)
        assert app.book.get(run_hash)["status"] == "running"
        runs.table.move_to(run_hash)
        await pilot.press("c")
        await wait_until(pilot, lambda: app.book.get(run_hash)["status"] == "cancelled", what="the cancellation")
        events = run_events(app.book.get(run_hash))
        assert events[-1]["event"] == "cancelled"
        assert read_records(ws)[0]["status"] == "cancelled"
        # retry resumes the run from its checkpoint; cancel it again
        await pilot.press("r")
        await wait_until(
            pilot, lambda: sum(e["event"] == "start" for e in run_events(app.book.get(run_hash))) == 2, what="restart"
        )
        resumed = [e for e in run_events(app.book.get(run_hash)) if e["event"] == "start"][-1]
        assert resumed["resumed_from"] is not None and app.book.get(run_hash)["attempts"] == 2
        await pilot.press("c")
        await wait_until(pilot, lambda: app.book.get(run_hash)["status"] == "cancelled", what="the second cancellation")
        # its duration counts both parts: the first from its start to its cancel, the second from its spawn
        record, events = app.book.get(run_hash), run_events(app.book.get(run_hash))
        first = [e for e in events if e["event"] in ("start", "cancelled")][:2]
        expected = (events[-1]["t"] - record["started_ts"]) + (first[1]["t"] - first[0]["t"])
        assert record["duration"] == pytest.approx(expected, abs=0.05)
        await pilot.press("o")  # open in history: the run's details over the History section
        await pilot.pause()
        assert app.current_mode == "history" and isinstance(app.screen, RunDetailScreen)
        assert app.screen.run_hash == run_hash
        await pilot.press("ctrl+q")


@pytest.mark.e2e  # starts worker processes
@pytest.mark.asyncio
async def test_leave_running_on_quit_then_reattach(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    first = GaptuiApp(ws)
    pid = None
    try:
        async with first.run_test(size=SIZE) as pilot:
            assert first.launch(tiny_preset(epochs=5000, noise=(0.05,)), SlotConfig(cpu_jobs=1))
            await wait_until(
                pilot, lambda: any(len(f.epochs) >= 1 for f in first.runs_screen.feeds.values()), what="a first epoch"
            )
            (record,) = list(first.book)
            pid = record["pid"]
            await pilot.press("ctrl+q")
            await pilot.pause()
            assert isinstance(first.screen, ChoiceScreen)
            await pilot.press("l")  # leave running
            await wait_until(pilot, lambda: not first.is_running, what="the app to exit")
        assert first.detached == [record["id"]]
        os.kill(pid, 0)  # the worker survived the UI

        second = GaptuiApp(ws)
        async with second.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: second.recovered is not None, what="recovery")
            current = second.book.get(record["hash"])
            reattached = record["id"] in second.recovered.reattached and current["status"] == "running"
            finished = current["status"] == "done"
            assert reattached or finished, (second.recovered, current["status"])
            if reattached:
                await wait_until(
                    pilot, lambda: len(second.runs_screen.feeds.get(record["hash"]).epochs) >= 1, what="events"
                )
            await pilot.press("ctrl+q")
            await pilot.pause()
            assert isinstance(second.screen, ChoiceScreen)
            await pilot.press("s")  # stop: SIGTERM, checkpoint, cancelled
            await wait_until(pilot, lambda: not second.is_running, what="the app to stop its run and exit")
        assert read_records(ws)[0]["status"] in ("cancelled", "done")
    finally:
        kill_group(pid)


@pytest.mark.asyncio
async def test_read_only_when_another_manager_holds_the_workspace(tmp_path: Path) -> None:
    ws = seeded_workspace(tmp_path / "ws")
    with History(ws, write=True, purpose="gaptui run --preset other"):
        app = GaptuiApp(ws)
        async with app.run_test(size=SIZE) as pilot:
            assert "in use by gaptui run --preset other" in app.read_only
            assert app.current_mode == "history"
            titles = {c.title for c in app.get_system_commands(app.screen)}
            assert {"New experiment", "Runs", "History", "Ranking", "Export ranking table", "Quit"} <= titles
            history = app.screen
            assert isinstance(history, HistoryScreen)
            assert history.query(ReadOnlyBanner) and history.table.row_count == 12
            # browsing works: filter, sort, details
            await pilot.press("slash", *"gin done")
            assert history.table.row_count == 5
            await pilot.press("enter", "escape")
            assert history.table.row_count == 12
            await pilot.press("enter")
            await pilot.pause()
            assert isinstance(app.screen, RunDetailScreen) and app.screen.query_one("#tags", Input).disabled
            await pilot.press("ctrl+s")  # editing is refused with a message
            await pilot.press("escape", "f2")  # the form's first visit: Ctrl+L is its key once it is drawn
            await wait_until(
                pilot, lambda: isinstance(app.screen, NewExperimentScreen) and app.screen.built_task, what="the form"
            )
            await pilot.press("ctrl+l")
            await pilot.pause()
            assert "launching, cancelling and editing are disabled" in notices(app)[-1]
            assert app.current_mode == "new" and not app.manager.commands.qsize()
            await pilot.press("ctrl+q")
    assert all(r["status"] in ("done", "failed") for r in read_records(ws))


@pytest.mark.asyncio
async def test_history_sorts_updates_rows_in_place_and_exports_the_ranking(tmp_path: Path) -> None:
    ws = seeded_workspace(tmp_path / "ws")
    app = GaptuiApp(ws)
    async with app.run_test(size=SIZE) as pilot:
        history = app.screen
        assert isinstance(history, HistoryScreen)
        table: RecordTable = history.table
        await pilot.press("s", "s", "s")  # id -> dataset -> noise -> model
        assert table.sort_column == "model"
        models = [app.book.get(h)["axes"]["model"] for h in table.hashes()]
        assert models == sorted(models)
        await pilot.press("S")
        assert [app.book.get(h)["axes"]["model"] for h in table.hashes()] == sorted(models, reverse=True)
        table.move_cursor(row=3)
        cursor = table.cursor_hash
        order = table.hashes()
        # tag the run in its details (written through the history): its row updates in place, cursor kept
        await pilot.press("enter")
        await pilot.pause()
        detail = app.screen
        assert isinstance(detail, RunDetailScreen) and detail.run_hash == cursor
        detail.query_one("#detail-tabs", TabbedContent).active = "tab-edit"
        await type_into(pilot, detail.query_one("#tags", Input), "best, best ,keep")
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: app.book.get(cursor)["tags"] == ["best", "keep"], what="the tags")
        await pilot.press("escape")
        await pilot.pause()
        assert table.hashes() == order and table.cursor_hash == cursor
        assert "best, keep" in str(table.get_cell(cursor, "tags"))
        # sorting by a header click
        await pilot.click("#history-table", offset=(3, 0))  # the run id header
        assert table.sort_column == "id"

        await pilot.press("f5")
        await wait_until(pilot, lambda: isinstance(app.screen, RankingScreen) and app.screen.ready, what="Ranking")
        await pilot.press("e")
        await wait_until(pilot, lambda: isinstance(app.screen, ChoiceScreen), what="the export question")
        await pilot.press("m")
        await tasks_done(app)
        path = export_path(ws.exports, "er[degree=4,n=16]", "val_lap_acc", "md")
        await wait_until(pilot, path.exists, what="the export")
        text = path.read_text()
        assert "| gin |" in text and "**" in text
        # the same figures as `gaptui figures`, with one key
        await pilot.press("f")
        figures = ws.exports / "figures"
        await wait_until(pilot, lambda: (figures / "alignment-cd.png").exists(), what="the figures")
        await tasks_done(app)
        assert {p.stem.split("-")[1] for p in figures.glob("alignment-*.png")} == {"lines", "gap", "curves", "cd"}
        await pilot.press("ctrl+q")
    assert next(r for r in read_records(ws) if r["hash"] == cursor)["tags"] == ["best", "keep"]


# ------------------------------------------------------------------------------------------ snapshots


@contextmanager
def snapshot_workspace(name: str) -> Iterator[Workspace]:
    """A seeded workspace at a fixed path (the header shows the workspace, so snapshots must not depend on
    tmp_path), held under an exclusive lock: other pytest sessions (a CI clone) use the same paths."""
    with open(Path(tempfile.gettempdir()) / "gaptui-tui-snapshots.lock", "a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            yield seeded_workspace(Path(tempfile.gettempdir()) / f"gaptui-tui-snapshot-{name}")
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def test_snapshot_history(snap_compare: Any) -> None:
    with snapshot_workspace("history") as ws:
        assert snap_compare(GaptuiApp(ws), terminal_size=SIZE)


def test_snapshot_history_80x24(snap_compare: Any) -> None:
    with snapshot_workspace("history80") as ws:
        assert snap_compare(GaptuiApp(ws), terminal_size=(80, 24))


def test_snapshot_ranking(snap_compare: Any) -> None:
    with snapshot_workspace("ranking") as ws:
        assert snap_compare(GaptuiApp(ws), press=["f5"], terminal_size=SIZE)


def test_snapshot_run_detail(snap_compare: Any) -> None:
    async def open_detail(pilot: Pilot) -> None:
        await pilot.press("enter")
        await pilot.pause(0.8)  # the curves redraw on their timer

    with snapshot_workspace("detail") as ws:
        assert snap_compare(GaptuiApp(ws), run_before=open_detail, terminal_size=SIZE)


def test_snapshot_help(snap_compare: Any) -> None:
    with snapshot_workspace("help") as ws:
        assert snap_compare(GaptuiApp(ws), press=["f1"], terminal_size=SIZE)


# ------------------------------------------------------------------------------------------ task families


@pytest.mark.asyncio
async def test_family_pickers_switch_columns_tables_and_the_form(tmp_path: Path, toy: None) -> None:
    from engine.tasks import Placement, family
    from gaptui.scheduler import new_record

    ws = seeded_workspace(tmp_path / "ws")
    toy = family("toy")
    preset = toy.parse_preset({"sizes": [2, 3], "models": ["mean", "median"], "seeds": [0]}, "toy")
    records = []
    for i, spec in enumerate(toy.grid(preset, Placement(str(ws.datasets), str(ws.raw_data)))):
        record = new_record(spec, ws, preset="toy", planned_seeds=1)
        mae = 0.1 * spec.size + (0.0 if spec.model == "median" else 0.5)
        record.update(status="done", finished=f"2025-01-02T10:{i:02d}:00+0000", metrics={"val_mae": mae})
        records.append(record)
    with History(ws, write=True) as history:
        history.put_many(records)
    (ws.root / "presets").mkdir()
    (ws.root / "presets" / "toy-grid.toml").write_text('task = "toy"\nsizes = [2]\nmodels = ["mean"]\nseeds = [0]\n')

    app = GaptuiApp(ws)
    async with app.run_test(size=SIZE) as pilot:
        history = app.screen
        assert isinstance(history, HistoryScreen)

        def labels() -> list[str]:
            return [c.label for c in history.table.table_columns.values()]

        assert "task" in labels() and "run of" in labels()  # two families present: generic columns
        assert history.table.record_count == 12 + 6
        history.query_one("#history-task", Select).value = "toy"
        await wait_until(pilot, lambda: history.table.record_count == 6, what="toy runs only")
        assert labels()[1:3] == ["size", "model"] and "val MAE" in labels() and "noise" not in labels()

        app.switch_mode("ranking")
        await wait_until(pilot, lambda: isinstance(app.screen, RankingScreen), what="ranking")
        ranking = app.screen
        await wait_until(pilot, lambda: ranking.table is not None, what="a table")
        assert ranking.table.task == "alignment"
        await pilot.press("t")
        await wait_until(pilot, lambda: ranking.table is not None and ranking.table.task == "toy", what="toy")
        table = ranking.table
        assert table.rows == ("pre", "mean", "median") and table.columns == (2, 3)
        assert not table.metric.higher_is_better and [c.row for c in table.best(2)] == ["median"]
        assert str(ranking.query_one("#ranking-title", Static).render()).startswith("toy — val MAE")

        app.switch_mode("new")
        await wait_until(pilot, lambda: isinstance(app.screen, NewExperimentScreen), what="the form")
        form = app.screen
        await wait_until(pilot, lambda: bool(form.query("#noise")), what="the alignment form (first visit)")
        form.query_one("#task", Select).value = "toy"
        await wait_until(pilot, lambda: form.query("#sizes") and not form.query("#noise"), what="toy form")
        picker = form.query_one("#preset", Select)
        with pytest.raises(Exception, match="smoke"):
            picker.value = "smoke"  # the alignment presets are not offered for the toy family
        picker.value = "toy-grid"
        await wait_until(pilot, lambda: form.query_one("#name", Input).value == "toy-grid", what="toy preset loaded")
        await wait_until(pilot, lambda: form.summary is not None and form.summary.size == 2, what="toy summary")
        await pilot.press("ctrl+q")


@pytest.mark.asyncio
async def test_form_estimate_turns_to_measured_throughput_once_a_dry_run_calibrated(tmp_path: Path) -> None:
    from engine.alignment.throughput import CalibrationCache, Throughput
    from gaptui.estimate import Estimator, calibration_path
    from gaptui.launch import plan

    ws = Workspace(tmp_path / "ws")
    app = GaptuiApp(ws)
    async with app.run_test(size=SIZE) as pilot:
        form = app.screen
        assert isinstance(form, NewExperimentScreen)
        await wait_until(pilot, lambda: form.query_one("#models", SelectionList).option_count > 0, what="models")
        form.query_one("#preset", Select).value = "smoke"
        await wait_until(pilot, lambda: form.summary is not None and form.summary.size == 4, what="grid summary")
        assert form.summary.estimate_seconds is None  # no history, no calibration
        assert "gaptui run --dry-run measures" in str(form.query_one("#plan", Static).render())

        # What `gaptui run --dry-run` leaves behind for this grid on the form's slots (a fixed throughput here).
        draft = form.draft()
        preset, slots = draft.launch_preset(), draft.slot_config().slots()
        fixed = Throughput(step_s=0.5, val_pair_s=0.01, checkpoint_s=0.0, params=100, steps=3)
        estimator = Estimator(
            CalibrationCache(calibration_path(ws)),
            measure=lambda keys, _slots: [fixed] * len(keys),
            overhead=lambda _slots: 1.0,
        )
        wall = estimator.estimate(plan(preset, ws, {}), slots, ws).plan.wall
        await type_into(pilot, form.query_one("#name", Input), "smoke2")  # any edit plans again
        await wait_until(
            pilot, lambda: form.summary is not None and form.summary.estimate_source == "measured", what="estimate"
        )
        assert form.summary.estimate_seconds == pytest.approx(wall)
        assert "from measured throughput" in str(form.query_one("#plan", Static).render())
        await pilot.press("ctrl+q")


@pytest.mark.asyncio
async def test_loading_without_a_chosen_preset_points_at_the_list(tmp_path: Path) -> None:
    app = GaptuiApp(Workspace(tmp_path / "ws"))
    async with app.run_test(size=SIZE) as pilot:
        form = app.screen
        assert isinstance(form, NewExperimentScreen)
        await pilot.press("ctrl+o")  # nothing chosen in the list: the picker opens
        await wait_until(pilot, lambda: isinstance(app.screen, PresetPicker), what="the picker")
        await pilot.press("escape")
        await wait_until(pilot, lambda: app.screen is form, what="the form again")
        assert not any("unknown preset" in note or "loading" in note for note in notices(app))
        await pilot.press("ctrl+q")


# ------------------------------------------------------------------------------------------ code named by a preset
# issue 19, code named by a preset


@pytest.mark.asyncio
async def test_a_preset_naming_local_code_asks_once_per_file_before_importing_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gaptui.preset_code import TRUST_FILE, trust_path

    module = "gaptui_probe_user_model"
    code = tmp_path / "code"
    code.mkdir()
    (code / f"{module}.py").write_text(PROBE)  # a local model; importing it leaves a file 'imported'
    marker = code / "imported"
    monkeypatch.syspath_prepend(str(code))
    ws = Workspace(tmp_path / "ws")
    (ws.root / "presets").mkdir(parents=True)
    shared = ws.root / "presets" / "shared.toml"
    shared.write_text(
        f'noise = [0.1]\nmodels = ["gcn", "{module}:Model"]\nseeds = [0]\n[run]\nepochs = 1\nout_dim = 8\n'
        'budget = 5000\n[[datasets]]\nbase = "er"\nparams = { n = 16, degree = 4 }\ntrain = 10\nval = 4\n'
    )

    def question() -> str:
        """The question on screen ("" while none is shown)."""
        found = app.screen.query("#question") if isinstance(app.screen, ChoiceScreen) else []
        return str(found[0].render()) if found else ""

    app = GaptuiApp(ws)
    try:
        async with app.run_test(size=SIZE) as pilot:
            form = app.screen
            assert isinstance(form, NewExperimentScreen)
            form.query_one("#preset", Select).value = "shared"  # choosing it loads it
            await wait_until(pilot, question, what="the question")
            assert f"{module}:Model (model; {module} from {code / module}.py, not an installed package)" in question()
            assert any(f"runs code from: {module}:Model" in n for n in notices(app))
            # Cancel: nothing imported, the form as it was, nothing remembered
            await pilot.press("c")
            await tasks_done(app)
            assert not marker.exists() and module not in sys.modules
            assert form.query_one("#name", Input).value != "shared"
            assert not trust_path().exists()

            # Allow: imported and loaded, and remembered by the file's SHA-256
            await pilot.press("ctrl+o", "enter")  # the picker opens on the preset chosen in the list
            await wait_until(pilot, question, what="the question")
            await pilot.press("a")
            await wait_until(pilot, lambda: form.query_one("#name", Input).value == "shared", what="preset loaded")
            await tasks_done(app)
            assert marker.exists() and module in sys.modules
            trusted = json.loads(trust_path().read_text())
            assert trusted[str(shared.resolve())]["sha256"] == hashlib.sha256(shared.read_bytes()).hexdigest()
            assert not (ws.root / TRUST_FILE).exists()  # never in the workspace

            # The same file again: loaded without a question
            await type_into(pilot, form.query_one("#name", Input), "renamed")
            await pilot.press("ctrl+o", "enter")  # the picker opens on the preset chosen in the list
            await wait_until(pilot, lambda: form.query_one("#name", Input).value == "shared", what="loaded again")
            assert not isinstance(app.screen, ChoiceScreen)

            # The file changed: asked again; Cancel leaves the form alone
            shared.write_text(shared.read_text().replace("epochs = 1", "epochs = 2"))
            await type_into(pilot, form.query_one("#name", Input), "renamed")
            await pilot.press("ctrl+o", "enter")  # the picker opens on the preset chosen in the list
            await wait_until(pilot, question, what="the question again")
            await pilot.press("escape")
            await tasks_done(app)
            assert form.query_one("#name", Input).value == "renamed" and form.query_one("#epochs", Input).value == "1"
            await pilot.press("ctrl+q")
    finally:
        sys.modules.pop(module, None)


@pytest.mark.asyncio
async def test_a_family_preset_changed_since_it_was_loaded_is_not_launched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, toy: None
) -> None:
    import tests.support.toy_family

    # a family without a form launches its preset file as loaded
    monkeypatch.setattr(tests.support.toy_family.Toy, "form", None)
    ws = Workspace(tmp_path / "ws")
    (ws.root / "presets").mkdir(parents=True)
    path = ws.root / "presets" / "toy-grid.toml"
    path.write_text('task = "toy"\nsizes = [2]\nmodels = ["mean"]\nseeds = [0]\n')
    app = GaptuiApp(ws)
    async with app.run_test(size=SIZE) as pilot:
        form = app.screen
        assert isinstance(form, NewExperimentScreen)
        form.query_one("#task", Select).value = "toy"
        await wait_until(pilot, lambda: form.task_name == "toy" and not form.fields, what="toy without a form")
        form.query_one("#preset", Select).value = "toy-grid"
        await wait_until(pilot, lambda: form.family_preset is not None, what="toy preset loaded")
        # launching reads the file again: what it says now was never reviewed
        path.write_text(path.read_text().replace("sizes = [2]", "sizes = [2, 3]"))
        await pilot.press("ctrl+l")
        await wait_until(pilot, lambda: any("changed since it was loaded" in n for n in notices(app)), what="refusal")
        assert app.current_mode == "new" and len(app.book) == 0
        await pilot.press("ctrl+q")


@pytest.mark.asyncio
async def test_a_filter_typed_key_by_key_shows_what_the_whole_filter_shows(tmp_path: Path) -> None:
    """Typing on narrows among the rows shown (not the whole history); a deleted character widens again; a
    sort keeps exactly the rows of the filter."""
    ws = seeded_workspace(tmp_path / "ws")
    app = GaptuiApp(ws)
    async with app.run_test(size=SIZE) as pilot:
        history = app.screen
        assert isinstance(history, HistoryScreen)
        table: RecordTable = history.table

        def expected(text: str) -> set[str]:
            return {r["hash"] for r in app.book if matches(r, text.lower().split())}

        await pilot.press("slash")
        typed = ""
        for key in "gin 0.1":
            await pilot.press("space" if key == " " else key)
            typed += key
            await pilot.pause()
            assert set(table.hashes()) == expected(typed), typed
        assert 0 < len(table.hashes()) < len(app.book)
        for _ in range(4):  # back to "gin": wider again
            await pilot.press("backspace")
            typed = typed[:-1]
            await pilot.pause()
            assert set(table.hashes()) == expected(typed), typed
        await pilot.press("enter", "s")  # to the table, then sort by the next column
        await pilot.pause()
        assert set(table.hashes()) == expected("gin") and table.sort_column == "dataset"
        await pilot.press("ctrl+q")
