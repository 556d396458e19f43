"""The New-experiment form of every family (built from the family's form fields), driven through Pilot: the
fields shown, fill -> save -> the file loads back identically, launch from the form without a preset, the toy
plug-in's form, and loading a preset with ^o's picker or the command palette."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import tomllib
from textual.command import CommandPalette
from textual.widgets import Input, OptionList, SelectionList

from engine.tasks import family, task_of
from gaptui.presets import BUNDLED, dump_document, load_preset
from gaptui.tui.app import GaptuiApp
from gaptui.tui.planning import FormDraft, form_fields_of, parse_params
from gaptui.tui.screens.confirm import ChoiceScreen
from gaptui.tui.screens.new_experiment import NewExperimentScreen
from gaptui.tui.screens.preset_picker import PresetPicker
from gaptui.workspace import Workspace
from tests.support.tui import SIZE, switch_task, tasks_done, type_into
from tests.support.waiting import wait_until

PES = ["none", "lap", "abs-lap", "r-lap", "rwpe", "gape", "gape+rwpe"]


def shipped(name: str) -> dict[str, Any]:
    return tomllib.loads((BUNDLED / f"{name}.toml").read_text())


def listed(form: NewExperimentScreen, key: str) -> list[Any]:
    options = form.query_one(f"#{key}", SelectionList)
    return [options.get_option_at_index(i).value for i in range(options.option_count)]


async def choose(form: NewExperimentScreen, key: str, values: list[Any]) -> None:
    options = form.query_one(f"#{key}", SelectionList)
    options.deselect_all()
    for value in values:
        options.select(value)


async def load(pilot: Any, form: NewExperimentScreen, name: str) -> None:
    """Load preset ``name`` into the form and wait until it shows (the name field is cleared first: it may hold
    ``name`` already, from a save)."""
    form.query_one("#name", Input).value = ""
    form.load_named(name)
    await wait_until(pilot, lambda: form.query_one("#name", Input).value == name, what=f"preset {name} loaded")
    await tasks_done(form.app)  # type: ignore[arg-type]


async def save_as(pilot: Any, form: NewExperimentScreen, ws: Workspace, name: str) -> dict[str, Any]:
    await type_into(pilot, form.query_one("#name", Input), name)
    await pilot.press("ctrl+s")
    path = ws.root / "presets" / f"{name}.toml"
    await wait_until(pilot, path.exists, what=f"{path}")
    await tasks_done(form.app)  # type: ignore[arg-type]
    load_preset(str(path), ws)  # what `gaptui run --preset` reads
    return tomllib.loads(path.read_text())


def test_every_shipped_preset_goes_through_its_form_unchanged() -> None:
    for path in sorted(BUNDLED.glob("*.toml")):
        raw = tomllib.loads(path.read_text())
        fam = family(task_of(raw))
        body = {k: v for k, v in raw.items() if k not in ("task", "name", "description")}
        shown = form_fields_of(fam.form.form_values(body), fam.form.fields())
        draft = FormDraft(fam.name, name=path.stem, description=raw.get("description", ""), fields=shown, base=raw)
        assert draft.document() == raw, path.name
        assert tomllib.loads(dump_document(draft.document())) == raw
        assert draft.preset() == dataclasses.replace(load_preset(str(path)), path=None)


def test_params_text_reads_toml_values() -> None:
    assert parse_params('n=16 p=0.5 path="my file.csv" topk=[5, 10] ok=true, name=er') == {
        "n": 16, "p": 0.5, "path": "my file.csv", "topk": [5, 10], "ok": True, "name": "er",
    }  # fmt: skip
    with pytest.raises(Exception, match="'oops': expected key=value"):
        parse_params("n=1 oops", "dataset 1 parameters")


@pytest.mark.asyncio
async def test_a_choice_field_mounting_while_the_app_quits_ends_without_a_traceback() -> None:
    """^q while the form is being rebuilt: a choice field registered before the app began to exit composes after,
    when Textual mounts no children; its Select must not fail looking for its option list."""
    from textual.app import App, ComposeResult
    from textual.widget import Widget

    from engine.tasks.form import precision_field
    from gaptui.tui.widgets.form_fields import field_widget

    class Quits(Widget):
        def compose(self) -> ComposeResult:
            self.app.exit()  # runs before the next sibling's compose: its task starts after this one's
            yield from ()

    class Form(App[None]):
        def compose(self) -> ComposeResult:
            yield Quits()
            yield field_widget(precision_field("Runs"), "fp32")

    app = Form()
    async with app.run_test():
        pass
    assert app.return_code == 0  # an exception in a handler sets 1 (and run_test re-raises it)


@pytest.mark.asyncio
async def test_gape_and_properties_forms_show_their_fields_and_save_what_loads_back(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    app = GaptuiApp(ws)
    async with app.run_test(size=SIZE) as pilot:
        form = app.screen
        assert isinstance(form, NewExperimentScreen)
        await switch_task(pilot, form, "gape", "pes")
        await wait_until(pilot, lambda: bool(form.query("DatasetRow .run")), what="the dataset row's cells")
        assert listed(form, "pes") == PES and form.query_one("#pes", SelectionList).selected == PES
        row = form.query_one("DatasetRow")
        for cell in ("base", "params", "path", "smiles", "target", "pretrain_model", "pretrain_epochs", "run"):
            assert row.query(f".{cell}"), cell
        await wait_until(pilot, lambda: form.summary is not None and form.summary.size == 8, what="gape plan")

        # load -> form -> save: the same document
        await load(pilot, form, "gape-smoke")
        assert "epochs=5" in form.query_one("DatasetRow .run", Input).value
        assert await save_as(pilot, form, ws, "mine-gape") == shipped("gape-smoke")

        await switch_task(pilot, form, "properties", "poolings")
        assert len(listed(form, "properties")) == 16 and len(listed(form, "poolings")) == 11
        assert listed(form, "dimensions") == ["generalisation", "sensitivity", "robustness"]
        poolings = form.query_one("#poolings", SelectionList)
        assert str(poolings.get_option_at_index(5).prompt) == "set_transformer (Set Transformer)"
        await load(pilot, form, "properties-smoke")
        await wait_until(pilot, lambda: form.summary is not None and form.summary.size == 18, what="smoke plan")
        assert await save_as(pilot, form, ws, "mine-props") == shipped("properties-smoke")

        # fill: one property less, a pooling more, an import path, other run options
        form.query_one("#properties", SelectionList).deselect("function")
        form.query_one("#poolings", SelectionList).select("sum")
        await type_into(pilot, form.query_one("#epochs", Input), "1")
        await type_into(pilot, form.query_one("#run-more", Input), "lr=0.01")
        await wait_until(pilot, lambda: form.summary is not None and form.summary.size == 2 * 3 * 3, what="plan")
        saved = await save_as(pilot, form, ws, "mine-props2")
        expected = shipped("properties-smoke")
        expected |= {"properties": ["irreflexive", "symmetric"], "poolings": ["mean", "sum", "sopool_bimap"]}
        expected["run"] |= {"epochs": 1, "lr": 0.01}
        assert saved == expected
        # and it loads back into the same form
        await load(pilot, form, "mine-props2")
        assert form.draft().document() == expected
        await pilot.press("ctrl+q")


@pytest.mark.e2e  # the app launches workers
@pytest.mark.asyncio
async def test_launch_properties_and_gape_from_the_form(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    app = GaptuiApp(ws)
    async with app.run_test(size=SIZE) as pilot:
        form = app.screen
        assert isinstance(form, NewExperimentScreen)
        # properties, tiny and real: one cell
        await switch_task(pilot, form, "properties", "poolings")
        await choose(form, "properties", ["reflexive"])
        await choose(form, "dimensions", ["generalisation"])
        for key, value in (("epochs", "1"), ("graphs", "200"), ("sizes", "2"), ("hidden", "8"), ("cpu-jobs", "1")):
            await type_into(pilot, form.query_one(f"#{key}", Input), value)
        await wait_until(pilot, lambda: form.summary is not None and form.summary.size == 1, what="one cell")
        await pilot.press("ctrl+l")
        await wait_until(pilot, lambda: app.current_mode == "runs", what="the Runs section")
        await wait_until(pilot, lambda: len(app.book) == 1 and next(iter(app.book))["status"] == "done", what="done")
        (record,) = list(app.book)
        assert record["task"] == "properties" and record["spec"]["epochs"] == 1 and record["spec"]["graphs"] == 200

        # gape: a pretraining run and its dependants, planned from the form
        await pilot.press("f2")
        await switch_task(pilot, form, "gape", "pes")
        await choose(form, "pes", ["none", "gape"])
        await type_into(pilot, form.query_one("DatasetRow .pretrain_epochs", Input), "1")
        await type_into(pilot, form.query_one("DatasetRow .run", Input), "layers=1 heads=2 budget=4000 epochs=1")
        await wait_until(pilot, lambda: form.summary is not None and form.summary.size == 3, what="gape plan")
        await pilot.press("ctrl+l")
        await wait_until(pilot, lambda: len(app.book) == 4, what="the gape runs planned")
        runs = [r for r in app.book if r["task"] == "gape"]
        pretraining = [r for r in app.book if r["task"] == "alignment"]
        assert len(runs) == 2 and len(pretraining) == 1 and pretraining[0]["spec"]["epochs"] == 1
        assert {r["axes"]["pe"] for r in runs} == {"none", "gape"}
        assert [r["depends"] for r in runs if r["axes"]["pe"] == "gape"] == [[pretraining[0]["hash"]]]
        await pilot.press("ctrl+q")  # asks only while runs are in flight
        await wait_until(pilot, lambda: isinstance(app.screen, ChoiceScreen) or not app.is_running, what="quitting")
        if isinstance(app.screen, ChoiceScreen):
            await pilot.press("s")  # stop what is still running
        await wait_until(pilot, lambda: not app.is_running, what="the app to exit")


@pytest.mark.e2e  # the app launches workers
@pytest.mark.asyncio
async def test_the_toy_plug_in_gets_a_form_to_fill_save_and_launch(tmp_path: Path, toy: None) -> None:
    ws = Workspace(tmp_path / "ws")
    app = GaptuiApp(ws)
    async with app.run_test(size=SIZE) as pilot:
        form = app.screen
        assert isinstance(form, NewExperimentScreen)
        await switch_task(pilot, form, "toy", "sizes")
        await type_into(pilot, form.query_one("#sizes", Input), "2,3")
        form.query_one("#models", SelectionList).select("median")
        await type_into(pilot, form.query_one("#steps", Input), "2")
        await type_into(pilot, form.query_one("#description", Input), "toy grid")
        await wait_until(pilot, lambda: form.summary is not None and form.summary.size == 6, what="toy plan")
        saved = await save_as(pilot, form, ws, "toy-mine")
        assert saved == {
            "task": "toy", "description": "toy grid", "sizes": [2, 3], "models": ["mean", "median"], "seeds": [0],
            "pretrain": True, "steps": 2,
        }  # fmt: skip
        await type_into(pilot, form.query_one("#sizes", Input), "2")  # launch a smaller grid: a pre run, 2 models
        await wait_until(pilot, lambda: form.summary is not None and form.summary.size == 3, what="smaller plan")
        await pilot.press("ctrl+l")
        await wait_until(
            pilot, lambda: len(app.book) == 3 and all(r["status"] == "done" for r in app.book), what="toy runs"
        )
        assert {(r["axes"]["size"], r["axes"]["model"]) for r in app.book} == {(2, "pre"), (2, "mean"), (2, "median")}
        assert {r["spec"]["steps"] for r in app.book} == {2}
        await pilot.press("ctrl+q")


@pytest.mark.asyncio
async def test_ctrl_o_picker_and_the_palette_load_a_preset(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    (ws.root / "presets").mkdir(parents=True)
    (ws.root / "presets" / "mine.toml").write_text((BUNDLED / "smoke.toml").read_text())
    app = GaptuiApp(ws)
    async with app.run_test(size=SIZE) as pilot:
        form = app.screen
        assert isinstance(form, NewExperimentScreen)
        # a dataset row's placeholders: its base dataset's parameter defaults and split sizes
        params = form.query_one("DatasetRow .params", Input)
        await wait_until(pilot, lambda: params.placeholder == "degree=8.0 n=100", what="the row's hints")
        assert form.query_one("DatasetRow .train", Input).placeholder == "5000"
        await pilot.press("ctrl+o")
        await wait_until(pilot, lambda: isinstance(app.screen, PresetPicker), what="the picker")
        picker = app.screen
        options = picker.query_one(OptionList)
        names = [options.get_option_at_index(i).id for i in range(options.option_count)]
        assert {"mine", "smoke", "gape", "properties-smoke"} <= set(names)
        line = str(options.get_option("mine").prompt)
        assert "alignment" in line and "tiny ER grid" in line and "(workspace)" in line
        options.highlighted = names.index("properties-smoke")
        await pilot.press("enter")
        await wait_until(pilot, lambda: form.query_one("#name", Input).value == "properties-smoke", what="loaded")
        assert form.task_name == "properties" and form.query_one("#properties", SelectionList).selected == [
            "irreflexive", "symmetric", "function",
        ]  # fmt: skip

        app.action_command_palette()
        await wait_until(pilot, lambda: isinstance(app.screen, CommandPalette), what="the palette")
        await pilot.press(*"Load preset gape-smoke")
        palette = app.screen
        await wait_until(
            pilot,
            lambda: "gape-smoke" in str(palette.query_one(OptionList).get_option_at_index(0).prompt),
            what="the palette's hit",
        )
        await pilot.press("enter")
        await wait_until(pilot, lambda: form.query_one("#name", Input).value == "gape-smoke", what="gape-smoke")
        assert form.task_name == "gape" and form.query_one("#pes", SelectionList).selected == PES
        await pilot.press("ctrl+q")


def test_keys_the_form_does_not_show_are_kept_and_blank_fields_drop_theirs() -> None:
    raw = shipped("smoke") | {"slurm": {"partition": "gpu"}, "model_options": {"gcn": {"layers": 2}}}
    fam = family("alignment")
    shown = form_fields_of(fam.form.form_values(raw), fam.form.fields())
    draft = FormDraft("alignment", name="smoke", description=raw["description"], fields=shown, base=raw)
    assert draft.document() == raw
    assert draft.preset().slurm.partition == "gpu" and draft.preset().model_options == {"gcn": {"layers": 2}}
    blank = {**shown, **dict.fromkeys(("epochs", "batch_size", "budget", "out_dim"), "")}
    document = dataclasses.replace(draft, fields=blank).document()
    assert "run" not in document and document["slurm"] == {"partition": "gpu"}
    with pytest.raises(Exception, match=r"base datasets, row 1: train: 'x' is not an integer"):
        dataclasses.replace(draft, fields={**shown, "datasets": [{**shown["datasets"][0], "train": "x"}]}).preset()


@pytest.mark.asyncio
async def test_the_form_is_never_read_half_built(tmp_path: Path) -> None:
    """The form is rebuilt from more than one message queue (its family picker, its screen's preset loading, a
    caller): while a rebuild is under way the plan bar gets no draft, a second rebuild waits its turn, and what the
    form holds is read whole once both are done."""
    import asyncio

    from textual.widgets import Select

    app = GaptuiApp(Workspace(tmp_path / "ws"))
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        assert isinstance(screen, NewExperimentScreen)
        await wait_until(pilot, lambda: screen.built_task == "alignment", what="the alignment form")
        form = screen.form
        assert form.settled_draft() == form.draft()
        loading = asyncio.create_task(form.apply_document(shipped("gape-smoke"), "gape-smoke"))
        await asyncio.sleep(0)  # the rebuild began; it waits for its widgets to go and come
        assert form.built_task is None and form.settled_draft() is None
        form.query_one("#task", Select).value = "properties"  # the picker's rebuild waits for the one under way
        await loading
        await wait_until(pilot, lambda: screen.built_task == "properties", what="the properties form")
        await form.settled()
        draft = form.draft()
        assert draft.task == "properties" and set(draft.fields) == {spec.key for spec in form.fields}
        assert len(form.query("#properties")) == 1  # one form, not two built over each other
        await wait_until(pilot, lambda: screen.summary is not None, what="the plan of the properties form")
        await pilot.press("ctrl+q")
