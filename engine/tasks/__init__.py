"""Task families: the seam every kind of experiment plugs into.

The process model is the same for every family: a *spec* (a frozen dataclass whose canonical hash is the run's
identity) is written to ``<run dir>/spec.json``; ``python -m engine`` reads it, looks up the family named by the
spec's ``task`` field and calls the family's worker loop, which streams events to ``events.jsonl`` (schema in
:mod:`engine.events`) and returns an :class:`Outcome` that the worker writes to ``result.json``. The manager
(scheduler, history, analysis, CLI, terminal app) never looks inside a spec: everything it shows or ranks comes
from what the family declares here. Adding a family touches neither the scheduler nor the history storage.

A family is a subclass of :class:`TaskFamily`, registered once with ``FAMILIES.register(MyFamily())``. It must
declare ``name``, ``spec_type`` (a :class:`TaskSpec` dataclass), ``metrics`` (:class:`Metric`), ``axes``
(:class:`Axis`) and ``table`` (:class:`TableLayout`), and write ``record_axes(spec)``, ``run(spec, ctx)`` (or
``steps(spec, ctx)``, a generator that yields between epochs), ``parse_preset(raw, where, path)`` and
``grid(preset, placement, limit)``. The rest is optional (see :mod:`engine.tasks.family`): declarations with
defaults, hooks of the run model (dependencies, inputs to prepare, checks of a plan, derived tables) and
capabilities a family opts into: a New-experiment form (:class:`FamilyForm`), a cost model
(:class:`engine.tasks.cost.CostModel`), published references (:class:`References`), CLI commands of its own, parts of
its own in ``gaptui report`` and the flags of ``gaptui train`` that describe one of its runs (:class:`TrainFlags`).
``docs/families.md`` holds a complete plug-in family. Training loops share :mod:`engine.loop` (resume at the exact
batch, checksummed checkpoints, stop -> :class:`Cancelled`, non-finite loss named by step, the standard events, the
run's precision around the forward pass): a family writes its step (batches, forward, update) and its evaluation.

Where families come from
    The built-in families (:data:`BUILTIN`, imported on first use), then the modules named in the
    ``GAPTUI_FAMILIES`` environment variable (comma-separated; each registers its families when imported; the
    worker subprocess inherits the variable), then the ``gaptui.families`` entry-point group of installed packages.

Where each part lives
    :mod:`engine.tasks.spec` (the spec base, :class:`Placement`), :mod:`engine.tasks.run` (what a loop receives
    and returns: :class:`RunContext`, :class:`Outcome`, :class:`Input`, :class:`Cancelled`, :class:`RunFailed`),
    :mod:`engine.tasks.declarations` (:class:`Metric`, :class:`Axis`, :class:`TableLayout`, :class:`DerivedTable`,
    :class:`Figure`, :class:`Tunable`, :class:`References`, :class:`TrainFlags`, :class:`Setting`),
    :mod:`engine.tasks.form` (:class:`FormField`, :class:`FamilyForm` and their helpers),
    :mod:`engine.tasks.family` (:class:`TaskFamily`) and :mod:`engine.tasks.registry` (:data:`FAMILIES`, look-ups
    by name, :func:`artefact_problem`); the preset base and helpers are :mod:`engine.tasks.presets`', the cost model
    :mod:`engine.tasks.cost`'s and the run options (precision, device, compile) :mod:`engine.hardware`'s. This package
    re-exports them, so a plug-in family imports everything from ``engine.tasks``; engine modules import from the
    module that defines what they use.
"""

from __future__ import annotations

from engine.tasks.cost import CostModel
from engine.tasks.declarations import (
    Axis,
    Bound,
    DerivedTable,
    Figure,
    Metric,
    References,
    Setting,
    TableLayout,
    TrainFlags,
    Tunable,
)
from engine.tasks.family import TaskFamily
from engine.tasks.form import FORM_KINDS, FamilyForm, FormField, FormModule, drop_blank, form_table, table_values
from engine.tasks.presets import (
    PresetBase,
    check_run_options,
    list_of,
    parse_head,
    seeds_of,
    unique_values,
    unknown_keys,
)
from engine.tasks.registry import (
    BUILTIN,
    ENTRY_POINT_GROUP,
    ENV_FAMILIES,
    FAMILIES,
    LEGACY_TASK,
    FamilyRegistry,
    artefact_problem,
    family,
    load_spec,
    load_spec_file,
    task_of,
)
from engine.tasks.run import PROBES, RESULT, Cancelled, Input, Outcome, RunContext, RunFailed, run_steps
from engine.tasks.spec import Placement, TaskSpec

__all__ = [
    "BUILTIN",
    "ENTRY_POINT_GROUP",
    "ENV_FAMILIES",
    "FAMILIES",
    "FORM_KINDS",
    "PROBES",
    "RESULT",
    "Axis",
    "Cancelled",
    "CostModel",
    "DerivedTable",
    "FamilyForm",
    "FamilyRegistry",
    "Figure",
    "FormField",
    "FormModule",
    "LEGACY_TASK",
    "Input",
    "Metric",
    "Outcome",
    "Placement",
    "PresetBase",
    "References",
    "RunContext",
    "RunFailed",
    "Setting",
    "TableLayout",
    "Bound",
    "TaskFamily",
    "TaskSpec",
    "TrainFlags",
    "Tunable",
    "artefact_problem",
    "check_run_options",
    "drop_blank",
    "family",
    "form_table",
    "list_of",
    "load_spec",
    "load_spec_file",
    "parse_head",
    "run_steps",
    "seeds_of",
    "table_values",
    "task_of",
    "unique_values",
    "unknown_keys",
]
