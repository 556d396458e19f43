"""RunDiffScreen: the runs marked in History side by side, as ``gaptui diff`` prints them (:mod:`gaptui.run_diff`):
the spec keys that differ, the metrics, what the runs were recorded with where it differs, and their curves."""

from __future__ import annotations

from typing import Any, ClassVar

from rich.console import Group
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Static

from gaptui.plots import epoch_rows
from gaptui.run_diff import curves_task, diff_tables, run_diff, run_events
from gaptui.tui.screens.section import SectionScreen
from gaptui.tui.widgets.curves import CurvesPanel


class RunDiffScreen(SectionScreen):
    """Pushed over History (``D`` on two or more marked rows); Escape goes back."""

    TITLE = "Run diff"
    BINDINGS: ClassVar[list[Binding]] = [Binding("escape", "back", "Back")]
    DEFAULT_CSS = """
    RunDiffScreen #diff-tables { height: 1fr; min-height: 8; padding: 0 1; }
    RunDiffScreen #diff-curves { height: 16; }
    """

    def __init__(self, hashes: list[str]) -> None:
        super().__init__()
        self.hashes = list(hashes)
        #: The records compared, as they were when the screen opened.
        self.records: list[dict[str, Any]] = []

    def compose_body(self) -> ComposeResult:
        with VerticalScroll(id="diff-tables"):
            yield Static(id="diff-text")
        yield CurvesPanel(id="diff-curves")

    def on_mount(self) -> None:
        self.ready = True
        self.records = [r for h in self.hashes if (r := self.gapp.book.get(h)) is not None]
        self.sub_title = " vs ".join(str(r["id"]) for r in self.records)
        self.query_one("#diff-text", Static).update(Group(*diff_tables(run_diff(self.records))))
        self.call_after_refresh(self._draw_curves)

    def _draw_curves(self) -> None:
        runs = {str(r["id"]): epoch_rows(run_events(r)) for r in self.records}
        self.query_one(CurvesPanel).draw(runs, curves_task(self.records))

    def action_back(self) -> None:
        self.dismiss()
