"""A `gaptui tune` study in the terminal app: one entry per study row in Runs, History filters study=NAME, and the
Ranking leaves trial runs out."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import Input, Static

from gaptui.history.store import History
from gaptui.tui.app import GaptuiApp
from gaptui.tune.results import sparkline, study_rows
from tests.support.records import fixed_records, trial_records
from tests.support.tui import SIZE, type_into
from tests.support.waiting import wait_until


def test_study_rows_count_trials_and_keep_the_best_so_far(tmp_path: Path) -> None:
    from gaptui.workspace import Workspace

    (row,) = study_rows(trial_records(Workspace(tmp_path / "ws")))
    assert (row.study, row.row, row.ended, row.total, row.running) == ("zoo", "er / gcn", 2, 4, 1)
    assert row.best == [0.5, 0.7]
    assert sparkline([0.5, 0.7, 0.7]) == "▁██" and sparkline([]) == ""


@pytest.mark.asyncio
async def test_runs_shows_the_study_and_history_filters_it(tmp_path: Path) -> None:
    from gaptui.workspace import Workspace

    ws = Workspace(tmp_path / "ws")
    with History(ws, write=True) as history:
        history.put_many(fixed_records(ws) + trial_records(ws))
    app = GaptuiApp(ws)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f3")
        await pilot.pause()
        panel = app.screen.query_one("#runs-studies", Static)
        await wait_until(pilot, lambda: "study zoo" in str(panel.render()), what="the study line")
        text = str(panel.render())
        assert "study zoo · er / gcn: 2/4 trials, 1 running · best val_lap_acc 0.7000 ▁█" in text
        await pilot.press("f4")  # History
        await pilot.pause()
        box = app.screen.query_one("#history-filter", Input)
        await type_into(pilot, box, "study=zoo")
        await wait_until(pilot, lambda: len(app.screen.table.hashes()) == 3, what="the study's runs")
        assert sorted(app.book.get(h)["id"] for h in app.screen.table.hashes()) == [
            "tr0000000000",
            "tr0000000001",
            "tr0000000002",
        ]
        await pilot.press("ctrl+q")


@pytest.mark.asyncio
async def test_the_form_has_a_tune_section_that_a_preset_with_tune_fills(tmp_path: Path) -> None:
    from gaptui.tui.screens.new_experiment import NewExperimentScreen
    from gaptui.workspace import Workspace

    app = GaptuiApp(Workspace(tmp_path / "ws"))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f2")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, NewExperimentScreen) and screen.query_one("#tune-form").display
        assert "tune" not in screen.draft().document()  # blank: no [tune]
        await type_into(pilot, screen.query_one("#tune-trials", Input), "4")
        await type_into(pilot, screen.query_one("#tune-space", Input), "lr = { log = [1e-4, 1e-2] }, layers = [3, 4]")
        await pilot.pause()
        assert screen.draft().document()["tune"] == {
            "trials": 4,
            "space": {"lr": {"log": [1e-4, 1e-2]}, "layers": [3, 4]},
        }
        raw = {
            **screen.draft().document(),
            "tune": {"trials": 6, "at": 0.2, "space": {"dropout": {"range": [0.0, 0.3]}}},
        }
        await screen.apply_document(raw, "loaded")
        await pilot.pause()
        assert screen.query_one("#tune-trials", Input).value == "6"
        assert screen.query_one("#tune-space", Input).value == "dropout = { range = [0.0, 0.3] }"
        assert screen.draft().document()["tune"] == {
            "trials": 6,
            "at": 0.2,
            "space": {"dropout": {"range": [0.0, 0.3]}},
        }
        await type_into(pilot, screen.query_one("#tune-trials", Input), "0")
        await pilot.pause()
        with pytest.raises(Exception, match="tune trials '0'"):
            screen.draft().document()
        await pilot.press("ctrl+q")
