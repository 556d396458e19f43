"""Packed seeds: runs per hour of k seeds of one cell as k worker processes against one packed worker process.

Run from the repository root (CPU, one slot, torch on one thread in every worker)::

    nice -n 19 python benchmarks/bench_pack.py                   # k = 1, 2, 5, 10, 2 repeats
    python benchmarks/bench_pack.py --ks 1,2 --repeats 1          # quicker

Setting: one alignment cell, ER(100, 8) at eta = 0.12 (``--pairs`` training and ``--val`` validation pairs, built
once beforehand, as ``gaptui run`` prepares inputs before it starts workers), GCN at the default 60k-parameter
budget, batch 100, ``--epochs`` epochs, seeds 0 .. k-1. For each k, the k runs are trained the way the scheduler
does it on one slot:

- **separate**: k worker processes one after another (``pack_seeds = 1``): each pays interpreter and torch
  start-up, reads the dataset and trains one run. Each seed's process is timed once per repeat (next to the
  packs), and separate(k) is the sum over seeds 0 .. k-1, which is what one slot spends on them;
- **packed**: one worker process for the k runs (``pack_seeds = k``): start-up and dataset loading once, the runs
  trained in turn epoch by epoch.

Both go through :func:`gaptui.runner.start_pack`, the scheduler's own launcher, into fresh run folders, and
their wall time counts from the launch to the exit of the process. Within each repeat, each pack and the
separate runs of its new seeds run back to back (alternating which goes first), so background load hits both
alike; the best of ``--repeats`` is reported per process. Printed: seconds, runs/hour, the packed/separate
speed-up per k, and each throughput relative to one run per process (k = 1). The packed runs' metrics are
checked equal to the separate runs' (same seeds), so the speed-up is never bought with different results.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from engine.alignment.datasets import build_dataset  # noqa: E402
from engine.alignment.spec import RunSpec  # noqa: E402
from gaptui.runner import start_pack  # noqa: E402

ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}


def specs_of(args: argparse.Namespace, datasets: Path, k: int) -> list[RunSpec]:
    dataset = {"base": "er", "noise": 0.12, "n_train": args.pairs, "n_val": args.val, "params": {"n": 100, "degree": 8}}
    common = {"dataset": dataset, "model": args.model, "epochs": args.epochs, "batch_size": 100}
    return [RunSpec.from_dict({**common, "seed": seed, "datasets_dir": str(datasets)}) for seed in range(k)]


def launch(groups: list[list[tuple[RunSpec, Path]]]) -> float:
    """Start each group as one worker process, one after another (one slot); wall seconds of the whole."""
    t0 = time.perf_counter()
    for runs in groups:
        proc = start_pack(runs, env=ENV, quiet=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _, stderr = proc.communicate()
        if proc.returncode != 0:
            raise SystemExit(f"worker exited {proc.returncode}: {stderr.strip().splitlines()[-1:]}")
    return time.perf_counter() - t0


def metrics(out: Path) -> dict[str, float]:
    return json.loads((out / "result.json").read_text())["metrics"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ks", default="1,2,5,10", help="pack sizes (seeds per cell)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--pairs", type=int, default=300, help="training pairs")
    parser.add_argument("--val", type=int, default=100, help="validation pairs")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--model", default="gcn")
    args = parser.parse_args()
    ks = [int(k) for k in args.ks.split(",")]
    print(f"load average at start: {os.getloadavg()[0]:.2f} ({len(os.sched_getaffinity(0))} cores)")
    tmp = Path(tempfile.mkdtemp(prefix="bench-pack-"))
    try:
        datasets = tmp / "datasets"
        build_dataset(specs_of(args, datasets, 1)[0].dataset_spec(), datasets)
        # Separate runs on one slot are k processes one after another: seed s alone is measured once per repeat,
        # next to the packs it belongs to, and separate(k) is the sum over seeds 0 .. k-1.
        alone: dict[int, float] = {}
        packed: dict[int, float] = {}
        results: dict[tuple[str, int, int], dict[str, float]] = {}
        for repeat in range(args.repeats):
            done = 0
            for k in ks:
                specs = specs_of(args, datasets, k)
                ways = ("separate", "packed") if (repeat + k) % 2 == 0 else ("packed", "separate")
                for way in ways:
                    if way == "packed" and k > 1:
                        folder = tmp / f"r{repeat}-k{k}"
                        runs = [(spec, folder / f"seed{spec.seed}") for spec in specs]
                        seconds = launch([runs])
                        packed[k] = min(seconds, packed.get(k, float("inf")))
                        results.update({("packed", k, spec.seed): metrics(out) for spec, out in runs})
                        print(f"  repeat {repeat + 1} k={k:>2} packed: {seconds:7.1f} s", flush=True)
                    elif way == "separate":
                        for spec in specs[done:]:
                            out = tmp / f"r{repeat}-alone" / f"seed{spec.seed}"
                            seconds = launch([[(spec, out)]])
                            alone[spec.seed] = min(seconds, alone.get(spec.seed, float("inf")))
                            results[("separate", 0, spec.seed)] = metrics(out)
                            print(f"  repeat {repeat + 1} seed {spec.seed} alone: {seconds:7.1f} s", flush=True)
                done = k
        unequal = [key for key in results if key[0] == "packed" and results[key] != results[("separate", 0, key[2])]]
        single = 3600 / alone[0]
        print()
        print(
            f"{args.model}, ER(100, 8) eta 0.12, {args.pairs} + {args.val} pairs, {args.epochs} epochs, "
            f"1 slot, 1 thread per worker, best of {args.repeats}"
        )
        print(
            f"{'k':>3} {'separate s':>11} {'packed s':>9} {'separate runs/h':>16} {'packed runs/h':>14} "
            f"{'packed/separate':>16} {'packed/(k=1)':>13}"
        )
        for k in ks:
            sep = sum(alone[seed] for seed in range(k))
            pack = packed.get(k, sep)
            rate_sep, rate_packed = 3600 * k / sep, 3600 * k / pack
            print(
                f"{k:>3} {sep:>11.1f} {pack:>9.1f} {rate_sep:>16.0f} {rate_packed:>14.0f} "
                f"{sep / pack:>15.2f}x {rate_packed / single:>12.2f}x"
            )
        print(f"packed metrics equal to separate runs: {'yes' if not unequal else f'NO for {unequal}'}")
        print(f"load average at end: {os.getloadavg()[0]:.2f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
