"""ChoiceScreen: a modal question with a few labelled answers, each on a key; Escape answers ``None``."""

from __future__ import annotations

from dataclasses import dataclass

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.events import Key
from textual.screen import ModalScreen
from textual.widgets import Button, Static


@dataclass(frozen=True)
class Choice:
    """One answer: the value returned, the button label, the key that picks it, the button variant."""

    value: str
    label: str
    key: str
    variant: str = "default"


class ChoiceScreen(ModalScreen[str | None]):
    """Dismisses with the chosen :attr:`Choice.value`, or ``None`` on Escape."""

    DEFAULT_CSS = """
    ChoiceScreen { align: center middle; }
    ChoiceScreen > Vertical {
        width: 86; max-width: 96%; height: auto; max-height: 90%; padding: 1 2;
        border: thick $primary; background: $surface;
    }
    ChoiceScreen #question { width: 100%; margin-bottom: 1; }
    ChoiceScreen Horizontal { width: auto; height: auto; }
    ChoiceScreen Button { margin: 0 1 0 0; }
    """
    BINDINGS = [Binding("escape", "dismiss_none", "Cancel")]

    def __init__(self, question: str, choices: list[Choice], title: str = "") -> None:
        super().__init__()
        self.question = question
        self.choices = choices
        self.title_text = title

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(self.question, id="question", markup=False)
            with Horizontal():
                for choice in self.choices:
                    label = Content(f"{choice.label} ({choice.key})")
                    yield Button(label, id=f"choice-{choice.value}", variant=choice.variant)

    def on_mount(self) -> None:
        if self.title_text:
            self.query_one(Vertical).border_title = self.title_text

    def on_key(self, event: Key) -> None:
        for choice in self.choices:
            if event.key == choice.key:
                event.stop()
                self.dismiss(choice.value)
                return

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss((event.button.id or "").removeprefix("choice-"))

    def action_dismiss_none(self) -> None:
        self.dismiss(None)


def confirm(question: str, title: str = "Confirm") -> ChoiceScreen:
    """A yes/no question; dismisses with ``"yes"``, ``"no"`` or ``None``."""
    return ChoiceScreen(
        question, [Choice("yes", "Yes", "y", "warning"), Choice("no", "No", "n", "primary")], title=title
    )
