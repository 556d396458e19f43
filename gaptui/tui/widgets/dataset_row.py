"""DatasetRow: one row of a ``rows`` form field (a base dataset and its parameters, sizes, seed...)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from textual import on
from textual.app import ComposeResult
from textual.containers import Grid, Vertical
from textual.message import Message
from textual.widgets import Button, Input, Label, Select

from engine.tasks import FormField
from gaptui.tui.widgets.form_fields import field_widget, read_widget, set_choice_options

#: Cells per line of a row at most (a longer row takes two lines).
MAX_COLUMNS = 8


class DatasetRow(Vertical):
    """Editable row: one labelled cell per sub-field (class = the sub-field's key), and a remove button."""

    DEFAULT_CSS = """
    DatasetRow { height: auto; margin-bottom: 1; border-left: tall $accent 30%; padding-left: 1; }
    DatasetRow Grid { grid-gutter: 0 1; height: auto; grid-rows: 2; }
    DatasetRow Grid > Vertical { height: 2; }
    DatasetRow Label { color: $text-muted; }
    DatasetRow Button { width: 5; min-width: 5; }
    """

    class Removed(Message):
        """The user asked to remove this row."""

        def __init__(self, row: DatasetRow) -> None:
            super().__init__()
            self.row = row

    def __init__(
        self,
        fields: Sequence[FormField],
        values: Mapping[str, Any],
        choices: Mapping[str, Sequence[Any]],
        hints: Callable[[Mapping[str, Any]], Mapping[str, str]] | None = None,
    ) -> None:
        super().__init__()
        self.fields = tuple(fields)
        self.values = dict(values)
        self.choices = dict(choices)
        self.hints = hints

    def compose(self) -> ComposeResult:
        with Grid():
            for spec in self.fields:
                yield Vertical(
                    Label(spec.label, markup=False), field_widget(spec, self.values.get(spec.key), cls=spec.key)
                )
            yield Vertical(Label(""), Button("✕", compact=True, variant="error", tooltip="remove this row"))

    def on_mount(self) -> None:
        cells = len(self.fields) + 1
        self.query_one(Grid).styles.grid_size_columns = cells if cells <= MAX_COLUMNS else -(-cells // 2)
        for key, choices in self.choices.items():
            self.set_choices(key, choices)
        self.call_after_refresh(self._hint)  # once the cells are composed

    @on(Select.Changed)
    def _hint(self) -> None:
        """Placeholders from the row's values (a base dataset's parameter defaults, sizes), as the field says."""
        if self.hints is None:
            return
        shown = {spec.key: spec.placeholder or spec.help for spec in self.fields}
        for key, text in {**shown, **self.hints(self.value())}.items():
            for box in self.query(f".{key}").results(Input):
                box.placeholder = text

    def set_choices(self, key: str, choices: Sequence[Any]) -> None:
        """The choices of sub-field ``key`` (kept for a row not composed yet: applied when it mounts)."""
        self.choices[key] = list(choices)
        for spec in self.fields:
            if spec.key == key and spec.kind == "choice":
                for select in self.query(f".{key}").results(Select):
                    set_choice_options(spec, select, choices)

    @on(Button.Pressed)
    def _remove(self, event: Button.Pressed) -> None:
        event.stop()
        self.post_message(self.Removed(self))

    def value(self) -> dict[str, Any]:
        """The row's widget values by sub-field key."""
        out = dict(self.values)  # what the row was made with, for cells not composed yet
        for spec in self.fields:
            for widget in self.query(f".{spec.key}"):
                out[spec.key] = read_widget(spec, widget)
        return out
