"""HelpScreen: every key binding of the app, grouped by screen, with its description."""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static


def as_bindings(bindings: Sequence[BindingType]) -> list[Binding]:
    """Binding objects of a ``BINDINGS`` list (which may hold tuples)."""
    return [b if isinstance(b, Binding) else Binding(*b) for b in bindings]


class HelpScreen(ModalScreen[None]):
    """Modal list of bindings; any of Escape, F1, ? or q closes it."""

    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll {
        width: 90; max-width: 100%; height: 90%; border: thick $primary; background: $surface; padding: 0 1;
    }
    """
    BINDINGS = [Binding("escape,f1,question_mark,q", "dismiss", "Close help")]

    def __init__(self, sections: Sequence[tuple[str, Sequence[BindingType]]]) -> None:
        super().__init__()
        self.sections = sections

    def compose(self) -> ComposeResult:
        with VerticalScroll() as scroll:
            scroll.border_title = "Keys (Escape closes) — Ctrl+P opens the command palette"
            for title, bindings in self.sections:
                table = Table(title=title, title_justify="left", show_header=False, box=None, expand=True)
                table.add_column("key", style="bold", width=18)
                table.add_column("action", ratio=1)
                for binding in as_bindings(bindings):
                    if binding.description:
                        keys = ", ".join(self.app.get_key_display(Binding(k, "")) for k in binding.key.split(","))
                        table.add_row(keys, binding.description)
                yield Static(table)
