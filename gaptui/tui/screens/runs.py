"""RunsScreen: the runs of this session (and any queued, running or interrupted run), live curves and log tail.

The screen owns the event lists (:class:`~gaptui.tui.feed.RunFeed` per run) that the manager streams in; a timer
redraws curves and live columns about twice a second from them, never once per event.
"""

from __future__ import annotations

from typing import Any, ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Log, Static

from gaptui.columns import describe, record_family, result_metric, result_value
from gaptui.record import record_metrics, record_task
from gaptui.tui.feed import RunFeed
from gaptui.tui.messages import SchedulerState
from gaptui.tui.planning import IN_FLIGHT, RETRYABLE
from gaptui.tui.screens.section import SectionScreen
from gaptui.tui.widgets.curves import CurvesPanel
from gaptui.tui.widgets.record_table import ID, SEED, STATUS, Column, RecordTable, family_columns

#: Seconds between redraws of curves and live columns.
REDRAW_SECONDS = 0.5
#: Statuses that put a run on this screen even when it was not started in this session.
SHOWN_STATUSES = (*IN_FLIGHT, "interrupted")


def _number(value: Any, fmt: str) -> Text:
    return Text("" if not isinstance(value, (int, float)) else format(value, fmt), justify="right")


MARK = Column(
    "mark", " ", lambda r: Text("●" if r.get("_marked") else " ", style="bold"), lambda r: r.get("_marked"), 1
)
EPOCH = Column("epoch", "epoch", lambda r: Text(r.get("_epoch", ""), justify="right"), lambda r: r.get("_epoch"), 9)
LOSS = Column("loss", "loss", lambda r: _number(r.get("_loss"), ".3f"), lambda r: r.get("_loss"), 7)
SLOT = Column("slot", "slot", lambda r: Text(str(r.get("slot") or "")), lambda r: r.get("slot"), 9)


def runs_columns(task: str | None) -> tuple[Column, ...]:
    """Columns for runs of ``task`` (None: of several families): its axes, and its result metric live."""
    described, result = family_columns(task)
    live = Column("live", result.label, lambda r: _number(r.get("_live"), ".3f"), lambda r: r.get("_live"), 9)
    return (MARK, ID, *described, SEED, STATUS, EPOCH, LOSS, live, SLOT)


class RunsScreen(SectionScreen):
    """Mark runs with Space to overlay their curves (without marks, the run under the cursor is plotted)."""

    TITLE = "Runs"
    BINDINGS: ClassVar[list[Binding]] = [
        Binding("space", "mark", "Mark"),
        Binding("c", "cancel_runs", "Cancel"),
        Binding("r", "retry_runs", "Retry"),
        Binding("o", "open_history", "Open in history"),
        Binding("u", "unmark", "Unmark all"),
        Binding("p", "pause_queue", "Pause/resume queue"),
        Binding("d", "drain_slot", "Drain slot"),
    ]
    DEFAULT_CSS = """
    RunsScreen #runs-state { height: 1; padding: 0 1; color: $text-muted; }
    RunsScreen #runs-studies { height: auto; max-height: 8; padding: 0 1; }
    RunsScreen #runs-table { height: 2fr; min-height: 5; }
    RunsScreen #runs-curves { height: 3fr; min-height: 8; }
    RunsScreen #runs-log { height: 1fr; min-height: 3; border-top: solid $primary; }
    RunsScreen.-wide #runs-log { height: 12; }
    """

    def __init__(self) -> None:
        super().__init__()
        #: Events of every run this session has seen, by hash (the data the curves are drawn from).
        self.feeds: dict[str, RunFeed] = {}
        self.marked: set[str] = set()
        self.shown: set[str] = set()
        self.log_hash: str | None = None
        self._requested: set[str] = set()
        self._dirty_rows: set[str] = set()
        self._curves_dirty = True
        self._plotted: tuple[str, ...] = ()
        self._studies_dirty = True

    def compose_body(self) -> ComposeResult:
        yield Static("no run queued or running", id="runs-state", markup=False)
        yield Static("", id="runs-studies", markup=False)
        yield RecordTable(runs_columns(None), id="runs-table")  # a family's own once its runs are shown
        yield CurvesPanel(id="runs-curves")
        yield Log(id="runs-log", max_lines=500)

    @property
    def table(self) -> RecordTable:
        """The runs table."""
        return self.query_one("#runs-table", RecordTable)

    def on_mount(self) -> None:
        self.ready = True
        book = self.gapp.book
        self.shown |= {r["hash"] for r in book if r["status"] in SHOWN_STATUSES or r["hash"] in self.gapp.session}
        self._sync_columns()
        self.table.set_records(self._row(h) for h in sorted(self.shown, key=lambda h: book.records[h]["created"]))
        self.set_interval(REDRAW_SECONDS, self._redraw)
        self.scheduler_changed(self.gapp.state)
        self._follow_foreign(self.shown)
        self._selection_changed()

    def on_screen_resume(self) -> None:
        self._curves_dirty = True

    # -------------------------------------------------------------------------------------- data in

    def records_changed(self, hashes: set[str]) -> None:
        book = self.gapp.book
        for run_hash in hashes:
            record = book.get(run_hash)
            if record is None:
                self.shown.discard(run_hash)
                self._dirty_rows.discard(run_hash)
                if self.ready:
                    self.table.remove(run_hash)
                continue
            if record["status"] in SHOWN_STATUSES or run_hash in self.gapp.session:
                self.shown.add(run_hash)
            if run_hash in self.shown:
                self._dirty_rows.add(run_hash)
            if record.get("tune"):
                self._studies_dirty = True
        if self.ready:
            self._follow_foreign(hashes)
            self._sync_columns()
            self._update_rows()

    def _sync_columns(self) -> None:
        """The columns of the family of the runs shown (generic ones when they are of several families, or none)."""
        book = self.gapp.book.records
        tasks = {record_task(book[h]) for h in self.shown if h in book}
        self.table.set_columns(runs_columns(next(iter(tasks)) if len(tasks) == 1 else None))

    def _follow_foreign(self, hashes: set[str]) -> None:
        """Read-only: runs of the other manager are not streamed to us, so tail the running ones we show."""
        if not self.gapp.read_only:
            return
        book = self.gapp.book.records
        new = [h for h in hashes if h in self.shown and h in book and book[h]["status"] == "running"]
        new = [h for h in new if h not in self._requested]
        self._requested.update(new)
        self.gapp.follow((h, book[h]["run_dir"]) for h in new)

    def add_events(self, run_hash: str, events: list[dict[str, Any]], reset: bool = False) -> None:
        """Events of a run (from the scheduler's stream or a file read); drawn at the next redraw."""
        self.feeds.setdefault(run_hash, RunFeed()).add(events, reset)
        if run_hash in self.shown:
            self._dirty_rows.add(run_hash)
        if run_hash in self._plotted:
            self._curves_dirty = True

    def show_log(self, run_hash: str, lines: list[str]) -> None:
        """The log tail of the run under the cursor (other runs' tails are ignored)."""
        if run_hash != self.log_hash or not self.ready:
            return
        log = self.query_one("#runs-log", Log)
        log.clear()
        log.write_lines(lines)
        # After a clear the log is not "at the end" any more, so auto-scroll would not follow: scroll once laid out.
        log.call_after_refresh(log.scroll_end, animate=False, x_axis=False)

    def scheduler_changed(self, state: SchedulerState) -> None:
        """Update the state line (running, queued, slots, dataset builds)."""
        if not self.ready:
            return
        parts = [f"{len(state.running)} running", f"{len(state.queued)} queued"]
        if state.eta:
            parts.append(state.eta)
        if state.slots:
            parts.append(f"slots {', '.join(state.slots)}")
        if state.building:
            parts.append(state.building)
        if state.control:
            parts.append(state.control)
        if self.gapp.read_only:
            parts = ["read-only: following the runs of another manager"]
        self.query_one("#runs-state", Static).update(" · ".join(parts) + " — Space marks runs to overlay curves")

    # -------------------------------------------------------------------------------------- drawing

    def _row(self, run_hash: str) -> dict[str, Any]:
        record = self.gapp.book.records[run_hash]
        feed = self.feeds.get(run_hash)
        latest = feed.latest_epoch() if feed else None
        metrics = record_metrics(record)
        fam = record_family(record)
        if record["status"] == "done":
            live = result_value(record)
        else:
            key = result_metric(fam).key if fam else ""
            live = (latest or {}).get(key, (latest or {}).get("val_acc"))
        return {
            **record,
            "_marked": run_hash in self.marked,
            "_epoch": feed.progress() if feed else "",
            "_loss": (latest or {}).get("train_loss", metrics.get("train_loss")),
            "_live": live,
        }

    def _update_rows(self) -> None:
        table = self.table
        for run_hash in sorted(self._dirty_rows, key=lambda h: self.gapp.book.records[h]["created"]):
            table.upsert(self._row(run_hash))
        self._dirty_rows.clear()

    def _draw_studies(self) -> None:
        """One line per row of each `gaptui tune` study in the history: trials ended of those asked for, the best
        value so far and its curve over the trials."""
        from gaptui.tune.results import sparkline, study_rows

        self._studies_dirty = False
        lines = []
        for row in study_rows(self.gapp.book):
            total = "" if row.total is None else f"/{row.total}"
            running = f", {row.running} running" if row.running else ""
            best = f" · best {row.metric} {row.best[-1]:.4f} {sparkline(row.best)}" if row.best else ""
            lines.append(f"study {row.study} · {row.row}: {row.ended}{total} trials{running}{best}")
        panel = self.query_one("#runs-studies", Static)
        panel.display = bool(lines)
        panel.update("\n".join(lines))

    def _redraw(self) -> None:
        if self._studies_dirty:
            self._draw_studies()
        if self._dirty_rows:
            self._update_rows()
        if self._curves_dirty and self.is_current:
            self._curves_dirty = False
            book = self.gapp.book.records
            runs, tasks = {}, []
            for run_hash in self._plotted:
                record = book.get(run_hash)
                if record is not None:
                    label = f"{describe(record)} s{record['seed']} {record['id'][:6]}"
                    runs[label] = self.feeds.get(run_hash, RunFeed()).curve()
                    tasks.append(record_task(record))
            self.query_one(CurvesPanel).draw(runs, tasks[0] if tasks else None)  # the first run's family

    # -------------------------------------------------------------------------------------- selection

    def targets(self) -> list[str]:
        """The marked runs, or the run under the cursor."""
        if self.marked:
            return [h for h in self.table.hashes() if h in self.marked]
        cursor = self.table.cursor_hash
        return [cursor] if cursor else []

    @on(DataTable.RowHighlighted, "#runs-table")
    def _cursor_moved(self) -> None:
        self._selection_changed()

    def _selection_changed(self) -> None:
        plotted = tuple(self.targets())
        if plotted != self._plotted:
            self._plotted = plotted
            self._curves_dirty = True
        book = self.gapp.book.records
        missing = [h for h in plotted if h not in self._requested and h in book]
        self._requested.update(missing)
        self.gapp.follow((h, book[h]["run_dir"]) for h in missing)
        cursor = self.table.cursor_hash
        if cursor != self.log_hash:
            self.log_hash = cursor
            self.query_one("#runs-log", Log).clear()
            record = book.get(cursor) if cursor else None
            self.gapp.follow_log("runs", cursor, record["run_dir"] if record else None)

    def action_mark(self) -> None:
        cursor = self.table.cursor_hash
        if cursor is None:
            return
        self.marked ^= {cursor}
        self.table.upsert(self._row(cursor))
        self._selection_changed()

    def action_unmark(self) -> None:
        marked, self.marked = self.marked, set()
        for run_hash in marked:
            self.table.upsert(self._row(run_hash))
        self._selection_changed()

    # -------------------------------------------------------------------------------------- actions

    def _with_status(self, statuses: tuple[str, ...], verb: str) -> list[str]:
        book = self.gapp.book.records
        targets = self.targets()
        chosen = [h for h in targets if book[h]["status"] in statuses]
        if not chosen:
            self.notify(f"nothing to {verb}: only {', '.join(statuses)} runs can be", severity="warning")
        return chosen

    def action_pause_queue(self) -> None:
        """Start no more runs (running ones go on), or start them again."""
        self.gapp.steer("resume" if self.gapp.state.paused else "pause")

    def action_drain_slot(self) -> None:
        """The slot of the run under the cursor finishes its run and takes no other; on a run of a draining slot:
        the slot takes runs again."""
        cursor = self.table.cursor_hash
        record = self.gapp.book.get(cursor) if cursor else None
        slot = (record or {}).get("slot")
        if record and slot in self.gapp.state.draining:
            self.gapp.steer("resume", [slot])
        elif record and record["status"] == "running" and slot in self.gapp.state.slots:
            self.gapp.steer("drain", [slot])
        else:
            self.notify("put the cursor on a run running on a slot of this app to drain that slot", severity="warning")

    def action_cancel_runs(self) -> None:
        self.gapp.cancel_runs(self._with_status(IN_FLIGHT, "cancel"))

    def action_retry_runs(self) -> None:
        self.gapp.retry_runs(self._with_status(RETRYABLE, "retry"))

    async def action_open_history(self) -> None:
        cursor = self.table.cursor_hash
        if cursor is not None:
            await self.gapp.open_in_history(cursor)
