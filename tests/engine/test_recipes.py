"""Training recipes: what each one sets, how a run's recipe is read back, and that earlier work keeps its ids."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import tomllib
import torch

from engine import models
from engine.alignment.preset import parse_preset
from engine.alignment.recipes import RECIPE_FIELDS, RECIPES, recipe_label, spec_recipe_label
from engine.alignment.spec import RunSpec
from engine.errors import GaptuiError
from engine.loop import make_optimiser
from tests.support.cli import run_cli
from tests.support.records import record

DATASET = {"base": "er", "noise": 0.12, "n_train": 100, "n_val": 20}


def spec(**fields) -> RunSpec:
    return RunSpec(dataset=DATASET, model=fields.pop("model", "gcn"), epochs=5, **fields)


@pytest.mark.parametrize("name", list(RECIPES))
def test_a_recipe_fills_every_field_and_reads_back_as_itself(name: str) -> None:
    run = spec(recipe=name)
    assert {k: getattr(run, k) for k in RECIPE_FIELDS} == RECIPES[name].for_model("gcn")
    assert run.recipe_label == name
    assert spec_recipe_label(run.to_dict()) == name  # from a record's stored spec, without building it


def test_the_default_is_gaptui_and_a_field_given_wins_over_the_recipe() -> None:
    assert spec().recipe == "gaptui" and spec().recipe_label == "gaptui"
    run = spec(recipe="ngab", lr=2e-3)
    assert run.lr == 2e-3 and run.schedule == "constant" and run.recipe_label == "ngab+lr=0.002"
    # values that happen to be another recipe's are labelled as that recipe
    assert spec(recipe="legacy", **{k: v for k, v in RECIPES["paper"].values.items()}).recipe_label == "paper"


def test_the_recipe_name_is_not_hashed_its_values_are() -> None:
    assert spec(recipe="paper").hash() == spec(recipe="legacy", **RECIPES["paper"].values).hash()
    assert len({spec(recipe=n).hash() for n in RECIPES}) == len(RECIPES)
    assert "recipe" not in spec().canonical()


def test_a_spec_written_before_recipes_is_read_with_the_legacy_values() -> None:
    old = {"dataset": DATASET, "model": "gcn", "epochs": 5, "features": "degree", "lr": 3e-3}
    run = RunSpec.from_dict(old)
    assert run.recipe == "legacy" and run.recipe_label == "legacy"
    assert (run.activation, run.block, run.schedule) == ("relu", "norm-act", "one-cycle")
    assert spec_recipe_label(old) == "legacy"
    again = RunSpec.from_dict(run.to_dict())  # a new spec.json names its recipe
    assert again == run and again.hash() == run.hash()


def test_with_recipe_replaces_every_recipe_field() -> None:
    run = spec(recipe="paper", lr=5e-4).with_recipe("ngab")
    assert {k: getattr(run, k) for k in RECIPE_FIELDS} == RECIPES["ngab"].for_model("gcn")
    with pytest.raises(GaptuiError, match=r"--recipe: recipe 'ngb' is not one of .*\(did you mean 'ngab'\?\)"):
        spec().with_recipe("ngb", where="--recipe")


def test_baseline_and_user_models() -> None:
    assert spec(model="laplacian").recipe_label == "-"
    user = spec(model="tests.support.models:TinyGNN", recipe="ngab")
    # a user's model is built with none of the scaffold's options: those stay neutral, the optimiser is ngab's
    assert user.model_options() == {} and user.lr == 1e-3 and user.recipe_label == "ngab"
    with pytest.raises(GaptuiError, match="block = 'act-norm' applies to built-in models only"):
        RunSpec.from_dict({**spec(model="tests.support.models:TinyGNN").to_dict(), "block": "act-norm"})


def test_bad_recipe_in_a_preset_is_one_line_naming_file_key_and_value(tmp_path: Path) -> None:
    text = 'noise = [0.1]\nmodels = ["gcn"]\nseeds = [0]\n[run]\nrecipe = "gaptuu"\n[[datasets]]\nbase = "er"\n'
    with pytest.raises(GaptuiError) as info:
        parse_preset(tomllib.loads(text), tmp_path / "mine.toml")
    message = str(info.value)
    assert (
        "\n" not in message and "mine.toml" in message and "'gaptuu'" in message and "did you mean 'gaptui'" in message
    )


def test_a_preset_recipe_reaches_every_run_and_its_own_fields_win(tmp_path: Path) -> None:
    from engine.alignment.preset import grid
    from engine.tasks import Placement

    text = 'noise = [0.1]\nmodels = ["gcn", "gat"]\nseeds = [0]\n[run]\nrecipe = "ngab"\nlr = 5e-4\n'
    text += '[[datasets]]\nbase = "er"\n'
    preset = parse_preset(tomllib.loads(text), tmp_path / "p.toml")
    runs = grid(preset, Placement(".", "."))
    assert {r.recipe_label for r in runs} == {"ngab+lr=0.0005"}
    assert all(r.block == "act-norm" and r.input_layer == "gcn" and r.lr == 5e-4 for r in runs)


def test_label_names_the_closest_recipe_and_what_differs() -> None:
    values = {**RECIPES["gaptui"].values, "lr": 0.01, "clip": 0.5}
    assert recipe_label(values, "gin") == "gaptui+lr=0.01+clip=0.5"
    assert recipe_label(values, "gin", named="ngab").startswith("gaptui+")  # closer than what was named
    # gaptui's one per-model value: GCN's first layer is linear
    assert recipe_label(RECIPES["gaptui"].values, "gcn") == "gaptui+input_layer=gcn"
    assert spec(model="gcn").input_layer == "linear" and spec(model="gin").input_layer == "gcn"


# ------------------------------------------------------------------------------------------------ the options


def _two_graphs() -> tuple[torch.Tensor, torch.Tensor]:
    edges = [(0, 1), (1, 2), (2, 3), (3, 0), (0, 2), (4, 5), (5, 6)]
    index = torch.tensor(edges).T
    return torch.cat([index, index.flip(0)], 1), torch.tensor([0, 0, 0, 0, 1, 1, 1])


@pytest.mark.parametrize("name", ["gcn", "gin", "gat", "ggnn"])
@pytest.mark.parametrize("sparse", [True, False])
def test_the_ngab_block_is_equivariant_and_tells_nodes_apart_on_constant_input(name: str, sparse: bool) -> None:
    torch.manual_seed(0)
    edge_index, batch = _two_graphs()
    options = {"heads": 2} if name == "gat" else {}
    model = models.build(
        name,
        width=16,
        out_dim=8,
        in_dim=1,
        input_layer="gcn",
        activation="gelu",
        block="act-norm",
        sparse=sparse,
        **options,
    ).eval()
    assert model.input_norm is not None and type(model.input).__name__ == "GCNConv"
    x = torch.ones(7, 1)
    out = model(x, edge_index, batch)
    assert not torch.allclose(out[0], out[1])  # degrees 3 and 2
    perm = torch.tensor([3, 0, 1, 2, 6, 4, 5])
    permuted = model(x, torch.argsort(perm)[edge_index], batch[perm])
    assert torch.allclose(permuted, out[perm], atol=1e-4)


def test_sparse_and_pyg_paths_agree_on_the_ngab_block() -> None:
    torch.manual_seed(0)
    edge_index, batch = _two_graphs()
    options = {"width": 16, "out_dim": 8, "in_dim": 2, "activation": "gelu", "block": "act-norm"}
    fast = models.build("gin", **options).eval()
    slow = models.build("gin", **options, sparse=False).eval()
    slow.load_state_dict(fast.state_dict())
    x = torch.rand(7, 2)
    assert torch.allclose(fast(x, edge_index, batch), slow(x, edge_index, batch), atol=1e-5)
    assert isinstance(fast.convs[0].nn[1], torch.nn.GELU)  # GIN's MLP follows the activation


def test_act_norm_normalises_each_update_after_the_activation() -> None:
    torch.manual_seed(0)
    edge_index, batch = _two_graphs()
    model = models.build("gcn", width=8, out_dim=4, in_dim=1, layers=2, block="act-norm", activation="gelu").eval()
    seen = []
    model.norms[0].register_forward_hook(lambda module, inputs, output: seen.append(inputs[0]))
    model(torch.ones(7, 1), edge_index, batch)
    # GraphNorm's input is GELU's output, which is never below GELU's minimum (about -0.17)
    assert seen and seen[0].min() >= -0.171


@pytest.mark.parametrize("schedule", ["one-cycle", "constant", "cosine"])
def test_schedules_warm_up_then_hold_or_anneal(schedule: str) -> None:
    layer = torch.nn.Linear(2, 2)
    opt, sched = make_optimiser(layer, 1e-3, 0.0, total_steps=100, warmup_steps=10, schedule=schedule)
    lrs = []
    for _ in range(sched.total_steps):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs[0] < 1e-3 and math.isclose(max(lrs), 1e-3, rel_tol=0.02)
    assert max(range(100), key=lrs.__getitem__) <= 11
    if schedule == "constant":
        assert lrs[10:] == [pytest.approx(1e-3)] * 90
    else:
        assert lrs[-1] < 1e-5


@pytest.mark.parametrize(("total", "warmup"), [(1, 1), (2, 1), (3, 1), (100, 1), (2, 2), (5, 0)])
def test_every_schedule_steps_through_tiny_runs(total: int, warmup: int) -> None:
    """One warm-up step once made OneCycleLR divide by zero (a 1-epoch, 1-batch run with warmup_steps = 1)."""
    for schedule in ("one-cycle", "constant", "cosine"):
        opt, sched = make_optimiser(torch.nn.Linear(2, 2), 1e-3, 0.0, total, warmup, schedule=schedule)
        for _ in range(sched.total_steps):
            opt.step()
            sched.step()
        assert math.isfinite(opt.param_groups[0]["lr"])


def test_constant_without_warm_up_starts_at_the_rate() -> None:
    opt, _ = make_optimiser(torch.nn.Linear(2, 2), 1e-3, 0.08, total_steps=10, warmup_steps=0, schedule="constant")
    assert opt.param_groups[0]["lr"] == pytest.approx(1e-3) and opt.param_groups[0]["weight_decay"] == 0.08


# ------------------------------------------------------------------------------------------------ tables


def _record(n: int, recipe: str, seed: int, value: float) -> dict:
    """An alignment record of ``recipe`` (its axis) and LAP accuracy ``value``."""
    axes = {"dataset": "er", "noise": 0.1, "model": "gcn", "recipe": recipe}
    return record(n, "alignment", axes, seed, {"val_lap_acc": value})


def test_a_table_says_its_recipe_and_splits_a_row_whose_cell_mixes_recipes() -> None:
    from gaptui.analysis import build_tables, protocol_line, render_latex, render_markdown

    same = [_record(i, "gaptui", i, 0.5 + i / 100) for i in range(3)]
    (table,) = build_tables(same, task="alignment")
    assert table.rows == ("gcn",) and "recipe gaptui" in protocol_line(table)

    # the same seed under two recipes: neither replaces the other, nor are they averaged: two rows that say so
    mixed = [*same, _record(9, "legacy", 0, 0.9)]
    (table,) = build_tables(mixed, task="alignment")
    assert table.rows == ("gcn (recipe gaptui)", "gcn (recipe legacy)")
    assert table.cell("gcn (recipe gaptui)", 0.1).runs == 3 and table.cell("gcn (recipe legacy)", 0.1).values == (0.9,)
    assert "recipe gaptui | legacy (in the row labels)" in protocol_line(table)
    assert "gcn (recipe legacy)" in render_markdown([table]) and "gcn (recipe legacy)" in render_latex([table])


# ------------------------------------------------------------------------------------------------ surfaces


def test_the_form_offers_the_recipes_and_writes_the_choice_into_run() -> None:
    from engine.tasks import Placement, family

    fam = family("alignment")
    field = next(f for f in fam.form.fields() if f.key == "recipe")
    assert field.kind == "choice" and tuple(field.choices) == tuple(RECIPES) and field.placeholder == "gaptui"
    doc = {"noise": [0.1], "models": ["gcn"], "seeds": [0], "datasets": [{"base": "er"}], "run": {"recipe": "ngab"}}
    values = fam.form.form_values(doc)
    assert values["recipe"] == "ngab"
    again = fam.form.preset_from_form(values)
    assert again["run"]["recipe"] == "ngab"
    specs = fam.grid(fam.parse_preset({**again, "task": "alignment"}, "form", None), Placement(".", "."))
    assert {s.recipe_label for s in specs} == {"ngab"}
    assert "recipe" not in fam.form.preset_from_form({**values, "recipe": None}).get("run", {})


@pytest.mark.e2e
def test_train_recipe_is_one_error_line_for_a_bad_name_or_a_family_without_recipes(tmp_path: Path) -> None:

    where = ("--workspace", str(tmp_path / "ws"))
    tiny = ("--base", "er", "-p", "n=12", "-p", "degree=3", "--noise", "0.1", "--model", "gcn")
    res = run_cli("train", *tiny, "--recipe", "ngap", *where)
    assert res.returncode != 0 and res.stdout == ""
    assert res.stderr.strip().splitlines() == [
        "error: gaptui train: recipe 'ngap' is not one of gaptui, ngab, paper, legacy (did you mean 'ngab'?)"
    ]


def test_records_filter_on_the_recipe_axis() -> None:
    from gaptui.record import RecordFilter, parse_axis_filters

    records = [_record(1, "gaptui", 0, 0.5), _record(2, "legacy", 0, 0.4), _record(3, "ngab+lr=0.002", 0, 0.3)]
    chosen = RecordFilter(axes=parse_axis_filters(["recipe=legacy"], ["alignment"])).apply(records)
    assert [r["id"] for r in chosen] == [f"{2:012x}"]
