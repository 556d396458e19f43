"""Form field widgets on their own: choices computed off the UI thread may arrive before a field is composed (a
family's form rebuilt while its registry's choices are loading, on a loaded machine)."""

from __future__ import annotations

from typing import Any

import pytest
from textual.app import App, ComposeResult
from textual.containers import Vertical
from textual.widgets import SelectionList

from engine.tasks.form import FormField
from gaptui.tui.widgets.form_fields import MultiField

MODELS = FormField("models", "Models", "multi", default=["gcn"], choices=("gcn",))


def listed(field: MultiField) -> list[Any]:
    options = field.query_one(SelectionList)
    return [options.get_option_at_index(i).value for i in range(options.option_count)]


@pytest.mark.asyncio
async def test_choices_given_before_a_multi_field_is_composed_are_listed_once_it_mounts() -> None:
    class Form(App[None]):
        def compose(self) -> ComposeResult:
            yield Vertical(id="host")

    app = Form()
    async with app.run_test() as pilot:
        field = MultiField(MODELS, ["gcn"], list_id="models")
        field.set_choices(["gcn", "gin", "gat"])  # before it is composed: kept, no error
        assert field.value() == ["gcn"]
        await app.query_one("#host").mount(field)
        await pilot.pause()
        assert listed(field) == ["gcn", "gin", "gat"] and field.value() == ["gcn"]
        field.set_choices(["gcn", "gin", "gat", "pna"])  # composed: applied at once, the selection kept
        assert listed(field) == ["gcn", "gin", "gat", "pna"] and field.value() == ["gcn"]
