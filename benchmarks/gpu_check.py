"""One call that measures a lent GPU: under 8 minutes, one table printed, everything written as JSON.

    python benchmarks/gpu_check.py [--out gpu-check.json] [--work gpu-check-work] [--budget 450]

Without a CUDA GPU it says so in one line, writes ``{"gpu": null, ...}`` and exits 0 (CI runs that path).
On a GPU, in order, each part skipped (and said so) once the time budget is spent:

1. **smoke**: ``gaptui run --preset smoke --gpus 0`` in a fresh workspace: wall seconds and run statuses.
2. **epochs**: each paper model (gcn, gin, gatedgcn, gat, gatv2) at the paper's setting, 1,000 ER(100, 8) training
   pairs and 100 validation pairs at noise 0.12, batch 100, 3 epochs, through ``gaptui train --device cuda`` in
   ``fp32``, ``tf32`` (``auto`` with ``GAPTUI_AUTO_TF32=1``: fp32 weights, TF32 matrix products) and ``bf16``: the
   median training-epoch seconds after the first epoch and the final validation LAP accuracy of each.
3. **sharing**: 8 short runs of the smoke grid's shape on the one GPU at 1, 2, 4 and 8 jobs per GPU
   (``--jobs-per-gpu``): wall seconds and runs per hour.
4. **auto precision**: the rule ``engine.hardware.AUTO_BF16`` / ``AUTO_TF32`` are set by, applied to part 2: a mode
   is recommended for ``auto`` when it is faster than fp32 for every model and its accuracy is within
   ``--tolerance`` points of fp32's for every model (one seed here: confirm a "yes" with
   ``benchmarks/bench_precision.py`` over three seeds before changing the constants).

The plain-PyG reference loop of ``benchmarks/bench_epoch.py`` runs on the CPU only; on a GPU its figure is not
measured here (the JSON says so), so the epoch table compares precisions, not implementations.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MODELS = ("gcn", "gin", "gatedgcn", "gat", "gatv2")
PRECISIONS = {"fp32": ("fp32", "0"), "tf32": ("auto", "1"), "bf16": ("bf16", "0")}
JOBS = (1, 2, 4, 8)


def gpu_name() -> str | None:
    """The first CUDA device's name, or None when torch sees no CUDA GPU."""
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None


def _gaptui(args: list[str], *, env: dict[str, str] | None = None, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gaptui", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=max(timeout, 1),
        env={**os.environ, "GAPTUI_OFFLINE": "1", "COLUMNS": "200", **(env or {})},
    )


def smoke(work: Path, timeout: float) -> dict[str, Any]:
    ws = work / "smoke"
    t0 = time.perf_counter()
    res = _gaptui(["run", "--preset", "smoke", "--gpus", "0", "-w", str(ws)], timeout=timeout)
    wall = time.perf_counter() - t0
    listed = _gaptui(["history", "--json", "-w", str(ws)], timeout=60)
    statuses = [r["status"] for r in json.loads(listed.stdout or "[]")] if listed.returncode == 0 else []
    return {"returncode": res.returncode, "seconds": round(wall, 1), "statuses": statuses, "stderr": res.stderr[-500:]}


def epoch_seconds(events_path: Path) -> tuple[float | None, float | None]:
    """Median epoch seconds after the first epoch, and the last LAP accuracy, from a run's ``events.jsonl``."""
    seconds, acc = [], None
    for line in events_path.read_text().splitlines() if events_path.exists() else []:
        event = json.loads(line)
        if event.get("event") == "epoch":
            seconds.append(float(event["seconds"]))
        elif event.get("event") == "eval":
            acc = event.get("val_lap_acc")
    timed = seconds[1:] or seconds
    return (statistics.median(timed) if timed else None), acc


def epochs(work: Path, deadline: float, models: tuple[str, ...] = MODELS) -> list[dict[str, Any]]:
    rows = []
    for model in models:
        for mode, (precision, tf32) in PRECISIONS.items():
            left = deadline - time.monotonic()
            if left < 20:
                rows.append({"model": model, "mode": mode, "skipped": "time budget spent"})
                continue
            out = work / "epochs" / f"{model}-{mode}"
            shutil.rmtree(out, ignore_errors=True)
            args = ["train", "--model", model, "--base", "er", "--param", "n=100", "--param", "degree=8"]
            args += ["--train", "1000", "--val", "100", "--batch-size", "100", "--epochs", "3", "--noise", "0.12"]
            args += ["--device", "cuda", "--precision", precision, "--out", str(out), "-w", str(work / "epochs-ws")]
            res = _gaptui(args, env={"GAPTUI_AUTO_TF32": tf32}, timeout=left)
            seconds, acc = epoch_seconds(out / "events.jsonl")
            rows.append(
                {"model": model, "mode": mode, "returncode": res.returncode, "epoch_s": seconds, "lap_acc": acc}
            )
    return rows


SHARING_PRESET = """description = "gpu_check: 8 short runs sharing one GPU"
noise = [0.05, 0.1, 0.15, 0.2]
models = ["gcn", "gin"]
seeds = [0]
laplacian = false
[run]
epochs = 3
batch_size = 50
[[datasets]]
base = "er"
params = { n = 100, degree = 8 }
train = 200
val = 50
"""


def sharing(work: Path, deadline: float) -> list[dict[str, Any]]:
    preset = work / "sharing.toml"
    preset.write_text(SHARING_PRESET)
    rows = []
    for jobs in JOBS:
        left = deadline - time.monotonic()
        if left < 30:
            rows.append({"jobs_per_gpu": jobs, "skipped": "time budget spent"})
            continue
        ws = work / f"sharing-{jobs}"
        shutil.rmtree(ws, ignore_errors=True)
        args = ["run", "--preset", str(preset), "--gpus", "0", "--jobs-per-gpu", str(jobs), "--no-estimate", "-w"]
        t0 = time.perf_counter()
        res = _gaptui([*args, str(ws)], timeout=left)
        wall = time.perf_counter() - t0
        row = {"jobs_per_gpu": jobs, "returncode": res.returncode, "seconds": round(wall, 1)}
        rows.append({**row, "runs_per_hour": 8 * 3600 / wall})
    return rows


def decide(rows: list[dict[str, Any]], tolerance: float) -> dict[str, Any]:
    """For tf32 and bf16: faster than fp32 for every model, and within ``tolerance`` accuracy points of it?"""
    by = {(r["model"], r["mode"]): r for r in rows if r.get("epoch_s") is not None and r.get("lap_acc") is not None}
    models = sorted({m for m, _ in by})
    out: dict[str, Any] = {}
    for mode in ("tf32", "bf16"):
        pairs = [(by[(m, "fp32")], by[(m, mode)]) for m in models if (m, "fp32") in by and (m, mode) in by]
        if not pairs or len(pairs) < len(models):
            out[mode] = {"recommend": False, "why": "not measured for every model"}
            continue
        speedups = {a["model"]: a["epoch_s"] / b["epoch_s"] for a, b in pairs}
        gaps = {a["model"]: 100 * (b["lap_acc"] - a["lap_acc"]) for a, b in pairs}
        faster = all(s > 1 for s in speedups.values())
        close = all(abs(g) <= tolerance for g in gaps.values())
        why = ("faster for every model" if faster else "not faster for every model") + (
            f", within {tolerance:g} points" if close else f", accuracy off by more than {tolerance:g} points"
        )
        out[mode] = {"recommend": faster and close, "why": why, "speedup": speedups, "points": gaps}
    return out


def table(report: dict[str, Any]) -> str:
    lines = [f"GPU: {report['gpu']}  ({report['seconds']:.0f} s in all)"]
    s = report.get("smoke") or {}
    if s:
        lines.append(f"smoke grid (gaptui run --gpus 0): exit {s['returncode']}, {s['seconds']} s, {s['statuses']}")
    lines.append("")
    lines.append("model      fp32 s   tf32 s   bf16 s   tf32 x  bf16 x   acc fp32/tf32/bf16 (%)")
    by = {(r["model"], r["mode"]): r for r in report.get("epochs", [])}
    for model in sorted({m for m, _ in by}):
        cells = [by.get((model, mode), {}) for mode in PRECISIONS]
        secs = [c.get("epoch_s") for c in cells]
        accs = [c.get("lap_acc") for c in cells]
        text = [f"{x:7.3f}" if x else "      -" for x in secs]
        ratio = [f"{secs[0] / x:6.2f}x" if x and secs[0] else "      -" for x in secs[1:]]
        acc = "/".join(f"{100 * a:.1f}" if a is not None else "-" for a in accs)
        lines.append(f"{model:<9} {'  '.join(text)}  {' '.join(ratio)}   {acc}")
    lines.append("")
    for row in report.get("sharing", []):
        if "skipped" in row:
            lines.append(f"{row['jobs_per_gpu']} job(s) per GPU: skipped ({row['skipped']})")
        else:
            lines.append(
                f"{row['jobs_per_gpu']} job(s) per GPU: 8 runs in {row['seconds']} s = {row['runs_per_hour']:.0f} "
                f"runs/hour (exit {row['returncode']})"
            )
    for mode, verdict in (report.get("auto") or {}).items():
        lines.append(f"auto -> {mode}? {'yes' if verdict['recommend'] else 'no'}: {verdict['why']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("gpu-check.json"))
    parser.add_argument("--work", type=Path, default=Path("gpu-check-work"), help="workspaces and run folders")
    parser.add_argument("--budget", type=float, default=450.0, help="seconds for all parts (8 minutes with slack)")
    parser.add_argument("--tolerance", type=float, default=1.0, help="accuracy points a faster mode may differ by")
    args = parser.parse_args(argv)
    name = gpu_name()
    if name is None:
        print("gpu_check: no CUDA GPU visible to torch here; nothing measured")
        args.out.write_text(json.dumps({"gpu": None, "reason": "torch.cuda.is_available() is False"}) + "\n")
        return 0
    start = time.monotonic()
    deadline = start + args.budget
    args.work.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"gpu": name, "reference": "bench_epoch.py's PyG loop has no CUDA path: not measured"}
    report["smoke"] = smoke(args.work, timeout=min(120, deadline - time.monotonic()))
    report["epochs"] = epochs(args.work, deadline)
    report["sharing"] = sharing(args.work, deadline)
    report["auto"] = decide(report["epochs"], args.tolerance)
    report["seconds"] = time.monotonic() - start
    args.out.write_text(json.dumps(report, indent=1, default=str) + "\n")
    print(table(report))
    print(f"\nwritten: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
