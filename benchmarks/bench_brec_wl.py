"""The exact WL tests on BREC's pairs: time per category, the counts they give, and 2-FWL's memory estimate.

Run by hand from the repository root (one core, nice):

    OMP_NUM_THREADS=1 nice -n 10 python benchmarks/bench_brec_wl.py [--repeats 3] [--categories basic cfi]

Per category and test: pairs, largest order, pairs distinguished (1-WL must give 0 everywhere, 3-WL the published
Basic 60, Regular 50, Extension 100, CFI 60: 270 in total), CPU seconds (``time.process_time``, best of
``--repeats``: the machine is shared, so CPU time is what one idle core would take), the slowest pair and, for
3-WL, the estimated peak memory of its largest pair (``engine.brec.wl.wl_bytes``) against the measured peak RSS
growth of computing it. Nothing is cached: every verdict is computed.
"""

from __future__ import annotations

import argparse
import os
import resource
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

from engine.brec.data import CATEGORIES, load_category  # noqa: E402
from engine.brec.wl import TESTS, WL_ROWS, wl_bytes  # noqa: E402
from engine.memory import human  # noqa: E402

PUBLISHED_3WL = {"basic": 60, "regular": 50, "strongly-regular": 0, "extension": 100, "cfi": 60, "4-vertex": 0,
                 "distance-regular": 0}  # fmt: skip


def timed(row: str, key: str, repeats: int) -> tuple[int, float, float]:
    """(distinguished, best total CPU seconds, slowest pair's seconds in that repeat)."""
    pairs = load_category(key)
    best, slowest, found = float("inf"), 0.0, 0
    for _ in range(repeats):
        times = []
        found = 0
        for pair in pairs:
            t0 = time.process_time()
            found += TESTS[row](pair.g, pair.h)[0]
            times.append(time.process_time() - t0)
        if sum(times) < best:
            best, slowest = sum(times), max(times)
    return found, best, slowest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--categories", nargs="*", default=[c.key for c in CATEGORIES])
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()}")
    if "cfi" in args.categories:
        largest = max(load_category("cfi"), key=lambda p: p.nodes)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        TESTS["3-wl"](largest.g, largest.h)
        grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
        estimate = wl_bytes("3-wl", largest.nodes)
        print(f"3-wl on pair {largest.id} ({largest.nodes} nodes): estimated peak {human(estimate)}, measured peak RSS "
              f"growth {human(max(grown, 0))} (measured first, before any other pair)")  # fmt: skip
    print(f"{'category':<17} {'pairs':>5} {'n max':>5} {'test':>5} {'found':>5} {'CPU s':>8} {'slowest':>8}")
    totals = dict.fromkeys(WL_ROWS, 0)
    for key in args.categories:
        pairs = load_category(key)
        nodes = max(p.nodes for p in pairs)
        for row in WL_ROWS:
            found, seconds, slowest = timed(row, key, args.repeats)
            totals[row] += found
            check = "" if row == "1-wl" or found == PUBLISHED_3WL[key] else f"  (published {PUBLISHED_3WL[key]})"
            print(f"{key:<17} {len(pairs):>5} {nodes:>5} {row:>5} {found:>5} {seconds:>8.2f} {slowest:>8.3f}{check}")
    print(f"totals: {totals} (published: 1-wl 0, 3-wl 270 over all seven categories)")
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
