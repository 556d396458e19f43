"""The ``gape`` task family: a downstream molecule transformer with positional encodings (seed 000, Table 1).

Spec: :class:`engine.gape.spec.GapeSpec` (a molecule dataset, a PE, the transformer's hyper-parameters, a seed).
A ``gape:<run>`` PE depends on that alignment run: the scheduler starts the downstream run once it is done.
Axes: downstream dataset x PE; one table, PEs as rows, datasets as columns, lowest MAE best.
Presets express the whole chain: per dataset one pretraining alignment run (Table F.7), then every PE x seed.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Generator, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

from engine.alignment.spec import RunSpec
from engine.errors import GaptuiError
from engine.gape.pe import KINDS, parse_pe
from engine.gape.spec import GapeSpec
from engine.presets import PresetHead, RunPolicy, parse_head
from engine.tasks import (
    FAMILIES,
    Axis,
    Figure,
    FormField,
    Input,
    Metric,
    Outcome,
    Placement,
    PresetBase,
    RunContext,
    TableLayout,
    TaskFamily,
    Tunable,
    list_of,
    run_steps,
    unique_values,
    unknown_keys,
)
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

    [run]                     # optional: the run policy (engine.presets.RunPolicy)
    timeout = 3600            # seconds per run
    retries = 0
    precision = "auto"        # every run of the grid, pretraining included: auto, fp32 or bf16

    [[datasets]]
    base = "aqsol"
    params = {}
    [datasets.pretrain]       # Table F.7 (engine.tasks.gape.Pretraining)
    model = "gatedgcn"
    noise = 0.15
    [datasets.run]            # Table F.6 (engine.tasks.gape.DownstreamOptions)
    steps = 10000
    """

    task: ClassVar[str] = "gape"
    name: str
    description: str
    pes: tuple[str, ...]
    seeds: tuple[int, ...]
    datasets: tuple[GapeDataset, ...]
    path: Path | None = None
    #: How the scheduler treats its runs (the ``[run]`` table: timeout, retries, pack_seeds).
    policy: RunPolicy = field(default_factory=RunPolicy)
    #: Run options of every run of the grid, pretraining included (the ``[run]`` table's :data:`GRID_RUN_KEYS`);
    #: a dataset's ``[datasets.run]`` sets its downstream runs' own.
    options: dict[str, Any] = field(default_factory=dict)
    #: What planning merged (repeated grid values), one line each, for the user to see.
    notes: tuple[str, ...] = field(default=(), compare=False)

    @property
    def size(self) -> int:
        needs = any(
            parse_pe(pe if pe in ("none", "lap", "abs-lap", "r-lap", "rwpe") else "gape:x").run for pe in self.pes
        )
        return len(self.datasets) * (len(self.pes) * len(self.seeds) + int(needs))


#: The run options a gape preset's ``[run]`` table may set beside the policy, for every run of the grid.
GRID_RUN_KEYS = ("precision",)
#: The family's own top-level keys (the common ones, ``task`` ... ``[run]``, are :mod:`engine.presets`').
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
        return f"gape:{pretraining.hash()}"
    if pe == "gape+rwpe":
        return f"gape:{pretraining.hash()}+rwpe"
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


def parse_preset(raw: dict[str, Any], path: Path | None = None) -> GapePreset:
    """Validate a gape preset document; errors name the file, the key and the value."""
    where = str(path) if path else "preset"
    legacy = {k: raw[k] for k in TOP_LEVEL_POLICY if k in raw}
    run = raw.get("run", {})
    if legacy and isinstance(run, dict):
        for key in legacy:
            if key in run:
                raise GaptuiError(f"{where}: key '{key}' is set twice, at the top and in [run]: keep the [run] one")
        raw = {**{k: v for k, v in raw.items() if k not in legacy}, "run": {**run, **legacy}}
    return preset_of(parse_head(raw, path, "gape", OWN_KEYS, GRID_RUN_KEYS, required=("pes", "datasets")))


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
    where, path, raw = head.where, head.path, head.own
    pes = list_of(where, "pes", raw["pes"], str, f"positional encodings ({', '.join(PE_ORDER)})")
    for pe in pes:
        if pe not in KINDS:
            raise GaptuiError(
                f"{where}: key 'pes' value '{pe}' is not one of {', '.join(PE_ORDER)} "
                "(gape is bound to each dataset's pretraining run)"
            )
    entries = list_of(where, "datasets", raw["datasets"], dict, "dataset tables ([[datasets]])")
    datasets = []
    for i, entry in enumerate(entries):
        here = f"{where}: datasets[{i}]"
        unknown_keys(here, entry, DATASET_KEYS)
        if "base" not in entry:
            raise GaptuiError(f"{here}: missing key 'base'")
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
        name=head.name,
        description=head.description,
        pes=tuple(pes),
        seeds=head.seeds,
        datasets=tuple(datasets),
        path=path,
        policy=head.policy,
        options=dict(head.run),
        notes=tuple(notes),
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


class Gape(TaskFamily):
    name = "gape"
    title = "GAPE: molecule regression by a transformer with positional encodings (Table 1)"
    spec_type = GapeSpec
    metrics = (
        Metric("val_mae", "val MAE", False),
        Metric("test_mae", "test MAE", False),
        Metric("best_val_mae", "best val MAE", False),
        Metric("test_mae_at_best", "test MAE at best val", False),
        Metric("train_loss", "train MAE", False),
    )
    default_metric = "val_mae"
    axes = (Axis("dataset", "dataset"), Axis("pe", "PE", order=PE_ORDER))
    table = TableLayout(group=None, rows="pe", columns="dataset", statistic="mean")
    tunable = {
        "lr": Tunable("lr", "float", {"log": [1e-4, 2e-3]}, "the transformer's AdamW learning rate"),
        "layers": Tunable("layers", "int", [4, 8, 12], "transformer layers (width follows the budget)"),
        "heads": Tunable("heads", "int", [4, 8], "attention heads"),
    }
    figures = (Figure("bars"), Figure("curves"), Figure("cd"))
    import_roles = {"model": "pretraining model", "base": "base dataset", "dataset": "dataset class"}

    def record_axes(self, spec: GapeSpec) -> dict[str, Any]:
        return {"dataset": dataset_label(spec), "pe": spec.pe_spec().kind}

    def describe(self, spec: GapeSpec) -> str:
        pe = spec.pe_spec()
        shown = pe.kind.replace("gape", f"gape:{pe.run[:12]}", 1) if pe.run else pe.kind
        return f"{dataset_label(spec)} PE {shown} seed {spec.seed}"

    def dependencies(self, spec: GapeSpec) -> tuple[str, ...]:
        run = spec.pe_spec().run
        return (run,) if run else ()

    def check(self, specs: list[GapeSpec]) -> list[str]:
        """The molecule file of each dataset not yet in the cache, read once: what its build would refuse."""
        from engine.gape.data import molecule_id
        from engine.sources import check_source_files, data_root

        seen: set[str] = set()
        for spec in specs:
            ds = spec.molecule_spec()
            canonical = ds.canonical()
            key = json.dumps([canonical, spec.data_root], sort_keys=True)
            folder = Path(spec.datasets_dir) / "molecules" / molecule_id(canonical) if spec.datasets_dir else None
            cached = folder is not None and (folder / "meta.json").exists()
            if key in seen or cached:
                continue
            seen.add(key)
            check_source_files(ds.base, canonical["params"], data_root(spec.data_root))
        return []

    def inputs(self, spec: GapeSpec) -> list[Input]:
        from engine.gape.data import build_molecules

        ds = spec.molecule_spec()
        key = "molecules:" + json.dumps(ds.canonical(), sort_keys=True)
        datasets_dir = Path(spec.datasets_dir) if spec.datasets_dir else None
        if datasets_dir is None:
            return []
        raw = Path(spec.data_root) if spec.data_root else None
        return [Input(key, f"{ds.base} molecules", partial(build_molecules, ds, datasets_dir, raw))]

    def run(self, spec: GapeSpec, ctx: RunContext) -> Outcome:
        return run_steps(self.steps(spec, ctx))

    def steps(self, spec: GapeSpec, ctx: RunContext) -> Generator[None, None, Outcome]:
        from engine.gape.train import gape_steps

        if spec.runs_dir is None and spec.pe_spec().run:
            spec = spec.replace(runs_dir=str(ctx.run_dir.parent))
        return gape_steps(spec, ctx)

    def parse_preset(self, raw: dict[str, Any], where: str, path: Path | None = None) -> GapePreset:
        return parse_preset(raw, path)

    def grid(self, preset: GapePreset, placement: Placement, limit: int | None = None) -> list[Any]:
        return grid(preset, placement, limit)

    # -------------------------------------------------------------------------------- the New-experiment form

    def form_fields(self) -> tuple[FormField, ...]:
        from engine.gape.form import fields

        return fields()

    def preset_from_form(self, values: dict[str, Any]) -> dict[str, Any]:
        from engine.gape.form import preset_from_form

        return preset_from_form(values)

    def form_values(self, raw: dict[str, Any]) -> dict[str, Any]:
        from engine.gape.form import form_values

        return form_values(raw)

    # -------------------------------------------------------------------------------- cost and memory
    # A GAPE grid's pretraining runs are alignment runs (alignment's cost model); a downstream run costs its
    # epochs (or its optimiser steps, when the spec counts steps) at the seconds per unit of finished runs of its
    # cell (same dataset, PE kind and model options).

    def cost_cell(self, spec: GapeSpec) -> str:
        canonical = spec.canonical()
        skip = ("seed", "epochs", "steps", "warmup_steps", "lr", "weight_decay", "eval_every")
        cell = {k: v for k, v in canonical.items() if k not in skip}
        cell["pe"] = spec.pe_spec().kind  # which pretraining run gave the GAPE does not change the seconds
        cell["unit"] = "steps" if spec.steps else "epochs"
        return json.dumps(cell, sort_keys=True, default=str)

    def cost_units(self, spec: GapeSpec) -> float | None:
        return float(spec.steps or spec.epochs)

    def cost_steps(self, spec: GapeSpec) -> int | None:
        return spec.steps or spec.epochs  # at least one batch an epoch

    def memory(self, spec: GapeSpec) -> Any:
        """The molecules (as graphs and flat arrays) and one batch through the transformer: attention scores of
        every layer (``[B, heads, L, L]``, kept for the backward pass) and the layers' activations. The molecule
        count and size come from the source's parameters, or from the built dataset (real and user files)."""
        from engine.gape.data import molecule_id, molecule_source, molecules_bytes
        from engine.memory import MemoryNeed, human
        from engine.sources import parse_params
        from engine.worker import default_datasets_dir

        ds = spec.molecule_spec()
        canonical = ds.canonical()
        cls = molecule_source(ds.base)
        params = parse_params(cls, ds.params)
        hint, count = cls.size_hint(params), cls.count_hint(params)
        atoms, degree, longest = (hint[0], hint[1], hint[0]) if hint is not None else (0.0, 2.2, 0.0)
        folder = Path(spec.datasets_dir) if spec.datasets_dir else default_datasets_dir()
        meta_path = folder / "molecules" / molecule_id(canonical) / "meta.json"
        if meta_path.exists():
            try:
                meta = json.loads(meta_path.read_text())
                count, atoms, longest = int(meta["molecules"]), float(meta["mean_atoms"]), float(meta["max_atoms"])
            except (OSError, ValueError, KeyError, TypeError):
                pass
        if not count or not atoms:
            return None
        data = molecules_bytes(count, atoms, degree)
        batch, length = min(spec.batch_size, count), max(longest, atoms)
        width = max(8.0, (spec.budget / (12 * spec.layers)) ** 0.5)
        attention = 2 * 4 * batch * spec.heads * length * length * spec.layers
        activations = 4 * 12 * batch * length * width * spec.layers
        need = int(data + attention + activations)
        detail = (
            f"{count:,} molecules of about {atoms:,.0f} atoms {human(data)}, a batch of {batch} through "
            f"{spec.layers} layers {human(attention + activations)}"
        )
        key = json.dumps([canonical, spec.batch_size, spec.layers, spec.heads, spec.budget], sort_keys=True)
        hint_line = "lower batch_size, layers or the number of molecules"
        return MemoryNeed(f"gape on {dataset_label(spec)}", f"molecules of {ds.base}", need, detail, hint_line, key)

    # -------------------------------------------------------------------------------- reference tables, optimal lines

    #: Table 1 of the alignment paper (seed 000), shipped as gaptui/references/gape.paper.csv. No optimal line:
    #: the columns are datasets, and the dataset that separates the PEs most means nothing.
    reference = "paper"


FAMILIES.register(Gape())
