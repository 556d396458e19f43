"""ExperimentForm: the New-experiment form, one task family's grid as fields to fill in.

The family picker (``#task``) chooses the family; its form is built from the family's
:meth:`~engine.tasks.FamilyForm.fields` (widgets by field kind: :mod:`gaptui.tui.widgets.form_fields`), laid out
as section titles, checkbox lists side by side and short fields as cells of a grid, followed by the tune section
(tunable families), the device slots and whether to retry failed runs. Choices a field's registry computes
(``choices_from``) are loaded off the UI thread and kept per family for the next time it is shown. A family that
declares no fields shows a note on the preset it launches, once one is loaded.

:meth:`ExperimentForm.draft` reads what the form holds as a :class:`~gaptui.tui.planning.FormDraft` (which turns it
into a preset document and validates it); :meth:`ExperimentForm.apply_document` fills the form from a preset
document. The form posts :class:`ExperimentForm.Changed` whenever what it holds changes. It also holds the preset
list of the chosen family (``#preset``) and its Load button (``#load``); what choosing one does is its owner's.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, cast

from textual import on
from textual.app import ComposeResult
from textual.containers import Grid, Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.message import Message
from textual.widget import Widget
from textual.widgets import Button, Checkbox, Input, Label, Select, SelectionList, Static

from engine.errors import GaptuiError
from engine.tasks import FAMILIES, FormField, PresetBase, family, task_of
from gaptui.presets import preset_names, preset_task
from gaptui.tui.context import AppContext
from gaptui.tui.planning import COMMON_KEYS, FormDraft, default_values, form_fields_of
from gaptui.tui.widgets.form_fields import (
    DatasetRow,
    MultiField,
    RowsField,
    field_id,
    field_widget,
    read_widget,
    set_choice_options,
)
from gaptui.tune.form import space_text

#: Kinds laid out as cells of a grid (the others take a full line).
CELL_KINDS = ("int", "number", "seeds", "numbers", "text", "path", "choice")

# (input id, label, draft field, input type, placeholder) of the Device-slot fields.
SLOT_FIELDS = (
    ("gpus", "GPUs", "gpus", "text", "all · none · 0,1"),
    ("jobs-per-gpu", "runs per GPU", "jobs_per_gpu", "integer", ""),
    ("cpu-jobs", "CPU runs", "cpu_jobs", "integer", "auto"),
    ("backend", "backend", "backend", "text", "local · slurm"),
)

TUNE_SPACE_HINT = "lr = { log = [1e-4, 1e-2] }, layers = [3, 4, 5]"


@dataclass
class ChoicesLoaded(Message):
    """The choices a field's registry computed (``key``: the field, ``sub``: the sub-field of a rows field)."""

    task: str
    key: str
    sub: str
    choices: list[Any]


class ExperimentForm(VerticalScroll):
    """The chosen family's form, its name and description, tune section, device slots and retry switch."""

    DEFAULT_CSS = """
    ExperimentForm .line { height: 1; margin-bottom: 1; }
    ExperimentForm .line Label { width: auto; padding: 0 1 0 0; }
    ExperimentForm .line Select { width: 30; }
    ExperimentForm .line Input { width: 1fr; }
    ExperimentForm .line Button { margin-left: 1; }
    ExperimentForm #name { max-width: 24; }
    ExperimentForm #tune-form { height: auto; }
    ExperimentForm #tune-trials { max-width: 12; }
    ExperimentForm #family-form { height: auto; }
    ExperimentForm .choices { height: auto; }
    ExperimentForm .choices > Vertical { width: 1fr; height: auto; }
    ExperimentForm .fields { grid-size: 4; grid-gutter: 0 2; height: auto; }
    Screen.-wide ExperimentForm .fields { grid-size: 8; }
    ExperimentForm .field { height: 2; }
    ExperimentForm .field Label { color: $text-muted; }
    ExperimentForm #retry-failed { margin-top: 1; }
    ExperimentForm #family-note { height: auto; margin-bottom: 1; color: $text-muted; }
    """
    # Its grids widen with the screen (the ``-wide`` breakpoint is the screen's class): not scoped to the form.
    SCOPED_CSS = False

    class Changed(Message):
        """What the form holds changed: a field edited, a row added or removed, another family or preset shown."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        #: The family the form launches (first: the registry's first, alignment among the built-ins; the picker
        #: and a loaded preset change it), its form fields (none: a preset file is launched as loaded).
        self.task_name = FAMILIES.names()[0]
        self.fields: tuple[FormField, ...] = ()
        #: The preset document the form was loaded from (what no field shows is saved back as it was).
        self.base: dict[str, Any] = {}
        #: For a family without form fields, the preset chosen for it.
        self.family_preset: PresetBase | None = None
        #: SHA-256 of the file :attr:`family_preset` was loaded from (launching re-reads that file).
        self.family_preset_sha256 = ""
        #: Choices computed by the fields' registries: (task, field key, sub-field key) -> choices.
        self._choices: dict[tuple[str, str, str], list[Any]] = {}
        #: The family whose form is drawn, every field and row composed (None while a family's form is built).
        self.built_task: str | None = None
        #: Held while the form's widgets are replaced, added or removed. The form is changed from more than one
        #: message queue (its own, its screen's, a caller's), so each change waits for the one under way, and
        #: nothing reads a form half built.
        self._rebuilding = asyncio.Lock()

    @property
    def gapp(self) -> AppContext:
        return cast(AppContext, self.app)

    def compose(self) -> ComposeResult:
        with Horizontal(classes="line"):
            yield Label("task")
            yield Select(
                [(f.name, f.name) for f in FAMILIES],
                value=self.task_name,
                id="task",
                compact=True,
                allow_blank=False,
            )
            yield Label(" preset")
            yield Select(self._preset_options(), prompt="load a preset ...", id="preset", compact=True)
            yield Button("Load ^o", id="load", compact=True)
        yield Static("", id="family-note", markup=False)
        with Horizontal(classes="line", id="name-line"):
            yield Label("name")
            yield Input("tui", id="name", compact=True, tooltip="preset name (file name when saved)")
            yield Label(" description")
            yield Input(placeholder="what this grid is for", id="description", compact=True)
        yield Vertical(id="family-form")
        with Vertical(id="tune-form"):
            yield Static("Tuning (gaptui tune --preset NAME, once saved)", classes="section-title")
            with Horizontal(classes="line"):
                yield Label("trials per row")
                yield Input(placeholder="blank: no [tune]", id="tune-trials", type="integer", compact=True)
                yield Label(" space")
                yield Input(placeholder=TUNE_SPACE_HINT, id="tune-space", compact=True)
        yield Static("Device slots", classes="section-title")
        with Grid(classes="fields"):
            for input_id, label, attr, kind, hint in SLOT_FIELDS:
                value = str(getattr(FormDraft(self.task_name), attr))
                box = Input(value, placeholder=hint, id=input_id, type=kind, compact=True)  # type: ignore[arg-type]
                yield Vertical(Label(label), box, classes="field")
        yield Checkbox("retry runs that failed before", False, id="retry-failed", compact=True)

    def _preset_options(self) -> list[tuple[Content, str]]:
        """The presets (bundled and the workspace's) of the chosen family."""
        options = []
        for name in preset_names(self.gapp.ws):
            try:
                task = preset_task(name, self.gapp.ws)
            except GaptuiError:
                continue  # a broken file: loading it by name reports why
            if task == self.task_name:
                options.append((Content(name), name))
        return options

    @property
    def preset_choice(self) -> str | None:
        """The preset chosen in the list (None: none chosen)."""
        value = self.query_one("#preset", Select).value
        return None if value is Select.NULL else str(value)

    @property
    def has_rows(self) -> bool:
        """Whether the family's form has a rows field (^n adds a row to it)."""
        return any(spec.kind == "rows" for spec in self.fields)

    # -------------------------------------------------------------------------------------- the family's form

    @on(Select.Changed, "#task")
    async def _task_chosen(self, event: Select.Changed) -> None:
        async with self._rebuilding:
            if event.value is Select.NULL or event.value == self.task_name:
                return
            self.task_name = str(event.value)
            self.family_preset = None
            self.base = {}
            with self.prevent(Select.Changed):
                self.query_one("#preset", Select).set_options(self._preset_options())
            await self._build()
        self.post_message(self.Changed())

    async def show_family(self) -> None:
        """Build the chosen family's form (its fields' defaults), or, for a family without fields, a note on the
        preset to launch."""
        async with self._rebuilding:
            await self._build()

    async def settled(self) -> None:
        """Return once no rebuild of the form is under way (what it holds can then be read whole)."""
        async with self._rebuilding:
            pass

    def settled_draft(self) -> FormDraft | None:
        """:meth:`draft`, or None while the form is being rebuilt (it posts :class:`Changed` once it is)."""
        return None if self._rebuilding.locked() else self.draft()

    async def _build(self, values: dict[str, Any] | None = None) -> None:
        """Build the chosen family's form holding ``values`` (typed; default: the fields' defaults), or, for a
        family without fields, a note on the preset to launch (the caller holds :attr:`_rebuilding`)."""
        self.built_task = None
        fam = family(self.task_name)
        self.fields = () if fam.form is None else fam.form.fields()
        self.query_one("#tune-form").display = bool(self.fields and fam.tunable)
        self.screen.refresh_bindings()  # ^n adds a row only to a form with rows
        container = self.query_one("#family-form", Vertical)
        await container.remove_children()
        self.query_one("#name-line").display = bool(self.fields)
        note = self.query_one("#family-note", Static)
        if not self.fields:
            if self.family_preset is None:
                note.update(f"{fam.name}: {fam.title}. It has no form: choose one of its presets and load it (^o).")
            else:
                preset = self.family_preset
                about = preset.description or "no description"
                note.update(f"{fam.name}: preset {preset.name} ({preset.path}) — {about}")
            self.built_task = fam.name
            return
        note.update(f"{fam.name}: {fam.title}")
        shown = form_fields_of(default_values(self.fields) if values is None else values, self.fields)
        await container.mount_all(list(self._layout(self.fields, shown)))  # returns once every row is composed
        self._fill_choices()
        self.built_task = fam.name

    def _layout(self, fields: tuple[FormField, ...], values: dict[str, Any]) -> list[Widget]:
        """Section titles; consecutive checkbox lists side by side; short fields as cells of a grid."""
        out: list[Widget] = []
        section = None
        i = 0
        while i < len(fields):
            spec = fields[i]
            if spec.kind == "multi":
                group, titles = [], set()
                while i < len(fields) and fields[i].kind == "multi":
                    # a column's title is its section, or its own label when a column beside it has that section
                    title = fields[i].section or fields[i].label
                    if title in titles:
                        title = fields[i].label[:1].upper() + fields[i].label[1:]
                    titles.add(title)
                    group.append(
                        Vertical(Static(title, classes="section-title", markup=False), self._widget(fields[i], values))
                    )
                    section = fields[i].section
                    i += 1
                out.append(Horizontal(*group, classes="choices"))
                continue
            if spec.section != section:
                section = spec.section
                out.append(Static(section or spec.label, classes="section-title", markup=False))
            if spec.kind in CELL_KINDS:
                cells = []
                while i < len(fields) and fields[i].kind in CELL_KINDS and fields[i].section == section:
                    cells.append(
                        Vertical(Label(fields[i].label, markup=False), self._widget(fields[i], values), classes="field")
                    )
                    i += 1
                out.append(Grid(*cells, classes="fields"))
                continue
            if spec.kind in ("params", "bool"):
                label = [] if spec.kind == "bool" else [Label(spec.label, markup=False)]
                out.append(Horizontal(*label, self._widget(spec, values), classes="line"))
            else:
                out.append(self._widget(spec, values))
            i += 1
        return out

    @staticmethod
    def _widget(spec: FormField, values: dict[str, Any]) -> Widget:
        return field_widget(spec, values.get(spec.key))

    def _field(self, spec: FormField) -> Widget:
        """The widget of a top-level field."""
        if spec.kind == "multi":
            return self.query_one(f"#{field_id(spec.key)}-field", MultiField)
        return self.query_one(f"#{field_id(spec.key)}")

    def _fill_choices(self) -> None:
        """Choices of fields computed by registries: the known ones now, the others from a worker."""
        task, missing = self.task_name, []
        for spec in self.fields:
            for sub in (spec, *spec.fields):
                if sub.choices_from is None:
                    continue
                key = (task, spec.key, "" if sub is spec else sub.key)
                if key in self._choices:
                    self._set_choices(*key, self._choices[key])
                else:
                    missing.append((key, sub.choices_from))
        if missing:

            def load() -> None:
                for key, compute in missing:
                    self.post_message(ChoicesLoaded(*key, list(compute())))

            self.gapp.run_task(load, name="form choices", group="choices")

    async def on_choices_loaded(self, message: ChoicesLoaded) -> None:
        async with self._rebuilding:
            self._choices[(message.task, message.key, message.sub)] = message.choices
            if message.task == self.task_name:
                self._set_choices(message.task, message.key, message.sub, message.choices)

    def _set_choices(self, task: str, key: str, sub: str, choices: list[Any]) -> None:
        spec = next((s for s in self.fields if s.key == key), None)
        if spec is None:
            return
        widget = self._field(spec)
        if isinstance(widget, RowsField):
            widget.set_choices(sub, choices)
        elif isinstance(widget, MultiField):
            widget.set_choices(choices)
        elif isinstance(widget, Select):
            set_choice_options(spec, widget, choices)

    # -------------------------------------------------------------------------------------- what it holds

    def draft(self) -> FormDraft:
        """The form as typed."""

        def text(input_id: str) -> str:
            return self.query_one(f"#{input_id}", Input).value

        return FormDraft(
            task=self.task_name,
            name=text("name"),
            description=text("description"),
            fields={spec.key: read_widget(spec, self._field(spec)) for spec in self.fields},
            base=dict(self.base),
            retry_failed=self.query_one("#retry-failed", Checkbox).value,
            tune_trials=text("tune-trials"),
            tune_space=text("tune-space"),
            family_preset=self.family_preset,
            **{attr: text(input_id) for input_id, _, attr, _, _ in SLOT_FIELDS},
        )

    async def apply_document(
        self, raw: dict[str, Any], name: str, preset: PresetBase | None = None, sha256: str = ""
    ) -> None:
        """Fill the form with a preset document (its family's form values; the device slots stay), in one rebuild.

        For a family without form fields the form launches ``preset``, the document parsed, read from a file of
        SHA-256 ``sha256`` (launching reads that file again)."""
        task = task_of(raw)  # a preset written before families names none: the legacy family's
        async with self._rebuilding:
            if task != self.task_name:
                with self.prevent(Select.Changed):
                    self.query_one("#task", Select).value = task
                    self.task_name = task
                    self.query_one("#preset", Select).set_options(self._preset_options())
            fam = family(task)
            body = {k: v for k, v in raw.items() if k not in (*COMMON_KEYS, "slurm")}
            values = fam.form.form_values(body) if fam.form is not None and fam.form.fields() else None
            self.base = dict(raw)
            self.family_preset = preset if values is None else None
            self.family_preset_sha256 = sha256 if values is None else ""
            await self._build(values)
            self.query_one("#name", Input).value = name
            self.query_one("#description", Input).value = str(raw.get("description", ""))
            tune = raw.get("tune") if isinstance(raw.get("tune"), dict) else {}
            self.query_one("#tune-trials", Input).value = str(tune.get("trials", ""))
            space = tune.get("space")
            self.query_one("#tune-space", Input).value = space_text(space) if isinstance(space, dict) else ""
        self.post_message(self.Changed())

    @on(Input.Changed)
    @on(Select.Changed)
    @on(SelectionList.SelectedChanged)
    @on(Checkbox.Changed)
    @on(RowsField.Changed)
    def _edited(self, event: Message) -> None:
        if isinstance(event, Select.Changed) and event.select.id in ("preset", "task"):
            return
        self.post_message(self.Changed())

    async def add_row(self) -> None:
        """A new row in the form's rows field (a copy of its last row), if it has one."""
        async with self._rebuilding:
            rows = list(self.query(RowsField))
            if not rows:
                return
            await rows[0].add_row()
        self.post_message(self.Changed())

    @on(DatasetRow.Removed)
    async def _remove_row(self, event: DatasetRow.Removed) -> None:
        async with self._rebuilding:
            await event.row.remove()
        self.post_message(self.Changed())
