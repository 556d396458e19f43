"""Worker processes seen from outside: whether a pid is still a run's worker, whether a ``running`` record's
worker is gone (:func:`worker_gone`, the one rule every reader and the manager's recovery use), whether a run is
a foreground ``gaptui train``'s (:func:`in_foreground`: no manager adopts it), the tail of its log."""

from __future__ import annotations

import fcntl
import os
import platform
from collections.abc import Mapping
from pathlib import Path
from typing import Any


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


def folder_locked(run_dir: str | os.PathLike[str]) -> bool:
    """Whether a process holds the run folder's ``worker.lock`` (a worker trains it); True when that cannot be
    told (a lock file this user cannot open, a filesystem without locks). Never creates or writes a file: the
    probe is a shared lock, taken and dropped at once."""
    try:
        fh = open(Path(run_dir) / "worker.lock", "rb")  # noqa: SIM115 - closed below
    except FileNotFoundError:
        return False  # no worker ever locked this folder (or the folder is gone)
    except OSError:
        return True
    try:
        fcntl.flock(fh.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return True
    else:
        fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
        return False
    finally:
        fh.close()


def worker_gone(record: Mapping[str, Any]) -> bool:
    """Whether a ``running`` record's local worker process is gone, so the run was interrupted (the manager or
    ``gaptui train`` that drove it died without filing it): readers show it ``interrupted``, the next manager's
    :meth:`~gaptui.scheduler.Scheduler.recover` files it.

    Never True for a run whose worker may be alive: not ``running``; on another backend (a ``slurm`` field or a
    ``backend`` other than local: no local process); started on another host (its ``host``); its ``pid`` still
    the worker of its folder (:func:`pid_alive`, which tells a reused pid apart by its command line); or its
    folder's ``worker.lock`` held (a worker of another user or PID namespace, an unlisted pid). ``run_dir`` must be
    absolute (as :class:`~gaptui.history.History` gives it)."""
    if record.get("status") != "running":
        return False
    if record.get("slurm") or (record.get("backend") or "local") != "local":
        return False
    host = record.get("host")
    if host and host != platform.node():
        return False
    run_dir = record.get("run_dir")
    if not isinstance(run_dir, str) or not run_dir:
        return False
    pid = record.get("pid")
    if isinstance(pid, int) and pid > 0 and pid_alive(pid, run_dir):
        return False
    return not folder_locked(run_dir)


#: The ``driver`` of a run trained by a foreground ``gaptui train`` (its own process files it); managers record
#: ``manager``.
FOREGROUND = "train"


def driver_of(record: Mapping[str, Any]) -> str:
    """Who started a record's worker: ``manager`` or :data:`FOREGROUND` (records written before the driver was
    recorded: a ``foreground`` slot was a ``gaptui train``)."""
    driver = record.get("driver")
    if isinstance(driver, str) and driver:
        return driver
    return FOREGROUND if record.get("slot") == "foreground" else "manager"


def in_foreground(record: Mapping[str, Any]) -> bool:
    """Whether a ``running`` record is trained by a foreground ``gaptui train`` that may still be at it: its
    process (``driver_pid``) or its worker is alive, or it runs on another host. That command files the run, so
    no manager adopts, stops or files it; a manager may only wait for it."""
    if record.get("status") != "running" or driver_of(record) != FOREGROUND:
        return False
    host = record.get("host")
    if host and host != platform.node():
        return True
    pid = record.get("driver_pid")
    if isinstance(pid, int) and pid > 0 and _gaptui_alive(pid):
        return True
    return not worker_gone(record)


def _gaptui_alive(pid: int) -> bool:
    """Whether ``pid`` is a live gaptui command (not a reused pid)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: its command line tells
    try:
        return b"gaptui" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True  # no /proc: trust the pid
