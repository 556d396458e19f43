"""The ``properties`` task family: specs, presets, dependencies, and a grid run end to end through `gaptui run`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

from engine.errors import GaptuiError
from engine.properties.family import ADVICE, TABLE2
from engine.tasks import FAMILIES, Placement, load_spec
from gaptui.workspace import Workspace
from tests.support.cli import run_cli

ENV = {"OMP_NUM_THREADS": "1"}


def _preset(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "p.toml"
    path.write_text('task = "properties"\n' + text)
    return path


def test_a_robustness_cell_depends_on_its_generalisation_cell() -> None:
    fam = FAMILIES.get("properties")
    rob = load_spec({"task": "properties", "property": "symmetric", "pooling": "gmt", "dimension": "robustness"})
    gen = rob.replace(dimension="generalisation")
    assert fam.dependencies(rob) == (gen.hash(),)
    assert fam.dependencies(gen) == () and fam.dependencies(gen.replace(dimension="sensitivity")) == ()
    assert fam.record_axes(rob) == {
        "dimension": "robustness",
        "pooling": "gmt",
        "property": "symmetric",
        "property_class": "basic",  # derived from the property, recorded so its column and filter work
    }
    # Where data live is placement, not identity; the default negatives are resolved into the identity.
    assert rob.replace(datasets_dir="/elsewhere", device="cpu").hash() == rob.hash()
    assert rob.replace(negatives="solver").hash() == rob.hash() != rob.replace(negatives="random").hash()


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"property": "symetric"}, "did you mean 'symmetric'"),
        ({"pooling": "set2se"}, "did you mean 'set2set'"),
        ({"dimension": "robust"}, "did you mean 'robustness'"),
        ({"sizes": 1}, "sizes = 1: a cell needs the base size and one larger size"),
        ({"graphs": 9}, "graphs = 9: expected an even count"),
        ({"lr": 0}, "lr = 0.0 must be > 0"),
    ],
)
def test_bad_specs_name_the_culprit(fields: dict, message: str) -> None:
    raw = {"task": "properties", "property": "symmetric", "pooling": "mean", "dimension": "sensitivity", **fields}
    with pytest.raises(GaptuiError, match=message):
        load_spec(raw)


def test_preset_grid_adds_the_training_cell_a_robustness_cell_needs(tmp_path: Path) -> None:
    fam = FAMILIES.get("properties")
    text = 'properties = ["reflexive"]\npoolings = ["sum", "mean"]\ndimensions = ["robustness"]\nseeds = [0, 1]\n'
    raw = tomllib.loads('task = "properties"\n' + text)
    preset = fam.parse_preset(raw, "p.toml", tmp_path / "p.toml")
    specs = fam.grid(preset, Placement(str(tmp_path), str(tmp_path)))
    assert [(s.seed, s.pooling, s.dimension) for s in specs] == [
        (seed, pooling, dim)
        for seed in (0, 1)
        for pooling in ("sum", "mean")
        for dim in ("generalisation", "robustness")
    ]
    assert preset.size == len(specs) == 8


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('properties = ["reflexiv"]\npoolings = ["mean"]\nseeds = [0]\n', "did you mean 'reflexive'"),
        ('properties = ["reflexive"]\npoolings = ["meen"]\nseeds = [0]\n', "did you mean 'mean'"),
        ('properties = ["reflexive"]\npoolings = ["mean"]\nseeds = [0]\ndimensions = ["sensitive"]\n', "sensitivity"),
        ('properties = ["reflexive"]\npoolings = ["mean"]\nseeds = [0]\n[run]\nepoch = 2\n', "did you mean 'epochs'"),
        ('properties = []\npoolings = ["mean"]\nseeds = [0]\n', "is empty"),
        ('properties = ["reflexive"]\npoolings = ["mean"]\nseeds = [0]\n[run]\ngraphs = 3\n', "graphs = 3"),
    ],
)
def test_bad_presets_name_the_culprit(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(GaptuiError, match=message) as err:
        FAMILIES.get("properties").parse_preset(tomllib.loads(text), str(tmp_path / "p.toml"), tmp_path / "p.toml")
    assert str(tmp_path / "p.toml") in str(err.value)


@pytest.mark.e2e
def test_a_bad_preset_is_one_error_line_from_the_cli(tmp_path: Path) -> None:
    preset = _preset(tmp_path, 'properties = ["reflexiv"]\npoolings = ["mean"]\nseeds = [0]\n')
    done = run_cli("run", "--preset", str(preset), "-w", str(tmp_path / "ws"), "--dry-run", env=ENV)
    assert done.returncode == 2
    assert done.stderr.startswith("error: ") and len(done.stderr.strip().splitlines()) == 1
    assert "did you mean 'reflexive'" in done.stderr


def _run_and_tables(tmp_path: Path, preset: str) -> tuple[list[dict], dict]:
    ws = tmp_path / "ws"
    done = run_cli("run", "--preset", preset, "-w", str(ws), "--cpu-jobs", "2", env=ENV, timeout=900)
    assert done.returncode == 0, done.stderr
    table = run_cli("table", "-w", str(ws), "--task", "properties", "--format", "json", env=ENV)
    assert table.returncode == 0, table.stderr
    return json.loads(table.stdout), {"ws": ws}


@pytest.mark.e2e
def test_small_grid_end_to_end_then_tables_as_json(tmp_path: Path) -> None:
    preset = _preset(tmp_path, 'properties = ["irreflexive"]\npoolings = ["sum"]\nseeds = [0]\n[run]\nepochs = 2\n'
                     "graphs = 60\nsizes = 2\nhidden = 8\nlayers = 2\n")  # fmt: skip
    tables, _ = _run_and_tables(tmp_path, str(preset))
    by_dim = {t["dimension"]: t for t in tables if "dimension" in t}
    assert sorted(by_dim) == ["generalisation", "robustness", "sensitivity"]
    for t in by_dim.values():
        assert t["rows"] == ["sum"] and t["columns"] == ["irreflexive"] and t["metric"] == "u_score"
        assert 0.0 <= t["cells"][0]["median"] <= 1.0


@pytest.mark.e2e
@pytest.mark.slow
def test_properties_smoke_preset_end_to_end_then_tables_as_json(tmp_path: Path) -> None:
    tables, _ = _run_and_tables(tmp_path, "properties-smoke")
    by_dim = {t["dimension"]: t for t in tables if "dimension" in t}
    assert sorted(by_dim) == ["generalisation", "robustness", "sensitivity"]
    for t in by_dim.values():
        assert t["rows"] == ["mean", "sopool_bimap"]
        assert t["columns"] == ["irreflexive", "symmetric", "function"]
        assert len(t["cells"]) == 6


def _study_records(ws: Workspace) -> list[dict]:
    """Finished records of a 2-pooling x 2-property x 3-dimension x 2-seed grid with known U scores."""
    from gaptui.scheduler import new_record

    fam = FAMILIES.get("properties")
    raw = {"properties": ["reflexive", "function"], "poolings": ["mean", "gmt"], "seeds": [0, 1]}
    preset = fam.parse_preset({"task": "properties", **raw}, "p.toml")
    u = {"mean": 0.9, "gmt": 0.6}
    records = []
    for spec in fam.grid(preset, Placement(str(ws.datasets), str(ws.raw_data))):
        record = new_record(spec, ws, preset="study", planned_seeds=2)
        bonus = 0.1 if spec.property == "function" else 0.0
        record.update(status="done", finished="2025-01-01T11:00:00+0000", metrics={"u_score": u[spec.pooling] + bonus})
        records.append(record)
    return records


def test_table2_is_the_mean_r_score_per_pooling_and_dimension(tmp_path: Path) -> None:
    from gaptui import analysis

    records = _study_records(Workspace(tmp_path))
    tables = analysis.build_tables(records, task="properties")
    assert [t.group for t in tables] == ["generalisation", "robustness", "sensitivity", TABLE2, ADVICE]
    t2 = tables[-2]
    assert t2.rows == ("mean", "gmt") and t2.columns == ("generalisation", "sensitivity", "robustness")
    # R = U / mean over poolings: reflexive 0.9 / 0.75 and 0.6 / 0.75; function 1.0 / 0.85 and 0.7 / 0.85.
    assert t2.cell("mean", "sensitivity").median == pytest.approx((0.9 / 0.75 + 1.0 / 0.85) / 2)
    assert t2.cell("gmt", "robustness").median == pytest.approx((0.6 / 0.75 + 0.7 / 0.85) / 2)
    assert [c.mark for c in t2.best("generalisation")] == ["best"] and t2.best("generalisation")[0].row == "mean"
    doc = analysis.tables_json(tables)[-2]
    assert doc["table"] == TABLE2 and doc["metric"] == "r_score" and doc["row_axis"] == "pooling"
    assert "Table 2" in analysis.render_csv(tables, "properties")
    assert analysis.build_tables(records, "train_acc", task="properties") == []  # no U, no Table 2


def test_pooling_advice_ranks_the_poolings_per_property_class_beside_the_seeds(tmp_path: Path) -> None:
    from gaptui import analysis

    records = _study_records(Workspace(tmp_path))
    advice = analysis.build_tables(records, task="properties")[-1]
    assert advice.group == ADVICE and advice.rows == ("mean", "gmt") and advice.columns == ("basic", "function")
    # reflexive is basic, function is function; R per dimension: 0.9 / 0.75 (basic), 1.0 / 0.85 (function)
    basic = advice.cell("mean", "basic")
    assert basic.values == pytest.approx((0.9 / 0.75,) * 3) and basic.mark == "best"
    assert advice.cell("mean", "function").median == pytest.approx(1.0 / 0.85)
    assert "basic: ours mean, seed case by case" in advice.statistic
    assert "function: ours mean, seed set2set (not compared: none of its poolings ran)" in advice.statistic
    # a strategy's runs never enter the advice (it compares poolings as the seed trained them)
    extra = [{**r, "axes": {**r["axes"], "pooling": "gmt/adversarial", "strategy": "adversarial"},
              "hash": "x" + r["hash"][1:], "id": "x" + r["id"][1:], "metrics": {"u_score": 1.0}}
             for r in records if r["axes"]["pooling"] == "gmt"]  # fmt: skip
    again = analysis.build_tables(records + extra, task="properties")[-1]
    assert again.rows == ("mean", "gmt") and again.cell("mean", "basic").median == basic.median


@pytest.mark.asyncio
async def test_ranking_screen_shows_the_dimension_tables_and_table2(tmp_path: Path) -> None:
    from gaptui.history.store import History
    from gaptui.tui.app import GaptuiApp
    from gaptui.tui.screens.ranking import RankingScreen
    from gaptui.tui.widgets.ranking_grid import RankingGrid

    ws = Workspace(tmp_path / "ws")
    with History(ws, write=True) as history:
        history.put_many(_study_records(ws))
    app = GaptuiApp(ws)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("f5")
        await pilot.pause()
        ranking = app.screen
        assert isinstance(ranking, RankingScreen)
        if ranking.task_name != "properties":
            await pilot.press("t")
            await pilot.pause()
        assert ranking.task_name == "properties"
        assert [t.group for t in ranking.tables][-2:] == [TABLE2, ADVICE]
        while ranking.dataset != TABLE2:
            await pilot.press("right_square_bracket")
            await pilot.pause()
        grid = ranking.query_one(RankingGrid)
        assert grid.row_count == 2
        await pilot.press("ctrl+q")
