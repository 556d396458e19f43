"""History records typed (`Record`), and filters on any axis a family declares: `gaptui history --filter`, the
terminal app's history filter, and a plug-in family's axes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from engine.errors import GaptuiError
from gaptui.history.store import History, read_records, upgrade_record
from gaptui.record import Record, RecordFilter, parse_axis_filters, split_words
from gaptui.tui.screens.history import matches
from gaptui.workspace import Workspace
from tests.support.cli import run_cli
from tests.support.records import record as run_record

TOY = {"GAPTUI_FAMILIES": "tests.support.toy_family", "OMP_NUM_THREADS": "1"}


def record(n: int, task: str, axes: dict[str, Any], status: str = "done", tags: tuple[str, ...] = ()) -> Record:
    """A record of ``task`` created ``n`` seconds after the first, with ``tags``."""
    return run_record(n, task, axes, status=status, tags=list(tags), created=f"2024-01-01T00:00:{n:02d}")


def records() -> list[Record]:
    return [
        record(1, "alignment", {"dataset": "er", "noise": 0.12, "model": "gcn"}, tags=("paper",)),
        record(2, "alignment", {"dataset": "er[n=50]", "noise": 0.1, "model": "gin"}, status="failed"),
        record(3, "gape", {"dataset": "zinc", "pe": "rwpe"}),
        record(4, "gape", {"dataset": "aqsol", "pe": "gape"}),
        record(5, "properties", {"dimension": "sensitivity", "pooling": "gmt", "property": "connex"}),
        record(6, "toy", {"size": 3, "model": "mean"}),
    ]


def ids(found: list[Record]) -> list[int]:
    return [int(r["id"]) for r in found]


def test_filters_on_the_axes_of_every_family(toy: None) -> None:
    def only(**axes: str) -> list[int]:
        return ids(RecordFilter(axes=axes).apply(records()))

    assert only(noise="0.10") == [2] and only(noise="0.12") == [1]
    assert only(dataset="er") == [1, 2]  # er[n=50] is a labelled er
    assert only(dataset="zinc") == [3] and only(pe="rwpe") == [3] and only(pooling="GMT") == [5]
    assert only(model="mean", size="3") == [6] and only(size="3.0") == [6] and only(model="gcn") == [1]
    assert ids(RecordFilter(task="gape").apply(records())) == [3, 4]
    assert ids(RecordFilter(statuses=("failed",)).apply(records())) == [2]
    assert ids(RecordFilter(tag="paper", axes={"dataset": "er"}).apply(records())) == [1]
    assert not RecordFilter() and RecordFilter(tag="x")


def test_unknown_axes_are_one_line_errors(toy: None) -> None:
    assert parse_axis_filters(["pe=rwpe", "noise=0.1"]) == {"pe": "rwpe", "noise": "0.1"}
    with pytest.raises(GaptuiError) as info:
        parse_axis_filters(["pes=rwpe"], ["gape"])
    assert str(info.value) == (
        "--filter 'pes=rwpe': 'pes' is not an axis of task gape (did you mean 'pe'?); known axes: dataset, pe, seed"
    )
    with pytest.raises(GaptuiError, match="'rwpe': expected AXIS=VALUE, e.g. dataset=er; known axes: .*pooling"):
        parse_axis_filters(["rwpe"])


def test_the_app_filter_takes_axis_words_and_plain_words(toy: None) -> None:
    assert split_words(["noise=0.1", "seed=0", "gin"]) == (["gin"], {"noise": "0.1", "seed": "0"})
    rows = records()
    assert [r["id"][-1] for r in rows if matches(r, ["pe=rwpe"])] == ["3"]
    assert [r["id"][-1] for r in rows if matches(r, ["dataset=er", "failed"])] == ["2"]
    assert [r["id"][-1] for r in rows if matches(r, ["size=3"])] == ["6"]


def test_records_read_back_losslessly_as_typed_records(tmp_path: Path) -> None:
    ws = Workspace.resolve(tmp_path / "ws")
    stored = [{**r, "slurm": {"jobs": ["12"]}, "earlier": [{"status": "done"}]} for r in records()[:3]]
    with History(ws, write=True) as history:
        history.put_many(stored)  # type: ignore[arg-type]
    back = {r["id"]: r for r in read_records(ws)}
    for r in stored:
        assert back[r["id"]] == r  # every key kept, extra ones included
    legacy = {"id": "a", "hash": "b", "status": "done", "dataset": "er", "noise": 0.1, "model": "gcn"}
    assert upgrade_record(legacy)["task"] == "alignment" and upgrade_record(legacy)["axes"]["model"] == "gcn"


@pytest.mark.e2e
def test_history_command_filters_on_any_axis(tmp_path: Path) -> None:
    ws = Workspace.resolve(tmp_path / "ws")
    with History(ws, write=True) as history:
        history.put_many(records())
    where = ("--workspace", str(ws.root), "--json")

    def listed(*args: str) -> list[str]:
        res = run_cli("history", *args, *where, env=TOY)
        assert res.returncode == 0, res.stderr
        return [row["id"][-1] for row in json.loads(res.stdout)]

    assert listed("--filter", "pe=gape") == ["4"]
    assert listed("--filter", "dataset=er", "--filter", "noise=0.12") == ["1"]
    assert listed("--dataset", "er", "--status", "failed") == ["2"]  # the old options still work
    assert listed("--filter", "size=3", "--task", "toy") == ["6"]
    res = run_cli("history", "--task", "gape", "--filter", "noise=0.1", "--workspace", str(ws.root), env=TOY)
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.strip().splitlines() == [
        "error: --filter 'noise=0.1': 'noise' is not an axis of task gape; known axes: dataset, pe, seed"
    ]


@pytest.mark.asyncio
async def test_the_app_history_filter_on_an_axis(tmp_path: Path) -> None:
    from textual.widgets import Input

    from gaptui.tui.app import GaptuiApp
    from gaptui.tui.screens.history import HistoryScreen

    ws = Workspace.resolve(tmp_path / "ws")
    with History(ws, write=True) as history:
        history.put_many(records()[:5])
    app = GaptuiApp(ws)
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.press("f4")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, HistoryScreen)
        assert screen.table.record_count == 5
        screen.query_one("#history-filter", Input).value = "pe=rwpe"
        await pilot.pause()
        assert screen.table.record_count == 1
        screen.query_one("#history-filter", Input).value = "noise=0.1 failed"
        await pilot.pause()
        assert screen.table.record_count == 1
        screen.query_one("#history-filter", Input).value = "dataset=er"
        await pilot.pause()
        assert screen.table.record_count == 2
        await pilot.press("ctrl+q")


def test_every_command_chooses_runs_by_the_same_rule(tmp_path: Path) -> None:
    """`history --filter`, `train --where` and `--dataset` of tables and statistics: a number as a number
    (0.050 is 0.05), case ignored (GIN, RWPE), a base dataset name for its parameterised datasets, and seed."""
    from engine.alignment.spec import RunSpec
    from gaptui.analysis import build_tables, check_group
    from gaptui.cli.train import _select

    chosen = RecordFilter(axes=parse_axis_filters(["noise=0.050", "model=GIN", "dataset=ER", "seed=1"]))
    runs = [
        {**record(n, "alignment", {"dataset": "er[n=12]", "noise": noise, "model": model}), "seed": seed}
        for n, (noise, model, seed) in enumerate(
            [(0.05, "gin", 0), (0.05, "gin", 1), (0.1, "gin", 1), (0.05, "gcn", 1)], start=1
        )
    ]
    assert [r["id"] for r in chosen.apply(runs)] == [runs[1]["id"]]
    gape = RecordFilter(axes=parse_axis_filters(["pe=RWPE"], ["gape"])).apply(records())
    assert [r["axes"]["pe"] for r in gape] == ["rwpe"]

    specs = [
        RunSpec.from_dict(
            {"dataset": {"base": "er", "noise": noise, "params": {"n": 12}}, "model": model, "seed": seed}
        )
        for noise, model, seed in [(0.05, "gin", 0), (0.05, "gin", 1), (0.1, "gin", 1), (0.05, "gcn", 1)]
    ]
    picked = _select(specs, ["noise=0.050", "model=GIN", "dataset=er", "seed=1"], "--preset p")
    assert (picked.model, picked.seed, picked.dataset["noise"]) == ("gin", 1, 0.05)

    done = [{**r, "metrics": {"val_lap_acc": 0.5}} for r in runs]
    assert check_group("er", done) == "er" and check_group("ER", done) == "ER"
    assert [t.group for t in build_tables(done, group="er")] == ["er[n=12]"]
    with pytest.raises(GaptuiError, match="er\\[n=12\\]"):
        check_group("ba", done)
    with pytest.raises(GaptuiError, match="seed takes a number"):
        parse_axis_filters(["seed=one"])
