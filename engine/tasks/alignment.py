"""The ``alignment`` task family: siamese GNN training for graph alignment (paper sections 3-5, Table D.3).

Spec: :class:`engine.spec.RunSpec` (a base dataset, a noise level and model, a model or the training-free
``laplacian`` baseline). Data: the cached pair datasets of :mod:`engine.datasets`. Axes: dataset label x noise x
model; tables: one per dataset, models as rows, noise levels as columns, the Laplacian baseline never marked.
Presets expand datasets x noise x models x seeds (see :class:`Preset`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Generator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from engine.errors import GaptuiError, did_you_mean
from engine.spec import RunSpec
from engine.tasks import (
    FAMILIES,
    Axis,
    Cancelled,
    Figure,
    Input,
    Metric,
    Outcome,
    Placement,
    PresetBase,
    RunContext,
    RunFailed,
    TableLayout,
    TaskFamily,
    check_run_options,
    list_of,
    run_steps,
    seeds_of,
    unique_values,
    unknown_keys,
)

BASELINE = "laplacian"
#: Row order of Table D.3; models not listed follow alphabetically.
PAPER_ORDER = ("gcn", "gin", "gatedgcn", "ggnn", "gat", "gatv2")


def model_label(spec: RunSpec) -> str:
    """``model`` plus its model options, e.g. ``ggnn[steps=2]``: the row of ranking tables, so that two option
    sets of one model are two rows rather than one cell."""
    if not spec.model_kwargs:
        return spec.model
    text = ",".join(f"{k}={v}" for k, v in sorted(spec.model_kwargs.items()))
    return f"{spec.model}[{text}]"


def dataset_label(canonical: dict[str, Any]) -> str:
    """``base`` plus its non-default parameters, e.g. ``er[n=50]``: the row group of ranking tables."""
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


@dataclass(frozen=True)
class RunOptions:
    """Options copied into every RunSpec of the grid, plus how the scheduler treats each run."""

    epochs: int = 300
    batch_size: int = 100
    budget: int = 60_000
    out_dim: int | None = None
    features: str = "degree"
    input_layer: str = "linear"
    norm: str = "per-graph"
    eval_every: int = 1
    lr: float = 3e-3
    warmup_steps: int = 30
    weight_decay: float = 0.01
    clip: float = 0.1
    clip_mode: str = "value"
    compile: str = "auto"
    topk: list[int] = field(default_factory=lambda: [5, 10])
    timeout: float | None = None
    retries: int = 0
    #: Seeds of one cell trained together in one worker process (scheduling only: no run's hash changes).
    pack_seeds: int = 1

    def spec_fields(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if k not in SCHEDULING}


#: Run options that say how the scheduler treats runs, not what they compute: never copied into a spec.
SCHEDULING = ("timeout", "retries", "pack_seeds")


@dataclass(frozen=True)
class Preset(PresetBase):
    """An alignment grid: datasets x noise x models x seeds (+ the Laplacian baseline once per cell)::

    task = "alignment"          # optional: the default family
    description = "what this grid is for"
    noise = [0.04, 0.12]
    models = ["gcn", "gatv2"]
    seeds = [0, 1]
    laplacian = true            # add the training-free baseline once per (dataset, noise)

    [model_options]             # optional: options of one model, for every run of that model
    gatv2 = { heads = 4 }

    [run]                       # RunSpec options shared by every run (see engine.spec.RunSpec)
    epochs = 5

    [[datasets]]
    base = "er"
    params = { n = 100, degree = 8 }
    train = 1000
    val = 200
    """

    task: ClassVar[str] = "alignment"
    name: str
    description: str
    datasets: tuple[DatasetEntry, ...]
    noise: tuple[float, ...]
    models: tuple[str, ...]
    seeds: tuple[int, ...]
    laplacian: bool = False
    #: Model name -> its model options (``RunSpec.model_kwargs`` of every run of that model).
    model_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    run: RunOptions = field(default_factory=RunOptions)
    path: Path | None = None
    #: What planning merged or adjusted (repeated grid values), one line each, for the user to see.
    notes: tuple[str, ...] = field(default=(), compare=False)
    #: The manager's cluster settings (the preset's ``[slurm]`` table), attached by ``gaptui.presets``.
    slurm: Any = None

    @property
    def size(self) -> int:
        trained = len(self.datasets) * len(self.noise) * len(self.models) * len(self.seeds)
        return trained + (len(self.datasets) * len(self.noise) if self.laplacian else 0)

    @property
    def timeout(self) -> float | None:
        return self.run.timeout

    @property
    def retries(self) -> int:
        return self.run.retries

    @property
    def pack_seeds(self) -> int:
        return self.run.pack_seeds


TOP_KEYS = ("task", "name", "description", "noise", "models", "seeds", "laplacian", "model_options", "run", "datasets")
DATASET_KEYS = tuple(f.name for f in dataclasses.fields(DatasetEntry))
RUN_KEYS = tuple(f.name for f in dataclasses.fields(RunOptions))


def parse_preset(raw: dict[str, Any], path: Path | None = None) -> Preset:
    """Validate an alignment preset document. Errors name the file, the key and the value, with a did-you-mean."""
    from engine.datasets import DatasetSpec
    from engine.models import MODELS
    from engine.noise import check_noise
    from engine.typed import parse_dataclass

    where = str(path) if path else "preset"
    unknown_keys(where, raw, TOP_KEYS)
    for key in ("noise", "models", "seeds", "datasets"):
        if key not in raw:
            raise GaptuiError(f"{where}: missing key '{key}'")
    noise = list_of(where, "noise", raw["noise"], (int, float), "noise levels in [0, 1)")
    for eta in noise:
        check_noise(eta, where=f"{where}: key 'noise' value")
    models = list_of(where, "models", raw["models"], str, "model names")
    for model in models:
        if ":" in model:
            # A user model: import it once here, so a typo fails the plan rather than every run of the grid.
            try:
                MODELS.get(model)
            except GaptuiError as exc:
                raise GaptuiError(f"{where}: key 'models' value '{model}': {exc}") from None
        elif model.lower() != BASELINE and model not in MODELS:
            known = [*MODELS.names(), BASELINE]
            raise GaptuiError(
                f"{where}: key 'models' value '{model}' is not a model{did_you_mean(model, known)}; "
                f"known: {', '.join(known)} or module.path:Factory"
            )
    seeds = seeds_of(where, raw["seeds"])
    entries = list_of(where, "datasets", raw["datasets"], dict, "dataset tables ([[datasets]])")
    datasets = []
    for i, entry in enumerate(entries):
        here = f"{where}: datasets[{i}]"
        unknown_keys(here, entry, DATASET_KEYS)
        if "base" not in entry:
            raise GaptuiError(f"{here}: missing key 'base'")
        ds = parse_dataclass(DatasetEntry, entry, here)
        try:
            DatasetSpec(ds.base, noise[0], ds.noise_model, ds.train, ds.val, ds.seed, ds.params).canonical()
        except GaptuiError as exc:
            raise GaptuiError(f"{here}: {exc}") from None
        datasets.append(ds)
    notes: list[str] = []
    noise = unique_values(noise, float, "noise", notes)
    models = unique_values([_canonical_model(m) for m in models], str, "models", notes)
    seeds = unique_values(seeds, int, "seeds", notes)
    datasets = unique_values(datasets, _dataset_key, "datasets", notes)
    model_options = _model_options(where, raw.get("model_options", {}), models)
    run = parse_dataclass(RunOptions, raw.get("run", {}), f"{where}: [run]")
    check_run_options(run.timeout, run.retries, f"{where}: [run]", run.pack_seeds)
    laplacian = raw.get("laplacian", False)
    if not isinstance(laplacian, bool):
        raise GaptuiError(f"{where}: key 'laplacian' = {laplacian!r}: expected true or false")
    preset = Preset(
        name=str(raw.get("name") or (path.stem if path else "preset")),
        description=str(raw.get("description", "")),
        datasets=tuple(datasets),
        noise=tuple(float(x) for x in noise),
        models=tuple(m for m in models if m != BASELINE),
        seeds=tuple(seeds),
        laplacian=laplacian or BASELINE in models,
        model_options=model_options,
        run=run,
        path=path,
        notes=tuple(notes),
    )
    if not preset.models and not preset.laplacian:
        raise GaptuiError(f"{where}: key 'models' names no model: the grid would have no runs")
    # Validate the run options once through the same checks the worker applies, and build each model once so an
    # impossible budget or a bad model option fails here rather than in every worker of the grid.
    grid(preset, Placement(".", "."), limit=1)
    _check_models(preset, where)
    return preset


def _model_options(where: str, raw: Any, models: list[str]) -> dict[str, dict[str, Any]]:
    """The ``[model_options]`` table: one inline table of options per model of ``models`` (checked at build)."""
    here = f"{where}: [model_options]"
    if not isinstance(raw, dict):
        raise GaptuiError(f"{here} = {raw!r}: expected a table of model name = {{ option = value }}")
    out: dict[str, dict[str, Any]] = {}
    for name, options in raw.items():
        model = _canonical_model(name)
        if model == BASELINE or model not in models:
            trained = [m for m in models if m != BASELINE]
            raise GaptuiError(
                f"{here}: key '{name}' is not one of the preset's models{did_you_mean(model, trained)}; "
                f"models: {', '.join(trained)}"
            )
        if not isinstance(options, dict):
            raise GaptuiError(f"{here}: key '{name}' = {options!r}: expected a table of options, e.g. {{ layers = 3 }}")
        out[model] = dict(options)
    return out


def _canonical_model(name: str) -> str:
    return name if ":" in name else name.lower()


def _dataset_key(entry: DatasetEntry) -> str:
    """Entries that resolve to the same datasets (defaults filled in, names canonical) are one grid value."""
    from engine.datasets import DatasetSpec

    canonical = DatasetSpec(entry.base, 0.0, entry.noise_model, entry.train, entry.val, entry.seed, entry.params)
    return json.dumps(canonical.canonical(), sort_keys=True)


def _check_models(preset: Preset, where: str) -> None:
    from engine import models
    from engine.sources import SOURCES
    from engine.training import FEATURES

    dims = {preset.run.out_dim or SOURCES.get(ds.base).embedding_dim for ds in preset.datasets}
    for model in preset.models:
        if ":" in model:
            continue  # user models are smoke-tested by the worker, in its own environment
        for out_dim in sorted(dims):
            try:
                models.build(
                    model,
                    out_dim=out_dim,
                    budget=preset.run.budget,
                    in_dim=FEATURES[preset.run.features],
                    input_layer=preset.run.input_layer,
                    norm=preset.run.norm,
                    **preset.model_options.get(model, {}),
                )
            except GaptuiError as exc:
                key = "[model_options]" if model in preset.model_options else "key 'models'"
                raise GaptuiError(f"{where}: {key} value '{model}': {exc}") from None


def grid(preset: Preset, placement: Placement, limit: int | None = None) -> list[RunSpec]:
    """The run specs of a preset, seed-major so that early results cover every cell once before repeating.

    A grid is a set: a spec whose hash is already planned is dropped (one run id, one record, one folder).
    """
    specs: list[RunSpec] = []
    seen: set[str] = set()
    where = str(preset.path or preset.name)
    common = {**preset.run.spec_fields(), "datasets_dir": placement.datasets_dir, "data_root": placement.data_root}
    for seed_index, seed in enumerate(preset.seeds):
        for entry in preset.datasets:
            for eta in preset.noise:
                dataset = entry.dataset_dict(eta)
                cell = [{"model": BASELINE}] if preset.laplacian and seed_index == 0 else []
                cell += [
                    {"model": model, "model_kwargs": preset.model_options.get(model, {}), "seed": seed}
                    for model in preset.models
                ]
                for extra in cell:
                    spec = RunSpec.from_dict({**common, "dataset": dataset, **extra}, where)
                    if spec.hash() not in seen:
                        seen.add(spec.hash())
                        specs.append(spec)
                if limit is not None and len(specs) >= limit:
                    return specs
    return specs


def dump_preset(preset: Preset) -> str:
    """TOML text of a preset (what the terminal app saves); ``parse_preset`` reads it back to an equal preset."""
    lines = [f"name = {toml_value(preset.name)}", f"description = {toml_value(preset.description)}"]
    lines += [
        f"noise = {toml_value(list(preset.noise))}",
        f"models = {toml_value(list(preset.models))}",
        f"seeds = {toml_value(list(preset.seeds))}",
        f"laplacian = {toml_value(preset.laplacian)}",
        "",
    ]
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
    return "\n".join(lines) + "\n"


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    text = str(value).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{text}"'


# ------------------------------------------------------------------------------------------------ worker loop


def _dataset_dirs(spec: RunSpec) -> tuple[Path, Path | None]:
    from engine.worker import default_datasets_dir

    datasets_dir = Path(spec.datasets_dir) if spec.datasets_dir else default_datasets_dir()
    return datasets_dir, Path(spec.data_root) if spec.data_root else None


def _device_fields(spec: RunSpec) -> dict[str, Any]:
    import torch

    from engine.training import resolve_device
    from engine.worker import cpu_name

    device = resolve_device(spec.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name()
    return {"device": str(device), "device_name": name}


class _AlignmentRun:
    """One alignment worker execution: the training loop, or the Laplacian baseline."""

    def __init__(self, spec: RunSpec, ctx: RunContext) -> None:
        self.spec = spec
        self.ctx = ctx
        self.started = time.perf_counter()

    def dataset(self) -> Any:
        from engine.datasets import build_dataset

        # The seeds of a pack share one dataset: it is loaded once per worker process.
        key = "alignment-dataset:" + json.dumps(self.spec.dataset_spec().canonical(), sort_keys=True)
        if key in self.ctx.shared:
            dataset = self.ctx.shared[key]
            self.ctx.log(f"dataset {dataset.id} (loaded by another run of this worker) at {dataset.path}")
            return dataset
        dataset, built = build_dataset(self.spec.dataset_spec(), *_dataset_dirs(self.spec))
        self.ctx.log(f"dataset {dataset.id} ({'built' if built else 'cached'}) at {dataset.path}")
        self.ctx.shared[key] = dataset
        return dataset

    def pairs(self, dataset: Any, split: str, device: Any) -> Any:
        """The split's tensors on ``device``, built once per worker process (read-only during training)."""
        from engine.training import PairTensors

        key = f"alignment-pairs:{dataset.id}:{split}:{device}"
        if key not in self.ctx.shared:
            self.ctx.shared[key] = PairTensors(dataset.split(split), device)
        return self.ctx.shared[key]

    def out_dim(self, dataset: Any) -> int:
        from engine.sources import SOURCES

        return self.spec.out_dim or SOURCES.get(dataset.spec["base"]).embedding_dim

    def steps(self) -> Generator[None, None, Outcome]:
        """The run, yielding after each epoch (the turn of the next run of a pack)."""
        self.spec.check_memory()
        dataset = self.dataset()
        if self.spec.model == BASELINE:
            return self.run_laplacian(dataset)
        return (yield from self.run_training(dataset))

    def run_laplacian(self, dataset: Any) -> Outcome:
        from engine.laplacian import laplacian_scores
        from engine.training import metrics_of

        k = self.out_dim(dataset)
        val = dataset.split("val")
        self.ctx.emit(
            "start",
            run=self.spec.hash(),
            model=BASELINE,
            params=0,
            width=k,
            device="cpu",
            dataset=dataset.id,
            n_train=0,
            n_val=len(val),
            epochs=0,
            steps_per_epoch=0,
            resumed_from=None,
            pid=os.getpid(),
        )
        t0 = time.perf_counter()
        metrics: dict[str, float] = {}
        if len(val):  # without validation pairs there is no metric: it stays missing, never a 0 % score
            scores = laplacian_scores(val, k=k, ks=self.spec.topk)
            metrics = metrics_of(scores, float("nan"))
            metrics.pop("val_loss")
            self.ctx.emit("eval", epoch=0, seconds=round(time.perf_counter() - t0, 3), **metrics)
        self.ctx.log(f"laplacian baseline (k={k}): val LAP accuracy {metrics.get('val_lap_acc', float('nan')):.4f}")
        extra = {**_device_fields(self.spec), "dataset": dataset.id, "model": BASELINE, "width": k, "epochs": 0}
        extra["dataset_seed"] = self.spec.dataset.get("seed", 0)
        return Outcome(metrics=metrics, params=0, extra=extra)

    def run_training(self, dataset: Any) -> Generator[None, None, Outcome]:
        from engine import models
        from engine.evaluation import LapEvaluator
        from engine.training import (
            FEATURES,
            NonFiniteLoss,
            TrainState,
            compile_model,
            evaluate,
            make_optimiser,
            metrics_of,
            resolve_device,
            seed_everything,
            train_epoch,
            wants_compile,
        )
        from engine.worker import CHECKPOINT_FORMAT, Checkpoints

        spec, ctx = self.spec, self.ctx
        device = resolve_device(spec.device)
        seed_everything(spec.seed)
        model = models.build(
            spec.model,
            out_dim=self.out_dim(dataset),
            budget=spec.budget,
            in_dim=FEATURES[spec.features],
            **spec.model_options(),
        ).to(device)
        params = models.count_parameters(model)
        train = self.pairs(dataset, "train", device)
        val = self.pairs(dataset, "val", device)
        steps_per_epoch = -(-len(train) // spec.batch_size)
        opt, sched = make_optimiser(model, spec.lr, spec.weight_decay, spec.epochs * steps_per_epoch, spec.warmup_steps)
        state = TrainState()
        metrics: dict[str, float] = {}
        resumed_from = None
        checkpoints = Checkpoints(ctx.run_dir, ctx.log)
        ckpt = checkpoints.load(device)
        if ckpt is not None:
            if ckpt.get("run") != spec.hash():
                raise GaptuiError(f"{checkpoints.path} belongs to another run spec; use a fresh --out folder")
            model.load_state_dict(ckpt["model"])
            opt.load_state_dict(ckpt["optimizer"])
            sched.load_state_dict(ckpt["scheduler"])
            state = TrainState(**ckpt["state"])
            metrics = dict(ckpt.get("metrics", {}))
            resumed_from = {"epoch": state.epoch, "batch": state.batch_in_epoch, "step": state.step}
            ctx.log(f"resuming from epoch {state.epoch}, batch {state.batch_in_epoch} (step {state.step})")

        def save_checkpoint() -> None:
            checkpoints.save(
                {
                    "format": CHECKPOINT_FORMAT,
                    "run": spec.hash(),
                    "model_name": spec.model,
                    "width": int(getattr(model, "width", 0) or 0),
                    "params": params,
                    "in_dim": FEATURES[spec.features],
                    "out_dim": self.out_dim(dataset),
                    "features": spec.features,
                    "state": asdict(state),
                    "metrics": metrics,
                    "model": model.state_dict(),
                    "optimizer": opt.state_dict(),
                    "scheduler": sched.state_dict(),
                }
            )

        def cancel() -> Cancelled:
            save_checkpoint()
            return Cancelled(epoch=state.epoch, step=state.step, batch=state.batch_in_epoch)

        width = int(getattr(model, "width", 0) or 0)
        ctx.emit(
            "start",
            run=spec.hash(),
            model=spec.model,
            params=params,
            width=width,
            device=str(device),
            dataset=dataset.id,
            n_train=len(train),
            n_val=len(val),
            epochs=spec.epochs,
            steps_per_epoch=steps_per_epoch,
            resumed_from=resumed_from,
            pid=os.getpid(),
        )
        ctx.log(f"model {spec.model}: {params} parameters, width {width}, device {device}")
        compiled = wants_compile(spec.compile, device, spec.epochs * steps_per_epoch, spec.model)
        trained = compile_model(model, spec.features, ctx.log) if compiled else model
        train_loss = float("nan")
        with LapEvaluator(ks=spec.topk) as evaluator:
            while state.epoch < spec.epochs:
                t0 = time.perf_counter()
                try:
                    finished = train_epoch(
                        trained,
                        train,
                        opt,
                        sched,
                        state,
                        batch_size=spec.batch_size,
                        seed=spec.seed,
                        clip=spec.clip,
                        clip_mode=spec.clip_mode,
                        features=spec.features,
                        should_stop=ctx.should_stop,
                    )
                except NonFiniteLoss as exc:
                    raise RunFailed(
                        str(exc),
                        "nan",
                        event={"epoch": exc.epoch, "step": exc.step},
                        dataset=dataset.id,
                        model=spec.model,
                        params=params,
                        **_device_fields(spec),
                    ) from None
                if not finished:
                    raise cancel()
                epoch = state.epoch + 1
                train_loss = state.loss_sum / max(state.loss_nodes, 1)
                seconds = time.perf_counter() - t0
                val_acc = None
                # Without validation pairs there is no metric: it stays missing (never a 0 % that could rank).
                if len(val) and (epoch % spec.eval_every == 0 or epoch == spec.epochs):
                    t1 = time.perf_counter()
                    scores, val_loss = evaluate(model, val, spec.batch_size, evaluator, spec.features)
                    metrics = {**metrics_of(scores, val_loss), "train_loss": train_loss}
                    val_acc = metrics["val_lap_acc"]
                    ctx.emit("eval", epoch=epoch, seconds=round(time.perf_counter() - t1, 4), **metrics)
                state.epoch, state.batch_in_epoch, state.loss_sum, state.loss_nodes = epoch, 0, 0.0, 0
                save_checkpoint()
                lr = opt.param_groups[0]["lr"]
                ctx.emit(
                    "epoch",
                    epoch=epoch,
                    step=state.step,
                    train_loss=train_loss,
                    lr=lr,
                    seconds=round(seconds, 4),
                    val_acc=val_acc,
                )
                acc = f" val LAP acc {val_acc:.4f}" if val_acc is not None else ""
                ctx.log(f"epoch {epoch}/{spec.epochs} loss {train_loss:.4f}{acc} lr {lr:.2e} {seconds:.2f}s")
                if ctx.should_stop():
                    raise cancel()
                yield
        metrics.setdefault("train_loss", train_loss)
        ctx.log(f"done: val LAP accuracy {metrics.get('val_lap_acc', float('nan')):.4f}")
        extra = {**_device_fields(spec), "dataset": dataset.id, "model": spec.model, "width": width}
        extra["compiled"] = trained is not model
        extra["dataset_seed"] = spec.dataset.get("seed", 0)
        return Outcome(metrics=metrics, params=params, extra={**extra, "epochs": spec.epochs})


# ------------------------------------------------------------------------------------------------ the family


class Alignment(TaskFamily):
    name = "alignment"
    title = "graph alignment: siamese GNN embeddings matched by LAP (Table D.3)"
    spec_type = RunSpec
    metrics = (
        Metric("val_lap_acc", "LAP acc", True, "%"),
        Metric("val_argmax_acc", "argmax acc", True, "%"),
        Metric("val_top5_acc", "top-5 acc", True, "%"),
        Metric("val_top10_acc", "top-10 acc", True, "%"),
        Metric("val_loss", "val loss", False),
        Metric("train_loss", "train loss", False),
    )
    default_metric = "val_lap_acc"
    axes = (
        Axis("dataset", "dataset"),
        Axis("noise", "noise", numeric=True, prefix="η="),
        Axis("model", "model", order=(BASELINE, *PAPER_ORDER)),
    )
    table = TableLayout(group="dataset", rows="model", columns="noise", baselines=(BASELINE,))
    figures = (Figure("lines"), Figure("gap"), Figure("curves"), Figure("cd"))
    reference = "paper"
    import_roles = {"models": "model", "model_options": "model", "base": "base dataset", "dataset": "dataset class"}

    def metric(self, key: str) -> Metric:
        # Any other top-k accuracy a spec asked for (topk = [3]) is a share like the declared ones.
        if key.startswith("val_top") and key.endswith("_acc") and key[7:-4].isdigit():
            return Metric(key, f"top-{key[7:-4]} acc", True, "%")
        return super().metric(key)

    def record_axes(self, spec: RunSpec) -> dict[str, Any]:
        ds = spec.dataset_spec().canonical()
        return {"dataset": dataset_label(ds), "noise": ds["noise"], "model": model_label(spec)}

    def is_baseline(self, spec: RunSpec) -> bool:
        return spec.model == BASELINE

    def dependant_artefacts(self, spec: RunSpec) -> tuple[str, ...]:
        from engine.worker import CHECKPOINT

        # A GAPE run embeds with the trained model; the training-free baseline has none.
        return () if self.is_baseline(spec) else (CHECKPOINT,)

    def describe(self, spec: RunSpec) -> str:
        axes = self.record_axes(spec)
        return f"{axes['dataset']} noise {axes['noise']:g} {axes['model']} seed {spec.seed}"

    def check(self, specs: list[RunSpec]) -> list[str]:
        """The files of each base dataset not yet in the cache (a molecule file...), once per dataset."""
        from engine.datasets import dataset_id
        from engine.sources import check_source_files, data_root

        seen: set[str] = set()
        for spec in specs:
            ds = spec.dataset_spec()
            datasets_dir, raw_root = _dataset_dirs(spec)
            key = json.dumps([ds.base, ds.params, str(raw_root)], sort_keys=True)
            if key in seen or (datasets_dir / dataset_id(ds.canonical()) / "meta.json").exists():
                continue
            seen.add(key)
            check_source_files(ds.base, ds.params, data_root(raw_root))
        return []

    def inputs(self, spec: RunSpec) -> list[Input]:
        from functools import partial

        from engine.datasets import build_dataset

        ds = spec.dataset_spec()
        key = "alignment-dataset:" + json.dumps(ds.canonical(), sort_keys=True)
        return [Input(key, f"{ds.base} at noise {ds.noise:g}", partial(build_dataset, ds, *_dataset_dirs(spec)))]

    def run(self, spec: RunSpec, ctx: RunContext) -> Outcome:
        return run_steps(self.steps(spec, ctx))

    def steps(self, spec: RunSpec, ctx: RunContext) -> Generator[None, None, Outcome]:
        return _AlignmentRun(spec, ctx).steps()

    def parse_preset(self, raw: dict[str, Any], where: str, path: Path | None = None) -> Preset:
        return parse_preset(raw, path)

    def grid(self, preset: Preset, placement: Placement, limit: int | None = None) -> list[RunSpec]:
        return grid(preset, placement, limit)


FAMILIES.register(Alignment())
