"""Worker processes seen from outside: whether a pid is still a run's worker, the tail of its log."""

from __future__ import annotations

import os
from pathlib import Path


def tail(path: Path, lines: int = 20) -> list[str]:
    """The last ``lines`` lines of a text file (a worker's log or stderr), read from its end; [] when absent."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 16384))
            return fh.read().decode(errors="replace").splitlines()[-lines:]
    except FileNotFoundError:
        return []


def pid_alive(pid: int, run_dir: str) -> bool:
    """Whether ``pid`` is still the worker of ``run_dir`` (not a reused pid)."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return True  # no /proc: trust the pid
    return b"engine" in cmdline and run_dir.encode() in cmdline
