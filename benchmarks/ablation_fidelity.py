"""Recipe ablation: what each training option does to each model and to the model ranking.

Run from the repository root at lowest priority, one process per core, each with a share of the models, on the
same ``--out`` (one folder per noise level), then tabulate them together::

    V=legacy,ngab,gaptui,paper,ngab-optimiser,ngab-model,ngab-degree,act-norm-gelu
    A="--noise 0.12 --seeds 0,1,2 --variants $V --out ablation/n12"
    nice -n 19 taskset -c 0 python benchmarks/ablation_fidelity.py $A --models gcn,gat,ggnn2 &
    nice -n 19 taskset -c 1 python benchmarks/ablation_fidelity.py $A --models gin,gatedgcn,gatv2
    python benchmarks/ablation_fidelity.py $A --models gcn,gin,ggnn2,gatedgcn,gat,gatv2 --report

``--probe`` times one epoch per (variant, model) and stops. The defaults are the protocol the ``ngab`` comparison
was measured on: ER(100, 8), 1,000 / 200 pairs, batch 100, 30 epochs, validation LAP accuracy after the last.

Variants. The four recipes (:mod:`engine.alignment.recipes`) as they are: ``gaptui`` (the default), ``ngab``,
``paper`` and ``legacy`` (gaptui's defaults before recipes; ``ours`` is the same runs under their older name).
Then single changes, each on ``legacy``: the parts of ``ngab`` (``ngab-model``: constant inputs, a ``GCNConv``
first layer and ``GraphNorm(GELU(conv))`` blocks; ``ngab-optimiser``: constant 1e-3, weight decay 0.08, no
warm-up; ``ngab-degree``: ``ngab`` with degree inputs and a linear input layer; ``act-norm-gelu``, ``gelu``,
``act-norm``: the block alone), the schedules (``cosine``, ``constant-3e-3``) and the paper's three options
(``paper`` all three, ``conv-input``, ``whole-batch-norm``, ``ones``).

Every run is the engine worker (``engine.worker.main``, what ``python -m engine`` runs for gaptui's scheduler)
on a spec written here, called in this process so that torch and PyG are imported once (a fresh interpreter
costs minutes of start-up on a loaded machine at nice 19); torch is pinned to one thread, runs go one after the
other. Each run folder is a normal run folder: finished runs are skipped and cut-short ones resume from their
checkpoint when the script is started again on the same ``--out``.

The printed tables give, per variant, each model's median final validation LAP accuracy (percent) over the
seeds, the spread best - worst of those medians, the model order and the Kendall tau of that order against the
``ours`` order, then the same accuracies as differences from ``ours``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

# One thread, set before torch is imported.
os.environ.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from engine import worker  # noqa: E402
from engine.alignment.spec import RunSpec  # noqa: E402
from gaptui.analysis.reference import load_reference  # noqa: E402
from gaptui.analysis.statistics import kendall_tau  # noqa: E402

torch.set_num_threads(1)

#: Model names the ablation accepts besides the registered ones: the paper package's GatedGCN (PyG's
#: GatedGraphConv, two propagation steps per block; Table C.2's 59,680 parameters at width 48).
ALIASES: dict[str, tuple[str, dict[str, Any]]] = {"ggnn2": ("ggnn", {"steps": 2})}

#: The ``ngab`` package's optimiser as its models were measured: AdamW at a constant 1e-3, weight decay 0.08.
NGAB_OPTIMISER: dict[str, Any] = {"schedule": "constant", "lr": 1e-3, "warmup_steps": 0, "weight_decay": 0.08}
#: The ``ngab`` package's model: constant inputs, a GCNConv first layer then GraphNorm, blocks
#: ``h + GraphNorm(GELU(conv(h)))``.
NGAB_MODEL: dict[str, Any] = {"features": "ones", "input_layer": "gcn", "activation": "gelu", "block": "act-norm"}
#: In the order they run (seed-major). A variant is spec fields over ``legacy`` (a spec naming no recipe).
VARIANTS: dict[str, dict[str, Any]] = {
    "legacy": {"recipe": "legacy"},
    "gaptui": {"recipe": "gaptui"},
    "ours": {},
    "paper": {"features": "ones", "input_layer": "conv", "norm": "whole-batch"},
    "conv-input": {"input_layer": "conv"},
    "whole-batch-norm": {"norm": "whole-batch"},
    "ones": {"features": "ones"},
    # the authors' newer package, whole and by halves, and each of its parts on gaptui's former defaults
    "ngab": {**NGAB_MODEL, **NGAB_OPTIMISER},
    "ngab-model": NGAB_MODEL,
    "ngab-optimiser": NGAB_OPTIMISER,
    "ngab-degree": {**NGAB_MODEL, **NGAB_OPTIMISER, "features": "degree", "input_layer": "linear"},
    "ngab-degree-gcn": {**NGAB_MODEL, **NGAB_OPTIMISER, "features": "degree"},
    "act-norm-gelu": {"activation": "gelu", "block": "act-norm"},
    "gelu": {"activation": "gelu"},
    "act-norm": {"block": "act-norm"},
    "cosine": {"schedule": "cosine", "warmup_steps": 30},
    "constant-3e-3": {"schedule": "constant", "warmup_steps": 30},
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("ablation-fidelity"), help="folder of runs and results")
    parser.add_argument(
        "--models", default="gcn,gat,gatv2", help="comma-separated model names (ggnn2: ggnn with steps=2)"
    )
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated variants (see above)")
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated training seeds")
    parser.add_argument("--noise", type=float, default=0.12)
    parser.add_argument("--n", type=int, default=100, help="ER order")
    parser.add_argument("--degree", type=float, default=8.0, help="ER average degree")
    parser.add_argument("--train", type=int, default=1000, help="training pairs")
    parser.add_argument("--val", type=int, default=200, help="validation pairs")
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--eval-every", type=int, default=5)
    parser.add_argument("--probe", action="store_true", help="time one epoch per (variant, model) and stop")
    parser.add_argument("--report", action="store_true", help="only tabulate the runs that already finished")
    return parser.parse_args(argv)


def make_spec(args: argparse.Namespace, variant: str, model: str, seed: int, epochs: int) -> RunSpec:
    dataset = {
        "base": "er",
        "noise": args.noise,
        "n_train": args.train,
        "n_val": args.val,
        "params": {"n": args.n, "degree": args.degree},
    }
    name, options = ALIASES.get(model, (model, {}))
    return RunSpec.from_dict(
        {
            "dataset": dataset,
            "model": name,
            "model_kwargs": options,
            "epochs": epochs,
            "batch_size": args.batch_size,
            "eval_every": min(args.eval_every, epochs),
            "seed": seed,
            "device": "cpu",
            "datasets_dir": str((args.out / "datasets").resolve()),
            **VARIANTS[variant],
        },
        where=f"ablation {variant}/{model}",
    )


def run(spec: RunSpec, folder: Path) -> dict[str, Any]:
    """Run one spec with the engine worker (skipped when ``folder`` already holds its finished result)."""
    folder.mkdir(parents=True, exist_ok=True)
    spec_path = folder / "spec.json"
    spec_path.write_text(json.dumps(spec.to_dict(), indent=2, sort_keys=True))
    code = worker.main(["--spec", str(spec_path), "--out", str(folder), "--quiet"])
    if code != 0:
        raise SystemExit(f"error: run {folder} failed (exit {code}); see {folder / 'log.txt'}")
    return json.loads((folder / "result.json").read_text())


def epoch_seconds(folder: Path) -> list[float]:
    events = [json.loads(line) for line in (folder / "events.jsonl").read_text().splitlines() if line.strip()]
    return [e["seconds"] for e in events if e.get("event") == "epoch"]


def curve(folder: Path) -> list[tuple[int, float]]:
    events = [json.loads(line) for line in (folder / "events.jsonl").read_text().splitlines() if line.strip()]
    return [(e["epoch"], 100 * e["val_lap_acc"]) for e in events if e.get("event") == "eval"]


def probe(args: argparse.Namespace, variants: list[str], models: list[str]) -> None:
    print(f"one epoch of {args.train} pairs, batch {args.batch_size}, plus one evaluation of {args.val} pairs")
    total = 0.0
    for variant in variants:
        for model in models:
            spec = make_spec(args, variant, model, 0, 1)
            folder = args.out / "probe" / variant / model
            t0 = time.perf_counter()
            run(spec, folder)
            wall = time.perf_counter() - t0
            train_s = epoch_seconds(folder)[0]
            total += train_s
            print(f"{variant:>18} {model:>9}: train epoch {train_s:6.2f} s, whole run {wall:6.2f} s")
    runs = len(args.seeds.split(","))
    estimate = total * args.epochs * runs / 60
    print(f"estimated training time of the ablation: {estimate:.0f} min (+ evaluation and start-up)")


#: The paper's name of each model the ablation runs, for the Table D.3 comparison; our ``gatedgcn`` (Bresson &
#: Laurent's ResGatedGraphConv) is not the paper's "GatedGCN" (PyG's GatedGraphConv with two steps: ``ggnn2``).
PAPER_NAMES = {"gcn": "gcn", "gin": "gin", "ggnn2": "gatedgcn", "gat": "gat", "gatv2": "gatv2"}


def paper_values(args: argparse.Namespace, models: list[str]) -> dict[str, float]:
    """Table D.3's median accuracy (percent) of each model at the ablation's noise on ER; empty for other noises.

    The paper's ER is ER(100, 8); only the ranking is compared, as its protocol (300 epochs, 5,000 pairs) is not
    the ablation's.
    """
    if (args.n, args.degree) != (100, 8.0):
        return {}
    reference = load_reference("paper")
    cells = {m: reference.cell("er", PAPER_NAMES[m], args.noise) for m in models if m in PAPER_NAMES}
    return {m: 100 * cell.median for m, cell in cells.items() if cell is not None}


def median_table(
    results: dict[str, dict[str, list[float]]],
    variants: list[str],
    models: list[str],
    paper: dict[str, float] | None = None,
) -> list[str]:
    """Markdown rows: per variant, median accuracy per model, spread, order, tau against the first variant and,
    when ``paper`` holds Table D.3's values, tau against the paper's order over the models it has (first row).

    Cells without a finished run show as "-" and are left out of that variant's spread, order and tau.
    """
    paper = paper or {}
    medians = {v: {m: statistics.median(results[v][m]) for m in models if results[v][m]} for v in variants}
    base = medians[variants[0]]
    header = " | spread best - worst | order | tau vs " + variants[0] + " |" + (" tau vs paper |" if paper else "")
    lines = ["| variant | " + " | ".join(models) + header, "|---|" + "---|" * (len(models) + 3 + bool(paper))]
    if paper:
        cells = [f"{paper[m]:.1f}" if m in paper else "-" for m in models]
        order = " > ".join(sorted(paper, key=lambda m: -paper[m]))
        lines.append("| Table D.3 (300 epochs) | " + " | ".join(cells) + f" | - | {order} | - | +1.00 |")
    for v in variants:
        row = medians[v]
        cells = []
        for m in models:
            values = results[v][m]
            span = f" ({min(values):.1f}-{max(values):.1f})" if len(values) > 1 else ""
            cells.append(f"{row[m]:.1f}{span}" if values else "-")
        order = sorted(row, key=lambda m: -row[m])
        spread = f"{max(row.values()) - min(row.values()):.1f}" if len(row) > 1 else "-"
        common = [m for m in models if m in row and m in base]
        tau = kendall_tau([row[m] for m in common], [base[m] for m in common]) if len(common) > 1 else float("nan")
        tau_text = "-" if tau != tau else f"{tau:+.2f}"
        line = f"| {v} | " + " | ".join(cells) + f" | {spread} | {' > '.join(order)} | {tau_text} |"
        if paper:
            shared = [m for m in models if m in row and m in paper]
            tau = kendall_tau([row[m] for m in shared], [paper[m] for m in shared]) if len(shared) > 1 else math.nan
            line += " - |" if tau != tau else f" {tau:+.2f} |"
        lines.append(line)
    lines += [
        "",
        "| variant | " + " | ".join(f"{m} - {variants[0]}" for m in models) + " |",
        "|---|" + "---|" * len(models),
    ]
    for v in variants[1:]:
        diffs = [f"{medians[v][m] - base[m]:+.1f}" if m in medians[v] and m in base else "-" for m in models]
        lines.append(f"| {v} | " + " | ".join(diffs) + " |")
    return lines


def time_table(records: list[dict[str, Any]], variants: list[str], models: list[str]) -> list[str]:
    """Markdown rows: per variant and model, the median over seeds of the training seconds until the validation
    accuracy first reached the model's target, the lowest final median of any variant (so every variant reaches
    it); "-" when a seed never did at an evaluation (the curves are evaluated every ``--eval-every`` epochs)."""
    finals: dict[str, float] = {}
    for m in models:
        medians = [
            statistics.median(vals)
            for v in variants
            if (vals := [r["val_lap_acc"] for r in records if r["variant"] == v and r["model"] == m])
        ]
        if medians:
            finals[m] = min(medians)
    head = " | ".join(f"{m} (to {finals[m]:.1f}%)" if m in finals else m for m in models)
    lines = ["Training seconds to reach each model's target accuracy, median over seeds:", ""]
    lines += [f"| variant | {head} |", "|---|" + "---|" * len(models)]
    for v in variants:
        cells = []
        for m in models:
            times = []
            for r in (r for r in records if r["variant"] == v and r["model"] == m):
                reached = [epoch for epoch, acc in r["curve"] if acc >= finals[m] - 1e-9]
                if reached:
                    times.append(sum(r["epoch_seconds"][: reached[0]]))
            cells.append(f"{statistics.median(times):.0f}" if times else "-")
        lines.append(f"| {v} | " + " | ".join(cells) + " |")
    return lines


def finished(spec: RunSpec, folder: Path) -> dict[str, Any] | None:
    """The result of ``spec`` in ``folder`` when that run finished, else None."""
    try:
        result = json.loads((folder / "result.json").read_text())
    except (OSError, ValueError):
        return None
    return result if result.get("status") == "done" and result.get("run") == spec.hash() else None


def run_seconds(folder: Path) -> float:
    """Seconds spent training and evaluating (epoch and eval events, over every start of a resumed run)."""
    events = [json.loads(line) for line in (folder / "events.jsonl").read_text().splitlines() if line.strip()]
    return sum(e.get("seconds") or 0.0 for e in events if e.get("event") in ("epoch", "eval"))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        raise SystemExit(f"error: --variants {','.join(unknown)}: known variants are {', '.join(VARIANTS)}")
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    seeds = [int(s) for s in args.seeds.split(",")]
    args.out.mkdir(parents=True, exist_ok=True)
    load0 = os.getloadavg()
    if args.probe:
        probe(args, variants, models)
        return 0
    started = time.perf_counter()
    results: dict[str, dict[str, list[float]]] = {v: {m: [] for m in models} for v in variants}
    records = []
    # Seed-major, so an interrupted ablation still covers every (variant, model) cell once.
    for seed in seeds:
        for variant in variants:
            for model in models:
                spec = make_spec(args, variant, model, seed, args.epochs)
                folder = args.out / "runs" / variant / f"{model}-s{seed}"
                t0 = time.perf_counter()
                result = finished(spec, folder) if args.report else run(spec, folder)
                if result is None:
                    continue
                acc = 100 * result["metrics"]["val_lap_acc"]
                results[variant][model].append(acc)
                records.append(
                    {
                        "variant": variant,
                        "model": model,
                        "seed": seed,
                        "val_lap_acc": acc,
                        "params": result.get("params"),
                        "width": result.get("width"),
                        "curve": curve(folder),
                        "seconds": run_seconds(folder),
                        "epoch_seconds": epoch_seconds(folder),
                    }
                )
                if args.report:
                    continue
                print(f"{variant:>18} {model:>9} seed {seed}: {acc:5.1f}%  ({time.perf_counter() - t0:5.0f} s)")
                sys.stdout.flush()
    wall = time.perf_counter() - started
    protocol = (
        f"ER(n={args.n}, degree={args.degree:g}) at noise {args.noise:g}, {args.train} / {args.val} pairs, "
        f"{args.epochs} epochs, batch {args.batch_size}, seeds {args.seeds}; final validation LAP accuracy, "
        "median over seeds (min-max in brackets)"
    )
    lines = [protocol, "", *median_table(results, variants, models, paper_values(args, models)), ""]
    lines += [*time_table(records, variants, models), ""]
    load1 = os.getloadavg()[0]
    total = sum(r["seconds"] for r in records) / 60
    lines.append(f"{len(records)} runs, {total:.0f} min of training and evaluation in all (one thread each)")
    if not args.report:
        lines.append(f"wall time {wall / 60:.1f} min; load average {load0[0]:.1f} at start, {load1:.1f} at end")
    text = "\n".join(lines)
    print()
    print(text)
    if records:  # also in --report mode: the table of runs that several processes (say, one per core) finished
        (args.out / "results.json").write_text(json.dumps({"protocol": protocol, "runs": records}, indent=1))
        (args.out / "table.md").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
