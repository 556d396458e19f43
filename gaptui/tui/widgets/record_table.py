"""RecordTable: a DataTable of run records keyed by spec hash, updated in place and sortable by any column."""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from operator import is_, itemgetter
from typing import Any

from rich.cells import cell_len
from rich.console import Console
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.message import Message
from textual.widgets import DataTable
from textual.widgets.data_table import CellDoesNotExist, RowDoesNotExist

from gaptui.columns import RecordColumn, record_columns
from gaptui.tui.planning import format_duration

Record = dict[str, Any]

STATUS_STYLES = {
    "done": "green",
    "running": "bold cyan",
    "queued": "yellow",
    "failed": "bold red",
    "cancelled": "magenta",
    "interrupted": "dark_orange",
    "blocked": "dark_orange",
}


@dataclass(frozen=True)
class Column:
    """A column: how a record shows in it and how it sorts (``None`` values sort last)."""

    key: str
    label: str
    render: Callable[[Record], str | Text]
    sort_value: Callable[[Record], Any]
    width: int | None = None
    justify: str = "left"
    #: A protocol column (epochs, pairs, batch...), which the History may hide.
    optional: bool = False


def _status(record: Record) -> Text:
    status = str(record.get("status", ""))
    return Text(status, style=STATUS_STYLES.get(status, ""))


def _right(text: str) -> Text:
    return Text(text, justify="right")


# Text, not str: DataTable parses a str cell as markup each time it draws it.
ID = Column("id", "run", lambda r: Text(r["id"], end=""), lambda r: r["id"], 12)
SEED = Column("seed", "seed", lambda r: _right(str(r.get("seed", ""))), lambda r: r.get("seed"), 4, "right")
STATUS = Column("status", "status", _status, lambda r: r.get("status"), 11)
#: The style of a marked row's run id.
MARKED = "reverse bold"


def _marked(cell: str | Text) -> Text:
    """``cell`` styled as marked, by a span (the cells of a row are compared by text and spans when updated)."""
    text = Text(str(cell), end="") if isinstance(cell, str) else cell.copy()
    text.stylize(MARKED)
    return text


def _column(col: RecordColumn) -> Column:
    if col.numeric:
        return Column(col.key, col.label, lambda r: _right(col.text(r)), col.value, None, "right", col.optional)
    return Column(col.key, col.label, lambda r: Text(col.text(r)), col.value, None, optional=col.optional)


def family_columns(task: str | None) -> tuple[Column, Column]:
    """The descriptive columns of ``task``'s records (None: any family) and its result column."""
    cols = record_columns(task)
    return tuple(_column(c) for c in cols if c.key not in ("seed", "result")), _column(cols[-1])  # type: ignore[return-value]


DURATION = Column(
    "duration",
    "duration",
    lambda r: _right(format_duration(r["duration"]) if r.get("duration") else ""),
    lambda r: r.get("duration"),
    9,
    "right",
)
TAGS = Column(
    "tags", "tags", lambda r: Text(", ".join(r.get("tags") or [])), lambda r: ",".join(r.get("tags") or []), None
)


def history_columns(task: str | None, protocol: bool = True) -> tuple[Column, ...]:
    """Columns of the history view for ``task``'s runs (None: runs of any family); without ``protocol``, none of
    the protocol columns (epochs, pairs, batch...)."""
    described, result = family_columns(task)
    described = tuple(c for c in described if protocol or not c.optional)
    return (ID, *described, SEED, STATUS, result, DURATION, TAGS)


#: The kinds of sort values, in ascending order: numbers, then text; missing values come last in either direction.
NUMBER, TEXT, MISSING = 0, 1, 2


def _sort_key(value: Any) -> tuple[int, Any]:
    """``(kind, comparable value)``: kinds are sorted apart, so mixed types are never compared."""
    if value is None or value == "":
        return (MISSING, 0)
    if isinstance(value, (int, float)):
        return (NUMBER, value)
    return (TEXT, str(value).lower())


_HASH, _RECORD, _KIND, _VALUE = itemgetter("hash"), itemgetter(0), itemgetter(1), itemgetter(2)
_BLANK = Style.null()


def one_line_cell(
    console: Console, cell: Text, width: int, pad: int, pre_style: Style, post_style: Style
) -> list[Segment] | None:
    """The segments DataTable draws for ``cell`` in a one-line row, ``width`` wide with ``pad`` spaces each side
    (what Rich makes of ``Styled(Padding(cell, (0, pad)), pre_style, post_style)``, ``no_wrap``), in a fifth of the
    time: no renderable wrappers, no line splitting. None for what it does not cover (several lines, tabs, centred
    or full justification, no room inside the padding); the caller then asks Rich. The console's options are taken
    to set no justification or overflow of their own (Textual's do not)."""
    inner = width - 2 * pad
    plain = cell.plain
    justify = cell.justify or "default"
    if inner < 1 or "\n" in plain or "\t" in plain or justify not in ("default", "left", "right"):
        return None
    overflow = cell.overflow or "fold"
    text = cell
    if justify == "right":  # as Rich's Lines.justify, then Text.wrap's truncate
        text = cell.copy()
        text.rstrip()
        text.truncate(inner, overflow=overflow)
        text.pad_left(inner - cell_len(text.plain))
    elif justify == "left":
        text = cell.copy()
        text.truncate(inner, overflow=overflow, pad=True)
    if cell_len(text.plain) > inner:
        text = text.copy() if text is cell else text
        text.truncate(inner, overflow=overflow)
    if text.spans:
        if not text.plain:
            return None
        segments = list(text.render(console))
    elif text.style:  # Text.render ignores the base style of a text without spans: Rich makes it a span first
        segments = [Segment(text.plain, console.get_style(text.style))] if text.plain else []
    else:
        segments = [Segment(text.plain)]
    line = Segment.adjust_line_length(segments, inner, style=_BLANK)
    if pad:
        line = [Segment(" " * pad, _BLANK), *line, Segment(" " * pad, _BLANK)]
    return list(Segment.apply_style(line, style=pre_style, post_style=post_style))


class RecordTable(DataTable):
    """Rows keyed by run hash. :meth:`upsert` changes only the cells that differ, so the cursor and scroll stay.

    Adding a row costs DataTable a measurement of each cell (tens of microseconds each), so a whole history
    (thousands of rows) is added progressively: a screenful at once, the rest in chunks between frames. A key
    press that refilters or re-sorts thus updates the screen at once and the rows below the fold follow, while
    keys keep being handled between chunks. After each chunk DataTable works out every row's offset and repaints
    the rows on screen (tens of ms with 20,000 rows), so chunks are a few hundred rows: with 50-row chunks, filling
    20,000 rows took a minute of CPU, and keys pressed meanwhile waited longer.
    """

    #: Rows added per later chunk (DataTable measures each new cell: about 0.1 ms a row), and the pause between
    #: chunks (seconds) that lets input and painting through.
    CHUNK_ROWS = 200
    CHUNK_PAUSE = 0.02
    #: Pause before the first later chunk: keys typed in a burst (a filter word) do not wait for chunks.
    FIRST_PAUSE = 0.3

    def __init__(self, columns: Sequence[Column], **kwargs: Any) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self.table_columns = {c.key: c for c in columns}
        self.sort_column: str | None = None
        self.sort_reverse = False
        self._records: dict[str, Record] = {}
        #: Cells of the rows added so far (what update_cell diffs against).
        self._cells: dict[str, tuple[str | Text, ...]] = {}
        #: Rendered cells by hash, reused while the record object is the same (the run book replaces, never
        #: mutates, a record that changes), so refiltering does not re-render thousands of rows.
        self._rendered: dict[str, tuple[Record, tuple[str | Text, ...]]] = {}
        #: Sort keys per column by hash, reused like the rendered cells: a key press that refilters or re-sorts
        #: 20,000 rows computes only the keys of records that changed (:meth:`warm_sort_values` fills them).
        self._sort_values: dict[Column, dict[str, tuple[Record, int, Any]]] = {}
        self._pending: deque[str] = deque()
        self._shown: set[str] = set()
        self._keep: str | None = None
        self._fill_generation = 0
        #: Rows of earlier :meth:`set_records` calls, freed after the frame that shows the new ones.
        self._dropped: list[Any] = []
        #: Hashes of the rows marked (:meth:`set_marked`), in the order they were marked; kept while filtered out.
        self.marked: dict[str, None] = {}

    def on_mount(self) -> None:
        for column in self.table_columns.values():
            self.add_column(column.label, key=column.key, width=column.width)

    def set_columns(self, columns: Sequence[Column]) -> bool:
        """Show these columns instead (another task family's); rows are re-rendered by the next set_records.

        Returns False (and changes nothing) when the columns are the same.
        """
        if [(c.key, c.label) for c in columns] == [(c.key, c.label) for c in self.table_columns.values()]:
            return False
        self.table_columns = {c.key: c for c in columns}
        if self.sort_column not in self.table_columns:
            self.sort_column, self.sort_reverse = None, False
        self._rendered.clear()
        self._sort_values = {}
        records = list(self._records.values())
        self.clear(columns=True)
        self._records, self._cells, self._pending, self._shown = {}, {}, deque(), set()
        self._fill_generation += 1
        for column in columns:
            self.add_column(column.label, key=column.key, width=column.width)
        self.set_records(records)
        return True

    def _render_cell(
        self,
        row_index: int,
        column_index: int,
        base_style: Style,
        width: int,
        cursor: bool = False,
        hover: bool = False,
    ) -> list[list[Segment]]:
        """DataTable's own, with its cache and styles, but a body cell of a one-line row holding one line of
        ``Text`` is drawn by :func:`one_line_cell` (Rich's wrappers cost about 0.1 ms a cell, most of a key's
        repaint with 20,000 runs); anything else goes to DataTable."""
        if row_index < self.fixed_rows or column_index < self.fixed_columns:  # header, labels, fixed cells
            return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)  # type: ignore[no-any-return]
        row_key = self._row_locations.get_key(row_index)
        column_key = self._column_locations.get_key(column_index)
        key = (
            row_key,
            column_key,
            base_style,
            cursor,
            hover,
            self._show_hover_cursor,
            self._update_count,
            self._pseudo_class_state,
        )
        lines = self._cell_render_cache.get(key)
        if lines is not None:
            return lines  # type: ignore[no-any-return]
        row = self.rows.get(row_key) if row_key is not None else None
        cell = self._data.get(row_key, {}).get(column_key) if row is not None else None
        line = None
        if row is not None and row.height == 1 and not row.auto_height and isinstance(cell, Text):
            component_style, post_style = self._get_styles_to_render_cell(
                False,
                False,
                False,
                hover,
                cursor,
                self.show_cursor,
                self._show_hover_cursor,
                self.cursor_foreground_priority == "css",
                self.cursor_background_priority == "css",
            )
            pre_style = base_style + Style.from_meta({"row": row_index, "column": column_index}) + component_style
            line = one_line_cell(self.app.console, cell, width, self.cell_padding, pre_style, post_style)
        if line is None:
            return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)  # type: ignore[no-any-return]
        self._cell_render_cache[key] = lines = [line]
        return lines

    # -------------------------------------------------------------------------------------- queries

    @property
    def cursor_hash(self) -> str | None:
        """The hash of the row under the cursor."""
        if not self.row_count:
            return None
        try:
            return self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value
        except CellDoesNotExist:
            return None

    @property
    def record_count(self) -> int:
        """Rows shown or still being added."""
        return len(self._records)

    def records(self) -> list[Record]:
        """The records shown (or still being added), in no particular order."""
        return list(self._records.values())

    @property
    def filling(self) -> bool:
        """True while rows are still being added progressively."""
        return bool(self._pending)

    def hashes(self) -> list[str]:
        """Row hashes in display order (rows still to be added last)."""
        return [row.key.value for row in self.ordered_rows if row.key.value is not None] + list(self._pending)

    # -------------------------------------------------------------------------------------- updates

    def _render(self, record: Record) -> tuple[str | Text, ...]:
        cached = self._rendered.get(record["hash"])
        if cached is not None and cached[0] is record:
            return cached[1]
        cells = tuple(column.render(record) for column in self.table_columns.values())
        if record["hash"] in self.marked:  # a marked row shows its run id in reverse video
            cells = tuple(
                _marked(cell) if key == ID.key else cell for key, cell in zip(self.table_columns, cells, strict=True)
            )
        self._rendered[record["hash"]] = (record, cells)
        return cells

    def set_marked(self, run_hash: str, marked: bool) -> None:
        """Mark the row of ``run_hash`` (its run id in reverse video) or unmark it; the row updates in place."""
        if marked:
            self.marked.setdefault(run_hash, None)
        else:
            self.marked.pop(run_hash, None)
        self._rendered.pop(run_hash, None)
        record = self._records.get(run_hash)
        if record is not None:
            self.upsert(record)

    def _keyed(self, column: Column, records: Sequence[Record]) -> list[tuple[Record, int, Any]]:
        """``(record, kind, value)`` sort keys under ``column`` for each of ``records``, from the cache where the
        record is the one the key was made from. (Looked up in C-level passes: with 20,000 records the per-record
        interpreter loop cost more than the sort itself.)"""
        keys = self._sort_values.setdefault(column, {})
        keyed: list[Any] = list(map(keys.get, map(_HASH, records)))
        if None not in keyed and all(map(is_, records, map(_RECORD, keyed))):
            return keyed
        for i, (record, cached) in enumerate(zip(records, keyed, strict=True)):
            if cached is None or cached[0] is not record:
                keyed[i] = keys[record["hash"]] = (record, *_sort_key(column.sort_value(record)))
        return keyed

    def _ordered(self, records: Sequence[Record]) -> list[Record]:
        """``records`` sorted by the current sort column and direction: numbers, then text (reversed: text, then
        numbers), missing values last either way; ties keep their order. Each kind is sorted on its plain values,
        which CPython compares without the generic path (20,000 rows in a few ms)."""
        assert self.sort_column is not None
        keyed = self._keyed(self.table_columns[self.sort_column], records)
        present = set(map(_KIND, keyed))
        if len(present) == 1 and MISSING not in present:  # one kind of value (a column usually is)
            keyed.sort(key=_VALUE, reverse=self.sort_reverse)
            return list(map(_RECORD, keyed))
        kinds: tuple[list[tuple[Record, int, Any]], ...] = ([], [], [])
        for key in keyed:
            kinds[key[1]].append(key)
        for kind in (kinds[NUMBER], kinds[TEXT]):
            kind.sort(key=_VALUE, reverse=self.sort_reverse)
        order = (TEXT, NUMBER, MISSING) if self.sort_reverse else (NUMBER, TEXT, MISSING)
        return [key[0] for kind in order for key in kinds[kind]]

    def warm_sort_values(self, records: Sequence[Record]) -> None:
        """Work out every column's sort key of ``records`` ahead of the first sort by it (safe from a thread
        worker: the caches are only added to, and an entry is used only for the very record it was made from)."""
        for column in list(self.table_columns.values()):
            self._keyed(column, records)

    def set_records(self, records: Iterable[Record]) -> None:
        """Show exactly ``records`` (sorted by the current sort column), keeping the cursor on its run."""
        keep = self._keep or self.cursor_hash
        records = list(records)
        if self.sort_column is not None:
            records = self._ordered(records)
        # DataTable.clear works out the layout of every old row only to drop it (60 ms for 20,000 rows), then
        # frees them (8 ms) before the new screenful can be drawn: the table is handed empty containers, so it has
        # nothing to lay out, and the old rows are freed after the next frame.
        self._dropped.append((self.rows, self._data, self._row_locations))
        self.rows, self._data = {}, {}
        self.clear()
        self.call_after_refresh(self._dropped.clear)
        self._records = {r["hash"]: r for r in records}
        self._cells = {}
        self._pending = deque(self._records)
        self._shown = set()
        self._keep = keep
        self._fill_generation += 1
        # A screenful (before the table is laid out, the terminal's height stands in for its own).
        self._fill(self._fill_generation, (self.size.height or self.app.size.height) + 5, self.FIRST_PAUSE)

    def _fill(self, generation: int, count: int, pause: float = CHUNK_PAUSE) -> None:
        if generation != self._fill_generation:
            return  # a newer set_records started over
        for _ in range(min(count, len(self._pending))):
            run_hash = self._pending.popleft()
            cells = self._cells[run_hash] = self._render(self._records[run_hash])
            self.add_row(*cells, key=run_hash)
            self._shown.add(run_hash)
        if self._keep in self._shown:
            self.move_to(self._keep)
            self._keep = None
        if self._pending:
            self.set_timer(pause, partial(self._fill, generation, self.CHUNK_ROWS))
        else:
            self._keep = None
            self.post_message(self.Filled(self))

    class Filled(Message):
        """Every row of the last :meth:`set_records` has been added."""

        def __init__(self, table: RecordTable) -> None:
            super().__init__()
            self.table = table

    def upsert(self, record: Record) -> bool:
        """Update the row of ``record`` in place (only changed cells), or append it. True when appended."""
        run_hash = record["hash"]
        known = run_hash in self._records
        self._records[run_hash] = record
        if run_hash not in self._shown:
            if not known:
                self._pending.append(run_hash)
                if len(self._pending) == 1:
                    self._fill(self._fill_generation, self.CHUNK_ROWS)
            return not known
        cells = self._render(record)
        old = self._cells[run_hash]
        self._cells[run_hash] = cells
        for column_key, before, after in zip(self.table_columns, old, cells, strict=True):
            if before != after:
                self.update_cell(run_hash, column_key, after)
        return False

    def remove(self, run_hash: str) -> None:
        """Drop a run's row (shown or still to be added)."""
        if self._records.pop(run_hash, None) is None:
            return
        self._cells.pop(run_hash, None)
        self._rendered.pop(run_hash, None)
        for values in self._sort_values.values():
            values.pop(run_hash, None)
        if run_hash in self._shown:
            self._shown.discard(run_hash)
            with contextlib.suppress(RowDoesNotExist):
                self.remove_row(run_hash)
        else:
            self._pending.remove(run_hash)

    # -------------------------------------------------------------------------------------- order

    def sort_by(self, column_key: str, reverse: bool | None = None) -> None:
        """Sort rows by a column (toggling the direction when it is already the sort column); keeps the cursor."""
        if reverse is None:
            reverse = not self.sort_reverse if column_key == self.sort_column else False
        self.sort_column, self.sort_reverse = column_key, reverse
        # Ordered here (cached keys) and added again a screenful first: DataTable.sort would re-key every row of
        # the table at once (about 150 ms for 20,000 rows), this costs what a filter keystroke costs.
        self.set_records(self.records())

    def resort(self) -> None:
        """Apply the current sort again (after rows were appended); keeps the cursor. Rows are ordered by their
        records' cached sort keys and added again a screenful first, as :meth:`sort_by` does: never by the cells
        (Rich ``Text``, neither hashable nor ordered), which ``DataTable.sort`` would hand its key."""
        if self.sort_column is not None and self._records:
            self.set_records(self.records())

    def move_to(self, run_hash: str | None) -> None:
        """Put the cursor on the row of ``run_hash``, scrolling it into view (as soon as the row is added)."""
        if run_hash is None or run_hash not in self._records:
            return
        if run_hash not in self._shown:
            self._keep = run_hash
            return
        with contextlib.suppress(RowDoesNotExist):
            self.move_cursor(row=self.get_row_index(run_hash), scroll=True)
