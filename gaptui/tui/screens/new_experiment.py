"""NewExperimentScreen: pick a task family, compose or load its grid, see what it costs, launch or save it.

The screen puts two parts together and owns what is done with them. The form
(:class:`~gaptui.tui.widgets.experiment_form.ExperimentForm`) is built from the chosen family's
:meth:`~engine.tasks.FamilyForm.fields`; what it holds becomes a preset document through the family's
:meth:`~engine.tasks.FamilyForm.preset_from_form` and is validated like a preset file, so a form error reads like a
preset error. A family that declares no fields launches one of its preset files as loaded. The plan bar
(:class:`~gaptui.tui.widgets.plan_bar.PlanBar`) at the bottom says what launching it costs (grid size, runs in
history, estimated time), recomputed off the UI thread after each edit the form announces. A grid over
:data:`~gaptui.tui.planning.MAX_GRID_RUNS` runs is refused there and by Launch from its counted size, before any of
it is built.

Loading a preset (the preset list, ^o's picker, or the command palette's "Load preset NAME") lists the Python code
it names (``module.path:Name`` import paths) before importing any; code that is not part of an installed package
is imported only once the user allowed it for that file (asked once per file content, remembered in the
workspace: :mod:`gaptui.preset_code`). Launch (^l) and Save (^s) act on what the form holds.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.message import Message
from textual.widgets import Button, Select

from engine.errors import GaptuiError
from engine.tasks import FormField, PresetBase
from gaptui.preset_code import PresetReview, is_trusted, review_preset, trust
from gaptui.presets import dump_document, parse_preset, preset_entries
from gaptui.tui.planning import FormDraft, PlanSummary
from gaptui.tui.screens.confirm import Choice, ChoiceScreen, confirm
from gaptui.tui.screens.preset_picker import PresetPicker
from gaptui.tui.screens.section import SectionScreen
from gaptui.tui.widgets.experiment_form import ExperimentForm
from gaptui.tui.widgets.plan_bar import PlanBar

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]


@dataclass
class PresetReviewed(Message):
    """A preset file was read and the code it names listed, nothing imported yet; ``trusted``: allowed before."""

    review: PresetReview
    trusted: bool


@dataclass
class PresetLoaded(Message):
    """A preset file was read and validated (of any family); ``sha256``: of the file content it was parsed from;
    ``raw``: its document."""

    preset: PresetBase
    sha256: str = ""
    raw: dict[str, Any] = field(default_factory=dict)


class NewExperimentScreen(SectionScreen):
    """The form (:attr:`form`) above the plan bar (:attr:`plan_bar`), which it schedules after each change the form
    announces; the screen loads presets into the form, saves what it holds and launches it."""

    TITLE = "New experiment"
    BINDINGS: ClassVar[list[Binding]] = [
        Binding("ctrl+l", "launch", "Launch"),
        Binding("ctrl+s", "save", "Save preset"),
        Binding("ctrl+o", "load_preset", "Load preset"),
        Binding("ctrl+n", "add_row", "Add dataset"),
    ]
    DEFAULT_CSS = """
    NewExperimentScreen #form { height: 1fr; padding: 0 1; }
    NewExperimentScreen #launch-bar { dock: bottom; height: 3; padding: 0 1; background: $boost; }
    NewExperimentScreen #plan { width: 1fr; height: 3; content-align: left middle; }
    NewExperimentScreen #launch-bar Button { margin-left: 1; }
    """

    def __init__(self) -> None:
        super().__init__()
        #: The chosen family's form (and the preset list it is loaded from).
        self.form = ExperimentForm(id="form")
        #: The summary line: what launching the grid of :attr:`form` costs.
        self.plan_bar = PlanBar(self.form.settled_draft, id="plan")

    def compose_body(self) -> ComposeResult:
        yield self.form
        with Horizontal(id="launch-bar"):
            yield self.plan_bar
            yield Button("Launch ^l", id="launch", variant="success")
            yield Button("Save ^s", id="save", variant="primary")

    async def on_mount(self) -> None:
        self.ready = True
        await self.form.show_family()
        if self.gapp.read_only:
            self.query_one("#launch", Button).disabled = True
        self.plan_bar.schedule()

    def records_changed(self, hashes: set[str]) -> None:
        # What the grid overlaps with in history changed; recompute only while the form is on screen.
        if self.ready and self.is_current:
            self.plan_bar.schedule()

    def on_screen_resume(self) -> None:
        self.plan_bar.schedule()

    def on_experiment_form_changed(self) -> None:
        self.plan_bar.schedule()

    # -------------------------------------------------------------------------------------- what it shows
    # (what the form and the plan bar hold, read through the screen by the app and the tests)

    @property
    def task_name(self) -> str:
        """The family the form launches."""
        return self.form.task_name

    @property
    def fields(self) -> tuple[FormField, ...]:
        """The chosen family's form fields (none: it launches a preset file as loaded)."""
        return self.form.fields

    @property
    def family_preset(self) -> PresetBase | None:
        """For a family without form fields, the preset loaded for it."""
        return self.form.family_preset

    @property
    def built_task(self) -> str | None:
        """The family whose form is drawn, every field and row composed (None while a family's form is built)."""
        return self.form.built_task

    @property
    def summary(self) -> PlanSummary | None:
        """The plan bar's summary of the grid (None: none yet, or the form describes no grid)."""
        return self.plan_bar.summary

    def draft(self) -> FormDraft:
        """The form as typed."""
        return self.form.draft()

    async def apply_document(self, raw: dict[str, Any], name: str) -> None:
        """Fill the form with a preset document (its family's form values; the device slots stay)."""
        await self.form.apply_document(raw, name)

    # -------------------------------------------------------------------------------------- actions

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "add_row":
            return self.form.has_rows
        return True

    async def action_add_row(self) -> None:
        await self.form.add_row()

    def action_load_preset(self) -> None:
        """Pick a preset in a list (every family, the workspace's and the shipped ones) and load it."""
        entries = preset_entries(self.gapp.ws)

        def chosen(name: str | None) -> None:
            if name:
                self.load_named(name)

        picker = PresetPicker(entries, self.form.preset_choice)
        self.app.push_screen(picker, chosen)

    @on(Select.Changed, "#preset")
    def _preset_chosen(self, event: Select.Changed) -> None:
        if event.value is not Select.NULL:
            self.load_named(str(event.value))

    @on(Button.Pressed, "#load")
    def _load_pressed(self) -> None:
        name = self.form.preset_choice
        if name is None:
            self.action_load_preset()
        else:
            self.load_named(name)

    def load_named(self, name: str) -> None:
        """Read preset ``name``, list the code it names, then load it (asking first about local code)."""
        ws = self.gapp.ws

        def read() -> None:
            review = review_preset(name, ws)
            self.post_message(PresetReviewed(review, is_trusted(review)))

        self.gapp.run_task(read, name=f"read preset {name}", group="preset")

    def on_preset_reviewed(self, message: PresetReviewed) -> None:
        """Say what code the preset runs; ask before importing code that is not part of an installed package."""
        review = message.review
        if review.runnable:
            listed = "; ".join(c.describe() for c in review.runnable)
            self.notify(f"{review.path} runs code from: {listed}", markup=False, timeout=10)
        if not review.local_code or message.trusted:
            self._load_reviewed(review, allowed=False)
            return
        lines = "\n".join(f"  {c.describe()}" for c in review.runnable)
        question = (
            f"This preset runs Python code from:\n{lines}\n\nLoading it imports that code, which runs with your "
            "permissions. Allow? (Asked once for this file; asked again when it changes.)"
        )
        choices = [Choice("allow", "Allow", "a", "warning"), Choice("cancel", "Cancel", "c", "primary")]

        def answer(choice: str | None) -> None:
            if choice == "allow":
                self._load_reviewed(review, allowed=True)
            else:
                self.notify(f"{review.path}: not loaded; nothing was imported", markup=False)

        self.app.push_screen(ChoiceScreen(question, choices, title=f"Code named by {review.path.name}"), answer)

    def _load_reviewed(self, review: PresetReview, allowed: bool) -> None:
        """Validate the preset from the bytes that were reviewed (this imports its code), remembering an Allow."""

        def load() -> None:
            if allowed:
                trust(review)
            self.post_message(PresetLoaded(review.load(lambda line: None), review.sha256, review.raw))  # listed above

        self.notify(f"loading preset {review.path.stem} ...", markup=False)
        self.gapp.run_task(load, name=f"load preset {review.path.stem}", group="preset")

    async def on_preset_loaded(self, message: PresetLoaded) -> None:
        preset = message.preset
        await self.form.apply_document({**message.raw, "task": preset.task}, preset.name, preset, message.sha256)
        size = getattr(preset, "size", None) if self.fields else None
        runs = f" ({size} runs)" if size is not None else ""
        self.notify(f"loaded {preset.task} preset {preset.name}{runs}", markup=False)

    @on(Button.Pressed, "#launch")
    async def action_launch(self) -> None:
        if not self.gapp.writable():
            return
        await self.form.settled()  # a family switched in the picker may still be building
        draft = self.draft()
        try:
            preset = draft.launch_preset()
            slots = draft.slot_config()
            self._check_unchanged(preset)
        except GaptuiError as exc:
            self.notify(str(exc), severity="error", markup=False)
            return
        if self.gapp.launch(preset, slots, draft.retry_failed):
            self.gapp.switch_mode("runs")

    def _check_unchanged(self, preset: PresetBase) -> None:
        """Launching reads a family preset's file again: refuse a file changed since it was loaded (and reviewed)."""
        if preset is not self.family_preset or preset.path is None or not self.form.family_preset_sha256:
            return
        try:
            sha256 = hashlib.sha256(preset.path.read_bytes()).hexdigest()
        except OSError:
            sha256 = ""
        if sha256 != self.form.family_preset_sha256:
            raise GaptuiError(f"{preset.path} changed since it was loaded; load it again (^o) to launch it")

    @on(Button.Pressed, "#save")
    async def action_save(self) -> None:
        await self.form.settled()  # a family switched in the picker may still be building
        if not self.fields:
            where = f" ({self.family_preset.path})" if self.family_preset and self.family_preset.path else ""
            self.notify(f"{self.task_name} has no form: its presets are TOML files edited by hand{where}", markup=False)
            return
        draft = self.draft()
        try:
            name = draft.preset_name()
            document = draft.document()
        except GaptuiError as exc:
            self.notify(str(exc), severity="error", markup=False)
            return
        path = self.gapp.ws.presets / f"{name}.toml"
        if not path.exists():
            self._write_preset(name, document, overwrite=False)
            return

        def answer(choice: str | None) -> None:
            if choice == "yes":
                self._write_preset(name, document, overwrite=True)

        self.app.push_screen(confirm(f"{path} exists. Overwrite it?", "Save preset"), answer)

    def _write_preset(self, name: str, document: dict[str, Any], overwrite: bool) -> None:
        from gaptui.tui.messages import ManagerNotice

        ws = self.gapp.ws
        path = ws.presets / f"{name}.toml"

        def write() -> None:
            text = dump_document(document)
            # What `gaptui run --preset` will read back: refuse to save a preset it would refuse.
            parse_preset(tomllib.loads(text), path)
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                with open(path, "w" if overwrite else "x") as fh:
                    fh.write(text)
            except FileExistsError:
                raise GaptuiError(f"{path} appeared meanwhile; save again to choose whether to overwrite it") from None
            self.app.post_message(
                ManagerNotice(f"saved {path}; run it headless with: gaptui run --preset {path} -w {ws.root}")
            )

        self.gapp.run_task(write, name="save preset", group="preset")
