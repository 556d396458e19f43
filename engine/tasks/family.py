"""The base class of task families: what a family must declare, and the hooks it may override."""

from __future__ import annotations

import json
from collections.abc import Generator, Mapping
from pathlib import Path
from typing import Any, ClassVar

from engine.errors import GaptuiError, unknown
from engine.presets import PresetBase
from engine.registry import find_import_paths
from engine.tasks.declarations import Axis, DerivedTable, Figure, Metric, TableLayout, Tunable
from engine.tasks.form import FormField
from engine.tasks.run import RESULT, Input, Outcome, RunContext
from engine.tasks.spec import Placement, TaskSpec


class TaskFamily:
    """Base class of task families: subclass, fill in the class attributes and hooks, register an instance."""

    name: ClassVar[str] = ""
    title: ClassVar[str] = ""
    spec_type: ClassVar[type[TaskSpec]] = TaskSpec
    metrics: ClassVar[tuple[Metric, ...]] = ()
    default_metric: ClassVar[str] = ""
    #: The metric of the history/runs "result" column (defaults to ``default_metric``).
    result_metric: ClassVar[str] = ""
    axes: ClassVar[tuple[Axis, ...]] = ()
    table: ClassVar[TableLayout]
    #: A shipped reference table (``gaptui/references/<name>.csv``) that ``gaptui report`` compares with; "" for none.
    reference: ClassVar[str] = ""
    #: What ``gaptui figures`` and ``gaptui report`` draw for this family.
    figures: ClassVar[tuple[Figure, ...]] = (Figure("lines"), Figure("curves"), Figure("cd"))
    #: The spec values ``gaptui tune`` may search, by the key a preset's ``[tune]`` names them with; a family
    #: that declares none cannot be tuned.
    tunable: ClassVar[Mapping[str, Tunable]] = {}

    # -------------------------------------------------------------------------------- metadata look-ups

    def metric(self, key: str) -> Metric:
        """The declared metric ``key`` (GaptuiError with a did-you-mean otherwise)."""
        for m in self.metrics:
            if m.key == key:
                return m
        raise unknown(f"metric of task '{self.name}'", key, [m.key for m in self.metrics])

    def axis(self, key: str) -> Axis:
        for a in self.axes:
            if a.key == key:
                return a
        raise unknown(f"axis of task '{self.name}'", key, [a.key for a in self.axes])

    # -------------------------------------------------------------------------------- specs

    def parse_spec(self, raw: Mapping[str, Any], where: str = "run spec") -> TaskSpec:
        spec: TaskSpec = self.spec_type.from_dict(raw, where)
        return spec

    def record_axes(self, spec: Any) -> dict[str, Any]:
        raise NotImplementedError

    def is_baseline(self, spec: Any) -> bool:
        return False

    def dependencies(self, spec: Any) -> tuple[str, ...]:
        return ()

    def artefacts(self, spec: Any) -> tuple[str, ...]:
        """Files of a done run's folder without which it does not count as done (see :func:`artefact_problem`)."""
        return (RESULT,)

    def dependant_artefacts(self, spec: Any) -> tuple[str, ...]:
        """Files of a done run's folder that the runs depending on it read (checked when such a run is to start)."""
        return ()

    def describe(self, spec: Any) -> str:
        values = self.record_axes(spec)
        return " ".join(a.format(values.get(a.key)) for a in self.axes) + f" seed {spec.seed}"

    def check(self, specs: list[Any]) -> list[str]:
        """Check the planned runs of this family together, once per plan, before any record is written.

        Raise GaptuiError (one line naming the file, key or value) for input every run would fail on; return
        ``warning`` lines for input that runs but is suspect. The default checks nothing."""
        return []

    # -------------------------------------------------------------------------------- data and worker

    def inputs(self, spec: Any) -> list[Input]:
        return []

    def run(self, spec: Any, ctx: RunContext) -> Outcome:
        raise NotImplementedError

    def steps(self, spec: Any, ctx: RunContext) -> Generator[None, None, Outcome]:
        """:meth:`run` as a generator for packed seeds; families that can interleave runs yield between epochs."""
        outcome = self.run(spec, ctx)
        yield from ()
        return outcome

    # -------------------------------------------------------------------------------- results

    def derived_tables(self, records: list[dict[str, Any]], metric: str) -> list[DerivedTable]:
        """Tables computed from the finished ``records`` of this family when ranking by ``metric`` (default none)."""
        return []

    # -------------------------------------------------------------------------------- presets

    def parse_preset(self, raw: dict[str, Any], where: str, path: Path | None = None) -> PresetBase:
        raise GaptuiError(f"{where}: task '{self.name}' has no presets")

    #: What a preset's import paths are used as, by the TOML key that holds them (e.g. ``{"models": "model"}``).
    import_roles: ClassVar[Mapping[str, str]] = {}

    def preset_import_paths(self, raw: dict[str, Any]) -> dict[str, str]:
        """``{module.path:Name: role}`` for the code a preset document names, in file order; imports nothing.

        The default takes every string (or table key) of the form ``module.path:Name``, named by
        :attr:`import_roles` or else by its key; a family whose presets hold such strings that are not code
        overrides it."""
        return find_import_paths(raw, self.import_roles)

    def grid(self, preset: Any, placement: Placement, limit: int | None = None) -> list[Any]:
        raise NotImplementedError

    # -------------------------------------------------------------------------------- the New-experiment form

    def form_fields(self) -> tuple[FormField, ...]:
        """The fields of this family's form, in order (default none: the app offers to load a preset instead)."""
        return ()

    def preset_from_form(self, values: dict[str, Any]) -> dict[str, Any]:
        """The preset document (raw TOML dict, without ``task``, ``name``, ``description``) a filled form means;
        :meth:`parse_preset` validates it."""
        raise GaptuiError(f"task '{self.name}' has no form: load one of its presets")

    def form_values(self, raw: dict[str, Any]) -> dict[str, Any]:
        """The form's values for a preset document (the inverse of :meth:`preset_from_form`)."""
        raise GaptuiError(f"task '{self.name}' has no form: load one of its presets")

    # -------------------------------------------------------------------------------- cost and memory
    # What a run costs (``gaptui run --dry-run``'s estimate, the app's launch bar) and how much memory it needs
    # (a plan that cannot fit is refused before any work). Types in :mod:`engine.cost` and :mod:`engine.memory`.

    #: A module that ``python -m`` runs to measure this family's cost keys (JSON request on stdin, one measurement
    #: per key on stdout; see :mod:`engine.cost`); "" when the family has no calibration.
    calibration_module: ClassVar[str] = ""

    def cost_cell(self, spec: Any) -> str:
        """What makes two runs cost the same per unit of work, as a string: runs of one cell share their history.
        The default: the canonical spec without its seed."""
        return json.dumps({k: v for k, v in spec.canonical().items() if k != "seed"}, sort_keys=True, default=str)

    def cost_units(self, spec: Any) -> float | None:
        """Units of work of a run (its epochs, epochs x graphs...): finished runs of its cell give the seconds per
        unit. None (the default): a run is one whole; its cell's runs give its duration."""
        return None

    def cost_steps(self, spec: Any) -> int | None:
        """Optimiser steps a run takes at the least, known from its spec alone (no input built): the floor of its
        duration that no measurement is needed for (:data:`gaptui.estimate.STEP_FLOOR` seconds a step), so a run of
        billions of epochs is refused before it starts. None (the default): no floor."""
        return None

    def cost_evaluations(self, spec: Any) -> int:
        """Evaluation passes of a run timed apart from its units (``eval`` events with ``seconds``); default 0."""
        return 0

    def cost_label(self, spec: Any) -> str:
        """How the estimate groups runs (default: the value of the table's row axis, e.g. the model)."""
        return self.axis(self.table.rows).format(self.record_axes(spec).get(self.table.rows))

    def estimate_costs(self, specs: list[Any], ctx: Any) -> Any:
        """The seconds of ``specs`` (runs of this family left to do) on the slot profiles of ``ctx``
        (:class:`engine.cost.CostContext`), as a :class:`engine.cost.CostReport`. The default is the history of
        finished runs of the same cell (:meth:`engine.cost.CostContext.from_history`); a family with a calibrated
        model (alignment: measured throughput) overrides it."""
        return ctx.from_history(self, specs)

    def overhead_probe(self, placement: Placement, count: int) -> list[Any]:
        """``count`` tiny runs (distinct seeds) whose duration through the real worker is a run's overhead (process
        start, imports, loading, result); none (the default) when the family's model needs no overhead."""
        return []

    def memory(self, spec: Any) -> Any:
        """What the run needs in memory at its peak (:class:`engine.memory.MemoryNeed`: the run or dataset, its
        kind, the bytes, what they are made of, what to lower), None when nothing grows with its parameters or
        its size is unknown until its input is built (checked again once it is). Runs with the same
        ``MemoryNeed.key`` are checked once."""
        return None

    # -------------------------------------------------------------------------------- reference tables, optimal lines

    def reference_file(self, name: str) -> Path | None:
        """The reference table (CSV, format in docs/results.md) this family ships itself under ``name``, if any.

        gaptui's own families ship theirs inside gaptui (``gaptui/references/<task>.<name>.csv``); a plug-in
        family returns the path of its file here, so ``--reference NAME`` and ``gaptui report`` find it."""
        return None

    def reference_problem(self, coordinates: Mapping[str, Any]) -> str:
        """Why a reference row with these axis values (axis key -> value) can be no cell of this family, in a few
        words (``"noise 1.5 is outside [0, 1)"``); ``""`` when it can (the default)."""
        return ""

    def optimal_line(self, derived: str | None) -> str:
        """What this family's "optimal" summary line says, before ``: <column value>``, for its ranking tables
        (``derived`` None) or its derived table named ``derived``; ``""`` for no line (the default).

        The value is the column whose best − worst spread over the table's rows is largest (the first on a tie);
        alignment: ``"optimal noise (largest best − worst spread)"``, the noise that best separates the models."""
        return ""
