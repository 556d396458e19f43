"""The model registry: shapes, parameter budgets, permutation equivariance, gradients and user models."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn

from engine.errors import GaptuiError
from engine.models import (
    MODELS,
    TOLERANCE,
    ResidualGNN,
    build,
    count_parameters,
    degree_histogram,
    describe,
    info,
    names,
)
from engine.models.budget import MAX_WIDTH, closest_width, parameter_count
from tests.support.engine import random_graph

ALL = names()
#: Mean/attention aggregation of identical neighbours returns that same vector, so on constant input features
#: (the alignment default) these models give every node of a graph the same embedding in exact arithmetic.
STRUCTURE_BLIND = {"sage", "gat", "gatv2"}


def two_graph_batch(seed: int = 0) -> tuple[Tensor, Tensor]:
    """A batch of two disjoint random graphs (9 and 7 nodes): ``edge_index`` and ``batch``."""
    first, second = random_graph(9, 0.4, seed), random_graph(7, 0.5, seed + 1)
    edge_index = torch.cat([first, second + 9], dim=1)
    batch = torch.cat([torch.zeros(9, dtype=torch.long), torch.ones(7, dtype=torch.long)])
    return edge_index, batch


def permute(edge_index: Tensor, batch: Tensor, x: Tensor, perm: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Relabel nodes so new node ``k`` is old node ``perm[k]``; also shuffles the edge order."""
    inverse = torch.empty_like(perm)
    inverse[perm] = torch.arange(perm.numel())
    shuffled = edge_index[:, torch.randperm(edge_index.size(1), generator=torch.Generator().manual_seed(7))]
    return inverse[shuffled], batch[perm], x[perm]


@pytest.fixture(scope="module")
def default_models() -> dict[str, nn.Module]:
    """One model per name at the default budget (building each once keeps the file fast)."""
    torch.manual_seed(0)
    return {name: build(name) for name in ALL}


def test_all_requested_models_registered() -> None:
    assert set(ALL) == {
        "gcn",
        "gin",
        "gatedgcn",
        "ggnn",
        "gat",
        "gatv2",
        "sage",
        "pna",
        "tagcn",
        "sgc",
        "pan",
        "graphgps",
    }
    assert all(isinstance(MODELS.get(name), type) for name in ALL)


@pytest.mark.parametrize("name", ALL)
def test_output_shape(name: str, default_models: dict[str, nn.Module]) -> None:
    edge_index, batch = two_graph_batch()
    out = default_models[name](torch.ones(16, 1), edge_index, batch)
    assert out.shape == (16, 64)
    assert out.dtype == torch.float32
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("name", ALL)
def test_structure_on_constant_features(name: str, default_models: dict[str, nn.Module]) -> None:
    """With x = 1 only the graph structure can separate nodes; document which models can use it.

    Float64, because in float32 GraphNorm of an (exactly) constant signal amplifies rounding noise by
    1/sqrt(eps) ~ 300 per block, which is what a structure-blind model then outputs.
    """
    model = default_models[name].double().eval()
    edge_index, batch = two_graph_batch()
    try:
        with torch.no_grad():
            out = model(torch.ones(16, 1, dtype=torch.float64), edge_index, batch)
    finally:
        model.float()
    spread = max(out[:9].std(dim=0).max().item(), out[9:].std(dim=0).max().item())
    if name in STRUCTURE_BLIND:
        assert spread < 1e-4
    else:
        assert spread > 1e-2


@pytest.mark.parametrize("name", ALL)
def test_other_dims_and_single_graph_without_batch(name: str) -> None:
    model = build(name, out_dim=32, in_dim=3, budget=20_000)
    x = torch.randn(11, 3)
    edge_index = random_graph(11, 0.3, seed=3)
    out = model(x, edge_index, None)
    assert out.shape == (11, 32)
    assert torch.allclose(out, model(x, edge_index, torch.zeros(11, dtype=torch.long)))


@pytest.mark.parametrize("budget", [60_000, 20_000])
@pytest.mark.parametrize("name", ALL)
def test_parameter_count_meets_budget(name: str, budget: int) -> None:
    model = build(name, budget=budget)
    assert isinstance(model, ResidualGNN)
    count = count_parameters(model)
    assert model.num_parameters == count
    assert abs(count - budget) <= TOLERANCE * budget, (name, model.width, count)


@pytest.mark.parametrize("name", ALL)
def test_parameter_count_meets_budget_at_out_dim_32(name: str) -> None:
    count = count_parameters(build(name, out_dim=32))
    assert abs(count - 60_000) <= TOLERANCE * 60_000


@pytest.mark.parametrize("name", ALL)
def test_permutation_equivariance(name: str, default_models: dict[str, nn.Module]) -> None:
    """Theorem A.1 (2): relabelling the input nodes relabels the output rows the same way."""
    model = default_models[name].double().eval()
    gen = torch.Generator().manual_seed(1)
    cases = [
        (random_graph(12, 0.35, seed=5), torch.zeros(12, dtype=torch.long)),  # one graph
        two_graph_batch(seed=11),  # two graphs; the permutation mixes their nodes
    ]
    try:
        for edge_index, batch in cases:
            n = batch.numel()
            x = torch.rand(n, 1, generator=gen, dtype=torch.float64) + 0.5
            perm = torch.randperm(n, generator=gen)
            with torch.no_grad():
                out = model(x, edge_index, batch)
                out_perm = model(*_reorder(permute(edge_index, batch, x, perm)))
            assert torch.allclose(out_perm, out[perm], atol=1e-9, rtol=1e-7)
    finally:
        model.float()


def _reorder(args: tuple[Tensor, Tensor, Tensor]) -> tuple[Tensor, Tensor, Tensor]:
    edge_index, batch, x = args
    return x, edge_index, batch


@pytest.mark.parametrize("name", ALL)
def test_graphs_in_a_batch_do_not_interact(name: str, default_models: dict[str, nn.Module]) -> None:
    """Per-graph GraphNorm: a graph's embedding is the same alone or batched with another graph."""
    model = default_models[name].double().eval()
    edge_index, batch = two_graph_batch(seed=4)
    # Random features (on constant ones the structure-blind models output amplified rounding noise), and
    # float64 so that a different summation order cannot hide or fake a difference.
    x = torch.rand(16, 1, generator=torch.Generator().manual_seed(0), dtype=torch.float64) + 0.5
    try:
        with torch.no_grad():
            together = model(x, edge_index, batch)
            first_alone = model(x[:9], edge_index[:, edge_index[0] < 9], batch[:9])
    finally:
        model.float()
    assert torch.allclose(together[:9], first_alone, atol=1e-9, rtol=1e-7)


@pytest.mark.parametrize("name", ALL)
def test_eval_is_deterministic(name: str, default_models: dict[str, nn.Module]) -> None:
    model = default_models[name].eval()
    edge_index, batch = two_graph_batch(seed=2)
    x = torch.ones(16, 1)
    with torch.no_grad():
        assert torch.equal(model(x, edge_index, batch), model(x, edge_index, batch))


@pytest.mark.parametrize("name", ALL)
def test_gradients_reach_every_parameter(name: str) -> None:
    torch.manual_seed(0)
    model = build(name, budget=20_000).train()
    edge_index, batch = two_graph_batch(seed=6)
    x = torch.rand(16, 1) + 0.5
    out = model(x, edge_index, batch)
    # An alignment-like loss: cross-entropy of the similarity of graph 0 to itself against the identity.
    sim = out[:9] @ out[:9].T
    loss = nn.functional.cross_entropy(sim, torch.arange(9))
    loss.backward()
    for pname, param in model.named_parameters():
        assert param.grad is not None, pname
        assert torch.isfinite(param.grad).all(), pname
        assert param.grad.abs().sum() > 0, pname


@pytest.mark.parametrize("name", ALL)
def test_seeded_build_is_reproducible_and_search_leaves_rng_alone(name: str) -> None:
    # A fresh budget (not built elsewhere in this file) so the first build runs the search, the second not.
    torch.manual_seed(123)
    first = build(name, budget=33_333)
    torch.manual_seed(123)
    second = build(name, budget=33_333)
    for (key, a), (_, b) in zip(first.state_dict().items(), second.state_dict().items(), strict=True):
        assert torch.equal(a, b), key


@pytest.mark.parametrize(("name", "options"), [("gcn", {}), ("gat", {"heads": 8}), ("pna", {"towers": 2})])
@pytest.mark.parametrize("budget", [3_000, 17_777, 41_000])
def test_width_search_matches_exhaustive_search(name: str, options: dict, budget: int) -> None:
    cls = MODELS.get(name)
    resolved = cls.resolve_options(options)
    step = cls.width_multiple(resolved)
    exhaustive = []
    for width in range(step, MAX_WIDTH, step):
        exhaustive.append((width, parameter_count(cls, width, 64, 1, resolved)))
        if exhaustive[-1][1] > budget:  # counts only grow from here on
            break
    # Smallest distance to the budget, ties to the smaller width (the list is in increasing width).
    best = min(exhaustive, key=lambda wc: abs(wc[1] - budget))
    assert closest_width(cls, 64, 1, budget, resolved) == best


def test_dropout_only_in_training() -> None:
    model = build("gin", dropout=0.5)
    edge_index, batch = two_graph_batch()
    x = torch.ones(16, 1)
    model.train()
    assert not torch.equal(model(x, edge_index, batch), model(x, edge_index, batch))
    model.eval()
    assert torch.equal(model(x, edge_index, batch), model(x, edge_index, batch))


def test_reset_parameters_redraws_weights() -> None:
    model = build("gcn")
    before = [p.detach().clone() for p in model.parameters()]
    model.reset_parameters()
    after = list(model.parameters())
    assert count_parameters(model) == model.num_parameters
    assert any(not torch.equal(a, b) for a, b in zip(before, after, strict=True))


def test_width_overrides_budget_and_layers_option() -> None:
    model = build("gcn", width=32, budget=1_000_000, layers=2)
    assert model.width == 32 and model.layers == 2 and len(model.convs) == 2
    # Input projection, 2 x (GCNConv + GraphNorm), readout.
    assert model.num_parameters == 2 * 32 + 2 * (32 * 32 + 32 + 3 * 32) + 32 * 64 + 64
    shallow = build("gin", layers=2)
    assert len(shallow.convs) == 2 and abs(shallow.num_parameters - 60_000) <= 3_000


def test_attention_heads() -> None:
    gat = build("gat")
    assert gat.heads == 8 and gat.width % 8 == 0
    four = build("gatv2", heads=4)
    assert four.heads == 4 and four.width % 4 == 0
    assert abs(four.num_parameters - 60_000) <= 3_000
    # When 8 heads cannot meet the budget the search may use fewer, but always divides the width.
    for budget in (20_000, 33_333, 45_000):
        model = build("gatv2", budget=budget)
        assert model.width % model.heads == 0 and 1 <= model.heads <= 8
        assert abs(model.num_parameters - budget) <= TOLERANCE * budget


def test_pna_degree_histogram() -> None:
    edge_index = random_graph(30, 0.2, seed=9)
    deg = degree_histogram(edge_index, 30)
    assert int(deg.sum()) == 30
    assert int((deg * torch.arange(deg.numel())).sum()) == edge_index.size(1)
    model = build("pna", deg=deg)
    assert torch.equal(model.deg, deg.float())
    assert build("pna", deg=deg.tolist()).width == model.width
    assert model(torch.ones(30, 1), edge_index, None).shape == (30, 64)


def test_unknown_model_suggests_a_name() -> None:
    with pytest.raises(GaptuiError, match="did you mean 'gcn'"):
        build("gcm")
    with pytest.raises(GaptuiError, match="did you mean 'gatv2'"):
        info("gatv3")


@pytest.mark.parametrize(
    ("name", "kwargs", "fragments"),
    [
        ("gcn", {"layers": 0}, ["gcn", "layers=0"]),
        ("gin", {"layers": "4"}, ["gin", "layers='4'"]),
        ("sage", {"width": -3}, ["sage", "width=-3"]),
        ("gcn", {"dropout": 1.5}, ["gcn", "dropout=1.5"]),
        ("gcn", {"layer": 3}, ["gcn", "'layer'", "did you mean 'layers'"]),
        ("gat", {"heads": 0}, ["gat", "heads=0"]),
        ("gat", {"width": 100}, ["gat", "width=100", "multiple of 8"]),
        ("gin", {"train_eps": "yes"}, ["gin", "train_eps='yes'"]),
        ("pna", {"deg": [1, -2, 3]}, ["pna", "deg="]),
        ("pna", {"towers": 3, "width": 64}, ["pna", "width=64", "multiple of 3"]),
        ("ggnn", {"heads": 8}, ["ggnn", "'heads'"]),
        ("gcn", {"out_dim": 0}, ["gcn", "out_dim=0"]),
        ("gcn", {"budget": 12.5}, ["gcn", "budget=12.5"]),
    ],
)
def test_bad_options_name_model_key_and_value(name: str, kwargs: dict, fragments: list[str]) -> None:
    with pytest.raises(GaptuiError) as err:
        build(name, **kwargs)
    for fragment in fragments:
        assert fragment in str(err.value)


def test_unreachable_budget_is_a_user_error() -> None:
    # GCN at width 4 has 456 parameters and at width 5 has 574: neither is within 5% of 500.
    with pytest.raises(GaptuiError, match="no width gives 500 trainable parameters"):
        build("gcn", budget=500)
    with pytest.raises(GaptuiError, match="heads=8"):
        build("gat", budget=20_000, heads=8)


def test_user_model_by_import_path() -> None:
    model = build("tests.support.models:TinyGNN", out_dim=16, budget=1234, in_dim=2, hidden=5)
    assert model.budget == 1234 and model.conv.out_channels == 5
    edge_index, batch = two_graph_batch()
    assert model(torch.ones(16, 2), edge_index, batch).shape == (16, 16)
    assert model.training  # the contract check must not leave it in eval mode
    factory = build("tests.support.models:make_tiny", out_dim=4)
    assert factory(torch.ones(16, 1), edge_index, batch).shape == (16, 4)


@pytest.mark.parametrize(
    ("path", "kwargs", "match"),
    [
        ("tests.support.models:not_a_module", {}, "returned a dict, expected a torch.nn.Module"),
        ("tests.support.models:WrongShape", {}, r"expected a tensor of shape \(5, 64\)"),
        ("tests.support.models:NOT_CALLABLE", {}, "not a class or function"),
        ("tests.support.models:TinyGNN", {"colour": "red"}, "could not be called with keywords"),
        ("tests.support.models:Missing", {}, "has no attribute 'Missing'"),
        ("tests.no_such_module:Model", {}, "cannot import module"),
    ],
)
def test_user_model_contract_violations(path: str, kwargs: dict, match: str) -> None:
    with pytest.raises(GaptuiError, match=match):
        build(path, **kwargs)


def test_descriptions_and_options() -> None:
    for name in ALL:
        assert describe(name)
        assert info(name).doc
        assert {"layers", "width", "dropout"} <= set(info(name).options)
    assert "heads" in info("gat").options and "deg" in info("pna").options
    assert describe("GCN") == describe("gcn")
