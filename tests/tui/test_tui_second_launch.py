"""The app on a workspace that already holds runs: a grid launched (twice) while History shows rows sorted by any
column, then the app opened again on the result and a third grid launched; and the tables' own rows (Text cells)
kept in order as records arrive."""

from __future__ import annotations

from pathlib import Path

import pytest
import tomllib
from textual.widgets import Input

from engine.alignment.preset import dump_preset
from gaptui.history.store import read_records
from gaptui.tui.app import GaptuiApp
from gaptui.tui.screens.history import HistoryScreen
from gaptui.tui.screens.new_experiment import NewExperimentScreen
from gaptui.tui.widgets.record_table import RecordTable, history_columns
from gaptui.workspace import Workspace
from tests.support.presets import tiny_preset
from tests.support.records import fixed_records, seeded_workspace
from tests.support.tui import SIZE, notices, type_into
from tests.support.waiting import wait_until


def ids_in_order(table: RecordTable, app: GaptuiApp, column: str) -> list[object]:
    """The sort values of the table's rows in display order (every row added)."""
    key = table.table_columns[column].sort_value
    return [key(app.book.get(h)) for h in table.hashes()]


def in_sort_order(values: list[object], reverse: bool = False) -> bool:
    numbers = [v for v in values if isinstance(v, (int, float))]
    return numbers == sorted(numbers, reverse=reverse)


async def launch_from_form(pilot, app: GaptuiApp, seeds: str, total: int) -> None:
    """F2, seeds typed into the form (the tiny preset loaded on the first visit), Ctrl+L, and every run done."""
    await pilot.press("f2")
    await wait_until(pilot, lambda: isinstance(app.screen, NewExperimentScreen), what="the form")
    form = app.screen
    assert isinstance(form, NewExperimentScreen)
    await wait_until(pilot, lambda: form.built_task == "alignment", what="the alignment form")
    if form.query_one("#name", Input).value != "tiny":
        await form.apply_document(tomllib.loads(dump_preset(tiny_preset())), "tiny")
        await type_into(pilot, form.query_one("#cpu-jobs", Input), "2")
    await type_into(pilot, form.query_one("#seeds", Input), seeds)
    await pilot.press("ctrl+l")  # the form as typed is what launches
    await wait_until(pilot, lambda: app.current_mode == "runs", what="the Runs section")
    await wait_until(
        pilot,
        lambda: len(app.book) == total and all(r["status"] in ("done", "failed") for r in app.book),
        what=f"{total} runs filed",
    )


@pytest.mark.e2e  # the app launches workers
@pytest.mark.asyncio
async def test_launching_twice_while_history_is_sorted_then_opening_the_app_again(tmp_path: Path) -> None:
    ws = seeded_workspace(tmp_path / "ws")  # 12 runs: the app opens on History, sorted by run id
    app = GaptuiApp(ws)
    async with app.run_test(size=SIZE) as pilot:
        history = app.screen
        assert isinstance(history, HistoryScreen) and history.table.row_count == 12
        await pilot.press("s", "s")  # sorted by noise: records added later must land in order
        assert history.table.sort_column == "noise"
        await launch_from_form(pilot, app, "0", 14)
        await launch_from_form(pilot, app, "0,1", 16)  # the second launch: History holds 14 rows
        await pilot.press("f4")
        await wait_until(pilot, lambda: history.table.row_count == 16 and not history.table.filling, what="rows")
        assert in_sort_order(ids_in_order(history.table, app, "noise"))
        assert not [n for n in notices(app) if "failed" in n and "Error" in n]
        await pilot.press("ctrl+q")
    assert app.return_code == 0
    assert sorted(r["status"] for r in read_records(ws)).count("done") == 15  # one seeded run failed

    again = GaptuiApp(ws)  # the second start of the app on that workspace
    async with again.run_test(size=SIZE) as pilot:
        history = again.screen
        assert isinstance(history, HistoryScreen) and history.table.row_count == 16
        await pilot.press("S")  # run id, descending
        await launch_from_form(pilot, again, "2", 18)
        await pilot.press("f4")
        await wait_until(pilot, lambda: history.table.row_count == 18 and not history.table.filling, what="rows")
        shown = [again.book.get(h)["id"] for h in history.table.hashes()]
        assert shown == sorted(shown, reverse=True)
        await pilot.press("ctrl+q")
    assert again.return_code == 0


@pytest.mark.asyncio
async def test_rows_appended_to_a_sorted_table_of_text_cells_keep_its_order(tmp_path: Path) -> None:
    """The tables' cells are Rich ``Text`` (a run id too): an append re-sorts without hashing or comparing cells."""
    from textual.app import App

    ws = Workspace(tmp_path / "ws")
    records = [
        {**r, "hash": f"{i:064x}", "id": f"{i:012x}"[::-1]} for i, r in enumerate(seeded_records(ws))
    ]  # ids that do not sort like the rows' order of arrival

    class One(App):
        def compose(self):
            yield RecordTable(history_columns("alignment"))

    app = One()
    async with app.run_test(size=(160, 30)) as pilot:
        table = app.query_one(RecordTable)
        table.sort_column = "id"
        table.set_records(records[:6])
        await pilot.pause()
        for column, reverse in (("id", False), ("noise", True), ("model", False), ("duration", True)):
            table.sort_by(column, reverse)
            for record in records[6:]:
                assert table.upsert(record)
            table.resort()
            while table.filling:
                await pilot.pause(0.02)
            key = table.table_columns[column].sort_value
            values = [key(next(r for r in records if r["hash"] == h)) for h in table.hashes()]
            assert values == sorted(values, reverse=reverse), column
            for record in records[6:]:
                table.remove(record["hash"])


def seeded_records(ws: Workspace) -> list[dict]:

    return fixed_records(ws)


@pytest.mark.e2e  # the app launches workers
def test_an_error_in_the_app_files_its_runs_interrupted_and_exits_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An exception in a handler ends the app: its running worker stops with a checkpoint and it and the queued run
    are recorded ``interrupted`` (not cancelled: no one chose to), said on stderr with exit status 1."""
    from textual.app import App

    from gaptui.tui import app as tui_app
    from gaptui.tui.planning import SlotConfig

    ws = Workspace(tmp_path / "ws")

    async def crash(pilot) -> None:
        app = pilot.app
        assert app.launch(tiny_preset(epochs=5000), SlotConfig(cpu_jobs=1))  # two runs on one slot
        await wait_until(pilot, lambda: any(r["status"] == "running" for r in app.book), what="a run started")
        run = next(r for r in app.book if r["status"] == "running")
        await wait_until(pilot, lambda: len(epoch_lines(run)) >= 2, what="its first epoch")

        def boom() -> None:
            raise RuntimeError("a bug in a handler")

        app.call_later(boom)

    monkeypatch.setattr(tui_app.GaptuiApp, "run", lambda self: App.run(self, headless=True, auto_pilot=crash))
    assert tui_app.run_app(ws.root) == 1
    records = read_records(ws)
    assert [r["status"] for r in records] == ["interrupted", "interrupted"]
    assert all("stopped on an error" in r["error"] for r in records)
    started = next(r for r in records if r.get("attempts"))
    assert epoch_lines(started)[-1]["event"] == "cancelled"  # it saved its checkpoint
    err = capsys.readouterr().err
    assert "gaptui stopped on an error" in err and "2 run(s)" in err and "recorded interrupted" in err


def epoch_lines(record: dict) -> list[dict]:
    import json

    path = Path(record["run_dir"]) / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.asyncio
async def test_messages_of_the_manager_that_arrive_while_the_app_is_torn_down_are_dropped(tmp_path: Path) -> None:
    """The manager thread posts whenever it likes; the app may be uninstalling its sections meanwhile (quitting):
    what arrives then is dropped, whichever section it was for."""
    import threading

    from gaptui.tui.messages import LogTail, RecordsAdded, RunEvents, RunUpdated, SchedulerState

    ws = seeded_workspace(tmp_path / "ws")
    app = GaptuiApp(ws)
    stop = threading.Event()
    record = next(iter(read_records(ws)))
    posted = []

    def flood() -> None:
        i = 0
        while not stop.is_set():
            i += 1
            for message in (
                SchedulerState((record["hash"],), (), ("cpu#0",), building=f"step {i}"),
                RunUpdated(record["hash"], {"note": f"n{i}"}),
                RecordsAdded([{**record, "note": f"r{i}"}]),
                RunEvents(record["hash"], [{"event": "epoch", "epoch": i, "t": float(i)}]),
                LogTail(record["hash"], [f"line {i}"]),
            ):
                posted.append(app.post_message(message))
            stop.wait(0.005)  # a busy manager's pace, not a flood the app could never drain

    thread = threading.Thread(target=flood)
    try:
        async with app.run_test(size=SIZE) as pilot:
            for mode in ("runs", "new", "ranking", "history"):  # every section mounted
                await app.switch_mode(mode)
                await pilot.pause()
            thread.start()
            await wait_until(pilot, lambda: len(posted) > 100, what="messages flowing")
            # leaving the context tears the app down while the thread keeps posting
    finally:
        stop.set()
        thread.join(10)
    assert app.return_code != 1  # an exception in a handler sets 1 (and run_test re-raises it)
