"""What a run costs in seconds: every family's cost model (:class:`CostModel`) and their shared vocabulary.

A family answers, for its runs left to do, the seconds of each run on each slot *profile* (:class:`Profile`: the
device type, the concrete device and the thread count a slot gives a worker), of which a ``shared`` part is paid
once per worker process (start-up, data loading: what the runs of a pack share), and where the number came from
(:class:`RunCost`). It asks the manager for what it cannot know alone through a :class:`CostContext`:

- :meth:`CostContext.history`: medians over finished runs of the same *cell* (same
  :meth:`CostModel.cell`, this host and device) of the seconds per unit of work
  (:meth:`CostModel.units`: an epoch, an epoch over a number of graphs...), per evaluation,
  and of the rest of a run (:class:`CellHistory`);
- :meth:`CostContext.calibrate`: measurements of cost keys (opaque to the manager: anything with ``to_dict()``) on
  the slots of a profile, taken by the family's calibration module (``python -m <module>``) in one process per slot
  side by side, cached per machine and key in ``<workspace>/calibration.json`` (:class:`CalibrationCache`);
- :meth:`CostContext.overhead`: the seconds a run costs besides its training (process start, imports, result),
  timed on tiny runs of the family (:meth:`CostModel.overhead_probe`) through the real worker.

:meth:`CostContext.from_history` is the model of a family without a calibrated one: finished runs of the same cell.
"""

from __future__ import annotations

import contextlib
import json
import platform
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from engine.cache import content_digest, discard, open_sealed_json, write_sealed_json
from engine.files import locked, read_json
from engine.hardware import cpu_name

#: Version of the cache file's layout; entries of another version are measured anew and the file rewritten.
CACHE_FORMAT = 1


@dataclass(frozen=True)
class Profile:
    """What a slot offers a run: the device type (``cpu``/``cuda``), its concrete device and its thread count."""

    kind: str
    device: str
    threads: int


@dataclass(frozen=True)
class CellHistory:
    """Medians over finished runs of one cell: seconds per unit of work (an epoch), seconds per evaluation, and the
    rest of a run's duration (None when only runs of packs are known: their duration is their own units and
    evaluations)."""

    epoch_s: float
    eval_s: float
    overhead_s: float | None
    runs: int

    def seconds(self, epochs: float, evals: int, overhead: float = 0.0) -> float:
        """A run's seconds; ``overhead`` stands in for an unknown rest."""
        rest = overhead if self.overhead_s is None else self.overhead_s
        return rest + epochs * self.epoch_s + evals * self.eval_s


@dataclass
class RunCost:
    """One run's seconds per slot profile, of which ``shared`` (per profile) is paid once per worker process, and
    where the numbers came from (``history (3 run(s))``, ``calibration (cached)``...)."""

    seconds: dict[Profile, float]
    source: str
    shared: dict[Profile, float] = field(default_factory=dict)


@dataclass
class CostReport:
    """What a family's cost model says of its runs: ``costs`` (run hash -> :class:`RunCost`), ``missing`` (run
    hash -> why there is no number) and ``to_build`` (inputs not yet built, whose building is not counted)."""

    costs: dict[str, RunCost] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)
    to_build: int = 0


class CostContext:
    """What the manager offers a family's cost model (implemented by :class:`gaptui.estimate.Estimator`)."""

    #: The distinct slot profiles of the grid's slots, in slot order.
    profiles: list[Profile]
    #: Where the grid's inputs are cached (``<workspace>/datasets``), for models that read a built input's size.
    datasets_dir: Path
    #: False when this context measures nothing (an estimate from history and cached calibrations only, asked
    #: before every launch): :meth:`calibrate` then fails on the first key not cached, and a model that needs
    #: many keys may ask for each as it finds it, to give up early.
    measures: bool = True

    def history(self, family: Any, spec: Any, profile: Profile) -> CellHistory | None:
        """Finished runs of ``spec``'s cell on this host and ``profile``'s device (None when there are none)."""
        raise NotImplementedError

    def calibrate(
        self,
        family: Any,
        wanted: Mapping[Profile, Mapping[str, Any]],
        fits: Callable[[dict[str, Any]], bool] = bool,
    ) -> dict[tuple[Profile, str], Any]:
        """``(profile, ident) -> (measurement dict or object, measured now)`` for each wanted key (``ident ->
        key``), cached or measured (every key of a profile at once, on all its slots); a cached entry that does not
        ``fits`` (another layout) is measured again."""
        raise NotImplementedError

    def overhead(self, family: Any) -> float:
        """Seconds a run of ``family`` costs besides its training, with every slot busy (cached)."""
        raise NotImplementedError

    def from_history(self, family: Any, specs: Sequence[Any]) -> CostReport:
        """The cost model of a family without a calibrated one: each run from finished runs of its cell; runs of a
        cell never finished here are missing (no made-up number)."""
        report = CostReport()
        unknown_rest = False
        found: dict[str, dict[Profile, CellHistory]] = {}
        for spec in specs:
            per = {p: self.history(family, spec, p) for p in self.profiles}
            if any(cell is None for cell in per.values()):
                report.missing[spec.run_id()] = (
                    f"{family.costs.label(spec)}: no finished run of this cell on this machine yet "
                    f"(task {family.name} is estimated from the history of its runs)"
                )
                continue
            found[spec.run_id()] = {p: c for p, c in per.items() if c is not None}
            unknown_rest |= any(c.overhead_s is None for c in found[spec.run_id()].values())
        overhead = self.overhead(family) if unknown_rest else 0.0
        for spec in specs:
            if spec.run_id() not in found:
                continue
            units, evals = family.costs.units(spec) or 0, family.costs.evaluations(spec)
            cost = RunCost({}, "")
            for profile, cell in found[spec.run_id()].items():
                cost.seconds[profile] = cell.seconds(units, evals, overhead)
                cost.shared[profile] = overhead if cell.overhead_s is None else cell.overhead_s
                cost.source = cost.source or f"history ({cell.runs} run(s))"
            report.costs[spec.run_id()] = cost
        return report


# ------------------------------------------------------------------------------------------------ calibration cache


class CostModel:
    """What a family's runs cost in seconds and the memory they need at their peak (a family's ``cost_model``).

    Every method has a default: a run is one whole whose duration its cell's finished runs give, and nothing of
    it grows with its parameters. A family that knows more subclasses it; the instance is bound to its family
    (``self.family``, the family's ``costs``)."""

    #: A module that ``python -m`` runs to measure this family's cost keys (JSON request on stdin, one measurement
    #: per key on stdout; see :meth:`CostContext.calibrate`); "" when the family has no calibration.
    calibration_module: ClassVar[str] = ""

    def __init__(self, family: Any) -> None:
        self.family = family

    def cell(self, spec: Any) -> str:
        """What makes two runs cost the same per unit of work, as a string: runs of one cell share their history.
        The default: the canonical spec without its seed."""
        return json.dumps({k: v for k, v in spec.canonical().items() if k != "seed"}, sort_keys=True, default=str)

    def units(self, spec: Any) -> float | None:
        """Units of work of a run (its epochs, epochs x graphs...): finished runs of its cell give the seconds per
        unit. None (the default): a run is one whole; its cell's runs give its duration."""
        return None

    def steps(self, spec: Any) -> int | None:
        """Optimiser steps a run takes at the least, known from its spec alone (no input built): the floor of its
        duration that no measurement is needed for (``gaptui.estimate.STEP_FLOOR`` seconds a step), so a run of
        billions of epochs is refused before it starts. None (the default): no floor."""
        return None

    def evaluations(self, spec: Any) -> int:
        """Evaluation passes of a run timed apart from its units (``eval`` events with ``seconds``); default 0."""
        return 0

    def label(self, spec: Any) -> str:
        """How the estimate groups runs (default: the value of the table's row axis, e.g. the model)."""
        return str(self.family.row_of(spec))

    def estimate(self, specs: list[Any], ctx: CostContext) -> CostReport:
        """The seconds of ``specs`` (runs of this family left to do) on the slot profiles of ``ctx``. The default is
        the history of finished runs of the same cell (:meth:`CostContext.from_history`); a family with a
        calibrated model (alignment: measured throughput) overrides it."""
        return ctx.from_history(self.family, specs)

    def overhead_probe(self, placement: Any, count: int) -> list[Any]:
        """``count`` tiny runs (distinct seeds) whose duration through the real worker is a run's overhead (process
        start, imports, loading, result); none (the default) when the family's model needs no overhead."""
        return []

    def memory(self, spec: Any) -> Any:
        """What the run needs in memory at its peak (:class:`engine.memory.MemoryNeed`: the run or dataset, its
        kind, the bytes, what they are made of, what to lower), None when nothing grows with its parameters or
        its size is unknown until its input is built (checked again once it is). Runs with the same
        ``MemoryNeed.key`` are checked once."""
        return None


def machine(device: str = "cpu") -> dict[str, str]:
    """What makes a measurement this machine's: host, CPU model, the device's name, Python and torch versions."""
    import torch

    name = cpu_name()
    if device.startswith("cuda"):
        name = torch.cuda.get_device_name(torch.device(device))
    return {
        "host": platform.node(),
        "cpu": cpu_name(),
        "device": name,
        "python": platform.python_version(),
        "torch": torch.__version__,
    }


#: Seconds after which a cached measurement is taken again (the software and the machine around it change).
CALIBRATION_MAX_AGE = 7 * 86400.0
#: How much the share of a core a run gets may differ between a measurement and now (a factor) before it is taken
#: again: a throughput measured while other work kept every core busy estimated a grid at 6 h that took 43 min.
LOAD_TOLERANCE = 1.5


def load_per_core() -> float:
    """The machine's 1-minute load average over its cores: how busy it is with other work (0: idle, 1: every
    core busy, above 1: work waiting for a core)."""
    import os

    return os.getloadavg()[0] / max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class Conditions:
    """When a measurement was taken (Unix seconds) and under what load (:func:`load_per_core`, sampled before the
    measurement started, so that it counts the machine's other work and not the measurement's own)."""

    at: float
    load: float

    @classmethod
    def now(cls) -> Conditions:
        import time

        return cls(time.time(), round(load_per_core(), 2))

    def to_dict(self) -> dict[str, float]:
        return {"at": self.at, "load": self.load}

    @classmethod
    def from_dict(cls, raw: Any) -> Conditions | None:
        if not isinstance(raw, dict) or not all(isinstance(raw.get(k), (int, float)) for k in ("at", "load")):
            return None
        return cls(float(raw["at"]), float(raw["load"]))

    @property
    def crowding(self) -> float:
        """How many runnable processes share each core (at least 1): a run gets about one over this of a core."""
        return max(1.0, self.load)

    def stale(self, now: Conditions) -> str:
        """Why a measurement taken in these conditions should be taken again ``now`` ("" when it holds): older
        than :data:`CALIBRATION_MAX_AGE`, or taken while a run got a share of a core that differs from what it
        gets now by more than :data:`LOAD_TOLERANCE` times (a load per core under 1 leaves a core free: any such
        load is the same)."""
        age = now.at - self.at
        if age > CALIBRATION_MAX_AGE:
            return f"measured {age / 86400:.0f} days ago (measurements are kept {CALIBRATION_MAX_AGE / 86400:.0f} days)"
        ratio = self.crowding / now.crowding
        if max(ratio, 1 / ratio) > LOAD_TOLERANCE:
            return f"measured under a load of {self.load:.1f} per core, now {now.load:.1f}"
        return ""


class CalibrationCache:
    """Measurements by (machine, cost key) in one JSON file, written atomically under a lock.

    The file carries its own fingerprint (:func:`engine.cache.write_sealed_json`); a file that fails it (truncated,
    altered, garbled) is moved aside with one line, said through ``warn(line)``, and measured again.
    """

    def __init__(self, path: Path, warn: Callable[[str], None] | None = None) -> None:
        self.path = Path(path)
        self.warn = warn or (lambda line: print(line, file=sys.stderr))
        self._entries: dict[str, Any] | None = None

    def _lock(self) -> contextlib.AbstractContextManager[None]:
        return locked(self.path.with_name(f".{self.path.name}.lock"), "gaptui calibration")

    def _read(self) -> dict[str, Any]:
        raw = read_json(self.path)
        if isinstance(raw, dict) and raw.get("format") != CACHE_FORMAT and isinstance(raw.get("format"), int):
            return {}  # another gaptui's layout: measured again, and replaced on the next write
        what, then = "calibration cache", "measuring again"
        sealed = open_sealed_json(self.path, what, warn=self.warn, then=then)
        if sealed is None:
            return {}
        entries = sealed.get("entries")
        if not isinstance(entries, dict) or not all(isinstance(v, dict) for v in entries.values()):
            discard(self.path, what, "'entries' is not a table of measurements", self.warn, then)
            return {}
        return entries

    def entries(self) -> dict[str, Any]:
        if self._entries is None:
            with self._lock():
                self._entries = self._read()
        return self._entries

    def get(self, host: Mapping[str, Any], key: Mapping[str, Any]) -> dict[str, Any] | None:
        found = self.entry(host, key)
        return None if found is None else found[0]

    def entry(self, host: Mapping[str, Any], key: Mapping[str, Any]) -> tuple[dict[str, Any], Conditions | None] | None:
        """The measurement of ``key`` on ``host`` and the conditions it was taken in (None for an entry written
        before they were recorded); None when there is none."""
        entry = self.entries().get(content_digest({"machine": host, "key": key}))
        if not isinstance(entry, dict) or not isinstance(entry.get("value"), dict):
            return None
        return entry["value"], Conditions.from_dict(entry.get("conditions"))

    def put(
        self,
        host: Mapping[str, Any],
        key: Mapping[str, Any],
        value: Mapping[str, Any],
        conditions: Conditions | None = None,
    ) -> None:
        """Add one measurement taken in ``conditions`` (default: now), keeping what other processes wrote
        meanwhile."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        taken = (conditions or Conditions.now()).to_dict()
        with self._lock():
            entries = self._read()
            entry = {"machine": host, "key": key, "value": dict(value), "conditions": taken}
            entries[content_digest({"machine": host, "key": key})] = entry
            write_sealed_json(self.path, {"format": CACHE_FORMAT, "entries": entries}, indent=1, sort_keys=True)
            self._entries = entries
