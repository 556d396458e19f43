"""The base class of task families: a handful of required members, the rest optional with defaults.

A family must declare ``name``, ``spec_type``, ``metrics``, ``axes`` and ``table`` and write ``record_axes``,
``run`` (or ``steps``), ``parse_preset`` and ``grid``. Everything else is optional:

- declarations with defaults: ``title`` (the name), ``default_metric`` (the first metric), ``result_metric``,
  ``figures``, ``tunable``, ``import_roles``, ``optimal``, ``protocol`` (the spec's ``epochs``, ``steps`` and
  ``batch_size`` fields where it has them);
- hooks of the run model with defaults: ``is_baseline``, ``dependencies``, ``inputs``, ``check``, ``artefacts``,
  ``dependant_artefacts``, ``describe``, ``derived_tables``, ``preset_import_paths``;
- capabilities, each an object the family opts into: ``form`` (:class:`engine.tasks.form.FamilyForm`: the terminal
  app's New-experiment form; None: the app offers to load a preset), ``cost_model`` (:class:`CostModel`:
  what a run costs in seconds and memory; the default learns from finished runs of the same cell), ``references``
  (:class:`engine.tasks.declarations.References`: published tables ``gaptui report`` compares with) and
  ``commands`` (a module whose ``register(app)`` adds ``gaptui`` commands of the family's own), ``report`` (a
  module whose ``report_sections`` adds parts of its own to ``gaptui report``) and ``train_flags``
  (:class:`engine.tasks.declarations.TrainFlags`: a run of the family described by ``gaptui train``'s flags).

Generic code asks ``family.form is not None`` rather than calling a hook that answers nothing.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar

from engine.errors import GaptuiError, unknown
from engine.registry import find_import_paths
from engine.tasks.cost import CostModel
from engine.tasks.declarations import (
    Axis,
    DerivedTable,
    Figure,
    Metric,
    References,
    Setting,
    TableLayout,
    TrainFlags,
    Tunable,
)
from engine.tasks.form import FamilyForm
from engine.tasks.presets import PresetBase
from engine.tasks.run import RESULT, Input, Outcome, RunContext
from engine.tasks.spec import Placement, TaskSpec


class TaskFamily:
    """Base class of task families: subclass, declare the required members, register an instance."""

    # -------------------------------------------------------------------------------- required declarations

    #: The value of ``task`` in specs, records and presets.
    name: ClassVar[str] = ""
    #: The frozen dataclass of a run (a :class:`TaskSpec`).
    spec_type: ClassVar[type[TaskSpec]] = TaskSpec
    #: What ``result.json``'s ``metrics`` hold; tables rank only declared metrics.
    metrics: ClassVar[tuple[Metric, ...]] = ()
    #: The coordinates of a run, in the order the history and runs views show them.
    axes: ClassVar[tuple[Axis, ...]] = ()
    #: How ranking tables are formed from the runs.
    table: ClassVar[TableLayout]

    # -------------------------------------------------------------------------------- optional declarations

    #: One line shown by pickers (default: the name).
    title: ClassVar[str] = ""
    #: What tables rank by unless ``--metric`` says otherwise (default: the first metric).
    default_metric: ClassVar[str] = ""
    #: The metric of the history/runs "result" column (default: ``default_metric``).
    result_metric: ClassVar[str] = ""
    #: What ``gaptui figures`` and ``gaptui report`` draw for this family.
    figures: ClassVar[tuple[Figure, ...]] = (Figure("lines"), Figure("curves"), Figure("cd"))
    #: The spec values ``gaptui tune`` may search, by the key a preset's ``[tune]`` names them with; a family
    #: that declares none cannot be tuned.
    tunable: ClassVar[Mapping[str, Tunable]] = {}
    #: What a preset's import paths are used as, by the TOML key that holds them (e.g. ``{"models": "model"}``).
    import_roles: ClassVar[Mapping[str, str]] = {}
    #: What the "optimal" summary line under a table says, before ``: <column value>``, by table: ``None`` for the
    #: ranking tables, a derived table's name for that table. The value is the column whose best − worst spread
    #: over the table's rows is largest (the first on a tie); a table not listed gets no such line. Alignment:
    #: ``{None: "optimal noise (largest best − worst spread)"}``, the noise that best separates the models.
    optimal: ClassVar[Mapping[str | None, str]] = {}
    #: The settings that make a run's protocol readable (:class:`Setting`: epochs, pairs, batch...): columns of
    #: the history, the protocol line under each table, what a reference's protocol is compared on. Empty: the
    #: spec's ``epochs``, ``steps`` and ``batch_size`` fields, those it has (:meth:`settings`).
    protocol: ClassVar[tuple[Setting, ...]] = ()

    # -------------------------------------------------------------------------------- optional capabilities

    #: The terminal app's New-experiment form; None: the app offers to load one of the family's presets instead.
    form: ClassVar[FamilyForm | None] = None
    #: What a run costs (``gaptui run --dry-run``, the app's launch bar) and the memory it needs (a plan that
    #: cannot fit is refused before any work): a :class:`engine.tasks.cost.CostModel` subclass, bound to the family
    #: as :attr:`costs`.
    cost_model: ClassVar[type[CostModel]] = CostModel
    #: Published tables to compare with (``gaptui report``, ``--reference NAME``); None: none.
    references: ClassVar[References | None] = None
    #: A module (``package.module``) whose ``register(app)`` adds commands of this family to the ``gaptui`` CLI
    #: (a Typer app); "" for none. Imported by the CLI only, never by the engine.
    commands: ClassVar[str] = ""
    #: A module (``package.module``) whose ``report_sections(records, all_records)`` returns Markdown lines that
    #: ``gaptui report`` adds to the family's part (its runs, and every run of the history for questions across
    #: families); "" for none. Imported by gaptui only, never by the engine.
    report: ClassVar[str] = ""
    #: How ``gaptui train`` describes one run of the family with flags alone (alignment: ``--base``, ``--noise``,
    #: ``--model``); None: its runs are trained from a preset (``--preset P --where ...``) or a spec file.
    train_flags: ClassVar[TrainFlags | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not cls.title:
            cls.title = cls.name
        if not cls.default_metric and cls.metrics:
            cls.default_metric = cls.metrics[0].key

    @cached_property
    def costs(self) -> CostModel:
        """The family's cost model, bound to it."""
        return self.cost_model(self)

    # -------------------------------------------------------------------------------- look-ups

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

    def row_of(self, spec: Any) -> str:
        """The value of the table's row axis for ``spec`` as shown (e.g. the model): how estimates group runs."""
        return self.axis(self.table.rows).format(self.record_axes(spec).get(self.table.rows))

    def settings(self) -> tuple[Setting, ...]:
        """:attr:`protocol`, or by default the spec type's ``epochs``, ``steps`` and ``batch_size`` fields."""
        if self.protocol:
            return self.protocol
        import dataclasses

        names = {f.name for f in dataclasses.fields(self.spec_type)} if dataclasses.is_dataclass(self.spec_type) else ()
        defaults = (Setting("epochs", "epochs", ("epochs",)), Setting("steps", "steps", ("steps",)),
                    Setting("batch", "batch", ("batch_size",)))  # fmt: skip
        return tuple(s for s in defaults if s.fields[0] in names)

    def optimal_line(self, derived: str | None) -> str:
        """The words of the "optimal" line of the ranking tables (``derived`` None) or of a derived table."""
        return self.optimal.get(derived, "")

    # -------------------------------------------------------------------------------- required: runs and presets

    def record_axes(self, spec: Any) -> dict[str, Any]:
        """The axis values of one run (stored in its record): one value per declared axis."""
        raise NotImplementedError

    def run(self, spec: Any, ctx: RunContext) -> Outcome:
        """The training/evaluation loop, in the worker process (or write :meth:`steps` instead)."""
        from engine.tasks.run import run_steps

        if type(self).steps is TaskFamily.steps:
            raise NotImplementedError(f"task family '{self.name}' writes neither run nor steps")
        return run_steps(self.steps(spec, ctx))

    def steps(self, spec: Any, ctx: RunContext) -> Generator[None, None, Outcome]:
        """:meth:`run` as a generator for packed seeds; families that can interleave runs yield between epochs."""
        outcome = self.run(spec, ctx)
        yield from ()
        return outcome

    def parse_preset(self, raw: dict[str, Any], where: str, path: Path | None = None) -> PresetBase:
        raise GaptuiError(f"{where}: task '{self.name}' has no presets")

    def grid(self, preset: Any, placement: Placement, limit: int | None = None) -> list[Any]:
        raise NotImplementedError

    # -------------------------------------------------------------------------------- optional hooks

    def parse_spec(self, raw: Mapping[str, Any], where: str = "run spec") -> TaskSpec:
        spec: TaskSpec = self.spec_type.from_dict(raw, where)
        return spec

    def is_baseline(self, spec: Any) -> bool:
        """A training-free run, planned once per cell, not per seed."""
        return False

    def dependencies(self, spec: Any) -> tuple[str, ...]:
        """Runs (hashes) that must be ``done`` before this one starts."""
        return ()

    def artefacts(self, spec: Any) -> tuple[str, ...]:
        """Files of a done run's folder without which it does not count as done (see ``artefact_problem``)."""
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

    def inputs(self, spec: Any) -> list[Input]:
        """Data to prepare before the worker starts (datasets, caches); equal keys are prepared once."""
        return []

    def derived_tables(self, records: list[dict[str, Any]], metric: str) -> list[DerivedTable]:
        """Tables computed from the finished ``records`` of this family when ranking by ``metric`` (default none)."""
        return []

    def preset_import_paths(self, raw: dict[str, Any]) -> dict[str, str]:
        """``{module.path:Name: role}`` for the code a preset document names, in file order; imports nothing.

        The default takes every string (or table key) of the form ``module.path:Name``, named by
        :attr:`import_roles` or else by its key; a family whose presets hold such strings that are not code
        overrides it."""
        return find_import_paths(raw, self.import_roles)
