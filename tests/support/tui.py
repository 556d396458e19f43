"""Driving the terminal app in a test: its screen size, the notices it showed, the text a Static shows, typing into
an input, waiting for its background tasks and for a family's form."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tests.support.waiting import wait_until

if TYPE_CHECKING:
    from textual.pilot import Pilot
    from textual.widgets import Input

    from gaptui.tui.app import GaptuiApp
    from gaptui.tui.screens.new_experiment import NewExperimentScreen

SIZE = (120, 40)


async def tasks_done(app: GaptuiApp) -> None:
    """Wait for the app's background tasks (not the manager loop, which lives as long as the app)."""
    tasks = [w for w in app.workers if w.group != "manager"]
    if tasks:  # an empty list would mean "every worker" to wait_for_complete
        await app.workers.wait_for_complete(tasks)


async def type_into(pilot: Pilot, widget: Input, text: str) -> None:
    """Replace an input's text by typing it, as a user would."""
    widget.focus()
    widget.value = ""
    await pilot.press(*text)


def shown(static: Any, width: int = 200) -> str:
    """The text a Static shows: its content rendered without colour, ``width`` columns wide."""
    import io

    from rich.console import Console

    console = Console(width=width, color_system=None, record=True, file=io.StringIO())
    console.print(static.content)
    return console.export_text()


def notices(app: GaptuiApp) -> list[str]:
    """Every notification the app showed, oldest first, expired ones too (``tests/conftest.py`` keeps them)."""
    return list(app.__dict__.get("notice_log", []))


async def switch_task(pilot: Any, form: NewExperimentScreen, task: str, field: str) -> None:
    """Choose ``task`` in the picker and wait until its form is drawn, every field and row composed."""
    from textual.widgets import Select

    form.query_one("#task", Select).value = task
    await wait_until(pilot, lambda: form.built_task == task, what=f"{task} form")
    assert form.query(f"#{field}")
