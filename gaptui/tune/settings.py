"""A preset's ``[tune]`` table read and checked: the searched space of each key, the rows, the seeds, the
search options, and the settings of a study that follow from them."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.errors import GaptuiError, did_you_mean
from engine.tasks import Metric, TaskFamily, TaskSpec, Tunable, family, load_spec
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


def column_label(fam: TaskFamily, value: Any) -> str:
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
        column = column_label(fam, axes.get(layout.columns))
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
    label = column_label(fam, raw["at"])
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
