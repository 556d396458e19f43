"""Manager overheads: scheduler cost per run with a no-op worker, and `gaptui table` / `gaptui history` on a
workspace of 2,000 run records.

    python benchmarks/bench_manager.py [--runs 40] [--slots 2] [--records 2000]

The no-op worker is a plain ``python -c`` that writes a ``done`` event and ``result.json`` like the real worker
and exits, so the figure is the scheduler's own cost (spawn, follow, file the result in the history) plus one
bare interpreter start; the real worker adds its imports (torch, PyG: 2-4 s) on top, which is not manager cost.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

NOOP = r"""
import json, sys, time, pathlib
out = pathlib.Path(sys.argv[sys.argv.index("--out") + 1])
t = time.time()
ev = {"v": 1, "event": "done", "t": t, "metrics": {"val_lap_acc": 0.5}, "params": 1, "seconds": 0.0}
with open(out / "events.jsonl", "a") as fh:
    fh.write(json.dumps(ev) + "\n")
run = sys.argv[sys.argv.index("--run") + 1]
(out / "result.json").write_text(json.dumps({"status": "done", "run": run, "metrics": ev["metrics"], "params": 1}))
"""


def bench_scheduler(runs: int, slots: int) -> dict[str, float]:
    import gaptui.scheduler as scheduler_mod
    from gaptui.history import History
    from gaptui.presets import grid, parse_preset
    from gaptui.scheduler import Scheduler, make_slots
    from gaptui.workspace import Workspace

    def noop_worker(runs, *, env=None, quiet=False, stdout=None, stderr=None):
        from gaptui.runner import write_spec

        ((spec, out),) = runs  # one run per process: the scheduler's default pack_seeds = 1
        write_spec(spec, out)
        return subprocess.Popen(
            [sys.executable, "-c", NOOP, "--out", str(out), "--run", spec.hash()],
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,
        )

    scheduler_mod.start_pack = noop_worker
    preset = parse_preset(
        {
            "noise": [0.1],
            "models": ["gcn"],
            "seeds": list(range(runs)),
            "datasets": [{"base": "er", "params": {"n": 10, "degree": 3}, "train": 2, "val": 1}],
            "run": {"budget": 5000, "out_dim": 8, "epochs": 1},
        }
    )
    with tempfile.TemporaryDirectory() as tmp:
        ws = Workspace(Path(tmp))
        specs = grid(preset, ws)
        # The bare cost of the no-op process, started back to back without any scheduler.
        t0 = time.perf_counter()
        for _ in range(10):
            subprocess.run([sys.executable, "-c", "pass"], check=True)
        bare = (time.perf_counter() - t0) / 10
        with History(ws, write=True) as history:
            sched = Scheduler(ws, history, make_slots([], cpu_jobs=slots))
            sched.enqueue(specs)
            t0 = time.perf_counter()
            sched.run(poll=0.05)
            wall = time.perf_counter() - t0
        assert all(r["status"] == "done" for r in History(ws).records())
    per_run = wall * slots / runs
    return {
        "runs": runs,
        "slots": slots,
        "wall_s": wall,
        "per_run_s": per_run,
        "bare_python_s": bare,
        "overhead_s": per_run - bare,
    }


def seed_history(ws_root: Path, count: int) -> None:
    import random

    from gaptui.history import History
    from gaptui.workspace import Workspace

    rng = random.Random(0)
    models = ["laplacian", "gcn", "gin", "gatedgcn", "gat", "gatv2"]
    noises = [0.04, 0.06, 0.08, 0.12, 0.15, 0.18, 0.24, 0.3]
    datasets = ["er", "aqsol", "pcqm4mv2", "corafull", "ogbn-arxiv"]
    records = []
    for i in range(count):
        ds, noise, model = datasets[i % 5], noises[(i // 5) % 8], models[(i // 40) % 6]
        records.append(
            {
                "id": f"{i:012x}",
                "hash": f"{i:064x}",
                "status": "done",
                "task": "alignment",
                "axes": {"dataset": ds, "noise": noise, "model": model, "recipe": "gaptui"},
                "seed": i // 240,
                "preset": "paper",
                "planned_seeds": 10,
                "metrics": {"val_lap_acc": rng.random(), "val_loss": rng.random() * 3},
                "params": 60000,
                "duration": rng.random() * 2000,
                "tags": [],
                "note": "",
                "run_dir": f"runs/{i:012x}",  # stored relative to the workspace, as gaptui files them
                "spec": {},
                "created": "2026-11-29T00:00:00+0000",
                "started": None,
                "finished": None,
            }
        )
    with History(Workspace(ws_root), write=True) as history:
        history.put_many(records)


def time_cli(args: list[str], repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "gaptui", *args],
            cwd=ROOT,
            check=True,
            capture_output=True,
            env={**os.environ, "COLUMNS": "200"},
        )
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--records", type=int, default=2000)
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()}")

    s = bench_scheduler(args.runs, args.slots)
    print(f"\nscheduler, no-op worker: {s['runs']} runs on {s['slots']} slots in {s['wall_s']:.2f} s")
    print(f"  per run (wall x slots / runs): {s['per_run_s']:.3f} s, a bare python start {s['bare_python_s']:.3f} s")
    verdict = "met" if s["overhead_s"] < 0.5 else "MISSED"
    print(f"  scheduler overhead per run: {s['overhead_s']:.3f} s   (target < 0.5 s: {verdict})")

    with tempfile.TemporaryDirectory() as tmp:
        seed_history(Path(tmp), args.records)
        size = (Path(tmp) / "history.json").stat().st_size
        startup = time_cli(["--help"])
        rows = [("gaptui --help (start-up only)", startup)]
        for label, cmd in (
            ("gaptui table", ["table", "-w", tmp]),
            ("gaptui table --format json", ["table", "--format", "json", "-w", tmp]),
            ("gaptui history (newest 200)", ["history", "-w", tmp]),
            ("gaptui history --limit 0 (all)", ["history", "--limit", "0", "-w", tmp]),
            ("gaptui history --json", ["history", "--json", "-w", tmp]),
        ):
            rows.append((label, time_cli(cmd)))
        print(f"\n{args.records} records in history.json ({size / 1e6:.1f} MB); best of 3, whole process:")
        for label, t in rows:
            verdict = "" if label.startswith("gaptui --help") else ("met" if t < 1.0 else "MISSED")
            print(f"  {label:<32} {t:6.3f} s  {verdict}")
    print(f"\nload average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
