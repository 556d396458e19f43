"""RecordTable's order: cached sort keys, numbers before text, missing values last in either direction."""

from __future__ import annotations

import pytest

from gaptui.tui.widgets.record_table import Column, RecordTable

VALUE = Column("value", "value", lambda r: str(r.get("value", "")), lambda r: r.get("value"))


def table(reverse: bool = False) -> RecordTable:
    out = RecordTable([VALUE])
    out.sort_column, out.sort_reverse = "value", reverse
    return out


def records(*values: object) -> list[dict]:
    return [{"hash": f"h{i}", "id": f"r{i}", "value": v} for i, v in enumerate(values)]


def order(t: RecordTable, rows: list[dict]) -> list[object]:
    return [r["value"] for r in t._ordered(rows)]


def test_numbers_then_text_case_insensitive_missing_last_ties_in_order() -> None:
    rows = records(3, "b", None, 1.5, "A", "", 3, "a")
    assert order(table(), rows) == [1.5, 3, 3, "A", "a", "b", None, ""]
    assert order(table(reverse=True), rows) == ["b", "A", "a", 3, 3, 1.5, None, ""]
    # one kind only (the usual column) takes the plain sort; same answers
    assert order(table(), records(2, 10, 1)) == [1, 2, 10]
    assert order(table(reverse=True), records("x", "Y", "z")) == ["z", "Y", "x"]


def test_a_replaced_record_is_keyed_again_a_kept_one_is_not() -> None:
    t = table()
    rows = records(2, 1)
    assert order(t, rows) == [1, 2]
    calls = []
    t.table_columns["value"] = column = Column(
        "value", "value", VALUE.render, lambda r: calls.append(r["hash"]) or r.get("value")
    )
    t._sort_values[column] = t._sort_values.pop(VALUE)
    changed = {**rows[0], "value": 0}  # the run book replaces a changed record, never mutates it
    assert order(t, [changed, rows[1]]) == [0, 1]
    assert calls == ["h0"]


@pytest.mark.asyncio
async def test_a_resort_shows_the_new_order_and_frees_the_old_rows_after_the_frame() -> None:
    from textual.app import App

    class One(App):
        def compose(self):
            yield RecordTable([VALUE])

    app = One()
    async with app.run_test(size=(60, 20)) as pilot:
        t = app.query_one(RecordTable)
        t.set_records(records(*range(RecordTable.CHUNK_ROWS * 2 + 7)))
        while t.filling:
            await pilot.pause(0.05)
        assert t.row_count == t.record_count == RecordTable.CHUNK_ROWS * 2 + 7
        t.sort_by("value", reverse=True)
        assert t._dropped and t.row_count < t.record_count  # a screenful first, the old rows kept until drawn
        while t.filling:
            await pilot.pause(0.05)
        await pilot.pause()
        assert t._dropped == []
        shown = [t.get_row_at(i)[0] for i in range(t.row_count)]
        assert shown == [str(v) for v in reversed(range(RecordTable.CHUNK_ROWS * 2 + 7))]
        assert t.hashes()[0] == f"h{RecordTable.CHUNK_ROWS * 2 + 6}"


def test_a_one_line_cell_is_drawn_as_rich_draws_it_through_datatables_wrappers() -> None:
    """The fast cell path gives the very segments of DataTable's ``Styled(Padding(cell))`` (no_wrap, one line) for
    every kind of cell the tables hold, at every width, under every style; what it does not cover it declines."""
    from rich.console import Console
    from rich.padding import Padding
    from rich.style import Style
    from rich.text import Text
    from textual.renderables.styled import Styled

    from gaptui.tui.widgets.record_table import one_line_cell

    console = Console(width=120)
    cells = [
        Text("er[degree=8,n=100]", justify="right"),
        Text("done", style="green"),
        Text("a3f9c2d1e0b7", end=""),
        Text(""),
        Text("", style="bold"),
        Text("0.8123", justify="right"),
        Text("a long text that must be cropped to the column"),
        Text("ab  ", justify="right"),
        Text("abc", justify="left", style="red"),
        Text.assemble(("ab", "red"), "cd", style="italic"),
        Text.assemble(("数据", "red"), "cdefgh", style="italic", justify="right"),
        Text("数据ab"),
    ]
    pre = Style(bgcolor="grey11") + Style.from_meta({"row": 3, "column": 2})
    for cell in cells:
        for post in (Style.null(), Style(color="red"), Style(bgcolor="blue")):
            for width in (3, 4, 5, 7, 14, 50):
                options = console.options.update_dimensions(width, 1).update(no_wrap=True)
                rich = console.render_lines(Styled(Padding(cell, (0, 1)), pre_style=pre, post_style=post), options)
                assert [one_line_cell(console, cell, width, 1, pre, post)] == rich, (cell, width, post)
    for declined in (Text("two\nlines"), Text("a\tb"), Text("mid", justify="center")):
        assert one_line_cell(console, declined, 10, 1, pre, Style.null()) is None
    assert one_line_cell(console, Text("x"), 2, 1, pre, Style.null()) is None  # no room inside the padding
