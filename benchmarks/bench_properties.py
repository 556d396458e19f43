"""Property suite benchmark: generation speed, density leak of negatives, training throughput, suite build time.

Run by hand from the repository root (one core, nice):

    OMP_NUM_THREADS=1 nice -n 19 python benchmarks/bench_properties.py [--quick]

Sections:
1. generation: graphs/s of ``generate`` (GraphRandom with solver negatives, GraphPerturb) per property at the base
   size and at n = 30;
2. negatives: best one-threshold density classifier accuracy (0.5 = density says nothing) for GraphRandom with
   solver vs uniform random negatives, per property at the base size;
3. training: graphs/s of one training epoch (forward, backward, AdamW step) per pooling (CPU, 1 thread)
   at n = 6 and n = 16;
4. suite build: seconds per dataset measured at base, base + 5 and base + 10 with ``--sample-graphs`` graphs, the
   linear scaling to 10,000 graphs checked on two datasets, and the whole suite (16 x 11 x 2 datasets of 10,000)
   extrapolated to this machine's cores.

Times are CPU seconds of this process (``time.process_time``), not wall-clock: the machine is shared and the
script runs at nice 19, so wall time measures the neighbours; everything here is single-threaded, so CPU time is
what one idle core would take.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from engine.properties.datasets import generate  # noqa: E402
from engine.properties.definitions import BASE_SIZES, PROPERTY_NAMES, suite_sizes  # noqa: E402
from engine.properties.options import TrainOptions  # noqa: E402
from engine.properties.scores import POOLING_LABELS  # noqa: E402
from engine.properties.training import LabelledGraphs, train_model  # noqa: E402


def canonical(prop: str, n: int, family: str, graphs: int, negatives: str = "solver") -> dict:
    return {
        "format": 1, "kind": "properties", "property": prop, "n": n, "family": family, "graphs": graphs,
        "negatives": negatives if family == "random" else None, "seed": 0,
    }  # fmt: skip


def timed_generate(prop: str, n: int, family: str, graphs: int, negatives: str = "solver") -> tuple[float, dict]:
    t0 = time.process_time()
    _, stats = generate(canonical(prop, n, family, graphs, negatives), np.random.default_rng(0))
    return time.process_time() - t0, stats


def section_generation(graphs_base: int, graphs_30: int) -> None:
    print(f"\n## 1. generation, graphs/s (one core; {graphs_base} graphs at base, {graphs_30} at n = 30)")
    print(f"{'property':<14} {'n':>3} {'random':>9} {'perturb':>9} {'n':>4} {'random':>9} {'perturb':>9}")
    for prop in PROPERTY_NAMES:
        row = f"{prop:<14}"
        for n, g in ((BASE_SIZES[prop], graphs_base), (30, graphs_30)):
            r, _ = timed_generate(prop, n, "random", g)
            p, _ = timed_generate(prop, n, "perturb", g)
            row += f" {n:>3} {g / r:>9.0f} {g / p:>9.0f}"
        print(row, flush=True)


def section_negatives(graphs: int) -> None:
    print(f"\n## 2. density-only classifier accuracy at the base size ({graphs} graphs; 0.5 = no leak)")
    print(f"{'property':<14} {'solver':>7} {'random':>7} {'perturb':>7} {'resampled':>9}")
    means = {"solver": [], "random": [], "perturb": []}
    for prop in PROPERTY_NAMES:
        n = BASE_SIZES[prop]
        s = timed_generate(prop, n, "random", graphs, "solver")[1]
        r = timed_generate(prop, n, "random", graphs, "random")[1]
        p = timed_generate(prop, n, "perturb", graphs)[1]
        for key, st in (("solver", s), ("random", r), ("perturb", p)):
            means[key].append(st["density_accuracy"])
        print(
            f"{prop:<14} {s['density_accuracy']:>7.3f} {r['density_accuracy']:>7.3f} {p['density_accuracy']:>7.3f}"
            f" {p['resampled']:>9d}",
            flush=True,
        )
    print(f"{'mean':<14} " + " ".join(f"{np.mean(v):>7.3f}" for v in means.values()))


def section_training(graphs: int) -> None:
    torch.set_num_threads(1)
    print(f"\n## 3. training throughput, graphs/s (one epoch of {graphs} graphs, batch 64, CPU, 1 thread)")
    rng = np.random.default_rng(0)
    sets = {}
    for n in (6, 16):
        a = rng.random((graphs, n, n)) < 0.3
        sets[n] = LabelledGraphs(n, a, (rng.random(graphs) < 0.5).astype(np.uint8))
    print(f"{'pooling':<20} {'n=6':>8} {'n=16':>8}")
    for pooling in POOLING_LABELS:
        row = f"{pooling:<20}"
        for data in sets.values():
            t0 = time.process_time()
            train_model(data, pooling, TrainOptions(epochs=1), 0, lambda *a, **k: None)
            row += f" {graphs / (time.process_time() - t0):>8.0f}"
        print(row, flush=True)


def section_suite(sample_graphs: int) -> None:
    print(f"\n## 4. whole-suite build time (measured at {sample_graphs} graphs per dataset, extrapolated)")
    total_one_core = 0.0
    per_family = {"random": 0.0, "perturb": 0.0}
    for prop in PROPERTY_NAMES:
        sizes = suite_sizes(prop)
        probe = [sizes[0], sizes[5], sizes[10]]
        for family in ("random", "perturb"):
            secs = [timed_generate(prop, n, family, sample_graphs)[0] for n in probe]
            est = np.interp(sizes, probe, secs) * (10_000 / sample_graphs)
            total_one_core += float(est.sum())
            per_family[family] += float(est.sum())
        print(f"{prop:<14} probes n={probe}: done", flush=True)
    checks = [("transitive", BASE_SIZES["transitive"], "perturb"), ("equivalence", 19, "random")]
    for prop, n, family in checks:
        small, _ = timed_generate(prop, n, family, sample_graphs)
        full, _ = timed_generate(prop, n, family, 10_000)
        print(f"scaling check {prop} n={n} {family}: {sample_graphs} graphs {small:.2f} s, 10,000 graphs {full:.2f} s"
              f" (x{full / small:.1f} for x{10_000 / sample_graphs:.0f} graphs)")  # fmt: skip
    cores = os.cpu_count() or 1
    print(f"estimated one-core total: {total_one_core / 60:.1f} min "
          f"(GraphRandom {per_family['random'] / 60:.1f}, GraphPerturb {per_family['perturb'] / 60:.1f})")  # fmt: skip
    print(f"on this machine's {cores} cores (ideal split): {total_one_core / cores / 60:.1f} min")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller samples (a first look, ~2 min)")
    parser.add_argument("--sample-graphs", type=int, default=1000, help="graphs per dataset in section 4")
    parser.add_argument("--sections", default="1234", help="which sections to run, e.g. 13")
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()}")
    quick = args.quick
    if "1" in args.sections:
        section_generation(200 if quick else 1000, 50 if quick else 200)
    if "2" in args.sections:
        section_negatives(1000 if quick else 4000)
    if "3" in args.sections:
        section_training(256 if quick else 1024)
    if "4" in args.sections:
        section_suite(200 if quick else args.sample_graphs)
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
