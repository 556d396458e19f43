"""The ``gaptui`` command line run in this process (``gaptui.cli.app.main`` with its arguments), for the many bad-input
cases whose code path is the same as a subprocess's and that a subprocess per case would make slow on 2 cores."""

from __future__ import annotations

import sys
from dataclasses import dataclass

import pytest


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
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    captured = capsys.readouterr()
    return Ran(code, captured.out, captured.err)
