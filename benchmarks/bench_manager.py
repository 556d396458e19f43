"""Manager overheads at history sizes side by side: the read-only commands, filing one result, the scheduler's
cost per run with a no-op worker, and planning a grid of that many runs; the ratio of the last size to the first.

    python benchmarks/bench_manager.py [--runs 40] [--slots 2] [--records 2000,20000]

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


def bench_scheduler(runs: int, slots: int, seeded: int = 0) -> dict[str, float]:
    import gaptui.scheduler as scheduler_mod
    from gaptui.history.store import History
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
        if seeded:
            seed_history(Path(tmp), seeded)  # the same runs filed into a history of this size
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
        assert all(r["status"] == "done" for r in History(ws).records() if r["hash"] in {s.hash() for s in specs})
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

    from gaptui.history.store import History
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


def time_cli(args: list[str], repeats: int = 2) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "gaptui", *args],
            cwd=ROOT,
            check=True,
            capture_output=True,
            env={**os.environ, "COLUMNS": "200", "GAPTUI_OFFLINE": "1"},
        )
        best = min(best, time.perf_counter() - t0)
    return best


def bench_filing(ws_root: Path, count: int = 100) -> tuple[float, float]:
    """Mean and max seconds of filing one run's result (``History.update``, fsynced) in a workspace."""
    from gaptui.history.store import History
    from gaptui.workspace import Workspace

    times = []
    with History(Workspace(ws_root), write=True) as history:
        for i in range(count):
            t0 = time.perf_counter()
            history.update(f"{i:064x}", status="done", metrics={"val_lap_acc": 0.5, "val_loss": 1.0}, duration=1.0)
            times.append(time.perf_counter() - t0)
    return sum(times) / len(times), max(times)


PLAN_PRESET = """description = "bench_manager: planning a large grid"
noise = [0.02, 0.05, 0.1, 0.15, 0.2]
models = ["gcn", "gin", "gat", "gatv2"]
seeds = {seeds}
laplacian = false
[run]
epochs = 2
batch_size = 20
budget = 5000
out_dim = 16
[[datasets]]
base = "er"
params = {{ n = 20, degree = 4 }}
train = 40
val = 10
"""


def bench_planning(tmp: Path, runs: int) -> float:
    """Seconds of ``gaptui run --dry-run --no-estimate`` for a grid of ``runs`` runs (expand, check, plan)."""
    preset = tmp / f"plan-{runs}.toml"
    preset.write_text(PLAN_PRESET.format(seeds=list(range(max(runs // 20, 1)))))
    return time_cli(["run", "--preset", str(preset), "--dry-run", "--no-estimate", "-w", str(tmp / "plan-ws")], 1)


COMMANDS = (
    ("gaptui --help (start-up only)", ["--help"]),
    ("table", ["table"]),
    ("table --format json", ["table", "--format", "json"]),
    ("history (newest 200)", ["history"]),
    ("history --limit 0 (all)", ["history", "--limit", "0"]),
    ("history --json", ["history", "--json"]),
    ("stats --format json", ["stats", "--format", "json"]),
    ("gap", ["gap"]),
)


def bench_size(count: int, runs: int, slots: int) -> dict[str, float]:
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        seed_history(Path(tmp), count)
        out["history.json MB"] = (Path(tmp) / "history.json").stat().st_size / 1e6
        for label, cmd in COMMANDS:
            out[label] = time_cli([*cmd, "-w", tmp] if cmd != ["--help"] else cmd)
        mean, worst = bench_filing(Path(tmp))
        out["filing one result (mean)"], out["filing one result (max)"] = mean, worst
    out["scheduler overhead per run"] = bench_scheduler(runs, slots, seeded=count)["overhead_s"]
    with tempfile.TemporaryDirectory() as tmp:
        out["planning a grid of that many runs"] = bench_planning(Path(tmp), count)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--records", default="2000", help="history sizes, comma-separated (e.g. 2000,20000)")
    args = parser.parse_args()
    sizes = [int(x) for x in args.records.split(",")]
    print(f"load average at start: {os.getloadavg()}")
    results = {n: bench_size(n, args.runs, args.slots) for n in sizes}
    labels = list(results[sizes[0]])
    head = "".join(f"{n:>12,}" for n in sizes) + ("       ratio" if len(sizes) > 1 else "")
    print(f"\n{'records':<34}{head}   (seconds; whole processes best of 2; planning: the grid's size)")
    for label in labels:
        values = [results[n][label] for n in sizes]
        ratio = f"{values[-1] / values[0]:12.2f}" if len(sizes) > 1 and values[0] else ""
        print(f"{label:<34}" + "".join(f"{v:12.3f}" for v in values) + ratio)
    print(f"\nload average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
