"""The ``gape`` family's presets: a Table 1 grid (datasets x PEs x seeds) and its pretraining runs (Table F.7).

A preset expresses the whole chain: per dataset one pretraining alignment run, then every PE x seed, each ``gape``
PE bound to its dataset's pretraining run by that run's hash.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from engine.alignment.spec import RunSpec
from engine.errors import GaptuiError
from engine.gape.pe import KINDS, parse_pe
from engine.gape.spec import GapeSpec
from engine.tasks.presets import (
    PresetBase,
    PresetHead,
    RunPolicy,
    dataset_tables,
    list_of,
    parse_head,
    unique_values,
    unknown_keys,
)
from engine.tasks.spec import Placement
from engine.typed import parse_dataclass

#: Row order of Table 1.
PE_ORDER = ("none", "lap", "abs-lap", "r-lap", "rwpe", "gape", "gape+rwpe")


@dataclass(frozen=True)
class Pretraining:
    """The alignment run whose model gives a dataset's GAPE (Table F.7): model, noise, embedding size, options."""

    model: str = "gatedgcn"
    noise: float = 0.15
    out_dim: int = 32
    epochs: int = 300
    budget: int = 60_000
    batch_size: int = 100
    lr: float = 3e-3
    train: int | None = None
    val: int | None = None
    seed: int = 0


#: GapeSpec options a preset may set per dataset (``[datasets.run]``): all but what the grid fills in.
RUN_KEYS = tuple(
    f.name for f in dataclasses.fields(GapeSpec) if f.name not in ("dataset", "pe", "task", "seed", *GapeSpec.PLACEMENT)
)


@dataclass(frozen=True)
class GapeDataset:
    base: str
    params: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    pretrain: Pretraining = field(default_factory=Pretraining)
    #: GapeSpec options of the dataset's downstream runs (a Table F.6 column); keys in :data:`RUN_KEYS`.
    run: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class GapePreset(PresetBase):
    """A Table 1 grid::

    task = "gape"
    description = "..."
    pes = ["none", "lap", "abs-lap", "r-lap", "rwpe", "gape", "gape+rwpe"]
    seeds = [0, 1, 2, 3]

    [run]                     # optional: the run policy (engine.tasks.presets.RunPolicy)
    timeout = 3600            # seconds per run
    retries = 0
    precision = "auto"        # every run of the grid, pretraining included: auto, fp32 or bf16

    [[datasets]]
    base = "aqsol"
    params = {}
    [datasets.pretrain]       # Table F.7 (engine.gape.preset.Pretraining)
    model = "gatedgcn"
    noise = 0.15
    [datasets.run]            # Table F.6 (engine.gape.spec.GapeSpec)
    steps = 10000
    """

    task: ClassVar[str] = "gape"
    pes: tuple[str, ...]
    datasets: tuple[GapeDataset, ...]
    #: How the scheduler treats its runs (the ``[run]`` table: timeout, retries, pack_seeds).
    policy: RunPolicy = field(default_factory=RunPolicy)
    #: Run options of every run of the grid, pretraining included (the ``[run]`` table's :data:`GRID_RUN_KEYS`);
    #: a dataset's ``[datasets.run]`` sets its downstream runs' own.
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def size(self) -> int:
        needs = any(
            parse_pe(pe if pe in ("none", "lap", "abs-lap", "r-lap", "rwpe") else "gape:x").run for pe in self.pes
        )
        return len(self.datasets) * (len(self.pes) * len(self.seeds) + int(needs))


#: The run options a gape preset's ``[run]`` table may set beside the policy, for every run of the grid.
GRID_RUN_KEYS = ("precision",)
#: The family's own top-level keys (the common ones, ``task`` ... ``[run]``, are :mod:`engine.tasks.presets`').
OWN_KEYS = ("pes", "datasets")
#: Policy keys that older gape presets set at the top level rather than in ``[run]``: still read there.
TOP_LEVEL_POLICY = ("timeout", "retries")
DATASET_KEYS = ("base", "params", "seed", "pretrain", "run")


def pretraining_spec(entry: GapeDataset, placement: Placement, precision: str = "auto") -> RunSpec:
    """The dataset's pretraining alignment run; ``precision`` is the grid's (its ``[run]`` table's)."""
    p = entry.pretrain
    dataset: dict[str, Any] = {"base": entry.base, "noise": p.noise, "noise_model": "add", "params": dict(entry.params)}
    dataset["seed"] = entry.seed
    if p.train is not None:
        dataset["n_train"] = p.train
    if p.val is not None:
        dataset["n_val"] = p.val
    return RunSpec.from_dict(
        {
            # The recipe GAPE grids have always pretrained with (gaptui's defaults before recipes): their ids stay.
            "recipe": "legacy",
            "dataset": dataset,
            "model": p.model,
            "out_dim": p.out_dim,
            "epochs": p.epochs,
            "budget": p.budget,
            "batch_size": p.batch_size,
            "lr": p.lr,
            "seed": p.seed,
            "precision": precision,
            "datasets_dir": placement.datasets_dir,
            "data_root": placement.data_root,
        },
        "pretraining run",
    )


def downstream_pe(pe: str, pretraining: RunSpec) -> str:
    """A preset's PE name with ``gape`` bound to the dataset's pretraining run (by its full hash)."""
    if pe == "gape":
        return f"gape:{pretraining.run_id()}"
    if pe == "gape+rwpe":
        return f"gape:{pretraining.run_id()}+rwpe"
    return pe


def grid(preset: GapePreset, placement: Placement, limit: int | None = None) -> list[Any]:
    """Pretraining runs first (one per dataset that needs one), then every (seed, dataset, PE), seed-major."""
    specs: list[Any] = []
    pre = {i: pretraining_spec(entry, placement, **preset.options) for i, entry in enumerate(preset.datasets)}
    uses_gape = any(pe.startswith("gape") for pe in preset.pes)
    if uses_gape:
        specs += list(pre.values())
    where = str(preset.path or preset.name)
    for seed in preset.seeds:
        for i, entry in enumerate(preset.datasets):
            for pe in preset.pes:
                raw = {
                    **preset.options,
                    **entry.run,
                    "dataset": {"base": entry.base, "params": dict(entry.params), "seed": entry.seed},
                    "pe": downstream_pe(pe, pre[i]),
                    "seed": seed,
                    "datasets_dir": placement.datasets_dir,
                    "data_root": placement.data_root,
                }
                specs.append(GapeSpec.from_dict(raw, where))
                if limit is not None and len(specs) >= limit:
                    return specs
    return specs


def parse_preset(raw: dict[str, Any], path: Path | None = None, where: str | None = None) -> GapePreset:
    """Validate a gape preset document; errors name ``where`` (default: the file), the key and the value."""
    where = where or (str(path) if path else "preset")
    legacy = {k: raw[k] for k in TOP_LEVEL_POLICY if k in raw}
    run = raw.get("run", {})
    if legacy and isinstance(run, dict):
        for key in legacy:
            if key in run:
                raise GaptuiError(f"{where}: key '{key}' is set twice, at the top and in [run]: keep the [run] one")
        raw = {**{k: v for k, v in raw.items() if k not in legacy}, "run": {**run, **legacy}}
    return preset_of(parse_head(raw, path, "gape", OWN_KEYS, GRID_RUN_KEYS, required=("pes", "datasets"), where=where))


def strict_params(where: str, base: str, params: Mapping[str, Any]) -> None:
    """A dataset entry's ``params`` as a preset gives them: typed (a quoted number refused); the checks of the
    source itself come with the grid."""
    from engine.gape.data import molecule_source
    from engine.sources import parse_params

    try:
        parse_params(molecule_source(base), params, "params", strict=True)
    except GaptuiError as exc:
        raise GaptuiError(f"{where}: {exc}") from None


def preset_of(head: PresetHead) -> GapePreset:
    """The gape preset on a parsed common part: reads the family's keys (``head.own``) only."""
    where, raw = head.where, head.own
    pes = list_of(where, "pes", raw["pes"], str, f"positional encodings ({', '.join(PE_ORDER)})")
    for pe in pes:
        if pe not in KINDS:
            raise GaptuiError(
                f"{where}: key 'pes' value '{pe}' is not one of {', '.join(PE_ORDER)} "
                "(gape is bound to each dataset's pretraining run)"
            )
    datasets = []
    for here, entry in dataset_tables(where, raw, DATASET_KEYS):
        pretrain = parse_dataclass(Pretraining, entry.get("pretrain", {}), f"{here}.pretrain")
        run = entry.get("run", {})
        if not isinstance(run, dict):
            raise GaptuiError(f"{here}.run: expected a table of GapeSpec options")
        unknown_keys(f"{here}.run", run, RUN_KEYS)
        params = entry.get("params") or {}
        if not isinstance(params, dict):
            raise GaptuiError(f"{here}: key 'params' = {params!r}: expected a table of source parameters")
        seed = entry.get("seed", 0)
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise GaptuiError(f"{here}: key 'seed' = {seed!r}: expected a seed >= 0")
        strict_params(here, str(entry["base"]), params)
        datasets.append(GapeDataset(str(entry["base"]), dict(params), seed, pretrain, run))
    notes: list[str] = []
    pes = unique_values(pes, str, "pes", notes)
    notes += head.notes  # repeated seeds: notes follow the file's usual key order
    datasets = unique_values(
        datasets, lambda d: json.dumps(dataclasses.asdict(d), sort_keys=True, default=str), "datasets", notes
    )
    preset = GapePreset(
        **head.fields(notes),
        pes=tuple(pes),
        datasets=tuple(datasets),
        policy=head.policy,
        options=dict(head.run),
    )
    # Every spec through the checks the worker applies (sources, parameters, models, options) before anything runs.
    for i, entry in enumerate(preset.datasets):
        try:
            grid(dataclasses.replace(preset, datasets=(entry,), seeds=preset.seeds[:1]), Placement(".", "."))
        except GaptuiError as exc:
            raise GaptuiError(f"{where}: datasets[{i}]: {exc}") from None
    return preset


def dataset_label(spec: GapeSpec) -> str:
    from engine.alignment.preset import dataset_label as alignment_label

    canonical = spec.molecule_spec().canonical()
    return alignment_label(canonical)
