"""NewExperimentScreen: pick a task family, compose or load its grid, see what it costs, launch or save it.

The form is built from the chosen family's :meth:`~engine.tasks.FamilyForm.fields` (widgets by field kind:
:mod:`gaptui.tui.widgets.form_fields`); what it holds becomes a preset document through the family's
:meth:`~engine.tasks.FamilyForm.preset_from_form` and is validated like a preset file, so a form error reads
like a preset error. A family that declares no fields launches one of its preset files as loaded.

The summary line (grid size, runs in history, estimated time) is computed off the UI thread, a newer edit
superseding it, and quitting never waits for it. A grid over :data:`~gaptui.tui.planning.MAX_GRID_RUNS` runs is
refused there and by Launch from its counted size, before any of it is built.

Loading a preset (the preset list, ^o's picker, or the command palette's "Load preset NAME") lists the Python code
it names (``module.path:Name`` import paths) before importing any; code that is not part of an installed package
is imported only once the user allowed it for that file (asked once per file content, remembered in the
workspace: :mod:`gaptui.preset_code`).
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, TypeVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.message import Message
from textual.timer import Timer
from textual.widget import Widget
from textual.widgets import Button, Checkbox, Input, Label, Select, SelectionList, Static
from textual.worker import get_current_worker

from engine.errors import GaptuiError
from engine.tasks import FAMILIES, FormField, PresetBase, family, task_of
from gaptui.preset_code import PresetReview, is_trusted, review_preset, trust
from gaptui.presets import dump_document, parse_preset, preset_entries, preset_names, preset_task
from gaptui.tui.planning import (
    COMMON_KEYS,
    MAX_GRID_RUNS,
    FormDraft,
    PlanSummary,
    check_grid_size,
    default_values,
    form_fields_of,
    over_limit,
    summarize,
)
from gaptui.tui.screens.confirm import Choice, ChoiceScreen, confirm
from gaptui.tui.screens.preset_picker import PresetPicker
from gaptui.tui.screens.section import SectionScreen
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

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

#: Seconds of quiet after an edit before the grid summary is recomputed.
PLAN_DELAY = 0.3
#: Kinds laid out as cells of a grid (the others take a full line).
CELL_KINDS = ("int", "number", "seeds", "numbers", "text", "path", "choice")
#: Seconds between two looks at whether a computation waited for is still wanted.
POLL = 0.05

T = TypeVar("T")


class OneAtATime:
    """Runs one computation at a time on a daemon thread; waiting for it ends as soon as ``cancelled()`` says so.

    A thread worker waiting here is never stuck in work nobody wants: superseded (an exclusive worker of its group
    started after it) or quitting (Textual cancels every worker), it returns None at once, and the computation it
    leaves ends on its own without holding up the process's exit (the thread is a daemon). The next computation
    starts once the one left behind ended, so superseded computations never pile up."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def run(self, compute: Callable[[], T], cancelled: Callable[[], bool]) -> T | None:
        """What ``compute()`` returns (or raises), else None when cancelled before it finished."""
        box: dict[str, Any] = {}

        def target() -> None:
            try:
                box["value"] = compute()
            except Exception as exc:  # raised again in the waiting worker, which reports it
                box["error"] = exc

        thread = threading.Thread(target=target, name=self.name, daemon=True)
        while True:
            with self._lock:
                busy = self._thread
                if busy is None or not busy.is_alive():
                    self._thread = thread
                    thread.start()
                    break
            if cancelled():
                return None
            busy.join(POLL)
        while thread.is_alive():
            if cancelled():
                return None
            thread.join(POLL)
        if "error" in box:
            raise box["error"]
        return box.get("value")


@dataclass
class PlanComputed(Message):
    """The summary of the grid the form describes (or why the form does not describe one yet)."""

    summary: PlanSummary | None
    error: str = ""


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


@dataclass
class ChoicesLoaded(Message):
    """The choices a field's registry computed (``key``: the field, ``sub``: the sub-field of a rows field)."""

    task: str
    key: str
    sub: str
    choices: list[Any]


# (input id, label, draft field, input type, placeholder) of the Device-slot fields.
SLOT_FIELDS = (
    ("gpus", "GPUs", "gpus", "text", "all · none · 0,1"),
    ("jobs-per-gpu", "runs per GPU", "jobs_per_gpu", "integer", ""),
    ("cpu-jobs", "CPU runs", "cpu_jobs", "integer", "auto"),
    ("backend", "backend", "backend", "text", "local · slurm"),
)


TUNE_SPACE_HINT = "lr = { log = [1e-4, 1e-2] }, layers = [3, 4, 5]"


class NewExperimentScreen(SectionScreen):
    """The form; its summary line updates as you type: grid size, runs already in history, estimated time."""

    TITLE = "New experiment"
    BINDINGS: ClassVar[list[Binding]] = [
        Binding("ctrl+l", "launch", "Launch"),
        Binding("ctrl+s", "save", "Save preset"),
        Binding("ctrl+o", "load_preset", "Load preset"),
        Binding("ctrl+n", "add_row", "Add dataset"),
    ]
    DEFAULT_CSS = """
    NewExperimentScreen #form { height: 1fr; padding: 0 1; }
    NewExperimentScreen .line { height: 1; margin-bottom: 1; }
    NewExperimentScreen .line Label { width: auto; padding: 0 1 0 0; }
    NewExperimentScreen .line Select { width: 30; }
    NewExperimentScreen .line Input { width: 1fr; }
    NewExperimentScreen .line Button { margin-left: 1; }
    NewExperimentScreen #name { max-width: 24; }
    NewExperimentScreen #tune-form { height: auto; }
    NewExperimentScreen #tune-trials { max-width: 12; }
    NewExperimentScreen #family-form { height: auto; }
    NewExperimentScreen .choices { height: auto; }
    NewExperimentScreen .choices > Vertical { width: 1fr; height: auto; }
    NewExperimentScreen .fields { grid-size: 4; grid-gutter: 0 2; height: auto; }
    NewExperimentScreen.-wide .fields { grid-size: 8; }
    NewExperimentScreen .field { height: 2; }
    NewExperimentScreen .field Label { color: $text-muted; }
    NewExperimentScreen #retry-failed { margin-top: 1; }
    NewExperimentScreen #family-note { height: auto; margin-bottom: 1; color: $text-muted; }
    NewExperimentScreen #launch-bar { dock: bottom; height: 3; padding: 0 1; background: $boost; }
    NewExperimentScreen #plan { width: 1fr; height: 3; content-align: left middle; }
    NewExperimentScreen #plan.error { color: $error; }
    NewExperimentScreen #launch-bar Button { margin-left: 1; }
    """

    def __init__(self) -> None:
        super().__init__()
        self._plan_timer: Timer | None = None
        self.summary: PlanSummary | None = None
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
        #: Where the grid summary is computed (one at a time; quitting never waits for it).
        self._summaries = OneAtATime("grid summary")
        #: The family whose form is drawn, every field and row composed (None while a family's form is built).
        self.built_task: str | None = None

    def compose_body(self) -> ComposeResult:
        with VerticalScroll(id="form"):
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
        with Horizontal(id="launch-bar"):
            yield Static("", id="plan", markup=False)
            yield Button("Launch ^l", id="launch", variant="success")
            yield Button("Save ^s", id="save", variant="primary")

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

    async def on_mount(self) -> None:
        self.ready = True
        await self._show_family()
        if self.gapp.read_only:
            self.query_one("#launch", Button).disabled = True
        self._schedule_plan()

    def records_changed(self, hashes: set[str]) -> None:
        # What the grid overlaps with in history changed; recompute only while the form is on screen.
        if self.ready and self.is_current:
            self._schedule_plan()

    def on_screen_resume(self) -> None:
        self._schedule_plan()

    # -------------------------------------------------------------------------------------- the family's form

    @on(Select.Changed, "#task")
    async def _task_chosen(self, event: Select.Changed) -> None:
        if event.value is not Select.NULL and event.value != self.task_name:
            self.task_name = str(event.value)
            self.family_preset = None
            self.base = {}
            with self.prevent(Select.Changed):
                self.query_one("#preset", Select).set_options(self._preset_options())
            await self._show_family()
            self._schedule_plan()

    async def _show_family(self, values: dict[str, Any] | None = None) -> None:
        """Build the chosen family's form holding ``values`` (typed; default: the fields' defaults), or, for a
        family without fields, a note on the preset to launch."""
        self.built_task = None
        fam = family(self.task_name)
        self.fields = () if fam.form is None else fam.form.fields()
        self.query_one("#tune-form").display = bool(self.fields and fam.tunable)
        self.refresh_bindings()  # ^n adds a row only to a form with rows
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

    def on_choices_loaded(self, message: ChoicesLoaded) -> None:
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

    # -------------------------------------------------------------------------------------- the draft

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
            **{attr: text(input_id) for input_id, _, attr, _, _ in SLOT_FIELDS},
        )

    async def apply_document(self, raw: dict[str, Any], name: str) -> None:
        """Fill the form with a preset document (its family's form values; the device slots stay)."""
        task = task_of(raw)  # a preset written before families names none: the legacy family's
        if task != self.task_name:
            with self.prevent(Select.Changed):
                self.query_one("#task", Select).value = task
                self.task_name = task
                self.query_one("#preset", Select).set_options(self._preset_options())
        fam = family(task)
        body = {k: v for k, v in raw.items() if k not in (*COMMON_KEYS, "slurm")}
        values = fam.form.form_values(body) if fam.form is not None and fam.form.fields() else None
        self.base = dict(raw)
        self.family_preset = None
        await self._show_family(values)
        self.query_one("#name", Input).value = name
        self.query_one("#description", Input).value = str(raw.get("description", ""))
        tune = raw.get("tune") if isinstance(raw.get("tune"), dict) else {}
        self.query_one("#tune-trials", Input).value = str(tune.get("trials", ""))
        space = tune.get("space")
        self.query_one("#tune-space", Input).value = space_text(space) if isinstance(space, dict) else ""
        self._schedule_plan()

    # -------------------------------------------------------------------------------------- the summary line

    @on(Input.Changed)
    @on(Select.Changed)
    @on(SelectionList.SelectedChanged)
    @on(Checkbox.Changed)
    @on(RowsField.Changed)
    def _form_changed(self, event: Message) -> None:
        if isinstance(event, Select.Changed) and event.select.id in ("preset", "task"):
            return
        self._schedule_plan()

    def _schedule_plan(self) -> None:
        if self._plan_timer is not None:
            self._plan_timer.stop()
        self._plan_timer = self.set_timer(PLAN_DELAY, self._start_plan)

    def _start_plan(self) -> None:
        draft = self.draft()
        records = dict(self.gapp.book.records)  # a snapshot: the book's records are replaced, never mutated
        self.gapp.run_task(lambda: self._plan(draft, records), name="grid summary", group="plan", exclusive=True)

    def _plan(self, draft: FormDraft, records: dict[str, dict[str, Any]]) -> None:
        """The grid summary of ``draft`` (a thread worker, exclusive in its group: a newer edit supersedes it).

        A grid over :data:`~gaptui.tui.planning.MAX_GRID_RUNS` runs is refused from its counted size, before any
        of it is built; the rest (the preset, the grid, the estimate) is computed by :attr:`_summaries`, which this
        worker stops waiting for once it is superseded or the app quits."""
        worker = get_current_worker()

        def cancelled() -> bool:
            return worker.is_cancelled

        try:
            if self._has_form(draft):
                bound, widest = draft.grid_bound()  # counted, nothing listed: at once whatever was typed
                if widest > MAX_GRID_RUNS:
                    raise GaptuiError(over_limit(bound))
            summary = self._summaries.run(lambda: self._summary(draft, records, cancelled), cancelled)
            message = None if summary is None else PlanComputed(summary)
        except GaptuiError as exc:
            message = PlanComputed(None, str(exc))
        if message is not None and not worker.is_cancelled:
            self.post_message(message)

    def _summary(
        self, draft: FormDraft, records: dict[str, dict[str, Any]], cancelled: Callable[[], bool]
    ) -> PlanSummary | None:
        """What :meth:`_plan` shows: the grid's size, its overlap with history and the estimate (None: superseded
        between two steps)."""
        from gaptui.launch import plan

        preset = self._chosen_preset(draft)  # refuses a grid over the limit from its size, before it is built
        slots = draft.slot_config().slots()
        if cancelled():
            return None
        known = {h: str(r.get("status")) for h, r in records.items()}
        # One expansion of the grid for both the counts and the estimate; failed runs count as to run.
        grid_plan = plan(preset, self.gapp.ws, known, retry_failed=True)
        if cancelled():
            return None
        summary = summarize(grid_plan.specs, records, len(slots))
        if summary.to_run and not cancelled():
            summary = self._measured(summary, grid_plan, slots, records)
        return None if cancelled() else summary

    def _measured(
        self, summary: PlanSummary, grid_plan: Any, slots: list[Any], records: dict[str, dict[str, Any]]
    ) -> PlanSummary:
        """``summary`` with the estimate of ``gaptui run --dry-run`` where this machine's calibration (cached by
        an earlier dry run) and history cover every run left; measuring here would stall the form."""
        from gaptui.estimate import estimate_from_cache

        ws, pack = self.gapp.ws, grid_plan.preset.pack_seeds
        found = estimate_from_cache(grid_plan, slots, ws, records.values(), pack)
        if found is None:
            return summary
        measured = any(r.source.startswith("calibration") for r in found.runs)
        notes = [f"{len(found.runs)} of {len(found.runs) + len(found.missing)} runs"] if found.missing else []
        notes += [f"calibration {found.stale[0]}: the dry run measures again"] if found.stale else []
        return replace(
            summary,
            estimate_seconds=found.plan.wall,
            estimate_source="measured" if measured else "history",
            estimate_note="; ".join(notes),
        )

    def on_plan_computed(self, message: PlanComputed) -> None:
        self.summary = message.summary
        plan = self.query_one("#plan", Static)
        plan.set_class(message.summary is None, "error")
        plan.update(message.summary.text() if message.summary else message.error)

    def _chosen_preset(self, draft: FormDraft) -> PresetBase:
        """The grid to launch: the form's, or for a family without a form the loaded preset; either refused when
        its size (counted from its axes, the grid never built) is over the limit."""
        if self._has_form(draft):
            return draft.preset()
        if self.family_preset is None:
            raise GaptuiError(f"choose a preset of task {draft.task} and load it (^o)")
        check_grid_size(getattr(self.family_preset, "size", None))
        return self.family_preset

    @staticmethod
    def _has_form(draft: FormDraft) -> bool:
        return bool(draft.form_fields())

    # -------------------------------------------------------------------------------------- actions

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "add_row":
            return any(spec.kind == "rows" for spec in self.fields)
        return True

    async def action_add_row(self) -> None:
        rows = list(self.query(RowsField))
        if rows:
            await rows[0].add_row()
            self._schedule_plan()

    @on(DatasetRow.Removed)
    async def _remove_row(self, event: DatasetRow.Removed) -> None:
        await event.row.remove()
        self._schedule_plan()

    def action_load_preset(self) -> None:
        """Pick a preset in a list (every family, the workspace's and the shipped ones) and load it."""
        current = self.query_one("#preset", Select).value
        entries = preset_entries(self.gapp.ws)

        def chosen(name: str | None) -> None:
            if name:
                self.load_named(name)

        picker = PresetPicker(entries, None if current is Select.NULL else str(current))
        self.app.push_screen(picker, chosen)

    @on(Select.Changed, "#preset")
    def _preset_chosen(self, event: Select.Changed) -> None:
        if event.value is not Select.NULL:
            self.load_named(str(event.value))

    @on(Button.Pressed, "#load")
    def _load_pressed(self) -> None:
        name = self.query_one("#preset", Select).value
        if name is Select.NULL:
            self.action_load_preset()
        else:
            self.load_named(str(name))

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
        await self.apply_document({**message.raw, "task": preset.task}, preset.name)
        if self.fields:
            size = getattr(preset, "size", None)
            runs = f" ({size} runs)" if size is not None else ""
            self.notify(f"loaded {preset.task} preset {preset.name}{runs}", markup=False)
            return
        self.family_preset = preset
        self.family_preset_sha256 = message.sha256
        await self._show_family()
        self._schedule_plan()
        self.notify(f"loaded {preset.task} preset {preset.name}", markup=False)

    @on(Button.Pressed, "#launch")
    def action_launch(self) -> None:
        if not self.gapp.writable():
            return
        draft = self.draft()
        try:
            preset = self._chosen_preset(draft)
            slots = draft.slot_config()
            self._check_unchanged(preset)
        except GaptuiError as exc:
            self.notify(str(exc), severity="error", markup=False)
            return
        if self.gapp.launch(preset, slots, draft.retry_failed):
            self.gapp.switch_mode("runs")

    def _check_unchanged(self, preset: PresetBase) -> None:
        """Launching reads a family preset's file again: refuse a file changed since it was loaded (and reviewed)."""
        if preset is not self.family_preset or preset.path is None or not self.family_preset_sha256:
            return
        try:
            sha256 = hashlib.sha256(preset.path.read_bytes()).hexdigest()
        except OSError:
            sha256 = ""
        if sha256 != self.family_preset_sha256:
            raise GaptuiError(f"{preset.path} changed since it was loaded; load it again (^o) to launch it")

    @on(Button.Pressed, "#save")
    def action_save(self) -> None:
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
