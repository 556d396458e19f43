"""Training-free solvers: seconds for one table cell (100 validation pairs) serially, on threads, on processes.

Run from the repository root (CPU)::

    nice -n 10 python benchmarks/bench_solvers.py                 # 100 pairs of ER(100, 8) at eta = 0.12
    python benchmarks/bench_solvers.py --pairs 30 --solvers faq   # quicker

Setting: ``--pairs`` pairs of ER(100, 8) (``--nodes``, ``--degree``) noised at ``--noise`` with the ``add_remove``
model, as ``gaptui datasets build er`` makes them. For each solver, :func:`engine.alignment.solvers.score_split`
(what a solver run of a grid calls: the solver on every pair, the LAP and the scores) is timed with the pool
``serial`` (one pair after another), ``thread`` and ``process`` (spawned) at ``--workers`` (default: the usable
CPUs), best of ``--repeats``. Printed: wall seconds per cell, seconds per pair, the speed-up over serial, and the
accuracy, which must be the same for every pool (the solvers are deterministic).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from engine.alignment.noise import correlate  # noqa: E402
from engine.alignment.solvers import score_split, solver_options, usable_cpus  # noqa: E402
from engine.sources.synthetic import bernoulli_graphs  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=100)
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--degree", type=float, default=8.0)
    parser.add_argument("--noise", type=float, default=0.12)
    parser.add_argument("--solvers", default="grampa,umeyama,faq")
    parser.add_argument("--pools", default="serial,thread,process")
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    graphs = bernoulli_graphs(args.nodes, args.degree / (args.nodes - 1), args.pairs, rng)
    split = correlate(graphs, "add_remove", args.noise, rng)[0]
    workers = args.workers or usable_cpus()
    print(f"{args.pairs} pairs of ER({args.nodes}, {args.degree:g}) at noise {args.noise:g}; {workers} workers")
    print(f"load average at start: {os.getloadavg()[0]:.1f}")
    print(f"{'solver':<10}{'pool':<9}{'cell s':>9}{'s/pair':>9}{'vs serial':>11}{'LAP acc':>9}")
    for name in args.solvers.split(","):
        options = solver_options(name, {})
        serial = None
        for pool in args.pools.split(","):
            best, acc = float("inf"), None
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                scores, _ = score_split(split, name, options, ks=(1,), workers=workers, pool=pool)
                best = min(best, time.perf_counter() - t0)
                assert acc is None or acc == scores.lap_acc, "a solver gave two answers"
                acc = scores.lap_acc
            serial = best if pool == "serial" else serial
            ratio = f"{serial / best:.2f}x" if serial else "-"
            print(f"{name:<10}{pool:<9}{best:>9.2f}{best / args.pairs:>9.4f}{ratio:>11}{acc:>9.3f}")
    print(f"load average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
