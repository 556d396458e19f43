"""The history record of a new run: what the scheduler writes before the run starts (status ``queued``)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from engine.tasks import TaskSpec, family
from gaptui.history.store import now
from gaptui.runner import run_id
from gaptui.workspace import Workspace

#: The seeds planned for a run's table cell: one count for every run, or a count per run hash, or unknown.
PlannedSeeds = int | Mapping[str, int] | None


def planned_seeds_by_run(specs: Iterable[TaskSpec]) -> dict[str, int]:
    """Run hash -> the seeds the grid ``specs`` plans for the run's table cell: how many of its specs differ from it
    by their seed alone (one cell holds one protocol, :mod:`gaptui.analysis.cells`). A preset's cell of models
    plans its seeds; a run the grid holds once per cell (a GAPE grid's pretraining run, a deterministic baseline)
    plans one."""
    seeds: dict[str, set[int]] = {}
    cell_of: dict[str, str] = {}
    for spec in specs:
        cell = spec.seedless()
        seeds.setdefault(cell, set()).add(spec.seed)
        cell_of[spec.hash()] = cell
    return {h: len(seeds[cell]) for h, cell in cell_of.items()}


def new_record(
    spec: TaskSpec,
    ws: Workspace,
    preset: str | None = None,
    planned_seeds: PlannedSeeds = None,
    run_dir: Path | None = None,
) -> dict:
    """A ``queued`` history record for ``spec``; its folder is ``run_dir`` or ``<workspace>/runs/<run id>``.

    ``planned_seeds``: the seeds its table cell plans, one count for every run or per run hash
    (:func:`planned_seeds_by_run`); a baseline plans one."""
    fam = family(spec.task)
    rid = run_id(spec)
    if isinstance(planned_seeds, Mapping):
        planned_seeds = planned_seeds.get(spec.hash())
    return {
        "id": rid,
        "hash": spec.hash(),
        "status": "queued",
        "task": spec.task,
        "axes": fam.record_axes(spec),
        "seed": spec.seed,
        "spec": spec.to_dict(),
        "depends": list(fam.dependencies(spec)),
        "preset": preset,
        "planned_seeds": 1 if fam.is_baseline(spec) else planned_seeds,
        "run_dir": str(run_dir or ws.runs / rid),
        "created": now(),
        "started": None,
        "finished": None,
        "duration": None,
        "exit_code": None,
        "attempts": 0,
        "pid": None,
        "slot": None,
        "metrics": {},
        "params": None,
        "error": None,
        "log_tail": [],
        "repro": {},
        "tags": [],
        "note": "",
    }


def git_commit(folder: Path) -> dict[str, Any] | None:
    """The git commit (and dirty flag) of the user's project in ``folder``, if it is a repository."""
    try:
        head = subprocess.run(
            ["git", "-C", str(folder), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5
        )
        if head.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "-C", str(folder), "status", "--porcelain"], capture_output=True, text=True, timeout=5
        )
        return {"commit": head.stdout.strip(), "dirty": bool(dirty.stdout.strip())}
    except (OSError, subprocess.SubprocessError):
        return None
