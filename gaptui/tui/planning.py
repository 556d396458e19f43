"""What the New-experiment form holds, turned into a :class:`~gaptui.presets.Preset`, and what launching it costs.

The form keeps raw text (what the user typed); :meth:`ExperimentDraft.preset` parses it into the same types a
preset file is parsed into, so ``grid()``, ``dump_preset()`` and the scheduler see no difference between a grid
composed here and one read from TOML. Everything in this module is pure (no widgets, no threads) and cheap,
except that building a preset imports the model registry (torch) on first use: call it off the UI thread.
"""

from __future__ import annotations

import dataclasses
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.errors import GaptuiError
from gaptui.backends.slurm import SlurmOptions
from gaptui.durations import format_duration
from gaptui.presets import DatasetEntry, Preset, RunOptions

#: The noise grid of the paper (Table D.3), as shares.
PAPER_NOISE = (0.04, 0.06, 0.08, 0.12, 0.15, 0.18, 0.24, 0.30)
#: Statuses a run can be retried from (re-queued; a cancelled or interrupted run resumes from its checkpoint).
RETRYABLE = ("failed", "cancelled", "interrupted")
#: Statuses of runs the scheduler still has to finish.
IN_FLIGHT = ("queued", "running")


def noise_key(eta: float) -> float:
    """A noise level rounded so 0.12 typed and 0.12 computed compare equal."""
    return round(float(eta), 6)


def format_noise_percent(eta: float) -> str:
    """``0.12`` -> ``"12 %"`` (how the form lists noise levels)."""
    return f"{eta * 100:g} %"


def parse_noise_levels(text: str) -> list[float]:
    """Noise levels typed as ``0.05 0.2`` or ``5% 20%`` (a number >= 1 can only mean percent)."""
    from engine.alignment.noise import check_noise

    levels = []
    for item in _items(text):
        percent = item.endswith("%")
        try:
            value = float(item.rstrip("%").strip())
        except ValueError:
            raise GaptuiError(f"noise level '{item}': expected a share like 0.12 or a percentage like 12%") from None
        if percent or value >= 1:
            value /= 100
        levels.append(noise_key(check_noise(value, where="noise level")))
    return levels


def parse_seeds(text: str) -> list[int]:
    """Seeds typed as ``0``, ``0,1,2`` or a range ``0-9`` (inclusive); duplicates dropped, order kept."""
    seeds: list[int] = []
    for item in _items(text):
        match = re.fullmatch(r"(\d+)\s*(?:-|\.\.)\s*(\d+)", item)
        try:
            values = range(int(match[1]), int(match[2]) + 1) if match else [int(item)]
        except ValueError:
            raise GaptuiError(f"seeds: '{item}' is not an integer or a range like 0-9") from None
        seeds += [v for v in values if v not in seeds]
    if not seeds:
        raise GaptuiError("seeds: give at least one seed, e.g. 0 or 0-9")
    return seeds


def parse_int(text: str, what: str, minimum: int = 0) -> int | None:
    """An optional integer field: ``None`` when blank."""
    text = text.strip().replace("_", "").replace(",", "")
    if not text:
        return None
    try:
        value = int(text)
    except ValueError:
        raise GaptuiError(f"{what}: '{text}' is not an integer") from None
    if value < minimum:
        raise GaptuiError(f"{what}: {value} must be >= {minimum}")
    return value


def parse_float(text: str, what: str) -> float | None:
    """An optional positive number field: ``None`` when blank."""
    text = text.strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise GaptuiError(f"{what}: '{text}' is not a number") from None
    if not value > 0:
        raise GaptuiError(f"{what}: {value:g} must be > 0")
    return value


def parse_dataset_params(base: str, text: str) -> dict[str, Any]:
    """``key=value`` items typed for base dataset ``base``, typed by its parameter dataclass.

    Only the keys the user typed are kept (the source's defaults fill the rest when the dataset is built), so a
    saved preset says exactly what was chosen.
    """
    from engine.sources import SOURCES, params_dict, parse_param_args, parse_params

    source = SOURCES.get(base)
    raw = parse_param_args(_items(text))
    typed = params_dict(parse_params(source, raw, where=f"dataset {base} parameters"))
    return {key: typed[key] for key in raw}


def format_params(params: Mapping[str, Any]) -> str:
    """The inverse of :func:`parse_dataset_params`: ``n=16 degree=4``."""
    return " ".join(f"{k}={v}" for k, v in params.items())


def source_defaults(base: str) -> tuple[str, str, str]:
    """Placeholders for a base dataset: its parameters with defaults, and its default train and val sizes."""
    from engine.sources import SOURCES, params_dict, parse_params

    try:
        source = SOURCES.get(base)
        defaults = params_dict(parse_params(source, {}))
    except GaptuiError:
        return "", "", ""
    sizes = ["all" if s is None else str(s) for s in source.sizes]
    return format_params(defaults), sizes[0], sizes[1]


def _items(text: str) -> list[str]:
    return [item for item in re.split(r"[,\s]+", text.strip()) if item]


@dataclass(frozen=True)
class DatasetDraft:
    """One base dataset row of the form, as typed."""

    base: str = "er"
    params: str = ""
    noise_model: str | None = None
    train: str = ""
    val: str = ""
    seed: str = "0"

    def entry(self) -> DatasetEntry:
        """The typed :class:`DatasetEntry`; :class:`GaptuiError` names the field that is wrong."""
        where = f"dataset {self.base}"
        return DatasetEntry(
            base=self.base,
            params=parse_dataset_params(self.base, self.params),
            noise_model=self.noise_model,
            train=parse_int(self.train, f"{where} train size", 1),
            val=parse_int(self.val, f"{where} val size", 1),
            seed=parse_int(self.seed, f"{where} seed") or 0,
        )


@dataclass(frozen=True)
class SlotConfig:
    """Where runs go: GPU indices (None = every visible GPU), runs per GPU, CPU runs (None = automatic)."""

    gpus: list[str] | None = None
    jobs_per_gpu: int = 1
    cpu_jobs: int | None = None
    #: ``local`` (the slots above) or ``slurm`` (job arrays with the preset's [slurm] settings).
    backend: str = "local"

    def slots(self) -> list[Any]:
        """The scheduler slots (``make_slots``); may run ``nvidia-smi``, so not on the UI thread."""
        from gaptui.launch import slots_for

        return slots_for(self.gpus, self.jobs_per_gpu, self.cpu_jobs)


@dataclass(frozen=True)
class ExperimentDraft:
    """Everything the New-experiment form holds. ``base_run`` carries the run options the form does not show."""

    name: str = "tui"
    description: str = ""
    datasets: tuple[DatasetDraft, ...] = (DatasetDraft(),)
    noise: tuple[float, ...] = PAPER_NOISE
    models: tuple[str, ...] = ()
    seeds: str = "0"
    epochs: str = "300"
    batch_size: str = "100"
    budget: str = "60000"
    out_dim: str = ""
    eval_every: str = "1"
    timeout: str = ""
    retries: str = "0"
    gpus: str = ""
    jobs_per_gpu: str = "1"
    cpu_jobs: str = ""
    backend: str = "local"
    retry_failed: bool = False
    base_run: RunOptions = field(default_factory=RunOptions)
    #: The loaded preset's [slurm] table: not on the form, kept so that saving the preset keeps it.
    base_slurm: SlurmOptions = field(default_factory=SlurmOptions)

    def preset(self) -> Preset:
        """The preset this form describes; :class:`GaptuiError` names the field that is wrong."""
        if not self.datasets:
            raise GaptuiError("add at least one base dataset")
        if not self.noise:
            raise GaptuiError("select at least one noise level")
        if not self.models:
            raise GaptuiError("select at least one model")
        run = dataclasses.replace(
            self.base_run,
            epochs=parse_int(self.epochs, "epochs", 1) or self.base_run.epochs,
            batch_size=parse_int(self.batch_size, "batch size", 1) or self.base_run.batch_size,
            budget=parse_int(self.budget, "budget", 1) or self.base_run.budget,
            out_dim=parse_int(self.out_dim, "out dim", 1),
            eval_every=parse_int(self.eval_every, "eval every", 1) or self.base_run.eval_every,
            timeout=parse_float(self.timeout, "timeout"),
            retries=parse_int(self.retries, "retries") or 0,
        )
        name = self.name.strip() or "tui"
        if not re.fullmatch(r"[\w.-]+", name):
            raise GaptuiError(f"preset name '{name}': use letters, digits, '.', '-' and '_' (it names the file)")
        return Preset(
            name=name,
            description=self.description.strip(),
            datasets=tuple(d.entry() for d in self.datasets),
            noise=tuple(sorted({noise_key(n) for n in self.noise})),
            models=tuple(m for m in self.models if m != "laplacian"),
            seeds=tuple(parse_seeds(self.seeds)),
            laplacian="laplacian" in self.models,
            run=run,
            slurm=self.base_slurm,
        )

    def slot_config(self) -> SlotConfig:
        """The device-slot fields, parsed like ``gaptui run --gpus/--jobs-per-gpu/--cpu-jobs``."""
        from gaptui.backends import BACKENDS
        from gaptui.launch import parse_gpus

        text = self.gpus.strip()
        backend = self.backend.strip().lower() or "local"
        if backend not in BACKENDS:
            raise GaptuiError(f"backend '{self.backend}': expected {' or '.join(BACKENDS)}")
        return SlotConfig(
            gpus=parse_gpus(text or None),
            jobs_per_gpu=parse_int(self.jobs_per_gpu, "jobs per GPU", 1) or 1,
            cpu_jobs=parse_int(self.cpu_jobs, "CPU jobs"),
            backend=backend,
        )


def draft_from_preset(preset: Preset, keep: ExperimentDraft | None = None) -> ExperimentDraft:
    """The form contents of a loaded preset; device slots are kept from ``keep`` (they are not in presets)."""
    keep = keep or ExperimentDraft()
    run = preset.run
    return dataclasses.replace(
        keep,
        name=preset.name,
        description=preset.description,
        datasets=tuple(
            DatasetDraft(
                base=d.base,
                params=format_params(d.params),
                noise_model=d.noise_model,
                train="" if d.train is None else str(d.train),
                val="" if d.val is None else str(d.val),
                seed=str(d.seed),
            )
            for d in preset.datasets
        ),
        noise=tuple(preset.noise),
        models=tuple(preset.models) + (("laplacian",) if preset.laplacian else ()),
        seeds=", ".join(str(s) for s in preset.seeds),
        epochs=str(run.epochs),
        batch_size=str(run.batch_size),
        budget=str(run.budget),
        out_dim="" if run.out_dim is None else str(run.out_dim),
        eval_every=str(run.eval_every),
        timeout="" if run.timeout is None else f"{run.timeout:g}",
        retries=str(run.retries),
        base_run=run,
        base_slurm=preset.slurm,
    )


# ------------------------------------------------------------------------------------------ cost of a grid


@dataclass(frozen=True)
class PlanSummary:
    """What launching a grid means: its size, what history already holds, and a duration estimate."""

    size: int
    existing: int
    done: int
    failed: int
    to_run: int
    slots: int
    estimate_seconds: float | None
    #: What the estimate comes from: ``history`` (the mean finished run of each model) or ``measured`` (this
    #: machine's calibrated throughput and finished runs of the same cells, as ``gaptui run --dry-run`` says).
    estimate_source: str = "history"

    def text(self) -> str:
        """One line for the form's launch bar."""
        if not self.to_run:
            estimate = "nothing to run"
        elif self.estimate_seconds is None:
            estimate = "no finished run to estimate the time from (gaptui run --dry-run measures this machine)"
        else:
            source = "measured throughput" if self.estimate_source == "measured" else "mean run time in history"
            estimate = f"≈ {format_duration(self.estimate_seconds)} on {self.slots} slot(s), from {source}"
        return (
            f"grid {self.size} runs · {self.existing} in history ({self.done} done, {self.failed} failed) · "
            f"{self.to_run} to run · {estimate}"
        )


def estimate_seconds(models: Sequence[str], records: Iterable[Mapping[str, Any]], slots: int) -> float | None:
    """Wall time of running ``models`` (one entry per run) on ``slots`` parallel slots.

    Each run costs the mean duration of finished runs of its model, else the mean over every finished run;
    ``None`` when history holds no finished run with a duration.
    """
    by_model: dict[str, list[float]] = {}
    for record in records:
        duration = record.get("duration")
        if record.get("status") == "done" and isinstance(duration, (int, float)) and duration > 0:
            by_model.setdefault(str((record.get("axes") or {}).get("model")), []).append(float(duration))
    if not by_model:
        return None
    overall = statistics.fmean(d for durations in by_model.values() for d in durations)
    means = {model: statistics.fmean(durations) for model, durations in by_model.items()}
    total = sum(means.get(model, overall) for model in models)
    return total / max(1, slots)


def _model(spec: Any) -> str:
    """What a run's duration is estimated from: its ``model`` axis (or its family when it has none)."""
    from engine.tasks import family

    return str(family(spec.task).record_axes(spec).get("model", spec.task))


def summarize(specs: Sequence[Any], records: Mapping[str, Mapping[str, Any]], slots: int) -> PlanSummary:
    """Size, history overlap (by spec hash) and estimate of a grid; ``records`` maps hash -> record."""
    hashes = [spec.hash() for spec in specs]
    statuses = [records[h]["status"] for h in hashes if h in records]
    todo = [_model(spec) for spec, h in zip(specs, hashes, strict=True) if records.get(h, {}).get("status") != "done"]
    return PlanSummary(
        size=len(specs),
        existing=len(statuses),
        done=statuses.count("done"),
        failed=statuses.count("failed"),
        to_run=len(todo),
        slots=slots,
        estimate_seconds=estimate_seconds(todo, records.values(), slots),
    )
