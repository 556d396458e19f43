"""The paper-faithful options: model sizes against Table C.2, spec fields, hashes and the paper preset."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from engine import models
from engine.alignment.spec import RunSpec
from engine.errors import GaptuiError
from tests.support.cli import run_cli

PAPER = {"input_layer": "conv", "norm": "whole-batch"}
#: Table C.2: model -> (width, trainable parameters, extra options). The paper's "GatedGCN" at width 48 is
#: PyG's GatedGraphConv with two steps per block (gaptui's ggnn, steps=2); its "GGN" row is the GCN.
TABLE_C2 = {
    "gcn": (128, 58_560, {}),
    "gin": (93, 59_026, {}),
    "ggnn": (48, 59_680, {"steps": 2}),
    "gat": (128, 59_328, {"heads": 8}),
    "gatv2": (96, 62_848, {"heads": 8}),
}


@pytest.mark.parametrize("name", list(TABLE_C2))
def test_paper_options_match_table_c2_parameter_counts(name: str) -> None:
    width, count, extra = TABLE_C2[name]
    model = models.build(name, width=width, out_dim=64, in_dim=1, **PAPER, **extra)
    assert abs(model.num_parameters - count) <= 0.05 * count, (model.num_parameters, count)
    assert model.layers == 4 and len(model.convs) == 3  # the first conv is the first of the 4 layers


def test_gated_gcn_of_table_c2_is_exact_and_the_budget_search_finds_the_paper_widths() -> None:
    assert models.build("ggnn", width=48, out_dim=64, in_dim=1, steps=2, **PAPER).num_parameters == 59_680
    for name, (width, _, extra) in TABLE_C2.items():
        if name == "gatv2":
            continue  # 8 heads at width 96 is 62,848 in the paper, over the 5% budget tolerance of 60,000
        model = models.build(name, out_dim=64, in_dim=1, budget=60_000, **PAPER, **extra)
        assert abs(model.width - width) <= 1, (name, model.width)


def test_first_layers_are_the_paper_packages() -> None:
    from torch_geometric.nn import GCNConv, GINConv

    for name in ("gcn", "gat", "gatv2", "ggnn"):
        assert isinstance(models.build(name, width=32, in_dim=1, **PAPER).input, GCNConv)
    gin = models.build("gin", width=32, in_dim=1, **PAPER).input
    assert isinstance(gin, GINConv) and isinstance(gin.nn, torch.nn.Linear) and gin.nn.in_features == 1
    ours = models.build("gat", width=32, in_dim=2)
    assert isinstance(ours.input, torch.nn.Linear) and len(ours.convs) == 4 and len(ours.norms) == 4


def _two_graphs() -> tuple[torch.Tensor, torch.Tensor]:
    edges = torch.tensor([[0, 1], [1, 2], [2, 3], [3, 0], [0, 2], [4, 5], [5, 6]])
    edge_index = torch.cat([edges, edges.flip(1)]).t().contiguous()
    return edge_index, torch.tensor([0, 0, 0, 0, 1, 1, 1])


def test_paper_models_tell_nodes_apart_on_constant_input_and_stay_equivariant() -> None:
    torch.manual_seed(0)
    edge_index, batch = _two_graphs()
    x = torch.ones(7, 1)
    model = models.build("gat", width=16, out_dim=8, in_dim=1, heads=2, **PAPER).eval()
    out = model(x, edge_index, batch)
    assert not torch.allclose(out[0], out[1])  # degree 3 vs 2: the GCNConv first layer breaks the symmetry
    perm = torch.tensor([3, 0, 1, 2, 6, 4, 5])  # new node i is old node perm[i]
    inverse = torch.argsort(perm)
    permuted = model(x, inverse[edge_index], batch[perm])
    assert torch.allclose(permuted, out[perm], atol=1e-5)


def test_whole_batch_norm_shares_statistics_per_graph_norm_does_not() -> None:
    torch.manual_seed(0)
    edge_index, batch = _two_graphs()
    x = torch.ones(7, 1)
    first = edge_index[:, (edge_index < 4).all(0)]
    for norm, depends in (("whole-batch", True), ("per-graph", False)):
        model = models.build("gcn", width=16, out_dim=8, in_dim=1, input_layer="conv", norm=norm).eval()
        together = model(x, edge_index, batch)[:4]
        alone = model(x[:4], first, batch[:4])
        assert torch.allclose(together, alone, atol=1e-5) is not depends, norm


def test_model_option_errors_name_the_value_and_suggest() -> None:
    with pytest.raises(GaptuiError, match=r"norm='whole_batch' is invalid: expected one of per-graph, whole-batch"):
        models.build("gcn", width=8, norm="whole_batch")
    with pytest.raises(GaptuiError, match=r"\(did you mean 'conv'\?\)"):
        models.build("gcn", width=8, input_layer="convs")


def spec(**changes) -> RunSpec:
    raw = {"dataset": {"base": "er", "noise": 0.12, "n_train": 100, "n_val": 20}, "model": "gcn", "epochs": 5}
    return RunSpec.from_dict({**raw, **changes})


def test_new_spec_fields_keep_existing_run_ids_and_enter_the_hash_when_set() -> None:
    # Computed by the spec code before input_layer and norm existed: default runs keep their identity.
    assert spec().hash() == "49eeb16b93f1596cff07436ac15d718c9c2177e8b4c2e8e87abfe2b21fba20a9"
    assert "input_layer" not in spec().canonical() and "norm" not in spec().canonical()
    paper = spec(features="ones", input_layer="conv", norm="whole-batch")
    assert paper.canonical()["input_layer"] == "conv" and paper.canonical()["norm"] == "whole-batch"
    assert len({spec().hash(), paper.hash(), spec(norm="whole-batch").hash(), spec(input_layer="conv").hash()}) == 4
    assert paper.model_options() == {"input_layer": "conv", "norm": "whole-batch"}
    assert spec(model_kwargs={"layers": 3}).model_options() == {"layers": 3}


@pytest.mark.parametrize(
    ("changes", "needle"),
    [
        ({"norm": "whole_batch"}, "norm 'whole_batch' is not one of per-graph, whole-batch (did you mean 'whole-b"),
        ({"input_layer": "Conv"}, "input_layer 'Conv' is not one of linear, conv, gcn (did you mean 'conv'?)"),
        ({"features": "one"}, "features 'one': unknown kind 'one' (did you mean 'ones'?); expected degree, ones"),
        ({"model_kwargs": {"norm": "whole-batch"}}, "model_kwargs 'norm' duplicates the run option norm"),
        ({"model": "tests.support.models:TinyGNN", "norm": "whole-batch"}, "applies to built-in models only"),
        ({"nrom": "whole-batch"}, "unknown key 'nrom' (did you mean 'norm'?)"),
    ],
)
def test_spec_validation(changes: dict, needle: str) -> None:
    with pytest.raises(GaptuiError) as info:
        spec(**changes)
    assert needle in str(info.value)


def test_paper_preset_uses_the_paper_options() -> None:
    from gaptui.presets import grid, load_preset
    from gaptui.workspace import Workspace

    preset = load_preset("paper")
    assert preset.run.recipe == "paper" and (preset.run.epochs, preset.run.batch_size) == (300, 100)
    first = grid(preset, Workspace.resolve("unused"), limit=2)[-1]
    assert (first.features, first.input_layer, first.norm, first.activation) == ("ones", "conv", "whole-batch", "relu")
    assert (first.lr, first.schedule, first.warmup_steps, first.clip, first.clip_mode) == (
        3e-3,
        "one-cycle",
        30,
        0.1,
        "value",
    )
    assert first.canonical()["norm"] == "whole-batch" and first.dataset_spec().canonical()["n_train"] == 5000
    assert first.recipe_label == "paper"


@pytest.mark.e2e
@pytest.mark.slow  # 15-35 s of real worker processes on 2 cores: run with -m slow
def test_train_command_takes_the_paper_options(tmp_path: Path) -> None:
    import json

    where = ("--workspace", str(tmp_path / "ws"))
    tiny = ("--base", "er", "-p", "n=12", "-p", "degree=3", "--noise", "0.1", "--train", "4", "--val", "2")
    res = run_cli("train", *tiny, "--model", "gcn", "--norm", "whole_batch", *where)
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.strip() == (
        "error: gaptui train: norm 'whole_batch' is not one of per-graph, whole-batch (did you mean 'whole-batch'?)"
    )
    paper = ("--features", "ones", "--input-layer", "conv", "--norm", "whole-batch")
    res = run_cli("train", *tiny, "--model", "gin", "--epochs", "1", *paper, "--json", *where)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    spec = json.loads((Path(out["out"]) / "spec.json").read_text())
    assert (spec["features"], spec["input_layer"], spec["norm"]) == ("ones", "conv", "whole-batch")
    assert 0.0 <= out["val_lap_acc"] <= 1.0
