"""How long a grid will take on these slots: what ``gaptui run --dry-run`` prints.

Each run left to do costs, on a slot of a given device and thread count (seconds):

    overhead + build + compile + epochs * (steps_per_epoch * step + checkpoint) + evaluations * val_pairs * per_pair

with ``steps_per_epoch = ceil(train_pairs / batch_size)``, ``evaluations`` the epochs that validate (``eval_every``,
and the last one), and ``compile`` the time ``torch.compile`` takes for runs that compile (the ``compile`` run
option; ``auto`` compiles long CPU runs), whose steps are then timed compiled. The seconds come, in order of
preference, from

1. **history**: finished runs of the same cell (same dataset, model, model options, inputs, budget, width and
   batch size; any seed and epoch count) on this host and device: their median epoch seconds, validation seconds
   and the rest of their duration (start-up, dataset loading, checkpoints) from their events;
2. **calibration**: :mod:`engine.alignment.throughput` measurements of the run's cost key, taken in one process per
slot of
   the grid side by side, each in its slot's environment (so concurrent runs slow each other as they will), and
   the per-run ``overhead`` timed on tiny runs through the real scheduler and worker, one per slot at once. Both
   are cached in ``<workspace>/calibration.json`` (measured when missing, or again with ``--recalibrate``).

The wall time schedules the runs in start order on the slots (each run on the slot where it would end first,
after the runs it depends on): the same greedy order the scheduler follows. Runs whose graph size is unknown
before their dataset exists (real datasets not built yet) and runs of other task families are listed as not
estimated, never given a made-up number; building datasets is not counted.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from engine.alignment.throughput import DEFAULT_SECONDS, CalibrationCache, CostKey, Throughput
from gaptui.scheduler import Slot, group_packs, pack_key
from gaptui.tui.planning import format_duration
from gaptui.workspace import Workspace

#: Fields of an alignment spec's canonical form that change the seconds per epoch (the seed, epochs and the
#: schedule do not): two runs that agree on these are one cell for the history source.
COST_FIELDS = (
    "dataset",
    "model",
    "model_kwargs",
    "features",
    "input_layer",
    "norm",
    "budget",
    "out_dim",
    "batch_size",
    "compile",
)
#: Seconds of a run's duration besides its epochs and evaluations below which it was a run of a pack (whose
#: duration is rounded to 0.01 s from just those).
PACKED_REST = 0.05
#: Calibration file in the workspace.
CALIBRATION_FILE = "calibration.json"


def calibration_path(ws: Workspace) -> Path:
    return ws.root / CALIBRATION_FILE


# ------------------------------------------------------------------------------------------------ arithmetic


@dataclass(frozen=True)
class Profile:
    """What a slot offers a run: the device type (``cpu``/``cuda``), its concrete device and its thread count."""

    kind: str
    device: str
    threads: int

    @classmethod
    def of(cls, slot: Slot) -> Profile:
        import os

        threads = int(slot.env.get("OMP_NUM_THREADS") or 1)
        gpu = slot.env.get("CUDA_VISIBLE_DEVICES", "").split(",")[0]
        if not (slot.name.startswith("cuda") and gpu):
            return cls("cpu", "cpu", threads)
        # The slot names a GPU as the system numbers it; this process may see only some of them, renumbered.
        visible = [g.strip() for g in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if g.strip()]
        return cls("cuda", f"cuda:{visible.index(gpu) if gpu in visible else gpu}", threads)


def evaluations(epochs: int, eval_every: int, val_pairs: int) -> int:
    """How many epochs end with a validation pass (every ``eval_every`` and the last; none without pairs)."""
    if val_pairs <= 0 or epochs <= 0:
        return 0
    return epochs // eval_every + (0 if epochs % eval_every == 0 else 1)


def training_seconds(
    t: Throughput, *, epochs: int, train_pairs: int, batch_size: int, val_pairs: int, eval_every: int, startup: float
) -> float:
    """Seconds of one training run from calibrated throughput (formula in the module docstring)."""
    steps = math.ceil(train_pairs / batch_size)
    evals = evaluations(epochs, eval_every, val_pairs)
    return startup + epochs * (steps * t.step_s + t.checkpoint_s) + evals * val_pairs * t.val_pair_s


@dataclass(frozen=True)
class CellHistory:
    """Medians over finished runs of one cell: train seconds per epoch, seconds per evaluation, and the rest of a
    run's duration (None when only runs of packs are known: their duration is their own epochs and evaluations)."""

    epoch_s: float
    eval_s: float
    overhead_s: float | None
    runs: int

    def seconds(self, epochs: int, evals: int, overhead: float = 0.0) -> float:
        """A run's seconds; ``overhead`` stands in for an unknown rest."""
        rest = overhead if self.overhead_s is None else self.overhead_s
        return rest + epochs * self.epoch_s + evals * self.eval_s


@dataclass(frozen=True)
class Schedule:
    """Where the simulated runs went: the wall time, the compute summed over slots, the seconds of each run and the
    slot profile it went to."""

    wall: float
    compute: float
    seconds: dict[str, float]
    where: dict[str, Profile] = field(default_factory=dict)


def schedule(runs: Sequence[tuple[str, Sequence[str], Mapping[Profile, float]]], slots: Sequence[Profile]) -> Schedule:
    """Simulate ``runs`` (hash, dependency hashes, seconds per slot profile), in start order, on ``slots``: each run
    goes where it would end first, no earlier than the end of its dependencies in ``runs``."""
    free = [0.0] * len(slots)
    end: dict[str, float] = {}
    took: dict[str, float] = {}
    where: dict[str, Profile] = {}
    for run_hash, deps, cost in runs:
        ready = max((end[d] for d in deps if d in end), default=0.0)
        best = min(range(len(slots)), key=lambda i: max(free[i], ready) + cost[slots[i]])
        took[run_hash], where[run_hash] = cost[slots[best]], slots[best]
        free[best] = end[run_hash] = max(free[best], ready) + took[run_hash]
    return Schedule(max(free, default=0.0), sum(took.values()), took, where)


# ------------------------------------------------------------------------------------------------ estimate


@dataclass
class RunEstimate:
    """One run's seconds per slot profile, of which ``shared`` (per profile) is paid once per worker process
    (start-up, dataset loading: what the runs of a pack share), and where the numbers came from."""

    spec: Any
    label: str
    seconds: dict[Profile, float]
    source: str
    shared: dict[Profile, float] = field(default_factory=dict)


@dataclass
class GridEstimate:
    """The estimate of a plan's runs left to do on ``slots``; ``missing`` lists runs without one and why."""

    slots: list[Profile]
    done: int
    runs: list[RunEstimate] = field(default_factory=list)
    missing: list[tuple[Any, str]] = field(default_factory=list)
    plan: Schedule = field(default_factory=lambda: Schedule(0.0, 0.0, {}))
    unavailable: str = ""
    datasets_to_build: int = 0
    pack_seeds: int = 1
    #: Seconds of each run (hash) where the schedule placed it, its pack's shared part split between its runs.
    placed: dict[str, float] = field(default_factory=dict)

    def lines(self) -> list[str]:
        if self.unavailable:
            return [f"estimate: {self.unavailable}"]
        left = len(self.runs) + len(self.missing)
        if not left:
            return ["estimate: nothing left to run"]
        kinds = sorted({(p.kind, p.threads) for p in self.slots})
        where = ", ".join(
            f"{sum(1 for p in self.slots if (p.kind, p.threads) == k)} {k[0]} slot(s) x {k[1]} thread(s)" for k in kinds
        )
        head = f"estimate: {len(self.runs)} run(s)"
        if self.missing:
            head += f" ({len(self.missing)} more not estimated)"
        if self.done:
            head += f" (resuming: {left} of {left + self.done} left)"
        if self.pack_seeds > 1:
            where += f", up to {self.pack_seeds} seeds per worker"
        head += (
            f": wall about {format_duration(self.plan.wall)} on {where}; compute {format_duration(self.plan.compute)}"
        )
        out = [head]
        by_label: dict[str, list[RunEstimate]] = {}
        for run in self.runs:
            by_label.setdefault(run.label, []).append(run)
        width = max((len(label) for label in by_label), default=5)
        for label, runs in by_label.items():
            per_run = [self.placed[r.spec.hash()] for r in runs]
            sources = sorted({r.source for r in runs})
            out.append(
                f"  {label:<{width}}  {len(runs):>4} run(s)  {format_duration(statistics.fmean(per_run)):>9} per run  "
                f"{format_duration(sum(per_run)):>9} in all  from {', '.join(sources)}"
            )
        if self.missing:
            reasons: dict[str, int] = {}
            for _spec, why in self.missing:
                reasons[why] = reasons.get(why, 0) + 1
            for why, count in reasons.items():
                out.append(f"  not estimated: {count} run(s): {why}")
        if self.datasets_to_build:
            out.append(f"  not counted: building {self.datasets_to_build} dataset(s) not yet in the cache")
        return out


#: ``measure(keys, slots) -> [Throughput per key]``: the keys measured at once on every slot of one profile.
Measure = Callable[[list[CostKey], list[Slot]], list[Throughput]]
#: ``overhead(slots) -> seconds``: what a run costs besides its training, with every slot busy.
Overhead = Callable[[list[Slot]], float]


def measure_on_slots(keys: list[CostKey], slots: list[Slot], seconds: float = DEFAULT_SECONDS) -> list[Throughput]:
    """Measure ``keys`` in one ``python -m engine.alignment.throughput`` process per slot, all at once, each in its
    slot's
    environment (threads, GPU), so that the runs of concurrent slots slow each other as they will; returns the
    mean over the processes per key."""
    import os
    import subprocess
    import sys

    from engine.errors import GaptuiError

    request = json.dumps({"keys": [k.to_dict() for k in keys], "seconds": seconds})
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "engine.alignment.throughput"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **slot.env},
        )
        for slot in slots
    ]
    for proc in procs:  # every process gets its request before any is waited for: they measure side by side
        assert proc.stdin is not None
        proc.stdin.write(request)
        proc.stdin.close()
    results: list[list[dict[str, Any]]] = []
    for proc in procs:
        assert proc.stdout is not None and proc.stderr is not None
        out, err = proc.stdout.read(), proc.stderr.read()
        if proc.wait() != 0:
            last = (err.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
            raise GaptuiError(f"calibration failed: {last}")
        results.append(json.loads(out))
    return [
        Throughput(
            **{
                name: statistics.fmean(r[i][name] for r in results)
                for name in ("step_s", "val_pair_s", "checkpoint_s", "build_s", "compile_s")
            },
            params=int(results[0][i]["params"]),
            steps=sum(int(r[i]["steps"]) for r in results),
            measured=results[0][i]["measured"],
        )
        for i in range(len(keys))
    ]


def measure_overhead(slots: list[Slot]) -> float:
    """Seconds a run costs besides its training: one tiny run per slot (at most 16) through the real scheduler and
    worker, all at once, in a temporary workspace: process start, imports, dataset loading, model, result, history."""
    import tempfile

    from engine.alignment.spec import RunSpec
    from engine.errors import GaptuiError
    from gaptui.history import History
    from gaptui.launch import prepare
    from gaptui.scheduler import Scheduler

    slots = [Slot(s.name, dict(s.env)) for s in slots[:16]]
    with tempfile.TemporaryDirectory(prefix="gaptui-overhead-") as tmp:
        ws = Workspace(Path(tmp))
        dataset = {"base": "er", "noise": 0.0, "n_train": 2, "n_val": 1, "params": {"n": 8, "degree": 2}}
        specs = [
            RunSpec.from_dict(
                {
                    "dataset": dataset,
                    "model": "gcn",
                    "epochs": 1,
                    "batch_size": 2,
                    "budget": 5000,
                    "out_dim": 16,
                    "seed": seed,
                    "datasets_dir": str(ws.datasets),
                    "data_root": str(ws.raw_data),
                }
            )
            for seed in range(len(slots))
        ]
        prepare(specs[:1])  # a grid's datasets are prepared before its runs start
        with History(ws, write=True, purpose="gaptui calibration") as history:
            scheduler = Scheduler(ws, history, slots)
            started = time.perf_counter()
            scheduler.enqueue(specs)
            scheduler.run()
            wall = time.perf_counter() - started
            failed = [r for r in history.records() if r["status"] != "done"]
        if failed:
            raise GaptuiError(f"calibration failed: a tiny run ended {failed[0]['status']}: {failed[0].get('error')}")
    return wall


class Estimator:
    """Estimates plans from history and calibration; measurements go through ``measure`` and ``overhead``
    (replaceable in tests) and are cached in ``cache``. ``progress(text)`` is told before each measurement."""

    def __init__(
        self,
        cache: CalibrationCache,
        records: Iterable[Mapping[str, Any]] = (),
        *,
        recalibrate: bool = False,
        measure: Measure = measure_on_slots,
        overhead: Overhead = measure_overhead,
        progress: Callable[[str], None] = lambda _text: None,
    ) -> None:
        self.cache = cache
        self.records = list(records)
        self.recalibrate = recalibrate
        self.measure = measure
        self.overhead = overhead
        self.progress = progress
        self._history: dict[tuple[str, str], CellHistory] | None = None
        self._machines: dict[str, dict[str, str]] = {}

    def machine(self, profile: Profile) -> dict[str, str]:
        if profile.device not in self._machines:
            from engine.alignment.throughput import machine

            self._machines[profile.device] = machine(profile.device)
        return self._machines[profile.device]

    def cell_history(self, spec: Any, profile: Profile) -> CellHistory | None:
        if self._history is None:
            self._history = _history_cells(self.records)
        return self._history.get((cell_key(spec), self.machine(profile)["device"]))

    def _cached(self, host: Mapping[str, Any], key: Mapping[str, Any]) -> dict[str, Any] | None:
        return None if self.recalibrate else self.cache.get(host, key)

    def overhead_seconds(self, slots: Sequence[Slot]) -> float:
        profiles = [Profile.of(s) for s in slots]
        host = self.machine(profiles[0])
        key = {"overhead": sorted({json.dumps(p.__dict__, sort_keys=True) for p in profiles}), "slots": len(slots)}
        cached = self._cached(host, key)
        if cached is None or "seconds" not in cached:
            self.progress(f"timing a tiny run on each of {len(slots)} slot(s)")
            cached = {"seconds": self.overhead(list(slots))}
            self.cache.put(host, key, cached)
        return float(cached["seconds"])

    def throughputs(
        self, wanted: Mapping[Profile, dict[str, CostKey]], slots: Sequence[Slot]
    ) -> dict[tuple[Profile, str], tuple[Throughput, bool]]:
        """Each wanted key's calibration on its profile, measured (on all slots of the profile at once) when not
        cached; True when measured now."""
        out: dict[tuple[Profile, str], tuple[Throughput, bool]] = {}
        for profile, keys in wanted.items():
            host = self.machine(profile)
            missing: list[tuple[str, CostKey]] = []
            for ident, key in keys.items():
                cached = self._cached(host, key.to_dict())
                try:
                    out[(profile, ident)] = (Throughput.from_dict(cached or {}), False)
                except KeyError:  # not cached, or an entry of another layout
                    missing.append((ident, key))
            if not missing:
                continue
            here = [s for s in slots if Profile.of(s) == profile]
            names = ", ".join(sorted({k.model for _, k in missing}))
            self.progress(f"calibrating {names} on {len(here)} {profile.kind} slot(s) at once")
            for (ident, key), value in zip(missing, self.measure([k for _, k in missing], here), strict=True):
                self.cache.put(host, key.to_dict(), asdict(value))
                out[(profile, ident)] = (value, True)
        return out

    def estimate(self, plan: Any, slots: Sequence[Slot], ws: Workspace, pack_seeds: int = 1) -> GridEstimate:
        """The estimate of ``plan``'s runs left to do on ``slots``, seeds packed by ``pack_seeds`` per worker."""
        from engine.alignment.spec import RunSpec

        profiles = [Profile.of(s) for s in slots]
        result = GridEstimate(slots=profiles, done=len(plan.done), pack_seeds=pack_seeds)
        other = sorted({s.task for s in plan.to_run if not isinstance(s, RunSpec)})
        if other:
            result.unavailable = (
                f"not available for task {', '.join(other)} (measured throughput covers alignment runs only)"
            )
            return result
        from engine.alignment.preset import BASELINE, model_label

        result.datasets_to_build = _datasets_to_build(plan.to_run, ws)
        # Pass 1: what each run on each slot profile needs (history, or a calibration key).
        needs: list[tuple[Any, dict[Profile, CellHistory | tuple[Profile, str]]]] = []
        wanted: dict[Profile, dict[str, CostKey]] = {}
        for spec in plan.to_run:
            size = graph_size(spec, ws)
            if size is None:
                why = f"{spec.dataset['base']}: graph size unknown until its dataset is built (`gaptui datasets build`)"
                result.missing.append((spec, why))
                continue
            per: dict[Profile, CellHistory | tuple[Profile, str]] = {}
            for profile in dict.fromkeys(profiles):
                own = run_profile(spec, profile)
                cell = self.cell_history(spec, own)
                if cell is not None:
                    per[profile] = cell
                else:
                    key = cost_key(spec, size, own)
                    ident = json.dumps(key.to_dict(), sort_keys=True)
                    wanted.setdefault(profile, {})[ident] = key
                    per[profile] = (profile, ident)
            needs.append((spec, per))
        measured = self.throughputs(wanted, slots)
        unknown_rest = any(
            isinstance(n, CellHistory) and n.overhead_s is None for _, per in needs for n in per.values()
        )
        overhead = self.overhead_seconds(slots) if wanted or unknown_rest else 0.0
        # Pass 2: seconds per run and profile.
        for spec, per in needs:
            run = RunEstimate(spec, BASELINE if spec.model == BASELINE else model_label(spec), {}, "")
            sources: list[str] = []
            for profile, need in per.items():
                if isinstance(need, CellHistory):
                    laplacian = spec.model == BASELINE
                    val = int(spec.dataset_spec().canonical()["n_val"] or 0)
                    evals = 1 if laplacian else evaluations(spec.epochs, spec.eval_every, val)
                    run.seconds[profile] = need.seconds(0 if laplacian else spec.epochs, evals, overhead)
                    run.shared[profile] = overhead if need.overhead_s is None else need.overhead_s
                    sources.append(f"history ({need.runs} run(s))")
                else:
                    t, now = measured[need]
                    run.seconds[profile] = calibrated_seconds(spec, t, overhead)
                    run.shared[profile] = overhead
                    sources.append("calibration (measured now)" if now else "calibration (cached)")
            run.source = sources[0]
            result.runs.append(run)
        # Pass 3: packs of seeds (one process each: their shared part paid once), then the schedule.
        groups = group_packs([pack_key(r.spec) for r in result.runs], max(1, pack_seeds))
        timed: list[tuple[str, Sequence[str], Mapping[Profile, float]]] = []
        for group in groups:
            members = [result.runs[i] for i in group]
            hashes = {r.spec.hash() for r in members}
            deps = [d for r in members for d in plan.dependencies(r.spec) if d not in hashes]
            cost = {p: _pack_seconds(members, p) for p in dict.fromkeys(profiles)}
            timed.append((members[0].spec.hash(), deps, cost))
        result.plan = schedule(timed, profiles)
        for group in groups:
            members = [result.runs[i] for i in group]
            profile = result.plan.where[members[0].spec.hash()]
            shared = max(r.shared[profile] for r in members)
            for r in members:
                result.placed[r.spec.hash()] = r.seconds[profile] - r.shared[profile] + shared / len(members)
        return result


class NotCached(Exception):
    """A measurement that :func:`estimate_from_cache` does not make."""


def _not_cached(*_args: Any) -> Any:
    raise NotCached


def estimate_from_cache(
    plan: Any, slots: Sequence[Slot], ws: Workspace, records: Iterable[Mapping[str, Any]], pack_seeds: int = 1
) -> GridEstimate | None:
    """The estimate of ``plan`` from history and cached calibrations only, measuring nothing (the terminal app's
    form asks on every edit); None when a run left to do would need a measurement (``gaptui run --dry-run``
    makes them) or has no estimate at all."""
    from engine.errors import GaptuiError

    cache = CalibrationCache(calibration_path(ws), lambda _line: None)
    estimator = Estimator(cache, records, measure=_not_cached, overhead=_not_cached)
    try:
        result = estimator.estimate(plan, slots, ws, pack_seeds)
    except (NotCached, GaptuiError):
        return None
    return None if result.unavailable or result.missing else result


def _pack_seconds(members: Sequence[RunEstimate], profile: Profile) -> float:
    """Seconds of one worker process training ``members`` in turn: their own parts, and the shared part once."""
    return sum(r.seconds[profile] - r.shared[profile] for r in members) + max(r.shared[profile] for r in members)


def run_profile(spec: Any, profile: Profile) -> Profile:
    """Where a run computes on a slot: its own ``device = "cpu"`` and the training-free baseline stay on the CPU."""
    if spec.model == "laplacian" or spec.device == "cpu":
        return Profile("cpu", "cpu", profile.threads)
    return profile


def calibrated_seconds(spec: Any, t: Throughput, overhead: float) -> float:
    """Seconds of one alignment run from its calibration and the per-run overhead."""
    canonical = spec.dataset_spec().canonical()
    train, val = int(canonical["n_train"] or 0), int(canonical["n_val"] or 0)
    if spec.model == "laplacian":
        return overhead + val * t.val_pair_s
    return training_seconds(
        t,
        epochs=spec.epochs,
        train_pairs=train,
        batch_size=spec.batch_size,
        val_pairs=val,
        eval_every=spec.eval_every,
        startup=overhead + t.build_s + t.compile_s,
    )


# ------------------------------------------------------------------------------------------------ helpers


def out_dim(spec: Any) -> int:
    from engine.sources import SOURCES

    return spec.out_dim or SOURCES.get(spec.dataset["base"]).embedding_dim


def cost_key(spec: Any, size: tuple[int, float], profile: Profile) -> CostKey:
    """The calibration key of an alignment run on a slot of ``profile``."""
    nodes, degree = size
    if spec.model == "laplacian":
        return CostKey("laplacian", nodes, degree, spec.batch_size, "cpu", profile.threads, out_dim=out_dim(spec))
    return CostKey(
        model=spec.model,
        nodes=nodes,
        degree=degree,
        batch_size=spec.batch_size,
        device=profile.kind,
        threads=profile.threads,
        features=spec.features,
        budget=spec.budget,
        out_dim=out_dim(spec),
        model_options=spec.model_options(),
        compile=compiles(spec, profile),
    )


def compiles(spec: Any, profile: Profile) -> bool:
    """Whether the worker trains this run through ``torch.compile`` on a slot of ``profile`` (as the alignment
    worker decides: ``wants_compile``, and ``auto`` never compiles an import-path model)."""
    import torch

    from engine.alignment.training import wants_compile

    steps = spec.epochs * math.ceil(int(spec.dataset_spec().canonical()["n_train"] or 0) / spec.batch_size)
    return wants_compile(spec.compile, torch.device(profile.kind), steps, spec.model, profile.threads)


def graph_size(spec: Any, ws: Workspace) -> tuple[int, float] | None:
    """``(nodes per graph, mean degree)`` of a run's base graphs: from the source's parameters (synthetic), else
    from the cached dataset's statistics; None when neither tells (a real dataset not built yet)."""
    from engine.alignment.datasets import dataset_id, open_dataset
    from engine.errors import GaptuiError
    from engine.sources import SOURCES, parse_params

    canonical = spec.dataset_spec().canonical()
    source = SOURCES.get(canonical["base"])
    hint = source.size_hint(parse_params(source, canonical["params"]))
    if hint is not None:
        return int(round(hint[0])), round(float(hint[1]), 1)
    folder = Path(spec.datasets_dir or ws.datasets) / dataset_id(canonical)
    try:
        stats = open_dataset(folder).stats["train"]
        return int(round(stats["mean_order"])), round(float(stats["mean_degree"]), 1)
    except (GaptuiError, KeyError, TypeError):
        return None


def _datasets_to_build(specs: Iterable[Any], ws: Workspace) -> int:
    from engine.alignment.datasets import dataset_id

    missing = set()
    for spec in specs:
        ident = dataset_id(spec.dataset_spec().canonical())
        if not (Path(spec.datasets_dir or ws.datasets) / ident / "meta.json").exists():
            missing.add(ident)
    return len(missing)


def cell_key(spec: Any) -> str:
    """What makes two alignment runs cost the same per epoch (:data:`COST_FIELDS`), as a string."""
    canonical = spec.canonical()
    return json.dumps({k: canonical.get(k) for k in COST_FIELDS}, sort_keys=True)


def _history_cells(records: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], CellHistory]:
    """Finished alignment runs of this host, by (cell, device name): medians of their measured seconds."""
    import platform

    from engine.alignment.spec import RunSpec
    from engine.errors import GaptuiError
    from engine.events import read_events
    from engine.tasks import load_spec

    host = platform.node()
    samples: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    for record in records:
        repro = record.get("repro") or {}
        if record.get("status") != "done" or repro.get("host") != host or not record.get("duration"):
            continue
        try:
            spec = load_spec(record["spec"])
        except (GaptuiError, KeyError, TypeError):
            continue
        if not isinstance(spec, RunSpec):
            continue
        events, _ = read_events(Path(record["run_dir"]) / "events.jsonl")
        epochs = [float(e["seconds"]) for e in events if e.get("event") == "epoch" and "seconds" in e]
        evals = [float(e["seconds"]) for e in events if e.get("event") == "eval" and "seconds" in e]
        if spec.model != "laplacian" and len(epochs) < spec.epochs:
            continue  # resumed or partial events: the sum below would not be the run's
        overhead = max(0.0, float(record["duration"]) - sum(epochs) - sum(evals))
        epoch_s = statistics.median(epochs) if epochs else 0.0
        eval_s = statistics.median(evals) if evals else 0.0
        if repro.get("device_name"):
            samples.setdefault((cell_key(spec), repro["device_name"]), []).append((epoch_s, eval_s, overhead))
    out = {}
    for key, values in samples.items():
        # A run of a pack records its own epochs and evaluations as its duration: no rest to learn from it.
        rests = [s[2] for s in values if s[2] > PACKED_REST]
        out[key] = CellHistory(
            epoch_s=statistics.median(s[0] for s in values),
            eval_s=statistics.median(s[1] for s in values),
            overhead_s=statistics.median(rests) if rests else None,
            runs=len(values),
        )
    return out
