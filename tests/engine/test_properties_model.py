"""Property study models: cycle features, pooling invariance, scores, training and resuming."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from engine.errors import GaptuiError
from engine.properties.backbone import IDGNNFast, cycle_counts
from engine.properties.options import TrainOptions
from engine.properties.poolings import POOLINGS, build_pooling
from engine.properties.scores import POOLING_LABELS, mean_u, r_scores, table2, u_score
from engine.properties.training import (
    LabelledGraphs,
    StudyData,
    evaluate_model,
    load_study_data,
    train_model,
)
from engine.tasks import Cancelled


def _kinds(events: list[str]) -> Callable[..., None]:
    """An emitter recording the kinds of a run's events, but for ``progress`` (where it is, said now and then)."""

    def emit(kind: str, **_fields: Any) -> None:
        if kind != "progress":
            events.append(kind)

    return emit


def test_cycle_features_equal_the_diagonal_of_matrix_powers() -> None:
    rng = np.random.default_rng(0)
    a = rng.random((3, 7, 7)) < 0.4
    feats = cycle_counts(torch.as_tensor(a), k=5).numpy()
    for g in range(3):
        for k in range(1, 6):
            expected = np.diagonal(np.linalg.matrix_power(a[g].astype(np.int64), k))
            assert np.array_equal(feats[g, :, k - 1], expected)
    assert np.array_equal(feats[:, :, 0], np.diagonal(a, axis1=1, axis2=2))  # k = 1 is the raw self-loop


def test_self_loops_reach_the_features() -> None:
    # The same graph with and without self-loops must look different to the model (reflexive vs irreflexive).
    a = torch.zeros(1, 4, 4)
    a[0, 0, 1] = a[0, 1, 2] = 1
    looped = a.clone()
    looped[0, range(4), range(4)] = 1
    assert not torch.equal(cycle_counts(a), cycle_counts(looped))


def test_every_study_pooling_is_registered_with_a_label() -> None:
    assert list(POOLINGS) == list(POOLING_LABELS) and len(POOLING_LABELS) == 11  # the study's 9, then the hybrids


def test_hybrid_is_its_two_parts_weighted_0_6_and_0_4() -> None:
    from torch_geometric.nn import aggr

    from engine.properties.poolings.hybrid import HybridPooling
    from engine.properties.poolings.sopool_attentional import SoPoolAttentional

    torch.manual_seed(0)
    pool, width = build_pooling("hybrid", 8)
    assert width == 8 and isinstance(pool, HybridPooling)
    assert isinstance(pool.attention, aggr.AttentionalAggregation) and isinstance(pool.sopool, SoPoolAttentional)
    assert float(pool.weight.detach()) == pytest.approx(0.6) and not any(p is pool.logit for p in pool.parameters())
    x, index = torch.randn(7, 8), torch.tensor([0, 0, 0, 1, 1, 2, 2])
    with torch.no_grad():
        want = 0.6 * pool.attention(x, index, dim_size=3) + 0.4 * pool.sopool(x, index, dim_size=3)
        assert torch.allclose(pool(x, index, dim_size=3), want, atol=1e-6)


def test_the_learned_hybrid_weight_is_a_sigmoid_bounded_parameter_that_trains() -> None:
    torch.manual_seed(0)
    pool, _ = build_pooling("hybrid_learned", 8)
    assert float(pool.weight.detach()) == pytest.approx(0.6) and any(p is pool.logit for p in pool.parameters())
    opt = torch.optim.SGD([pool.logit], lr=10.0)
    x, index = torch.randn(6, 8), torch.tensor([0, 0, 0, 1, 1, 1])
    for _ in range(5):
        opt.zero_grad()
        pool(x, index, dim_size=2).sum().backward()
        opt.step()
    assert float(pool.weight.detach()) != pytest.approx(0.6) and 0.0 < float(pool.weight.detach()) < 1.0


@pytest.mark.parametrize("pooling", list(POOLING_LABELS))
def test_graph_level_permutation_invariance(pooling: str) -> None:
    torch.manual_seed(0)
    model = IDGNNFast(pooling, hidden=16, layers=2).eval()
    a = (torch.rand(5, 8, 8) < 0.35).float()
    perm = torch.randperm(8)
    permuted = a[:, perm][:, :, perm]
    with torch.no_grad():
        assert torch.allclose(model(a), model(permuted), atol=1e-5)
        # and it is not trivially constant
        assert model(a).std() > 0


def test_user_pooling_by_import_path_and_bad_paths() -> None:
    module, width = build_pooling("engine.properties.poolings.sopool_attentional:SoPoolAttentional", 12)
    assert width == 12 and isinstance(module, torch.nn.Module)
    with pytest.raises(GaptuiError, match="cannot import module 'no_such_module'"):
        build_pooling("no_such_module:Pool", 12)
    with pytest.raises(GaptuiError, match="did you mean 'set2set'"):
        build_pooling("set2se", 12)


def test_u_and_r_scores_by_hand() -> None:
    assert u_score({6: 1.0, 8: 0.5}) == pytest.approx((6 * 1.0 + 8 * 0.5) / 14)
    u = mean_u(
        [
            ("mean", "reflexive", "generalisation", 0.8),
            ("mean", "reflexive", "generalisation", 0.6),  # second seed: mean 0.7
            ("sum", "reflexive", "generalisation", 0.9),
            ("mean", "function", "generalisation", 0.5),
            ("sum", "function", "generalisation", 1.0),
        ]
    )
    assert u[("mean", "reflexive", "generalisation")] == pytest.approx(0.7)
    r = r_scores(u)
    assert r[("mean", "reflexive", "generalisation")] == pytest.approx(0.7 / 0.8)
    assert r[("sum", "function", "generalisation")] == pytest.approx(1.0 / 0.75)
    t2 = table2(r)
    assert t2[("sum", "generalisation")] == pytest.approx((0.9 / 0.8 + 1.0 / 0.75) / 2)


def _tiny_study(tmp_path: Path) -> StudyData:
    return load_study_data("irreflexive", "random", datasets_dir=tmp_path, graphs=200, sizes=3)


def test_training_learns_a_local_property(tmp_path: Path) -> None:
    events: list[tuple[str, dict]] = []
    data = _tiny_study(tmp_path)
    options = TrainOptions(epochs=6, hidden=32)
    model, last = train_model(data.train, "sum", options, 0, lambda e, **f: e == "progress" or events.append((e, f)))
    assert [e for e, _ in events] == ["start"] + ["epoch"] * 6
    assert [f["epoch"] for _, f in events[1:]] == list(range(1, 7))
    assert last["train_acc"] > 0.8
    assert sorted(data.tests) == ["perturb", "random"]
    accuracy = evaluate_model(model, data.tests["random"])
    assert list(accuracy) == [6, 7] and u_score(accuracy) > 0.7


def test_stopped_run_resumes_to_the_same_result(tmp_path: Path) -> None:
    data = _tiny_study(tmp_path)
    options = TrainOptions(epochs=3, hidden=16, layers=2)
    straight = train_model(data.train, "mean", options, 1, lambda *a, **k: None)
    epochs_seen: list[int] = []

    def emit(event: str, **fields: object) -> None:
        if event == "epoch":
            epochs_seen.append(int(fields["epoch"]))  # type: ignore[arg-type]

    with pytest.raises(Cancelled) as stop:
        stop_after_one = lambda: bool(epochs_seen)  # noqa: E731
        train_model(data.train, "mean", options, 1, emit, run_dir=tmp_path, should_stop=stop_after_one)
    assert stop.value.where["epoch"] == 1 and (tmp_path / "checkpoint.pt").exists()
    resumed = train_model(data.train, "mean", options, 1, emit, run_dir=tmp_path)
    assert epochs_seen == [1, 2, 3]
    assert resumed[1] == straight[1]
    for a, b in zip(resumed[0].state_dict().values(), straight[0].state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_trains_on_a_published_folder(tmp_path: Path) -> None:
    from engine.properties.published import write_csv

    rng = np.random.default_rng(0)

    def write(path: Path, n: int) -> None:
        a = rng.random((40, n, n)) < 0.5
        write_csv(path, a, (~np.diagonal(a, axis1=1, axis2=2).any(axis=1)).astype(np.uint8))

    write(tmp_path / "GraphPerturb-Train" / "irreflexive.csv", 4)
    write(tmp_path / "GraphPerturb-Test" / "irreflexive" / "irreflexive_new5.csv", 5)
    write(tmp_path / "GraphPerturb-Test" / "irreflexive" / "irreflexive_new6.csv", 6)
    data = load_study_data("irreflexive", "perturb", datasets_dir=tmp_path / "unused", published=tmp_path)
    assert data.train.n == 4 and [g.n for g in data.tests["perturb"]] == [5, 6]
    model, _ = train_model(data.train, "mean", TrainOptions(epochs=1, hidden=8), 0, lambda *a, **k: None)
    assert list(evaluate_model(model, data.tests["perturb"])) == [5, 6]
    with pytest.raises(GaptuiError, match="file not found"):
        load_study_data("irreflexive", "random", datasets_dir=tmp_path, published=tmp_path)


def test_labelled_graphs_shapes() -> None:
    g = LabelledGraphs(3, np.zeros((2, 3, 3), bool), np.array([0, 1], np.uint8))
    assert g.adjacency.shape[1:] == (g.n, g.n)


def test_study_cells_share_one_training_between_generalisation_and_robustness(tmp_path: Path) -> None:
    from engine.properties.study import cell_datasets, run_cell

    options = TrainOptions(epochs=2, hidden=16, layers=2)
    common = {"datasets_dir": tmp_path, "graphs": 100, "sizes": 3, "negatives": None, "data_seed": 0}
    ckpt = tmp_path / "gen" / "checkpoint.pt"
    ckpt.parent.mkdir()
    events: list[str] = []
    gen = run_cell("symmetric", "mean", "generalisation", 0, options, _kinds(events), checkpoint=ckpt, **common)
    assert events == ["start", "epoch", "epoch", "eval"]
    assert set(gen) == {"u_score", "train_loss", "train_acc", "train_n", "acc_n6", "acc_n7"}
    assert gen["u_score"] == pytest.approx((6 * gen["acc_n6"] + 7 * gen["acc_n7"]) / 13)
    events.clear()
    rob = run_cell("symmetric", "mean", "robustness", 0, options, _kinds(events), trained=ckpt, **common)
    assert events == ["start", "eval"] and set(rob) == set(gen)
    with pytest.raises(GaptuiError, match="tests the model of its generalisation cell"):
        run_cell("symmetric", "mean", "robustness", 0, options, lambda *a, **k: None, **common)
    specs = cell_datasets("symmetric", "robustness", 100, 3, None, 0)
    assert [(s.family, s.n) for s in specs] == [("random", 5), ("perturb", 6), ("perturb", 7)]
