"""The alignment family's New-experiment form: base datasets with their parameters, noise levels, models, seeds
and run options (the fields the terminal app draws; a filled form is a preset document, see
:class:`engine.alignment.preset.Preset`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.alignment.recipes import DEFAULT_RECIPE, RECIPES
from engine.errors import GaptuiError
from engine.tasks.form import FormField, form_table, precision_field, table_values

#: The noise grid of the paper (Table D.3), as shares.
PAPER_NOISE = (0.04, 0.06, 0.08, 0.12, 0.15, 0.18, 0.24, 0.30)
BASELINE = "laplacian"
#: Form key -> ``[run]`` key of the run options the form shows (the others go in ``run_more``).
RUN_FIELDS = {
    "epochs": "epochs",
    "batch_size": "batch_size",
    "budget": "budget",
    "out_dim": "out_dim",
    "eval_every": "eval_every",
    "precision": "precision",
    "recipe": "recipe",
    "timeout": "timeout",
    "retries": "retries",
}
DATASET_FIELDS = {"base": "base", "params": "params", "noise_model": "noise_model", "train": "train", "val": "val"}


def noise_key(eta: float) -> float:
    """A noise level rounded so 0.12 typed and 0.12 computed compare equal."""
    return round(float(eta), 6)


def format_noise_percent(eta: float) -> str:
    """``0.12`` -> ``"12 %"`` (how the form lists noise levels)."""
    return f"{eta * 100:g} %"


def parse_noise_level(item: str) -> float:
    """A noise level typed as ``0.05`` or ``5%`` (a number >= 1 can only mean percent)."""
    from engine.alignment.noise import check_noise

    text = item.strip()
    try:
        value = float(text.rstrip("%").strip())
    except ValueError:
        raise GaptuiError(f"noise level '{text}': expected a share like 0.12 or a percentage like 12%") from None
    if text.endswith("%") or value >= 1:
        value /= 100
    return noise_key(check_noise(value, where="noise level"))


def _bases() -> list[str]:
    from engine.sources import SOURCES

    return SOURCES.names()


#: Model entries with positional inputs that the form offers beside the plain models (the zoo preset's).
POSITIONAL_ENTRIES = ("graphgps+rwpe:16", "graphgps+lap:8")


def _models() -> list[str]:
    from engine.models import names

    return [*names(), *POSITIONAL_ENTRIES, BASELINE]


def _solvers() -> list[str]:
    from engine.alignment.solvers import SOLVERS

    return list(SOLVERS)


def _decoders() -> list[str]:
    from engine.alignment.spec import DECODERS

    return list(DECODERS)


def _noise_models() -> list[str]:
    from engine.alignment.noise import NOISE_MODELS

    return list(NOISE_MODELS)


def row_hints(row: Mapping[str, Any]) -> dict[str, str]:
    """Placeholders of a dataset row: its base dataset's parameters with their defaults, its train and val sizes."""
    from engine.sources import SOURCES, params_dict, parse_params

    try:
        source = SOURCES.get(str(row.get("base")))
        defaults = params_dict(parse_params(source, {}))
    except GaptuiError:
        return {}
    train, val = ("all" if size is None else str(size) for size in source.sizes[:2])
    params = " ".join(f"{k}={v}" for k, v in defaults.items())
    return {"params": params or "no parameters", "train": train, "val": val}


def fields() -> tuple[FormField, ...]:
    """The form: base datasets, noise levels, rows (models, solvers, search), then the training options."""
    return (*_grid_fields(), *_training_fields("Training"))


def _grid_fields() -> tuple[FormField, ...]:
    """What the grid spans: base datasets, noise levels and its rows."""
    dataset = (
        FormField("base", "base", "choice", "er", "base dataset", choices_from=_bases),
        FormField("params", "parameters", "params", {}, "base dataset parameters, key=value"),
        FormField("noise_model", "noise model", "choice", None, "default: the base's", choices_from=_noise_models),
        FormField("train", "train", "int", None, "training pairs", placeholder="default"),
        FormField("val", "val", "int", None, "validation pairs", placeholder="default"),
        FormField("seed", "seed", "int", None, "dataset seed", placeholder="0"),
    )
    return (
        FormField(
            "datasets",
            "base datasets",
            "rows",
            [{"base": "er"}],
            section="Base datasets",
            fields=dataset,
            hints=row_hints,
        ),
        FormField(
            "noise",
            "noise levels η",
            "multi",
            list(PAPER_NOISE),
            "more levels: 0.1 or 10%",
            choices=PAPER_NOISE,
            label_of=format_noise_percent,
            parse_item=parse_noise_level,
            section="Noise levels η",
        ),
        FormField(
            "models",
            "models",
            "multi",
            [],
            "more: module.path:Factory",
            choices_from=_models,
            free=True,
            section="Models (laplacian: no training)",
        ),
        FormField(
            "solvers",
            "solvers",
            "multi",
            [],
            "training-free rows; with options: faq[init=barycenter]",
            choices_from=_solvers,
            free=True,
            section="Solvers (docs/solvers.md)",
        ),
        FormField(
            "decoders",
            "search on each model",
            "multi",
            [],
            "FAQ started from each trained run's matching (row gcn+faq)",
            choices_from=_decoders,
            section="Search on each model",
        ),
    )


def _training_fields(section: str) -> tuple[FormField, ...]:
    """The seeds, the training options, the recipe and the run policy, in ``section``."""
    from engine.alignment.preset import RunOptions

    defaults = RunOptions()
    return (
        FormField("seeds", "seeds", "seeds", [0], placeholder="0-9 or 0,3", section=section),
        *(
            FormField(key, key.replace("_", " "), "int", None, placeholder=str(getattr(defaults, key)), section=section)
            for key in ("epochs", "batch_size", "budget")
        ),
        FormField("out_dim", "out dim", "int", None, placeholder="per dataset", section=section),
        FormField("eval_every", "eval every", "int", None, placeholder="1 (epochs)", section=section),
        FormField(
            "recipe",
            "recipe",
            "choice",
            None,
            "how models are trained (docs/fidelity.md); more [run] options override its fields",
            choices=tuple(RECIPES),
            placeholder=DEFAULT_RECIPE,
            section=section,
        ),
        precision_field(section),
        FormField("timeout", "timeout (s)", "number", None, placeholder="none", section=section),
        FormField("retries", "retries", "int", None, placeholder="0 (on failure)", section=section),
        FormField("run_more", "more [run] options", "params", {}, "lr=0.001 features=degree ...", section=section),
    )


def preset_from_form(values: dict[str, Any]) -> dict[str, Any]:
    models = [str(m) for m in values.get("models") or []]
    trained = [m for m in models if m != BASELINE]
    solvers = [str(m) for m in values.get("solvers") or []]
    doc: dict[str, Any] = {
        "noise": [float(n) for n in values.get("noise") or []],
        "models": trained or [m for m in models if m == BASELINE],
        "seeds": list(values.get("seeds") or []),
        "laplacian": BASELINE in models,
    }
    if solvers:
        doc["solvers"] = solvers
        if not trained:
            del doc["models"]  # a grid without trained models: the solvers (and the laplacian flag) are its rows
    if values.get("decoders"):
        doc["decoders"] = [str(d) for d in values["decoders"]]
    run = form_table(values, RUN_FIELDS, "run_more")
    if run:
        doc["run"] = run
    datasets = []
    for row in values.get("datasets") or []:
        entry = form_table(row, {**DATASET_FIELDS, "seed": "seed"})
        if not entry.get("params"):
            entry.pop("params", None)
        datasets.append(entry)
    doc["datasets"] = datasets
    return doc


def form_values(raw: dict[str, Any]) -> dict[str, Any]:
    models = list(raw.get("models") or [])
    if raw.get("laplacian") is True and BASELINE not in models:
        models.append(BASELINE)
    values: dict[str, Any] = {
        "noise": list(raw.get("noise") or []),
        "models": models,
        "solvers": list(raw.get("solvers") or []),
        "decoders": list(raw.get("decoders") or []),
        "seeds": list(raw.get("seeds") or []),
        **table_values(raw.get("run"), RUN_FIELDS, "run_more"),
    }
    values["datasets"] = [
        {**table_values(entry, {**DATASET_FIELDS, "seed": "seed"}), "params": dict(entry.get("params") or {})}
        for entry in raw.get("datasets") or []
        if isinstance(entry, dict)
    ]
    return values
