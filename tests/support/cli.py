"""The ``gaptui`` command line as tests run it: in a subprocess (``run_cli``, ``start_cli``), as a user does, or in
this process (``gaptui``, through ``gaptui.cli.app.main``) for the many cases whose code path is the same as a
subprocess's and that a subprocess per case would make slow on 2 cores."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import ROOT

#: The environment of a CLI subprocess: offline, wide lines, torch on one thread.
CLI_ENV = {**os.environ, "GAPTUI_OFFLINE": "1", "COLUMNS": "200", "OMP_NUM_THREADS": "1"}
#: A foreground ``gaptui train`` of a tiny ER grid cell (add ``--workspace``).
TRAIN_ARGS = ["train", "--base", "er", "--noise", "0.05", "--model", "gcn", "--train", "20", "--val", "6"]
TRAIN_ARGS += ["-p", "n=16", "-p", "degree=4", "--batch-size", "10"]


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 300, cwd: Path | None = None):
    """Run ``python -m gaptui ARGS`` in a subprocess; returns the CompletedProcess (text mode)."""
    full_env = {**os.environ, "COLUMNS": "200", "GAPTUI_OFFLINE": "1", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "gaptui", *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
        cwd=cwd or ROOT,
    )


def start_cli(*args: str, env: dict[str, str] | None = None, quiet: bool = False) -> subprocess.Popen[str]:
    """Start ``python -m gaptui ARGS`` and return at once (a manager the test signals, kills or waits for);
    ``quiet``: its output discarded, in a session of its own (a SIGKILL of its group leaves the test alone)."""
    streams = subprocess.DEVNULL if quiet else subprocess.PIPE
    return subprocess.Popen(
        [sys.executable, "-m", "gaptui", *args],
        stdout=streams,
        stderr=streams,
        text=True,
        cwd=ROOT,
        env={**os.environ, "GAPTUI_OFFLINE": "1", "COLUMNS": "200", **(env or {})},
        start_new_session=quiet,
    )


@dataclass(frozen=True)
class Ran:
    """What one command did: its exit status and its two streams."""

    code: int
    out: str
    err: str

    def one_error(self) -> str:
        """The single ``error:`` line of a refused command (``note:`` lines may come first); fails otherwise."""
        lines = [line for line in self.err.strip().splitlines() if not line.startswith("note: ")]
        assert self.code == 2, (self.code, self.err)
        assert len(lines) == 1 and lines[0].startswith("error: "), self.err
        assert "Traceback" not in self.err
        return lines[0]


def gaptui(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str) -> Ran:
    """Run ``gaptui ARGS`` through its console entry point (an uncaught exception, a traceback for a user, fails
    the test as it is raised)."""
    import gaptui.history.store
    from gaptui.cli.app import main

    gaptui.history.store.warned.clear()  # each command is a process of its own: it names what it leaves out once
    capsys.readouterr()
    monkeypatch.setattr(sys, "argv", ["gaptui", *args])
    monkeypatch.setenv("COLUMNS", "200")
    from gaptui.cli import common

    for shared in (common.console, common.err_console):  # made once per process: as wide as a fresh one now
        monkeypatch.setattr(shared, "width", 200)
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    captured = capsys.readouterr()
    return Ran(code, captured.out, captured.err)
