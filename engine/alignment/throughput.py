"""Measured training throughput on this machine: what ``gaptui run --dry-run`` turns into a grid's duration.

A *cost key* (:class:`CostKey`) holds everything that changes the seconds of one alignment run's step besides the
number of steps: the model with its options and budget, the inputs, the graph size (nodes, mean degree), the
batch size, the device and the torch thread count. :func:`measure` times the real code path on synthetic
Erdos-Renyi pairs of that size (no dataset is built): ``engine.alignment.training.train_epoch`` on one batch (gather,
:func:`~engine.alignment.training.similarity`, :func:`~engine.alignment.training.alignment_loss`, backward,
clipping, AdamW and the one-cycle step), :func:`~engine.alignment.training.evaluate` with the LAP evaluator
for the validation pairs, and one checkpoint save (the worker writes one per epoch). One warm-up step comes first;
then steps are timed for about
``seconds`` and their median kept. The Laplacian baseline is timed through
:func:`~engine.laplacian.laplacian_scores`, a solver through :func:`~engine.alignment.solvers.score_split` on pairs
at the run's noise level (a search's iterations grow with it); search on top of a model is costed as its FAQ.
``python -m engine.alignment.throughput`` measures a list of keys in a fresh
process, which is how the dry run measures one process per slot side by side
(:func:`gaptui.calibration.measure_on_slots`).

:class:`CalibrationCache` keeps the measurements in one JSON file (``<workspace>/calibration.json``), keyed by the
machine (:func:`machine`: host, CPU model, device name, torch version) and the cost key, so a second dry run does
not measure again. The file carries its own fingerprint (:func:`engine.cache.write_sealed_json`); a file that fails
it (truncated, altered, garbled, or written before fingerprints were recorded) is moved aside with one line and
measured again.
"""

from __future__ import annotations

import contextlib
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from engine.alignment.solvers import is_solver
from engine.tasks.cost import CalibrationCache as CalibrationCache  # where the calibration cache was first
from engine.tasks.cost import CellHistory, CostContext, CostReport, Profile, RunCost
from engine.typed import json_fields

#: Seconds of timed training steps per key (after the warm-up): enough steps for a median on a loaded machine.
DEFAULT_SECONDS = 1.5
#: Untimed steps first (the first step pays one-off costs: allocations, lazy initialisation, autograd graph).
WARMUP_STEPS = 1


@dataclass(frozen=True)
class CostKey:
    """What the seconds of one training step and of one validation pair depend on.

    ``nodes`` and ``degree`` describe the base graphs (nodes per graph, mean degree); ``model_options`` are the
    keywords of :func:`engine.models.build` (``RunSpec.model_options()``); ``device`` is the device type (``cpu``
    or ``cuda``: which GPU is the machine's part of the cache key); ``threads`` is the torch intra-op thread count
    a worker on that slot uses. ``model = "laplacian"`` keys the training-free baseline (``out_dim`` eigenvectors;
    model fields unused); a solver's name keys that solver (``model_options``: its options; ``noise``: the noise
    level of the pairs it is timed on, left out of the key's dict when 0 so that the other keys stay as they were).
    """

    model: str
    nodes: int
    degree: float
    batch_size: int
    device: str = "cpu"
    threads: int = 1
    features: str = "degree"
    budget: int = 60_000
    out_dim: int = 64
    model_options: dict[str, Any] = field(default_factory=dict)
    #: Whether the run trains through ``torch.compile`` (``engine.alignment.training.wants_compile``).
    compile: bool = False
    noise: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        out = json.loads(json.dumps(json_fields(self), sort_keys=True, default=str))
        if not self.noise:
            out.pop("noise")
        return out

    def describe(self) -> str:
        graph = f"{self.nodes} nodes, degree {self.degree:g}"
        where = f"{self.device}, {self.threads} thread{'s' if self.threads != 1 else ''}"
        if self.model == "laplacian":
            return f"laplacian k={self.out_dim} ({graph}; {where})"
        if is_solver(self.model):
            options = ",".join(f"{k}={v}" for k, v in sorted(self.model_options.items()))
            return f"{self.model}{f'[{options}]' if options else ''} ({graph}, noise {self.noise:g}; {where})"
        options = ",".join(f"{k}={v}" for k, v in sorted(self.model_options.items()))
        label = f"{self.model}[{options}]" if options else self.model
        return f"{label} ({graph}, batch {self.batch_size}; {where})"


@dataclass(frozen=True)
class Throughput:
    """Measured seconds: per training step (one batch), per validation pair, per checkpoint save, and once per run
    building the model (the width search for its budget) and compiling it (when the key compiles)."""

    step_s: float
    val_pair_s: float
    checkpoint_s: float = 0.0
    build_s: float = 0.0
    compile_s: float = 0.0
    params: int = 0
    steps: int = 0
    measured: str = ""

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Throughput:
        return cls(**{f.name: raw[f.name] for f in fields(cls)})


@contextlib.contextmanager
def torch_threads(count: int) -> Iterator[None]:
    """Run the body with ``count`` torch intra-op threads (what a worker on a slot of that share uses)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(max(1, count))
    try:
        yield
    finally:
        torch.set_num_threads(before)


def synthetic_pairs(nodes: int, degree: float, count: int, seed: int = 0, noise: float = 0.0) -> Any:
    """``count`` Erdos-Renyi pairs of ``nodes`` nodes and mean degree ``degree`` (H a relabelled copy of G, noised
    by ``noise``): the shapes a training batch of such graphs has, built in milliseconds."""
    import numpy as np

    from engine.alignment.noise import correlate
    from engine.sources.synthetic import bernoulli_graphs

    nodes = max(2, int(nodes))
    p = min(1.0, max(float(degree), 1.0) / (nodes - 1))
    rng = np.random.default_rng(seed)
    graphs = bernoulli_graphs(nodes, p, count, rng)
    split, _ = correlate(graphs, "add_remove", noise, rng)
    return split


def _sync(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(key: CostKey, device: str | None = None, seconds: float = DEFAULT_SECONDS) -> Throughput:
    """Time ``key`` on ``device`` (default ``key.device``; ``cuda:1`` picks a GPU of the key's kind); takes about
    ``1.3 * seconds`` plus a warm-up step (a step slower than ``seconds`` is timed once)."""
    with torch_threads(key.threads):
        if key.model == "laplacian":
            return _measure_laplacian(key, seconds)
        if is_solver(key.model):
            return _measure_solver(key, seconds)
        return _measure_training(key, device or key.device, seconds)


def _measure_training(key: CostKey, device_name: str, seconds: float) -> Throughput:
    from engine import models
    from engine.alignment.features import feature_dim
    from engine.alignment.training import PairTensors, compile_model, train_epoch
    from engine.hardware import resolve_device
    from engine.loop import CHECK_EVERY, TrainState, make_optimiser, seed_everything

    device = resolve_device(device_name)
    seed_everything(0)
    t0 = time.perf_counter()
    model = models.build(
        key.model, out_dim=key.out_dim, budget=key.budget, in_dim=feature_dim(key.features), **key.model_options
    ).to(device)
    build_s = time.perf_counter() - t0
    data = PairTensors(synthetic_pairs(key.nodes, key.degree, key.batch_size), device, key.features)
    opt, sched = make_optimiser(model, 3e-3, 0.01, total_steps=1 << 20, warmup_steps=30)
    state = TrainState()
    trained, compile_s = model, 0.0
    if key.compile:
        t0 = time.perf_counter()
        trained = compile_model(model, key.features, lambda _line: None)
        compile_s = time.perf_counter() - t0

    def epoch() -> None:
        # Exactly the worker's steps (gather, forward, loss, backward, clip, AdamW, one-cycle) over every batch.
        train_epoch(
            trained,
            data,
            opt,
            sched,
            state,
            batch_size=key.batch_size,
            seed=0,
            clip=0.1,
            clip_mode="value",
            features=key.features,
        )
        state.epoch, state.batch_in_epoch = state.epoch + 1, 0

    t0 = time.perf_counter()
    for _ in range(WARMUP_STEPS):
        epoch()
    _sync(device)
    warm = (time.perf_counter() - t0) / WARMUP_STEPS
    # Epochs of several batches, as in a run: an epoch's own work (its shuffle, reading the losses back every
    # CHECK_EVERY steps) is spread over its steps, which on a loaded 2-core CPU made one-batch epochs ~20 % slower
    # per step. As many batches as fit in a third of the budget, at most CHECK_EVERY (always that many on a GPU).
    per_call = CHECK_EVERY if device.type == "cuda" else max(1, min(CHECK_EVERY, int(seconds / 3 / warm)))
    if per_call > 1:
        data = PairTensors(synthetic_pairs(key.nodes, key.degree, key.batch_size * per_call), device, key.features)
        epoch()  # the new shapes' warm-up
        _sync(device)
    # The median epoch: on a shared machine a burst of someone else's work lands in a few epochs, not in the runs.
    times: list[float] = []
    t0 = time.perf_counter()
    while not times or time.perf_counter() - t0 < seconds:
        t1 = time.perf_counter()
        epoch()
        _sync(device)
        times.append(time.perf_counter() - t1)
    step_s, timed = statistics.median(times) / per_call, len(times) * per_call

    payload = {"model": model.state_dict(), "optimizer": opt.state_dict(), "state": asdict(state)}
    return Throughput(
        step_s=step_s,
        val_pair_s=_measure_evaluation(key, model, data, seconds / 3),
        checkpoint_s=_measure_checkpoint(payload),
        build_s=build_s,
        compile_s=compile_s,
        params=models.count_parameters(model),
        steps=timed,
        measured=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    )


def _measure_evaluation(key: CostKey, model: Any, data: Any, seconds: float) -> float:
    """Seconds per validation pair of ``model`` over ``data`` (the median of rounds over ``seconds``)."""
    from engine.alignment.training import evaluate
    from engine.evaluation import LapEvaluator

    with LapEvaluator() as evaluator:
        evaluate(model, data, key.batch_size, evaluator, key.features)
        rounds: list[float] = []
        t0 = time.perf_counter()
        while not rounds or time.perf_counter() - t0 < seconds:
            t1 = time.perf_counter()
            evaluate(model, data, key.batch_size, evaluator, key.features)
            rounds.append(time.perf_counter() - t1)
    return statistics.median(rounds) / len(data)


def _measure_checkpoint(payload: dict[str, Any]) -> float:
    """Seconds to save ``payload`` as a run's checkpoint once one exists (the save that rotates the previous)."""
    from engine.checkpoints import Checkpoints

    with tempfile.TemporaryDirectory(prefix="gaptui-calibration-") as tmp:
        checkpoints = Checkpoints(Path(tmp), lambda _text: None)
        checkpoints.save(payload)  # the second save also rotates the previous one, as every later epoch does
        t0 = time.perf_counter()
        checkpoints.save(payload)
        return time.perf_counter() - t0


def _measure_laplacian(key: CostKey, seconds: float) -> Throughput:
    from engine.laplacian import laplacian_scores

    pairs = synthetic_pairs(key.nodes, key.degree, max(8, min(key.batch_size, 100)))
    k = min(key.out_dim, max(1, key.nodes - 1))
    laplacian_scores(pairs, k=k)
    rounds, t0 = 0, time.perf_counter()
    while rounds < 1 or time.perf_counter() - t0 < seconds / 2:
        laplacian_scores(pairs, k=k)
        rounds += 1
    per_pair = (time.perf_counter() - t0) / (rounds * len(pairs))
    return Throughput(step_s=0.0, val_pair_s=per_pair, measured=time.strftime("%Y-%m-%dT%H:%M:%S%z"))


def _measure_solver(key: CostKey, seconds: float) -> Throughput:
    """Wall seconds per pair of a solver scoring pairs as a worker does (a pool of the usable CPUs)."""
    from engine.alignment.solvers import score_split, solver_options

    options = solver_options(key.model, key.model_options)
    pairs = synthetic_pairs(key.nodes, key.degree, 8, noise=key.noise)
    rounds, t0 = 0, time.perf_counter()
    while rounds < 1 or time.perf_counter() - t0 < seconds / 2:
        score_split(pairs, key.model, options, ks=(1,))
        rounds += 1
    per_pair = (time.perf_counter() - t0) / (rounds * len(pairs))
    return Throughput(step_s=0.0, val_pair_s=per_pair, measured=time.strftime("%Y-%m-%dT%H:%M:%S%z"))


def main(argv: list[str] | None = None) -> int:
    """``python -m engine.alignment.throughput``: measure the keys of a JSON request on stdin (``{"keys": [...],
    "device": ..., "seconds": ...}``) and print each one's :class:`Throughput` as one JSON line as soon as it is
    measured (the dry run shows how far it got): how the dry run measures in as many processes as a grid has
    slots, each in its slot's environment, so that concurrent runs slow each other as they will."""
    from engine.memory import flush_denormals, tune_allocator

    flush_denormals()  # as a worker does
    tune_allocator()
    request = json.loads(sys.stdin.read() if argv is None else argv[0])
    keys = [CostKey(**raw) for raw in request["keys"]]
    for key in keys:
        print(json.dumps(asdict(measure(key, request.get("device"), float(request.get("seconds", DEFAULT_SECONDS))))))
        sys.stdout.flush()
    return 0


# ------------------------------------------------------------------------------------------------ the cost model
#
# Each alignment run left to do costs, on a slot of a given device and thread count (seconds):
#
#     overhead + build + compile + epochs * (steps_per_epoch * step + checkpoint) + evaluations * val_pairs * per_pair
#
# with ``steps_per_epoch = ceil(train_pairs / batch_size)``, ``evaluations`` the epochs that validate
# (``eval_every``, and the last one), and ``compile`` the time ``torch.compile`` takes for runs that compile. The
# seconds come from finished runs of the same cell (:data:`COST_FIELDS`) when there are any, else from the
# calibration of the run's :class:`CostKey`. Runs whose graph size is unknown before their dataset exists (real
# datasets not built yet) are missing, never given a made-up number.

#: Fields of an alignment spec's canonical form that change the seconds per epoch (the seed, epochs and the
#: schedule do not): two runs that agree on these are one cell for the history source.
COST_FIELDS = (
    "dataset",
    "model",
    "model_kwargs",
    "features",
    "input_layer",
    "norm",
    "activation",
    "block",
    "budget",
    "out_dim",
    "batch_size",
    "compile",
)


def evaluations(epochs: int, eval_every: int, val_pairs: int) -> int:
    """How many epochs end with a validation pass (every ``eval_every`` and the last; none without pairs)."""
    if val_pairs <= 0 or epochs <= 0:
        return 0
    return epochs // eval_every + (0 if epochs % eval_every == 0 else 1)


def training_seconds(
    t: Throughput, *, epochs: int, train_pairs: int, batch_size: int, val_pairs: int, eval_every: int, startup: float
) -> float:
    """Seconds of one training run from calibrated throughput (formula above)."""
    import math

    steps = math.ceil(train_pairs / batch_size)
    evals = evaluations(epochs, eval_every, val_pairs)
    return startup + epochs * (steps * t.step_s + t.checkpoint_s) + evals * val_pairs * t.val_pair_s


def cell_key(spec: Any) -> str:
    """What makes two alignment runs cost the same per epoch (:data:`COST_FIELDS`), as a string."""
    canonical = spec.canonical()
    return json.dumps({k: canonical.get(k) for k in COST_FIELDS}, sort_keys=True)


def run_evaluations(spec: Any) -> int:
    """Validation passes of a run (a run that trains nothing evaluates once)."""
    if not spec.trains:
        return 1
    return evaluations(spec.epochs, spec.eval_every, int(spec.dataset_spec().canonical()["n_val"] or 0))


def run_profile(spec: Any, profile: Profile) -> Profile:
    """Where a run computes on a slot: its own ``device = "cpu"`` and the runs that train nothing stay on the CPU."""
    if not spec.trains or spec.device == "cpu":
        return Profile("cpu", "cpu", profile.threads)
    return profile


def calibrated_seconds(spec: Any, t: Throughput, overhead: float) -> float:
    """Seconds of one alignment run from its calibration and the per-run overhead."""
    canonical = spec.dataset_spec().canonical()
    train, val = int(canonical["n_train"] or 0), int(canonical["n_val"] or 0)
    if not spec.trains:
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


def out_dim(spec: Any) -> int:
    from engine.sources import SOURCES

    return spec.out_dim or SOURCES.get(spec.dataset["base"]).embedding_dim


def cost_key(spec: Any, size: tuple[int, float], profile: Profile) -> CostKey:
    """The calibration key of an alignment run on a slot of ``profile``."""
    nodes, degree = size
    if spec.model == "laplacian":
        return CostKey("laplacian", nodes, degree, spec.batch_size, "cpu", profile.threads, out_dim=out_dim(spec))
    if not spec.trains:  # a solver, or search on top of a model: FAQ from GRAMPA stands for it
        name, options = (spec.model, dict(spec.model_kwargs)) if not spec.decoder else (spec.decoder, {})
        noise = float(spec.dataset_spec().canonical()["noise"])
        return CostKey(name, nodes, degree, 1, "cpu", profile.threads, model_options=options, noise=noise)
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
    import math

    import torch

    from engine.alignment.training import wants_compile

    steps = spec.epochs * math.ceil(int(spec.dataset_spec().canonical()["n_train"] or 0) / spec.batch_size)
    return wants_compile(spec.compile, torch.device(profile.kind), steps, spec.model, profile.threads)


def graph_size(spec: Any, datasets_dir: Path) -> tuple[int, float] | None:
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
    folder = Path(spec.datasets_dir or datasets_dir) / dataset_id(canonical)
    try:
        stats = open_dataset(folder).stats["train"]
        return int(round(stats["mean_order"])), round(float(stats["mean_degree"]), 1)
    except (GaptuiError, KeyError, TypeError):
        return None


def datasets_to_build(specs: Any, datasets_dir: Path) -> int:
    """How many distinct datasets of ``specs`` are not in the cache yet."""
    from engine.alignment.datasets import dataset_id

    missing = set()
    asked: set[str] = set()
    for spec in specs:
        cell = spec.seedless()  # the run's seed is not its dataset's
        if cell in asked:
            continue
        asked.add(cell)
        ident = dataset_id(spec.dataset_spec().canonical())
        if not (Path(spec.datasets_dir or datasets_dir) / ident / "meta.json").exists():
            missing.add(ident)
    return len(missing)


def _throughput(value: Any) -> Throughput:
    return value if isinstance(value, Throughput) else Throughput.from_dict(value)


def _fits(raw: dict[str, Any]) -> bool:
    """Whether a cached entry has this layout (older ones are measured again)."""
    return all(f.name in raw for f in fields(Throughput))


def estimate_costs(family: Any, specs: list[Any], ctx: CostContext) -> CostReport:
    """Alignment's cost model: each run from finished runs of its cell on the slot's device, else from the
    calibration of its cost key (measured once per key and profile, all keys of a profile at once)."""
    report = CostReport(to_build=datasets_to_build(specs, ctx.datasets_dir))
    # Pass 1: what each run on each slot profile needs (history, or a calibration key).
    needs: list[tuple[Any, dict[Profile, CellHistory | tuple[Profile, str]]]] = []
    wanted: dict[Profile, dict[str, CostKey]] = {}
    looked_up: set[tuple[Profile, str]] = set()
    for spec in specs:
        size = graph_size(spec, ctx.datasets_dir)
        if size is None:
            why = f"{spec.dataset['base']}: graph size unknown until its dataset is built (`gaptui datasets build`)"
            report.missing[spec.run_id()] = why
            continue
        per: dict[Profile, CellHistory | tuple[Profile, str]] = {}
        for profile in ctx.profiles:
            own = run_profile(spec, profile)
            cell = ctx.history(family, spec, own)
            if cell is not None:
                per[profile] = cell
            else:
                key = cost_key(spec, size, own)
                ident = json.dumps(key.to_dict(), sort_keys=True)
                if not ctx.measures and (profile, ident) not in looked_up:
                    looked_up.add((profile, ident))
                    ctx.calibrate(family, {profile: {ident: key}}, _fits)  # not cached: gives up here
                wanted.setdefault(profile, {})[ident] = key
                per[profile] = (profile, ident)
        needs.append((spec, per))
    measured = ctx.calibrate(family, wanted, _fits) if wanted else {}
    unknown_rest = any(isinstance(n, CellHistory) and n.overhead_s is None for _, per in needs for n in per.values())
    overhead = ctx.overhead(family) if wanted or unknown_rest else 0.0
    # Pass 2: seconds per run and profile.
    for spec, per in needs:
        cost = RunCost({}, "")
        sources: list[str] = []
        for profile, need in per.items():
            if isinstance(need, CellHistory):
                epochs = spec.epochs if spec.trains else 0
                cost.seconds[profile] = need.seconds(epochs, run_evaluations(spec), overhead)
                cost.shared[profile] = overhead if need.overhead_s is None else need.overhead_s
                sources.append(f"history ({need.runs} run(s))")
            else:
                t, now = measured[need]
                cost.seconds[profile] = calibrated_seconds(spec, _throughput(t), overhead)
                cost.shared[profile] = overhead
                sources.append("calibration (measured now)" if now else "calibration (cached)")
        cost.source = sources[0]
        report.costs[spec.run_id()] = cost
    return report


def overhead_probe(datasets_dir: str, data_root: str, count: int) -> list[Any]:
    """``count`` tiny alignment runs (one per slot) whose duration is a run's overhead: process start, imports,
    dataset loading, model, result, history."""
    from engine.alignment.spec import RunSpec

    dataset = {"base": "er", "noise": 0.0, "n_train": 2, "n_val": 1, "params": {"n": 8, "degree": 2}}
    return [
        RunSpec.from_dict(
            {
                "dataset": dataset,
                "model": "gcn",
                "epochs": 1,
                "batch_size": 2,
                "budget": 5000,
                "out_dim": 16,
                "seed": seed,
                "datasets_dir": datasets_dir,
                "data_root": data_root,
            }
        )
        for seed in range(count)
    ]


if __name__ == "__main__":
    sys.exit(main())
