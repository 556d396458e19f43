"""Alignment presets: datasets x noise x models x seeds, parsed, expanded into run specs and written back."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from engine.alignment.recipes import RECIPE_FIELDS, SCAFFOLD_FIELDS, resolve
from engine.alignment.spec import RunSpec
from engine.errors import GaptuiError, did_you_mean
from engine.tasks.presets import (
    PresetBase,
    PresetHead,
    SlurmOptions,
    dataset_tables,
    list_of,
    parse_head,
    slurm_table,
    spec_options,
    toml_value,
    unique_values,
)
from engine.tasks.spec import Placement
from engine.typed import short_value

BASELINE = "laplacian"
#: The training-free rows, in table order: the Laplacian baseline, then the solvers.
REFERENCE_ORDER = (BASELINE, "grampa", "umeyama", "faq", "rrwm")
#: Row order of Table D.3; models not listed follow alphabetically.
PAPER_ORDER = ("gcn", "gin", "gatedgcn", "ggnn", "gat", "gatv2")
#: Row order of ranking tables: the paper's models, the other message-passing ones, then the graph transformer (a
#: model's positional-input rows, ``graphgps+rwpe:16``, and models not listed follow alphabetically).
ROW_ORDER = (*PAPER_ORDER, "sage", "pna", "tagcn", "sgc", "pan", "graphgps")


def model_label(spec: RunSpec) -> str:
    """``model`` plus its model options and positional inputs, e.g. ``ggnn[steps=2]`` or ``graphgps+rwpe:16``: the
    row of ranking tables, so that two option sets (or two positional encodings) of one model are two rows rather
    than one cell. The base inputs (``degree``, ``ones``) are the recipe's, named by the recipe axis. A solver's
    options that differ from its defaults show the same way (``faq[init=barycenter]``); a search on top of a model
    adds its decoder (``gin+faq``)."""
    label = row_label(spec.model, spec.model_kwargs, spec.features if spec.trained else None)
    return f"{label}+{spec.decoder}" if spec.decoder else label


def row_label(model: str, model_kwargs: dict[str, Any], features: str | None) -> str:
    """A model's row: ``model``, its options in brackets, the positional parts of ``features``. The BREC family
    names its trained rows this way too, so the two families' rows of one architecture match."""
    label = model
    if model_kwargs:
        label += "[" + ",".join(f"{k}={short_value(v)}" for k, v in sorted(model_kwargs.items())) + "]"
    positional = positional_text(features)
    return f"{label}+{positional}" if positional else label


def is_reference_row(label: str) -> bool:
    """Whether a table row is a reference rather than a trained model (never marked, never the best): the
    Laplacian baseline, a solver with or without options (``faq[init=barycenter]``), a model with search on top
    (``gin+faq``)."""
    from engine.alignment.solvers import SOLVERS
    from engine.alignment.spec import DECODERS

    return label == BASELINE or label.partition("[")[0] in SOLVERS or any(label.endswith(f"+{d}") for d in DECODERS)


def solver_entry(entry: str, where: str) -> tuple[str, dict[str, Any]]:
    """A preset's ``solvers`` entry, ``faq`` or ``faq[init=barycenter,maxiter=50]`` (the row label's form), as the
    solver and its options (typed: integers, numbers, true/false, else text)."""
    from engine.alignment.solvers import SOLVERS, solver_options

    name, bracket, rest = entry.partition("[")
    name = name.strip().lower()
    if name not in SOLVERS:
        known = list(SOLVERS)
        raise GaptuiError(
            f"{where}: key 'solvers' value '{entry}' is not a solver{did_you_mean(name, known)}; known: "
            f"{', '.join(known)}"
        )
    options: dict[str, Any] = {}
    if bracket:
        if not rest.endswith("]"):
            raise GaptuiError(f"{where}: key 'solvers' value '{entry}': expected name[key=value,...]")
        for item in filter(None, (i.strip() for i in rest[:-1].split(","))):
            key, eq, value = item.partition("=")
            if not eq:
                raise GaptuiError(f"{where}: key 'solvers' value '{entry}': option '{item}' is not key=value")
            options[key.strip()] = typed_value(value.strip())
    solver_options(name, options, f"{where}: key 'solvers' value '{entry}'")
    return name, options


def typed_value(text: str) -> Any:
    """An option value as written in a label (``steps=2``): a bool, an int, a float, else the text."""
    if text in ("true", "false"):
        return text == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def positional_text(features: Any) -> str:
    """The positional parts of a ``features`` value (``rwpe:16`` of ``degree+rwpe:16``), ``""`` for none."""
    if not isinstance(features, str):
        return ""
    return "+".join(part for part in features.split("+") if ":" in part)


def model_entry(entry: str, where: str) -> tuple[str, str]:
    """A preset's ``models`` entry split into the model and its positional inputs: ``graphgps+rwpe:16`` is
    ``("graphgps", "rwpe:16")``, ``gcn`` is ``("gcn", "")``. What follows the first ``+`` must be positional
    parts (``rwpe:K``, ``lap:K``); the base inputs come from the run's ``features`` or the recipe."""
    model, plus, rest = entry.partition("+")
    if not plus:
        return entry, ""
    from engine.alignment.features import parse_features

    parsed = parse_features(rest, f"{where}: key 'models' value '{entry}'")
    if parsed.base is not None:
        raise GaptuiError(
            f"{where}: key 'models' value '{entry}': '{parsed.base}' is a base input, set by [run] features or the "
            f"recipe; a model entry adds positional inputs only, e.g. '{model}+rwpe:16'"
        )
    return model, "+".join(part.text for part in parsed.positional)


def entry_features(preset: Preset, model: str, positional: str, where: str) -> str | None:
    """The ``features`` of the runs of a model entry: the run's (or the recipe's) with ``positional`` added;
    None (the recipe decides) for an entry without positional inputs."""
    if not positional:
        return None
    from engine.alignment.features import parse_features

    base = resolve(preset.run.recipe, model, {k: getattr(preset.run, k) for k in RECIPE_FIELDS}, where)["features"]
    return parse_features(f"{base}+{positional}", f"{where}: key 'models' value '{model}+{positional}'").text


#: Labels by the JSON of (base, params): a 20,000-run grid labels a few datasets 80,000 times.
_DATASET_LABELS: dict[str, str] = {}


def dataset_label(canonical: dict[str, Any]) -> str:
    """``base`` plus its non-default parameters, e.g. ``er[n=50]``: the row group of ranking tables."""
    key = json.dumps([canonical["base"], canonical["params"]], sort_keys=True, default=str)
    label = _DATASET_LABELS.get(key)
    if label is None:
        if len(_DATASET_LABELS) > 4096:
            _DATASET_LABELS.clear()
        label = _DATASET_LABELS[key] = _dataset_label(canonical)
    return label


def _dataset_label(canonical: dict[str, Any]) -> str:
    from engine.sources import SOURCES, params_dict, parse_params

    source = SOURCES.get(canonical["base"])
    defaults = params_dict(parse_params(source, {}))
    changed = {k: v for k, v in canonical["params"].items() if defaults.get(k) != v}
    if not changed:
        return canonical["base"]
    text = ",".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in changed.items())
    return f"{canonical['base']}[{text}]"


# ------------------------------------------------------------------------------------------------ presets


@dataclass(frozen=True)
class DatasetEntry:
    base: str
    params: dict[str, Any] = field(default_factory=dict)
    noise_model: str | None = None
    train: int | None = None
    val: int | None = None
    seed: int = 0

    def dataset_dict(self, noise: float) -> dict[str, Any]:
        out: dict[str, Any] = {"base": self.base, "noise": noise, "seed": self.seed, "params": dict(self.params)}
        for key, value in (("noise_model", self.noise_model), ("n_train", self.train), ("n_val", self.val)):
            if value is not None:
                out[key] = value
        return out


#: The ``[run]`` table: every RunSpec field a grid does not fill in (same types and defaults, declared once, in
#: RunSpec) plus the run policy (``timeout``, ``retries``, ``pack_seeds``: how the scheduler treats each run).
#: ``spec_fields()`` gives the options copied into every RunSpec of the grid.
RunOptions: Any = spec_options(RunSpec, ("dataset", "model", "task", "model_kwargs", "seed"), "RunOptions", __name__)


@dataclass(frozen=True)
class Preset(PresetBase):
    """An alignment grid: datasets x noise x models x seeds (+ the Laplacian baseline once per cell)::

    task = "alignment"          # optional: the default family
    description = "what this grid is for"
    noise = [0.04, 0.12]
    models = ["gcn", "gatv2"]
    seeds = [0, 1]
    laplacian = true            # add the training-free baseline once per (dataset, noise)
    solvers = ["faq", "grampa"] # training-free solvers, once per (dataset, noise); options as faq[init=barycenter]
    decoders = ["faq"]          # every trained run again with FAQ started from its alignment (row gcn+faq)

    [model_options]             # optional: options of one model, for every run of that model
    gatv2 = { heads = 4 }

    [run]                       # RunSpec options shared by every run (see engine.alignment.spec.RunSpec)
    epochs = 5

    [[datasets]]
    base = "er"
    params = { n = 100, degree = 8 }
    train = 1000
    val = 200
    """

    task: ClassVar[str] = "alignment"
    datasets: tuple[DatasetEntry, ...]
    noise: tuple[float, ...]
    models: tuple[str, ...]
    laplacian: bool = False
    #: Solver entries (``faq``, ``faq[init=barycenter]``), each a row planned once per cell.
    solvers: tuple[str, ...] = ()
    #: Decoders (``faq``) run on top of every trained run of the grid.
    decoders: tuple[str, ...] = ()
    #: Model name -> its model options (``RunSpec.model_kwargs`` of every run of that model).
    model_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    run: RunOptions = field(default_factory=RunOptions)
    #: How its runs are submitted with ``--backend slurm`` (the preset's ``[slurm]`` table; None: the defaults).
    slurm: SlurmOptions | None = None

    @property
    def size(self) -> int:
        trained = len(self.datasets) * len(self.noise) * len(self.models) * len(self.seeds)
        once = int(self.laplacian) + len(self.solvers)
        return trained * (1 + len(self.decoders)) + len(self.datasets) * len(self.noise) * once

    @property
    def policy(self) -> Any:
        """The ``[run]`` table, which holds the run policy (timeout, retries, pack_seeds) too."""
        return self.run


#: The family's own top-level keys (the common ones, ``task`` ... ``[slurm]``, are :mod:`engine.tasks.presets`').
OWN_KEYS = ("noise", "models", "laplacian", "solvers", "decoders", "model_options", "datasets")
DATASET_KEYS = tuple(f.name for f in dataclasses.fields(DatasetEntry))
RUN_KEYS = tuple(f.name for f in dataclasses.fields(RunOptions) if f.name in RunOptions().spec_fields())


def parse_preset(raw: dict[str, Any], path: Path | None = None, where: str | None = None) -> Preset:
    """Validate an alignment preset document. Errors name ``where`` (default: the file), the key and the value,
    with a did-you-mean."""
    head = parse_head(
        raw, path, "alignment", OWN_KEYS, RUN_KEYS, required=("noise", "datasets"), slurm=True, where=where
    )
    if "models" not in head.own and "solvers" not in head.own:
        raise GaptuiError(f"{head.where}: missing key 'models'")
    return preset_of(head)


def preset_of(head: PresetHead) -> Preset:
    """The alignment preset on a parsed common part: reads the family's keys (``head.own``, ``head.run``) only."""
    from engine.alignment.noise import check_noise
    from engine.models import MODELS
    from engine.typed import parse_dataclass

    where, raw = head.where, head.own
    noise = list_of(where, "noise", raw["noise"], (int, float), "noise levels in [0, 1)")
    for eta in noise:
        check_noise(eta, where=f"{where}: key 'noise' value")
    entries = list_of(where, "models", raw["models"], str, "model names") if "models" in raw else []
    solvers = []
    if "solvers" in raw:
        solvers = [solver_entry(e, where) for e in list_of(where, "solvers", raw["solvers"], str, "solver entries")]
    models = []
    for entry in entries:
        if entry.partition("[")[0].lower() in _solver_names():  # a solver among the models is a solver row
            solvers.append(solver_entry(entry, where))
            continue
        model, positional = model_entry(entry, where)
        model = _canonical_model(model)
        models.append(f"{model}+{positional}" if positional else model)
        if ":" in model:
            # A user model: import it once here, so a typo fails the plan rather than every run of the grid.
            try:
                MODELS.get(model)
            except GaptuiError as exc:
                raise GaptuiError(f"{where}: key 'models' value '{model}': {exc}") from None
        elif model.lower() != BASELINE and model not in MODELS:
            known = [*MODELS.names(), BASELINE, *_solver_names()]
            raise GaptuiError(
                f"{where}: key 'models' value '{model}' is not a model{did_you_mean(model, known)}; "
                f"known: {', '.join(known)} or module.path:Factory"
            )
    datasets = _dataset_entries(where, raw, noise[0])
    notes: list[str] = []
    noise = unique_values(noise, float, "noise", notes)
    models = unique_values(models, str, "models", notes)
    notes += head.notes  # repeated seeds: notes follow the file's usual key order
    datasets = unique_values(datasets, _dataset_key, "datasets", notes)
    solver_names = {name for name, _ in solvers}
    model_options = _model_options(where, raw.get("model_options", {}), models + sorted(solver_names))
    labels = [_solver_label(name, model_options.get(name, {}) | options) for name, options in solvers]
    solver_labels = unique_values(labels, str, "solvers", notes)
    for label in solver_labels:  # the options [model_options] added are checked too
        solver_entry(label, where)
    decoders = _decoders(where, raw.get("decoders", []))
    run = parse_dataclass(RunOptions, {**head.run, **dataclasses.asdict(head.policy)}, f"{where}: [run]")
    laplacian = raw.get("laplacian", False)
    if not isinstance(laplacian, bool):
        raise GaptuiError(f"{where}: key 'laplacian' = {laplacian!r}: expected true or false")
    preset = Preset(
        **head.fields(notes),
        datasets=tuple(datasets),
        noise=tuple(float(x) for x in noise),
        models=tuple(m for m in models if m != BASELINE),
        laplacian=laplacian or BASELINE in models,
        solvers=tuple(solver_labels),
        decoders=tuple(decoders),
        model_options=model_options,
        run=run,
        slurm=head.slurm,
    )
    if not preset.models and not preset.laplacian and not preset.solvers:
        raise GaptuiError(f"{where}: key 'models' names no model: the grid would have no runs")
    # Validate the run options once through the same checks the worker applies, and build each model once so an
    # impossible budget or a bad model option fails here rather than in every worker of the grid.
    # The models first: a bad model option is then named by the preset key that holds it.
    _check_models(preset, where)
    grid(preset, Placement(".", "."), limit=1)
    return preset


def _dataset_entries(where: str, raw: dict[str, Any], eta: float) -> list[DatasetEntry]:
    """The ``[[datasets]]`` tables, each checked as the dataset spec it makes (at noise ``eta``)."""
    from engine.alignment.datasets import DatasetSpec
    from engine.sources import SOURCES, parse_params
    from engine.typed import parse_dataclass

    datasets = []
    for here, entry in dataset_tables(where, raw, DATASET_KEYS):
        ds = parse_dataclass(DatasetEntry, entry, here)
        try:
            if ds.base in SOURCES:  # typed values, as a preset gives them (an unknown base is named below)
                parse_params(SOURCES.get(ds.base), ds.params, "params", strict=True)
            DatasetSpec(ds.base, eta, ds.noise_model, ds.train, ds.val, ds.seed, ds.params).canonical()
        except GaptuiError as exc:
            raise GaptuiError(f"{here}: {exc}") from None
        datasets.append(ds)
    return datasets


def _model_options(where: str, raw: Any, models: list[str]) -> dict[str, dict[str, Any]]:
    """The ``[model_options]`` table: one inline table of options per model of ``models`` (checked at build)."""
    here = f"{where}: [model_options]"
    if not isinstance(raw, dict):
        raise GaptuiError(f"{here} = {raw!r}: expected a table of model name = {{ option = value }}")
    out: dict[str, dict[str, Any]] = {}
    plain = {model_entry(m, where)[0] for m in models}
    for name, options in raw.items():
        model = _canonical_model(name)
        if model == BASELINE or model not in plain:
            trained = sorted({m for m in plain if m != BASELINE})
            raise GaptuiError(
                f"{here}: key '{name}' is not one of the preset's models{did_you_mean(model, trained)}; "
                f"models: {', '.join(trained)}"
            )
        if not isinstance(options, dict):
            raise GaptuiError(f"{here}: key '{name}' = {options!r}: expected a table of options, e.g. {{ layers = 3 }}")
        out[model] = dict(options)
    return out


def _solver_names() -> tuple[str, ...]:
    from engine.alignment.solvers import SOLVERS

    return tuple(SOLVERS)


def _solver_label(name: str, options: dict[str, Any]) -> str:
    """The row label of a solver with ``options`` (defaults left out), which is also its preset entry."""
    from engine.alignment.solvers import non_default

    changed = non_default(name, options)
    return name + ("[" + ",".join(f"{k}={v}" for k, v in sorted(changed.items())) + "]" if changed else "")


def _decoders(where: str, raw: Any) -> list[str]:
    from engine.alignment.spec import DECODERS

    if raw == []:
        return []
    names = [str(d).lower() for d in list_of(where, "decoders", raw, str, "decoder names")]
    for name in names:
        if name not in DECODERS:
            raise GaptuiError(
                f"{where}: key 'decoders' value '{name}' is not a decoder{did_you_mean(name, DECODERS)}; "
                f"known: {', '.join(DECODERS)}"
            )
    return list(dict.fromkeys(names))


def _canonical_model(name: str) -> str:
    return name if ":" in name else name.lower()


def _dataset_key(entry: DatasetEntry) -> str:
    """Entries that resolve to the same datasets (defaults filled in, names canonical) are one grid value."""
    from engine.alignment.datasets import DatasetSpec

    canonical = DatasetSpec(entry.base, 0.0, entry.noise_model, entry.train, entry.val, entry.seed, entry.params)
    return json.dumps(canonical.canonical(), sort_keys=True)


def _check_models(preset: Preset, where: str) -> None:
    from engine import models
    from engine.alignment.features import feature_dim
    from engine.sources import SOURCES

    dims = {preset.run.out_dim or SOURCES.get(ds.base).embedding_dim for ds in preset.datasets}
    given = {k: getattr(preset.run, k) for k in RECIPE_FIELDS}
    for entry in preset.models:
        model, positional = model_entry(entry, where)
        if ":" in model:
            continue  # user models are smoke-tested by the worker, in its own environment
        values = resolve(preset.run.recipe, model, given, where)
        values["features"] = entry_features(preset, model, positional, where) or values["features"]
        for out_dim in sorted(dims):
            try:
                models.build(
                    model,
                    out_dim=out_dim,
                    budget=preset.run.budget,
                    in_dim=feature_dim(values["features"], where),
                    **{k: values[k] for k in SCAFFOLD_FIELDS},
                    **preset.model_options.get(model, {}),
                )
            except GaptuiError as exc:
                key = "[model_options]" if model in preset.model_options else "key 'models'"
                raise GaptuiError(f"{where}: {key} value '{entry}': {exc}") from None


def grid(preset: Preset, placement: Placement, limit: int | None = None) -> list[RunSpec]:
    """The run specs of a preset, seed-major so that early results cover every cell once before repeating.

    A grid is a set: a spec whose hash is already planned is dropped (one run id, one record, one folder).
    """
    specs: list[RunSpec] = []
    seen: set[str] = set()
    where = str(preset.path or preset.name)
    common = {**preset.run.spec_fields(), "datasets_dir": placement.datasets_dir, "data_root": placement.data_root}
    baseline = dict(common)  # the training-free baseline reads no positional inputs: none in its spec
    if isinstance(common.get("features"), str) and positional_text(common["features"]):
        baseline["features"] = "+".join(p for p in common["features"].split("+") if ":" not in p) or None
        if baseline["features"] is None:
            del baseline["features"]
    # The first seed's specs are parsed and checked; a later seed's differ from them only by ``seed`` (what a
    # 20,000-run grid would otherwise parse 20,000 times).
    first: dict[tuple[int, int, int], RunSpec] = {}
    decoded: dict[tuple[int, int, int, str], RunSpec] = {}
    for seed_index, seed in enumerate(preset.seeds):
        for d, entry in enumerate(preset.datasets):
            for e, eta in enumerate(preset.noise):
                dataset = entry.dataset_dict(eta)
                cell: list[RunSpec] = []
                if preset.laplacian and seed_index == 0:
                    cell.append(RunSpec.from_dict({**baseline, "dataset": dataset, "model": BASELINE}, where))
                if seed_index == 0:
                    cell += [_solver_spec(baseline, dataset, label, where) for label in preset.solvers]
                for m, model in enumerate(preset.models):
                    template = first.get((d, e, m))
                    if template is None:
                        fields = _entry_fields(preset, model, seed, where)
                        template = first[d, e, m] = RunSpec.from_dict({**common, "dataset": dataset, **fields}, where)
                        cell.append(template)
                    else:
                        cell.append(template.reseeded(seed))
                    for decoder in preset.decoders:  # right after the run it decodes (its dependency)
                        key = (d, e, m, decoder)
                        if key not in decoded:
                            decoded[key] = RunSpec.from_dict({**template.to_dict(), "decoder": decoder}, where)
                        cell.append(decoded[key].reseeded(seed))
                for spec in cell:
                    if spec.run_id() not in seen:
                        seen.add(spec.run_id())
                        specs.append(spec)
                if limit is not None and len(specs) >= limit:
                    return specs
    return specs


def _solver_spec(common: dict[str, Any], dataset: dict[str, Any], label: str, where: str) -> RunSpec:
    name, options = solver_entry(label, where)
    return RunSpec.from_dict({**common, "dataset": dataset, "model": name, "model_kwargs": options}, where)


def _entry_fields(preset: Preset, entry: str, seed: int, where: str) -> dict[str, Any]:
    """The spec fields of one ``models`` entry (a model, or a model with positional inputs) for one seed."""
    model, positional = model_entry(entry, where)
    fields = {"model": model, "model_kwargs": preset.model_options.get(model, {}), "seed": seed}
    features = entry_features(preset, model, positional, where)
    return {**fields, "features": features} if features else fields


def dump_preset(preset: Preset) -> str:
    """TOML text of a preset with its ``[slurm]`` table; ``parse_preset`` reads it back to an equal preset."""
    lines = [f"name = {toml_value(preset.name)}", f"description = {toml_value(preset.description)}"]
    lines += [
        f"noise = {toml_value(list(preset.noise))}",
        f"models = {toml_value(list(preset.models))}",
        f"seeds = {toml_value(list(preset.seeds))}",
        f"laplacian = {toml_value(preset.laplacian)}",
    ]
    lines += [f"solvers = {toml_value(list(preset.solvers))}"] if preset.solvers else []
    lines += [f"decoders = {toml_value(list(preset.decoders))}"] if preset.decoders else []
    lines.append("")
    if preset.model_options:
        lines += ["[model_options]"]
        for model, options in preset.model_options.items():
            inner = ", ".join(f"{k} = {toml_value(v)}" for k, v in options.items())
            lines.append(f"{toml_value(model) if ':' in model else model} = {{ {inner} }}")
        lines.append("")
    lines.append("[run]")
    defaults = RunOptions()
    for key, value in dataclasses.asdict(preset.run).items():
        if value is not None and value != getattr(defaults, key):
            lines.append(f"{key} = {toml_value(value)}")
    for ds in preset.datasets:
        lines += ["", "[[datasets]]", f"base = {toml_value(ds.base)}"]
        if ds.params:
            inner = ", ".join(f"{k} = {toml_value(v)}" for k, v in ds.params.items())
            lines.append(f"params = {{ {inner} }}")
        for key in ("noise_model", "train", "val"):
            if getattr(ds, key) is not None:
                lines.append(f"{key} = {toml_value(getattr(ds, key))}")
        if ds.seed:
            lines.append(f"seed = {ds.seed}")
    return "\n".join(lines) + "\n" + slurm_table(preset.slurm)
