"""RankingGrid: one Table D.3 (models x noise levels) as a DataTable, cells marked like ``analysis.render_rich``."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable

from gaptui.analysis import BASELINE, EMPTY, RICH_STYLES, RankingTable, _marked_text, format_noise


class RankingGrid(DataTable):
    """Rows are models (Laplacian baseline dimmed), columns noise levels; best bold red, within 1 red, within 3
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
        self.add_column("model", key="model")
        for noise in table.noises:
            self.add_column(Text(f"η={format_noise(noise)}", justify="right"), key=f"{noise:g}")
        for model in table.models:
            row: list[Text] = [Text(model, style="dim" if model == BASELINE else "")]
            for noise in table.noises:
                cell = table.cell(model, noise)
                if cell is None:
                    row.append(Text(EMPTY, style="dim", justify="right"))
                else:
                    row.append(Text(_marked_text(cell, table.metric), RICH_STYLES[cell.mark], justify="right"))
            self.add_row(*row, key=model)
        if self.row_count:
            self.move_cursor(row=min(keep.row, self.row_count - 1), column=min(keep.column, len(self.columns) - 1))
