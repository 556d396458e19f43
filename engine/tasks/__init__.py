"""Task families: the seam every kind of experiment plugs into.

The process model is the same for every family: a *spec* (a frozen dataclass whose canonical hash is the run's
identity) is written to ``<run dir>/spec.json``; ``python -m engine`` reads it, looks up the family named by the
spec's ``task`` field and calls the family's worker loop, which streams events to ``events.jsonl`` (schema in
:mod:`engine.events`) and returns an :class:`Outcome` that the worker writes to ``result.json``. The manager
(scheduler, history, analysis, CLI, terminal app) never looks inside a spec: everything it shows or ranks comes
from what the family declares here. Adding a family touches neither the scheduler nor the history storage.

A family is a subclass of :class:`TaskFamily`, registered once::

    from engine.tasks import FAMILIES, Axis, Metric, Outcome, TableLayout, TaskFamily, TaskSpec

    @dataclass(frozen=True)
    class ToySpec(TaskSpec):          # the spec: typed fields, checked by validate(), hashed canonically
        size: int
        task: str = "toy"
        seed: int = 0

    class Toy(TaskFamily):
        name = "toy"                                   # the value of ``task`` in specs, records and presets
        title = "a toy task"                           # one line shown by pickers
        spec_type = ToySpec
        metrics = (Metric("val_mae", "val MAE", higher_is_better=False),)
        default_metric = "val_mae"                     # what tables rank by unless --metric says otherwise
        axes = (Axis("size", "size", numeric=True), Axis("model", "model"))
        table = TableLayout(group=None, rows="model", columns="size")

        def record_axes(self, spec):                   # the axis values of one run (stored in its record)
            return {"size": spec.size, "model": "mean"}

        def run(self, spec, ctx):                      # the worker loop (in the worker subprocess)
            ctx.emit("start", run=spec.hash(), pid=os.getpid())
            ...                                        # poll ctx.should_stop(); raise Cancelled after a checkpoint
            return Outcome(metrics={"val_mae": 0.5})

    FAMILIES.register(Toy())

What a family declares
    ``name``, ``title``; ``spec_type`` (a :class:`TaskSpec` dataclass; :meth:`TaskSpec.canonical` leaves out the
    placement fields listed in ``PLACEMENT`` so where a run executes never changes its identity); ``metrics``
    (:class:`Metric`: key, display name, direction, unit; tables rank only declared metrics, and the direction is
    never guessed from a name); ``axes`` (:class:`Axis`: the descriptive coordinates of a run, in the order the
    history and runs views show them as columns); ``table`` (:class:`TableLayout`: which axis makes one table per
    value, which axis gives rows and which columns; the row values in ``baselines`` are shown but never marked
    best and never count in gaps); ``result_metric`` (the metric shown in the history/runs "result" column).

What a family implements (hooks with defaults are optional)
    - :meth:`TaskFamily.record_axes` ``(spec) -> {axis key: value}``: one value per declared axis.
    - :meth:`TaskFamily.run` ``(spec, ctx) -> Outcome``: the training/evaluation loop, in the worker process.
      ``ctx`` (:class:`RunContext`) gives ``run_dir``, ``emit(event, **fields)``, ``log(text)``,
      ``should_stop()``, ``run_dir_of(run_hash)`` (the folder of a dependency) and ``shared`` (a dict common to
      the runs of one worker process, for data they can share). Raise :class:`Cancelled` after saving a
      checkpoint when ``should_stop()`` turns true (the worker exits 143 and a re-run resumes),
      :class:`RunFailed` for a scientific failure (non-finite loss...), ``GaptuiError`` for bad input.
    - :meth:`TaskFamily.steps` ``(spec, ctx)``: the same loop as a generator that yields between units of work
      (an epoch) and returns the :class:`Outcome`; a worker running packed seeds (several runs in one process)
      alternates between the runs' generators. The default runs :meth:`run` without yielding (the runs of a
      pack then go one after another, still in one process).
    - :meth:`TaskFamily.inputs` ``(spec) -> [Input]``: data to prepare before the worker starts (datasets,
      caches). Inputs with the same ``key`` are prepared once per launch; independent ones in parallel, off the
      terminal app's UI thread. A failed input fails exactly the runs that need it. The worker must still
      build (or find in its cache) what it needs, so a spec run by hand works too.
    - :meth:`TaskFamily.dependencies` ``(spec) -> (run hash, ...)``: runs that must be ``done`` before this one
      starts (a downstream run and its pretraining run). If one fails or is cancelled the dependant is recorded
      ``blocked`` with the culprit named, and never started.
    - :meth:`TaskFamily.artefacts` ``(spec) -> (file name, ...)``: what a ``done`` run's folder must hold for the
      run to count as done (default ``result.json``); :meth:`TaskFamily.dependant_artefacts` ``(spec)``: what the
      runs that depend on it read from its folder (alignment: the trained model's ``checkpoint.pt``; default none).
      A run recorded done whose artefacts are missing or corrupt (see :func:`artefact_problem`) is run again by
      ``gaptui run`` and the app, and its dependants wait for it again.
    - :meth:`TaskFamily.is_baseline` ``(spec) -> bool``: a training-free run, planned once per cell, not per seed.
    - :meth:`TaskFamily.parse_preset` ``(raw TOML dict, where) -> PresetBase`` and :meth:`TaskFamily.grid`
      ``(preset, placement) -> [spec]``: preset expansion. A preset file names its family with ``task = "..."``
      (default :data:`DEFAULT_TASK`); every spec of the grid must come out of ``grid`` (dependencies included, before
      their dependants), seed-major so early results cover every cell once.
    - :meth:`TaskFamily.preset_import_paths` ``(raw TOML dict) -> {import path: role}``: the user code a preset
      names (``module.path:Name`` models, poolings...), listed without importing it, so the user sees what
      opening the preset runs. The default finds every such string and names it by ``import_roles[key]``.
    - :meth:`TaskFamily.form_fields` ``() -> (FormField, ...)``, :meth:`TaskFamily.preset_from_form`
      ``(values) -> raw TOML dict`` and :meth:`TaskFamily.form_values` ``(raw TOML dict) -> values``: the terminal
      app's New-experiment form (declarative data only, see :class:`FormField`). ``values`` maps each field's key
      to its typed value (see :data:`FORM_KINDS`); the document ``preset_from_form`` returns is validated by
      :meth:`parse_preset`, so form errors are preset errors; ``form_values`` fills the form from a loaded preset
      and ``preset_from_form(form_values(raw))`` gives ``raw`` back. Default: no fields (the form asks for a
      preset file to load instead).
    - :meth:`TaskFamily.describe` ``(spec) -> str``: one line for progress output.
    - :meth:`TaskFamily.check` ``(specs) -> [warning]``: checks of the planned runs of this family taken
      together, once per plan and before any record is written (``gaptui run``, its dry run and the terminal
      app's launch all plan through :func:`gaptui.launch.plan`): files the runs read, import paths they name.
      Raise ``GaptuiError`` for what every run would fail on; return lines for what is suspect but runs.
    - :meth:`TaskFamily.derived_tables` ``(records, metric) -> [DerivedTable]``: tables computed across runs
      (scores relative to the other methods, averages over an axis), shown after the ranking tables everywhere
      they are (``gaptui table``, exports, the terminal app).
    - :meth:`TaskFamily.reference_file` ``(name) -> Path | None`` and ``reference`` (the name of the family's
      default reference, compared by ``gaptui report``): published tables to compare with;
      :meth:`TaskFamily.reference_problem` ``(coordinates) -> str``: axis values a reference row cannot have.
    - :meth:`TaskFamily.optimal_line` ``(derived table name or None) -> str``: what the "optimal" summary line
      under a table means (the column of largest best − worst spread); ``""`` (the default): no such line.
    - Cost and memory (``gaptui run --dry-run``, the app's launch bar and the refusal of a plan that cannot fit):
      :meth:`TaskFamily.cost_units` ``(spec) -> float | None`` (units of work: epochs, epochs x graphs...),
      :meth:`TaskFamily.cost_cell` ``(spec) -> str`` (runs that cost the same per unit share their history),
      :meth:`TaskFamily.estimate_costs` ``(specs, ctx) -> CostReport`` (default: the history of finished runs of
      the same cell; alignment measures its throughput through ``calibration_module``) and
      :meth:`TaskFamily.memory` ``(spec) -> MemoryNeed | None`` (the peak a run needs; checked before any work,
      and again once inputs whose size is unknown until built are built). Types in :mod:`engine.cost` and
      :mod:`engine.memory`.
    - Training loops share :mod:`engine.loop` (resume at the exact batch, checksummed checkpoints, stop ->
      :class:`Cancelled`, non-finite loss named by step, the standard events, a generator for packed seeds, the
      run's precision around the forward pass): a family writes its step (batches, forward, update) and its
      evaluation (:class:`engine.loop.EpochTask`) and returns ``engine.loop.epoch_steps(...)`` from
      :meth:`TaskFamily.steps`.

Where families come from
    The built-in families (:data:`BUILTIN`, imported on first use), then the modules named in the
    ``GAPTUI_FAMILIES`` environment variable (comma-separated; each registers its families when imported; the
    worker subprocess inherits the variable), then the ``gaptui.families`` entry-point group of installed packages.

Where each part lives
    :mod:`engine.tasks.spec` (the spec base, :class:`Placement`), :mod:`engine.tasks.run` (what a loop receives
    and returns: :class:`RunContext`, :class:`Outcome`, :class:`Input`, :class:`Cancelled`, :class:`RunFailed`),
    :mod:`engine.tasks.declarations` (:class:`Metric`, :class:`Axis`, :class:`TableLayout`, :class:`DerivedTable`,
    :class:`Figure`, :class:`Tunable`), :mod:`engine.tasks.form` (:class:`FormField` and its helpers),
    :mod:`engine.tasks.family` (:class:`TaskFamily`) and :mod:`engine.tasks.registry` (:data:`FAMILIES`, look-ups
    by name, :func:`artefact_problem`); the preset base and helpers are :mod:`engine.presets`'. This package
    re-exports them, so a plug-in family imports everything from ``engine.tasks``; engine modules import from the
    module that defines what they use.
"""

from __future__ import annotations

from engine.presets import PresetBase, check_run_options, list_of, seeds_of, unique_values, unknown_keys
from engine.tasks.declarations import Axis, DerivedTable, Figure, Metric, TableLayout, Tunable
from engine.tasks.family import TaskFamily
from engine.tasks.form import FORM_KINDS, FormField, drop_blank, form_table, table_values
from engine.tasks.registry import (
    BUILTIN,
    DEFAULT_TASK,
    ENTRY_POINT_GROUP,
    ENV_FAMILIES,
    FAMILIES,
    FamilyRegistry,
    artefact_problem,
    family,
    load_spec,
    load_spec_file,
    task_of,
)
from engine.tasks.run import RESULT, Cancelled, Input, Outcome, RunContext, RunFailed, run_steps
from engine.tasks.spec import Placement, TaskSpec

__all__ = [
    "BUILTIN",
    "DEFAULT_TASK",
    "ENTRY_POINT_GROUP",
    "ENV_FAMILIES",
    "FAMILIES",
    "FORM_KINDS",
    "RESULT",
    "Axis",
    "Cancelled",
    "DerivedTable",
    "FamilyRegistry",
    "Figure",
    "FormField",
    "Input",
    "Metric",
    "Outcome",
    "Placement",
    "PresetBase",
    "RunContext",
    "RunFailed",
    "TableLayout",
    "TaskFamily",
    "TaskSpec",
    "Tunable",
    "artefact_problem",
    "check_run_options",
    "drop_blank",
    "family",
    "form_table",
    "list_of",
    "load_spec",
    "load_spec_file",
    "run_steps",
    "seeds_of",
    "table_values",
    "task_of",
    "unique_values",
    "unknown_keys",
]
