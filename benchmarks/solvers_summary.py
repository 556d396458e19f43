"""Per-pair summary of an alignment workspace: accuracy with its spread over pairs, solved pairs, and what the
missed pairs keep, for every row (trained models, model + search, solvers) of one dataset.

Run from the repository root on a workspace whose runs wrote ``val_pairs.csv`` (gaptui after the solvers)::

    python benchmarks/solvers_summary.py WORKSPACE                 # every noise level
    python benchmarks/solvers_summary.py WORKSPACE --noise 0.12

Printed per noise level, one Markdown table: per row the node-weighted LAP accuracy with a 95 % bootstrap interval
over the validation pairs (2,000 resamples of the pairs; the spread a reader should expect from another draw of
pairs, not from another training seed), the share of pairs solved (LAP accuracy >= 90 %), the orbit accuracy, the
edge overlap over all pairs and over the pairs not solved (edges kept by the predicted alignment over edges kept by
the planted one: below 1, the truth keeps more edges, so search, not the task, failed), and seconds per pair.
"""

from __future__ import annotations

import argparse
import csv
import json
from collections import defaultdict
from pathlib import Path

import numpy as np


def read_pairs(path: Path) -> dict[str, np.ndarray]:
    with open(path) as fh:
        rows = list(csv.DictReader(fh))
    out = {}
    for key in ("nodes", "lap_acc", "orbit_acc", "kept_edges", "planted_kept_edges", "seconds"):
        if rows and key in rows[0]:
            out[key] = np.array([float(r[key]) if r[key] != "" else np.nan for r in rows])
    return out


def interval(nodes: np.ndarray, right: np.ndarray, rng: np.random.Generator) -> tuple[float, float]:
    """95 % bootstrap interval of the node-weighted accuracy over resampled pairs."""
    picks = rng.integers(0, nodes.size, size=(2000, nodes.size))
    acc = right[picks].sum(axis=1) / nodes[picks].sum(axis=1)
    return float(np.percentile(acc, 2.5)), float(np.percentile(acc, 97.5))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workspace", type=Path)
    parser.add_argument("--noise", type=float, default=None)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    by_noise: dict[float, list[tuple[str, dict[str, np.ndarray], dict]]] = defaultdict(list)
    for run in sorted((args.workspace / "runs").iterdir()):
        result_path, pairs_path = run / "result.json", run / "val_pairs.csv"
        if not (result_path.exists() and pairs_path.exists()):
            continue
        result = json.loads(result_path.read_text())
        if result.get("status") != "done":
            continue
        spec = result["spec"]
        noise = float(spec["dataset"]["noise"])
        if args.noise is not None and abs(noise - args.noise) > 1e-9:
            continue
        options = ",".join(f"{k}={v}" for k, v in sorted((spec.get("model_kwargs") or {}).items()))
        label = spec["model"] + (f"[{options}]" if options else "")
        label += f"+{spec['decoder']}" if spec.get("decoder") else ""
        by_noise[noise].append((label, read_pairs(pairs_path), result["metrics"]))
    for noise in sorted(by_noise):
        print(f"\nnoise {noise:g}\n")
        head = "| row | LAP acc % (95 % CI over pairs) | solved % | orbit acc % | edge overlap"
        print(f"{head} | overlap, missed | s/pair |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        for label, pairs, metrics in sorted(by_noise[noise], key=lambda r: -r[2].get("val_lap_acc", 0)):
            nodes, acc = pairs["nodes"], pairs["lap_acc"]
            right = acc * nodes
            lo, hi = interval(nodes, right, rng)
            missed = acc < 0.9
            kept, planted = pairs["kept_edges"], pairs["planted_kept_edges"]
            overlap_missed = kept[missed].sum() / planted[missed].sum() if missed.any() else float("nan")
            seconds = f"{np.nanmean(pairs['seconds']):.3f}" if "seconds" in pairs else "–"
            print(
                f"| {label} | {right.sum() / nodes.sum():.1%} ({lo:.1%}–{hi:.1%}) | {(~missed).mean():.0%} "
                f"| {metrics.get('val_orbit_acc', float('nan')):.1%} | {kept.sum() / planted.sum():.2f} "
                f"| {overlap_missed:.2f} ({missed.sum()} pairs) | {seconds} |"
            )


if __name__ == "__main__":
    main()
