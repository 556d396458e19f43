"""Training recipes of the alignment benchmark: named sets of the options that decide how a model is trained.

A recipe fills in every :data:`RECIPE_FIELDS` field of a :class:`~engine.alignment.spec.RunSpec` that the user
left unset (``None``); a field the user sets wins over the recipe. A run's identity is the values it trained
with, never the recipe's name: a spec that names ``paper`` and one that spells out the same values are one run.
Which recipe trained a run is read back from those values (:func:`recipe_label`), so a record can never claim a
recipe whose values it does not have.

- ``gaptui`` (the default): ``ngab``'s model and optimiser on degree inputs (``(1, log(1 + degree))``), a linear
  first layer for GCN; the measurements behind it are in ``docs/fidelity.md`` (``benchmarks/ablation_fidelity.py``).
- ``ngab``: the authors' newer package (``ngab`` 0.1.1) as its models were measured: constant inputs, a
  ``GCNConv`` first layer then GraphNorm, blocks ``h + GraphNorm(GELU(conv(h)))``, AdamW at a constant 1e-3 with
  weight decay 0.08, gradient values clipped at 0.1.
- ``paper``: the paper's package (section 5, Appendix C): constant inputs, a per-model first convolution, two
  GraphNorms over the whole batch, ReLU, one-cycle to 3e-3 after 30 warm-up steps, weight decay 0.01.
- ``legacy``: gaptui's defaults before recipes existed (degree inputs, a linear input layer, per-graph GraphNorm
  before ReLU in every block, the paper's optimiser). A spec written before recipes (no ``recipe`` key) is read
  with it, so every earlier run keeps its id and its meaning.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.alignment.solvers import SOLVERS
from engine.errors import GaptuiError, did_you_mean
from engine.typed import short_value

#: The spec fields a recipe sets: node inputs, the scaffold's model options and the optimiser.
RECIPE_FIELDS = (
    "features",
    "input_layer",
    "norm",
    "activation",
    "block",
    "lr",
    "schedule",
    "warmup_steps",
    "weight_decay",
    "clip",
    "clip_mode",
)
#: Of those, the ones that are options of the built-in model scaffold (a user's ``module:Class`` takes none).
SCAFFOLD_FIELDS = ("input_layer", "norm", "activation", "block")


@dataclass(frozen=True)
class Recipe:
    """A named training recipe: a value for every :data:`RECIPE_FIELDS` field, optionally per model."""

    name: str
    summary: str
    values: dict[str, Any]
    #: Model name -> the fields that differ for that model (a recipe whose best setting is model-specific).
    per_model: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        missing = [k for k in RECIPE_FIELDS if k not in self.values]
        if missing:
            raise ValueError(f"recipe {self.name}: no value for {', '.join(missing)}")

    def for_model(self, model: str) -> dict[str, Any]:
        """The recipe's values for ``model`` (its per-model values over the shared ones)."""
        return {**self.values, **self.per_model.get(model, {})}


_LEGACY = {
    "features": "degree",
    "input_layer": "linear",
    "norm": "per-graph",
    "activation": "relu",
    "block": "norm-act",
    "lr": 3e-3,
    "schedule": "one-cycle",
    "warmup_steps": 30,
    "weight_decay": 0.01,
    "clip": 0.1,
    "clip_mode": "value",
}
_NGAB = {
    **_LEGACY,
    "features": "ones",
    "input_layer": "gcn",
    "activation": "gelu",
    "block": "act-norm",
    "lr": 1e-3,
    "schedule": "constant",
    "warmup_steps": 0,
    "weight_decay": 0.08,
}

RECIPES: dict[str, Recipe] = {
    r.name: r
    for r in (
        Recipe(
            "gaptui",
            "degree inputs, a GCNConv first layer, GraphNorm after GELU, AdamW at a constant 1e-3 (decay 0.08)",
            {**_NGAB, "features": "degree"},
            # Measured (docs/fidelity.md): GCN loses 6 points with a GCNConv first layer on degree inputs, and
            # gains 2 over ngab's whole recipe with a linear one; every other model is best with the GCNConv.
            per_model={"gcn": {"input_layer": "linear"}},
        ),
        Recipe("ngab", "the authors' newer package: ones, GCNConv first, GraphNorm after GELU, constant 1e-3", _NGAB),
        Recipe(
            "paper",
            "the paper's package: ones, per-model first conv, whole-batch GraphNorm, one-cycle to 3e-3",
            {**_LEGACY, "features": "ones", "input_layer": "conv", "norm": "whole-batch"},
        ),
        Recipe("legacy", "gaptui before recipes: degree inputs, GraphNorm before ReLU, one-cycle to 3e-3", _LEGACY),
    )
}
DEFAULT_RECIPE = "gaptui"
#: The recipe of a spec that names none: it was written before recipes existed.
LEGACY_RECIPE = "legacy"
#: The models whose runs no recipe trains: the training-free baseline, whose recipe reads ``-`` (its spec still
#: holds the recipe's values, as it held the grid's run options before recipes, so its id is what it was), and the
#: training-free solvers.
UNTRAINED = ("laplacian", *SOLVERS)


def check_recipe(name: Any, where: str) -> Recipe:
    """The recipe called ``name``; a bad name raises one line naming ``where``, the value and the choices."""
    if not isinstance(name, str) or name not in RECIPES:
        raise GaptuiError(
            f"{where}: recipe {name!r} is not one of {', '.join(RECIPES)}{did_you_mean(str(name), RECIPES)}"
        )
    return RECIPES[name]


def resolve(recipe: str, model: str, given: Mapping[str, Any], where: str = "run spec") -> dict[str, Any]:
    """Every :data:`RECIPE_FIELDS` value of a run of ``model``: ``given``'s where set (not ``None``), else the
    recipe's. A user's ``module:Class`` model takes the scaffold fields at their neutral values (it is called
    with none of them)."""
    values = check_recipe(recipe, where).for_model(model)
    if ":" in model:
        values = {**values, **{k: _LEGACY[k] for k in SCAFFOLD_FIELDS}}
    return {k: values[k] if given.get(k) is None else given[k] for k in RECIPE_FIELDS}


def recipe_label(values: Mapping[str, Any], model: str, named: str | None = None) -> str:
    """Which recipe ``values`` (a spec's fields; missing ones read as ``legacy``'s) are, for ``model``.

    ``named`` (the recipe the spec asked for) is preferred when it matches; otherwise the first recipe that
    matches every field; otherwise the named (or closest) recipe with the fields that differ, e.g.
    ``gaptui+lr=0.002``. ``"-"`` for the training-free baseline.
    """
    if model in UNTRAINED:
        return "-"
    full = {k: values.get(k, _LEGACY[k]) for k in RECIPE_FIELDS}
    # Positional inputs (rwpe:K, lap:K) belong to the model's row (graphgps+rwpe:16), not to the recipe.
    full["features"] = base_features(full["features"])
    user_model = ":" in model
    candidates = [named] if named in RECIPES else []
    candidates += [n for n in RECIPES if n != named]
    best: tuple[int, str, list[str]] | None = None
    for name in candidates:
        wanted = RECIPES[name].for_model(model)
        differ = [
            k for k in RECIPE_FIELDS if not (user_model and k in SCAFFOLD_FIELDS) and not _same(full[k], wanted[k])
        ]
        if not differ:
            return name
        if best is None or len(differ) < best[0] or (name == named and len(differ) == best[0]):
            best = (len(differ), name, differ)
    assert best is not None
    _, name, differ = best
    return name + "".join(f"+{k}={short_value(full[k])}" for k in differ)


def base_features(features: Any) -> Any:
    """``features`` without its positional parts (``degree`` of ``degree+rwpe:16``); a value with no base part
    (``rwpe:16`` alone) is kept whole, so that a recipe label still says it differs."""
    if not isinstance(features, str) or ":" not in features:
        return features
    base = [part for part in features.split("+") if ":" not in part]
    return base[0] if len(base) == 1 else features


#: Labels already worked out, by the fields they depend on: a history's 20,000 records hold a few recipes.
_LABELS: dict[tuple[Any, ...], str] = {}


def spec_recipe_label(raw: Mapping[str, Any]) -> str:
    """:func:`recipe_label` of a spec in its dict form (a history record's ``spec``), without building the spec."""
    key = (tuple(raw.get(k) for k in RECIPE_FIELDS), raw.get("model"), raw.get("recipe", LEGACY_RECIPE))
    try:
        label = _LABELS.get(key)
    except TypeError:  # a list-valued field: not worth a key
        return _spec_recipe_label(raw)
    if label is None:
        if len(_LABELS) > 4096:
            _LABELS.clear()
        label = _LABELS[key] = _spec_recipe_label(raw)
    return label


def _spec_recipe_label(raw: Mapping[str, Any]) -> str:
    values = {k: raw[k] for k in RECIPE_FIELDS if raw.get(k) is not None}
    named = raw.get("recipe", LEGACY_RECIPE)
    return recipe_label(values, str(raw.get("model", "")).lower(), named if isinstance(named, str) else None)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return abs(float(a) - float(b)) <= 1e-12 * max(1.0, abs(float(b)))
    return a == b
