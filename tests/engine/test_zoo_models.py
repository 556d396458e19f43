"""The models past message passing: GraphGPS's per-graph attention, PAN against PyG's formula, TAGCN/SGC hops, the
memory each declares, and for each new model packed seeds and exact resume (the shared tests in test_models.py and
test_fast_path.py cover shapes, budgets, equivariance, gradients, PyG parity and bf16 for every built-in)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

from engine import models
from engine.alignment.run import AlignmentRun
from engine.alignment.spec import RunSpec
from engine.checkpoints import CHECKPOINT
from engine.errors import GaptuiError
from engine.models.powers import PANConv
from engine.models.sparse import Graph
from engine.tasks import Cancelled, RunContext, run_steps
from tests.support.cli import run_cli
from tests.support.engine import Events, Stopper, equal_size_batch, ragged_batch, random_graph, result_of, spec_file

NEW = ["tagcn", "sgc", "pan", "graphgps"]


# --------------------------------------------------------------------------------------------------- PAN


def pan_reference(conv: PANConv, x: Tensor, edge_index: Tensor) -> Tensor:
    """PyG's ``PANConv.forward`` transcribed with torch's own sparse COO tensors (PyG's needs ``torch_sparse``):
    ``M = sum_k (prod_{i<=k} w_i) A^k`` with ``A[i, j] = 1`` for an edge ``j -> i``, the degree of a row its number of
    stored entries, ``M <- D^-1/2 M D^-1/2``, ``out = lin(M x)``. Computed on the whole batch at once."""
    n = x.shape[0]
    adj = torch.sparse_coo_tensor(edge_index.flip(0), torch.ones(edge_index.shape[1]), (n, n)).coalesce()
    tmp = torch.sparse_coo_tensor(torch.arange(n).repeat(2, 1), torch.ones(n), (n, n)).coalesce() * conv.weight[0]
    outs = [tmp]
    for i in range(1, conv.filter_size + 1):
        tmp = torch.sparse.mm(tmp, adj).coalesce() * conv.weight[i]
        outs.append(tmp)
    m = outs[0]
    for out in outs[1:]:
        m = (m + out).coalesce()
    rows = m.indices()[0]
    deg = torch.bincount(rows, minlength=n).to(x.dtype)  # stored entries per row
    dinv = deg.pow(-0.5)
    values = dinv[m.indices()[1]] * m.values() * dinv[rows]
    matrix = torch.sparse_coo_tensor(m.indices(), values, (n, n))
    return conv.lin(torch.sparse.mm(matrix, x))


@pytest.mark.parametrize("filter_size", [1, 2, 3])
@pytest.mark.parametrize("batch_of", [equal_size_batch, ragged_batch], ids=["equal", "ragged"])
def test_pan_equals_pyg_formula_with_its_gradients(filter_size: int, batch_of) -> None:
    edge_index, batch = batch_of()
    x = torch.randn(batch.shape[0], 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    torch.manual_seed(0)
    conv = PANConv(6, 5, filter_size).double()
    with torch.no_grad():
        conv.weight.copy_(torch.linspace(0.3, 0.9, filter_size + 1))  # unequal weights: each power has its own
    ours = conv(x, Graph(edge_index, batch, x.shape[0]))
    ours.pow(2).sum().backward()
    grads = [p.grad.clone() for p in conv.parameters()]
    conv.zero_grad()
    ref = pan_reference(conv, x, edge_index)
    ref.pow(2).sum().backward()
    assert torch.allclose(ours, ref, atol=1e-10)
    for a, p in zip(grads, conv.parameters(), strict=True):
        assert torch.allclose(a, p.grad, atol=1e-9)


# --------------------------------------------------------------------------------------------------- GraphGPS


def _gps(**options: Any) -> torch.nn.Module:
    torch.manual_seed(0)
    return models.build("graphgps", out_dim=8, in_dim=2, width=16, **options).double()


def test_graphgps_attention_never_crosses_graphs_even_in_training() -> None:
    """Per-graph norms and attention masked per graph: changing one graph of the batch leaves the other's outputs
    (training mode, dropout off) exactly as they were, on the padded path (ragged) and the view (equal)."""
    for batch_of in (ragged_batch, equal_size_batch):
        edge_index, batch = batch_of()
        n = batch.shape[0]
        x = torch.randn(n, 2, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
        model = _gps().train()
        first = batch == 0
        out = model(x, edge_index, batch)
        changed = x.clone()
        changed[~first] = torch.randn(int((~first).sum()), 2, dtype=torch.float64)
        out2 = model(changed, edge_index, batch)
        assert torch.allclose(out[first], out2[first], atol=1e-12)
        assert not torch.allclose(out[~first], out2[~first])


def test_graphgps_equal_graphs_are_one_batched_attention_without_padding(monkeypatch) -> None:
    seen: list[tuple[tuple[int, ...], bool]] = []
    real = F.scaled_dot_product_attention

    def spy(q, k, v, attn_mask=None, **kwargs):
        seen.append((tuple(q.shape), attn_mask is not None))
        return real(q, k, v, attn_mask=attn_mask, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    edge_index, batch = equal_size_batch()  # 3 graphs of 8 nodes, in order
    _gps(heads=4)(torch.ones(24, 2, dtype=torch.float64), edge_index, batch)
    assert seen == [((3, 4, 8, 4), False)] * 4  # [graphs, heads, nodes, head dim], one call per layer, no mask
    seen.clear()
    edge_index, batch = ragged_batch()  # 9 and 7 nodes: padded to 9, padding masked out of the keys
    _gps(heads=4)(torch.ones(16, 2, dtype=torch.float64), edge_index, batch)
    assert seen == [((2, 4, 9, 4), True)] * 4


def test_graphgps_padded_path_equals_the_view_path() -> None:
    """The same graphs laid out in order (a view) and shuffled (padded, slots by graph) give the same embeddings."""
    edge_index, batch = equal_size_batch()
    x = torch.randn(24, 2, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    model = _gps().eval()
    perm = torch.randperm(24, generator=torch.Generator().manual_seed(3))
    inverse = torch.argsort(perm)
    with torch.no_grad():
        out = model(x, edge_index, batch)
        shuffled = model(x[perm], inverse[edge_index], batch[perm])
    assert Graph(inverse[edge_index], batch[perm], 24).graph_size is None  # really the padded path
    assert torch.allclose(shuffled, out[perm], atol=1e-10)


def test_graphgps_options_and_errors() -> None:
    model = models.build("graphgps", local="gatedgcn", heads=2, attn_dropout=0.1)
    assert model.heads == 2 and model.local == "gatedgcn" and model.width % 2 == 0
    assert abs(model.num_parameters - 60_000) <= 0.05 * 60_000
    with pytest.raises(GaptuiError, match=r"model 'graphgps': local='gin' is invalid: expected one of gine"):
        models.build("graphgps", local="gin")
    with pytest.raises(GaptuiError, match=r"attn_dropout=1.5 is invalid"):
        models.build("graphgps", attn_dropout=1.5)
    with pytest.raises(GaptuiError, match=r"width=30 is invalid: expected a multiple of 4"):
        models.build("graphgps", width=30)
    assert "local" in models.info("graphgps").options and "attn_dropout" in models.info("graphgps").options


def test_hops_options_change_the_filters() -> None:
    assert len(models.build("tagcn", width=16, hops=5).convs[0].lins) == 6
    assert models.build("sgc", width=16, hops=4).convs[0].K == 4
    assert models.build("pan", width=16, filter_size=3).convs[0].weight.shape == (4,)
    with pytest.raises(GaptuiError, match=r"model 'tagcn': hops=0 is invalid: expected a positive integer"):
        models.build("tagcn", hops=0)


# --------------------------------------------------------------------------------------------------- memory


def test_graphgps_and_pan_declare_their_dense_memory() -> None:
    gps = models.MODELS.get("graphgps")
    options = gps.resolve_options({})
    assert gps.batch_bytes(options, 200, 100) == 2 * 4 * 200 * 4 * 100**2 * 4  # layers x graphs x heads x n^2
    pan = models.MODELS.get("pan")
    assert pan.batch_bytes(pan.resolve_options({}), 200, 100) == (2 + 2 + 2 * 4) * 200 * 100**2 * 4
    assert models.MODELS.get("gcn").batch_bytes(models.MODELS.get("gcn").resolve_options({}), 200, 100) == 0


def test_a_graphgps_grid_that_cannot_fit_is_refused_before_it_starts(monkeypatch) -> None:
    from engine import memory

    monkeypatch.setattr(memory, "machine_memory", lambda: 16 << 30)
    dataset = {"base": "er", "noise": 0.1, "n_train": 100, "n_val": 10, "params": {"n": 2000, "degree": 8}}
    RunSpec(dataset=dataset, model="gcn").check_memory()  # the similarity alone fits
    with pytest.raises(GaptuiError, match=r"graphgps on er needs about .* GB of memory .* lower --batch-size"):
        RunSpec(dataset=dataset, model="graphgps").check_memory()
    need = RunSpec(dataset=dataset, model="graphgps", batch_size=2).model_bytes()
    assert need is not None and need(4, 2000, 8) >= 2 * 4 * 4 * 4 * 2000**2 * 4  # its declared attention scores
    assert RunSpec(dataset=dataset, model="laplacian").model_bytes() is None


# --------------------------------------------------------------------------------------------------- training


def _run_spec(tmp_path: Path, model: str, **extra: Any) -> RunSpec:
    options = {"dropout": 0.1, **({"attn_dropout": 0.1} if model == "graphgps" else {})}
    return RunSpec(
        dataset={"base": "er", "noise": 0.1, "n_train": 30, "n_val": 10, "params": {"n": 16, "degree": 4}},
        model=model,
        model_kwargs=options,
        epochs=2,
        batch_size=10,
        budget=8000,
        out_dim=8,
        device="cpu",
        datasets_dir=str(tmp_path / "datasets"),
        **extra,
    )


def _train(spec: RunSpec, run_dir: Path, should_stop: Any = lambda: False) -> Any:
    ctx = RunContext(run_dir, Events(), lambda _text: None, should_stop)
    return run_steps(AlignmentRun(spec, ctx).steps())


@pytest.mark.parametrize("model", NEW)
def test_resumed_in_the_middle_of_an_epoch_equals_the_uninterrupted_run(tmp_path: Path, model: str) -> None:
    spec = _run_spec(tmp_path, model)
    straight = _train(spec, tmp_path / "straight")
    with pytest.raises(Cancelled):
        _train(spec, tmp_path / "stopped", Stopper(2))
    resumed = _train(spec, tmp_path / "stopped")
    assert resumed.metrics == straight.metrics and math.isfinite(straight.metrics["val_lap_acc"])
    a = torch.load(tmp_path / "straight" / CHECKPOINT, weights_only=True)["model"]
    b = torch.load(tmp_path / "stopped" / CHECKPOINT, weights_only=True)["model"]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("model", NEW)
def test_packed_seeds_equal_separate_runs(tmp_path: Path, in_process, model: str) -> None:  # noqa: F811
    extra = {"attn_dropout": 0.1} if model == "graphgps" else {}
    specs = [spec_file(tmp_path, f"{model}{s}", model=model, seed=s, epochs=1, model_kwargs=extra) for s in (0, 1)]
    for i, spec in enumerate(specs):
        assert in_process([(spec, tmp_path / f"alone{i}")]) == 0
    assert in_process([(spec, tmp_path / f"packed{i}") for i, spec in enumerate(specs)]) == 0
    for i in range(2):
        a, b = result_of(tmp_path / f"packed{i}"), result_of(tmp_path / f"alone{i}")
        assert a["status"] == b["status"] == "done" and a["metrics"] == b["metrics"]
    assert json.dumps(result_of(tmp_path / "alone0")["metrics"]) != json.dumps(
        result_of(tmp_path / "alone1")["metrics"]
    )


def test_every_new_model_learns_alignment_on_small_graphs(tmp_path: Path) -> None:
    """A few epochs on ER(16, 4) at 2 % noise lift every new model well above chance (1/16)."""
    dataset = {"base": "er", "noise": 0.02, "n_train": 60, "n_val": 20, "params": {"n": 16, "degree": 4}}
    for model in NEW:
        spec = RunSpec(
            dataset=dataset,
            model=model,
            epochs=8,
            batch_size=20,
            budget=6000,
            out_dim=16,
            device="cpu",
            datasets_dir=str(tmp_path / "datasets"),
        )
        outcome = _train(spec, tmp_path / model)
        assert outcome.metrics["val_lap_acc"] > 0.25, (model, outcome.metrics)


def test_unit_graph_helpers_cover_a_single_graph() -> None:
    """``batch=None`` (one graph) goes through the same dense layouts."""
    edge_index = random_graph(10, 0.3, seed=5)
    for name in ("pan", "graphgps"):
        torch.manual_seed(0)
        model = models.build(name, out_dim=4, in_dim=2, width=8, heads=2) if name == "graphgps" else None
        model = model or models.build(name, out_dim=4, in_dim=2, width=8)
        x = torch.randn(10, 2)
        out = model.eval()(x, edge_index)
        assert torch.allclose(out, model(x, edge_index, torch.zeros(10, dtype=torch.long)), atol=1e-6)


# --------------------------------------------------------------------------------------------------- presets


def test_zoo_presets_plan_every_model_and_graphgps_with_three_inputs() -> None:
    from engine.tasks import FAMILIES
    from gaptui.presets import grid, load_preset
    from gaptui.workspace import Workspace

    family = FAMILIES.get("alignment")
    for name, sizes in (("zoo", (5000, 500)), ("zoo-smoke", (40, 10)), ("zoo-cpu", (500, 100))):
        preset = load_preset(name)
        specs = grid(preset, Workspace(Path("/tmp/unused")))
        rows = {family.record_axes(s)["model"] for s in specs}
        assert rows == {*models.names(), "graphgps+rwpe:16", "graphgps+lap:8", "laplacian"}, name
        assert {family.record_axes(s)["recipe"] for s in specs if s.model != "laplacian"} == {"gaptui"}
        features = {family.record_axes(s)["model"]: s.features for s in specs if s.model == "graphgps"}
        assert features == {
            "graphgps": "degree",
            "graphgps+rwpe:16": "degree+rwpe:16",
            "graphgps+lap:8": "degree+lap:8",
        }
        assert (specs[0].dataset["n_train"], specs[0].dataset["n_val"]) == sizes
    zoo = load_preset("zoo")
    assert zoo.noise == (0.04, 0.08, 0.12, 0.15) and zoo.seeds == (0, 1, 2) and zoo.size == 14 * 4 * 3 + 4


def _preset_text(models_line: str, extra: str = "") -> str:
    return (
        f'description = "t"\nnoise = [0.1]\nmodels = {models_line}\nseeds = [0]\n'
        f"[run]\nepochs = 1\nbudget = 10000\nout_dim = 16\n{extra}\n"
        '[[datasets]]\nbase = "er"\nparams = { n = 16, degree = 4 }\ntrain = 20\nval = 5\n'
    )


def test_a_model_entry_adds_positional_inputs_to_the_run_features_and_its_options_apply() -> None:
    import tomllib

    from engine.alignment.preset import dump_preset
    from gaptui.presets import grid, parse_preset
    from gaptui.workspace import Workspace

    text = _preset_text('["GraphGPS+LAP:4", "graphgps"]', 'recipe = "ngab"')
    preset = parse_preset(tomllib.loads(text + '[model_options]\ngraphgps = { local = "ggnn" }\n'))
    assert preset.models == ("graphgps+lap:4", "graphgps")
    specs = grid(preset, Workspace(Path("/tmp/unused")))
    ggnn = {"local": "ggnn"}
    assert [(s.features, s.model_kwargs) for s in specs] == [("ones+lap:4", ggnn), ("ones", ggnn)]
    again = parse_preset(tomllib.loads(dump_preset(preset)))
    assert dataclasses_equal(again, preset)


def dataclasses_equal(a: Any, b: Any) -> bool:
    import dataclasses

    return dataclasses.replace(a, path=None) == dataclasses.replace(b, path=None)


@pytest.mark.parametrize(
    ("models_line", "extra", "needle"),
    [
        ('["graphgps+degree"]', "", "'degree' is a base input, set by [run] features or the recipe"),
        ('["graphgps+rwpe:x"]', "", "features 'rwpe:x': K 'x' of 'rwpe' is not a whole number"),
        ('["graphgps+rwpe:16"]', 'features = "degree+rwpe:8"', "'rwpe' appears twice"),
        ('["graphgps+wpe:4"]', "", "unknown kind 'wpe' (did you mean 'rwpe'?)"),
    ],
)
def test_bad_model_entries_are_one_error_naming_the_entry(models_line: str, extra: str, needle: str) -> None:
    import tomllib

    from gaptui.presets import parse_preset

    with pytest.raises(GaptuiError) as error:
        parse_preset(tomllib.loads(_preset_text(models_line, extra)))
    assert "key 'models' value 'graphgps+" in str(error.value) and needle in str(error.value)
    assert "\n" not in str(error.value)


@pytest.mark.e2e
def test_a_bad_model_entry_exits_2_with_one_line_naming_the_file(tmp_path: Path) -> None:

    path = tmp_path / "bad.toml"
    path.write_text(_preset_text('["graphgps+lap:0"]'))
    result = run_cli("run", "--preset", str(path), "--dry-run", "--no-estimate", "-w", str(tmp_path / "ws"))
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and str(path) in lines[0] and "K = 0 of 'lap' is not in 1..64" in lines[0], result.stderr


def test_train_with_positional_features_files_the_row_a_preset_entry_does() -> None:
    from engine.tasks import FAMILIES

    family = FAMILIES.get("alignment")
    dataset = {"base": "er", "noise": 0.1, "params": {"n": 16, "degree": 4}}
    axes = family.record_axes(RunSpec(dataset=dataset, model="graphgps", features="rwpe:16+degree"))
    assert (axes["model"], axes["recipe"]) == ("graphgps+rwpe:16", "gaptui")
    axes = family.record_axes(RunSpec(dataset=dataset, model="ggnn", model_kwargs={"steps": 2}, features="ones"))
    assert (axes["model"], axes["recipe"]) == ("ggnn[steps=2]", "ngab")  # gaptui on ones is ngab


def test_positional_inputs_count_in_the_dataset_memory() -> None:
    from engine.alignment.memory import estimate

    dataset = {"base": "er", "noise": 0.1, "n_train": 1000, "n_val": 100, "params": {"n": 100, "degree": 8}}
    plain = RunSpec(dataset=dataset, model="gcn")
    pe = RunSpec(dataset=dataset, model="gcn", features="degree+rwpe:16+lap:8")
    assert (plain.node_bytes(), pe.node_bytes()) == (0, 2 * 4 * 24)
    canonical = plain.dataset_spec().canonical()
    a, b = estimate(canonical, 100), estimate(canonical, 100, node_bytes=pe.node_bytes())
    assert b.dataset_bytes - a.dataset_bytes == 1100 * 100 * 2 * 4 * 24
