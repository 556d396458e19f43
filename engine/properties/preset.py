"""The ``properties`` family's presets: a study grid of properties x poolings x dimensions (x strategies) x seeds."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from engine.errors import GaptuiError, did_you_mean
from engine.properties.definitions import PROPERTY_NAMES
from engine.properties.scores import DIMENSIONS
from engine.properties.spec import CellOptions, PropertySpec
from engine.tasks.presets import PresetBase, RunPolicy, list_of, parse_head, unique_values
from engine.tasks.spec import Placement

DIMENSION_ORDER = tuple(DIMENSIONS)


@dataclass(frozen=True, kw_only=True)
class StudyOptions(CellOptions, RunPolicy):
    """The ``[run]`` table of a preset: cell options copied into every spec (``spec_fields()``), plus the run policy
    (:class:`engine.tasks.presets.RunPolicy`: how the scheduler treats runs)."""


@dataclass(frozen=True)
class Preset(PresetBase):
    """A property study grid: properties x poolings x dimensions x seeds::

    task = "properties"
    description = "what this grid is for"
    properties = ["reflexive", "transitive"]
    poolings = ["mean", "sopool_bimap"]
    dimensions = ["generalisation", "sensitivity", "robustness"]   # optional: all three
    seeds = [0, 1]

    [run]                     # PropertySpec options shared by every run
    epochs = 20
    graphs = 10000
    """

    task: ClassVar[str] = "properties"
    properties: tuple[str, ...]
    poolings: tuple[str, ...]
    dimensions: tuple[str, ...]
    run: StudyOptions = field(default_factory=StudyOptions)
    strategies: tuple[str, ...] = ("standard",)

    @property
    def size(self) -> int:
        cells = sum(len(strategy_dimensions(self.dimensions, s)) for s in self.strategies)
        return len(self.properties) * len(self.poolings) * cells * len(self.seeds)

    @property
    def policy(self) -> Any:
        """The ``[run]`` table, which holds the run policy (timeout, retries, pack_seeds) too."""
        return self.run


def strategy_dimensions(dimensions: tuple[str, ...] | list[str], strategy: str) -> list[str]:
    """The cells of one (property, pooling, seed) under ``strategy``: the asked dimensions it has, each after the
    cell whose model it tests (added if absent), in the study's order."""
    from engine.properties.strategies import dimensions_for, trained_by

    uses = trained_by(strategy)
    dims = {d for d in dimensions if d in dimensions_for(strategy)}
    dims |= {uses[d] for d in dims if d in uses}
    return [d for d in DIMENSION_ORDER if d in dims]


#: The family's own top-level keys (the common ones, ``task`` ... ``[run]``, are :mod:`engine.tasks.presets`').
OWN_KEYS = ("properties", "poolings", "dimensions", "strategies")
#: The cell options a ``[run]`` table may set beside the policy.
RUN_KEYS = tuple(f.name for f in dataclasses.fields(CellOptions))


def _names(where: str, raw: dict[str, Any], key: str, what: str, known: Any, more: str = "") -> list[str]:
    """The list ``raw[key]`` of names, each one of ``known`` (or, with ``more``, anything containing ``:``)."""
    names = list_of(where, key, raw[key], str, f"{what} names")
    for name in names:
        if name not in known and not (more and ":" in name):
            raise GaptuiError(
                f"{where}: key '{key}' value '{name}' is not a {what}{did_you_mean(name, known)}; "
                f"known: {', '.join(known)}{more}"
            )
    return names


def parse_preset(raw: dict[str, Any], path: Path | None = None, where: str | None = None) -> Preset:
    from engine.properties.poolings import POOLINGS
    from engine.typed import parse_dataclass

    head = parse_head(raw, path, "properties", OWN_KEYS, RUN_KEYS, required=("properties", "poolings"), where=where)
    where, raw = head.where, head.own
    notes: list[str] = []
    props = unique_values(_names(where, raw, "properties", "property", PROPERTY_NAMES), str, "properties", notes)
    poolings = _names(where, raw, "poolings", "pooling", POOLINGS.names(), " or module.path:factory")
    poolings = unique_values(poolings, str, "poolings", notes)
    dims = _names(where, {"dimensions": list(DIMENSION_ORDER), **raw}, "dimensions", "dimension", DIMENSION_ORDER)
    dims = unique_values(dims, str, "dimensions", notes)
    from engine.properties.strategies import STRATEGIES, dimensions_for

    strategies = _names(where, {"strategies": ["standard"], **raw}, "strategies", "training strategy", STRATEGIES)
    strategies = unique_values(strategies, str, "strategies", notes)
    for strategy in strategies:
        if not set(dims) & set(dimensions_for(strategy)):
            raise GaptuiError(
                f"{where}: strategy {strategy} measures none of the dimensions asked ({', '.join(dims)}); it has "
                + ", ".join(dimensions_for(strategy))
            )
        if "robustness" in dims and "robustness" not in dimensions_for(strategy):
            notes.append(f"strategy {strategy}: no robustness cells (its model trains on GraphPerturb too)")
    notes += head.notes  # repeated seeds: notes follow the file's usual key order
    run = parse_dataclass(StudyOptions, {**head.run, **dataclasses.asdict(head.policy)}, f"{where}: [run]")
    preset = Preset(
        **head.fields(notes),
        properties=tuple(props),
        poolings=tuple(poolings),
        dimensions=tuple(d for d in DIMENSION_ORDER if d in dims),
        run=run,
        strategies=tuple(strategies),
    )
    grid(preset, Placement(".", "."), limit=1)  # the worker's own checks, once, at parse time
    return preset


def grid(preset: Preset, placement: Placement, limit: int | None = None) -> list[PropertySpec]:
    """Seed-major; a cell that tests another's model (robustness; sensitivity under finetune_perturb) comes right
    after the cell it depends on (added if absent); strategies innermost but for the dimensions."""
    where = str(preset.path or preset.name)
    common = {**preset.run.spec_fields(), "datasets_dir": placement.datasets_dir}
    specs: list[PropertySpec] = []
    for seed in preset.seeds:
        for prop in preset.properties:
            for pooling in preset.poolings:
                for strategy in preset.strategies:
                    for dim in strategy_dimensions(preset.dimensions, strategy):
                        raw = {**common, "property": prop, "pooling": pooling, "dimension": dim, "seed": seed}
                        if strategy != "standard":
                            raw["strategy"] = strategy
                        specs.append(PropertySpec.from_dict(raw, where))
                        if limit is not None and len(specs) >= limit:
                            return specs
    return specs
