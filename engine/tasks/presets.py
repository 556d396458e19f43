"""The preset schema: the keys every family's preset shares, parsed and validated in one place.

A preset is a TOML file. These keys mean the same in every family; everything else is the family's own grid
description, read by its :meth:`engine.tasks.TaskFamily.parse_preset` on top of the common part parsed here:

=================  ===================================================================================================
key                meaning
=================  ===================================================================================================
``task``           the family (default ``alignment``)
``name``           the preset's name (default: the file's stem)
``description``    one line saying what the grid is for
``seeds``          the planned seeds of every trained cell (a non-empty list of integers >= 0; repeats merged)
``[run]``          the run policy: ``timeout`` (seconds per run), ``retries`` (re-runs of a failed run),
                   ``pack_seeds`` (seeds of one cell trained in one worker process); the family's own run options
                   (spec fields copied into every run) sit beside them, among them ``precision`` in every
                   built-in family (``auto``, ``fp32``, ``bf16``: :func:`engine.hardware.choose_precision`)
``[slurm]``        how runs are submitted with ``--backend slurm`` (:class:`SlurmOptions`), for families that run
                   on Slurm
=================  ===================================================================================================

Nothing here changes a run's identity: the policy and the Slurm settings say how runs are scheduled, never what they
compute. The engine parses them with the rest of the preset and never acts on them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from engine.errors import GaptuiError, did_you_mean
from engine.hardware import RunOptions
from engine.typed import parse_dataclass, type_hints

# ------------------------------------------------------------------------------------------------ the base and helpers


@dataclass(frozen=True, kw_only=True)
class PresetBase:
    """The head every family's preset shares, declared once: families derive frozen dataclasses from it and add
    their own grid fields (without redeclaring these).

    ``name``, ``description``, ``seeds`` (the planned seeds of a trained cell), ``path`` (the TOML file, if any)
    and ``notes``; ``timeout`` (seconds per run or None), ``retries`` (re-runs of a failed run) and ``pack_seeds``
    (how many seeds of one cell share a worker process) come from the preset's ``policy``; ``task`` names the
    family. These keys, the ``[run]`` policy and ``[slurm]`` are one schema for every family: a family's
    ``parse_preset`` starts from :func:`parse_head` (the common part parsed and checked), reads only
    its own keys and passes ``**head.fields()`` (or ``**head.fields(notes)`` with notes of its own) to its preset.
    A family whose grids may go to a cluster declares a ``slurm`` field (default None) and passes ``slurm=True``;
    the engine parses that table with the rest and never acts on it.
    """

    task: ClassVar[str] = ""
    name: str
    description: str = ""
    seeds: tuple[int, ...] = ()
    path: Path | None = None
    #: What planning merged or adjusted (repeated grid values), one line each, shown to the user.
    notes: tuple[str, ...] = field(default=(), compare=False)

    # A preset whose runs follow a policy declares ``policy`` (a field or property): an object with ``timeout``,
    # ``retries`` and ``pack_seeds``, such as :class:`engine.tasks.presets.RunPolicy` or a ``[run]`` table built on it.

    @property
    def timeout(self) -> float | None:
        policy = getattr(self, "policy", None)
        return None if policy is None else policy.timeout

    @property
    def retries(self) -> int:
        policy = getattr(self, "policy", None)
        return 0 if policy is None else policy.retries

    @property
    def pack_seeds(self) -> int:
        policy = getattr(self, "policy", None)
        return 1 if policy is None else policy.pack_seeds


def unknown_keys(where: str, raw: Mapping[str, Any], known: tuple[str, ...]) -> None:
    """Raise for the first key of ``raw`` not in ``known`` (with a did-you-mean)."""
    for key in raw:
        if key not in known:
            raise GaptuiError(f"{where}: unknown key '{key}'{did_you_mean(key, known)}; known: {', '.join(known)}")


def dataset_tables(where: str, raw: Mapping[str, Any], known: tuple[str, ...]) -> list[tuple[str, dict[str, Any]]]:
    """A preset's ``[[datasets]]`` tables, each with where it is (``<file>: datasets[i]``): a non-empty list of
    tables whose keys are among ``known`` and which name their ``base``."""
    tables = list_of(where, "datasets", raw["datasets"], dict, "dataset tables ([[datasets]])")
    out = []
    for i, entry in enumerate(tables):
        here = f"{where}: datasets[{i}]"
        unknown_keys(here, entry, known)
        if "base" not in entry:
            raise GaptuiError(f"{here}: missing key 'base'")
        out.append((here, entry))
    return out


def check_run_options(timeout: float | None, retries: int | None, where: str, pack_seeds: int | None = None) -> None:
    """How the scheduler treats runs (a preset's timeout, retries and pack_seeds), checked once at planning."""
    if timeout is not None and not timeout > 0:
        raise GaptuiError(f"{where}: timeout = {timeout:g}: expected seconds > 0 (or no timeout)")
    if retries is not None and retries < 0:
        raise GaptuiError(f"{where}: retries = {retries}: expected a count >= 0")
    if pack_seeds is not None and pack_seeds < 1:
        raise GaptuiError(f"{where}: pack_seeds = {pack_seeds}: expected a count >= 1 (1: one run per process)")


def unique_values(values: list[Any], key: Callable[[Any], Any], name: str, notes: list[str]) -> list[Any]:
    """``values`` without repeats (by ``key``), first forms kept; a line in ``notes`` says what was merged."""
    seen: dict[Any, Any] = {}
    repeated: list[str] = []
    for value in values:
        k = key(value)
        if k in seen:
            repeated.append(str(getattr(value, "base", value)))
        else:
            seen[k] = value
    if repeated:
        notes.append(f"key '{name}' repeats {', '.join(repeated)}: merged (a grid is a set of runs)")
    return list(seen.values())


def seeds_of(where: str, value: Any, key: str = "seeds") -> list[int]:
    """A preset's list of seeds: non-empty, integers, each >= 0."""
    seeds = list_of(where, key, value, int, "integer seeds")
    for seed in seeds:
        if seed < 0:
            raise GaptuiError(f"{where}: key '{key}' holds {seed}: expected seeds >= 0")
    return seeds


def list_of(where: str, key: str, value: Any, kind: type | tuple[type, ...], what: str) -> list[Any]:
    """A non-empty TOML list whose items are all ``kind`` (booleans never count as numbers)."""
    if not isinstance(value, list):
        raise GaptuiError(f"{where}: key '{key}' = {value!r}: expected a list of {what}")
    if not value:
        raise GaptuiError(f"{where}: key '{key}' is empty: the grid would have no runs")
    for item in value:
        if isinstance(item, bool) or not isinstance(item, kind):
            raise GaptuiError(f"{where}: key '{key}' holds {item!r}: expected {what}")
    return value


# ------------------------------------------------------------------------------------------------ the common head

#: The top-level keys of every preset.
COMMON_KEYS = ("task", "name", "description", "seeds", "run", "slurm")
#: Slurm's default MaxArraySize is 1001: indices 0-1000.
MAX_CHUNK = 1000


@dataclass(frozen=True)
class RunPolicy:
    """How the scheduler treats every run of a grid (the ``[run]`` table's ``timeout``, ``retries``, ``pack_seeds``).

    A family's ``[run]`` dataclass may inherit it so the policy and its run options read as one table."""

    #: Seconds a run may take (from its start event); None: no limit.
    timeout: float | None = None
    #: Re-runs of a failed run.
    retries: int = 0
    #: Seeds of one cell trained together in one worker process (scheduling only: no run's hash changes).
    pack_seeds: int = 1

    def check(self, where: str) -> RunPolicy:
        check_run_options(self.timeout, self.retries, where, self.pack_seeds)
        return self

    def spec_fields(self) -> dict[str, Any]:
        """The run options of a subclass (what every spec of the grid gets), without the policy."""
        return {k: v for k, v in dataclasses.asdict(self).items() if k not in POLICY_KEYS}

    def policy(self) -> RunPolicy:
        """The policy alone (a subclass's run options left out)."""
        return RunPolicy(self.timeout, self.retries, self.pack_seeds)


#: The ``[run]`` keys that are policy, not run options: never copied into a spec.
POLICY_KEYS = tuple(f.name for f in dataclasses.fields(RunPolicy))


@dataclass(frozen=True)
class SlurmOptions:
    """How runs are submitted: a preset's ``[slurm]`` table, overridden by ``gaptui run`` options."""

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time: int | None = None  # minutes per run; None: the preset's [run] timeout, else the partition's default
    gpus_per_run: int = 0
    cpus_per_run: int = 1
    mem_per_run: float | None = None  # GB; None: the cluster's default per CPU
    array_parallelism: int = 64  # tasks of one array running at once
    max_retries: int = 2  # resubmissions after TIMEOUT / NODE_FAIL / PREEMPTED
    signal_delay: int = 90  # seconds between SIGUSR2 and the time limit
    chunk: int = MAX_CHUNK  # runs per job array
    options: dict[str, str] = field(default_factory=dict)  # any other sbatch option, e.g. {constraint = "a100"}

    def check(self, where: str) -> SlurmOptions:
        """Raise a GaptuiError naming the key when a value is out of range; returns self."""
        limits = {
            "time": (self.time, 1),
            "gpus_per_run": (self.gpus_per_run, 0),
            "cpus_per_run": (self.cpus_per_run, 1),
            "array_parallelism": (self.array_parallelism, 1),
            "max_retries": (self.max_retries, 0),
            "signal_delay": (self.signal_delay, 0),
            "chunk": (self.chunk, 1),
        }
        for key, (value, low) in limits.items():
            if value is not None and value < low:
                raise GaptuiError(f"{where}: {key} = {value}: expected an integer >= {low}")
        if self.chunk > MAX_CHUNK:
            raise GaptuiError(f"{where}: chunk = {self.chunk}: at most {MAX_CHUNK} (Slurm's default MaxArraySize)")
        if self.time is not None and self.time * 60 < self.signal_delay + 120:
            # Slurm sends the warning up to a minute early (its timer resolution); the worker also needs to start.
            raise GaptuiError(
                f"{where}: time = {self.time} min leaves no room for the warning signal_delay = {self.signal_delay} s "
                f"plus Slurm's one-minute timer resolution; expected time >= {-(-(self.signal_delay + 120) // 60)} "
                "min (or a smaller signal_delay)"
            )
        if self.mem_per_run is not None and self.mem_per_run <= 0:
            raise GaptuiError(f"{where}: mem_per_run = {self.mem_per_run:g}: expected a positive number of GB")
        return self

    def merged(self, **overrides: Any) -> SlurmOptions:
        """These options with the given non-None values replaced (``options`` entries are added)."""
        extra = overrides.pop("options", None) or {}
        chosen = {k: v for k, v in overrides.items() if v is not None}
        return replace(self, **chosen, options={**self.options, **extra})


@dataclass(frozen=True)
class PresetHead:
    """The common part of a preset document, parsed: what a family builds its preset on.

    ``run`` holds the ``[run]`` table's family keys (its run options, types not yet checked: the family parses them
    into its own dataclass); ``own`` the family's top-level keys, unparsed; ``notes`` what was merged (repeated
    seeds), one line each."""

    task: str
    where: str
    path: Path | None
    name: str
    description: str
    seeds: tuple[int, ...]
    policy: RunPolicy
    run: dict[str, Any]
    own: dict[str, Any]
    slurm: SlurmOptions | None = None
    notes: tuple[str, ...] = ()

    def fields(self, notes: Sequence[str] | None = None) -> dict[str, Any]:
        """The :class:`PresetBase` fields of the preset this head starts (``notes``: the family's, in place of the
        head's own)."""
        notes = self.notes if notes is None else notes
        return {"name": self.name, "description": self.description, "seeds": self.seeds, "path": self.path,
                "notes": tuple(notes)}  # fmt: skip


def parse_head(
    raw: Mapping[str, Any],
    path: Path | None,
    task: str,
    keys: tuple[str, ...],
    run_keys: tuple[str, ...] = (),
    required: tuple[str, ...] = (),
    slurm: bool = False,
    where: str | None = None,
) -> PresetHead:
    """Split and check a preset document of family ``task``: the common keys parsed, the family's left for it.

    ``keys`` are the family's own top-level keys (``required`` of them must be present); ``run_keys`` the run
    options its ``[run]`` table may hold beside the policy; ``slurm`` whether its grids may go to a cluster. Every
    error is one line naming ``where`` (default: the file, else ``preset``), the key, the value and what was
    expected.
    """
    where = where or (str(path) if path else "preset")
    if "slurm" in raw and not slurm:
        raise GaptuiError(f"{where}: key 'slurm': the {task} family does not run on Slurm")
    unknown_keys(where, raw, (*COMMON_KEYS[:4], *keys, "run", "tune", *(("slurm",) if slurm else ())))
    if "tune" in raw and not isinstance(raw["tune"], Mapping):
        raise GaptuiError(f"{where}: key 'tune' = {raw['tune']!r}: expected a table, [tune] (read by `gaptui tune`)")
    for key in (*required, "seeds"):
        if key not in raw:
            raise GaptuiError(f"{where}: missing key '{key}'")
    name = raw.get("name") or (path.stem if path else "preset")
    description = raw.get("description", "")
    for key, value in (("name", name), ("description", description)):
        if not isinstance(value, str):
            raise GaptuiError(f"{where}: key '{key}' = {value!r}: expected a string")
    notes: list[str] = []
    seeds = unique_values(seeds_of(where, raw["seeds"]), int, "seeds", notes)
    table = raw.get("run", {})
    here = f"{where}: [run]"
    if not isinstance(table, Mapping):
        raise GaptuiError(f"{here} = {table!r}: expected a table of run options, e.g. [run] with timeout = 3600")
    unknown_keys(here, table, (*run_keys, *POLICY_KEYS))
    if "precision" in table:
        RunOptions(precision=table["precision"]).check(here)
    policy = parse_dataclass(RunPolicy, {k: v for k, v in table.items() if k in POLICY_KEYS}, here).check(here)
    options = None
    if slurm:
        options = parse_dataclass(SlurmOptions, raw.get("slurm", {}), f"{where}: [slurm]").check(f"{where}: [slurm]")
    return PresetHead(
        task=task,
        where=where,
        path=path,
        name=name,
        description=description,
        seeds=tuple(seeds),
        policy=policy,
        run={k: v for k, v in table.items() if k not in POLICY_KEYS},
        own={k: v for k, v in raw.items() if k in keys},
        slurm=options,
        notes=tuple(notes),
    )


def spec_options(spec_type: type, filled: tuple[str, ...], name: str, module: str) -> type:
    """A frozen dataclass of the run options a preset's ``[run]`` table may set for ``spec_type``: every spec field
    but the ``filled`` ones (what the grid fills in) and the placement fields, with the spec's own types and
    defaults, plus the :class:`RunPolicy` fields. The spec stays the one place those fields are declared."""

    hints = type_hints(spec_type)
    skip = {*filled, *getattr(spec_type, "PLACEMENT", ())}
    kept = [f for f in dataclasses.fields(spec_type) if f.name not in skip and f.init]
    fields = [(f.name, hints[f.name], _same_default(f)) for f in kept]
    cls = dataclasses.make_dataclass(name, fields, bases=(RunPolicy,), frozen=True, kw_only=True)
    cls.__module__ = module
    return cls


def _same_default(spec_field: dataclasses.Field[Any]) -> Any:
    if spec_field.default_factory is not dataclasses.MISSING:
        return field(default_factory=spec_field.default_factory)
    return field(default=spec_field.default)


def toml_value(value: Any) -> str:
    """A TOML literal of a scalar or a list (strings quoted, booleans lower-case)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    text = str(value).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{text}"'


def slurm_table(options: SlurmOptions | None) -> str:
    """The ``[slurm]`` table of a preset as TOML text (keys away from their defaults only; "" when none)."""
    options = options or SlurmOptions()
    defaults = SlurmOptions()
    lines = [
        f"{key} = {toml_value(value)}"
        for key, value in dataclasses.asdict(options).items()
        if key != "options" and value is not None and value != getattr(defaults, key)
    ]
    if options.options:
        inner = ", ".join(f"{toml_value(k)} = {toml_value(v)}" for k, v in options.options.items())
        lines.append(f"options = {{ {inner} }}")
    return "\n[slurm]\n" + "\n".join(lines) + "\n" if lines else ""
