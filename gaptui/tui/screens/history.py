"""HistoryScreen: every run of the workspace, filterable and sortable; Enter opens a run's details."""

from __future__ import annotations

from typing import ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.widgets import DataTable, Input, Select, Static

from gaptui.record import Record, RecordFilter, record_task, split_words
from gaptui.tui.screens.section import SectionScreen
from gaptui.tui.widgets.record_table import RecordTable, history_columns

#: The task picker's value for "runs of every family".
ALL_TASKS = "*"


def haystack(record: Record) -> str:
    """The text the filter searches: task, axes (dataset, model...), status, tags, plus id, preset and seed."""
    from gaptui.columns import describe

    return " ".join(
        str(v)
        for v in (
            record_task(record),
            describe(record),
            record.get("status"),
            *(record.get("tags") or []),
            record.get("id"),
            record.get("preset"),
            f"seed={record.get('seed')}",
        )
        if v
    ).lower()


def matches(record: Record, words: list[str]) -> bool:
    """Every word of the filter holds: ``axis=value`` words (any axis a family declares: ``noise=0.12``,
    ``pe=rwpe``) as ``gaptui history --filter`` does, other words found in the record's searchable text
    (case-insensitive)."""
    plain, axes = split_words(words)
    if axes and not RecordFilter(axes=axes).matches(record):
        return False
    text = haystack(record)
    return all(word in text for word in plain)


class HistoryTable(RecordTable):
    """The history's table: Enter (or a click on the selected row) opens the run's details."""

    BINDINGS: ClassVar[list[Binding]] = [Binding("enter", "select_cursor", "Details")]


class HistoryScreen(SectionScreen):
    """Type to filter (all words must match); ``s`` sorts by the next column, ``S`` reverses, or click a header;
    space marks runs and ``D`` compares the marked ones."""

    TITLE = "History"
    BINDINGS: ClassVar[list[Binding]] = [
        Binding("slash", "focus_filter", "Filter"),
        Binding("s", "sort_next", "Sort by next column"),
        Binding("S", "sort_reverse", "Reverse sort"),
        Binding("p", "toggle_protocol", "Protocol columns"),
        Binding("escape", "clear_filter", "Clear filter"),
        Binding("space", "toggle_mark", "Mark for diff"),
        Binding("D", "diff", "Diff marked"),
    ]
    DEFAULT_CSS = """
    HistoryScreen #history-bar { height: 1; padding: 0 1; }
    HistoryScreen #history-filter { width: 1fr; }
    HistoryScreen #history-task { width: 22; margin-left: 1; }
    HistoryScreen #history-info { width: auto; padding-left: 2; color: $text-muted; }
    HistoryScreen #history-table { height: 1fr; }
    """

    def __init__(self) -> None:
        super().__init__()
        self.words: list[str] = []
        # The filter's words split once: plain words searched as text, axis=value words matched on the axis.
        self._plain: list[str] = []
        self._axes = RecordFilter()
        #: The family shown (None: every family; the columns are then those of the one present, if only one).
        self.task_name: str | None = None
        #: Whether the protocol columns (epochs, pairs, batch...) are shown (``p`` toggles them).
        self.show_protocol = True
        # Searchable text by hash, reused while the record object is the same (records are replaced on change).
        self._haystacks: dict[str, tuple[Record, str]] = {}

    def compose_body(self) -> ComposeResult:
        with Horizontal(id="history-bar"):
            yield Input(
                placeholder="filter (/): an axis value, axis=value, status, tag ... all words must match",
                id="history-filter",
                compact=True,
            )
            yield Select(
                [("all tasks", ALL_TASKS)], value=ALL_TASKS, id="history-task", compact=True, allow_blank=False
            )
            yield Static("", id="history-info", markup=False)
        yield HistoryTable(history_columns(None), id="history-table")  # a family's own once its runs are shown

    @property
    def table(self) -> RecordTable:
        """The history's table."""
        return self.query_one("#history-table", RecordTable)

    def on_mount(self) -> None:
        self.ready = True
        self.table.sort_column, self.table.sort_reverse = "id", False
        self._rebuild()
        self.table.focus()
        # After the first frame: the thread would otherwise hold the interpreter while the screen is drawn.
        self.call_after_refresh(self._start_warm_up)

    # -------------------------------------------------------------------------------------- contents

    def _matches(self, record: Record) -> bool:
        return bool(self._visible([record]))

    def _haystack(self, record: Record) -> str:
        cached = self._haystacks.get(record["hash"])
        if cached is None or cached[0] is not record:
            cached = self._haystacks[record["hash"]] = (record, haystack(record))
        return cached[1]

    def _visible(self, within: list[Record] | None = None) -> list[Record]:
        """The records (of the book, or ``within``) the family picker and the filter let through; one pass per
        condition (a filter keystroke runs this over 20,000 records)."""
        records = list(self.gapp.book if within is None else within)
        if self.task_name is not None:
            records = [r for r in records if record_task(r) == self.task_name]
        if self._axes:
            records = [r for r in records if self._axes.matches(r)]
        # No words to find: the searchable text is not needed (20,000 of them at start-up).
        for word in self._plain:
            records = [r for r in records if word in self._haystack(r)]
        return records

    def _rebuild(self, within: list[Record] | None = None) -> None:
        """Show the records that match (among ``within``, the rows shown, when the filter only narrowed)."""
        self._sync_tasks()
        self.table.set_records(self._visible(within))
        self._info()

    def _start_warm_up(self) -> None:
        table = self.table
        self.gapp.run_task(lambda: self._warm_up(table), name="history search text and sort values", group="history")

    def _warm_up(self, table: RecordTable) -> None:
        """Work out every record's searchable text and sort values ahead of the first filter or sort key (a
        thread worker: with 20,000 records each takes a few hundred ms); a record changed meanwhile is worked
        out again when it is matched or sorted."""
        records = list(self.gapp.book)
        for record in records:
            if record["hash"] not in self._haystacks:
                self._haystacks[record["hash"]] = (record, haystack(record))
        table.warm_sort_values(records)

    def _sync_tasks(self) -> None:
        """Offer the families present in the history; columns follow the family shown (generic ones for runs of
        several families, or none yet)."""
        tasks = self.gapp.book.tasks()
        picker = self.query_one("#history-task", Select)
        options = [("all tasks", ALL_TASKS), *((t, t) for t in tasks)]
        with self.prevent(Select.Changed):
            picker.set_options(options)
            picker.value = self.task_name if self.task_name in tasks else ALL_TASKS
        shown = self.task_name or (tasks[0] if len(tasks) == 1 else None)
        self.table.set_columns(history_columns(shown, self.show_protocol))

    def action_toggle_protocol(self) -> None:
        """Show or hide the protocol columns (epochs, pairs, batch...)."""
        self.show_protocol = not self.show_protocol
        self._rebuild()
        self.notify(f"protocol columns {'shown' if self.show_protocol else 'hidden'}", timeout=2)

    @on(Select.Changed, "#history-task")
    def _task_chosen(self, event: Select.Changed) -> None:
        task = None if event.value in (ALL_TASKS, Select.NULL) else str(event.value)
        if task != self.task_name:
            self.task_name = task
            self._rebuild()

    def _info(self) -> None:
        table = self.table
        order = ""
        if table.sort_column:
            label = table.table_columns[table.sort_column].label
            order = f" · sorted by {label} {'↓' if table.sort_reverse else '↑'}"
        marked = f" · {len(table.marked)} marked (D: diff)" if table.marked else ""
        self.query_one("#history-info", Static).update(
            f"{table.record_count} of {len(self.gapp.book)} runs{order}{marked}"
        )

    def records_changed(self, hashes: set[str]) -> None:
        if not self.ready:
            return
        table = self.table
        appended = False
        for run_hash in hashes:
            record = self.gapp.book.get(run_hash)
            if record is not None and self._matches(record):
                appended |= table.upsert(record)
            else:
                table.remove(run_hash)
        if appended:
            table.resort()
        self._info()

    def reveal(self, run_hash: str) -> None:
        """Put the cursor on a run, clearing the filter if it hides the run."""
        record = self.gapp.book.get(run_hash)
        if record is None:
            return
        if not self._matches(record):
            self.query_one("#history-filter", Input).value = ""
            self.words, self._plain, self._axes = [], [], RecordFilter()
            self._rebuild()
        self.table.move_to(run_hash)

    # -------------------------------------------------------------------------------------- filter and sort

    @on(Input.Changed, "#history-filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        words = event.value.lower().split()
        if words != self.words:
            self.words = words
            plain, axes = split_words(words)
            old_plain, old_axes = self._plain, self._axes
            self._plain, self._axes = plain, RecordFilter(axes=axes)
            # Typing on (each old word is part of a new one, the axes the same): only the rows shown can match.
            narrowed = self._axes == old_axes and all(any(o in p for p in plain) for o in old_plain)
            self._rebuild(self.table.records() if narrowed else None)

    @on(Input.Submitted, "#history-filter")
    def _filter_done(self) -> None:
        self.table.focus()

    def action_focus_filter(self) -> None:
        self.query_one("#history-filter", Input).focus()

    def action_clear_filter(self) -> None:
        box = self.query_one("#history-filter", Input)
        if box.value:
            box.value = ""
        self.table.focus()

    def action_sort_next(self) -> None:
        keys = list(self.table.table_columns)
        current = self.table.sort_column
        following = keys[(keys.index(current) + 1) % len(keys)] if current in keys else keys[0]
        self.table.sort_by(following, reverse=False)
        self._info()

    def action_sort_reverse(self) -> None:
        self.table.sort_by(self.table.sort_column or "id", reverse=not self.table.sort_reverse)
        self._info()

    @on(DataTable.HeaderSelected, "#history-table")
    def _header_clicked(self, event: DataTable.HeaderSelected) -> None:
        self.table.sort_by(str(event.column_key.value))
        self._info()

    # -------------------------------------------------------------------------------------- diff

    def action_toggle_mark(self) -> None:
        """Mark the run under the cursor for a diff, or unmark it; the cursor moves on to the next row."""
        table = self.table
        run_hash = table.cursor_hash
        if run_hash is None:
            return
        table.set_marked(run_hash, run_hash not in table.marked)
        table.action_cursor_down()
        self._info()

    def action_diff(self) -> None:
        """Open the marked runs side by side (:class:`~gaptui.tui.screens.run_diff.RunDiffScreen`)."""
        from gaptui.tui.screens.run_diff import RunDiffScreen

        marked = [h for h in self.table.marked if self.gapp.book.get(h) is not None]
        if len(marked) < 2:
            self.gapp.notify(
                f"mark two or more runs with space to compare them ({len(marked)} marked)", severity="warning"
            )
            return
        self.app.push_screen(RunDiffScreen(marked))

    # -------------------------------------------------------------------------------------- details

    @on(DataTable.RowSelected, "#history-table")
    def _row_selected(self, event: DataTable.RowSelected) -> None:
        if event.row_key.value is not None:
            self._open(event.row_key.value)

    def _open(self, run_hash: str) -> None:
        from gaptui.tui.screens.run_detail import RunDetailScreen

        self.app.push_screen(RunDetailScreen(run_hash))
