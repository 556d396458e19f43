"""The training-strategy study of docs/properties.md from a workspace that ran ``--preset properties-strategies``.

``python benchmarks/properties_strategies_summary.py WORKSPACE``: per strategy and dimension, each strategy's run
paired with the standard run of the same property, pooling, seed and dimension (U over the sizes both were tested
on: for progressive the sizes above base + k), the mean difference, wins and a Wilcoxon signed-rank p; then the
standard poolings' mean R per dimension (R among the standard runs) and its spread over the dimensions.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from scipy import stats

from engine.properties.definitions import suite_sizes
from engine.properties.scores import mean_u, r_scores, table2
from gaptui.history.store import History
from gaptui.workspace import Workspace

DIMS = ("generalisation", "sensitivity", "robustness")


def u_over(metrics: dict, sizes: list[int]) -> float:
    """U over ``sizes`` from a run's per-size accuracies."""
    n = np.array([s for s in sizes if f"acc_n{s}" in metrics], dtype=float)
    acc = np.array([metrics[f"acc_n{int(s)}"] for s in n])
    return float((acc * n).sum() / n.sum())


def main(workspace: Path) -> None:
    with History(Workspace(workspace)) as history:
        records = [r for r in history.by_hash().values() if r["status"] == "done" and r["task"] == "properties"]
    by = {}
    for r in records:
        a = r["axes"]
        cell = (a.get("strategy", "standard"), a["property"], a["pooling"].split("/")[0], r["seed"], a["dimension"])
        by[cell] = (r["metrics"], r["spec"])
    print("| strategy | dimension | pairs | standard U | strategy U | mean diff (points) | wins | Wilcoxon p |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for strategy in ("finetune_perturb", "progressive", "adversarial"):
        for dim in DIMS:
            pairs = []
            for (strat, prop, pooling, seed, d), (metrics, spec) in by.items():
                base = by.get(("standard", prop, pooling, seed, d))
                if strat != strategy or d != dim or base is None:
                    continue
                sizes = suite_sizes(prop)[: spec.get("sizes")]
                sizes = sizes[1 + spec.get("progressive_k", 2) :] if strategy == "progressive" else sizes[1:]
                pairs.append((u_over(base[0], sizes), u_over(metrics, sizes)))
            if not pairs:
                continue
            u = np.array(pairs)
            diff = u[:, 1] - u[:, 0]
            p = stats.wilcoxon(diff).pvalue if np.any(diff) else 1.0
            row = [strategy, dim, len(diff), f"{100 * u[:, 0].mean():.1f}", f"{100 * u[:, 1].mean():.1f}"]
            row += [f"{100 * diff.mean():+.1f}", f"{int((diff > 0).sum())}/{len(diff)}", f"{p:.3f}"]
            print("| " + " | ".join(map(str, row)) + " |")
    runs = [
        (r["axes"]["pooling"], r["axes"]["property"], r["axes"]["dimension"], r["metrics"]["u_score"])
        for r in records
        if "strategy" not in r["axes"]
    ]
    t2 = table2(r_scores(mean_u(runs)))
    print("\n| pooling (standard runs) | generalisation | sensitivity | robustness | spread (max - min) |")
    print("|---|---:|---:|---:|---:|")
    for pooling in sorted({p for p, _ in t2}):
        values = [t2[(pooling, d)] for d in DIMS]
        print(f"| {pooling} | " + " | ".join(f"{v:.3f}" for v in values) + f" | {max(values) - min(values):.3f} |")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "gaptui-runs"))
