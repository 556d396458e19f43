"""Ids in CLI tables are never cut: at 80 columns on a terminal the other columns wrap or shorten, and piped the
table is plain text with every value complete, so an id can be copied into ``show``, ``tag`` or ``note``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gaptui.history.store import History
from gaptui.workspace import Workspace
from tests.support.cli import run_cli

#: Every test here starts the CLI or a worker in a subprocess.
pytestmark = pytest.mark.e2e

#: What a 12-hex-digit run id looks like, whole.
RUN_ID = re.compile(r"\b[0-9a-f]{12}\b")
#: Rich's styles (bold headers) on a terminal.
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def workspace(tmp_path: Path) -> tuple[Workspace, list[str]]:
    """Runs of two families whose descriptions are long (a parameterised dataset, three pooling words)."""
    ws = Workspace.resolve(tmp_path / "ws")
    records = []
    for n, (task, axes) in enumerate(
        [
            ("alignment", {"dataset": "er[degree=4,n=20]", "noise": 0.12, "model": "gatv2", "recipe": "gaptui"}),
            ("properties", {"dimension": "generalisation", "pooling": "sopool_attentional", "property": "function"}),
            ("alignment", {"dataset": "ringmol[count=300]", "noise": 0.3, "model": "gin", "recipe": "legacy"}),
        ]
    ):
        h = f"{n + 1:x}{'834f2a9c1b2d4e' * 5}"[:64]
        records.append(
            {
                "id": h[:12],
                "hash": h,
                "status": "done",
                "task": task,
                "axes": axes,
                "seed": 0,
                "metrics": {"val_lap_acc": 0.285} if task == "alignment" else {"val_acc": 0.66},
                "params": 58031,
                "duration": 7.0,
                "tags": [],
                "created": f"2024-01-01T00:00:{n:02d}",
            }
        )
    with History(ws, write=True) as history:
        history.put_many(records)
    return ws, [r["id"] for r in records]


def test_history_piped_prints_every_id_whole(tmp_path: Path) -> None:
    ws, ids = workspace(tmp_path)
    listed = run_cli("history", "-w", str(ws.root), env={"COLUMNS": "80"})  # stdout is a pipe here
    assert listed.returncode == 0, listed.stderr
    assert set(RUN_ID.findall(listed.stdout)) == set(ids)
    assert "…" not in listed.stdout and "│" not in listed.stdout
    row = next(line for line in listed.stdout.splitlines() if line.startswith(ids[1]))
    assert "generalisation sopool_attentional function" in row  # plain text: every value on its row, complete


def test_history_at_80_columns_on_a_terminal_keeps_ids_whole(tmp_path: Path) -> None:
    ws, ids = workspace(tmp_path)
    env = {"COLUMNS": "80", "TTY_COMPATIBLE": "1", "NO_COLOR": "1"}  # Rich draws as on an 80-column terminal
    for args in (["history"], ["history", "--task", "alignment"]):
        listed = run_cli(*args, "-w", str(ws.root), env=env)
        assert listed.returncode == 0, listed.stderr
        text = ANSI.sub("", listed.stdout)
        assert max(len(line) for line in text.splitlines()) <= 80
        shown = set(RUN_ID.findall(text))
        expected = set(ids) if len(args) == 1 else {ids[0], ids[2]}
        assert shown == expected, text
        for run in expected:  # each id is copied from its line as it is and found again
            shown_run = run_cli("show", run, "-w", str(ws.root))
            assert shown_run.returncode == 0, shown_run.stderr
