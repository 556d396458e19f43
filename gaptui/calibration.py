"""Measuring a family's cost on this machine: its calibration module run in one process per slot side by side
(:func:`measure_on_slots`), and the per-run overhead timed on tiny runs through the real scheduler and worker
(:func:`measure_overhead`). :class:`gaptui.estimate.Estimator` asks for them and caches what they measure."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine.tasks import Placement, TaskFamily
from gaptui.scheduler import Slot
from gaptui.workspace import Workspace

#: Seconds of timed work per calibration key (after a warm-up).
DEFAULT_SECONDS = 1.5


def measure_on_slots(
    keys: list[Any],
    slots: list[Slot],
    module: str,
    seconds: float = DEFAULT_SECONDS,
    measured: Callable[[int], None] = lambda _done: None,
) -> list[dict[str, Any]]:
    """Measure ``keys`` in one ``python -m <module>`` process per slot, all at once, each in its slot's environment
    (threads, GPU), so that the runs of concurrent slots slow each other as they will; returns per key the mean
    over the processes of each measured number (``steps`` summed, other fields from the first). The module prints
    one JSON line per key as it is measured (or, as earlier modules did, one JSON list at the end);
    ``measured(count)`` is told how many keys the first process has measured so far."""
    import contextlib
    import os
    import subprocess
    import sys
    import tempfile

    from engine.errors import GaptuiError

    request = json.dumps({"keys": [k.to_dict() for k in keys], "seconds": seconds})
    results: list[list[dict[str, Any]]] = []
    with contextlib.ExitStack() as files:
        # stderr into files: a process that writes much there never blocks while the first one's lines are read
        stderrs = [files.enter_context(tempfile.TemporaryFile("w+")) for _ in slots]
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", module],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=errors,
                text=True,
                env={**os.environ, **slot.env},
            )
            for slot, errors in zip(slots, stderrs, strict=True)
        ]
        for proc in procs:  # every process gets its request before any is waited for: they measure side by side
            assert proc.stdin is not None
            proc.stdin.write(request)
            proc.stdin.close()
        for proc, errors in zip(procs, stderrs, strict=True):
            assert proc.stdout is not None
            lines = []
            for line in proc.stdout:  # the others measure meanwhile; a key's line is a few hundred bytes
                if line.strip():
                    lines.append(line)
                    if proc is procs[0]:
                        measured(len(lines))
            if proc.wait() != 0:
                errors.seek(0)
                last = (errors.read().strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
                raise GaptuiError(f"calibration failed: {last}")
            listed = len(lines) == 1 and lines[0].lstrip().startswith("[")
            results.append(json.loads(lines[0]) if listed else [json.loads(line) for line in lines])

    def merged(i: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, first in results[0][i].items():
            if name == "steps":
                out[name] = sum(int(r[i][name]) for r in results)
            elif isinstance(first, float):
                out[name] = statistics.fmean(r[i][name] for r in results)
            else:
                out[name] = first
        return out

    return [merged(i) for i in range(len(keys))]


def measure_overhead(slots: list[Slot], fam: TaskFamily) -> float:
    """Seconds a run costs besides its training: one tiny run of ``fam`` (its
    :meth:`~engine.cost.CostModel.overhead_probe`) per slot (at most 16) through the real scheduler and worker,
    all at once, in a temporary workspace: process start, imports, data loading, model, result, history."""
    import tempfile

    from engine.errors import GaptuiError
    from gaptui.history.store import History
    from gaptui.runner import prepare
    from gaptui.scheduler import Scheduler

    slots = [Slot(s.name, dict(s.env)) for s in slots[:16]]
    with tempfile.TemporaryDirectory(prefix="gaptui-overhead-") as tmp:
        ws = Workspace(Path(tmp))
        specs = fam.costs.overhead_probe(Placement(str(ws.datasets), str(ws.raw_data)), len(slots))
        if not specs:
            return 0.0
        prepare(specs[:1])  # a grid's inputs are prepared before its runs start
        with History(ws, write=True, purpose="gaptui calibration") as history:
            scheduler = Scheduler(ws, history, slots)
            started = time.perf_counter()
            scheduler.enqueue(specs)
            scheduler.run()
            wall = time.perf_counter() - started
            failed = [r for r in history.records() if r["status"] != "done"]
        if failed:
            raise GaptuiError(f"calibration failed: a tiny run ended {failed[0]['status']}: {failed[0].get('error')}")
    return wall
