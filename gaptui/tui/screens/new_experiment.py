"""NewExperimentScreen: pick a task family, compose or load its grid, see what it costs, launch or save it.

For the alignment family the form composes the grid (datasets x noise x models x seeds); other families launch
one of their preset files (the form shows its description and size, and the device slots).

Loading a preset lists the Python code it names (``module.path:Name`` import paths) before importing any; code
that is not part of an installed package is imported only once the user allowed it for that file (asked once per
file content, remembered in the workspace: :mod:`gaptui.preset_code`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.message import Message
from textual.timer import Timer
from textual.widgets import Button, Checkbox, Input, Label, Select, SelectionList, Static
from textual.widgets.selection_list import Selection
from textual.worker import get_current_worker

from engine.errors import GaptuiError
from engine.tasks import DEFAULT_TASK, FAMILIES, PresetBase
from gaptui.preset_code import PresetReview, is_trusted, review_preset, trust
from gaptui.presets import Preset, dump_preset, parse_preset, preset_names, preset_task
from gaptui.tui.planning import (
    PAPER_NOISE,
    DatasetDraft,
    ExperimentDraft,
    PlanSummary,
    draft_from_preset,
    format_noise_percent,
    noise_key,
    parse_noise_levels,
    summarize,
)
from gaptui.tui.screens.confirm import Choice, ChoiceScreen, confirm
from gaptui.tui.screens.section import SectionScreen
from gaptui.tui.widgets.dataset_row import DatasetRow

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

#: Seconds of quiet after an edit before the grid summary is recomputed.
PLAN_DELAY = 0.3


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
    """A preset file was read and validated (of any family); ``sha256``: of the file content it was parsed from."""

    preset: PresetBase
    sha256: str = ""


@dataclass
class ModelNames(Message):
    """The registered model names (the registry imports torch, so it is read in a worker)."""

    names: list[str]


# (input id, label, draft field, input type, placeholder) of the Training and Device-slot fields.
RUN_FIELDS = (
    ("seeds", "seeds", "seeds", "text", "0-9 or 0,3"),
    ("epochs", "epochs", "epochs", "integer", ""),
    ("batch-size", "batch size", "batch_size", "integer", ""),
    ("budget", "param budget", "budget", "integer", ""),
    ("out-dim", "out dim", "out_dim", "integer", "per dataset"),
    ("eval-every", "eval every", "eval_every", "integer", "epochs"),
    ("timeout", "timeout (s)", "timeout", "number", "none"),
    ("retries", "retries", "retries", "integer", "on failure"),
)
SLOT_FIELDS = (
    ("gpus", "GPUs", "gpus", "text", "all · none · 0,1"),
    ("jobs-per-gpu", "runs per GPU", "jobs_per_gpu", "integer", ""),
    ("cpu-jobs", "CPU runs", "cpu_jobs", "integer", "auto"),
    ("backend", "backend", "backend", "text", "local · slurm"),
)


class NewExperimentScreen(SectionScreen):
    """The form; its summary line updates as you type: grid size, runs already in history, estimated time."""

    TITLE = "New experiment"
    BINDINGS: ClassVar[list[Binding]] = [
        Binding("ctrl+l", "launch", "Launch"),
        Binding("ctrl+s", "save", "Save preset"),
        Binding("ctrl+o", "load_preset", "Load preset"),
        Binding("ctrl+g", "paper_grid", "Paper noise grid"),
        Binding("ctrl+n", "add_dataset", "Add dataset"),
    ]
    DEFAULT_CSS = """
    NewExperimentScreen #form { height: 1fr; padding: 0 1; }
    NewExperimentScreen .line { height: 1; margin-bottom: 1; }
    NewExperimentScreen .line Label { width: auto; padding: 0 1 0 0; }
    NewExperimentScreen .line Select { width: 30; }
    NewExperimentScreen .line Input { width: 1fr; }
    NewExperimentScreen .line Button { margin-left: 1; }
    NewExperimentScreen #name { max-width: 24; }
    NewExperimentScreen #datasets { height: auto; }
    NewExperimentScreen #choices { height: auto; }
    NewExperimentScreen #choices > Vertical { width: 1fr; height: auto; }
    NewExperimentScreen SelectionList { height: auto; max-height: 12; }
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
        from engine.alignment.noise import NOISE_MODELS
        from engine.sources import SOURCES

        super().__init__()
        self._bases = SOURCES.names()
        self._noise_models = NOISE_MODELS
        self._plan_timer: Timer | None = None
        self._models: list[str] = []
        self._pending_draft: ExperimentDraft | None = None
        self.summary: PlanSummary | None = None
        #: The family the form launches; for families other than alignment, the preset chosen for it.
        self.task_name = DEFAULT_TASK
        self.family_preset: PresetBase | None = None
        #: SHA-256 of the file :attr:`family_preset` was loaded from (launching re-reads that file).
        self.family_preset_sha256 = ""

    def compose_body(self) -> ComposeResult:
        draft = ExperimentDraft()
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
            with Vertical(id="alignment-form"):
                yield from self._alignment_form(draft)
            yield Static("Device slots", classes="section-title")
            with Grid(classes="fields"):
                for input_id, label, attr, kind, hint in SLOT_FIELDS:
                    yield self._field(input_id, label, str(getattr(draft, attr)), kind, hint)
            yield Checkbox("retry runs that failed before", draft.retry_failed, id="retry-failed", compact=True)
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

    def _alignment_form(self, draft: ExperimentDraft) -> ComposeResult:
        """The grid editor of the alignment family."""
        with Horizontal(classes="line"):
            yield Label("name")
            yield Input(draft.name, id="name", compact=True, tooltip="preset name (file name when saved)")
            yield Label(" description")
            yield Input(draft.description, placeholder="what this grid is for", id="description", compact=True)
        yield Static(
            "Base datasets: base · parameters key=value · noise model · train · val · seed",
            classes="section-title",
        )
        yield Vertical(*(self._row(d) for d in draft.datasets), id="datasets")
        yield Button("+ dataset ^n", id="add-dataset", compact=True)
        with Horizontal(id="choices"):
            with Vertical():
                yield Static("Noise levels η (^g: paper grid)", classes="section-title")
                yield SelectionList[float](
                    *(Selection(format_noise_percent(n), n, n in draft.noise) for n in PAPER_NOISE), id="noise"
                )
                with Horizontal(classes="line"):
                    yield Input(placeholder="more levels: 0.1 or 10%", id="noise-extra", compact=True)
                    yield Button("Add", id="noise-add", compact=True)
            with Vertical():
                yield Static("Models (laplacian: no training)", classes="section-title")
                yield SelectionList[str](id="models")
        yield Static("Training", classes="section-title")
        with Grid(classes="fields"):
            for input_id, label, attr, kind, hint in RUN_FIELDS:
                yield self._field(input_id, label, str(getattr(draft, attr)), kind, hint)

    def _row(self, draft: DatasetDraft) -> DatasetRow:
        return DatasetRow(draft, self._bases, self._noise_models)

    @staticmethod
    def _field(input_id: str, label: str, value: str, kind: str, hint: str) -> Vertical:
        box = Input(value, placeholder=hint, id=input_id, type=kind, compact=True)  # type: ignore[arg-type]
        return Vertical(Label(label), box, classes="field")

    def on_mount(self) -> None:
        self.ready = True
        self._show_family()
        self.gapp.run_task(self._load_model_names, name="model names", group="model-names")
        if self.gapp.read_only:
            self.query_one("#launch", Button).disabled = True
        self._schedule_plan()

    def records_changed(self, hashes: set[str]) -> None:
        # What the grid overlaps with in history changed; recompute only while the form is on screen.
        if self.ready and self.is_current:
            self._schedule_plan()

    def on_screen_resume(self) -> None:
        self._schedule_plan()

    def _load_model_names(self) -> None:
        from engine.models import names

        self.post_message(ModelNames([*names(), "laplacian"]))

    def on_model_names(self, message: ModelNames) -> None:
        self._models = message.names
        models = self.query_one("#models", SelectionList)
        chosen = set(self._pending_draft.models) if self._pending_draft else set(models.selected)
        models.clear_options()
        models.add_options([Selection(name, name, name in chosen) for name in self._models])

    # -------------------------------------------------------------------------------------- the family

    @on(Select.Changed, "#task")
    def _task_chosen(self, event: Select.Changed) -> None:
        if event.value is not Select.NULL and event.value != self.task_name:
            self.task_name = str(event.value)
            self.family_preset = None
            with self.prevent(Select.Changed):
                self.query_one("#preset", Select).set_options(self._preset_options())
            self._show_family()
            self._schedule_plan()

    def _show_family(self) -> None:
        """The grid editor for alignment; for other families, a note on the preset to launch."""
        from engine.tasks import family

        alignment = self.task_name == DEFAULT_TASK
        self.query_one("#alignment-form").display = alignment
        note = self.query_one("#family-note", Static)
        fam = family(self.task_name)
        if alignment:
            note.update(f"{fam.name}: {fam.title}")
        elif self.family_preset is None:
            note.update(f"{fam.name}: {fam.title}. Choose one of its presets above and load it (^o) to launch it.")
        else:
            preset = self.family_preset
            note.update(f"{fam.name}: preset {preset.name} ({preset.path}) — {preset.description or 'no description'}")

    # -------------------------------------------------------------------------------------- the draft

    def draft(self) -> ExperimentDraft:
        """The form as typed."""

        def text(input_id: str) -> str:
            return self.query_one(f"#{input_id}", Input).value

        base = self._pending_draft or ExperimentDraft()
        models = self.query_one("#models", SelectionList).selected if self._models else list(base.models)
        fields = {attr: text(input_id) for input_id, _, attr, _, _ in (*RUN_FIELDS, *SLOT_FIELDS)}
        return ExperimentDraft(
            name=text("name"),
            description=text("description"),
            datasets=tuple(row.value() for row in self.query(DatasetRow)),
            noise=tuple(self.query_one("#noise", SelectionList).selected),
            models=tuple(models),
            retry_failed=self.query_one("#retry-failed", Checkbox).value,
            base_run=base.base_run,
            **fields,
        )

    async def apply_draft(self, draft: ExperimentDraft) -> None:
        """Fill the form with ``draft`` (a loaded preset)."""
        self._pending_draft = draft
        self.query_one("#name", Input).value = draft.name
        self.query_one("#description", Input).value = draft.description
        for input_id, _, attr, _, _ in (*RUN_FIELDS, *SLOT_FIELDS):
            self.query_one(f"#{input_id}", Input).value = str(getattr(draft, attr))
        self.query_one("#retry-failed", Checkbox).value = draft.retry_failed
        datasets = self.query_one("#datasets", Vertical)
        await datasets.remove_children()
        await datasets.mount_all([self._row(d) for d in draft.datasets])
        self._select_noise(draft.noise, exclusive=True)
        models = self.query_one("#models", SelectionList)
        if self._models:
            models.deselect_all()
            for name in draft.models:
                if name in self._models:
                    models.select(name)
        self._schedule_plan()

    def _select_noise(self, levels: tuple[float, ...] | list[float], exclusive: bool = False) -> None:
        """Select ``levels`` (adding the ones not listed), keeping the list sorted by noise."""
        noise = self.query_one("#noise", SelectionList)
        listed = {noise_key(noise.get_option_at_index(i).value) for i in range(noise.option_count)}
        chosen = {noise_key(eta) for eta in levels}
        selected = chosen if exclusive else chosen | {noise_key(eta) for eta in noise.selected}
        with self.prevent(SelectionList.SelectedChanged):
            noise.clear_options()
            noise.add_options(
                [Selection(format_noise_percent(eta), eta, eta in selected) for eta in sorted(listed | chosen)]
            )
        self._schedule_plan()

    # -------------------------------------------------------------------------------------- the summary line

    @on(Input.Changed)
    @on(Select.Changed)
    @on(SelectionList.SelectedChanged)
    @on(Checkbox.Changed)
    def _form_changed(self, event: Message) -> None:
        if isinstance(event, Select.Changed) and event.select.id == "preset":
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

    def _plan(self, draft: ExperimentDraft, records: dict[str, dict[str, Any]]) -> None:
        from gaptui.launch import plan

        worker = get_current_worker()
        try:
            preset = self._chosen_preset(draft)
            slots = draft.slot_config().slots()
            known = {h: str(r.get("status")) for h, r in records.items()}
            # One expansion of the grid for both the counts and the estimate; failed runs count as to run.
            grid_plan = plan(preset, self.gapp.ws, known, retry_failed=True)
            summary = summarize(grid_plan.specs, records, len(slots))
            if summary.to_run and not worker.is_cancelled:
                summary = self._measured(summary, grid_plan, slots, records)
            message = PlanComputed(summary)
        except GaptuiError as exc:
            message = PlanComputed(None, str(exc))
        if not worker.is_cancelled:
            self.post_message(message)

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
        return replace(summary, estimate_seconds=found.plan.wall, estimate_source="measured")

    def on_plan_computed(self, message: PlanComputed) -> None:
        self.summary = message.summary
        plan = self.query_one("#plan", Static)
        plan.set_class(message.summary is None, "error")
        plan.update(message.summary.text() if message.summary else message.error)

    def _chosen_preset(self, draft: ExperimentDraft) -> PresetBase:
        """The grid to launch: the form's (alignment) or the loaded preset of the chosen family."""
        if self.task_name == DEFAULT_TASK:
            return draft.preset()
        if self.family_preset is None:
            raise GaptuiError(f"choose a preset of task {self.task_name} and load it")
        return self.family_preset

    # -------------------------------------------------------------------------------------- actions

    def action_paper_grid(self) -> None:
        self._select_noise(PAPER_NOISE)

    async def action_add_dataset(self) -> None:
        rows = list(self.query(DatasetRow))
        template = rows[-1].value() if rows else DatasetDraft()
        await self.query_one("#datasets", Vertical).mount(self._row(template))
        self._schedule_plan()

    @on(DatasetRow.Removed)
    async def _remove_dataset(self, event: DatasetRow.Removed) -> None:
        await event.row.remove()
        self._schedule_plan()

    @on(Button.Pressed, "#add-dataset")
    async def _add_pressed(self) -> None:
        await self.action_add_dataset()

    @on(Button.Pressed, "#noise-add")
    @on(Input.Submitted, "#noise-extra")
    def _add_noise(self) -> None:
        box = self.query_one("#noise-extra", Input)
        try:
            levels = parse_noise_levels(box.value)
        except GaptuiError as exc:
            self.notify(str(exc), severity="error", markup=False)
            return
        self._select_noise(levels)
        box.value = ""

    @on(Select.Changed, "#preset")
    @on(Button.Pressed, "#load")
    def action_load_preset(self) -> None:
        name = self.query_one("#preset", Select).value
        if name is Select.NULL:
            self.query_one("#preset", Select).focus()
            self.notify("choose a preset in the list first")
            return
        ws = self.gapp.ws

        def read() -> None:
            review = review_preset(str(name), ws)
            self.post_message(PresetReviewed(review, is_trusted(ws, review)))

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
        ws = self.gapp.ws

        def load() -> None:
            if allowed:
                trust(ws, review)
            self.post_message(PresetLoaded(review.load(), review.sha256))

        self.notify(f"loading preset {review.path.stem} ...", markup=False)
        self.gapp.run_task(load, name=f"load preset {review.path.stem}", group="preset")

    async def on_preset_loaded(self, message: PresetLoaded) -> None:
        preset = message.preset
        if preset.task != self.task_name:
            self.query_one("#task", Select).value = preset.task  # its change handler resets the picker
            self.task_name = preset.task
            self._show_family()
        if isinstance(preset, Preset):
            await self.apply_draft(draft_from_preset(preset, keep=self.draft()))
            self.notify(f"loaded preset {preset.name} ({preset.size} runs)", markup=False)
            return
        self.family_preset = preset
        self.family_preset_sha256 = message.sha256
        self._show_family()
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
        if self.task_name != DEFAULT_TASK:
            where = f" ({self.family_preset.path})" if self.family_preset and self.family_preset.path else ""
            self.notify(f"{self.task_name} presets are TOML files edited by hand{where}", markup=False)
            return
        try:
            preset = self.draft().preset()
        except GaptuiError as exc:
            self.notify(str(exc), severity="error", markup=False)
            return
        path = self.gapp.ws.root / "presets" / f"{preset.name}.toml"
        if not path.exists():
            self._write_preset(preset, overwrite=False)
            return

        def answer(choice: str | None) -> None:
            if choice == "yes":
                self._write_preset(preset, overwrite=True)

        self.app.push_screen(confirm(f"{path} exists. Overwrite it?", "Save preset"), answer)

    def _write_preset(self, preset: Preset, overwrite: bool) -> None:
        from gaptui.tui.messages import ManagerNotice

        ws = self.gapp.ws
        path = ws.root / "presets" / f"{preset.name}.toml"

        def write() -> None:
            text = dump_preset(preset)
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
