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
:func:`~engine.laplacian.laplacian_scores`. ``python -m engine.alignment.throughput`` measures a list of keys in a fresh
process, which is how the dry run measures one process per slot side by side
(:func:`gaptui.estimate.measure_on_slots`).

:class:`CalibrationCache` keeps the measurements in one JSON file (``<workspace>/calibration.json``), keyed by the
machine (:func:`machine`: host, CPU model, device name, torch version) and the cost key, so a second dry run does
not measure again. The file carries its own fingerprint (:func:`engine.cache.write_sealed_json`); a file that fails
it (truncated, altered, garbled, or written before fingerprints were recorded) is moved aside with one line and
measured again.
"""

from __future__ import annotations

import contextlib
import json
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from engine.cache import discard, open_sealed_json, write_sealed_json
from engine.files import locked, read_json

#: Version of the cache file's layout; entries of another version are measured anew and the file rewritten.
CACHE_FORMAT = 1
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
    model fields unused).
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

    def to_dict(self) -> dict[str, Any]:
        return json.loads(json.dumps(asdict(self), sort_keys=True, default=str))

    def describe(self) -> str:
        graph = f"{self.nodes} nodes, degree {self.degree:g}"
        where = f"{self.device}, {self.threads} thread{'s' if self.threads != 1 else ''}"
        if self.model == "laplacian":
            return f"laplacian k={self.out_dim} ({graph}; {where})"
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


def machine(device: str = "cpu") -> dict[str, str]:
    """What makes a measurement this machine's: host, CPU model, the device's name, Python and torch versions."""
    import torch

    from engine.loop import cpu_name

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


def synthetic_pairs(nodes: int, degree: float, count: int, seed: int = 0) -> Any:
    """``count`` Erdos-Renyi pairs of ``nodes`` nodes and mean degree ``degree`` (H a relabelled copy of G):
    the shapes a training batch of such graphs has, built in milliseconds."""
    import numpy as np

    from engine.alignment.noise import correlate
    from engine.sources.synthetic import bernoulli_graphs

    nodes = max(2, int(nodes))
    p = min(1.0, max(float(degree), 1.0) / (nodes - 1))
    rng = np.random.default_rng(seed)
    graphs = bernoulli_graphs(nodes, p, count, rng)
    split, _ = correlate(graphs, "add_remove", 0.0, rng)
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
        return _measure_training(key, device or key.device, seconds)


def _measure_training(key: CostKey, device_name: str, seconds: float) -> Throughput:
    from engine import models
    from engine.alignment.training import FEATURES, PairTensors, compile_model, evaluate, train_epoch
    from engine.evaluation import LapEvaluator
    from engine.loop import CHECK_EVERY, Checkpoints, TrainState, make_optimiser, resolve_device, seed_everything

    device = resolve_device(device_name)
    seed_everything(0)
    t0 = time.perf_counter()
    model = models.build(
        key.model, out_dim=key.out_dim, budget=key.budget, in_dim=FEATURES[key.features], **key.model_options
    ).to(device)
    build_s = time.perf_counter() - t0
    data = PairTensors(synthetic_pairs(key.nodes, key.degree, key.batch_size), device)
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
        data = PairTensors(synthetic_pairs(key.nodes, key.degree, key.batch_size * per_call), device)
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

    with LapEvaluator() as evaluator:
        evaluate(model, data, key.batch_size, evaluator, key.features)
        rounds: list[float] = []
        t0 = time.perf_counter()
        while not rounds or time.perf_counter() - t0 < seconds / 3:
            t1 = time.perf_counter()
            evaluate(model, data, key.batch_size, evaluator, key.features)
            rounds.append(time.perf_counter() - t1)
        val_pair_s = statistics.median(rounds) / len(data)

    with tempfile.TemporaryDirectory(prefix="gaptui-calibration-") as tmp:
        checkpoints = Checkpoints(Path(tmp), lambda _text: None)
        payload = {"model": model.state_dict(), "optimizer": opt.state_dict(), "state": asdict(state)}
        checkpoints.save(payload)  # the second save also rotates the previous one, as every later epoch does
        t0 = time.perf_counter()
        checkpoints.save(payload)
        checkpoint_s = time.perf_counter() - t0
    return Throughput(
        step_s=step_s,
        val_pair_s=val_pair_s,
        checkpoint_s=checkpoint_s,
        build_s=build_s,
        compile_s=compile_s,
        params=models.count_parameters(model),
        steps=timed,
        measured=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    )


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


def main(argv: list[str] | None = None) -> int:
    """``python -m engine.alignment.throughput``: measure the keys of a JSON request on stdin (``{"keys": [...],
    "device":
    ..., "seconds": ...}``) and print their :class:`Throughput` as a JSON list: how the dry run measures in as many
    processes as a grid has slots, each in its slot's environment, so that concurrent runs slow each other as
    they will."""
    from engine.memory import flush_denormals, tune_allocator

    flush_denormals()  # as a worker does
    tune_allocator()
    request = json.loads(sys.stdin.read() if argv is None else argv[0])
    keys = [CostKey(**raw) for raw in request["keys"]]
    out = [asdict(measure(key, request.get("device"), float(request.get("seconds", DEFAULT_SECONDS)))) for key in keys]
    print(json.dumps(out))
    return 0


def _digest(obj: Any) -> str:
    from engine.cache import content_digest

    return content_digest(obj)


class CalibrationCache:
    """Measurements by (machine, cost key) in one JSON file, written atomically under a lock.

    ``warn(line)`` receives the one line said when the file was corrupt and moved aside.
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
        entry = self.entries().get(_digest({"machine": host, "key": key}))
        return entry.get("value") if isinstance(entry, dict) and isinstance(entry.get("value"), dict) else None

    def put(self, host: Mapping[str, Any], key: Mapping[str, Any], value: Mapping[str, Any]) -> None:
        """Add one measurement, keeping what other processes wrote meanwhile."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock():
            entries = self._read()
            entries[_digest({"machine": host, "key": key})] = {"machine": host, "key": key, "value": dict(value)}
            write_sealed_json(self.path, {"format": CACHE_FORMAT, "entries": entries}, indent=1, sort_keys=True)
            self._entries = entries


if __name__ == "__main__":
    sys.exit(main())
