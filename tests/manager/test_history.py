"""History store: atomic writes, corrupt files kept, schema version, the workspace lock."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from engine.errors import GaptuiError
from gaptui.history.journal import SCHEMA_VERSION, journal_path
from gaptui.history.store import History, read_records
from gaptui.workspace import Workspace
from tests.support import FIXTURES
from tests.support.cli import run_cli
from tests.support.records import queued_record


def test_records_round_trip_and_schema(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    with History(ws, write=True) as h:
        h.put_many([queued_record(1), queued_record(2)])
        h.update(f"{1:064x}", status="done", metrics={"val_lap_acc": 0.5})
        h.put_many([queued_record(1)])  # already there: not duplicated
    data = json.loads(ws.history.read_text())
    assert next(iter(data["meta"].values()))["schema"] == SCHEMA_VERSION
    records = read_records(ws)
    assert [r["status"] for r in records] == ["done", "queued"]
    with History(ws) as h:
        assert h.get("000000000001")["metrics"] == {"val_lap_acc": 0.5}
        with pytest.raises(GaptuiError, match="ambiguous"):
            h.get("0000")
        with pytest.raises(GaptuiError, match="no run 'zzz'"):
            h.get("zzz")


def test_write_is_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A write is one appended journal line: one that fails is undone; a fold of the journal into the file that
    fails (killed mid-rename) leaves the old file, and the journal still holds every write that returned."""
    ws = Workspace(tmp_path)
    with History(ws, write=True) as h:
        h.put_many([queued_record(1)])
    before = ws.history.read_bytes()

    real_write = os.write

    def torn(fd, data):
        real_write(fd, data[: len(data) // 2])  # half the line reaches the disk, then the writer dies
        raise OSError(errno.EIO, "killed mid-write")

    monkeypatch.setattr(os, "write", torn)
    with History(ws, write=True) as h, pytest.raises(GaptuiError, match="killed mid-write"):
        h.update(f"{1:064x}", status="done")
    monkeypatch.undo()
    assert ws.history.read_bytes() == before
    assert read_records(ws)[0]["status"] == "queued"

    def boom(*args, **kwargs):
        raise OSError("killed mid-rename")

    monkeypatch.setattr(os, "replace", boom)
    with History(ws, write=True) as h:
        h.update(f"{1:064x}", status="done")  # appended: it returned, so it is kept
    assert ws.history.read_bytes() == before  # the fold at close failed: the old file is intact
    monkeypatch.undo()
    assert read_records(ws)[0]["status"] == "done"
    assert journal_path(ws.history).stat().st_size > 0
    with History(ws, write=True):
        pass  # the next writer folds it in
    assert journal_path(ws.history).stat().st_size == 0
    assert json.loads(ws.history.read_text())["runs"]["1"]["status"] == "done"


@pytest.mark.e2e
def test_corrupt_history_is_reported_and_kept(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    ws.history.write_text('{"runs": {"1": {"id": ')
    with pytest.raises(GaptuiError, match="corrupt"):
        read_records(ws)
    res = run_cli("history", "--workspace", str(tmp_path))
    assert res.returncode == 2 and "corrupt" in res.stderr and "left untouched" in res.stderr
    assert ws.history.read_text() == '{"runs": {"1": {"id": '


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    ws.history.write_text(json.dumps({"meta": {"1": {"schema": SCHEMA_VERSION + 1}}, "runs": {}}))
    with pytest.raises(GaptuiError, match="newer than this gaptui"):
        read_records(ws)


@pytest.mark.e2e
def test_lock_stops_a_second_manager_but_not_readers_tags_or_notes(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    with History(ws, write=True, purpose="gaptui run --preset x") as h:
        h.put_many([queued_record(1)])
        with pytest.raises(GaptuiError, match="in use by gaptui run --preset x"):
            History(ws, write=True)
        res = run_cli("history", "--json", "--workspace", str(tmp_path))
        assert res.returncode == 0 and json.loads(res.stdout)[0]["id"] == "000000000001"
        # tag and note go through while the manager holds the workspace, and the manager's writes keep them
        res = run_cli("tag", "000000000001", "best", "--workspace", str(tmp_path))
        assert res.returncode == 0, res.stderr
        res = run_cli("note", "0000000000", "looks good", "--workspace", str(tmp_path))
        assert res.returncode == 0, res.stderr
        h.update(f"{1:064x}", status="done")
    record = read_records(ws)[0]
    assert record["tags"] == ["best"] and record["note"] == "looks good" and record["status"] == "done"
    res = run_cli("tag", "000000000001", "-best", "--workspace", str(tmp_path))
    assert res.returncode == 0 and read_records(ws)[0]["tags"] == []


def test_a_manager_removes_temp_files_left_by_crashed_writers(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    dead = 2**22 + 11  # above the largest pid: no live process owns these
    stale = [tmp_path / f".history.json.{dead}.tmp", tmp_path / "datasets" / f".tmp-er-n5-abc-{dead}-123456789012"]
    stale[1].mkdir(parents=True)
    stale[0].write_text("{")
    live = tmp_path / f".history.json.{os.getppid()}.tmp"  # a writer that is still running keeps its file
    live.write_text("{")
    with History(ws, write=True):
        pass
    assert not any(p.exists() for p in stale) and live.exists()


FIXTURE_V1 = FIXTURES / "history_v1.json"


def test_schema_1_history_is_migrated_in_place_with_a_backup_and_nothing_lost(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    original = FIXTURE_V1.read_bytes()
    ws.history.write_bytes(original)
    old = json.loads(original)["runs"]

    # A read-only open upgrades the records in memory and leaves the file alone.
    readonly = {r["id"]: r for r in read_records(ws)}
    assert ws.history.read_bytes() == original and not list(tmp_path.glob("history.v1*"))
    # (the recipe axis came after schema 1: read from each record's spec, these runs predate recipes)
    axes = {"dataset": "er[n=20]", "noise": 0.04, "model": "gcn", "recipe": "legacy"}
    assert readonly[old["1"]["id"]]["axes"] == axes

    with History(ws, write=True) as h:
        records = {r["id"]: r for r in h.records()}
    assert (tmp_path / "history.v1.json").read_bytes() == original  # the old file, byte for byte
    data = json.loads(ws.history.read_text())
    meta = next(iter(data["meta"].values()))
    assert meta["schema"] == SCHEMA_VERSION == 2 and meta["migrated"]["from"] == 1
    assert meta["created"] == "2025-06-01T09:59:00+0000"
    assert sorted(data["runs"]) == sorted(old)  # same documents, same ids
    assert len(records) == len(old) == 4
    for doc_id, before in old.items():
        after = data["runs"][doc_id]
        assert after["task"] == "alignment" and after["depends"] == []
        recipe = "-" if before["model"] == "laplacian" else "legacy"  # the baseline is trained by no recipe
        axes = {"dataset": before["dataset"], "noise": before["noise"], "model": before["model"], "recipe": recipe}
        assert after["axes"] == axes
        for key in ("dataset", "base", "dataset_params", "noise", "noise_model", "model"):
            assert key not in after
        # every other field kept as it was
        kept = {
            k: v
            for k, v in before.items()
            if k not in ("dataset", "base", "dataset_params", "noise", "noise_model", "model")
        }
        assert {k: after[k] for k in kept} == kept
        assert records[before["id"]] == after
    assert readonly == records  # what read-only opens saw is what the migration wrote

    # Opening again changes nothing; a second v1 file migrated later keeps the first backup.
    migrated = ws.history.read_bytes()
    with History(ws, write=True):
        pass
    assert ws.history.read_bytes() == migrated
    ws.history.write_bytes(original)
    with History(ws, write=True):
        pass
    assert (tmp_path / "history.v1.json").read_bytes() == original
    assert (tmp_path / "history.v1.1.json").read_bytes() == original


@pytest.mark.e2e
def test_migrated_history_feeds_the_table_command(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    ws.root.mkdir()
    ws.history.write_bytes(FIXTURE_V1.read_bytes())
    res = run_cli("table", "--format", "json", "--workspace", str(ws.root))
    assert res.returncode == 0, res.stderr
    (doc,) = json.loads(res.stdout)
    assert doc["dataset"] == "er[n=20]" and doc["rows"] == ["laplacian", "gcn", "gin"]
    assert ws.history.read_bytes() == FIXTURE_V1.read_bytes()  # a reader never rewrites the file


def test_a_moved_workspace_opens_its_own_runs(tmp_path: Path) -> None:
    import shutil

    old = Workspace(tmp_path / "old")
    (old.runs / "000000000001").mkdir(parents=True)
    (old.runs / "000000000002").mkdir(parents=True)
    with History(old, write=True) as h:
        h.put_many([queued_record(1, run_dir=str(old.runs / "000000000001"))])
    # a record written by an older gaptui, with an absolute path
    data = json.loads(old.history.read_text())
    data["runs"]["2"] = queued_record(2, run_dir=str(old.runs / "000000000002"))
    old.history.write_text(json.dumps(data))
    new = Workspace(tmp_path / "new")
    shutil.move(old.root, new.root)
    dirs = {r["id"]: r["run_dir"] for r in read_records(new)}
    assert dirs == {"000000000001": str(new.runs / "000000000001"), "000000000002": str(new.runs / "000000000002")}


def test_the_collector_paused_for_a_load_is_restored_however_loads_overlap() -> None:
    """The app and its manager thread load the history at once: pauses nest, and the collector comes back on
    only after the last one ends (and stays off when it was off before)."""
    import gc
    import threading

    from gaptui.history.journal import gc_paused

    assert gc.isenabled()
    inner_started, outer_may_end = threading.Event(), threading.Event()
    seen: list[bool] = []

    def other_load() -> None:
        with gc_paused():
            inner_started.set()
            outer_may_end.wait(10)
        seen.append(gc.isenabled())  # the first load still runs

    with gc_paused():
        thread = threading.Thread(target=other_load)
        thread.start()
        inner_started.wait(10)
        outer_may_end.set()
        thread.join(10)
        assert not gc.isenabled()
    assert seen == [False] and gc.isenabled()

    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
