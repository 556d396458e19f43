"""Dataset generation benchmark: our vectorised pair builder against a one-graph-at-a-time dense baseline.

Run from the repository root::

    python benchmarks/bench_datasets.py            # ER 5,000 + 500 pairs, AQSOL-sized set, load time
    python benchmarks/bench_datasets.py --help     # sizes, repeats, core, eta

The process pins itself to one core and one BLAS/OpenMP thread before numpy is imported, so both
implementations run single-threaded on the same core; every measurement is repeated (best of ``--repeats``)
and the implementations are interleaved within each repeat so that background load hits both alike.

Measured (see benchmarks/README.md):

- ER(100, 8), eta = 0.12, add_remove noise, 5,000 train + 500 val pairs: ``bernoulli_graphs`` + ``correlate``
  and the full ``build_dataset`` (into a temp dir, files and meta.json written), against the dense baseline
  (per pair: N x N adjacency, two symmetrised ``rng.random((N, N))`` masks, ``A(1-Nr) + (1-A)Na``,
  ``P A~ P^T``, ``np.nonzero``). Target: < 3 s, >= 10x faster than the baseline.
- An AQSOL-sized set (~8,800 synthetic sparse molecule-like graphs of ~15.5 nodes), ``add`` noise: ``correlate``
  against the same baseline (base graphs given to both).
- Loading the cached 5,500-pair dataset (``open_dataset(...).split('train')`` and ``'val'``). Target: << 1 s.
- Correctness: the realised removed / added fractions of both implementations, measured on their outputs
  (G's edges mapped through ``perm`` and looked up in H), must be close to eta.
"""

from __future__ import annotations

import os

# Before numpy is imported: one thread for OpenBLAS / OpenMP / MKL.
os.environ["OMP_NUM_THREADS"] = "1"
os.environ["OPENBLAS_NUM_THREADS"] = "1"
os.environ["MKL_NUM_THREADS"] = "1"

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from engine.alignment.datasets import DatasetSpec, build_dataset, open_dataset  # noqa: E402
from engine.alignment.noise import correlate  # noqa: E402
from engine.graphs import Graph, simple_graph  # noqa: E402
from engine.pairs import PairSplit  # noqa: E402
from engine.sources.synthetic import bernoulli_graphs  # noqa: E402

# --------------------------------------------------------------------------------------------------------------
# The baseline: the obvious one-pair-at-a-time dense implementation.
# --------------------------------------------------------------------------------------------------------------


def _sym_mask(rng: np.random.Generator, n: int, p: float) -> np.ndarray:
    """Symmetric 0/1 mask without diagonal, each unordered pair 1 with probability ``p``."""
    m = np.triu((rng.random((n, n)) < p).astype(np.uint8), 1)
    return m | m.T


def dense_er_graphs(n: int, p: float, count: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Base graphs of the baseline: one dense symmetric N x N adjacency per graph."""
    return [_sym_mask(rng, n, p) for _ in range(count)]


def dense_from_graph(g: Graph) -> np.ndarray:
    a = np.zeros((g.num_nodes, g.num_nodes), dtype=np.uint8)
    a[g.edges[:, 0], g.edges[:, 1]] = 1
    a[g.edges[:, 1], g.edges[:, 0]] = 1
    return a


def dense_correlate(
    adjs: list[np.ndarray], model: str, eta: float, rng: np.random.Generator
) -> tuple[PairSplit, dict[str, int]]:
    """Per pair: dense masks, ``A~ = A(1-Nr) + (1-A)Na``, ``H = P A~ P^T``, edge lists by ``np.nonzero``."""
    num_nodes, g_parts, h_parts, perms = [], [], [], []
    removed = added = edges = 0
    for a in adjs:
        n = a.shape[0]
        m = int(a.sum()) // 2
        slots = n * (n - 1) // 2
        p_remove = eta if model == "add_remove" else 0.0
        p_add = eta * m / (slots - m)
        # The add-only model skips the removal mask (like ours does), so the baseline is not padded with waste.
        nr = _sym_mask(rng, n, p_remove) if p_remove > 0 else np.zeros((n, n), np.uint8)
        na = _sym_mask(rng, n, p_add)
        noised = a * (1 - nr) + (1 - a) * na
        perm = rng.permutation(n)
        h = np.zeros_like(noised)
        h[np.ix_(perm, perm)] = noised  # H[perm[i], perm[j]] = A~[i, j], i.e. P A~ P^T
        g_parts.append(np.stack(np.nonzero(a)))
        h_parts.append(np.stack(np.nonzero(h)))
        perms.append(perm)
        num_nodes.append(n)
        edges += m
        removed += int((a * nr).sum()) // 2
        added += int(((1 - a) * na).sum()) // 2

    def ptr(parts: list[np.ndarray]) -> np.ndarray:
        return np.concatenate([[0], np.cumsum([p.shape[1] for p in parts])]).astype(np.int64)

    split = PairSplit(
        np.array(num_nodes, dtype=np.int64),
        np.concatenate(g_parts, axis=1).astype(np.int64),
        ptr(g_parts),
        np.concatenate(h_parts, axis=1).astype(np.int64),
        ptr(h_parts),
        np.concatenate(perms).astype(np.int64),
    )
    return split, {"edges": edges, "removed": removed, "added": added}


# --------------------------------------------------------------------------------------------------------------
# Correctness: realised noise measured on the output arrays, identical for both implementations.
# --------------------------------------------------------------------------------------------------------------


def realised_noise(split: PairSplit) -> tuple[float, float]:
    """``(removed, added)`` as fractions of G's edges: G's edges mapped through ``perm`` and looked up in H."""
    n = split.num_nodes
    width = int(n.max())
    node_ptr = split.node_ptr
    pair_g = np.repeat(np.arange(len(n)), np.diff(split.edge_ptr_g))
    pair_h = np.repeat(np.arange(len(n)), np.diff(split.edge_ptr_h))
    u, v = split.edge_index_g
    pu = split.perm[node_ptr[pair_g] + u]
    pv = split.perm[node_ptr[pair_g] + v]
    g_keys = (pair_g * width + pu) * width + pv
    hu, hv = split.edge_index_h
    h_keys = (pair_h * width + hu) * width + hv
    kept = int(np.isin(g_keys, h_keys).sum())
    total_g, total_h = g_keys.size, h_keys.size
    return (total_g - kept) / total_g, (total_h - kept) / total_g


# --------------------------------------------------------------------------------------------------------------
# Synthetic AQSOL-like base graphs (no real data): random trees plus a few ring-closing edges.
# --------------------------------------------------------------------------------------------------------------


def molecule_like_graphs(count: int, rng: np.random.Generator) -> list[Graph]:
    """``count`` sparse connected graphs, orders round(Triangular(5, 10.5, 31)) in 5..30 (mean ~15.5).

    Each is a random recursive tree (node i attaches to a uniform earlier node) plus Poisson(0.6) extra edges
    (about AQSOL's rings: |E| / N ~ 1.04).
    """
    orders = np.clip(np.rint(rng.triangular(5, 10.5, 31, size=count)), 5, 30).astype(np.int64)
    out = []
    for n in orders:
        child = np.arange(1, n)
        parent = (rng.random(n - 1) * child).astype(np.int64)
        extra = rng.poisson(0.6)
        eu, ev = rng.integers(0, n, size=(2, extra))
        src = np.concatenate([child, eu])
        dst = np.concatenate([parent, ev])
        out.append(simple_graph(int(n), np.stack([src, dst]))[0])
    return out


# --------------------------------------------------------------------------------------------------------------
# Timing helpers
# --------------------------------------------------------------------------------------------------------------


def best_of(times: list[float]) -> float:
    return min(times)


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def load_str() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} / {five:.2f} / {fifteen:.2f}"


def fmt_s(x: float) -> str:
    return f"{x * 1000:8.1f} ms" if x < 1 else f"{x:8.3f} s "


def table(title: str, header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    print(f"\n{title}")
    print("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))


# --------------------------------------------------------------------------------------------------------------
# Benchmarks
# --------------------------------------------------------------------------------------------------------------


def bench_er(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    n, degree, eta = 100, 8.0, args.eta
    p = degree / (n - 1)
    sizes = (args.train, args.val)
    t_base, t_corr, t_ours, t_build = [], [], [], []
    t_dbase, t_dcorr, t_dense = [], [], []
    built_path: Path | None = None
    fractions: dict[str, tuple[float, float]] = {}
    # Warm-up (first-call costs, allocator): a few pairs through both implementations, not timed.
    warm = np.random.default_rng(1)
    correlate(bernoulli_graphs(n, p, 50, warm), "add_remove", eta, warm)
    dense_correlate(dense_er_graphs(n, p, 50, warm), "add_remove", eta, warm)
    for rep in range(args.repeats):
        print(f"  ER repeat {rep + 1}/{args.repeats} (load {load_str()})", flush=True)
        # Ours, engine functions: base graphs, then one correlate per split (as build_dataset does).
        rng = np.random.default_rng(1000 + rep)
        tb, graphs = timed(lambda rng=rng: bernoulli_graphs(n, p, sum(sizes), rng))
        tc, out = timed(
            lambda rng=rng, graphs=graphs: [
                correlate(graphs[: sizes[0]], "add_remove", eta, rng),
                correlate(graphs[sizes[0] :], "add_remove", eta, rng),
            ]
        )
        t_base.append(tb)
        t_corr.append(tc)
        t_ours.append(tb + tc)
        if rep == 0:
            fractions["ours"] = realised_noise(out[0][0])
            st = out[0][1]
            fractions["ours (NoiseStats)"] = (st.removed / st.edges, st.added / st.edges)
        del graphs, out
        # Ours, end to end: build_dataset into a fresh folder (generation, noise, stats, files, meta.json).
        target = work / f"er-{rep}"
        spec = DatasetSpec("er", eta, n_train=sizes[0], n_val=sizes[1], seed=rep)
        tt, (ds, built_now) = timed(lambda spec=spec, target=target: build_dataset(spec, target))
        assert built_now, "expected a fresh build"
        t_build.append(tt)
        built_path = ds.path
        # Baseline.
        rng = np.random.default_rng(2000 + rep)
        tb, adjs = timed(lambda rng=rng: dense_er_graphs(n, p, sum(sizes), rng))
        tc, dout = timed(
            lambda rng=rng, adjs=adjs: [
                dense_correlate(adjs[: sizes[0]], "add_remove", eta, rng),
                dense_correlate(adjs[sizes[0] :], "add_remove", eta, rng),
            ]
        )
        t_dbase.append(tb)
        t_dcorr.append(tc)
        t_dense.append(tb + tc)
        if rep == 0:
            fractions["baseline"] = realised_noise(dout[0][0])
            st = dout[0][1]
            fractions["baseline (own count)"] = (st["removed"] / st["edges"], st["added"] / st["edges"])
        del adjs, dout

    # Loading the cached dataset (page cache warm: it was just written).
    assert built_path is not None
    t_load = []
    for _ in range(max(5, args.repeats)):
        tl, loaded = timed(lambda: (open_dataset(built_path).split("train"), open_dataset(built_path).split("val")))
        t_load.append(tl)
    assert len(loaded[0]) == sizes[0] and len(loaded[1]) == sizes[1]
    return {
        "base": (best_of(t_base), best_of(t_dbase)),
        "noise": (best_of(t_corr), best_of(t_dcorr)),
        "total": (best_of(t_ours), best_of(t_dense)),
        "build": best_of(t_build),
        "load": best_of(t_load),
        "load_median": float(np.median(t_load)),
        "fractions": fractions,
        "bytes": sum(f.stat().st_size for f in built_path.rglob("*") if f.is_file()),
    }


def bench_aqsol(args: argparse.Namespace) -> dict[str, Any]:
    eta = args.eta
    rng = np.random.default_rng(7)
    graphs = molecule_like_graphs(args.aqsol, rng)
    n_val = max(1, round(args.aqsol * 998 / 8834))
    train, val = graphs[:-n_val], graphs[-n_val:]
    # The baseline starts from the same base graphs, densified (not timed: ours gets its Graph list for free).
    adjs = [dense_from_graph(g) for g in graphs]
    dtrain, dval = adjs[:-n_val], adjs[-n_val:]
    t_ours, t_dense = [], []
    fractions: dict[str, tuple[float, float]] = {}
    for rep in range(args.repeats):
        print(f"  AQSOL-like repeat {rep + 1}/{args.repeats} (load {load_str()})", flush=True)
        r = np.random.default_rng(3000 + rep)
        t, out = timed(lambda r=r: [correlate(train, "add", eta, r), correlate(val, "add", eta, r)])
        t_ours.append(t)
        r = np.random.default_rng(4000 + rep)
        t, dout = timed(lambda r=r: [dense_correlate(dtrain, "add", eta, r), dense_correlate(dval, "add", eta, r)])
        t_dense.append(t)
        if rep == 0:
            fractions["ours"] = realised_noise(out[0][0])
            fractions["baseline"] = realised_noise(dout[0][0])
    orders = np.array([g.num_nodes for g in graphs])
    edges = np.array([g.num_edges for g in graphs])
    return {
        "noise": (best_of(t_ours), best_of(t_dense)),
        "fractions": fractions,
        "graphs": len(graphs),
        "mean_order": float(orders.mean()),
        "order_range": (int(orders.min()), int(orders.max())),
        "mean_edges": float(edges.mean()),
    }


def profile_er(args: argparse.Namespace) -> None:
    import cProfile
    import pstats

    rng = np.random.default_rng(99)
    prof = cProfile.Profile()
    prof.enable()
    graphs = bernoulli_graphs(100, 8.0 / 99, args.train + args.val, rng)
    correlate(graphs[: args.train], "add_remove", args.eta, rng)
    correlate(graphs[args.train :], "add_remove", args.eta, rng)
    prof.disable()
    print("\ncProfile of ours (ER bernoulli_graphs + correlate), top 15 by own time:")
    pstats.Stats(prof, stream=sys.stdout).strip_dirs().sort_stats("tottime").print_stats(15)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--train", type=int, default=5000, help="ER training pairs (default 5000)")
    ap.add_argument("--val", type=int, default=500, help="ER validation pairs (default 500)")
    ap.add_argument("--aqsol", type=int, default=8834, help="AQSOL-like graphs (default 8834 = 7836 + 998)")
    ap.add_argument("--eta", type=float, default=0.12, help="noise level (default 0.12)")
    ap.add_argument("--repeats", type=int, default=3, help="repeats per measurement, best is reported (default 3)")
    ap.add_argument("--cpu", type=int, default=0, help="core to pin to (default 0); -1 to leave affinity alone")
    ap.add_argument("--tol", type=float, default=0.01, help="allowed |realised - eta| (default 0.01)")
    ap.add_argument("--skip-aqsol", action="store_true", help="only the ER part")
    ap.add_argument("--profile", action="store_true", help="also cProfile one ER bernoulli_graphs + correlate")
    args = ap.parse_args()

    if args.cpu >= 0:
        os.sched_setaffinity(0, {args.cpu})
    print(f"bench_datasets: numpy {np.__version__}, pid {os.getpid()}, cores {sorted(os.sched_getaffinity(0))}")
    print(f"OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}, repeats {args.repeats} (best reported)")
    load_start = load_str()
    print(f"load average (1/5/15 min) at start: {load_start}")

    work = Path(tempfile.mkdtemp(prefix="gaptui-bench-ds-"))
    try:
        t0 = time.perf_counter()
        er = bench_er(args, work)
        aq = None if args.skip_aqsol else bench_aqsol(args)
        elapsed = time.perf_counter() - t0
    finally:
        shutil.rmtree(work, ignore_errors=True)
    load_end = load_str()

    pairs = args.train + args.val
    rows = []
    for key, label in (("base", "base graphs"), ("noise", "noise + permutation"), ("total", "total")):
        ours, dense = er[key]
        rows.append([f"ER {label}", fmt_s(ours), fmt_s(dense), f"{dense / ours:6.1f}x"])
    rows.append(
        [
            "ER build_dataset (+files)",
            fmt_s(er["build"]),
            fmt_s(er["total"][1]),
            f"{er['total'][1] / er['build']:6.1f}x",
        ]
    )
    if aq is not None:
        ours, dense = aq["noise"]
        rows.append(["AQSOL-like noise + perm", fmt_s(ours), fmt_s(dense), f"{dense / ours:6.1f}x"])
    table(
        f"Generation, ER(100, 8) {args.train} + {args.val} pairs, eta {args.eta:g} (best of {args.repeats}, one core)",
        ["stage", "ours", "dense baseline", "speed-up"],
        rows,
    )
    if aq is not None:
        lo, hi = aq["order_range"]
        print(
            f"AQSOL-like set: {aq['graphs']} graphs, order {lo}..{hi} (mean {aq['mean_order']:.1f}), "
            f"mean |E| {aq['mean_edges']:.1f}, add-only noise"
        )
    print(
        f"Load cached dataset ({pairs} pairs, {er['bytes'] / 1e6:.1f} MB on disk, warm page cache): "
        f"best {fmt_s(er['load']).strip()}, median {fmt_s(er['load_median']).strip()}"
    )

    checks = []
    frac_rows = []
    for part, fr in (("ER", er["fractions"]), ("AQSOL-like", aq["fractions"] if aq else {})):
        for who, (rem, add) in fr.items():
            expect_rem = args.eta if part == "ER" else 0.0
            ok = abs(rem - expect_rem) <= args.tol and abs(add - args.eta) <= args.tol
            checks.append(ok)
            frac_rows.append([f"{part} {who}", f"{rem:.4f}", f"{add:.4f}", "ok" if ok else "OFF"])
    table(
        f"Realised noise (train split; expected removed {args.eta:g} for ER / 0 for add-only, added {args.eta:g})",
        ["implementation", "removed", "added", f"|d| <= {args.tol:g}"],
        frac_rows,
    )

    er_ratio = er["total"][1] / er["total"][0]
    targets = [
        ("ER bernoulli_graphs + correlate < 3 s", er["total"][0] < 3.0, fmt_s(er["total"][0]).strip()),
        ("ER build_dataset incl. files < 3 s", er["build"] < 3.0, fmt_s(er["build"]).strip()),
        ("ER >= 10x faster than dense baseline", er_ratio >= 10, f"{er_ratio:.1f}x"),
    ]
    if aq is not None:
        aq_ratio = aq["noise"][1] / aq["noise"][0]
        targets.append(("AQSOL-like >= 10x faster than dense baseline", aq_ratio >= 10, f"{aq_ratio:.1f}x"))
    targets.append(("load 5,500 pairs well under 1 s (< 0.1 s)", er["load"] < 0.1, fmt_s(er["load"]).strip()))
    targets.append(("realised noise fractions within tolerance", all(checks), f"{sum(checks)}/{len(checks)}"))
    table(
        "Summary",
        ["target", "value", "met"],
        [[name, value, "yes" if ok else "NO"] for name, ok, value in targets],
    )
    if args.profile:
        profile_er(args)
    print(f"\nload average (1/5/15 min): start {load_start}, end {load_end}; wall time {elapsed:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
