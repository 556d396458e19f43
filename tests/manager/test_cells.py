"""One cell, one protocol: runs that differ in more than the seed never share a table cell silently."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from engine.errors import GaptuiError
from engine.tasks import family
from gaptui import analysis
from gaptui.analysis import reference
from gaptui.run_records import new_record
from gaptui.workspace import Workspace
from tests.support import FIXTURES
from tests.support.cli import run_cli

FIXTURE_V1 = FIXTURES / "history_v1.json"


def run(model: str, seed: int, value: float, *, finished: str = "2026-01-01T00:00:00", **fields: Any) -> dict[str, Any]:
    """A finished alignment run's record as the history stores it, from a real spec (``fields``: spec fields,
    ``n_train`` and ``n_val`` for the dataset's)."""
    dataset = {"base": "er", "params": {"n": 20}, "noise": 0.12}
    dataset |= {k: fields.pop(k) for k in ("n_train", "n_val") if k in fields}
    raw = {"task": "alignment", "dataset": dataset, "model": model, "seed": seed, "epochs": 20, **fields}
    spec = family("alignment").parse_spec(raw)
    record = new_record(spec, Workspace(Path("/tmp/unused")))
    return {**record, "status": "done", "finished": finished, "metrics": {"val_lap_acc": value}, "params": 1}


def test_runs_that_differ_in_epochs_are_rows_of_their_own_never_one_cell() -> None:
    # the report that started it: three seed-0 gin runs of different protocols read as "55.0 ± 0.0 **"
    records = [
        run("gin", 0, 0.55, epochs=20),
        run("gin", 0, 0.60, epochs=300),
        run("gin", 1, 0.57, epochs=20),
        run("gcn", 0, 0.40, epochs=20),
    ]
    (table,) = analysis.build_tables(records, task="alignment")
    assert table.rows == ("gcn (epochs 20)", "gin (epochs 20)", "gin (epochs 300)")
    assert table.cell("gin (epochs 20)", 0.12).values == (0.55, 0.57)
    assert table.cell("gin (epochs 300)", 0.12).values == (0.6,) and table.cell("gin (epochs 300)", 0.12).runs == 1
    line = analysis.protocol_line(table)
    assert line.startswith("protocol: epochs 20 | 300 (in the row labels) · pairs 5000/500 · batch 100")
    assert "seeds 1-2 per cell" in line
    # every renderer reads the same rows: text, Markdown, LaTeX, CSV, JSON, statistics
    assert "gin (epochs 300)" in analysis.render_markdown([table]) and line[1:] in analysis.render_markdown([table])
    assert "gin (epochs 300)" in analysis.render_latex([table]) and "% protocol: epochs" in analysis.render_latex(
        [table]
    )
    assert "\ner[n=20],gin (epochs 300),0.12," in analysis.render_csv([table])
    (doc,) = analysis.tables_json([table])
    assert doc["protocol"]["settings"]["epochs"] == ["20", "300"] and doc["protocol"]["rows_split_by"] == ["epochs"]
    from gaptui.analysis.statistics import table_statistics

    pairs = table_statistics([table]).pairwise
    assert {p.a for p in pairs} | {p.b for p in pairs} == set(table.rows)


def test_a_rerun_of_one_protocol_replaces_the_seed_and_splits_nothing() -> None:
    first = run("gin", 0, 0.50, finished="2026-01-01T00:00:00")
    again = {**run("gin", 0, 0.52, finished="2026-01-02T00:00:00"), "id": "rerun", "hash": "rerun"}
    (table,) = analysis.build_tables([first, again, run("gin", 1, 0.54)], task="alignment")
    assert table.rows == ("gin",) and table.cell("gin", 0.12).values == (0.52, 0.54)
    assert table.cell("gin", 0.12).ids == ("rerun", table.cell("gin", 0.12).ids[1])
    assert analysis.protocol_line(table).endswith("seeds 2 per cell")


def test_rows_name_what_differs_and_round_numbers_only_where_that_tells_them_apart() -> None:
    # the recipe axis names its fields in one word: runs of one cell that differ in lr read as two recipes
    records = [run("gat", 0, 0.5, lr=0.0010197722346506274), run("gat", 0, 0.6, lr=0.002)]
    (table,) = analysis.build_tables(records, task="alignment")
    assert len(table.rows) == 2 and all(r.startswith("gat (recipe ") for r in table.rows)
    assert table.cell(table.rows[0], 0.12).values != table.cell(table.rows[1], 0.12).values
    pairs = [run("gin", 0, 0.5, n_train=1000, n_val=200), run("gin", 0, 0.6)]
    (table,) = analysis.build_tables(pairs, task="alignment")
    assert table.rows == ("gin (pairs 1000/200)", "gin (pairs 5000/500)")
    budgets = [run("gin", 0, 0.5, budget=60000), run("gin", 0, 0.6, budget=60001)]
    (table,) = analysis.build_tables(budgets, task="alignment")
    assert table.rows == ("gin (budget 60000)", "gin (budget 60001)")


def test_by_splits_rows_by_a_key_of_the_users_choosing_and_an_unknown_key_is_an_error() -> None:
    records = [run("gin", 0, 0.5), run("gcn", 0, 0.4)]
    (table,) = analysis.build_tables(records, task="alignment", by=["epochs"])
    assert table.rows == ("gcn (epochs 20)", "gin (epochs 20)")
    (table,) = analysis.build_tables(records, task="alignment", by=["lr"])
    assert table.rows == ("gcn (lr 3e-3)", "gin (lr 3e-3)")
    with pytest.raises(GaptuiError, match=r"--by 'epoch': not a key of alignment runs \(did you mean 'epochs'\?\)"):
        analysis.build_tables(records, task="alignment", by=["epoch"])
    with pytest.raises(GaptuiError, match="--by 'seed': the seed is what a cell holds one value of"):
        analysis.build_tables(records, task="alignment", by=["seed"])


def test_the_grid_plans_the_seeds_of_one_protocol_per_cell() -> None:
    from gaptui.run_records import planned_seeds_by_run

    fam = family("alignment")
    base = {"task": "alignment", "dataset": {"base": "er", "noise": 0.1}, "model": "gin"}
    specs = [fam.parse_spec({**base, "seed": s, "epochs": e}) for s in (0, 1, 2) for e in (20, 300)]
    specs.append(fam.parse_spec({**base, "seed": 0, "epochs": 5}))
    planned = planned_seeds_by_run(specs)
    assert sorted(planned[s.hash()] for s in specs) == [1, 3, 3, 3, 3, 3, 3]


def test_reference_protocol_beside_ours_and_not_like_for_like() -> None:
    paper = reference.load_reference("paper", task="alignment")
    assert paper.protocol[""] == {"epochs": "300", "pairs": "5000/500", "noise_model": "add_remove", "seeds": "10"}
    # the paper's GatedGCN is ggnn with two propagation steps: a run of that spec is the row the reference holds
    gated = run("ggnn", 0, 0.62, model_kwargs={"steps": 2})
    (table,) = analysis.build_tables([gated, run("gin", 0, 0.5)], task="alignment", group="er[n=20]")
    assert table.rows == ("gin", "ggnn[steps=2]")
    ours = analysis.build_tables([gated, run("gin", 0, 0.5)], task="alignment")[0]
    fake = reference.parse_reference(
        "# protocol: epochs=20, pairs=5000/500, noise_model=add_remove, seeds=1\n"
        "dataset,model,noise,median,std\ner[n=20],gin,0.12,0.5,\ner[n=20],ggnn[steps=2],0.12,0.628,0.009\n",
        Path("mine.csv"),
        task="alignment",
    )
    cmp = reference.compare(ours, fake)
    assert cmp is not None and cmp.protocol is not None and cmp.protocol.like_for_like
    assert cmp.difference("ggnn[steps=2]", 0.12) == pytest.approx(-0.008)
    other = reference.parse_reference(
        "# protocol: epochs=300, pairs=5000/500, seeds=10\n# protocol[er[n=20]]: pairs=7836/998\n"
        "dataset,model,noise,median,std\ner[n=20],gin,0.12,0.5,\n",
        Path("theirs.csv"),
        task="alignment",
    )
    cmp = reference.compare(ours, other)
    assert cmp is not None and cmp.protocol is not None and cmp.protocol.differs == ("epochs", "pairs", "seeds")
    assert cmp.protocol.lines() == [
        "protocol, ours: epochs 20 · pairs 5000/500 · seeds 1",
        "protocol, reference: epochs 300 · pairs 7836/998 · seeds 10",
        "not like-for-like: epochs, pairs, seeds differ",
    ]
    assert reference.comparison_json(cmp)["protocol"]["like_for_like"] is False
    assert "- not like-for-like: epochs, pairs, seeds differ" in reference.render_markdown([cmp])


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        ("# protocol: epoch=300", ":1: protocol key 'epoch' is not a setting of alignment (did you mean 'epochs'?)"),
        ("# protocol: epochs 300", ":1: protocol item 'epochs 300' is not KEY=VALUE"),
        ("# protocol: seeds=ten", ":1: protocol seeds 'ten' is not a whole number"),
    ],
)
def test_a_bad_protocol_line_is_one_error_naming_the_line(line: str, needle: str) -> None:
    with pytest.raises(GaptuiError, match=needle.replace("(", r"\(").replace(")", r"\)").replace("?", r"\?")):
        reference.parse_reference(f"{line}\ndataset,model,noise,median,std\ner,gin,0.1,0.5,\n", Path("r.csv"))


def test_every_model_row_of_the_shipped_references_is_a_row_a_run_can_have() -> None:
    from engine.alignment.family import model_row_problem

    for fam_name in ("alignment", "gape", "properties"):
        paper = reference.load_reference("paper", task=fam_name)  # rows are checked as the file loads
        assert paper.protocol.get("", {}).get("seeds")
    paper = reference.load_reference("paper", task="alignment")
    models = {model for _, model, _ in paper.cells}
    assert models == {"laplacian", "gcn", "gin", "ggnn[steps=2]", "gat", "gatv2"}
    assert model_row_problem("ggnn[steps=2]") == "" and "no option 'stepz'" in model_row_problem("ggnn[stepz=2]")
    assert paper.cell("er", "ggnn[steps=2]", 0.12).median == pytest.approx(0.628)  # Table D.3's GatedGCN
    bad = "dataset,model,noise,median,std\ner,ggnn[steps=two],0.1,0.5,\n"
    with pytest.raises(GaptuiError, match=r"r.csv:2: model 'ggnn\[steps=two\]' is no row a run can have"):
        reference.parse_reference(bad, Path("r.csv"), task="alignment")


# ------------------------------------------------------------------------------------------ the CLI, as a user


@pytest.fixture
def workspace(tmp_path: Path) -> tuple[Path, list[dict[str, Any]]]:
    from gaptui.history.store import History

    ws = Workspace.resolve(tmp_path / "ws")
    ws.root.mkdir(parents=True)
    records = [
        run("gatv2", 0, 0.544, epochs=20),
        run("gatv2", 0, 0.402, epochs=5, n_train=1000, n_val=200, batch_size=50),
        run("gin", 0, 0.5, epochs=20),
    ]
    with History(ws, write=True) as history:
        history.put_many(records)
    return ws.root, records


@pytest.mark.e2e
def test_cli_table_history_show_and_by(workspace: tuple[Path, list[dict[str, Any]]]) -> None:
    root, records = workspace
    where = ("--workspace", str(root))
    res = run_cli("table", "--format", "json", *where)
    assert res.returncode == 0, res.stderr
    (doc,) = json.loads(res.stdout)
    assert doc["rows"] == ["gin (epochs 20, pairs 5000/500, batch 100)", *doc["rows"][1:]]
    assert "gatv2 (epochs 5, pairs 1000/200, batch 50)" in doc["rows"] and len(doc["rows"]) == 3
    res = run_cli("table", *where)
    assert "protocol: epochs 5 | 20 (in the row labels)" in res.stdout
    res = run_cli("table", "--by", "budget", "-f", "csv", *where)
    assert res.returncode == 0 and "gin (epochs 20, pairs 5000/500, batch 100, budget 60000)" in res.stdout
    res = run_cli("table", "--by", "epoch", *where)
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.strip().startswith("error: --by 'epoch': not a key of alignment runs (did you mean 'epochs'?)")
    assert len(res.stderr.strip().splitlines()) == 1

    res = run_cli("history", *where)
    assert res.returncode == 0, res.stderr
    for header in ("epochs", "pairs", "batch"):
        assert header in res.stdout
    assert "1000/200" in res.stdout
    res = run_cli("history", "--hide", "protocol", *where)
    assert res.returncode == 0 and "1000/200" not in res.stdout and "epochs" not in res.stdout
    res = run_cli("history", "--hide", "pairs", *where)
    assert "1000/200" not in res.stdout and "epochs" in res.stdout
    res = run_cli("history", "--hide", "pears", *where)
    assert res.returncode == 2 and res.stderr.strip().startswith("error: --hide 'pears': not a protocol column")

    res = run_cli("show", records[1]["id"], *where)
    assert res.returncode == 0 and "1000/200" in res.stdout and "noise model" in res.stdout


@pytest.mark.e2e
def test_an_old_history_keeps_its_run_ids_and_states_its_protocol(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    ws.root.mkdir()
    ws.history.write_bytes(FIXTURE_V1.read_bytes())
    where = ("--workspace", str(ws.root))
    res = run_cli("table", "--format", "json", *where)
    assert res.returncode == 0, res.stderr
    (doc,) = json.loads(res.stdout)
    assert doc["rows"] == ["laplacian", "gcn", "gin"]  # one protocol: nothing split
    assert doc["protocol"]["settings"]["epochs"] == ["2"] and doc["protocol"]["settings"]["pairs"] == ["5000/500"]
    ids = {c["row"]: c for c in doc["cells"]} if "row" in doc["cells"][0] else None
    assert ids is None or set(ids) == {"laplacian", "gcn", "gin"}
    history = json.loads(run_cli("history", "--json", *where).stdout)
    assert sorted(r["id"] for r in history) == ["111111111111", "222222222222", "333333333333", "444444444444"]
    assert ws.history.read_bytes() == FIXTURE_V1.read_bytes()  # read without a migration written
    res = run_cli("history", *where)
    assert res.returncode == 0 and "epochs" in res.stdout


@pytest.mark.asyncio
async def test_the_app_hides_the_protocol_columns_and_splits_the_ranking_by_a_key(
    workspace: tuple[Path, list[dict[str, Any]]],
) -> None:
    from gaptui.tui.app import GaptuiApp
    from gaptui.tui.screens.history import HistoryScreen
    from gaptui.tui.screens.ranking import RankingScreen

    root, _ = workspace
    app = GaptuiApp(Workspace.resolve(root))
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.press("f4")
        await pilot.pause()
        history = app.screen
        assert isinstance(history, HistoryScreen)
        history.table.focus()
        assert {"epochs", "pairs", "batch"} <= set(history.table.table_columns)
        await pilot.press("p")
        await pilot.pause()
        assert not {"epochs", "pairs", "batch"} & set(history.table.table_columns)
        assert history.table.row_count == 3
        await pilot.press("f5")
        await pilot.pause()
        ranking = app.screen
        assert isinstance(ranking, RankingScreen) and ranking.table is not None
        assert "gatv2 (epochs 5, pairs 1000/200, batch 50)" in ranking.table.rows
        while ranking.by != "budget":
            await pilot.press("b")
            await pilot.pause()
        assert "gin (epochs 20, pairs 5000/500, batch 100, budget 60000)" in ranking.table.rows
        assert "protocol: epochs 5 | 20" in str(ranking.query_one("#ranking-legend").render())
        await pilot.press("ctrl+q")
