"""Launching engine workers as subprocesses: the one place that knows the worker's command line."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from engine.tasks import TaskSpec


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
