"""The history's journal: a write appends the documents it changed, readers replay it, a SIGKILL loses no write
that returned, a torn line is cut off, and the journal is folded into history.json when large and at close."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import gaptui.history.journal as history_mod
from engine.errors import GaptuiError
from gaptui.history.journal import JournalStorage, journal_path
from gaptui.history.store import History, read_records
from gaptui.workspace import Workspace
from tests.support import ROOT
from tests.support.records import queued_record


def _filled(tmp_path: Path, count: int) -> Workspace:
    ws = Workspace(tmp_path)
    with History(ws, write=True) as h:
        h.put_many([queued_record(i) for i in range(count)])
    return ws


def test_a_filing_appends_one_line_and_leaves_the_file_alone(tmp_path: Path) -> None:
    ws = _filled(tmp_path, 300)
    assert journal_path(ws.history).stat().st_size == 0  # folded in at close
    inode = ws.history.stat().st_ino
    with History(ws, write=True) as h:
        for i in range(5):
            h.update(f"{i:064x}", status="done", metrics={"val_lap_acc": i / 10})
        lines = journal_path(ws.history).read_bytes().splitlines()
        assert len(lines) == 5 and ws.history.stat().st_ino == inode  # the file was not rewritten
        assert json.loads(lines[0]) == {
            "tables": {"runs": {"1": {**queued_record(0), "status": "done", "metrics": {"val_lap_acc": 0.0}}}}
        }
        # a reader sees the writes before the writer closes
        shown = {r["id"]: r for r in read_records(ws)}
        assert shown[f"{4:012x}"]["status"] == "done" and shown[f"{5:012x}"]["status"] == "queued"
    assert ws.history.stat().st_ino != inode and journal_path(ws.history).stat().st_size == 0
    stored = json.loads(ws.history.read_text())["runs"]
    assert [stored[str(i + 1)]["status"] for i in range(6)] == ["done"] * 5 + ["queued"]


def test_the_journal_is_folded_in_once_it_outgrows_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ws = _filled(tmp_path, 20)
    monkeypatch.setattr(history_mod, "COMPACT_MIN_BYTES", 0)
    size = ws.history.stat().st_size
    with History(ws, write=True) as h:
        folds = 0
        for i in range(60):
            inode = ws.history.stat().st_ino
            h.update(f"{i % 20:064x}", note="x" * 50)
            folds += ws.history.stat().st_ino != inode
            assert journal_path(ws.history).stat().st_size <= size + 1000
        assert 1 <= folds <= 60 // 2
    assert [r["note"] for r in read_records(ws)] == ["x" * 50] * 20


def test_a_reader_replays_only_the_new_lines_and_reports_what_changed(tmp_path: Path) -> None:
    ws = _filled(tmp_path, 50)
    with History(ws) as reader, History(ws, write=True, exclusive=False) as writer:
        assert len(reader.records()) == 50
        assert reader.changes() is None  # it loaded the whole history: nothing finer to say
        assert reader.changes() == []
        writer.update(f"{7:064x}", status="done")
        writer.update(f"{9:064x}", tags=["best"])
        changed = reader.changes()
        assert [r["id"] for r in changed] == [f"{7:012x}", f"{9:012x}"]
        assert changed[0]["status"] == "done" and changed[1]["tags"] == ["best"]
        writer.remove_many([f"{9:064x}"])
        assert reader.changes() is None  # a record went: read them all again
        assert len(reader.records()) == 49


def test_a_torn_last_line_is_no_write_and_the_next_writer_cuts_it(tmp_path: Path) -> None:
    ws = _filled(tmp_path, 3)
    with History(ws, write=True, exclusive=False) as h:
        h.update(f"{1:064x}", status="done")
        with open(journal_path(ws.history), "ab") as fh:  # a writer killed half-way through its line
            fh.write(b'{"tables": {"runs": {"1": {"id": "0000')
        assert [r["status"] for r in read_records(ws)] == ["queued", "done", "queued"]
        h.update(f"{2:064x}", status="failed")
        lines = journal_path(ws.history).read_bytes().split(b"\n")
        assert lines[-1] == b"" and all(json.loads(line) for line in lines[:-1])
    assert [r["status"] for r in read_records(ws)] == ["queued", "done", "failed"]


def test_a_corrupt_journal_line_is_one_error_and_kept(tmp_path: Path) -> None:
    ws = _filled(tmp_path, 2)
    journal_path(ws.history).write_bytes(b'{"tables": {"runs": {"1": {"status": "done"}}}}\n')
    with pytest.raises(GaptuiError, match="run record 1 lacks id, hash"):
        read_records(ws)
    journal_path(ws.history).write_bytes(b"not json\n")
    with pytest.raises(GaptuiError, match=r"journal .* is corrupt \(line 1 after byte 0"):
        read_records(ws)
    assert journal_path(ws.history).read_bytes() == b"not json\n"


@pytest.mark.e2e
def test_sigkill_between_filings_loses_no_filing_that_returned(tmp_path: Path) -> None:
    ws = _filled(tmp_path, 400)
    code = (
        "import sys\n"
        "from gaptui.history.store import History\n"
        "from pathlib import Path\n"
        "from gaptui.workspace import Workspace\n"
        "h = History(Workspace(Path(sys.argv[1])), write=True)\n"
        "for i in range(400):\n"
        "    h.update(f'{i:064x}', status='done', metrics={'val_lap_acc': i})\n"
        "    print(i, flush=True)\n"
        "    if i == 150: sys.stdin.readline()  # wait to be killed\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(ws.root)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    filed = [int(proc.stdout.readline()) for _ in range(151)]
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    records = read_records(ws)
    done = {int(r["id"], 16) for r in records if r["status"] == "done"}  # ids: the hash's hex digits
    assert done == set(filed) and len(records) == 400
    with History(ws, write=True) as h:  # the next manager opens it and folds the journal in
        assert len(h.records()) == 400
    assert journal_path(ws.history).stat().st_size == 0


def test_the_storage_reads_a_history_without_journal_and_a_journal_without_history(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    journal_path(ws.history).write_bytes(
        json.dumps({"tables": {"runs": {"1": queued_record(1)}, "meta": {"1": {"schema": 2}}}}).encode() + b"\n"
    )
    assert not ws.history.exists()
    assert [r["id"] for r in read_records(ws)] == [f"{1:012x}"]
    assert JournalStorage(ws.history, read_only=True).read()["runs"]["1"]["hash"] == f"{1:064x}"
