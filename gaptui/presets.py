"""Presets: TOML files describing a grid of runs, validated into typed objects and expanded into RunSpecs.

A preset names base datasets (with parameters and sizes), noise levels, models, seeds and run options::

    description = "what this grid is for"
    noise = [0.04, 0.12]
    models = ["gcn", "gatv2"]
    seeds = [0, 1]
    laplacian = true            # add the training-free baseline once per (dataset, noise)

    [run]                       # RunSpec options shared by every run (see engine.spec.RunSpec)
    epochs = 5
    batch_size = 100

    [slurm]                     # used with --backend slurm (see gaptui.backends.slurm.SlurmOptions)
    partition = "gpu"
    time = 60                   # minutes per run
    gpus_per_run = 1

    [[datasets]]
    base = "er"
    params = { n = 100, degree = 8 }
    train = 1000
    val = 200

``--preset NAME`` looks for ``NAME`` as a path, then ``<workspace>/presets/NAME.toml``, then the presets shipped
with gaptui (``gaptui/presets/``, package data: present in a wheel install too).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import GaptuiError, did_you_mean
from engine.spec import RunSpec
from gaptui.backends.slurm import SlurmOptions
from gaptui.workspace import Workspace

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

BUNDLED = Path(__file__).resolve().parent / "presets"


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
    topk: list[int] = field(default_factory=lambda: [5, 10])
    timeout: float | None = None
    retries: int = 0

    def spec_fields(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if k not in ("timeout", "retries")}


@dataclass(frozen=True)
class Preset:
    name: str
    description: str
    datasets: tuple[DatasetEntry, ...]
    noise: tuple[float, ...]
    models: tuple[str, ...]
    seeds: tuple[int, ...]
    laplacian: bool = False
    run: RunOptions = field(default_factory=RunOptions)
    slurm: SlurmOptions = field(default_factory=SlurmOptions)
    path: Path | None = None
    #: What planning merged or adjusted (repeated grid values), one line each, for the user to see.
    notes: tuple[str, ...] = field(default=(), compare=False)

    @property
    def size(self) -> int:
        trained = len(self.datasets) * len(self.noise) * len(self.models) * len(self.seeds)
        return trained + (len(self.datasets) * len(self.noise) if self.laplacian else 0)


TOP_KEYS = ("name", "description", "noise", "models", "seeds", "laplacian", "run", "slurm", "datasets")
DATASET_KEYS = tuple(f.name for f in dataclasses.fields(DatasetEntry))
RUN_KEYS = tuple(f.name for f in dataclasses.fields(RunOptions))


def preset_names(ws: Workspace | None = None) -> list[str]:
    folders = [BUNDLED] + ([ws.root / "presets"] if ws else [])
    return sorted({p.stem for folder in folders if folder.is_dir() for p in folder.glob("*.toml")})


def find_preset(name: str, ws: Workspace | None = None) -> Path:
    path = Path(name).expanduser()
    if path.is_dir():
        raise GaptuiError(f"--preset {name}: is a directory; expected a preset name or a .toml file")
    if path.suffix == ".toml" or path.exists():
        if not path.is_file():
            shipped = path.stem in preset_names(ws) and path.parent == Path(".")
            hint = f" (to use the shipped preset, write --preset {path.stem})" if shipped else ""
            raise GaptuiError(f"--preset {name}: file not found{hint}")
        return path
    for folder in ([ws.root / "presets"] if ws else []) + [BUNDLED]:
        candidate = folder / f"{name}.toml"
        if candidate.is_file():
            return candidate
    known = preset_names(ws)
    raise GaptuiError(f"unknown preset '{name}'{did_you_mean(name, known)}; known: {', '.join(known) or 'none'}")


def load_preset(name: str, ws: Workspace | None = None) -> Preset:
    path = find_preset(name, ws)
    try:
        # utf-8-sig: a byte-order mark (some editors write one) is not part of the TOML
        text = path.read_bytes().decode("utf-8-sig")
        raw = tomllib.loads(text)
    except UnicodeDecodeError as exc:
        raise GaptuiError(f"{path}: not UTF-8 text (byte {exc.start}); a preset is a TOML text file") from None
    except tomllib.TOMLDecodeError as exc:
        raise GaptuiError(f"{path}: not valid TOML ({exc})") from None
    return parse_preset(raw, path)


def _unknown_keys(where: str, raw: dict[str, Any], known: tuple[str, ...]) -> None:
    for key in raw:
        if key not in known:
            raise GaptuiError(f"{where}: unknown key '{key}'{did_you_mean(key, known)}; known: {', '.join(known)}")


def _list(where: str, key: str, value: Any, kind: type | tuple[type, ...], what: str) -> list[Any]:
    if not isinstance(value, list):
        raise GaptuiError(f"{where}: key '{key}' = {value!r}: expected a list of {what}")
    if not value:
        raise GaptuiError(f"{where}: key '{key}' is empty: the grid would have no runs")
    for item in value:
        if isinstance(item, bool) or not isinstance(item, kind):
            raise GaptuiError(f"{where}: key '{key}' holds {item!r}: expected {what}")
    return value


def parse_preset(raw: dict[str, Any], path: Path | None = None) -> Preset:
    """Validate a preset document. Errors name the file, the key and the value, with a did-you-mean."""
    from engine.datasets import DatasetSpec
    from engine.models import MODELS
    from engine.noise import check_noise
    from engine.typed import parse_dataclass

    where = str(path) if path else "preset"
    _unknown_keys(where, raw, TOP_KEYS)
    for key in ("noise", "models", "seeds", "datasets"):
        if key not in raw:
            raise GaptuiError(f"{where}: missing key '{key}'")
    noise = _list(where, "noise", raw["noise"], (int, float), "noise levels in [0, 1)")
    for eta in noise:
        check_noise(eta, where=f"{where}: key 'noise' value")
    models = _list(where, "models", raw["models"], str, "model names")
    for model in models:
        if ":" in model:
            # A user model: import it once here, so a typo fails the plan rather than every run of the grid.
            try:
                MODELS.get(model)
            except GaptuiError as exc:
                raise GaptuiError(f"{where}: key 'models' value '{model}': {exc}") from None
        elif model.lower() != "laplacian" and model not in MODELS:
            known = [*MODELS.names(), "laplacian"]
            raise GaptuiError(
                f"{where}: key 'models' value '{model}' is not a model{did_you_mean(model, known)}; "
                f"known: {', '.join(known)} or module.path:Factory"
            )
    seeds = _list(where, "seeds", raw["seeds"], int, "integer seeds")
    for seed in seeds:
        if seed < 0:
            raise GaptuiError(f"{where}: key 'seeds' holds {seed}: expected seeds >= 0")
    entries = _list(where, "datasets", raw["datasets"], dict, "dataset tables ([[datasets]])")
    datasets = []
    for i, entry in enumerate(entries):
        here = f"{where}: datasets[{i}]"
        _unknown_keys(here, entry, DATASET_KEYS)
        if "base" not in entry:
            raise GaptuiError(f"{here}: missing key 'base'")
        ds = parse_dataclass(DatasetEntry, entry, here)
        try:
            DatasetSpec(ds.base, noise[0], ds.noise_model, ds.train, ds.val, ds.seed, ds.params).canonical()
        except GaptuiError as exc:
            raise GaptuiError(f"{here}: {exc}") from None
        datasets.append(ds)
    notes: list[str] = []
    noise = _unique(noise, float, "noise", notes)
    models = _unique([_canonical_model(m) for m in models], str, "models", notes)
    seeds = _unique(seeds, int, "seeds", notes)
    datasets = _unique(datasets, _dataset_key, "datasets", notes)
    run_raw = raw.get("run", {})
    run = parse_dataclass(RunOptions, run_raw, f"{where}: [run]")
    check_run_options(run.timeout, run.retries, f"{where}: [run]")
    slurm = parse_dataclass(SlurmOptions, raw.get("slurm", {}), f"{where}: [slurm]").check(f"{where}: [slurm]")
    laplacian = raw.get("laplacian", False)
    if not isinstance(laplacian, bool):
        raise GaptuiError(f"{where}: key 'laplacian' = {laplacian!r}: expected true or false")
    preset = Preset(
        name=str(raw.get("name") or (path.stem if path else "preset")),
        description=str(raw.get("description", "")),
        datasets=tuple(datasets),
        noise=tuple(float(x) for x in noise),
        models=tuple(m for m in models if m != "laplacian"),
        seeds=tuple(seeds),
        laplacian=laplacian or "laplacian" in models,
        run=run,
        slurm=slurm,
        path=path,
        notes=tuple(notes),
    )
    if not preset.models and not preset.laplacian:
        raise GaptuiError(f"{where}: key 'models' names no model: the grid would have no runs")
    # Validate the run options once through the same checks the worker applies, and build each model once so an
    # impossible budget or a bad model option fails here rather than in every worker of the grid.
    grid(preset, Workspace(Path(".")), limit=1)
    _check_models(preset, where)
    return preset


def check_run_options(timeout: float | None, retries: int | None, where: str) -> None:
    """How the scheduler treats runs, checked once at planning (the run spec checks the rest)."""
    if timeout is not None and not timeout > 0:
        raise GaptuiError(f"{where}: timeout = {timeout:g}: expected seconds > 0 (or no timeout)")
    if retries is not None and retries < 0:
        raise GaptuiError(f"{where}: retries = {retries}: expected a count >= 0")


def _canonical_model(name: str) -> str:
    return name if ":" in name else name.lower()


def _dataset_key(entry: DatasetEntry) -> str:
    """Entries that resolve to the same datasets (defaults filled in, names canonical) are one grid value."""
    import json

    from engine.datasets import DatasetSpec

    canonical = DatasetSpec(entry.base, 0.0, entry.noise_model, entry.train, entry.val, entry.seed, entry.params)
    return json.dumps(canonical.canonical(), sort_keys=True)


def _unique(values: list[Any], key: Any, name: str, notes: list[str]) -> list[Any]:
    """``values`` without repeats (by ``key``), canonical forms kept; a note says what was merged."""
    seen: dict[Any, Any] = {}
    repeated: list[str] = []
    for value in values:
        k = key(value)
        if k in seen:
            repeated.append(str(value.base if isinstance(value, DatasetEntry) else value))
        else:
            seen[k] = value
    if repeated:
        notes.append(f"key '{name}' repeats {', '.join(repeated)}: merged (a grid is a set of runs)")
    return list(seen.values())


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
                )
            except GaptuiError as exc:
                raise GaptuiError(f"{where}: key 'models' value '{model}': {exc}") from None


def grid(preset: Preset, ws: Workspace, limit: int | None = None) -> list[RunSpec]:
    """The run specs of a preset, seed-major so that early results cover every cell once before repeating.

    A grid is a set: a spec whose hash is already planned is dropped (one run id, one record, one folder).
    """
    specs: list[RunSpec] = []
    seen: set[str] = set()
    where = str(preset.path or preset.name)
    common = {**preset.run.spec_fields(), "datasets_dir": str(ws.datasets), "data_root": str(ws.raw_data)}
    for seed_index, seed in enumerate(preset.seeds):
        for entry in preset.datasets:
            for eta in preset.noise:
                dataset = entry.dataset_dict(eta)
                cell = [{"model": "laplacian"}] if preset.laplacian and seed_index == 0 else []
                cell += [{"model": model, "seed": seed} for model in preset.models]
                for extra in cell:
                    spec = RunSpec.from_dict({**common, "dataset": dataset, **extra}, where)
                    if spec.hash() not in seen:
                        seen.add(spec.hash())
                        specs.append(spec)
                if limit is not None and len(specs) >= limit:
                    return specs
    return specs


def dump_preset(preset: Preset) -> str:
    """TOML text of a preset (what the TUI saves); ``load_preset`` reads it back to an equal preset."""
    lines = [f"name = {_toml(preset.name)}", f"description = {_toml(preset.description)}"]
    lines += [
        f"noise = {_toml(list(preset.noise))}",
        f"models = {_toml(list(preset.models))}",
        f"seeds = {_toml(list(preset.seeds))}",
        f"laplacian = {_toml(preset.laplacian)}",
        "",
        "[run]",
    ]
    defaults = RunOptions()
    for key, value in dataclasses.asdict(preset.run).items():
        if value is not None and value != getattr(defaults, key):
            lines.append(f"{key} = {_toml(value)}")
    slurm = [
        f"{key} = {_toml(value)}"
        for key, value in dataclasses.asdict(preset.slurm).items()
        if key != "options" and value is not None and value != getattr(SlurmOptions(), key)
    ]
    if preset.slurm.options:
        inner = ", ".join(f"{_toml(k)} = {_toml(v)}" for k, v in preset.slurm.options.items())
        slurm.append(f"options = {{ {inner} }}")
    if slurm:
        lines += ["", "[slurm]", *slurm]
    for ds in preset.datasets:
        lines += ["", "[[datasets]]", f"base = {_toml(ds.base)}"]
        if ds.params:
            inner = ", ".join(f"{k} = {_toml(v)}" for k, v in ds.params.items())
            lines.append(f"params = {{ {inner} }}")
        for key in ("noise_model", "train", "val"):
            if getattr(ds, key) is not None:
                lines.append(f"{key} = {_toml(getattr(ds, key))}")
        if ds.seed:
            lines.append(f"seed = {ds.seed}")
    return "\n".join(lines) + "\n"


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    text = str(value).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{text}"'
