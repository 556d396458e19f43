"""RunDetailScreen: one run's curves (from its ``events.jsonl``), summary, spec, reproducibility record, probes, log,
and its tags and note, editable through the history."""

from __future__ import annotations

import json
import weakref
from collections.abc import Iterator
from typing import Any, ClassVar

from rich.console import Group, RenderableType
from rich.json import JSON
from rich.markup import escape
from rich.table import Table
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.widgets import Button, Input, Label, Log, Static, TabbedContent, TabPane, TextArea

from gaptui.columns import describe, record_family
from gaptui.probe_view import probe_tables, probes_heading, read_probes
from gaptui.record import record_metrics, record_task
from gaptui.tui.feed import RunFeed
from gaptui.tui.planning import IN_FLIGHT, RETRYABLE, format_duration
from gaptui.tui.screens.section import SectionScreen
from gaptui.tui.widgets.curves import CurvesPanel

#: Seconds between redraws of the curves while events arrive.
REDRAW_SECONDS = 0.5
#: Record fields of the summary; the run's axes (as its task family names them) come after ``task``.
SUMMARY_KEYS = (
    "id",
    "status",
    "task",
    "axes",
    "seed",
    "depends",
    "params",
    "duration",
    "attempts",
    "slot",
    "preset",
    "created",
    "started",
    "finished",
    "error",
    "run_dir",
)


def probes_view(record: dict[str, Any]) -> RenderableType:
    """The Probes tab: the run's probes (``probes.json`` in its folder) as tables, or how to get them."""
    report = read_probes(record.get("run_dir"))
    if report is None:
        return (
            "No probes in this run's folder yet (probes.json, written by a family's probe command, such as "
            f"`gaptui probe {record.get('id', 'ID')}`); press p to read it again."
        )
    return Group(Text(probes_heading(report)), *probe_tables(report))


class RunDetailScreen(SectionScreen):
    """Pushed over History (Enter) or from Runs (``o``); Escape goes back."""

    TITLE = "Run details"
    BINDINGS: ClassVar[list[Binding]] = [
        Binding("escape", "back", "Back"),
        Binding("e", "edit", "Edit tags & note"),
        Binding("ctrl+s", "save", "Save tags & note"),
        Binding("ctrl+r", "retry", "Retry run"),
        Binding("ctrl+k", "cancel_run", "Cancel run"),
        Binding("p", "refresh_probes", "Probes"),
    ]
    DEFAULT_CSS = """
    RunDetailScreen #detail-curves { height: 1fr; min-height: 8; }
    RunDetailScreen TabbedContent { height: 1fr; min-height: 8; }
    RunDetailScreen TabPane { padding: 0 1; }
    RunDetailScreen #edit Input { margin-bottom: 1; }
    RunDetailScreen #note { height: 1fr; min-height: 3; }
    RunDetailScreen #edit Button { margin-top: 1; }
    """

    _open: ClassVar[weakref.WeakSet[RunDetailScreen]] = weakref.WeakSet()

    def __init__(self, run_hash: str) -> None:
        super().__init__()
        self.run_hash = run_hash
        self.feed = RunFeed()
        self._dirty = True

    @classmethod
    def open_screens(cls, run_hash: str) -> Iterator[RunDetailScreen]:
        """Mounted detail screens showing ``run_hash`` (they receive its events and log)."""
        return (s for s in list(cls._open) if s.run_hash == run_hash and s.ready)

    @property
    def record(self) -> dict[str, Any]:
        """The app's copy of the record (empty if it vanished)."""
        return self.gapp.book.get(self.run_hash) or {}

    def compose_body(self) -> ComposeResult:
        read_only = bool(self.gapp.read_only)
        record = self.record
        yield CurvesPanel(id="detail-curves")
        with TabbedContent(id="detail-tabs"):
            with TabPane("Summary", id="tab-summary"), VerticalScroll():
                yield Static(id="summary")
            with TabPane("Tags & note", id="tab-edit"), Vertical(id="edit"):
                yield Label("tags (comma-separated)")
                yield Input(", ".join(record.get("tags") or []), id="tags", disabled=read_only)
                yield Label("note")
                yield TextArea(record.get("note") or "", id="note", disabled=read_only)
                yield Button("Save ^s", id="save", variant="primary", disabled=read_only)
            with TabPane("Spec", id="tab-spec"), VerticalScroll():
                yield Static(JSON(json.dumps(record.get("spec") or {}, sort_keys=True)), id="spec")
            with TabPane("Reproducibility", id="tab-repro"), VerticalScroll():
                yield Static(id="repro")
            with TabPane("Probes", id="tab-probes"), VerticalScroll():
                yield Static(id="probes")
            with TabPane("Log", id="tab-log"):
                yield Log(id="detail-log", max_lines=500)

    def on_mount(self) -> None:
        self.ready = True
        self._open.add(self)
        app = self.gapp
        record = self.record
        self.sub_title = f"{record.get('id', '')} {record_task(record)}: {describe(record)}"
        self.refresh_record()
        self.show_log(record.get("log_tail") or [])
        if record.get("run_dir"):
            app.follow([(self.run_hash, record["run_dir"])])
            if record.get("status") in IN_FLIGHT:
                app.follow_log(f"detail-{id(self)}", self.run_hash, record["run_dir"])
        self.set_interval(REDRAW_SECONDS, self._redraw)

    def on_unmount(self) -> None:
        self._open.discard(self)
        self.gapp.follow_log(f"detail-{id(self)}", None)

    def records_changed(self, hashes: set[str]) -> None:
        if self.run_hash in hashes and self.ready:
            self.refresh_record()

    # -------------------------------------------------------------------------------------- contents

    def refresh_record(self) -> None:
        """Redraw the summary and reproducibility tabs from the app's copy of the record."""
        record = self.record
        table = Table(show_header=False, box=None)
        table.add_column("field", style="bold", min_width=14)
        table.add_column("value")
        fam = record_family(record)
        for key in SUMMARY_KEYS:
            value = record.get(key)
            if key == "axes" and fam is not None:
                for axis in fam.axes:
                    table.add_row(axis.name, escape(axis.format((value or {}).get(axis.key))))
                continue
            if key == "depends" and value:
                value = ", ".join(h[:12] for h in value)
            if value in (None, "", []):
                continue
            if key == "duration":
                value = f"{format_duration(value)} ({value:.1f} s)"
            elif key == "params":
                value = f"{value:,}"
            table.add_row(key, escape(str(value)))
        declared = {m.key: m.name for m in fam.metrics} if fam is not None else {}
        for key, value in record_metrics(record).items():
            label = f"{declared[key]} ({key})" if key in declared else key
            table.add_row(escape(label), f"{value:.4f}" if isinstance(value, float) else escape(str(value)))
        if record.get("tags"):
            table.add_row("tags", escape(", ".join(record["tags"])))
        if record.get("note"):
            table.add_row("note", escape(record["note"]))
        self.query_one("#summary", Static).update(table)
        repro = record.get("repro") or {}
        self.query_one("#repro", Static).update(
            JSON(json.dumps(repro, sort_keys=True)) if repro else "no reproducibility record (the run has not finished)"
        )
        self.query_one("#probes", Static).update(probes_view(record))

    def action_refresh_probes(self) -> None:
        """Read the run's probes again (a probe command may have written them since the screen opened)."""
        self.query_one("#probes", Static).update(probes_view(self.record))
        self.query_one("#detail-tabs", TabbedContent).active = "tab-probes"

    def add_events(self, events: list[dict[str, Any]], reset: bool = False) -> None:
        """Events of this run; drawn at the next redraw."""
        self.feed.add(events, reset)
        self._dirty = True

    def show_log(self, lines: list[str]) -> None:
        """Replace the Log tab's lines with the run's log tail."""
        log = self.query_one("#detail-log", Log)
        log.clear()
        log.write_lines(lines)
        # After a clear the log is not "at the end" any more, so auto-scroll would not follow: scroll once laid out.
        log.call_after_refresh(log.scroll_end, animate=False, x_axis=False)

    def _redraw(self) -> None:
        if not self._dirty or not self.is_current:
            return
        self._dirty = False
        record = self.record
        runs = {f"{describe(record)} {record.get('id', '')}": self.feed.curve()}
        self.query_one(CurvesPanel).draw(runs, record_task(record))

    # -------------------------------------------------------------------------------------- actions

    def action_back(self) -> None:
        self.dismiss()

    def action_edit(self) -> None:
        self.query_one("#detail-tabs", TabbedContent).active = "tab-edit"
        self.query_one("#tags", Input).focus()

    @on(Button.Pressed, "#save")
    def action_save(self) -> None:
        tags = [t.strip() for t in self.query_one("#tags", Input).value.split(",") if t.strip()]
        note = self.query_one("#note", TextArea).text
        if self.gapp.edit_record(self.run_hash, tags=list(dict.fromkeys(tags)), note=note):
            self.notify("tags and note saved")

    def action_retry(self) -> None:
        if self.record.get("status") in RETRYABLE:
            self.gapp.retry_runs([self.run_hash])
        else:
            self.notify(f"only {', '.join(RETRYABLE)} runs can be retried", severity="warning")

    def action_cancel_run(self) -> None:
        if self.record.get("status") in IN_FLIGHT:
            self.gapp.cancel_runs([self.run_hash])
        else:
            self.notify("only queued or running runs can be cancelled", severity="warning")
