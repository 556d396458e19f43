"""The Slurm backend's costs on a single-node cluster: per-run overhead against the local backend, and the time to
submit a 2,000-run grid.

    scripts/start-slurm.sh start
    python benchmarks/bench_slurm.py [--runs 8] [--parallel 2] [--grid 2000]
    scripts/start-slurm.sh stop

- **per-run overhead**: ``--runs`` runs whose ``result.json`` already says ``done``, so the real worker
  (``python -m engine``) starts, sees it has nothing to do and exits: a no-op worker. Both backends run the same
  runs, side by side in one process, ``--parallel`` at a time (local: CPU slots; Slurm: array parallelism),
  from ``enqueue`` to every record filed ``done``. One run alone (submit to done) is timed too.
- **submission**: a ``--grid``-run grid queued and submitted as job arrays with array parallelism 1 (so the
  cluster starts at most one task per array), timed from ``enqueue`` to every record holding its job id; the
  arrays are cancelled at once.

The workspace is a folder under the current directory (``--workspace``, removed afterwards): the tasks must see it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _specs(ws, runs: int, offset: int = 0) -> list:
    from gaptui.presets import grid, parse_preset

    preset = parse_preset(
        {
            "noise": [0.1],
            "models": ["gcn"],
            "seeds": list(range(offset, offset + runs)),
            "datasets": [{"base": "er", "params": {"n": 10, "degree": 3}, "train": 2, "val": 1}],
            "run": {"budget": 5000, "out_dim": 8, "epochs": 1},
        }
    )
    return grid(preset, ws)


def _already_done(ws, specs: list) -> None:
    """Run folders whose result says done: the worker exits right after its start-up."""
    from gaptui.runner import run_id, write_spec

    for spec in specs:
        out = ws.runs / run_id(spec)
        write_spec(spec, out)
        result = {"status": "done", "run": spec.hash(), "metrics": {"val_lap_acc": 0.5}, "params": 1}
        (out / "result.json").write_text(json.dumps(result))


def _drive(scheduler, specs: list) -> float:
    t0 = time.perf_counter()
    scheduler.enqueue(specs)
    while scheduler.pending():
        scheduler.step()
        time.sleep(0.05)
    return time.perf_counter() - t0


def bench_overhead(ws, runs: int, parallel: int, offset: int) -> dict[str, float]:
    from gaptui.backends.slurm import SlurmOptions, SlurmScheduler
    from gaptui.history.store import History
    from gaptui.scheduler import Scheduler, make_slots

    out: dict[str, float] = {}
    with History(ws, write=True) as history:
        for label, count in (("one", 1), ("many", runs)):
            local_specs = _specs(ws, count, offset)
            slurm_specs = _specs(ws, count, offset + 10_000)
            offset += count
            _already_done(ws, local_specs + slurm_specs)
            local = Scheduler(ws, history, make_slots([], cpu_jobs=parallel))
            slurm = SlurmScheduler(ws, history, SlurmOptions(array_parallelism=parallel, time=5))
            out[f"local_{label}"] = _drive(local, local_specs)
            out[f"slurm_{label}"] = _drive(slurm, slurm_specs)
            records = {r["hash"]: r for r in history.records()}
            assert all(records[s.hash()]["status"] == "done" for s in local_specs + slurm_specs)
    return out


def bench_submit(ws, count: int) -> dict[str, float]:
    from gaptui.backends.slurm import SlurmOptions, SlurmScheduler
    from gaptui.history.store import History

    specs = _specs(ws, count, 50_000)
    with History(ws, write=True) as history:
        slurm = SlurmScheduler(ws, history, SlurmOptions(array_parallelism=1, time=5))
        t0 = time.perf_counter()
        slurm.enqueue(specs)
        queued = time.perf_counter() - t0
        slurm.step()
        submitted = time.perf_counter() - t0
        arrays = sorted({job_id.split("_")[0] for job_id in slurm.job_ids.values()})
        t1 = time.perf_counter()
        slurm.stop_all(wait=120)
        cancelled = time.perf_counter() - t1
        wanted = {s.hash() for s in specs}
        records = [r for r in history.records() if r["hash"] in wanted]
        assert len(records) == count and all(r["slurm"]["job_id"] for r in records)
    return {"queued_s": queued, "submitted_s": submitted, "arrays": len(arrays), "cancel_s": cancelled}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--grid", type=int, default=2000)
    parser.add_argument("--workspace", type=Path, default=Path("bench-slurm-ws"))
    parser.add_argument("--skip-overhead", action="store_true", help="only time the submission of the grid")
    args = parser.parse_args()
    from gaptui.backends.slurm import sbatch_available
    from gaptui.workspace import Workspace

    if not sbatch_available():
        sys.exit("sbatch not found: start a cluster first (scripts/start-slurm.sh start)")
    ws = Workspace(args.workspace.resolve())
    if ws.root.exists():
        sys.exit(f"{ws.root} exists; pass another --workspace")
    print(f"load average at start: {os.getloadavg()}")
    try:
        if not args.skip_overhead:
            _print_overhead(bench_overhead(ws, args.runs, args.parallel, 0), args.runs, args.parallel)
        s = bench_submit(ws, args.grid)
        print(
            f"\n{args.grid}-run grid, array parallelism 1: queued in history {s['queued_s']:.2f} s, "
            f"submitted as {s['arrays']} job array(s) after {s['submitted_s']:.2f} s "
            f"({1000 * s['submitted_s'] / args.grid:.1f} ms per run); cancelled and filed in {s['cancel_s']:.2f} s"
        )
    finally:
        shutil.rmtree(ws.root, ignore_errors=True)
    print(f"\nload average at end: {os.getloadavg()}")


def _print_overhead(o: dict[str, float], runs: int, parallel: int) -> None:
    print("\nno-op worker (python -m engine on a finished run), enqueue to filed done:")
    print(
        f"  one run:     local {o['local_one']:6.2f} s   slurm {o['slurm_one']:6.2f} s   "
        f"ratio {o['slurm_one'] / o['local_one']:.1f}x"
    )
    per_local, per_slurm = o["local_many"] / runs * parallel, o["slurm_many"] / runs * parallel
    print(f"  {runs} runs, {parallel} at a time: local {o['local_many']:6.2f} s   slurm {o['slurm_many']:6.2f} s")
    print(
        f"  per run (wall x parallel / runs): local {per_local:.2f} s   slurm {per_slurm:.2f} s   "
        f"overhead of Slurm per run {per_slurm - per_local:+.2f} s   ratio {per_slurm / per_local:.1f}x"
    )


if __name__ == "__main__":
    main()
