"""``gaptui tune``: the same hyperparameter search for every row of a family's table, resumable, on Optuna.

A preset's ``[tune]`` table (docs/tuning.md) asks for ``trials`` trials per row of its family's table (a model, a
pooling, a PE) at one column ``at`` (for alignment a noise level) on the ``seeds`` it names, searching the keys its
``space`` names among those the family declares (:attr:`engine.tasks.TaskFamily.tunable`). Every row gets the same
number of trials of the same epochs, and every trial keeps the preset's parameter budget (the width follows it), so
a ranking of tuned rows compares equal budgets.

A trial is an ordinary run: the preset's spec of that row and cell with the sampled values set, so its run id,
folder, events, record and resume are those of any run, and it goes through the same scheduler and slots as
``gaptui run``. Its record carries ``tune = {"study", "row", "trials"}`` and the tag ``study=NAME``; tables leave
trial runs out. The value of a trial is its metric averaged over its seeds.

The search is Optuna's, one study per row in one SQLite file per study (``<workspace>/tune/<study>.db``, which
``optuna-dashboard`` opens). What makes it resumable: a trial is asked (its values stored at once) before its runs
are queued, and told only once they all ended; a manager killed in between leaves the trial ``RUNNING`` in the
database, and the next ``gaptui tune`` takes it up again with the same values, so the runs are the same runs
(resumed from their checkpoints, or read back when they finished meanwhile) and no trial is counted twice.

``--final`` re-runs each row's best values on every cell of the preset with all its seeds; those runs carry
``tune.final`` and show in ``gaptui table --tuned`` as rows ``<row> (tuned)`` beside the default ones.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import GaptuiError, did_you_mean
from engine.files import sqlite_url
from engine.tasks import Metric, TaskFamily, TaskSpec, Tunable, family, load_spec, task_of
from engine.typed import ascii_count, short_value
from gaptui.workspace import Workspace

SAMPLERS = ("tpe", "random", "grid")
PRUNERS = ("none", "median")
BUDGETS = ("trials", "seconds")
TUNE_KEYS = (
    "trials", "metric", "at", "space", "rows", "sampler", "seed", "pruner", "prune_startup", "prune_warmup",
    "budget", "seconds", "seeds", "study",
)  # fmt: skip
#: Suffix of a tuned row in ``gaptui table --tuned``.
TUNED = " (tuned)"


# ---------------------------------------------------------------------------------------------------- the space


@dataclass(frozen=True)
class Dimension:
    """One searched key: ``log`` or ``range`` between two bounds, or ``choice`` among values."""

    key: str
    tunable: Tunable
    kind: str
    values: tuple[Any, ...]

    def distribution(self) -> Any:
        import optuna.distributions as d

        if self.kind == "choice":
            return d.CategoricalDistribution(list(self.values))
        low, high = self.values
        if self.tunable.kind == "int":
            return d.IntDistribution(int(low), int(high), log=self.kind == "log")
        return d.FloatDistribution(float(low), float(high), log=self.kind == "log")

    def text(self) -> str:
        if self.kind == "choice":
            return f"{self.key} in {list(self.values)}"
        return f"{self.key} {self.kind} [{self.values[0]:g}, {self.values[1]:g}]"

    def state(self) -> list[Any]:
        return [self.key, self.kind, list(self.values)]


def parse_dimension(key: str, tunable: Tunable, raw: Any, where: str) -> Dimension:
    """``{log = [a, b]}``, ``{range = [a, b]}`` or a list of choices, checked against the key's kind."""
    here = f"{where}: key '{key}'"
    number = (int,) if tunable.kind == "int" else (int, float)

    def is_number(v: Any) -> bool:
        return isinstance(v, number) and not isinstance(v, bool) and math.isfinite(float(v))

    if isinstance(raw, list):
        if not raw:
            raise GaptuiError(f"{here} = []: expected at least one value to choose from")
        if not all(is_number(v) for v in raw):
            raise GaptuiError(f"{here} = {raw!r}: expected {tunable.kind} values")
        if len(set(raw)) != len(raw):
            raise GaptuiError(f"{here} = {raw!r}: a value is listed twice")
        return Dimension(key, tunable, "choice", tuple(raw))
    if isinstance(raw, Mapping) and len(raw) == 1 and next(iter(raw)) in ("log", "range"):
        kind, bounds = next(iter(raw.items()))
        if not (isinstance(bounds, list) and len(bounds) == 2 and all(is_number(v) for v in bounds)):
            raise GaptuiError(f"{here}: {kind} = {bounds!r}: expected two {tunable.kind} bounds [low, high]")
        low, high = bounds
        if not low < high:
            raise GaptuiError(f"{here}: {kind} = {bounds!r}: empty or inverted range; expected low < high")
        if kind == "log" and low <= 0:
            raise GaptuiError(f"{here}: log = {bounds!r}: a log range needs bounds > 0")
        return Dimension(key, tunable, kind, (low, high))
    raise GaptuiError(
        f"{here} = {raw!r}: expected {{ log = [low, high] }}, {{ range = [low, high] }} or a list of values"
    )


# ---------------------------------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class Row:
    """One row of the family's table: its label, and its spec per (column value, seed) of the preset."""

    key: str
    label: str
    group: str
    specs: dict[tuple[str, int], TaskSpec]


@dataclass(frozen=True)
class TuneSettings:
    study: str
    task: str
    trials: int
    metric: Metric
    at: str
    sampler: str
    seed: int
    pruner: str
    budget: str
    seeds: tuple[int, ...]
    space: dict[str, tuple[Dimension, ...]]
    rows: tuple[Row, ...]
    columns: tuple[str, ...]
    grid_specs: tuple[TaskSpec, ...] = field(repr=False, default=())
    where: str = ""
    #: ``budget = "seconds"``: the training seconds each row may spend (``trials`` is then an upper bound).
    seconds: float | None = None
    #: Median pruner: trials per row before any is pruned, and epochs of a trial before it may be.
    prune_startup: int = 5
    prune_warmup: int = 0

    @property
    def family(self) -> TaskFamily:
        return family(self.task)

    def fingerprint(self, row: Row) -> dict[str, Any]:
        """What a study of ``row`` was asked with: refused later when it changed (``trials`` may grow)."""
        return {
            "metric": self.metric.key,
            "at": self.at,
            "sampler": self.sampler,
            "seed": self.seed,
            "seeds": list(self.seeds),
            "space": [d.state() for d in self.space[row.key]],
            "budget": self.budget,
            "seconds": self.seconds,
            "pruner": self.pruner,
            "prune": [self.prune_startup, self.prune_warmup] if self.pruner != "none" else None,
        }

    def trial_specs(self, row: Row, params: Mapping[str, Any]) -> list[TaskSpec]:
        """The runs of one trial: the row's spec at ``at`` for each tuned seed, with ``params`` set."""
        return [apply_params(row.specs[(self.at, seed)], params, self) for seed in self.seeds]

    def final_specs(self, row: Row, params: Mapping[str, Any]) -> list[TaskSpec]:
        """The final runs of a row: its best values on every cell of the preset with all its seeds."""
        return [apply_params(spec, params, self) for spec in row.specs.values()]


def apply_params(spec: TaskSpec, params: Mapping[str, Any], settings: TuneSettings) -> TaskSpec:
    raw = spec.to_dict()
    tunable = settings.family.tunable
    for key, value in params.items():
        *parents, leaf = tunable[key].field.split(".")
        node = raw
        for part in parents:
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        node[leaf] = value
    return load_spec(raw, where=f"{settings.where}: [tune]")  # type: ignore[no-any-return]


def _column_label(fam: TaskFamily, value: Any) -> str:
    return fam.axis(fam.table.columns).format(value)


def tune_rows(fam: TaskFamily, specs: Iterable[TaskSpec]) -> tuple[list[Row], list[str]]:
    """The preset's rows (baselines left out: they train nothing) and its column labels in grid order."""
    layout = fam.table
    rows: dict[str, Row] = {}
    columns: dict[str, None] = {}
    for spec in specs:
        if spec.task != fam.name or fam.is_baseline(spec):
            continue
        axes = fam.record_axes(spec)
        group = "" if layout.group is None else fam.axis(layout.group).format(axes.get(layout.group))
        label = fam.axis(layout.rows).format(axes.get(layout.rows))
        key = f"{group} / {label}" if group else label
        column = _column_label(fam, axes.get(layout.columns))
        columns[column] = None
        row = rows.setdefault(key, Row(key, label, group, {}))
        row.specs[(column, int(spec.seed))] = spec  # type: ignore[attr-defined]
    return list(rows.values()), list(columns)


def parse_tune(
    raw: Mapping[str, Any], preset: Any, ws: Workspace, where: str, study: str | None = None
) -> TuneSettings:
    """The checked ``[tune]`` table of ``preset``: one ``error:`` line naming the file and key, before any trial."""
    from gaptui.presets import grid

    here = f"{where}: [tune]"
    if not isinstance(raw, Mapping) or not raw:
        raise GaptuiError(f"{where}: no [tune] table; add one, e.g. [tune] with trials = 8 (docs/tuning.md)")
    for key in raw:
        if key not in TUNE_KEYS:
            raise GaptuiError(
                f"{here}: unknown key '{key}'{did_you_mean(key, TUNE_KEYS)}; known: {', '.join(TUNE_KEYS)}"
            )
    fam = family(preset.task)
    if not fam.tunable:
        raise GaptuiError(f"{here}: the {fam.name} family declares no tunable keys")
    trials = raw.get("trials")
    if not isinstance(trials, int) or isinstance(trials, bool) or trials < 1:
        raise GaptuiError(f"{here}: key 'trials' = {trials!r}: expected a count of trials per row >= 1")
    metric_key = raw.get("metric", fam.default_metric)
    if not isinstance(metric_key, str) or metric_key not in {m.key for m in fam.metrics}:
        known = [m.key for m in fam.metrics]
        raise GaptuiError(
            f"{here}: key 'metric' = {metric_key!r}: not a metric of {fam.name}{did_you_mean(str(metric_key), known)}; "
            f"known: {', '.join(known)}"
        )
    options = _search_options(raw, here)
    seeds = _tune_seeds(raw, preset, here)
    specs = grid(preset, ws)
    rows, columns = tune_rows(fam, specs)
    if not rows:
        raise GaptuiError(f"{where}: the preset has no {fam.name} run to tune")
    at = _at(raw, fam, columns, here)
    space = _row_spaces(raw, fam, rows, here)
    if options["sampler"] == "grid":
        _check_grid(space, rows, trials, here)
    name = study or raw.get("study") or preset.name
    if not isinstance(name, str) or not name.replace("-", "").replace("_", "").replace(".", "").isalnum():
        raise GaptuiError(f"{here}: key 'study' = {name!r}: expected a name of letters, digits, '-', '_' or '.'")
    settings = TuneSettings(
        study=name,
        task=fam.name,
        trials=trials,
        metric=fam.metric(metric_key),
        at=at,
        seeds=seeds,
        space=space,
        rows=tuple(rows),
        columns=tuple(columns),
        grid_specs=tuple(specs),
        where=where,
        **options,
    )
    for row in rows:  # every bound of the space must give a valid run of every row
        for dim in space[row.key]:
            for value in dim.values:
                try:
                    settings.trial_specs(row, {dim.key: value})
                except GaptuiError as exc:
                    why = str(exc).removeprefix(f"{where}: [tune]: ")
                    raise GaptuiError(f"{here} space: key '{dim.key}' = {value!r} (row {row.key}): {why}") from None
    return settings


def _search_options(raw: Mapping[str, Any], here: str) -> dict[str, Any]:
    """``sampler``, ``seed``, ``pruner`` (with ``prune_startup`` / ``prune_warmup``), ``budget`` (with ``seconds``)."""
    out: dict[str, Any] = {}
    for key, choices, default in (
        ("sampler", SAMPLERS, "tpe"),
        ("pruner", PRUNERS, "none"),
        ("budget", BUDGETS, "trials"),
    ):
        value = raw.get(key, default)
        if value not in choices:
            raise GaptuiError(f"{here}: key '{key}' = {value!r}: expected one of {', '.join(choices)}")
        out[key] = value
    for key, default in (("prune_startup", 5), ("prune_warmup", 0), ("seed", 0)):
        value = raw.get(key, default)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            what = "the sampler's seed, an integer >= 0" if key == "seed" else "a count >= 0"
            raise GaptuiError(f"{here}: key '{key}' = {value!r}: expected {what}")
        if key in raw and key != "seed" and out["pruner"] == "none":
            raise GaptuiError(f"{here}: key '{key}' goes with pruner = \"median\"")
        out[key] = value
    seconds = raw.get("seconds")
    if out["budget"] == "seconds":
        if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or not seconds > 0:
            raise GaptuiError(
                f"{here}: key 'seconds' = {seconds!r}: budget = \"seconds\" needs the training seconds per row, > 0"
            )
    elif seconds is not None:
        raise GaptuiError(f"{here}: key 'seconds' goes with budget = \"seconds\"")
    out["seconds"] = None if seconds is None else float(seconds)
    return out


def _tune_seeds(raw: Mapping[str, Any], preset: Any, here: str) -> tuple[int, ...]:
    seeds = raw.get("seeds", [preset.seeds[0]])
    if (
        not isinstance(seeds, list)
        or not seeds
        or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds)
    ):
        raise GaptuiError(f"{here}: key 'seeds' = {seeds!r}: expected a list of the preset's seeds, e.g. [0]")
    missing = [s for s in seeds if s not in preset.seeds]
    if missing:
        raise GaptuiError(
            f"{here}: key 'seeds': seed {missing[0]} is not a seed of the preset ({', '.join(map(str, preset.seeds))})"
        )
    return tuple(seeds)


def _row_spaces(
    raw: Mapping[str, Any], fam: TaskFamily, rows: list[Row], here: str
) -> dict[str, tuple[Dimension, ...]]:
    """Each row's space: ``[tune.space]`` with ``[tune.rows.<row>]`` merged over it (by label or full row key)."""
    shared = _space(raw.get("space", {}), fam, f"{here} space")
    per_row_raw = raw.get("rows", {})
    if not isinstance(per_row_raw, Mapping):
        raise GaptuiError(f"{here}: key 'rows' = {per_row_raw!r}: expected tables of per-row spaces, [tune.rows.gin]")
    labels = {r.label for r in rows} | {r.key for r in rows}
    for name in per_row_raw:
        if name not in labels:
            raise GaptuiError(
                f"{here}: rows: '{name}' is not a row of the preset{did_you_mean(name, sorted(labels))}; "
                f"rows: {', '.join(sorted(r.label for r in rows))}"
            )
    space: dict[str, tuple[Dimension, ...]] = {}
    for row in rows:
        own = {**_space(per_row_raw.get(row.label, {}), fam, f"{here} rows.{row.label}"),
               **_space(per_row_raw.get(row.key, {}), fam, f"{here} rows.{row.key}")}  # fmt: skip
        dims = {**shared, **own}
        if not dims:
            raise GaptuiError(
                f"{here}: no space for row {row.key}: give [tune.space] with keys among {', '.join(fam.tunable)}"
            )
        space[row.key] = tuple(dims[k] for k in sorted(dims))
    return space


def _check_grid(space: Mapping[str, tuple[Dimension, ...]], rows: list[Row], trials: int, here: str) -> None:
    """``sampler = "grid"``: lists of values only, and no more trials than a row's grid holds."""
    for row in rows:
        ranged = [d.key for d in space[row.key] if d.kind != "choice"]
        if ranged:
            raise GaptuiError(f"{here}: sampler = 'grid' needs lists of values; '{ranged[0]}' is a range")
        size = math.prod(len(d.values) for d in space[row.key])
        if trials > size:
            raise GaptuiError(
                f"{here}: key 'trials' = {trials}: sampler = 'grid' has {size} combination(s) for row {row.key}"
            )


def _at(raw: Mapping[str, Any], fam: TaskFamily, columns: list[str], here: str) -> str:
    axis = fam.axis(fam.table.columns)
    if "at" not in raw:
        ordered = sorted(columns, key=lambda c: axis.sort_key(c)) if axis.numeric else columns
        return ordered[len(ordered) // 2]
    label = _column_label(fam, raw["at"])
    if label not in columns:
        raise GaptuiError(
            f"{here}: key 'at' = {raw['at']!r}: the preset has no {axis.name} {label}; its values: {', '.join(columns)}"
        )
    return label


def _space(raw: Any, fam: TaskFamily, where: str) -> dict[str, Dimension]:
    if not isinstance(raw, Mapping):
        raise GaptuiError(f"{where} = {raw!r}: expected a table of keys, e.g. lr = {{ log = [1e-4, 1e-2] }}")
    out = {}
    for key, value in raw.items():
        if key not in fam.tunable:
            raise GaptuiError(
                f"{where}: '{key}' is not a tunable key of {fam.name}{did_you_mean(key, fam.tunable)}; "
                f"tunable: {', '.join(fam.tunable)}"
            )
        tunable = fam.tunable[key]
        out[key] = parse_dimension(key, tunable, tunable.space if value == "default" else value, where)
    return out


def load_tune(
    preset_name: str, ws: Workspace, study: str | None = None, note: Callable[[str], None] = lambda line: None
) -> tuple[Any, TuneSettings]:
    """The preset and its checked ``[tune]`` settings; ``note`` gets one line per import path of code the preset
    names, before any of it is imported (:meth:`gaptui.preset_code.PresetReview.load`)."""
    from gaptui.preset_code import review_preset

    review = review_preset(preset_name, ws)
    preset = review.load(note)
    return preset, parse_tune(review.raw.get("tune", {}), preset, ws, str(review.path), study)


# ---------------------------------------------------------------------------------------------------- storage


def study_path(ws: Workspace, name: str) -> Path:
    return ws.root / "tune" / f"{name}.db"


def storage(ws: Workspace, name: str, read_only: bool = False) -> Any:
    """The study's Optuna RDB storage: a SQLite file several slots may ask and tell through at once; ``read_only``
    (``--status``) opens an existing file without writing to it or creating one."""
    import optuna

    path = study_path(ws, name)
    if not read_only:
        path.parent.mkdir(parents=True, exist_ok=True)
    with storage_errors(path):
        return optuna.storages.RDBStorage(
            sqlite_url(path, read_only),
            engine_kwargs={"connect_args": {"timeout": 60}},
            skip_table_creation=read_only,
        )


@contextlib.contextmanager
def storage_errors(path: Path) -> Iterator[None]:
    """A database error of the study's SQLite file (a read-only or full workspace, a file that is not a database)
    as one :class:`GaptuiError` line naming the file, instead of SQLAlchemy's traceback."""
    import optuna
    from sqlalchemy.exc import SQLAlchemyError

    try:
        yield
    except (SQLAlchemyError, optuna.exceptions.StorageInternalError) as exc:
        cause = exc
        while cause.__cause__ is not None or cause.__context__ is not None:  # Optuna wraps SQLAlchemy's error
            cause = cause.__cause__ or cause.__context__  # type: ignore[assignment]
        reason = str(getattr(cause, "orig", None) or cause).strip().splitlines()[0][:200]
        raise GaptuiError(f"{path}: the study's database cannot be used ({reason})") from None


def study_name(settings: TuneSettings, row: Row) -> str:
    return f"{settings.study}:{row.key}"


def sampler_of(settings: TuneSettings, row: Row, asked: int = 0) -> Any:
    """The row's sampler, seeded by the study's seed, the row and how many trials the study already asked: a
    manager started again after a crash draws new values instead of repeating the first ones."""
    import optuna

    seed = int(hashlib.sha256(f"{settings.seed}:{row.key}:{asked}".encode()).hexdigest()[:8], 16)
    if settings.sampler == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if settings.sampler == "grid":
        return optuna.samplers.GridSampler({d.key: list(d.values) for d in settings.space[row.key]}, seed=seed)
    return optuna.samplers.TPESampler(seed=seed)


def pruner_of(settings: TuneSettings) -> Any:
    import optuna

    if settings.pruner == "median":
        return optuna.pruners.MedianPruner(
            n_startup_trials=settings.prune_startup, n_warmup_steps=settings.prune_warmup
        )
    return optuna.pruners.NopPruner()


def open_studies(ws: Workspace, settings: TuneSettings) -> dict[str, Any]:
    """One Optuna study per row, created or loaded; a study asked with other settings is refused."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    store = storage(ws, settings.study)
    direction = "maximize" if settings.metric.higher_is_better else "minimize"
    studies = {}
    for row in settings.rows:
        name = study_name(settings, row)
        study = optuna.create_study(
            storage=store,
            study_name=name,
            direction=direction,
            sampler=sampler_of(settings, row),
            pruner=pruner_of(settings),
            load_if_exists=True,
        )
        asked = settings.fingerprint(row)
        before = study.user_attrs.get("gaptui")
        if before is None:
            study.set_user_attr("gaptui", {**asked, "trials": settings.trials})
        else:
            changed = [k for k in asked if before.get(k) != asked[k]]
            if before.get("trials", 0) > settings.trials:
                changed.append(f"trials lowered from {before['trials']} to {settings.trials}")
            if changed:
                raise GaptuiError(
                    f"{settings.where}: [tune] changed since study '{settings.study}' began ({', '.join(changed)}); "
                    f"keep the settings, or start a new study with --study NAME ({study_path(ws, settings.study)})"
                )
            if before.get("trials") != settings.trials:
                study.set_user_attr("gaptui", {**asked, "trials": settings.trials})
        study.sampler = sampler_of(settings, row, len(study.get_trials(deepcopy=False)))
        studies[row.key] = study
    return studies


# ---------------------------------------------------------------------------------------------------- the search


@dataclass
class Pending:
    row: Row
    trial: Any
    specs: list[TaskSpec]
    #: Median pruner: per run, the metric of each epoch its eval events gave; the epochs reported already.
    curves: dict[str, dict[int, float]] = field(default_factory=dict)
    reported: set[int] = field(default_factory=set)


def trial_counts(study: Any) -> dict[str, int]:
    import optuna

    states = [t.state for t in study.get_trials(deepcopy=False)]
    return {
        "complete": states.count(optuna.trial.TrialState.COMPLETE),
        "pruned": states.count(optuna.trial.TrialState.PRUNED),
        "failed": states.count(optuna.trial.TrialState.FAIL),
        "running": states.count(optuna.trial.TrialState.RUNNING),
    }


def finished_count(study: Any) -> int:
    counts = trial_counts(study)
    return counts["complete"] + counts["pruned"] + counts["failed"]


def dependency_closure(specs: Iterable[TaskSpec], grid_specs: Iterable[TaskSpec]) -> list[TaskSpec]:
    """``specs`` preceded by the grid's runs they depend on (a GAPE run's pretraining), dependencies first."""
    by_hash = {s.hash(): s for s in grid_specs}
    out: dict[str, TaskSpec] = {}

    def add(spec: TaskSpec) -> None:
        for dep in family(spec.task).dependencies(spec):
            if dep in by_hash and dep not in out:
                add(by_hash[dep])
        out.setdefault(spec.hash(), spec)

    for spec in specs:
        add(spec)
    return list(out.values())


class Search:
    """Ask, queue, follow and tell: the study loop over a scheduler (local slots or Slurm)."""

    def __init__(
        self,
        ws: Workspace,
        settings: TuneSettings,
        scheduler: Any,
        history: Any,
        capacity: int,
        say: Callable[[str], None] = lambda line: None,
    ) -> None:
        self.ws, self.settings, self.scheduler, self.history = ws, settings, scheduler, history
        self.capacity = max(1, capacity)
        self.say = say
        self.studies = open_studies(ws, settings)
        self.pending: dict[tuple[str, int], Pending] = {}

    # ------------------------------------------------------------------ queueing

    def _queue(self, specs: list[TaskSpec]) -> None:
        from gaptui.launch import enqueue_prepared

        known = self.history.by_hash()
        busy = set(self.scheduler.running) | {s.hash() for s in self.scheduler.queue}
        ended = ("done", "failed", "blocked")  # a trial run that ended is told, not run again
        todo = [s for s in dependency_closure(specs, self.settings.grid_specs)
                if s.hash() not in busy and known.get(s.hash(), {}).get("status") not in ended]  # fmt: skip
        if todo:
            enqueue_prepared(self.scheduler, todo, f"tune:{self.settings.study}")

    def _tag(self, pending: Pending) -> None:
        """Each run of a trial names the study, the row and the trial (a run shared by two trials: both)."""
        records = self.history.by_hash()
        updates = {}
        for spec in pending.specs:
            record = records.get(spec.hash())
            if record is None:
                continue
            tune = dict(record.get("tune") or {})
            trials = sorted({*tune.get("trials", []), pending.trial.number})
            tune.update({"study": self.settings.study, "row": pending.row.key, "trials": trials})
            tune.update({"of": self.settings.trials, "metric": self.settings.metric.key})
            tune.update({"seeds": list(self.settings.seeds)})  # a trial's value needs every one of them done
            tune.update({"space": [d.text() for d in self.settings.space[pending.row.key]]})
            tune.update({"params": dict(pending.trial.params)})
            tags = sorted({*(record.get("tags") or []), f"study={self.settings.study}"})
            updates[spec.hash()] = {"tune": tune, "tags": tags}
        if updates:
            self.history.update_many(updates)

    def resume(self) -> int:
        """Take up the trials a killed manager left ``RUNNING``, with their stored values."""
        import optuna

        taken = 0
        for row in self.settings.rows:
            study = self.studies[row.key]
            for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
                if (row.key, trial.number) in self.pending:
                    continue
                pending = Pending(row, trial, self._trial_specs(row, trial.number, trial.params))
                self.pending[(row.key, trial.number)] = pending
                self._queue(pending.specs)
                self._tag(pending)
                taken += 1
        return taken

    def fill(self) -> None:
        """Ask new trials for rows short of ``trials`` while fewer than ``capacity`` trials are in flight."""
        dims = self.settings.space
        while len(self.pending) < self.capacity:
            short = [r for r in self.settings.rows
                     if finished_count(self.studies[r.key]) + self._in_flight(r) < self.settings.trials
                     and not self._spent(r)]  # fmt: skip
            if not short:
                return
            row = min(short, key=lambda r: finished_count(self.studies[r.key]) + self._in_flight(r))
            study = self.studies[row.key]
            trial = study.ask({d.key: d.distribution() for d in dims[row.key]})
            trial.set_user_attr("row", row.key)
            pending = Pending(row, trial, self._trial_specs(row, trial.number, trial.params))
            trial.set_user_attr("runs", [s.hash() for s in pending.specs])
            self.pending[(row.key, trial.number)] = pending
            self._queue(pending.specs)
            self._tag(pending)

    def _trial_specs(self, row: Row, number: int, params: Mapping[str, Any]) -> list[TaskSpec]:
        """The runs of a trial; values no run accepts fail the trial in the study (so that no later command takes
        it up again) and stop the search with one line naming the preset, the row, the trial and its values."""
        import optuna

        try:
            return self.settings.trial_specs(row, params)
        except GaptuiError as exc:
            _tell(self.studies[row.key], number, state=optuna.trial.TrialState.FAIL)
            why = str(exc).removeprefix(f"{self.settings.where}: [tune]: ")
            raise GaptuiError(
                f"{self.settings.where}: [tune] space: row {row.key}, trial {number} ({params_text(params)}): {why}; "
                "the trial is recorded failed"
            ) from None

    def _in_flight(self, row: Row) -> int:
        return sum(1 for key in self.pending if key[0] == row.key)

    def _spent(self, row: Row) -> bool:
        """``budget = "seconds"``: whether the row's trials (ended and in flight) trained its seconds already."""
        if self.settings.seconds is None:
            return False
        return row_seconds(self.ws, self.history.by_hash(), self.studies[row.key]) >= self.settings.seconds

    # ------------------------------------------------------------------ pruning

    def _run_file(self, record: Mapping[str, Any]) -> Path:
        folder = Path(record["run_dir"])
        return (folder if folder.is_absolute() else self.ws.root / folder) / "events.jsonl"

    def prune(self) -> None:
        """Median pruner: report each trial's metric per epoch (the mean over its seeds, once every seed reported
        that epoch) and stop the trials Optuna prunes: their runs are cancelled, the trial told ``PRUNED``."""
        if self.settings.pruner == "none":
            return
        import optuna

        from engine.events import iter_events

        records = self.history.by_hash()
        key = self.settings.metric.key
        for pkey, pending in list(self.pending.items()):
            for spec in pending.specs:
                record = records.get(spec.hash())
                if record is None or record.get("status") != "running" or not record.get("run_dir"):
                    continue
                curve = pending.curves.setdefault(spec.hash(), {})
                for event in iter_events(self._run_file(record)):
                    value = event.get("epoch"), event.get(key)
                    if (
                        event.get("event") == "eval"
                        and isinstance(value[0], int)
                        and isinstance(value[1], (int, float))
                    ):
                        curve[value[0]] = float(value[1])
            if len(pending.curves) < len(pending.specs):
                continue
            common = set.intersection(*(set(c) for c in pending.curves.values())) - pending.reported
            study = self.studies[pending.row.key]
            trial = optuna.trial.Trial(study, pending.trial._trial_id)
            for epoch in sorted(common):
                trial.report(sum(c[epoch] for c in pending.curves.values()) / len(pending.specs), epoch)
                pending.reported.add(epoch)
                if trial.should_prune():
                    for spec in pending.specs:
                        self.scheduler.cancel(spec.hash())
                    self._mark_pruned(pending)
                    _tell(study, pending.trial.number, state=optuna.trial.TrialState.PRUNED)
                    self.say(f"{pending.row.key}: trial {pending.trial.number} pruned at epoch {epoch}")
                    del self.pending[pkey]
                    break

    def _mark_pruned(self, pending: Pending) -> None:
        records = self.history.by_hash()
        updates = {}
        for spec in pending.specs:
            record = records.get(spec.hash())
            if record is not None:
                updates[spec.hash()] = {"tune": {**(record.get("tune") or {}), "pruned": True}}
        if updates:
            self.history.update_many(updates)

    # ------------------------------------------------------------------ telling

    def collect(self) -> None:
        """Tell every trial whose runs all ended: the mean metric of its runs, or FAIL when one failed."""
        import optuna

        records = self.history.by_hash()
        for key, pending in list(self.pending.items()):
            status = [records.get(s.hash(), {}).get("status") for s in pending.specs]
            ended_badly = any(s in ("failed", "blocked", "cancelled") for s in status)
            if ended_badly and all(s not in ("queued", "running") for s in status):
                _tell(self.studies[pending.row.key], pending.trial.number, state=optuna.trial.TrialState.FAIL)
                self.say(f"{pending.row.key}: trial {pending.trial.number} failed")
            elif all(s == "done" for s in status):
                values = [records[s.hash()].get("metrics", {}).get(self.settings.metric.key) for s in pending.specs]
                numbers = [float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(float(v))]
                study = self.studies[pending.row.key]
                if len(numbers) < len(values):
                    _tell(study, pending.trial.number, state=optuna.trial.TrialState.FAIL)
                    self.say(f"{pending.row.key}: trial {pending.trial.number}: no {self.settings.metric.key}")
                else:
                    _tell(study, pending.trial.number, sum(numbers) / len(numbers))
                    self.say(
                        f"{pending.row.key}: trial {pending.trial.number} {self.settings.metric.key} "
                        f"{sum(numbers) / len(numbers):.4f} ({params_text(pending.trial.params)})"
                    )
            else:
                continue
            del self.pending[key]

    def done(self) -> bool:
        """No trial in flight, and every row has its trials (or, by seconds, spent its seconds)."""
        return not self.pending and all(
            finished_count(self.studies[r.key]) >= self.settings.trials or self._spent(r) for r in self.settings.rows
        )

    def run(self, poll: float = 0.25) -> None:
        self.resume()
        while True:
            self.collect()
            self.prune()
            self.fill()
            if self.done():
                return
            if not self.scheduler.pending() and self.pending:
                self.collect()
                if self.pending and not self.scheduler.pending():
                    raise GaptuiError(
                        "tune: trials wait for runs that are neither queued nor running; "
                        + ", ".join(f"{p.row.key} trial {p.trial.number}" for p in self.pending.values())
                    )
                continue
            self.scheduler.step()
            time.sleep(poll)


def _tell(study: Any, number: int, value: float | None = None, state: Any = None) -> None:
    """``study.tell``; Optuna's grid sampler calls ``Study.stop`` once its grid is done, which only an ``optimize``
    loop accepts: the trial is stored all the same, so that error is not one here."""
    try:
        study.tell(number, value, state=state)
    except RuntimeError as exc:
        if "Study.stop" not in str(exc):
            raise


def run_seconds(ws: Workspace, record: Mapping[str, Any]) -> float:
    """The training seconds of one run: the sum of its ``epoch`` events' ``seconds``."""
    from engine.events import iter_events

    if not record.get("run_dir"):
        return 0.0
    folder = Path(record["run_dir"])
    path = (folder if folder.is_absolute() else ws.root / folder) / "events.jsonl"
    total = 0.0
    for event in iter_events(path):
        if event.get("event") == "epoch" and isinstance(event.get("seconds"), (int, float)):
            total += float(event["seconds"])
    return total


def row_seconds(ws: Workspace, records: Mapping[str, Mapping[str, Any]], study: Any) -> float:
    """The training seconds a row's trials spent, over every run of every trial it asked."""
    runs = {h for t in study.get_trials(deepcopy=False) for h in t.user_attrs.get("runs", [])}
    return sum(run_seconds(ws, records[h]) for h in runs if h in records)


def params_text(params: Mapping[str, Any]) -> str:
    """Sampled values as every listing and legend shows them: ``layers 4, lr 1.02e-3`` (keys in order, floats
    rounded by :func:`engine.typed.short_value`)."""
    return ", ".join(f"{k} {short_value(v)}" for k, v in sorted(params.items()))


# ---------------------------------------------------------------------------------------------------- results


@dataclass(frozen=True)
class RowResult:
    row: Row
    complete: int
    pruned: int
    failed: int
    running: int
    best_value: float | None
    best_params: dict[str, Any]
    best_trial: int | None
    curve: list[float]
    seconds: float = 0.0


def results(ws: Workspace, settings: TuneSettings, read_only: bool = False) -> list[RowResult]:
    """Per row, read back from the study's storage: trial counts, the best trial and the best-so-far curve;
    ``read_only`` (``--status``) writes nothing, and a study not begun yet has no trial."""
    from gaptui.history import read_records

    path = study_path(ws, settings.study)
    if read_only and not path.exists():
        return [RowResult(row, 0, 0, 0, 0, None, {}, None, []) for row in settings.rows]
    with storage_errors(path):
        return _results(ws, settings, storage(ws, settings.study, read_only), read_records(ws))


def _results(ws: Workspace, settings: TuneSettings, store: Any, all_records: list[Any]) -> list[RowResult]:
    import optuna

    out = []
    records = {r["hash"]: r for r in all_records}
    for row in settings.rows:
        try:
            study = optuna.load_study(study_name=study_name(settings, row), storage=store)
        except KeyError:
            out.append(RowResult(row, 0, 0, 0, 0, None, {}, None, []))
            continue
        counts = trial_counts(study)
        complete = [t for t in study.get_trials(deepcopy=False) if t.state == optuna.trial.TrialState.COMPLETE]
        curve: list[float] = []
        for t in sorted(complete, key=lambda t: t.number):
            value = float(t.value)
            better = max if settings.metric.higher_is_better else min
            curve.append(value if not curve else better(curve[-1], value))
        best = study.best_trial if complete else None
        out.append(
            RowResult(
                row,
                counts["complete"],
                counts["pruned"],
                counts["failed"],
                counts["running"],
                None if best is None else float(best.value),
                {} if best is None else dict(best.params),
                None if best is None else best.number,
                curve,
                row_seconds(ws, records, study),
            )
        )
    return out


def final_specs(ws: Workspace, settings: TuneSettings) -> list[tuple[RowResult, list[TaskSpec]]]:
    """Per row with a best trial: the runs of its best values on every cell with every seed."""
    return [(r, settings.final_specs(r.row, r.best_params)) for r in results(ws, settings) if r.best_trial is not None]


def final_planned(pairs: list[tuple[RowResult, list[TaskSpec]]]) -> dict[str, int]:
    """Run hash -> the seeds a tuned cell plans: every seed of the preset, so that a tuned cell that lacks some
    (a ``--final`` killed half way) reads ``(k/n)`` as a default one does."""
    from gaptui.run_records import planned_seeds_by_run

    return {h: n for _, specs in pairs for h, n in planned_seeds_by_run(specs).items()}


def tag_final(history: Any, settings: TuneSettings, pairs: list[tuple[RowResult, list[TaskSpec]]]) -> None:
    records = history.by_hash()
    planned = final_planned(pairs)
    updates = {}
    for result, specs in pairs:
        for spec in specs:
            record = records.get(spec.hash())
            if record is None:
                continue
            tune = {**(record.get("tune") or {}), "study": settings.study, "row": result.row.key, "final": True}
            tune["label"] = result.row.label
            tune["params"] = result.best_params
            tags = sorted({*(record.get("tags") or []), f"study={settings.study}"})
            updates[spec.hash()] = {"tune": tune, "tags": tags, "planned_seeds": planned[spec.hash()]}
    if updates:
        history.update_many(updates)


def summary_lines(settings: TuneSettings, rows: list[RowResult]) -> list[str]:
    metric = settings.metric
    lines = [
        f"study {settings.study} ({settings.task}): {settings.trials} trial(s) per row at "
        f"{settings.family.axis(settings.family.table.columns).name} {settings.at}, seeds "
        f"{', '.join(map(str, settings.seeds))}; {metric.key} ({metric.direction} is better); "
        f"sampler {settings.sampler}"
    ]
    for r in rows:
        space = "; ".join(d.text() for d in settings.space[r.row.key])
        best = "no trial done" if r.best_value is None else (
            f"best {metric.key} {r.best_value:.4f} (trial {r.best_trial}: {params_text(r.best_params)})"
        )  # fmt: skip
        spent = f", {r.seconds:.1f} s of training" + (f" of {settings.seconds:g}" if settings.seconds else "")
        lines.append(
            f"  {r.row.key}: {r.complete + r.pruned + r.failed}/{settings.trials} trials "
            f"({r.pruned} pruned, {r.failed} failed{spent}); {best}; space {space}"
        )
    return lines


def json_summary(settings: TuneSettings, rows: list[RowResult]) -> dict[str, Any]:
    return {
        "study": settings.study,
        "task": settings.task,
        "trials": settings.trials,
        "metric": settings.metric.key,
        "at": settings.at,
        "seeds": list(settings.seeds),
        "rows": [
            {
                "row": r.row.key,
                "complete": r.complete,
                "pruned": r.pruned,
                "failed": r.failed,
                "running": r.running,
                "best_value": r.best_value,
                "best_params": r.best_params,
                "best_trial": r.best_trial,
                "best_so_far": r.curve,
                "training_seconds": r.seconds,
                "space": [d.text() for d in settings.space[r.row.key]],
            }
            for r in rows
        ],
    }


# ---------------------------------------------------------------------------------------------------- tables


def table_view(records: Iterable[dict[str, Any]], tuned: bool = False) -> list[dict[str, Any]]:
    """Records as ranking tables see them: trial runs left out; final runs of a study left out too, or with
    ``tuned`` shown as rows ``<row> (tuned)`` beside the default ones."""
    out = []
    for record in records:
        tune = record.get("tune") if isinstance(record, dict) else None
        if not tune:
            out.append(record)
            continue
        if not (tuned and isinstance(tune, dict) and tune.get("final")):
            continue
        try:
            rows_key = family(task_of(record)).table.rows
        except GaptuiError:
            continue
        axes = dict(record.get("axes") or {})
        axes[rows_key] = f"{tune.get('label') or axes.get(rows_key)}{TUNED}"
        out.append({**record, "axes": axes})
    return out


# ---------------------------------------------------------------------------------------------------- the form


def space_text(space: Mapping[str, Any]) -> str:
    """A ``[tune.space]`` table as the one line the New-experiment form shows: ``lr = { log = [...] }, ...``."""
    from gaptui.presets import toml_literal

    return ", ".join(f"{key} = {toml_literal(value)}" for key, value in space.items())


def parse_space_text(text: str, where: str = "tune space") -> dict[str, Any]:
    """The inverse of :func:`space_text`: ``key = value`` pairs separated by commas, TOML values."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]

    if not text.strip():
        return {}
    try:
        return dict(tomllib.loads(f"space = {{ {text} }}")["space"])
    except tomllib.TOMLDecodeError as exc:
        raise GaptuiError(
            f"{where} '{text}': expected key = value pairs separated by commas, e.g. "
            f"lr = {{ log = [1e-4, 1e-2] }}, layers = [3, 4, 5] ({exc})"
        ) from None


def tune_table(base: Mapping[str, Any] | None, trials: str, space: str) -> dict[str, Any] | None:
    """The ``[tune]`` table a form's two tune fields give (None: both blank, no tuning), the other keys of the
    loaded preset's table (``at``, ``sampler``...) kept."""
    if not trials.strip() and not space.strip():
        return None
    text = trials.strip()
    count = ascii_count(text)
    if count is None or count < 1:
        raise GaptuiError(f"tune trials '{trials}': expected a count of trials per row >= 1")
    table = {k: v for k, v in dict(base or {}).items() if k not in ("trials", "space")}
    return {"trials": count, **table, "space": parse_space_text(space)}


@dataclass(frozen=True)
class StudyRow:
    """A row of a study as the history tells it (the terminal app's Runs): trials ended of those asked for, the
    best trial value so far after each ended trial (in trial order), and the metric."""

    study: str
    row: str
    ended: int
    total: int | None
    running: int
    metric: str
    best: list[float]


def study_rows(records: Iterable[Mapping[str, Any]]) -> list[StudyRow]:
    """Every study row of the history's trial runs: a trial has ended when its runs all did (done: its value is
    their mean metric; failed, cancelled, blocked: no value); it is running while one of them is queued or running."""
    trials: dict[tuple[str, str], dict[int, list[Mapping[str, Any]]]] = {}
    about: dict[tuple[str, str], tuple[int | None, str, str]] = {}
    for record in records:
        tune = record.get("tune")
        if not isinstance(tune, Mapping) or not tune.get("trials"):
            continue
        key = (str(tune.get("study")), str(tune.get("row")))
        task = str(record.get("task") or "")
        metric = tune.get("metric")
        if not metric:  # runs tagged before the metric was recorded: the family's default one
            with contextlib.suppress(GaptuiError):
                metric = family(task).default_metric
        about[key] = (tune.get("of"), str(metric or ""), task)
        for number in tune["trials"]:
            trials.setdefault(key, {}).setdefault(int(number), []).append(record)
    out = []
    for key in sorted(trials):
        total, metric, task = about[key]
        higher = True
        with contextlib.suppress(GaptuiError):
            higher = family(task).metric(metric).higher_is_better
        ended = running = 0
        best: list[float] = []
        for number in sorted(trials[key]):
            runs = trials[key][number]
            statuses = [r.get("status") for r in runs]
            if any(s in ("queued", "running", "interrupted") for s in statuses):
                running += 1
                continue
            ended += 1
            value = trial_value(runs, metric)
            if value is not None:
                best.append(value if not best else (max if higher else min)(best[-1], value))
        out.append(StudyRow(key[0], key[1], ended, total, running, metric, best))
    return out


def trial_value(runs: Sequence[Mapping[str, Any]], metric: str) -> float | None:
    """The value of a trial from its runs' records: their mean ``metric`` once every seed the trial trains is done
    with one (the seeds its records' ``tune.seeds`` name; records tagged before those were: every run found), else
    None (a seed in flight, failed, cancelled or not recorded yet)."""
    expected: set[Any] = set()
    for record in runs:
        expected.update((record.get("tune") or {}).get("seeds") or ())
    done: dict[Any, float] = {}
    for record in runs:
        value = (record.get("metrics") or {}).get(metric)
        if record.get("status") != "done" or isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        done[record.get("seed")] = float(value)
    if not done or not expected <= set(done):
        return None
    return sum(done.values()) / len(done)


SPARKS = "▁▂▃▄▅▆▇█"


def sparkline(values: list[float], width: int = 24) -> str:
    """``values`` (the last ``width``) as one line of block characters, lowest to highest."""
    values = values[-width:]
    if not values:
        return ""
    low, high = min(values), max(values)
    span = high - low
    return "".join(SPARKS[0 if span == 0 else round((v - low) / span * (len(SPARKS) - 1))] for v in values)


def ranking_change(records: Iterable[Mapping[str, Any]], task: str, key: str, study: str) -> list[dict[str, Any]]:
    """Per table and column: Kendall's tau between the rows ranked by their default runs and by the final runs of
    ``study`` (metric ``key``), on the rows that have both; cells as the ranking tables make them (the family's
    centre over seeds, one protocol per cell: :func:`gaptui.analysis.build_tables`)."""
    from scipy.stats import kendalltau

    from gaptui import analysis

    fam = family(task)
    mine = [
        r
        for r in records
        if r.get("task") == fam.name
        and (not r.get("tune") or ((r.get("tune") or {}).get("final") and (r.get("tune") or {}).get("study") == study))
    ]
    if not any(r.get("status") == "done" for r in mine):
        return []
    out = []
    for table in analysis.build_tables(table_view(mine, tuned=True), key, task=fam.name):
        if table.derived:
            continue
        tuned = {untuned(r): r for r in table.rows if untuned(r) != r}
        for column in table.columns:
            rows = [
                r
                for r in table.rows
                if r in tuned and table.cell(r, column) is not None and table.cell(tuned[r], column) is not None
            ]
            if len(rows) < 2:
                continue
            default = [table.cells[(r, column)].median for r in rows]
            after = [table.cells[(tuned[r], column)].median for r in rows]
            tau = kendalltau(default, after).statistic
            label = _column_label(fam, column)
            out.append({"group": table.group, "column": label, "rows": rows, "tau": None if tau != tau else float(tau)})
    return out


def untuned(row: str) -> str:
    """The default row a tuned row stands beside: ``gin`` for ``gin (tuned)``, ``gin (epochs 20)`` for
    ``gin (tuned, epochs 20)``; any other row as it is."""
    return row.replace(TUNED, "").replace(" (tuned, ", " (")
