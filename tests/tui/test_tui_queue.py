"""The app steers its queue: ``p`` pauses and resumes it, ``d`` drains the slot of the run under the cursor, the
palette and the help screen offer both, and ``gaptui queue`` in another terminal sees (and steers) the same."""

from __future__ import annotations

from pathlib import Path

import pytest

from gaptui.tui.app import GaptuiApp
from gaptui.tui.planning import SlotConfig
from gaptui.tui.screens.confirm import ChoiceScreen
from gaptui.tui.screens.help import HelpScreen
from gaptui.workspace import Workspace
from tests.support.cli import run_cli
from tests.support.presets import tiny_preset
from tests.support.tui import SIZE, notices
from tests.support.waiting import wait_until

#: Every test here starts the CLI or a worker in a subprocess.
pytestmark = pytest.mark.e2e


@pytest.mark.asyncio
async def test_pause_drain_and_resume_from_the_runs_section(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    app = GaptuiApp(ws)
    async with app.run_test(size=SIZE) as pilot:
        titles = {c.title for c in app.get_system_commands(app.screen)}
        assert "Pause the queue" in titles and "Resume the queue" not in titles
        assert app.launch(tiny_preset(epochs=5000, noise=(0.05, 0.1, 0.2)), SlotConfig(cpu_jobs=2))
        await pilot.press("f3")
        runs = app.runs_screen

        def running() -> list[dict]:
            return [r for r in app.book if r["status"] == "running"]

        await wait_until(pilot, lambda: len(running()) == 2, what="two runs on two slots")
        await pilot.press("p")
        await wait_until(pilot, lambda: app.state.paused, what="the pause")
        assert any(n.startswith("queue: paused") for n in notices(app))
        assert "paused" in str(runs.query_one("#runs-state").render())
        assert "Resume the queue" in {c.title for c in app.get_system_commands(app.screen)}
        status = run_cli("queue", "status", "--workspace", str(ws.root))
        assert "the gaptui app (pid" in status.stdout and "queue paused" in status.stdout, status.stdout

        drained, other = running()
        runs.table.move_to(drained["hash"])
        await pilot.press("d")
        await wait_until(pilot, lambda: app.state.draining == (drained["slot"],), what="the drain")
        runs.table.move_to(other["hash"])
        await pilot.press("c")  # its slot frees; paused, nothing takes it
        await wait_until(pilot, lambda: app.book.get(other["hash"])["status"] == "cancelled", what="the cancel")
        await wait_until(pilot, lambda: len(app.state.running) == 1, what="one run left running")
        (queued,) = [r for r in app.book if r["status"] == "queued"]
        await pilot.press("p")  # resumed: the queued run starts on the free slot, never on the drained one
        await wait_until(pilot, lambda: app.book.get(queued["hash"])["status"] == "running", what="the queued run")
        assert app.book.get(queued["hash"])["slot"] == other["slot"] != drained["slot"]

        res = run_cli("queue", "resume", drained["slot"], "--workspace", str(ws.root))  # another terminal
        assert res.returncode == 0, res.stderr
        await wait_until(pilot, lambda: app.state.draining == (), what="the slot given runs again")
        assert any(f"taking runs again: {drained['slot']}" in n for n in notices(app))

        await pilot.press("f1")
        await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen), what="the help screen")
        runs_keys = dict(app.screen.sections)["Runs"]
        assert {"Pause/resume queue", "Drain slot"} <= {b.description for b in runs_keys}
        await pilot.press("escape", "ctrl+q")
        await wait_until(pilot, lambda: isinstance(app.screen, ChoiceScreen), what="the quit question")
        await pilot.press("s")
        await wait_until(pilot, lambda: not app.is_running, what="the app to stop its runs and exit")
    assert not (ws.root / "queue-state.json").exists()
