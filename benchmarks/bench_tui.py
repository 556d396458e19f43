"""By-hand benchmark of the TUI: key-to-screen latency with a 2,000-run history and 4 streaming runs, and the CPU
share of the idle app.

Setting
    A temporary workspace holds 2,000 finished runs (``History.put_many`` of records shaped like
    ``scheduler.new_record``: 5 ER datasets x 8 noise levels x 5 models x 10 seeds, status done, metrics) and 4
    records left ``running`` whose "workers" are small fake processes appending an epoch event every 0.1 s to their
    ``events.jsonl`` (their command line names ``engine`` and the run dir, so ``Scheduler.recover`` re-attaches
    them and the scheduler streams their events to the app exactly as for real workers, without 4 trainings
    fighting the app for 2 cores). The app runs headless under ``App.run_test`` at 120x40; the Runs screen has the
    4 runs marked, so their curves redraw twice a second.

Latency, two ways, per action (``--repeats`` each; median and max)
    pilot
        ``await pilot.press(key)`` then ``await pilot.pause()``, as a test would. Pilot waits for CPU idleness in
        20 ms slices (``textual._wait.wait_for_idle``), so this has a floor of a few tens of ms: the line
        ``no-op key`` (F12, bound to nothing) measures that floor.
    settle
        The key event handed to the driver, then every widget of the (new) current screen has processed all its
        messages (``Pilot._wait_for_screen``, three rounds, for cascades) and the screen is repainted
        (``Screen._on_timer_update``): the app's own cost, without Pilot's idle detection.

    Each key is pressed in a quiet app: after the history table has finished adding rows in the background
    (``RecordTable`` adds a screenful at once and the rest in chunks).

The rows below the fold
    After one more sort: seconds (wall and CPU) until the history table holds every row again, and the settle
    latency of a no-op key pressed every 0.25 s meanwhile (a key typed while chunks are being added waits for the
    chunk under way and its repaint).

CPU share of the idle app
    ``time.process_time()`` / wall time of the whole process (UI thread + manager thread) over ``--idle`` s, on
    the Runs screen (4 streaming runs, curves redrawn) and on the History screen.

First screen
    Seconds from the app's construction to its first screen holding every record, twice in a fresh process (as a
    user starting ``gaptui`` meets it), then once in this one.

Run from the repository root: ``python benchmarks/bench_tui.py`` (about two minutes); ``--runs 20000`` for a large
study (about four minutes: every sort and filter key waits until the table has added all 20,000 rows again).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from textual import events
from textual.pilot import Pilot

from engine.alignment.preset import DatasetEntry, Preset, RunOptions  # noqa: E402
from gaptui.history.store import History
from gaptui.presets import grid
from gaptui.scheduler import new_record
from gaptui.tui.app import GaptuiApp
from gaptui.tui.widgets.record_table import RecordTable
from gaptui.workspace import Workspace

# argv of the fake worker: ["-c", "engine", RUN_DIR] -- "engine" and the run dir make pid_alive() accept it.
FAKE_WORKER = r"""
import json, signal, sys, time
path = sys.argv[2] + "/events.jsonl"
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
with open(path, "a", buffering=1) as fh:
    fh.write(json.dumps({"v": 1, "event": "start", "epochs": 100000, "t": time.time()}) + "\n")
    epoch = 0
    while not stop:
        epoch += 1
        event = {"v": 1, "event": "epoch", "epoch": epoch, "train_loss": 1 / epoch, "val_acc": min(1.0, epoch / 500)}
        fh.write(json.dumps({**event, "t": time.time()}) + "\n")
        time.sleep(0.1)
    fh.write(json.dumps({"v": 1, "event": "cancelled", "epoch": epoch, "t": time.time()}) + "\n")
sys.exit(143)
"""


def synthetic_history(ws: Workspace, runs: int, streaming: int) -> list[subprocess.Popen[bytes]]:
    """``runs`` finished records plus ``streaming`` running ones, each with a fake worker; returns the workers.
    The grid has 200 cells; it gets as many seeds as ``runs`` needs (10 for 2,000, 100 for 20,000)."""
    seeds = max(1, -(-runs // 200))
    if streaming > 200:
        raise SystemExit("--streaming: at most 200")
    preset = Preset(
        name="bench",
        description="",
        datasets=tuple(DatasetEntry("er", {"n": n, "degree": 4}, train=100, val=10) for n in (20, 30, 40, 50, 60)),
        noise=(0.04, 0.06, 0.08, 0.12, 0.15, 0.18, 0.24, 0.30),
        models=("gcn", "gin", "gatedgcn", "gat", "gatv2"),
        seeds=tuple(range(seeds + 1)),  # one more seed's cells for the streaming runs
        run=RunOptions(epochs=300),
    )
    specs = grid(preset, ws)
    rng = random.Random(0)
    records = []
    for i, spec in enumerate(specs[:runs]):
        record = new_record(spec, ws, preset="bench", planned_seeds=seeds)
        acc = max(0.0, min(1.0, 0.9 - spec.dataset["noise"] * 2 + rng.gauss(0, 0.03)))
        record.update(
            status="done",
            finished=f"2025-01-01T{i // 3600 % 24:02d}:{i // 60 % 60:02d}:{i % 60:02d}+0000",
            duration=round(rng.uniform(600, 1800), 1),
            metrics={"val_lap_acc": acc, "val_loss": 1 - acc, "train_loss": 0.4, "val_top5_acc": min(1, acc + 0.1)},
            params=60_000,
            tags=["paper"] if i % 7 == 0 else [],
        )
        records.append(record)
    workers = []
    for spec in specs[runs : runs + streaming]:
        record = new_record(spec, ws, preset="bench", planned_seeds=seeds)
        run_dir = Path(record["run_dir"])
        run_dir.mkdir(parents=True, exist_ok=True)
        proc = subprocess.Popen([sys.executable, "-c", FAKE_WORKER, "engine", str(run_dir)], start_new_session=True)
        workers.append(proc)
        record.update(status="running", pid=proc.pid, slot="cpu#0", started_ts=time.time())
        records.append(record)
    with History(ws, write=True) as history:
        history.put_many(records)
    return workers


async def settle(pilot: Pilot) -> None:
    for _ in range(3):
        await pilot._wait_for_screen()
    pilot.app.screen._on_timer_update()


async def timed(pilot: Pilot, key: str, how: str) -> float:
    """Milliseconds from the key press to the updated screen (``how``: pilot or settle)."""
    start = time.perf_counter()
    if how == "pilot":
        await pilot.press(key)
        await pilot.pause()
    else:
        char = " " if key == "space" else key if len(key) == 1 else None
        pilot.app._driver.send_message(events.Key(key, char))
        await settle(pilot)
    return (time.perf_counter() - start) * 1000


Prepare = Callable[[Pilot, int], Awaitable[str]]


async def quiet(pilot: Pilot) -> None:
    """Wait until no table is still adding rows in the background (each key is timed in a quiet app)."""
    while any(table.filling for table in pilot.app.screen.query(RecordTable)):
        await pilot.pause(0.05)
    await pilot.pause()


async def fill_after_sort(pilot: Pilot) -> dict[str, float]:
    """Sort the History screen's table once more and follow its rows below the fold: seconds until every row is
    back (wall and CPU) and the settle latency of a no-op key pressed every 0.25 s meanwhile."""
    await pilot.press("f4")
    await quiet(pilot)
    wall, cpu = time.perf_counter(), time.process_time()
    await timed(pilot, "s", "settle")
    keys: list[float] = []
    while any(table.filling for table in pilot.app.screen.query(RecordTable)):
        await asyncio.sleep(0.25)
        keys.append(await timed(pilot, "f12", "settle"))
    return {
        "wall": time.perf_counter() - wall,
        "cpu": time.process_time() - cpu,
        "median": statistics.median(keys) if keys else 0.0,
        "max": max(keys, default=0.0),
        "keys": len(keys),
    }


async def scenario(pilot: Pilot, prepare: Prepare, repeats: int) -> dict[str, list[float]]:
    """``prepare(pilot, i)`` sets the stage (not timed) and returns the key whose effect is timed."""
    out: dict[str, list[float]] = {"pilot": [], "settle": []}
    for how in ("pilot", "settle"):
        for i in range(repeats):
            key = await prepare(pilot, i)
            await quiet(pilot)
            out[how].append(await timed(pilot, key, how))
    return out


async def first_screen(ws: Workspace, records: int) -> float:
    """Seconds from the app's construction (its modules imported) to its first screen showing ``records`` runs."""
    t_app = time.perf_counter()
    app = GaptuiApp(ws)
    async with app.run_test(size=(120, 40)) as pilot:
        while len(app.book) < records:
            await pilot.pause(0.01)
        await settle(pilot)
        seconds = time.perf_counter() - t_app
        # Leave the streaming runs running for the next app: once re-attached, quitting asks, and "l" leaves them.
        start = time.perf_counter()
        while app.recovered is None and any(r["status"] == "running" for r in app.book):
            await pilot.pause(0.1)
            if time.perf_counter() - start > 60:
                raise SystemExit("the streaming runs were not re-attached within 60 s")
        await app.action_quit()
        await pilot.pause()
        if app.is_running:
            await pilot.press("l")
    return seconds


def first_screen_in_a_fresh_process(ws: Workspace, records: int) -> float:
    """:func:`first_screen` in a new interpreter, as a user starting ``gaptui`` meets it (this process holds the
    history it just wrote, which the collector would walk on every full pass)."""
    out = subprocess.run(
        [sys.executable, __file__, "--first-screen", str(ws.root), "--runs", str(records)],
        capture_output=True,
        text=True,
        check=True,
    )
    return float(out.stdout.split()[-1])


async def run(args: argparse.Namespace) -> None:
    root = Path(tempfile.mkdtemp(prefix="gaptui-bench-tui-"))
    ws = Workspace(root / "ws")
    print(f"workspace {ws.root}; load average at start {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores)")
    t0 = time.perf_counter()
    workers = synthetic_history(ws, args.runs, args.streaming)
    print(f"history: {args.runs} finished + {len(workers)} streaming runs written in {time.perf_counter() - t0:.1f} s")
    fresh = [first_screen_in_a_fresh_process(ws, args.runs + len(workers)) for _ in range(2)]
    print(
        f"first screen with {args.runs + len(workers)} records, in a fresh process (best of 2): {min(fresh):.2f} s "
        "after start-up"
    )
    t_app = time.perf_counter()
    app = GaptuiApp(ws)
    results: dict[str, dict[str, list[float]]] = {}
    idle: dict[str, float] = {}
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            while len(app.book) < args.runs:
                await pilot.pause(0.01)
            await settle(pilot)
            first_screen = time.perf_counter() - t_app
            print(f"first screen with {len(app.book)} records, in this process: {first_screen:.2f} s after start-up")
            start = time.perf_counter()
            while not (app.recovered and all(len(f.epochs) > 3 for f in app.runs_screen.feeds.values())):
                await pilot.pause(0.2)
                if time.perf_counter() - start > 60:
                    raise SystemExit("the streaming runs were not re-attached within 60 s")
            print(f"re-attached {len(app.recovered.reattached)} runs; {len(app.book)} records in the app")
            await pilot.press("f3")
            for _ in range(args.streaming):
                await pilot.press("space", "down")  # overlay the 4 curves

            async def to_history(p: Pilot, i: int) -> str:
                await p.press("f3")
                return "f4"

            async def sort(p: Pilot, i: int) -> str:
                if i == 0:
                    await p.press("f4")
                return "s"

            word = "gcn 0.12 paper"

            async def filter_key(p: Pilot, i: int) -> str:
                if i == 0:
                    await p.press("f4", "slash")
                    p.app.screen.query_one("#history-filter").value = ""
                typed = len(p.app.screen.query_one("#history-filter").value)
                return "backspace" if typed >= len(word) or (i // len(word)) % 2 else word[typed].replace(" ", "space")

            async def to_ranking(p: Pilot, i: int) -> str:
                await p.press("f4")
                p.app.section("ranking").records_changed(set())  # as after a finished run: tables rebuilt
                return "f5"

            async def noop(p: Pilot, i: int) -> str:
                return "f12"

            results["switch to history"] = await scenario(pilot, to_history, args.repeats)
            results[f"sort {args.runs:,} rows"] = await scenario(pilot, sort, args.repeats)
            results["filter keystroke"] = await scenario(pilot, filter_key, args.repeats)
            await pilot.press("escape")
            results["switch to ranking"] = await scenario(pilot, to_ranking, args.repeats)
            results["no-op key (floor)"] = await scenario(pilot, noop, args.repeats)

            fill = await fill_after_sort(pilot)

            for screen in ("runs", "history"):
                await pilot.press("f3" if screen == "runs" else "f4")
                await pilot.pause(1.0)
                cpu, wall = time.process_time(), time.perf_counter()
                await asyncio.sleep(args.idle)
                idle[screen] = (time.process_time() - cpu) / (time.perf_counter() - wall)
            streamed = {h: len(f.epochs) for h, f in app.runs_screen.feeds.items()}
            await app.action_quit()
            await pilot.pause()
            await pilot.press("l")  # leave the fake workers running: they are killed below
    finally:
        for proc in workers:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        shutil.rmtree(root, ignore_errors=True)

    print(f"\nkey press -> updated screen, ms ({args.repeats} repeats each; 120x40; Textual headless)")
    print(f"{'action':<22} {'pilot median':>13} {'pilot max':>10} {'settle median':>14} {'settle max':>11}")
    for name, times in results.items():
        p, s = times["pilot"], times["settle"]
        print(f"{name:<22} {statistics.median(p):>13.1f} {max(p):>10.1f} {statistics.median(s):>14.1f} {max(s):>11.1f}")
    if args.verbose:
        for name, times in results.items():
            print(f"{name}: " + " ".join(f"{t:.0f}" for t in times["settle"]))
    print(
        f"\nafter a sort, every row is back after {fill['wall']:.1f} s ({fill['cpu']:.1f} s CPU); a no-op key "
        f"meanwhile: median {fill['median']:.0f} ms, max {fill['max']:.0f} ms ({fill['keys']} keys)"
    )
    print(f"\nCPU share of the idle app over {args.idle:g} s (process time / wall time, all threads):")
    for screen, share in idle.items():
        print(f"  {screen:<8} {share * 100:5.1f} %")
    print(f"epoch events received per streaming run: {sorted(streamed.values())}")
    worst = max(statistics.median(t["settle"]) for n, t in results.items() if "floor" not in n)
    print(
        f"\ntarget < 100 ms key-to-screen (settle median): {'met' if worst < 100 else 'MISSED'} (worst {worst:.1f} ms)"
    )
    print(f"load average at end {os.getloadavg()[0]:.2f}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=2000, help="finished runs in the history")
    parser.add_argument("--streaming", type=int, default=4, help="runs streaming epoch events")
    parser.add_argument("--repeats", type=int, default=15, help="timed key presses per action and method")
    parser.add_argument("--idle", type=float, default=10.0, help="seconds of idle time per CPU measurement")
    parser.add_argument("--verbose", action="store_true", help="print every settle time")
    parser.add_argument("--first-screen", metavar="WORKSPACE", help="only time the first screen of WORKSPACE")
    args: Any = parser.parse_args(argv)
    if args.first_screen:
        print(f"{asyncio.run(first_screen(Workspace(Path(args.first_screen)), args.runs)):.3f}")
        return
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
