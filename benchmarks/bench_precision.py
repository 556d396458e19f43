"""Accuracy and epoch time, fp32 against bf16, of runs as gaptui trains them: what the ``auto`` precision is chosen on.

Run from the repository root (two cores: two runs at a time, each on its own core and one torch thread)::

    python benchmarks/bench_precision.py --out bench-precision            # every model, ER(100, 8), 4% and 12%
    python benchmarks/bench_precision.py --out bench-precision --report   # the tables again, from the run folders
    python benchmarks/bench_precision.py --out bench-precision --families gape,properties   # their smoke presets

**Alignment.** Every (model, noise, seed) cell is trained twice, as two worker runs (``python -m engine``; the
seeds and precisions of a (model, noise) packed in one process, trained in turn epoch by epoch) whose specs differ
only in ``precision = "fp32"`` / ``"bf16"``: ER(--n, --degree) at each --noise, --train / --val
pairs, --epochs, batch --batch-size, ``compile = "off"``. The table gives per model and noise the final
validation LAP accuracy, mean and sample standard deviation over the seeds, of each precision, their difference,
whether it is within the seed spread (|mean bf16 - mean fp32| <= the larger of the two standard deviations),
and the median training-epoch seconds of each (from the runs' ``epoch`` events, the first epoch left out) with
the bf16 / fp32 speed-up; then Kendall's tau between the fp32 and the bf16 ranking of the models, per noise level.

**GAPE and the property suite** (``--families``): the grids of ``gape-smoke`` and ``properties-smoke`` with the
seeds --seeds, once per precision (the preset's ``[run] precision``), run by ``gaptui run`` in a workspace of
their own; the table compares the final validation MAE per PE (gape) and the U score per (property, pooling,
dimension) (properties), mean over seeds, with the same seed-spread rule.

Run folders are kept under --out: a second invocation skips what is done (``--report`` runs nothing).
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import statistics
import subprocess
import sys
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import tomllib

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

PRECISIONS = ("fp32", "bf16")
SMOKE = {"gape": ("gape-smoke", "val_mae", False), "properties": ("properties-smoke", "u_score", True)}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("bench-precision"), help="run folders (kept; resumed)")
    parser.add_argument("--models", default="gcn,gin,gatedgcn,ggnn,gat,gatv2")
    parser.add_argument("--noise", default="0.04,0.12", help="comma-separated noise levels")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--n", type=int, default=100)
    parser.add_argument("--degree", type=float, default=8.0)
    parser.add_argument("--train", type=int, default=200, help="training pairs")
    parser.add_argument("--val", type=int, default=50, help="validation pairs")
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=25)
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time, each pinned to one core")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per run")
    parser.add_argument("--families", default="alignment", help="alignment, gape, properties (comma-separated)")
    parser.add_argument("--report", action="store_true", help="print the tables from the run folders; run nothing")
    return parser.parse_args(argv)


def _items(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


# ------------------------------------------------------------------------------------------------ running


def _env(threads: int) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GAPTUI_OFFLINE": "1"}
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[var] = str(threads)
    return env


def _pinned(command: list[str], cores: queue.Queue[int], threads: int) -> int:
    """Run ``command`` on a free core (``taskset``) and give the core back."""
    core = cores.get()
    try:
        done = subprocess.run(["taskset", "-c", str(core), *command], env=_env(threads), capture_output=True, text=True)
        if done.returncode != 0:
            print(f"failed ({done.returncode}): {' '.join(command)}\n{done.stderr[-2000:]}", file=sys.stderr)
        return done.returncode
    finally:
        cores.put(core)


def _cores(jobs: int) -> queue.Queue[int]:
    cores: queue.Queue[int] = queue.Queue()
    available = sorted(os.sched_getaffinity(0))
    for core in available[:jobs]:
        cores.put(core)
    return cores


def alignment_spec(args: argparse.Namespace, model: str, noise: float, seed: int, precision: str) -> dict[str, Any]:
    dataset = {"base": "er", "noise": noise, "n_train": args.train, "n_val": args.val}
    dataset["params"] = {"n": args.n, "degree": args.degree}
    return {
        "dataset": dataset,
        "model": model,
        "epochs": args.epochs,
        "batch_size": args.batch_size,
        "compile": "off",
        "eval_every": args.epochs,  # the final evaluation only: what is compared
        "precision": precision,
        "seed": seed,
        "device": "cpu",
        "datasets_dir": str((args.out / "datasets").resolve()),
    }


def alignment_cells(args: argparse.Namespace) -> list[tuple[str, float, int, str]]:
    # Seed-major, each cell's two precisions one after the other: a run of either meets the same background.
    return [
        (model, float(noise), int(seed), precision)
        for seed in _items(args.seeds)
        for noise in _items(args.noise)
        for model in _items(args.models)
        for precision in PRECISIONS
    ]


def run_folder(args: argparse.Namespace, model: str, noise: float, seed: int, precision: str) -> Path:
    percent = f"{100 * noise:g}".replace(".", "p")
    return args.out / "alignment" / f"{model}-eta{percent}-s{seed}-{precision}"


def run_alignment(args: argparse.Namespace) -> None:
    from engine.alignment.datasets import DatasetSpec, build_dataset

    # The datasets first, once, in this process (two runs building one dataset at once would race).
    for noise in _items(args.noise):
        spec = DatasetSpec(
            "er", float(noise), n_train=args.train, n_val=args.val, params={"n": args.n, "degree": args.degree}
        )
        build_dataset(spec, args.out / "datasets")
    cores = _cores(args.jobs)
    # One worker process per (model, noise): its seeds x precisions packed (python -m engine with several
    # --spec), trained in turn epoch by epoch, so the fp32 and bf16 epochs of a cell meet the same background.
    packs: dict[tuple[str, float], list[str]] = {}
    for cell in alignment_cells(args):
        out = run_folder(args, *cell)
        if _result(out).get("status") == "done":
            continue
        out.parent.mkdir(parents=True, exist_ok=True)
        path = out.parent / f"{out.name}.spec.json"
        path.write_text(json.dumps(alignment_spec(args, *cell)))
        packs.setdefault(cell[:2], []).extend(["--spec", str(path), "--out", str(out)])
    todo = [[sys.executable, "-m", "engine", *pack, "--quiet"] for pack in packs.values()]
    print(f"alignment: {sum(len(p) for p in packs.values()) // 4} runs in {len(todo)} worker processes, "
          f"{args.jobs} at a time", flush=True)  # fmt: skip
    with ThreadPoolExecutor(args.jobs) as pool:
        list(pool.map(lambda command: _pinned(command, cores, args.threads), todo))


def run_family(args: argparse.Namespace, task: str) -> None:
    from gaptui.presets import dump_document

    name = SMOKE[task][0]
    raw = tomllib.loads((ROOT / "presets" / f"{name}.toml").read_text())
    for precision in PRECISIONS:
        ws = args.out / task / precision
        ws.mkdir(parents=True, exist_ok=True)
        body = dict(raw, seeds=[int(s) for s in _items(args.seeds)], run={**raw.get("run", {}), "precision": precision})
        path = ws / f"{name}-{precision}.toml"
        path.write_text(dump_document(body))
        command = [sys.executable, "-m", "gaptui", "run", "--preset", str(path), "-w", str(ws)]
        command += ["--cpu-jobs", str(args.jobs)]
        print(f"{task} {precision}: gaptui run --preset {path.name}", flush=True)
        done = subprocess.run(command, env=_env(args.threads), capture_output=True, text=True)
        if done.returncode != 0:
            print(f"failed ({done.returncode}):\n{done.stderr[-2000:]}", file=sys.stderr)


# ------------------------------------------------------------------------------------------------ the tables


def _result(out: Path) -> dict[str, Any]:
    try:
        return json.loads((out / "result.json").read_text())
    except (OSError, ValueError):
        return {}


def _epoch_seconds(out: Path) -> list[float]:
    seconds = []
    try:
        lines = (out / "events.jsonl").read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        event = json.loads(line)
        if event.get("event") == "epoch":
            seconds.append(float(event["seconds"]))
    return seconds[1:] if len(seconds) > 1 else seconds


def _spread(values: list[float]) -> tuple[float, float]:
    mean = statistics.fmean(values) if values else float("nan")
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return mean, std


def _within(a: list[float], b: list[float]) -> tuple[float, bool]:
    (ma, sa), (mb, sb) = _spread(a), _spread(b)
    return mb - ma, abs(mb - ma) <= max(sa, sb)


def kendall_tau(a: Iterable[float], b: Iterable[float]) -> float:
    from scipy.stats import kendalltau

    return float(kendalltau(list(a), list(b)).statistic)


def report_alignment(args: argparse.Namespace) -> dict[str, Any]:
    rows = []
    means: dict[tuple[float, str], dict[str, float]] = {}
    for noise in (float(x) for x in _items(args.noise)):
        for model in _items(args.models):
            acc: dict[str, list[float]] = {p: [] for p in PRECISIONS}
            seconds: dict[str, list[float]] = {p: [] for p in PRECISIONS}
            for seed in (int(s) for s in _items(args.seeds)):
                for precision in PRECISIONS:
                    out = run_folder(args, model, noise, seed, precision)
                    result = _result(out)
                    if result.get("status") == "done":
                        acc[precision].append(100 * result["metrics"]["val_lap_acc"])
                        seconds[precision] += _epoch_seconds(out)
            if not all(acc.values()):
                continue
            diff, ok = _within(acc["fp32"], acc["bf16"])
            fp32_s, bf16_s = (statistics.median(seconds[p]) for p in PRECISIONS)
            means[(noise, model)] = {p: _spread(acc[p])[0] for p in PRECISIONS}
            rows.append((model, noise, acc, diff, ok, fp32_s, bf16_s))
    print(
        f"\nAlignment: ER({args.n}, {args.degree:g}), {args.train} / {args.val} pairs, {args.epochs} epochs, batch "
        f"{args.batch_size}, compile off, seeds {args.seeds}, {args.jobs} run(s) at a time on one core and "
        f"{args.threads} thread(s) each. Validation LAP accuracy after the last epoch (percent, mean ± sample std "
        "over seeds); epoch seconds: median over seeds and epochs (the first left out).\n"
    )
    print("| model | noise | LAP acc fp32 | LAP acc bf16 | bf16 - fp32 | within seed spread | epoch s fp32 | "
          "epoch s bf16 | bf16 speed-up |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for model, noise, acc, diff, ok, fp32_s, bf16_s in rows:
        cells = [f"{_spread(acc[p])[0]:.1f} ± {_spread(acc[p])[1]:.1f}" for p in PRECISIONS]
        print(
            f"| {model} | {100 * noise:g}% | {cells[0]} | {cells[1]} | {diff:+.1f} | {'yes' if ok else 'NO'} | "
            f"{fp32_s:.2f} | {bf16_s:.2f} | {fp32_s / bf16_s:.2f}x |"
        )
    taus = {}
    for noise in (float(x) for x in _items(args.noise)):
        models = [m for m in _items(args.models) if (noise, m) in means]
        if len(models) > 1:
            taus[noise] = kendall_tau(
                (means[(noise, m)]["fp32"] for m in models), (means[(noise, m)]["bf16"] for m in models)
            )
    print("\nKendall tau of the model ranking, fp32 vs bf16: " + ", ".join(
        f"{100 * noise:g}% noise {tau:.2f}" for noise, tau in taus.items()))  # fmt: skip
    equal = bool(rows) and all(ok for *_, ok, _, _ in rows)
    faster = bool(rows) and all(bf16_s < fp32_s for *_, fp32_s, bf16_s in rows)
    print(
        f"every accuracy difference within the seed spread: {'yes' if equal else 'no'}; "
        f"bf16 faster per epoch for every model: {'yes' if faster else 'no'}"
    )
    return {"equal": equal, "faster": faster, "rows": len(rows)}


def report_family(args: argparse.Namespace, task: str) -> None:
    from gaptui.history.store import History
    from gaptui.workspace import Workspace

    _, metric, higher = SMOKE[task]
    values: dict[str, dict[str, list[float]]] = {}
    seconds: dict[str, list[float]] = {p: [] for p in PRECISIONS}
    for precision in PRECISIONS:
        ws = args.out / task / precision
        if not ws.exists():
            return
        with History(Workspace.resolve(str(ws))) as history:
            records = history.records()
        for record in records:
            if record.get("task") != task or record.get("status") != "done":
                continue
            value = (record.get("metrics") or {}).get(metric)
            if not isinstance(value, (int, float)):
                continue
            key = " ".join(str(v) for v in (record.get("axes") or {}).values())
            values.setdefault(key, {p: [] for p in PRECISIONS})[precision].append(float(value))
            seconds[precision] += _epoch_seconds(Path(record["run_dir"]))
    rows = {k: v for k, v in values.items() if all(v.values())}
    print(f"\n{task} ({SMOKE[task][0]}, seeds {args.seeds}): {metric} per row, mean ± sample std over seeds\n")
    print(f"| row | {metric} fp32 | {metric} bf16 | bf16 - fp32 | within seed spread |")
    print("|---|---|---|---|---|")
    within = []
    for key, per in sorted(rows.items()):
        diff, ok = _within(per["fp32"], per["bf16"])
        within.append(ok)
        cells = [f"{_spread(per[p])[0]:.4g} ± {_spread(per[p])[1]:.2g}" for p in PRECISIONS]
        print(f"| {key} | {cells[0]} | {cells[1]} | {diff:+.4g} | {'yes' if ok else 'NO'} |")
    if rows:
        fp32 = statistics.fmean(statistics.fmean(v["fp32"]) for v in rows.values())
        bf16 = statistics.fmean(statistics.fmean(v["bf16"]) for v in rows.values())
        better = "higher" if higher else "lower"
        print(
            f"\nmean over rows: fp32 {fp32:.4g}, bf16 {bf16:.4g} ({better} is better); rows within the seed "
            f"spread: {sum(within)} of {len(within)}; median epoch seconds fp32 "
            f"{statistics.median(seconds['fp32'] or [float('nan')]):.3f}, bf16 "
            f"{statistics.median(seconds['bf16'] or [float('nan')]):.3f}"
        )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    families = _items(args.families)
    load = os.getloadavg()
    if not args.report:
        if "alignment" in families:
            run_alignment(args)
        for task in families:
            if task in SMOKE:
                run_family(args, task)
    print(f"load average at the start {load[0]:.1f}, at the end {os.getloadavg()[0]:.1f}; {os.cpu_count()} CPUs")
    if "alignment" in families:
        report_alignment(args)
    for task in families:
        if task in SMOKE:
            report_family(args, task)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
