"""RankingGrid: one ranking table (alignment: models x noise levels) as a DataTable, marked like ``render_rich``."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable

from gaptui.analysis import EMPTY, RICH_STYLES, RankingTable


class RankingGrid(DataTable):
    """Rows and columns as the task family lays them out (baselines dimmed); best bold red, within 1 red, within 3
    blue, with the ``**``/``*``/``+`` suffixes so the marks survive without colour."""

    DEFAULT_CSS = "RankingGrid { height: auto; max-height: 50%; }"

    def __init__(self, **kwargs: object) -> None:
        super().__init__(cursor_type="cell", zebra_stripes=True, **kwargs)  # type: ignore[arg-type]
        self.table: RankingTable | None = None

    def show(self, table: RankingTable | None) -> None:
        """Show ``table`` (None: empty), keeping the cursor cell where it was."""
        keep = self.cursor_coordinate
        self.table = table
        self.clear(columns=True)
        if table is None:
            return
        self.add_column(table.row_axis.name, key="row")
        for column in table.columns:
            self.add_column(Text(table.header(column), justify="right"), key=table.header(column))
        for name in table.rows:
            row: list[Text] = [Text(name, style="dim" if name in table.baselines else "")]
            for column in table.columns:
                cell = table.cell(name, column)
                if cell is None:
                    row.append(Text(EMPTY, style="dim", justify="right"))
                else:
                    row.append(Text(cell.marked_text(table.metric), RICH_STYLES[cell.mark], justify="right"))
            self.add_row(*row, key=name)
        if self.row_count:
            self.move_cursor(row=min(keep.row, self.row_count - 1), column=min(keep.column, len(self.columns) - 1))
