"""``gaptui diff``: the spec keys that differ (flattened), the metrics and curves side by side, on the command line
and from History's marked rows in the app; bad input is one error line."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console
from textual.widgets import Static

from gaptui.history.store import History
from gaptui.run_diff import run_diff
from gaptui.tui.app import GaptuiApp
from gaptui.tui.screens.history import HistoryScreen
from gaptui.tui.screens.run_diff import RunDiffScreen
from gaptui.workspace import Workspace
from tests.support.cli import gaptui, run_cli

#: Three runs of one cell: the second trained longer on more pairs; the third is the first with another seed.
PROTOCOLS = ((20, 1000), (300, 5000), (20, 1000))


def workspace(tmp_path: Path) -> tuple[Workspace, list[str]]:
    ws = Workspace.resolve(tmp_path / "ws")
    records = []
    for n, (epochs, pairs) in enumerate(PROTOCOLS):
        h = f"{n + 1:x}" * 64
        folder = ws.runs / h[:12]
        folder.mkdir(parents=True)
        lines = []
        for e in range(1, 5):
            lines.append({"v": 1, "event": "epoch", "t": float(e), "epoch": e, "train_loss": 3.0 / e + n})
            lines.append({"v": 1, "event": "eval", "t": float(e), "epoch": e, "val_lap_acc": 0.1 * e + 0.05 * n})
        (folder / "events.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
        spec = {"task": "alignment", "seed": n % 2, "epochs": epochs, "model": "gin",
                "dataset": {"base": "er", "n_train": pairs, "n_val": 200}}  # fmt: skip
        records.append(
            {
                "id": h[:12],
                "hash": h,
                "status": "done",
                "task": "alignment",
                "axes": {"dataset": "er", "noise": 0.12, "model": "gin", "recipe": "gaptui"},
                "seed": n % 2,
                "spec": spec,
                "metrics": {"val_lap_acc": 0.4 + 0.1 * n, "val_loss": 1.5},
                "params": 58031,
                "duration": 10.0 + n,
                "run_dir": str(folder),
                "repro": {"versions": {"gaptui": f"0.1.0 (commit {'ab' * 6})", "torch": "2.13.0"}},
                "created": f"2026-01-01T00:00:0{n}",
            }
        )
    with History(ws, write=True) as history:
        history.put_many(records)
    return ws, [r["id"] for r in records]


def test_the_diff_names_only_the_keys_that_differ(tmp_path: Path) -> None:
    ws, ids = workspace(tmp_path)
    with History(ws) as history:
        records = [history.get(i) for i in ids]
    diff = run_diff(records)
    assert dict(diff.spec) == {
        "dataset.n_train": ("1000", "5000", "1000"),
        "epochs": ("20", "300", "20"),
        "seed": ("0", "1", "0"),
    }
    assert diff.same == 4  # task, model, dataset.base, dataset.n_val
    metrics = dict(diff.metrics)
    assert metrics["LAP acc (val_lap_acc)"] == ("0.4000", "0.5000", "0.6000")
    assert list(metrics)[4] == "LAP acc (val_lap_acc)"  # the family's default metric first, after the run's facts
    assert diff.recorded == ()  # the same code and packages: nothing to say
    same_seed = run_diff([records[0], records[2]])
    assert dict(same_seed.spec) == {} and same_seed.same == 7


def test_diff_in_process_prints_tables_curves_and_a_figure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("matplotlib")
    ws, ids = workspace(tmp_path)
    figure = tmp_path / "figs" / "diff.png"
    ran = gaptui(monkeypatch, capsys, "diff", ids[0][:5], ids[1], "-w", str(ws.root), "--figure", str(figure))
    assert ran.code == 0, ran.err
    assert "spec: 3 of 7 keys differ" in ran.out and "dataset.n_train" in ran.out and "5000" in ran.out
    assert "LAP acc (val_lap_acc)" in ran.out and "0.5000" in ran.out
    assert "training loss" in ran.out and "epoch" in ran.out  # the plotext curves
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"figure: {figure}" in ran.out
    ran = gaptui(monkeypatch, capsys, "diff", *ids, "-w", str(ws.root), "--json")
    doc = json.loads(ran.out)
    assert doc["runs"] == ids and doc["spec"]["epochs"] == dict(zip(ids, ("20", "300", "20"), strict=True))


def test_diff_refuses_bad_input_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ws, ids = workspace(tmp_path)
    w = ("-w", str(ws.root))
    assert "at least two runs" in gaptui(monkeypatch, capsys, "diff", ids[0], *w).one_error()
    assert "no run 'ffffff'" in gaptui(monkeypatch, capsys, "diff", ids[0], "ffffff", *w).one_error()
    with History(ws, write=True) as history:  # a prefix two runs share
        history.put({**history.get(ids[0]), "id": ids[0][:6] + "999999", "hash": ids[0][:6] + "9" * 58})
    assert "ambiguous" in gaptui(monkeypatch, capsys, "diff", ids[0][:6], ids[1], *w).one_error()
    assert "the same run" in gaptui(monkeypatch, capsys, "diff", ids[1], ids[1][:8], *w).one_error()
    bad = gaptui(monkeypatch, capsys, "diff", ids[1], ids[2], *w, "--figure", str(tmp_path / "x.gif"))
    assert "x.gif" in bad.one_error() and not (tmp_path / "x.gif").exists()


@pytest.mark.e2e
def test_diff_as_a_user_runs_it(tmp_path: Path) -> None:
    ws, ids = workspace(tmp_path)
    shown = run_cli("diff", ids[1], ids[2], "-w", str(ws.root))
    assert shown.returncode == 0, shown.stderr
    assert "epochs" in shown.stdout and "300" in shown.stdout and "LAP acc" in shown.stdout
    alone = run_cli("diff", ids[1], "-w", str(ws.root))
    assert alone.returncode == 2 and alone.stderr.startswith("error: ") and len(alone.stderr.splitlines()) == 1


@pytest.mark.asyncio
async def test_history_marks_runs_and_shows_their_diff(tmp_path: Path) -> None:
    ws, ids = workspace(tmp_path)
    app = GaptuiApp(ws)
    async with app.run_test(size=(120, 40)) as pilot:
        history = app.screen
        assert isinstance(history, HistoryScreen)
        await pilot.pause()
        table = history.table
        table.move_to("1" * 64)
        await pilot.press("space")  # marks the first run, the cursor moves on
        await pilot.press("D")  # one run marked: nothing to compare yet
        assert any("mark two or more runs" in n for n in app.notice_log)  # type: ignore[attr-defined]
        assert isinstance(app.screen, HistoryScreen)
        table.move_to("2" * 64)
        await pilot.press("space")
        assert list(table.marked) == ["1" * 64, "2" * 64]
        assert "2 marked" in str(history.query_one("#history-info").render())
        marked = table.get_cell("1" * 64, "id")  # a marked row shows it
        assert [span.style for span in marked.spans] == ["reverse bold"] and not table.get_cell("3" * 64, "id").spans
        await pilot.press("D")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, RunDiffScreen) and [r["id"] for r in screen.records] == ids[:2]
        console = Console(width=120, record=True, file=io.StringIO())
        console.print(screen.query_one("#diff-text", Static).content)
        text = console.export_text()
        assert "dataset.n_train" in text and "5000" in text and "LAP acc (val_lap_acc)" in text
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, HistoryScreen)
        table.move_to("1" * 64)
        await pilot.press("space")  # unmarks
        assert list(table.marked) == ["2" * 64]
