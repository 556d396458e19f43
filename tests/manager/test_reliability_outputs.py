"""Every command that writes files into a user's --out folder (figures, report, export, properties export) does it
all or none, keeps a manifest of its own files, never replaces a file of the user's without --force, and is left by a
kill at any moment either as it was or as files its manifest claims, which the rerun completes (no --force) without
leaving a staging folder behind. Faults are injected in-process (os.replace and open patched) or by a real SIGKILL of
a subprocess; a few CLI runs check the one error line."""

from __future__ import annotations

import builtins
import errno
import io
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from engine.errors import GaptuiError
from engine.files import STAGE_PREFIX, describe_os_error, written_by
from tests.support import ROOT
from tests.support.cli import run_cli
from tests.support.records import history_of, rec

DEAD = 2**22 + 11  # above the largest pid: no live process owns a name holding it


class Killed(BaseException):
    """Stands in for a SIGKILL in-process: not an Exception, so nothing on the way out catches it."""


def _history(datasets: tuple[str, ...] = ("er",), seeds: int = 3) -> list[dict[str, Any]]:
    return [
        rec(model, noise, 0.9 - noise * (m + 1) + 0.01 * seed, seed, dataset=dataset)
        for dataset in datasets
        for m, model in enumerate(("gcn", "gin"))
        for noise in (0.0, 0.1)
        for seed in range(seeds)
    ]


def _files(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (relative posix name -> bytes)."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _staging(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(STAGE_PREFIX))


def _kill_on_replace(monkeypatch: pytest.MonkeyPatch, target: Path, nth: int = 1) -> list[int]:
    """``os.replace`` onto ``target`` raises :class:`Killed` the ``nth`` time (the rename does not happen)."""
    real = os.replace
    seen = [0]

    def replace(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        if Path(dst) == target:
            seen[0] += 1
            if seen[0] == nth:
                raise Killed(f"killed before {dst}")
        real(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", replace)
    return seen


def _full_disk(monkeypatch: pytest.MonkeyPatch, name: str) -> dict[str, str | None]:
    """Writing any file whose name holds ``state["full"]`` fails as a full disk does (ENOSPC from write(), which
    names no file); set ``state["full"] = None`` to free the space."""
    real = io.open
    state: dict[str, str | None] = {"full": name}

    class FullFile:
        def __init__(self, fh: Any) -> None:
            self._fh = fh

        def write(self, data: Any) -> int:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        def __enter__(self) -> FullFile:
            return self

        def __exit__(self, *exc: Any) -> None:
            self._fh.close()

        def __getattr__(self, attr: str) -> Any:
            return getattr(self._fh, attr)

    def fake_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        fh = real(file, mode, *args, **kwargs)
        full = state["full"]
        if full and isinstance(file, (str, os.PathLike)) and any(c in mode for c in "wax+") and full in str(file):
            return FullFile(fh)
        return fh

    monkeypatch.setattr(builtins, "open", fake_open)
    monkeypatch.setattr(io, "open", fake_open)
    return state


@pytest.fixture
def plotting() -> None:
    pytest.importorskip("matplotlib")
    pytest.importorskip("markdown")


# ------------------------------------------------------------------------------------------ a user's file


def test_figures_never_replace_a_users_file_without_force(tmp_path: Path, plotting: None) -> None:
    from gaptui import figures

    out = tmp_path / "figs"
    out.mkdir()
    (out / "alignment-cd.png").write_bytes(b"my own diagram")
    records = _history()
    with pytest.raises(GaptuiError) as refused:
        figures.figure_files(records, out, "alignment")
    assert str(refused.value) == (
        f"{out / 'alignment-cd.png'} exists and was not written by gaptui figures; "
        "choose another --out folder or pass --force to replace it"
    )
    assert _files(out) == {"alignment-cd.png": b"my own diagram"}  # nothing written, no staging folder
    written = figures.figure_files(records, out, "alignment", force=True)
    assert (out / "alignment-cd.png").read_bytes().startswith(b"\x89PNG")
    assert written_by(out, figures.MANIFEST) == {p.name for p in written}
    again = figures.figure_files(records, out, "alignment")  # its own files now: no --force needed
    assert again == written and _staging(out) == []


def test_figures_remove_only_their_own_stale_files(tmp_path: Path, plotting: None) -> None:
    from gaptui import figures

    out = tmp_path / "figs"
    figures.figure_files(_history(("er", "ws")), out, "alignment")
    figures.figure_files(_history(("er", "ws")), out, "alignment", "svg")
    assert (out / "alignment-lines-ws.png").is_file()
    (out / "alignment-lines-zz.png").write_bytes(b"mine")  # a user's file the manifest does not list
    (out / "gape-cd.png").write_bytes(b"also mine")
    figures.figure_files(_history(("er",)), out, "alignment")
    names = set(_files(out))
    assert "alignment-lines-ws.png" not in names and "alignment-gap-ws.png" not in names  # stale: removed
    assert {"alignment-lines-ws.svg", "alignment-lines-er.png"} <= names  # another format: kept
    assert (out / "alignment-lines-zz.png").read_bytes() == b"mine" and (
        out / "gape-cd.png"
    ).read_bytes() == b"also mine"
    assert "alignment-lines-ws.svg" in written_by(out, figures.MANIFEST)


def test_a_manifest_never_makes_a_command_touch_a_file_outside_its_folder(tmp_path: Path) -> None:
    from gaptui import analysis

    out = tmp_path / "out"
    out.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (out / analysis.EXPORT_MANIFEST).write_text(json.dumps({"files": ["../victim.txt", str(victim), "tables.md"]}))
    (out / "tables.md").write_text("an old export")
    analysis.export_all(_history(), out)
    assert victim.read_text() == "keep me"
    assert written_by(out, analysis.EXPORT_MANIFEST) == {*analysis.EXPORT_FILES}


# ------------------------------------------------------------------------------------------ kills


@pytest.fixture(scope="module")
def old_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A report of a history with two datasets, and a file of the user's beside it."""
    pytest.importorskip("matplotlib")
    pytest.importorskip("markdown")
    from gaptui import report

    out = tmp_path_factory.mktemp("old") / "report"
    report.write_report(_history(("er", "ws")), out)
    (out / "notes.txt").write_text("the user's notes")
    return out


@pytest.mark.parametrize(
    ("target", "nth"),
    [
        ("staging", 1),  # drawing the figures (an atomic write inside the staging folder)
        (".gaptui-report.json", 1),  # the intent manifest
        ("report.md", 1),  # the first file moved in
        ("figures/alignment-gap-er.png", 1),  # half the figures moved in
        (".gaptui-report.json", 2),  # the final manifest: all moved, stale figures removed
    ],
)
def test_a_report_killed_at_any_point_is_completed_by_the_rerun(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, old_report: Path, plotting: None, target: str, nth: int
) -> None:
    from gaptui import report

    out = tmp_path / "report"
    shutil.copytree(old_report, out)
    before = _files(out)
    new = _history(("er", "ba"), seeds=4)  # figures of 'ba' are new, those of 'ws' stale
    if target == "staging":
        real = os.replace

        def replace(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
            if STAGE_PREFIX in str(dst):
                raise Killed("killed while staging")
            real(src, dst, *args, **kwargs)

        monkeypatch.setattr(os, "replace", replace)
    else:
        _kill_on_replace(monkeypatch, out / target, nth)
    with pytest.raises(Killed):
        report.write_report(new, out)
    monkeypatch.undo()
    # Either as it was, or files the manifest claims as the report's own.
    claimed = written_by(out, report.MANIFEST)
    for name, data in _files(out).items():
        assert name == report.MANIFEST or before.get(name) == data or name in claimed, name
    assert (out / "notes.txt").read_text() == "the user's notes"
    written = report.write_report(new, out)  # no --force
    assert _staging(out) == []
    fresh = tmp_path / "fresh"
    report.write_report(new, fresh)
    after = _files(out)
    assert after.pop("notes.txt") == b"the user's notes"
    assert after == _files(fresh)  # the same as a report written at once: stale figures of 'ws' gone
    assert "figures/alignment-lines-ba.png" in after and "figures/alignment-lines-ws.png" not in after
    assert sorted(p.relative_to(out).as_posix() for p in written) == sorted(set(after) - {report.MANIFEST})


def test_figures_killed_while_moving_in_are_completed_by_the_rerun(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, plotting: None
) -> None:
    from gaptui import figures

    out = tmp_path / "figs"
    figures.figure_files(_history(("er", "ws")), out, "alignment")
    _kill_on_replace(monkeypatch, out / "alignment-lines-er.png")
    with pytest.raises(Killed):
        figures.figure_files(_history(("er",), seeds=4), out, "alignment")
    monkeypatch.undo()
    assert (out / "alignment-cd.png").read_bytes() != b""  # moved in before the kill, claimed by the manifest
    assert "alignment-lines-ws.png" in written_by(out, figures.MANIFEST)  # stale, still listed: the rerun removes it
    written = figures.figure_files(_history(("er",), seeds=4), out, "alignment")
    assert sorted(_files(out)) == sorted([figures.MANIFEST, *(p.name for p in written)]) and _staging(out) == []


_KILLER = """
import json, os, signal, sys
from pathlib import Path

records, out, target, nth = json.loads(Path(sys.argv[1]).read_text()), Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])
real, seen = os.replace, [0]

def replace(src, dst, *args, **kwargs):
    if Path(dst) == out / target:
        seen[0] += 1
        if seen[0] == nth:
            os.kill(os.getpid(), signal.SIGKILL)
    real(src, dst, *args, **kwargs)

os.replace = replace
if sys.argv[5] == "report":
    from gaptui.report import write_report
    write_report(records, out)
else:
    from gaptui.analysis import export_all
    export_all(records, out)
"""


def _killed(tmp_path: Path, records: list, out: Path, target: str, nth: int, command: str) -> None:
    (tmp_path / "records.json").write_text(json.dumps(records))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    args = [sys.executable, "-c", _KILLER, str(tmp_path / "records.json"), str(out), target, str(nth), command]
    res = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert res.returncode == -signal.SIGKILL, res.stderr


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("target", "nth"), [(".gaptui-export.json", 1), ("tables.md", 1), ("runs.json", 1), (".gaptui-export.json", 2)]
)
def test_an_export_killed_by_sigkill_is_completed_by_the_rerun(tmp_path: Path, target: str, nth: int) -> None:
    from gaptui import analysis

    out = tmp_path / "tables"
    analysis.export_all(_history(seeds=2), out)
    (out / "mine.csv").write_text("the user's")
    grown = _history(seeds=5)
    _killed(tmp_path, grown, out, target, nth, "export")
    assert len(_staging(out)) == 1  # a SIGKILL cleans nothing up
    claimed = {analysis.EXPORT_MANIFEST, *written_by(out, analysis.EXPORT_MANIFEST)}
    left = {n for n in _files(out) if not n.startswith(STAGE_PREFIX) and not n.endswith(".tmp")}
    assert left - {"mine.csv"} <= claimed and (out / "mine.csv").read_text() == "the user's"
    analysis.export_all(grown, out)  # no --force
    assert _staging(out) == [] and not list(out.glob(".*.tmp")) and (out / "mine.csv").read_text() == "the user's"
    assert len(json.loads((out / "runs.json").read_text())) == len(grown)
    assert json.loads((out / analysis.EXPORT_MANIFEST).read_text())["files"] == list(analysis.EXPORT_FILES)


@pytest.mark.e2e
def test_a_report_killed_by_sigkill_leaves_a_staging_folder_the_rerun_removes(tmp_path: Path, plotting: None) -> None:
    from gaptui import report

    out = tmp_path / "report"
    _killed(tmp_path, _history(), out, "figures/alignment-gap-er.png", 1, "report")
    assert len(_staging(out)) == 1 and (out / "report.md").is_file()
    assert "report.md" in written_by(out, report.MANIFEST)
    report.write_report(_history(), out)
    assert _staging(out) == [] and (out / "figures" / "alignment-gap-er.png").is_file()


def test_a_rerun_removes_only_its_own_dead_staging_folders(tmp_path: Path) -> None:
    from gaptui import analysis

    out = tmp_path / "tables"
    analysis.export_all(_history(), out)
    dead = out / f"{STAGE_PREFIX}export-{DEAD}-abc123"
    (dead / "sub").mkdir(parents=True)
    (dead / "sub" / "runs.json").write_text("{}")
    (out / f"..gaptui-export.json.{DEAD}.tmp").write_text("{")  # a killed atomic write of the manifest
    kept = [
        out / f"{STAGE_PREFIX}export-{os.getpid()}-live99",  # a live writer's
        out / f"{STAGE_PREFIX}figures-{DEAD}-abc123",  # another command's
        out / f"{STAGE_PREFIX}notes",  # the user's
        out / ".report-abcd1234",  # not an export's
    ]
    for folder in kept:
        folder.mkdir()
    analysis.export_all(_history(), out)
    assert not dead.exists() and not (out / f"..gaptui-export.json.{DEAD}.tmp").exists()
    assert all(folder.is_dir() for folder in kept)


def test_a_report_removes_the_staging_folders_of_earlier_versions(tmp_path: Path, plotting: None) -> None:
    from gaptui import report

    out = tmp_path / "report"
    report.write_report(_history(), out)
    legacy, user = out / ".report-k2j4_x9q", out / ".report-notes"
    for folder in (legacy, user):
        folder.mkdir()
        (folder / "alignment-cd.png").write_bytes(b"x")
    report.write_report(_history(), out)
    assert not legacy.exists() and (user / "alignment-cd.png").read_bytes() == b"x"


def test_properties_export_replaces_only_files_a_killed_export_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from engine.properties.suite import export_folder

    out = tmp_path / "published"
    names = ["GraphRandom-Train/p.csv", "GraphRandom-Test/p/p_new8.csv"]

    def export() -> None:
        folder = export_folder(out)
        folder.refuse(names)
        with folder as dest:
            for name in names:
                dest.stage(name).write_text(name)

    _kill_on_replace(monkeypatch, out / names[1])
    with pytest.raises(Killed):
        export()
    monkeypatch.undo()
    assert (out / names[0]).is_file() and not (out / names[1]).exists()
    export()  # the half-moved-in export completes without --force
    assert all((out / name).read_text() == name for name in names) and _staging(out) == []
    with pytest.raises(GaptuiError, match=r"already exists \(2 files would be overwritten; use --force"):
        export()  # a finished export is never overwritten without --force


# ------------------------------------------------------------------------------------------ full disk


@pytest.mark.parametrize(
    ("full", "where"),
    [
        ("alignment-lines-er.png", "figures/alignment-lines-er.png"),
        ("report.md", "report.md"),
        ("report.html", "report.html"),
        (".gaptui-report.json", ".gaptui-report.json"),  # the intent, before anything moves in
    ],
)
def test_a_report_onto_a_full_disk_leaves_the_folder_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, old_report: Path, plotting: None, full: str, where: str
) -> None:
    from gaptui import report

    out = tmp_path / "report"
    shutil.copytree(old_report, out)
    before = _files(out)
    disk = _full_disk(monkeypatch, full)
    with pytest.raises(OSError) as failed:
        report.write_report(_history(("er",), seeds=4), out)
    assert describe_os_error(failed.value) == f"disk full at {out / where}"
    assert _files(out) == before and _staging(out) == []
    disk["full"] = None  # space freed
    report.write_report(_history(("er",), seeds=4), out)
    assert "figures/alignment-lines-ws.png" not in _files(out) and _staging(out) == []


def test_figures_and_export_onto_a_full_disk_leave_the_folder_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, plotting: None
) -> None:
    from gaptui import analysis, figures

    figs, tables = tmp_path / "figs", tmp_path / "tables"
    figures.figure_files(_history(("er", "ws")), figs, "alignment")
    analysis.export_all(_history(seeds=2), tables)
    before = {figs: _files(figs), tables: _files(tables)}
    disk = _full_disk(monkeypatch, "alignment-lines-er.png")
    with pytest.raises(OSError) as failed:
        figures.figure_files(_history(("er",)), figs, "alignment")
    assert describe_os_error(failed.value) == f"disk full at {figs / 'alignment-lines-er.png'}"
    disk["full"] = "runs.json"
    with pytest.raises(OSError) as failed:
        analysis.export_all(_history(seeds=4), tables)
    assert describe_os_error(failed.value) == f"disk full at {tables / 'runs.json'}"
    assert {figs: _files(figs), tables: _files(tables)} == before and _staging(figs) == _staging(tables) == []
    disk["full"] = None
    figures.figure_files(_history(("er",)), figs, "alignment")
    analysis.export_all(_history(seeds=4), tables)
    assert "alignment-lines-ws.png" not in _files(figs) and len(json.loads((tables / "runs.json").read_text())) == 16


@pytest.mark.e2e
def test_a_cli_report_onto_a_full_tmpfs_is_one_line_and_reruns(tmp_path: Path, plotting: None, small_disk) -> None:
    from gaptui import report

    disk, grow = small_disk
    records = _history(("er", "ws"))
    ws = history_of(tmp_path, records)
    out = disk / "report"
    res = run_cli("report", "--out", str(out), "--workspace", ws)
    assert res.returncode == 2, res.stderr
    (line,) = res.stderr.strip().splitlines()
    assert line.startswith(f"error: disk full at {out}/"), line
    assert sorted(p.name for p in out.iterdir()) == []  # no report.md, no figures, no staging folder
    grow("8m")  # space freed
    report.write_report(records, out)
    assert sorted(p.name for p in out.iterdir()) == [".gaptui-report.json", "figures", "report.html", "report.md"]


# ------------------------------------------------------------------------------------------ the CLI's lines


@pytest.mark.e2e
@pytest.mark.parametrize(
    "args",
    [
        ["figures"],
        ["report"],
        ["export"],
        ["properties", "export", "-p", "irreflexive", "-f", "perturb", "--graphs", "20", "--sizes", "2"],
    ],
    ids=["figures", "report", "export", "properties-export"],
)
def test_an_out_that_is_a_file_is_one_error_line(tmp_path: Path, args: list[str]) -> None:

    ws = history_of(tmp_path, _history())
    out = tmp_path / "out.txt"
    out.write_text("a file")
    res = run_cli(*args, "--out", str(out), "--workspace", ws)
    assert res.returncode == 2, res.stderr
    assert res.stderr.strip().splitlines() == [
        f"error: --out {out} is a file; --out must be a folder (give a folder to write into)"
    ]
    assert out.read_text() == "a file"


@pytest.mark.e2e
def test_cli_figures_refuse_a_users_file_in_one_line_and_force_replaces_it(tmp_path: Path, plotting: None) -> None:

    ws = history_of(tmp_path, _history())
    out = tmp_path / "figs"
    out.mkdir()
    (out / "alignment-lines-er.png").write_bytes(b"mine")
    res = run_cli("figures", "--out", str(out), "--workspace", ws)
    assert res.returncode == 2 and res.stderr.strip().splitlines() == [
        f"error: {out / 'alignment-lines-er.png'} exists and was not written by gaptui figures; "
        "choose another --out folder or pass --force to replace it"
    ]
    assert sorted(p.name for p in out.iterdir()) == ["alignment-lines-er.png"]
    assert (out / "alignment-lines-er.png").read_bytes() == b"mine"
    res = run_cli("figures", "--out", str(out), "--force", "--workspace", ws)
    assert res.returncode == 0, res.stderr
    assert (out / "alignment-lines-er.png").read_bytes().startswith(b"\x89PNG") and _staging(out) == []
