"""``brec`` presets: models (with positional inputs) x BREC categories x seeds, plus the exact WL rows.

::

    task = "brec"
    description = "what this grid is for"
    models = ["gcn", "gin", "graphgps+rwpe:16"]   # a model entry may add positional inputs, as in alignment
    categories = ["basic", "cfi"]                 # optional: all seven
    wl = ["1-wl", "3-wl"]                         # optional: the exact rows (default both; [] for none)
    seeds = [0, 1, 2]

    [model_options]                               # optional: options of one model, e.g. gin = { layers = 3 }

    [run]                                         # BrecSpec options shared by every run, and the run policy
    relabellings = 32
    pairs = 4                                     # the first 4 pairs of each category (default all)

    [slurm]                                       # optional: how --backend slurm submits the runs
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from engine.brec.data import CATEGORY_KEYS, category
from engine.brec.spec import BrecSpec
from engine.brec.wl import WL_ROWS
from engine.errors import GaptuiError, did_you_mean
from engine.tasks.presets import PresetBase, SlurmOptions, list_of, parse_head, spec_options, unique_values
from engine.tasks.spec import Placement

#: The ``[run]`` table: every BrecSpec option a grid does not fill in, plus the run policy.
BrecOptions = spec_options(BrecSpec, ("model", "category", "model_kwargs", "seed", "task"), "BrecOptions", __name__)
OWN_KEYS = ("models", "categories", "wl", "model_options")
RUN_KEYS = tuple(f.name for f in dataclasses.fields(BrecOptions) if f.name in BrecOptions().spec_fields())


@dataclass(frozen=True)
class BrecPreset(PresetBase):
    """A BREC grid: WL rows once per category, then models x categories x seeds (seed-major)."""

    task: ClassVar[str] = "brec"
    models: tuple[str, ...]
    categories: tuple[str, ...] = CATEGORY_KEYS
    wl: tuple[str, ...] = WL_ROWS
    model_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    run: Any = field(default_factory=BrecOptions)
    slurm: SlurmOptions | None = None

    @property
    def size(self) -> int:
        return len(self.categories) * (len(self.wl) + len(self.models) * len(self.seeds))

    @property
    def policy(self) -> Any:
        return self.run


def _names(where: str, raw: dict[str, Any], key: str, default: tuple[str, ...], what: str) -> list[str]:
    if key not in raw:
        return list(default)
    value = raw[key]
    if value == [] and key == "wl":
        return []
    return [str(v).lower() for v in list_of(where, key, value, str, what)]


def parse_preset(raw: dict[str, Any], path: Path | None = None, where: str | None = None) -> BrecPreset:
    """Validate a ``brec`` preset document; every error names ``where`` (default: the file), the key and the value."""
    from engine.alignment.preset import model_entry
    from engine.typed import parse_dataclass

    head = parse_head(raw, path, "brec", OWN_KEYS, RUN_KEYS, slurm=True, where=where)
    where, own = head.where, head.own
    notes: list[str] = []
    categories = _names(where, own, "categories", CATEGORY_KEYS, "BREC category names")
    for key in categories:
        category(key, f"{where}: key 'categories' value")
    wl = _names(where, own, "wl", WL_ROWS, "WL rows (1-wl, 3-wl)")
    for row in wl:
        if row not in WL_ROWS:
            choices = ", ".join(WL_ROWS)
            raise GaptuiError(f"{where}: key 'wl' value '{row}' is not one of {choices}{did_you_mean(row, WL_ROWS)}")
    models = []
    entries = own.get("models", [])
    for entry in list_of(where, "models", entries, str, "model names") if entries != [] else []:
        model, positional = model_entry(entry, where)
        model = model if ":" in model else model.lower()
        if model in WL_ROWS:
            wl.append(model)
            continue
        models.append(f"{model}+{positional}" if positional else model)
    options = own.get("model_options", {})
    if not isinstance(options, dict) or not all(isinstance(v, dict) for v in options.values()):
        raise GaptuiError(f"{where}: [model_options] = {options!r}: expected model = {{ option = value }} tables")
    plain = {model_entry(m, where)[0] for m in models}
    for name in options:
        if name not in plain:
            raise GaptuiError(
                f"{where}: [model_options]: key '{name}' is not one of the preset's models{did_you_mean(name, plain)}"
            )
    run = parse_dataclass(BrecOptions, {**head.run, **dataclasses.asdict(head.policy)}, f"{where}: [run]")
    models = unique_values(models, str, "models", notes)
    categories = unique_values(categories, str, "categories", notes)
    wl = unique_values(wl, str, "wl", notes)
    preset = BrecPreset(
        **head.fields([*notes, *head.notes]),
        models=tuple(models),
        categories=tuple(categories),
        wl=tuple(wl),
        model_options={k: dict(v) for k, v in options.items()},
        run=run,
        slurm=head.slurm,
    )
    if not preset.models and not preset.wl:
        raise GaptuiError(f"{where}: key 'models' names no model and 'wl' no test: the grid would have no runs")
    # The worker's own checks, once, at parse time: every exact row and the first trained run.
    grid(preset, Placement(".", "."), limit=len(preset.wl) * len(preset.categories) + 1)
    _check_models(preset, where)
    return preset


def _entry_fields(preset: BrecPreset, entry: str, where: str) -> dict[str, Any]:
    from engine.alignment.features import parse_features
    from engine.alignment.preset import model_entry

    model, positional = model_entry(entry, where)
    fields: dict[str, Any] = {"model": model, "model_kwargs": preset.model_options.get(model, {})}
    if positional:
        base = preset.run.features
        fields["features"] = parse_features(f"{base}+{positional}", f"{where}: key 'models' value '{entry}'").text
    return fields


def _check_models(preset: BrecPreset, where: str) -> None:
    """Build each built-in model once: an impossible budget or a bad option fails the plan, not every worker."""
    from engine.alignment.features import feature_dim
    from engine.models import build

    for entry in preset.models:
        fields = _entry_fields(preset, entry, where)
        if ":" in fields["model"]:
            continue
        try:
            build(
                fields["model"],
                out_dim=preset.run.out_dim,
                budget=preset.run.budget,
                in_dim=feature_dim(fields.get("features", preset.run.features)),
                **fields["model_kwargs"],
            )
        except GaptuiError as exc:
            key = "[model_options]" if fields["model"] in preset.model_options else "key 'models'"
            raise GaptuiError(f"{where}: {key} value '{entry}': {exc}") from None


def grid(preset: BrecPreset, placement: Placement, limit: int | None = None) -> list[BrecSpec]:
    """The WL rows of each category first (training-free, once), then seed-major models x categories."""
    where = str(preset.path or preset.name)
    common = {**preset.run.spec_fields(), "datasets_dir": placement.datasets_dir}
    specs: list[BrecSpec] = []
    seen: set[str] = set()

    def add(spec: BrecSpec) -> bool:
        if spec.run_id() not in seen:
            seen.add(spec.run_id())
            specs.append(spec)
        return limit is not None and len(specs) >= limit

    for cat in preset.categories:
        for row in preset.wl:
            if add(BrecSpec.from_dict({**common, "model": row, "category": cat}, where)):
                return specs
    first: dict[tuple[str, str], BrecSpec] = {}
    for seed in preset.seeds:
        for cat in preset.categories:
            for entry in preset.models:
                template = first.get((cat, entry))
                if template is None:
                    raw = {**common, **_entry_fields(preset, entry, where), "category": cat, "seed": seed}
                    spec = first[cat, entry] = BrecSpec.from_dict(raw, where)
                else:
                    spec = template.reseeded(seed)
                if add(spec):
                    return specs
    return specs
