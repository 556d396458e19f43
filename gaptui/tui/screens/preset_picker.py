"""PresetPicker: a modal list of the presets (the workspace's and the shipped ones) with their task and
description; Enter (or a click) answers the chosen preset's name, Escape ``None``."""

from __future__ import annotations

from typing import ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from gaptui.presets import PresetEntry


def entry_line(entry: PresetEntry) -> Content:
    """``name  task  description`` (or the file's error), one line of the picker."""
    where = " (workspace)" if entry.own else ""
    about = entry.error or entry.description or "no description"
    return Content.assemble(
        (f"{entry.name:<18}", "bold"), f" {entry.task or '?':<11}", (f"{about}{where}", "dim" if entry.error else "")
    )


class PresetPicker(ModalScreen[str | None]):
    """Choose a preset to load; ``current`` is highlighted first."""

    DEFAULT_CSS = """
    PresetPicker { align: center middle; }
    PresetPicker > Vertical {
        width: 120; max-width: 96%; height: auto; max-height: 80%; padding: 0 1;
        border: thick $primary; background: $surface;
    }
    PresetPicker OptionList { height: auto; max-height: 30; }
    PresetPicker #picker-help { color: $text-muted; }
    """
    BINDINGS: ClassVar[list[Binding]] = [Binding("escape", "dismiss_none", "Cancel")]

    def __init__(self, entries: list[PresetEntry], current: str | None = None) -> None:
        super().__init__()
        self.entries = entries
        self.current = current

    def compose(self) -> ComposeResult:
        with Vertical():
            yield OptionList(*(Option(entry_line(e), id=e.name, disabled=bool(e.error)) for e in self.entries))
            yield Static("Enter: load · Escape: cancel", id="picker-help")

    def on_mount(self) -> None:
        self.query_one(Vertical).border_title = "Load a preset"
        options = self.query_one(OptionList)
        names = [e.name for e in self.entries]
        if self.current in names:
            options.highlighted = names.index(self.current)
        options.focus()

    @on(OptionList.OptionSelected)
    def _chosen(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)

    def action_dismiss_none(self) -> None:
        self.dismiss(None)
