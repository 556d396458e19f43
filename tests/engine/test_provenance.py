"""Which code a run ran: the version gaptui records changes with the code (its commit in a checkout, a hash of its
sources otherwise), ``show`` and the report print it, and records from before it read as they are."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from engine import provenance
from gaptui.history.store import History
from gaptui.workspace import Workspace
from tests.support import ROOT
from tests.support.cli import gaptui


def _git(folder: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(folder), "-c", "user.name=t", "-c", "user.email=t@t", *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def _sources(folder: Path) -> Path:
    """A copy of two small source files in the layout of an install: ``gaptui/`` and ``engine/`` side by side."""
    for package in provenance.PACKAGES:
        (folder / package).mkdir(parents=True)
        (folder / package / "__init__.py").write_text(f'"""{package}"""\n')
    return folder


@pytest.mark.e2e
def test_this_checkout_is_named_by_its_commit() -> None:
    if not (ROOT / ".git").exists():
        pytest.skip("not run from a git checkout")
    version = provenance.code_version()
    head = _git(ROOT, "rev-parse", "HEAD")[: provenance.SHORT]
    assert version.startswith(f"{provenance.release()} (commit {head}")
    assert version is provenance.code_version() or version == provenance.code_version()  # cached: one answer


@pytest.mark.e2e
def test_a_checkout_with_changes_is_dirty_and_files_elsewhere_are_not_its_code(tmp_path: Path) -> None:
    repo = _sources(tmp_path / "repo")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "first")
    head = _git(repo, "rev-parse", "HEAD")[: provenance.SHORT]
    assert provenance.checkout_commit(repo) == head
    (repo / "notes.txt").write_text("a file outside the code\n")
    assert provenance.checkout_commit(repo) == head
    (repo / "engine" / "new.py").write_text("x = 1\n")  # a new module is a change of the code
    assert provenance.checkout_commit(repo) == f"{head}-dirty"
    # an install whose site-packages lies inside some repository is not that repository's code
    nested = _sources(repo / "venv" / "site-packages")
    assert provenance.checkout_commit(nested) is None


def test_outside_a_checkout_the_sources_hash_changes_with_any_source_file(tmp_path: Path) -> None:
    copy = _sources(tmp_path / "site")
    first = provenance.sources_hash(copy)
    assert len(first) == provenance.SHORT and int(first, 16) >= 0
    assert provenance.sources_hash(copy) == first
    moved = tmp_path / "other"
    shutil.copytree(copy, moved)
    assert provenance.sources_hash(moved) == first  # the same sources installed elsewhere: the same hash
    (moved / "gaptui" / "__init__.py").write_text('"""gaptui, changed"""\n')
    assert provenance.sources_hash(moved) != first
    (copy / "engine" / "extra.py").write_text("")
    assert provenance.sources_hash(copy) != first


def _workspace(tmp_path: Path, versions: dict[str, str] | None) -> Workspace:
    ws = Workspace.resolve(tmp_path / "ws")
    h = "ab" * 32
    record = {
        "id": h[:12],
        "hash": h,
        "status": "done",
        "task": "alignment",
        "axes": {"dataset": "er", "noise": 0.12, "model": "gin", "recipe": "gaptui"},
        "seed": 0,
        "metrics": {"val_lap_acc": 0.5},
        "repro": {"versions": versions} if versions else {},
        "created": "2026-01-01T00:00:00",
    }
    with History(ws, write=True) as history:
        history.put(record)
    return ws


def test_show_prints_the_code_and_reads_records_from_before_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    new = _workspace(tmp_path / "new", {"gaptui": "0.1.0 (commit 1a2b3c4d5e6f-dirty)", "torch": "2.13.0"})
    shown = gaptui(monkeypatch, capsys, "show", "abababababab", "-w", str(new.root))
    assert shown.code == 0 and "0.1.0 (commit 1a2b3c4d5e6f-dirty)" in shown.out
    old = _workspace(tmp_path / "old", {"gaptui": "0.1.0", "torch": "2.13.0"})
    shown = gaptui(monkeypatch, capsys, "show", "abababababab", "-w", str(old.root))
    assert shown.code == 0 and "0.1.0 (code not recorded)" in shown.out, shown.err
    bare = _workspace(tmp_path / "bare", None)
    assert gaptui(monkeypatch, capsys, "show", "abababababab", "-w", str(bare.root)).code == 0


def test_the_report_counts_the_code_of_the_runs_and_names_its_own() -> None:
    from gaptui import report

    def done(n: int, code: str) -> dict:
        return {"id": f"{n:012x}", "status": "done", "seed": 0, "repro": {"versions": {"gaptui": code}}}

    lines = report._repro_section([done(1, "0.1.0 (commit 1a2b3c4d5e6f)"), done(2, "0.1.0"), done(3, "0.1.0")])
    assert "- gaptui code (runs): 0.1.0 (code not recorded) (2), 0.1.0 (commit 1a2b3c4d5e6f) (1)" in lines
    assert report._generator()[0] == f"- gaptui code of this report: {provenance.code_version()}"
