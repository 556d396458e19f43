"""Launching engine workers as subprocesses (the one place that knows the worker's command line), and building the
inputs their runs need before they start (:func:`prepare`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from engine.errors import GaptuiError
from engine.tasks import TaskSpec, family

#: ``progress(done, total, label)``: called after each input is prepared (from a worker thread).
Progress = Callable[[int, int, str], None]


def run_id(spec: TaskSpec) -> str:
    """Short, stable id of a run: the first 12 hex digits of its spec hash (also its folder name)."""
    return spec.hash()[:12]


def write_spec(spec: TaskSpec, out: Path) -> Path:
    """Write ``out/spec.json``; a folder holding another run's spec is refused before anything is written."""
    from engine.files import atomic_write_json
    from engine.worker import check_run_folder

    check_run_folder(out, spec)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "spec.json"
    atomic_write_json(path, spec.to_dict(), indent=2, sort_keys=True)
    return path


def worker_command(runs: list[tuple[Path, Path]], quiet: bool = False) -> list[str]:
    """``python -m engine --spec S --out O ...``: one (spec file, run folder) pair per run; several = packed seeds."""
    cmd = [sys.executable, "-m", "engine"]
    for spec_path, out in runs:
        cmd += ["--spec", str(spec_path), "--out", str(out)]
    return [*cmd, "--quiet"] if quiet else cmd


def start_worker(
    spec: TaskSpec,
    out: Path,
    *,
    env: dict[str, str] | None = None,
    quiet: bool = False,
    stdout: Any = subprocess.PIPE,
    stderr: Any = subprocess.PIPE,
) -> subprocess.Popen[str]:
    """Start ``python -m engine`` on ``spec`` in its own process group (so signals reach it and its children)."""
    return start_pack([(spec, out)], env=env, quiet=quiet, stdout=stdout, stderr=stderr)


def start_pack(
    runs: list[tuple[TaskSpec, Path]],
    *,
    env: dict[str, str] | None = None,
    quiet: bool = False,
    stdout: Any = subprocess.PIPE,
    stderr: Any = subprocess.PIPE,
) -> subprocess.Popen[str]:
    """Start one ``python -m engine`` process for ``runs`` ((spec, run folder) pairs; more than one = packed
    seeds, trained in turn in that process), in its own process group."""
    command = worker_command([(write_spec(spec, out), out) for spec, out in runs], quiet)
    return subprocess.Popen(
        command,
        stdout=stdout,
        stderr=stderr,
        stdin=subprocess.DEVNULL,
        text=True,
        env={**os.environ, **(env or {})},
        start_new_session=True,
    )


def signal_group(pid: int, sig: int = signal.SIGTERM) -> bool:
    """Send ``sig`` to the worker's process group; False when it is already gone."""
    try:
        os.killpg(pid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def prepare(specs: Iterable[TaskSpec], progress: Progress | None = None, workers: int | None = None) -> dict[str, str]:
    """Build every input the runs need, once per distinct input; returns ``{run hash: error}`` for failed ones."""
    needed: dict[str, tuple[Any, list[str]]] = {}
    for spec in specs:
        for item in family(spec.task).inputs(spec):
            needed.setdefault(item.key, (item, []))[1].append(spec.hash())
    if not needed:
        return {}
    errors: dict[str, str] = {}
    total = len(needed)
    workers = workers or max(1, min(total, len(os.sched_getaffinity(0))))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="gaptui-prepare") as pool:
        futures = {pool.submit(item.build): (item, runs) for item, runs in needed.values()}
        for done, future in enumerate(as_completed(futures), 1):
            item, runs = futures[future]
            try:
                future.result()
            except GaptuiError as exc:
                for h in runs:
                    errors.setdefault(h, f"{item.label}: {exc}")
            if progress is not None:
                progress(done, total, item.label)
    return errors
