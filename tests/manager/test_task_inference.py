"""No hidden default family: tables, statistics and the terminal app take the family of the history's runs (or
--task), a history of several families asks for --task in one line, and a plug-in family's history is never
read as alignment's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.errors import GaptuiError
from gaptui import analysis
from tests.support.cli import run_cli
from tests.support.records import gape_records, properties_records, toy_records, workspace_with
from tests.support.waiting import wait_until

TOY_ENV = {"GAPTUI_FAMILIES": "tests.support.toy_family"}


def test_the_family_is_the_records_one_or_given_never_assumed() -> None:
    mixed = gape_records() + properties_records()
    assert analysis.infer_task(gape_records()) == "gape"
    assert analysis.infer_task(mixed, "properties") == "properties"
    assert analysis.infer_task([]) is None
    with pytest.raises(GaptuiError, match=r"^the history holds runs of 2 families \(gape, properties\): pass --task"):
        analysis.infer_task(mixed)
    with pytest.raises(GaptuiError, match="did you mean 'gape'"):
        analysis.infer_task(mixed, "gap")
    # the library resolves it the same way: gape's table without naming gape, no table without records
    (table,) = analysis.build_tables(gape_records())
    assert table.task == "gape" and table.metric.key == "val_mae"
    assert analysis.build_tables([]) == [] and analysis.render_csv([]) == ""
    with pytest.raises(GaptuiError, match="2 families"):
        analysis.build_tables(mixed)
    # the terminal app's views open on the history's first family (registry order), else the registry's first
    assert analysis.view_task(properties_records()) == "properties"
    assert analysis.view_task(mixed) == "gape"
    assert analysis.view_task([]) == "alignment"


@pytest.mark.e2e
# A table or gap view is one family's; stats, figures and export cover every family (test_every_family.py).
@pytest.mark.parametrize("command", [["table"], ["gap"]])
def test_a_history_of_two_families_asks_for_the_task_in_one_line(tmp_path: Path, command: list[str]) -> None:
    ws = workspace_with(tmp_path, gape_records() + properties_records())
    res = run_cli(*[c.format(tmp=tmp_path) for c in command], "--workspace", str(ws.root))
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.strip().splitlines() == [
        "error: the history holds runs of 2 families (gape, properties): pass --task NAME"
    ]
    assert not (tmp_path / "figures").exists()


@pytest.mark.e2e
def test_a_history_of_two_families_with_the_task_given(tmp_path: Path) -> None:
    where = ("--workspace", str(workspace_with(tmp_path, gape_records() + properties_records()).root))
    table = run_cli("table", "--task", "gape", "--format", "json", *where)
    assert table.returncode == 0, table.stderr
    (doc,) = json.loads(table.stdout)
    assert doc["task"] == "gape" and doc["rows"] == ["none", "lap", "gape"]
    stats = run_cli("stats", "--task", "properties", "--format", "json", *where)
    assert stats.returncode == 0, stats.stderr
    assert json.loads(stats.stdout)["task"] == "properties"
    # export --out writes every family, each into a folder of its own
    out = run_cli("export", "--out", str(tmp_path / "x"), *where)
    assert out.returncode == 0, out.stderr
    assert {p.name for p in (tmp_path / "x").iterdir() if p.is_dir()} == {"gape", "properties"}


@pytest.mark.e2e
def test_a_plug_in_familys_history_gets_its_own_table(tmp_path: Path, toy: None) -> None:
    ws = workspace_with(tmp_path, toy_records())
    where = ("--workspace", str(ws.root))
    table = run_cli("table", "--format", "json", *where, env=TOY_ENV)
    assert table.returncode == 0, table.stderr
    (doc,) = json.loads(table.stdout)
    assert (doc["task"], doc["row_axis"], doc["column_axis"]) == ("toy", "model", "size")
    assert {c["size"]: c["model"] for c in doc["cells"] if c["mark"] == "best"} == {2: "median", 3: "median"}
    text = run_cli("table", *where, env=TOY_ENV)
    assert text.returncode == 0, text.stderr
    assert "median" in text.stdout and "alignment" not in text.stdout + text.stderr
    csv = run_cli("table", "--format", "csv", *where, env=TOY_ENV)
    assert csv.stdout.startswith("model,size,median,std,runs,planned,mark,tied\n")
    stats = run_cli("stats", "--format", "json", *where, env=TOY_ENV)
    assert stats.returncode == 0 and json.loads(stats.stdout)["task"] == "toy", stats.stderr


@pytest.mark.e2e
def test_an_empty_history_shows_no_runs_of_any_family(tmp_path: Path) -> None:
    where = ("--workspace", str(workspace_with(tmp_path, []).root))
    res = run_cli("table", *where)
    assert res.returncode == 0 and res.stdout.startswith("no finished runs yet in "), res.stdout
    assert "alignment" not in res.stdout
    assert json.loads(run_cli("table", "--format", "json", *where).stdout) == []
    res = run_cli("stats", *where)
    assert res.returncode == 0 and "no finished runs yet" in res.stdout
    res = run_cli("figures", "--out", str(tmp_path / "f"), *where)
    assert res.returncode == 0 and "no finished runs in" in res.stderr
    # --task still names one: its own empty message
    res = run_cli("table", "--task", "gape", *where)
    assert res.returncode == 0 and res.stdout.startswith("no finished gape runs yet")


def test_a_form_document_names_its_family_unless_loaded_from_a_preset_that_named_none() -> None:
    from gaptui.tui.planning import FormDraft

    row = {"base": "er", "params": "n=16 degree=4", "noise_model": None, "train": "20", "val": "6", "seed": "0"}
    values = {"datasets": [row], "noise": [0.1], "models": ["gcn"], "seeds": "0"}
    fresh = FormDraft("alignment", name="mine", fields=values).document()
    assert fresh["task"] == "alignment"
    old = {k: v for k, v in fresh.items() if k != "task"}  # a preset written before families
    assert "task" not in FormDraft("alignment", name="mine", fields=values, base=old).document()


@pytest.mark.asyncio
async def test_the_ranking_screen_opens_on_the_historys_family(tmp_path: Path) -> None:
    from gaptui.tui.app import GaptuiApp
    from gaptui.tui.screens.ranking import RankingScreen

    ws = workspace_with(tmp_path, gape_records())
    app = GaptuiApp(ws)
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.press("f5")
        await pilot.pause()
        ranking = app.screen
        assert isinstance(ranking, RankingScreen)
        # the records are read off the UI thread: the screen follows them to their family, with no key pressed
        await wait_until(pilot, lambda: ranking.table is not None, 30, "the gape table")
        assert ranking.task_name == "gape" and ranking.metric == "val_mae" and not ranking.task_picked
        await pilot.press("ctrl+q")
