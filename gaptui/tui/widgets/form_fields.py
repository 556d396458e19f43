"""Widgets of the New-experiment form, one per kind of :class:`~engine.tasks.FormField`.

:func:`field_widget` builds the widget of a field, :func:`read_widget` and :func:`write_widget` move its value
in and out (the widget value of a field: text for typed kinds, the chosen values of a ``multi`` list, a list of
row dicts for ``rows``; :func:`gaptui.tui.planning.parse_field` types it). Choices computed by a registry
(``choices_from``) arrive later through :meth:`MultiField.set_choices` and :func:`set_choice_options`. A ``rows``
field (:class:`RowsField`) holds :class:`DatasetRow` rows of sub-fields, each built by :func:`field_widget` again.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from textual import events, on
from textual.app import ComposeResult
from textual.containers import Grid, Horizontal, Vertical
from textual.message import Message
from textual.widget import Widget
from textual.widgets import Button, Checkbox, Input, Label, Select, SelectionList
from textual.widgets.selection_list import Selection

from engine.errors import GaptuiError
from engine.tasks import FormField

#: Input types of the kinds typed in an Input.
INPUT_TYPES = {"int": "integer", "number": "number"}


def field_id(key: str) -> str:
    """The widget id of a field key (``batch_size`` -> ``batch-size``)."""
    return key.replace("_", "-").replace(".", "-")


def field_widget(spec: FormField, value: Any, *, cls: str = "") -> Widget:
    """The widget of one field holding ``value`` (a widget value, see :func:`gaptui.tui.planning.format_field`);
    ids are given to top-level fields, classes (the key) to row cells."""
    ident = None if cls else field_id(spec.key)
    classes = cls or f"field-{spec.kind}"
    tooltip = spec.help or None
    if spec.kind == "multi":
        # the list itself carries the field's id (``#models`` is the SelectionList), the widget ``<id>-field``
        return MultiField(spec, value or [], list_id=ident, id=ident and f"{ident}-field", classes=classes)
    if spec.kind == "rows":
        return RowsField(spec, value or [], id=ident, classes=classes)
    if spec.kind == "bool":
        return Checkbox(spec.label, bool(value), id=ident, classes=classes, compact=True, tooltip=tooltip)
    if spec.kind == "choice":
        return FieldSelect(
            choice_options(spec, list(spec.choices), value),
            value=value if value else Select.NULL,
            allow_blank=spec.default is None or not value,
            prompt=spec.placeholder or "default",
            id=ident,
            classes=classes,
            compact=True,
            tooltip=tooltip,
        )
    return Input(
        "" if value is None else str(value),
        placeholder=spec.placeholder or spec.help,
        type=INPUT_TYPES.get(spec.kind, "text"),  # type: ignore[arg-type]
        id=ident,
        classes=classes,
        compact=True,
        tooltip=tooltip,
    )


class FieldSelect(Select[Any]):
    """The Select of a ``choice`` field. Once the app is exiting, Textual mounts no children, and Select's own
    mount handler fails looking for its option list: quitting while the form is being rebuilt (^q right after
    loading a preset) would end in a traceback. Textual calls the mount handler of each class in the MRO, this
    one first: it stops the rest when the Select is no longer attached."""

    def _on_mount(self, event: events.Mount) -> None:
        if not self.is_attached:
            event.prevent_default()


def choice_options(spec: FormField, choices: list[Any], value: Any) -> list[tuple[str, Any]]:
    """The options of a ``choice`` Select: the choices, and the current value when it is not one of them."""
    listed = [*choices, *([value] if value and value not in choices else [])]
    return [(spec.show(c), c) for c in listed]


def set_choice_options(spec: FormField, select: Select[Any], choices: Sequence[Any]) -> None:
    """Replace a ``choice`` Select's options by the loaded ``choices``, keeping its value."""
    if not select.is_mounted or not select.query("SelectOverlay"):
        select.call_after_refresh(set_choice_options, spec, select, choices)  # not composed yet
        return
    value = None if select.value is Select.NULL else select.value
    with select.prevent(Select.Changed):
        select.set_options(choice_options(spec, list(choices), value))
        if value is not None:
            select.value = value


def read_widget(spec: FormField, widget: Widget) -> Any:
    if isinstance(widget, (MultiField, RowsField)):
        return widget.value()
    if isinstance(widget, Select):
        return None if widget.value is Select.NULL else widget.value
    if isinstance(widget, (Input, Checkbox)):
        return widget.value
    raise TypeError(f"form field '{spec.key}': no value in {type(widget).__name__}")


async def write_widget(spec: FormField, widget: Widget, value: Any) -> None:
    if isinstance(widget, MultiField):
        widget.set_value(value or [])
    elif isinstance(widget, RowsField):
        await widget.set_value(value or [])
    elif isinstance(widget, Select):
        if value and value not in [v for _, v in widget._options]:
            widget.set_options(
                [*((p, v) for p, v in widget._options if v is not Select.NULL), (spec.show(value), value)]
            )
        widget.value = value if value else Select.NULL
    elif isinstance(widget, Checkbox):
        widget.value = bool(value)
    elif isinstance(widget, Input):
        widget.value = "" if value is None else str(value)


class MultiField(Vertical):
    """Checkboxes over a field's choices; with ``parse_item`` (or ``free``), an input adds typed values."""

    DEFAULT_CSS = """
    MultiField { height: auto; width: 1fr; }
    MultiField SelectionList { height: auto; max-height: 12; }
    MultiField Horizontal { height: 1; }
    MultiField Input { width: 1fr; }
    """

    def __init__(self, spec: FormField, value: list[Any], list_id: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.spec = spec
        self.list_id = list_id
        self.choices: list[Any] = list(spec.choices)
        self._initial = list(value)
        #: The choices the list was composed with (:meth:`on_mount` lists those that came later).
        self._composed_with: list[Any] = []

    def compose(self) -> ComposeResult:
        self._composed_with = list(self.choices)
        listed = self._listed(self._initial)
        selections = (Selection(self.spec.show(c), c, c in self._initial) for c in listed)
        yield SelectionList[Any](*selections, id=self.list_id)
        if self.spec.parse_item or self.spec.free:
            with Horizontal():
                yield Input(placeholder=self.spec.help or "more", compact=True, classes="extra")
                yield Button("Add", compact=True, classes="add")

    @property
    def options(self) -> SelectionList[Any]:
        return self.query_one(SelectionList)

    def _listed(self, chosen: Sequence[Any]) -> list[Any]:
        listed = [*self.choices, *(c for c in chosen if c not in self.choices)]
        if listed and all(isinstance(c, (int, float)) and not isinstance(c, bool) for c in listed):
            listed = sorted(set(listed))
        return listed

    def value(self) -> list[Any]:
        if not self.query(SelectionList):  # not composed yet
            return list(self._initial)
        selected = set(self.options.selected)
        return [c for c in self._current() if c in selected]

    def _current(self) -> list[Any]:
        options = self.options
        return [options.get_option_at_index(i).value for i in range(options.option_count)]

    def set_value(self, chosen: Sequence[Any]) -> None:
        """Select exactly ``chosen`` (values not listed are added to the list)."""
        listed = self._listed([*[c for c in self._current() if c not in self.choices], *chosen])
        options = self.options
        with self.prevent(SelectionList.SelectedChanged):
            options.clear_options()
            options.add_options([Selection(self.spec.show(c), c, c in chosen) for c in listed])
        self.post_message(SelectionList.SelectedChanged(options))

    def on_mount(self) -> None:
        if self.choices != self._composed_with:  # choices that arrived while the field was composed
            self.set_value(self.value())

    def set_choices(self, choices: Sequence[Any]) -> None:
        """The choices computed by the field's registry (selection kept; kept for a field not composed yet:
        applied when it mounts)."""
        chosen = self.value()
        self.choices = list(choices)
        if self.query(SelectionList):
            self.set_value(chosen)

    def add(self, items: Sequence[Any]) -> None:
        self.set_value([*self.value(), *(i for i in items if i not in self.value())])

    @on(Button.Pressed, ".add")
    @on(Input.Submitted, ".extra")
    def _add_typed(self, event: Message) -> None:
        event.stop()
        box = self.query_one(".extra", Input)
        try:
            items = [self.spec.parse_item(i) if self.spec.parse_item else i for i in _items(box.value)]
        except GaptuiError as exc:
            self.notify(str(exc), severity="error", markup=False)
            return
        self.add(items)
        box.value = ""


def _items(text: str) -> list[str]:
    return [item for item in re.split(r"[,\s]+", text.strip()) if item]


class RowsField(Vertical):
    """Repeated groups of sub-fields (:class:`DatasetRow`), with an add button."""

    DEFAULT_CSS = """
    RowsField { height: auto; }
    RowsField > .rows { height: auto; }
    """

    def __init__(self, spec: FormField, rows: list[dict[str, Any]], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.spec = spec
        self._initial = rows
        #: Choices loaded for sub-fields (sub-field key -> choices), for rows added later.
        self.choices: dict[str, list[Any]] = {}

    def compose(self) -> ComposeResult:
        yield Vertical(*(self._row(r) for r in self._initial), classes="rows")
        yield Button(f"+ {self.spec.label.rstrip('s')} ^n", compact=True, classes="add-row")

    def _row(self, values: dict[str, Any]) -> Widget:
        return DatasetRow(self.spec.fields, values, self.choices, self.spec.hints)

    def rows(self) -> list[Any]:
        return list(self.query(DatasetRow))

    def value(self) -> list[dict[str, Any]]:
        if not self.query(".rows"):  # not composed yet
            return list(self._initial)
        return [row.value() for row in self.rows()]

    async def set_value(self, rows: list[dict[str, Any]]) -> None:
        container = self.query_one(".rows", Vertical)
        await container.remove_children()
        await container.mount_all([self._row(r) for r in rows])

    async def add_row(self) -> None:
        """A new row, a copy of the last one (or of the sub-fields' defaults)."""
        rows = self.value()
        template = rows[-1] if rows else {sub.key: sub.default for sub in self.spec.fields}
        await self.query_one(".rows", Vertical).mount(self._row(template))

    def set_choices(self, key: str, choices: Sequence[Any]) -> None:
        self.choices[key] = list(choices)
        for row in self.rows():
            row.set_choices(key, choices)

    @on(Button.Pressed, ".add-row")
    async def _add_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        await self.add_row()
        self.post_message(self.Changed(self))

    class Changed(Message):
        """Rows were added or removed."""

        def __init__(self, field: RowsField) -> None:
            super().__init__()
            self.field = field


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
