"""DatasetRow: one base dataset of a grid (name, key=value parameters, noise model, sizes, data seed)."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.message import Message
from textual.widgets import Button, Input, Select

from gaptui.tui.planning import DatasetDraft, source_defaults

#: Select value meaning "the base dataset's own noise model".
SOURCE_DEFAULT = "default"


class DatasetRow(Horizontal):
    """Editable row; placeholders show the chosen base dataset's parameter defaults and split sizes."""

    DEFAULT_CSS = """
    DatasetRow { height: 1; margin-bottom: 1; }
    DatasetRow Select.base { width: 16; }
    DatasetRow Input.params { width: 1fr; min-width: 12; }
    DatasetRow Select.noise-model { width: 16; }
    DatasetRow Input.size { width: 8; }
    DatasetRow Input.seed { width: 6; }
    DatasetRow Button { width: 5; min-width: 5; }
    """

    class Removed(Message):
        """The user asked to remove this row."""

        def __init__(self, row: DatasetRow) -> None:
            super().__init__()
            self.row = row

    def __init__(self, draft: DatasetDraft, bases: list[str], noise_models: tuple[str, ...]) -> None:
        super().__init__()
        self.draft = draft
        self.bases = bases
        self.noise_models = noise_models

    def compose(self) -> ComposeResult:
        yield Select(
            [(b, b) for b in self.bases], value=self.draft.base, allow_blank=False, compact=True, classes="base"
        )
        yield Input(self.draft.params, compact=True, classes="params", tooltip="base dataset parameters, key=value")
        yield Select(
            [("default noise", SOURCE_DEFAULT), *((m, m) for m in self.noise_models)],
            value=self.draft.noise_model or SOURCE_DEFAULT,
            allow_blank=False,
            compact=True,
            classes="noise-model",
        )
        yield Input(self.draft.train, compact=True, classes="size train", type="integer", tooltip="training pairs")
        yield Input(self.draft.val, compact=True, classes="size val", type="integer", tooltip="validation pairs")
        yield Input(self.draft.seed, compact=True, classes="seed", type="integer", tooltip="dataset seed")
        yield Button("✕", compact=True, variant="error", tooltip="remove this dataset")

    def on_mount(self) -> None:
        self._placeholders(self.draft.base)

    def _placeholders(self, base: str) -> None:
        params, train, val = source_defaults(base)
        self.query_one(".params", Input).placeholder = params or "no parameters"
        self.query_one(".train", Input).placeholder = train
        self.query_one(".val", Input).placeholder = val

    @on(Select.Changed, ".base")
    def _base_changed(self, event: Select.Changed) -> None:
        self._placeholders(str(event.value))

    @on(Button.Pressed)
    def _remove(self, event: Button.Pressed) -> None:
        event.stop()
        self.post_message(self.Removed(self))

    def value(self) -> DatasetDraft:
        """The row as typed."""
        noise_model = str(self.query_one(".noise-model", Select).value)
        return DatasetDraft(
            base=str(self.query_one(".base", Select).value),
            params=self.query_one(".params", Input).value,
            noise_model=None if noise_model == SOURCE_DEFAULT else noise_model,
            train=self.query_one(".train", Input).value,
            val=self.query_one(".val", Input).value,
            seed=self.query_one(".seed", Input).value,
        )
